{{- define "flotilla.hub.serviceaccounts" }}
{{- range $controller := list "registration" "syncer" "splitter" "negotiator" }}
{{- if (index $.Values $controller).enabled }}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "flotilla.name" (dict "root" $ "controller" $controller) }}
  namespace: {{ $.Release.Namespace }}
  labels:
    {{- include "flotilla.labels" $ | nindent 4 }}
    app.kubernetes.io/component: {{ $controller }}
{{- end }}
{{- end }}
{{- end }}
