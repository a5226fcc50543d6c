{{- define "flotilla.hub.rbacControllers" }}
{{- /*
The cluster-wide rights of each controller: exactly what its reconcilers use today.
*/ -}}
{{- $rules := dict }}
{{- /* Registration makes each accepted pull member's namespace and agent RBAC, and deletes the
       namespace (with its Works) when the Cluster goes. It cannot touch a Work: the syncers leave
       the member objects of Works deleted with their namespace in place. RBAC cannot
       restrict create by name, so the admission policy <release>-registration narrows these
       rights to flotilla-cluster-* namespaces and the agents' own bindings and roles; "bind" on
       the static agent ClusterRole replaces holding the rights in it. */}}
{{- $agentRole := include "flotilla.clusterRoleName" (dict "root" $ "controller" "agent") }}
{{- $syncerDataRole := include "flotilla.clusterRoleName" (dict "root" $ "controller" "syncer-work-data") }}
{{- $_ := set $rules "registration" (list
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "clusters") "verbs" (list "get" "list" "watch" "patch" "update"))
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "clusters/status") "verbs" (list "get" "patch" "update"))
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "clusters/finalizers") "verbs" (list "update"))
  (dict "apiGroups" (list "") "resources" (list "namespaces") "verbs" (list "get" "create" "patch" "delete"))
  (dict "apiGroups" (list "rbac.authorization.k8s.io") "resources" (list "rolebindings" "clusterroles" "clusterrolebindings") "verbs" (list "get" "create" "patch" "delete"))
  (dict "apiGroups" (list "rbac.authorization.k8s.io") "resources" (list "roles") "verbs" (list "delete"))
  (dict "apiGroups" (list "rbac.authorization.k8s.io") "resources" (list "clusterroles") "resourceNames" (list $agentRole $syncerDataRole) "verbs" (list "bind"))
  (dict "apiGroups" (list "coordination.k8s.io") "resources" (list "leases") "verbs" (list "get"))
  (dict "apiGroups" (list "certificates.k8s.io") "resources" (list "certificatesigningrequests") "verbs" (list "get" "list" "watch"))
  (dict "apiGroups" (list "certificates.k8s.io") "resources" (list "certificatesigningrequests/approval") "verbs" (list "update"))
  (dict "apiGroups" (list "certificates.k8s.io") "resources" (list "signers") "resourceNames" (list "kubernetes.io/kube-apiserver-client") "verbs" (list "approve"))
) }}
{{- /* The syncer reads a deleted Work's namespace: a Work deleted with its namespace leaves its
       member objects in place. */}}
{{- $_ := set $rules "syncer" (list
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "works") "verbs" (list "get" "list" "watch" "patch" "update"))
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "works/status") "verbs" (list "get" "patch" "update"))
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "works/finalizers") "verbs" (list "update"))
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "clusters") "verbs" (list "get" "list" "watch"))
  (dict "apiGroups" (list "") "resources" (list "namespaces") "verbs" (list "get"))
) }}
{{- /* The splitter reads every kind of the interpreter's table of kinds
       (controllers/interpreter/src/table.rs: what an empty resourceSelectors places) and writes
       the status of those whose status it shows on the hub; the e2e test
       chart::the_chart_lints_and_renders_every_controller keeps these rules in step with it.
       The splitter creates pods only with dryRun=All, and only in its Pod Security check
       namespaces (_hub-pod-security.tpl): the hub's Pod Security admission judges a Pod built
       from each placed workload's pod template before it is placed. The hub runs no pods (it
       has no nodes), and RBAC cannot tell a dry run from a create.
       It writes Secrets only to hold the data of the Secrets its Works place, in the
       flotilla-cluster-* namespaces, and deletes one left without its Work once its Placement
       is gone (admission policy <release>-splitter). It deletes Works: those its Placements no
       longer place, and those of deleted Placements after --orphaned-work-grace. */}}
{{- $_ := set $rules "splitter" (list
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "placements" "clusterplacements") "verbs" (list "get" "list" "watch"))
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "placements/status" "clusterplacements/status") "verbs" (list "get" "patch" "update"))
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "works") "verbs" (list "get" "list" "watch" "create" "patch" "update" "delete"))
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "clusters") "verbs" (list "get" "list" "watch"))
  (dict "apiGroups" (list "apiextensions.k8s.io") "resources" (list "customresourcedefinitions") "verbs" (list "get" "list" "watch"))
  (dict "apiGroups" (list "rbac.authorization.k8s.io") "resources" (list "clusterroles" "clusterrolebindings" "roles" "rolebindings") "verbs" (list "get" "list" "watch"))
  (dict "apiGroups" (list "apps") "resources" (list "deployments" "statefulsets" "daemonsets" "replicasets") "verbs" (list "get" "list" "watch"))
  (dict "apiGroups" (list "apps") "resources" (list "deployments/status" "statefulsets/status" "daemonsets/status") "verbs" (list "get" "patch" "update"))
  (dict "apiGroups" (list "apps") "resources" (list "replicasets") "verbs" (list "create" "patch" "delete"))
  (dict "apiGroups" (list "apps") "resources" (list "controllerrevisions") "verbs" (list "get" "list" "create" "patch" "delete"))
  (dict "apiGroups" (list "apps") "resources" (list "replicasets/status") "verbs" (list "get" "patch"))
  (dict "apiGroups" (list "") "resources" (list "configmaps" "secrets" "services" "serviceaccounts" "limitranges" "resourcequotas") "verbs" (list "get" "list" "watch"))
  (dict "apiGroups" (list "") "resources" (list "secrets") "verbs" (list "create" "patch" "delete"))
  (dict "apiGroups" (list "batch") "resources" (list "jobs" "cronjobs") "verbs" (list "get" "list" "watch"))
  (dict "apiGroups" (list "batch") "resources" (list "jobs/status" "cronjobs/status") "verbs" (list "get" "patch" "update"))
  (dict "apiGroups" (list "") "resources" (list "namespaces") "verbs" (list "get" "list" "watch"))
  (dict "apiGroups" (list "") "resources" (list "persistentvolumeclaims") "verbs" (list "get" "list" "watch"))
  (dict "apiGroups" (list "") "resources" (list "services/status" "persistentvolumeclaims/status") "verbs" (list "get" "patch"))
  (dict "apiGroups" (list "policy") "resources" (list "poddisruptionbudgets") "verbs" (list "get" "list" "watch"))
  (dict "apiGroups" (list "autoscaling") "resources" (list "horizontalpodautoscalers") "verbs" (list "get" "list" "watch"))
  (dict "apiGroups" (list "networking.k8s.io") "resources" (list "ingresses" "networkpolicies" "ingressclasses") "verbs" (list "get" "list" "watch"))
  (dict "apiGroups" (list "scheduling.k8s.io") "resources" (list "priorityclasses") "verbs" (list "get" "list" "watch"))
  (dict "apiGroups" (list "storage.k8s.io") "resources" (list "storageclasses") "verbs" (list "get" "list" "watch"))
  (dict "apiGroups" (list "networking.k8s.io") "resources" (list "ingresses/status") "verbs" (list "get" "patch"))
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "apiresourceimports") "verbs" (list "get" "list" "watch"))
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "workloadprofiles") "verbs" (list "get" "list" "watch"))
) }}
{{- /* The negotiator keeps, in each pull member's namespace, the ConfigMap flotilla-import-types
       listing the types the member's importer imports (the importer may not read Placements).
       It reads and applies that one name; RBAC cannot restrict create by name, so the admission
       policy <release>-negotiator-configmaps refuses any other ConfigMap, and any outside the
       flotilla-cluster-* namespaces. */}}
{{- $_ := set $rules "negotiator" (list
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "negotiatedapiresources") "verbs" (list "get" "list" "watch" "create" "patch"))
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "negotiatedapiresources/status") "verbs" (list "get" "patch"))
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "apiresourceimports") "verbs" (list "get" "list" "watch" "create" "patch" "delete"))
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "apiresourceimports/status") "verbs" (list "get" "patch"))
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "clusters") "verbs" (list "get" "list" "watch"))
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "clusters/status") "verbs" (list "get" "patch"))
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "placements") "verbs" (list "list" "watch"))
  (dict "apiGroups" (list "apiextensions.k8s.io") "resources" (list "customresourcedefinitions") "verbs" (list "get" "list" "watch" "create" "patch"))
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "workloadprofiles") "verbs" (list "get" "list" "watch"))
  (dict "apiGroups" (list "flotilla.dev") "resources" (list "workloadprofiles/status") "verbs" (list "get" "patch"))
  (dict "apiGroups" (list "") "resources" (list "configmaps") "resourceNames" (list "flotilla-import-types") "verbs" (list "get" "patch"))
  (dict "apiGroups" (list "") "resources" (list "configmaps") "verbs" (list "create"))
) }}
{{- range $controller := list "registration" "syncer" "splitter" "negotiator" }}
{{- if (index $.Values $controller).enabled }}
{{- $name := include "flotilla.clusterRoleName" (dict "root" $ "controller" $controller) }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $name }}
  labels:
    {{- include "flotilla.labels" $ | nindent 4 }}
rules:
  {{- toYaml (index $rules $controller) | nindent 2 }}
  {{- with (index $.Values $controller).extraRules }}
  # More rules from the values (e.g. custom types for the splitter to read).
  {{- toYaml . | nindent 2 }}
  {{- end }}
  # Events on the objects users look at.
  - apiGroups: [events.k8s.io]
    resources: [events]
    verbs: [create, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $name }}
  labels:
    {{- include "flotilla.labels" $ | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ include "flotilla.name" (dict "root" $ "controller" $controller) }}
    namespace: {{ $.Release.Namespace }}
{{- end }}
{{- end }}
{{- if .Values.syncer.enabled }}
{{- /* The data of the Secrets the hub syncer places: registration binds this in the namespace
       flotilla-cluster-<name> of each accepted push-mode member only (RBAC cannot grant by
       namespace prefix; a cluster-wide read would give the syncer every tenant's Secrets). */}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ include "flotilla.clusterRoleName" (dict "root" $ "controller" "syncer-work-data") }}
  labels:
    {{- include "flotilla.labels" $ | nindent 4 }}
    app.kubernetes.io/component: syncer
rules:
  # Only the Secret a Work names (never listed or watched).
  - apiGroups: [""]
    resources: ["secrets"]
    verbs: ["get"]
{{- end }}
{{- if .Values.registration.enabled }}
{{- /* What a pull-mode agent may do on the hub (deploy/bootstrap/agent-clusterrole.yaml says the
       same for hubs without the chart). The first is bound by registration in each accepted
       member's namespace only; the second lets every agent renew its certificate. */}}
{{- $agentRole := include "flotilla.clusterRoleName" (dict "root" $ "controller" "agent") }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $agentRole }}
  labels:
    {{- include "flotilla.labels" $ | nindent 4 }}
    app.kubernetes.io/component: agent
rules:
  # patch/update: only the syncer's finalizer (admission policy <release>-agent-works).
  - apiGroups: ["flotilla.dev"]
    resources: ["works"]
    verbs: ["get", "list", "watch", "patch", "update"]
  - apiGroups: ["flotilla.dev"]
    resources: ["works/status"]
    verbs: ["get", "update", "patch"]
  - apiGroups: ["flotilla.dev"]
    resources: ["apiresourceimports"]
    verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
  - apiGroups: ["flotilla.dev"]
    resources: ["apiresourceimports/status"]
    verbs: ["get", "patch"]
  # The data of the Secrets its Works place (never listed: only the Secret a Work names).
  - apiGroups: [""]
    resources: ["secrets"]
    verbs: ["get"]
  # The list of types its importer imports, kept by the negotiator (that one ConfigMap, get only).
  - apiGroups: [""]
    resources: ["configmaps"]
    resourceNames: ["flotilla-import-types"]
    verbs: ["get"]
  - apiGroups: ["events.k8s.io"]
    resources: ["events"]
    verbs: ["create", "patch"]
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["create"]
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    resourceNames: ["flotilla-agent"]
    verbs: ["get", "update", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $agentRole }}-certificates
  labels:
    {{- include "flotilla.labels" $ | nindent 4 }}
    app.kubernetes.io/component: agent
rules:
  - apiGroups: ["certificates.k8s.io"]
    resources: ["certificatesigningrequests"]
    verbs: ["create", "get", "list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $agentRole }}-certificates
  labels:
    {{- include "flotilla.labels" $ | nindent 4 }}
    app.kubernetes.io/component: agent
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $agentRole }}-certificates
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: Group
    name: system:flotilla:agents
{{- end }}
{{- end }}
