{{- define "flotilla.hub.csrApproval" }}
{{- /*
The certificate approval webhook on the hub: its identity (it reads Clusters, nothing else) and
the ValidatingWebhookConfiguration through which the hub's apiserver asks it before
registration's approval of a certificate request is stored. Only registration's approvals go to
it (matchConditions); if it cannot answer, the approval is refused (failurePolicy: Fail) and
registration tries again: an agent waits, nothing is approved unchecked.
*/ -}}
{{- if include "flotilla.csrApprovalEnabled" . }}
{{- include "flotilla.csrApprovalTls" . }}
{{- $tls := index .Values "__flotillaCsrApprovalTls" }}
{{- $name := include "flotilla.name" (dict "root" . "controller" "csr-approval") }}
{{- $role := include "flotilla.clusterRoleName" (dict "root" . "controller" "csr-approval") }}
{{- $values := .Values.registration.approvalWebhook }}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ $name }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
    app.kubernetes.io/component: csr-approval
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $role }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
rules:
  - apiGroups: [flotilla.dev]
    resources: [clusters]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $role }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $role }}
subjects:
  - kind: ServiceAccount
    name: {{ $name }}
    namespace: {{ .Release.Namespace }}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: {{ $name }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
    app.kubernetes.io/component: csr-approval
webhooks:
  - name: csr-approval.{{ .Release.Name }}.{{ .Release.Namespace }}.flotilla.dev
    admissionReviewVersions: [v1]
    sideEffects: None
    failurePolicy: Fail
    timeoutSeconds: 5
    rules:
      - apiGroups: [certificates.k8s.io]
        apiVersions: ["*"]
        operations: [UPDATE]
        resources: [certificatesigningrequests/approval]
        scope: "*"
    matchConditions:
      - name: registration-identity
        expression: request.userInfo.username == {{ printf "system:serviceaccount:%s:%s" .Release.Namespace (include "flotilla.name" (dict "root" . "controller" "registration")) | quote }}
    clientConfig:
      caBundle: {{ get $tls "ca.crt" | b64enc }}
      {{- if eq (include "flotilla.hubMode" .) "inCluster" }}
      service:
        namespace: {{ .Release.Namespace }}
        name: {{ $name }}
        port: 443
        path: /csr-approval
      {{- else if .Values.hostNetwork }}
      # The embedded hub's apiserver and the webhook share the node's network.
      url: https://127.0.0.1:{{ $values.port }}/csr-approval
      {{- else }}
      # The embedded hub's apiserver reaches the webhook's Service through this cluster's DNS.
      url: https://{{ $name }}.{{ .Release.Namespace }}.svc/csr-approval
      {{- end }}
{{- end }}
{{- end }}
