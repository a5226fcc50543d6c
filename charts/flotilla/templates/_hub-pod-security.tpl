{{/* The default Pod Security level (podSecurity.defaultLevel), checked. */}}
{{- define "flotilla.podSecurityLevel" -}}
{{- $level := .Values.podSecurity.defaultLevel | default "baseline" -}}
{{- if not (has $level (list "privileged" "baseline" "restricted")) -}}
{{- fail (printf "podSecurity.defaultLevel: %q is not a Pod Security level; use privileged, baseline or restricted" $level) -}}
{{- end -}}
{{- $level -}}
{{- end -}}

{{/* The prefix of the splitter's Pod Security check namespaces: <prefix><level>. */}}
{{- define "flotilla.podSecurityPrefix" -}}
{{- printf "%s-pod-security-" .Release.Name -}}
{{- end -}}

{{- /* Where the splitter asks the hub's Pod Security admission about the pods of a workload
       before it places it (controllers/splitter/src/pod_security.rs): one namespace per level
       that judges anything (baseline, restricted), enforcing it, with a Role that lets the
       splitter create Pods there and nowhere else. The splitter creates them only as a dry run
       (admission policy <release>-splitter). Nothing else lives in them, so nothing a tenant
       keeps in its own namespace (LimitRanges, quotas, ServiceAccounts) takes part. */}}
{{- define "flotilla.hub.podSecurity" }}
{{- if .Values.splitter.enabled }}
{{- $splitter := include "flotilla.name" (dict "root" . "controller" "splitter") }}
{{- range $level := list "baseline" "restricted" }}
{{- $ns := printf "%s%s" (include "flotilla.podSecurityPrefix" $) $level }}
---
apiVersion: v1
kind: Namespace
metadata:
  name: {{ $ns }}
  labels:
    {{- include "flotilla.labels" $ | nindent 4 }}
    app.kubernetes.io/component: splitter
    pod-security.kubernetes.io/enforce: {{ $level }}
    pod-security.kubernetes.io/enforce-version: latest
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $splitter }}-pod-security
  namespace: {{ $ns }}
  labels:
    {{- include "flotilla.labels" $ | nindent 4 }}
    app.kubernetes.io/component: splitter
rules:
  - apiGroups: [""]
    resources: [pods]
    verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $splitter }}-pod-security
  namespace: {{ $ns }}
  labels:
    {{- include "flotilla.labels" $ | nindent 4 }}
    app.kubernetes.io/component: splitter
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: {{ $splitter }}-pod-security}
subjects:
  - {kind: ServiceAccount, name: {{ $splitter }}, namespace: {{ $.Release.Namespace }}}
{{- end }}
{{- end }}
{{- end }}
