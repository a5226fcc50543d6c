{{- define "flotilla.hub.rbacCommon" }}
{{- /*
Rights every controller needs in the release namespace: its leader-election Lease.
Each controller's cluster-wide rights are in rbac-<controller>.yaml.
*/ -}}
{{- range $controller := list "registration" "syncer" "splitter" "negotiator" }}
{{- if (index $.Values $controller).enabled }}
{{- $name := include "flotilla.name" (dict "root" $ "controller" $controller) }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $name }}
  namespace: {{ $.Release.Namespace }}
  labels:
    {{- include "flotilla.labels" $ | nindent 4 }}
rules:
  # Leader election. RBAC cannot restrict create by name.
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [create]
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    resourceNames: [{{ printf "flotilla-%s" $controller | quote }}]
    verbs: [get, update, patch]
  {{- if include "flotilla.shardedSyncer" (dict "root" $ "controller" $controller) }}
  # Sharding (syncer.shardByCluster): one Lease per member cluster and one presence Lease per
  # replica, named after clusters and replicas, so not restricted by name; list finds the replicas.
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [get, list, update]
  {{- end }}
  {{- if or (eq $controller "syncer") (and $.Values.memberCredentials.readWritableKubeconfigs (has $controller (list "registration" "negotiator"))) }}
  # The writable kubeconfig Secrets of push-mode members, kept in the release namespace.
  - apiGroups: [""]
    resources: [secrets]
    verbs: [get]
  {{- end }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}
  namespace: {{ $.Release.Namespace }}
  labels:
    {{- include "flotilla.labels" $ | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ $name }}
    namespace: {{ $.Release.Namespace }}
{{- end }}
{{- end }}
{{- /* Registration and the negotiator read the read-only member kubeconfigs, in their own
       namespace, and no other Secret (memberCredentials). */}}
{{- $readers := include "flotilla.readersNamespace" $ }}
{{- if eq (include "flotilla.hubMode" $) "inCluster" }}
---
apiVersion: v1
kind: Namespace
metadata:
  name: {{ $readers }}
  labels:
    {{- include "flotilla.labels" $ | nindent 4 }}
  annotations:
    # Uninstalling keeps the members' read-only kubeconfigs.
    helm.sh/resource-policy: keep
{{- end }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ include "flotilla.name" (dict "root" $ "controller" "member-readers") }}
  namespace: {{ $readers }}
  labels:
    {{- include "flotilla.labels" $ | nindent 4 }}
rules:
  - apiGroups: [""]
    resources: [secrets]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ include "flotilla.name" (dict "root" $ "controller" "member-readers") }}
  namespace: {{ $readers }}
  labels:
    {{- include "flotilla.labels" $ | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ include "flotilla.name" (dict "root" $ "controller" "member-readers") }}
subjects:
  {{- range $controller := list "registration" "negotiator" }}
  {{- if (index $.Values $controller).enabled }}
  - kind: ServiceAccount
    name: {{ include "flotilla.name" (dict "root" $ "controller" $controller) }}
    namespace: {{ $.Release.Namespace }}
  {{- end }}
  {{- end }}
{{- if eq (include "flotilla.hubMode" $) "embedded" }}
{{- /* The embedded hub's admin: only the user of the current generation of its expiring client
       certificate (hub.adminCredential), so a rotated certificate keeps no right. */}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ include "flotilla.clusterRoleName" (dict "root" $ "controller" "hub-admin") }}
  labels:
    {{- include "flotilla.labels" $ | nindent 4 }}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: {{ include "flotilla.hubAdminUser" $ }}}
{{- end }}
{{- end }}
