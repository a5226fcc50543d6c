{{/* Common labels. */}}
{{- define "flotilla.labels" -}}
app.kubernetes.io/name: flotilla
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The name of a controller's objects: <release>-<controller>. */}}
{{- define "flotilla.name" -}}
{{- printf "%s-%s" .root.Release.Name .controller | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The cluster-scoped name of a controller's RBAC: flotilla:<release>:<controller>. */}}
{{- define "flotilla.clusterRoleName" -}}
{{- printf "flotilla:%s:%s" .root.Release.Name .controller -}}
{{- end -}}

{{- define "flotilla.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* "true" when .controller is the syncer and it shares the members by Lease (syncer.shardByCluster). */}}
{{- define "flotilla.shardedSyncer" -}}
{{- if and (eq .controller "syncer") .root.Values.syncer.shardByCluster -}}true{{- end -}}
{{- end -}}
