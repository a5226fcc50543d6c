{{/* Common labels; .root and .component. */}}
{{- define "flotillaAgent.labels" -}}
app.kubernetes.io/name: flotilla-agent
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: flotilla
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{/* The name of a component's objects in this cluster: <release>-<component>. */}}
{{- define "flotillaAgent.name" -}}
{{- printf "%s-%s" .root.Release.Name .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The cluster-scoped name of a component's RBAC: <release>:<component>. */}}
{{- define "flotillaAgent.clusterRoleName" -}}
{{- printf "%s:%s" .root.Release.Name .component -}}
{{- end -}}

{{/* The name of a component's Lease in the member: <release>-<component>, where <release> is
the release that installed the identities there (member.release when hosted). */}}
{{- define "flotillaAgent.leaseName" -}}
{{- printf "%s-%s" (.root.Values.member.release | default .root.Release.Name) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The member namespace of the credential Secret and the Leases. */}}
{{- define "flotillaAgent.memberNamespace" -}}
{{- .Values.member.namespace | default .Release.Namespace -}}
{{- end -}}

{{- define "flotillaAgent.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The components this release runs or grants, in order: the agent always. */}}
{{- define "flotillaAgent.components" -}}
{{- $c := list "agent" -}}
{{- if .Values.syncer.enabled }}{{ $c = append $c "syncer" }}{{ end -}}
{{- if .Values.importer.enabled }}{{ $c = append $c "importer" }}{{ end -}}
{{- join "," $c -}}
{{- end -}}

{{/* Checks the values; renders nothing. */}}
{{- define "flotillaAgent.validate" -}}
{{- if not (or .Values.install.identities .Values.install.controllers) -}}
{{- fail "install.identities and install.controllers are both false: the release would install nothing" -}}
{{- end -}}
{{- if .Values.install.controllers -}}
{{- if not .Values.clusterName -}}
{{- fail "clusterName is required: the member's Cluster name on the hub (e.g. --set clusterName=member2)" -}}
{{- end -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" .Values.clusterName) -}}
{{- fail (printf "clusterName: %q is not a DNS label (lower-case letters, digits and '-', starting and ending with a letter or digit)" .Values.clusterName) -}}
{{- end -}}
{{- if gt (len .Values.clusterName) 46 -}}
{{- fail (printf "clusterName: %q is longer than 46 characters (its hub namespace flotilla-cluster-<name> must be a DNS label)" .Values.clusterName) -}}
{{- end -}}
{{- if not .Values.hub.bootstrapKubeconfigSecret.name -}}
{{- fail "hub.bootstrapKubeconfigSecret.name is required: the Secret with the hub's bootstrap kubeconfig" -}}
{{- end -}}
{{- if and (not .Values.member.kubeconfigSecret) (or .Values.member.namespace .Values.member.release) -}}
{{- fail "member.namespace and member.release are for hosted controllers: set member.kubeconfigSecret too, or leave them empty" -}}
{{- end -}}
{{- /* Against a live cluster (helm install or upgrade, not helm template; the kube-system
       Namespace tells which): the Secrets the pods need exist. */ -}}
{{- if lookup "v1" "Namespace" "" "kube-system" -}}
{{- with .Values.member.kubeconfigSecret -}}
{{- $secret := lookup "v1" "Secret" $.Release.Namespace . -}}
{{- if not $secret -}}
{{- fail (printf "member.kubeconfigSecret: the Secret %s/%s does not exist: create it with one kubeconfig of the member per component (keys %s)" $.Release.Namespace . (include "flotillaAgent.components" $)) -}}
{{- end -}}
{{- range $component := splitList "," (include "flotillaAgent.components" $) -}}
{{- if not (hasKey ($secret.data | default dict) $component) -}}
{{- fail (printf "member.kubeconfigSecret: the Secret %s/%s has no key %s (the member kubeconfig of the %s's ServiceAccount)" $.Release.Namespace $.Values.member.kubeconfigSecret $component $component) -}}
{{- end -}}
{{- end -}}
{{- else -}}
{{- $bootstrap := .Values.hub.bootstrapKubeconfigSecret -}}
{{- if not (or (lookup "v1" "Secret" .Release.Namespace $bootstrap.name) (lookup "v1" "Secret" .Release.Namespace .Values.hub.credentialSecret)) -}}
{{- fail (printf "hub.bootstrapKubeconfigSecret: the Secret %s/%s does not exist and the member has no hub credential yet (%s): create it with the hub's bootstrap kubeconfig under the key %s (docs/registration.md, pull mode)" .Release.Namespace $bootstrap.name .Values.hub.credentialSecret $bootstrap.key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and .Values.member.kubeconfigSecret .Values.install.identities -}}
{{- fail "member.kubeconfigSecret runs the controllers hosted, against another cluster: install their identities in the member with a release of their own (install.controllers=false) and set install.identities=false here" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A probe's httpGet: .root, .path. With hostNetwork the probe asks 127.0.0.1. */}}
{{- define "flotillaAgent.httpGet" -}}
{path: {{ .path }}, port: health{{ if .root.Values.hostNetwork }}, host: 127.0.0.1{{ end }}}
{{- end -}}

{{/* The pull syncer's rules for the namespaced kinds of Flotilla's table of kinds, and for the
namespaces it creates. */}}
{{- define "flotillaAgent.syncerDefaultRules" -}}
- apiGroups: [apps]
  resources: [deployments, statefulsets, daemonsets, replicasets]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [configmaps, secrets, services, serviceaccounts, persistentvolumeclaims, limitranges, resourcequotas]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [batch]
  resources: [jobs, cronjobs]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [autoscaling]
  resources: [horizontalpodautoscalers]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [networking.k8s.io]
  resources: [ingresses, networkpolicies]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get, create, patch]
{{- end -}}

{{/* The pull syncer's rules for placed Roles and RoleBindings. */}}
{{- define "flotillaAgent.syncerRBACRules" -}}
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles]
  verbs: [escalate]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, clusterroles]
  verbs: [bind]
{{- end -}}
