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
  {{- if has $controller (list "registration" "syncer" "negotiator") }}
  # Kubeconfig Secrets of push-mode members, kept in the release namespace.
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
