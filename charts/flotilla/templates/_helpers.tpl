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

{{/* The hub mode, checked: embedded, external or inCluster. */}}
{{- define "flotilla.hubMode" -}}
{{- $mode := .Values.hub.mode | default "embedded" -}}
{{- if not (has $mode (list "embedded" "external" "inCluster")) -}}
{{- fail (printf "hub.mode: %q is not a mode; use embedded (a hub in this cluster), external (an existing hub, hub.external.kubeconfigSecret) or inCluster (this cluster is the hub)" $mode) -}}
{{- end -}}
{{- $mode -}}
{{- end -}}

{{/* The name of a hub component's objects (embedded mode): <release>-<component>, named like
a controller's. */}}
{{- define "flotilla.hubName" -}}
{{- include "flotilla.name" (dict "root" .root "controller" .component) -}}
{{- end -}}

{{/* An image of a hub component: {repository, tag}. */}}
{{- define "flotilla.componentImage" -}}
{{- printf "%s:%s" .repository .tag -}}
{{- end -}}

{{/* The address pods use for a hub component: 127.0.0.1 with hostNetwork, else its Service. */}}
{{- define "flotilla.hubHost" -}}
{{- if .root.Values.hostNetwork -}}127.0.0.1{{- else -}}
{{- printf "%s.%s.svc" (include "flotilla.hubName" .) .root.Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* The hub's apiserver as the controllers and the setup Job reach it (embedded mode). */}}
{{- define "flotilla.hubEndpoint" -}}
{{- if .Values.hub.endpoint -}}{{ .Values.hub.endpoint }}{{- else -}}
{{- printf "https://%s:%v" (include "flotilla.hubHost" (dict "root" . "component" "apiserver")) .Values.hub.apiserver.port -}}
{{- end -}}
{{- end -}}

{{/* The etcd client URL of the hub's apiserver (embedded mode). */}}
{{- define "flotilla.etcdEndpoint" -}}
{{- printf "https://%s:%v" (include "flotilla.hubHost" (dict "root" . "component" "etcd")) .Values.hub.etcd.clientPort -}}
{{- end -}}

{{/* A quantity of bytes ("4Gi", "500M", "1048576") as a whole number; fails naming .what. */}}
{{- define "flotilla.bytes" -}}
{{- $v := toString .value -}}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 -}}
{{- $n := regexFind "^[0-9]+" $v -}}
{{- $unit := trimPrefix $n $v -}}
{{- if or (not $n) (not (hasKey $units $unit)) -}}
{{- fail (printf "%s: %q is not a quantity of bytes (e.g. 4Gi, 500M, 1048576)" .what $v) -}}
{{- end -}}
{{- mul (int64 $n) (get $units $unit) -}}
{{- end -}}

{{/* The splitter's byte budget per namespace (splitter.maxCopyBytesPerNamespace), in bytes;
"" when the splitter's own default holds. */}}
{{- define "flotilla.maxCopyBytes" -}}
{{- $value := toString .Values.splitter.maxCopyBytesPerNamespace -}}
{{- if $value -}}
{{- include "flotilla.bytes" (dict "value" $value "what" "splitter.maxCopyBytesPerNamespace") -}}
{{- else if eq (include "flotilla.hubMode" .) "embedded" -}}
{{- div (include "flotilla.bytes" (dict "value" .Values.hub.etcd.quotaBackendBytes "what" "hub.etcd.quotaBackendBytes") | int64) 8 -}}
{{- end -}}
{{- end -}}

{{/* The pod-level settings every Deployment and the StatefulSet of the chart share. */}}
{{- define "flotilla.podPlacement" -}}
{{- if .Values.hostNetwork }}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A probe's httpGet: .root, .path, .port and an optional .scheme. With hostNetwork the
pod's address is the node's, and the components listen on loopback: the probe asks 127.0.0.1. */}}
{{- define "flotilla.httpGet" -}}
{path: {{ .path }}, port: {{ .port }}{{ if .root.Values.hostNetwork }}, host: 127.0.0.1{{ end }}{{ with .scheme }}, scheme: {{ . }}{{ end }}}
{{- end -}}

{{/* The Deployment strategy: with hostNetwork a new pod cannot start next to the old one (same
ports), so Deployments are replaced; else rolled. */}}
{{- define "flotilla.strategy" -}}
{{- if .Values.hostNetwork }}
strategy: {type: Recreate}
{{- end }}
{{- end -}}

{{/*
The hub's credentials (embedded mode), created once and kept in the Secret <release>-hub-pki:
CAs, the apiserver's serving certificate, etcd's certificates, the ServiceAccount signing key, the
admin's expiring client certificate and one static token per identity that is not a person (the
setup Job, controller-manager, each controller). A later render (upgrade) reads them back, so
they survive upgrades; a serving certificate is issued again only when its names change, the
admin's certificate when it nears its end or is rotated, a token only for an identity that had
none. Memoised in .Values, so every
template of one render sees the same material. Use: include "flotilla.hubPki" . then
index .Values "__flotillaHubPki".
*/}}
{{- define "flotilla.hubPki" -}}
{{- if not (hasKey .Values "__flotillaHubPki") -}}
{{- $name := include "flotilla.hubName" (dict "root" . "component" "hub-pki") -}}
{{- $old := dict -}}
{{- with (lookup "v1" "Secret" .Release.Namespace $name) -}}
{{- range $k, $v := .data -}}{{- $_ := set $old $k (b64dec $v) -}}{{- end -}}
{{- end -}}
{{- $days := int .Values.hub.certificates.validityDays -}}
{{- $pki := dict -}}
{{- range $ca := list "ca" "client-ca" "etcd-ca" -}}
{{- if and (hasKey $old (printf "%s.crt" $ca)) (hasKey $old (printf "%s.key" $ca)) -}}
{{- $_ := set $pki (printf "%s.crt" $ca) (get $old (printf "%s.crt" $ca)) -}}
{{- $_ := set $pki (printf "%s.key" $ca) (get $old (printf "%s.key" $ca)) -}}
{{- else -}}
{{- $new := genCA (printf "flotilla-%s-%s" $.Release.Name $ca) $days -}}
{{- $_ := set $pki (printf "%s.crt" $ca) $new.Cert -}}
{{- $_ := set $pki (printf "%s.key" $ca) $new.Key -}}
{{- end -}}
{{- end -}}
{{- if hasKey $old "sa.key" -}}
{{- $_ := set $pki "sa.key" (get $old "sa.key") -}}
{{- else -}}
{{- $_ := set $pki "sa.key" (genPrivateKey "rsa") -}}
{{- end -}}
{{- /* The apiserver's serving certificate. */ -}}
{{- $svc := include "flotilla.hubName" (dict "root" . "component" "apiserver") -}}
{{- $ips := list "127.0.0.1" -}}
{{- $dns := list "localhost" $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) "kubernetes" "kubernetes.default" "kubernetes.default.svc" -}}
{{- range .Values.hub.apiserver.extraSANs -}}
{{- if regexMatch "^[0-9.]+$|:" . -}}{{- $ips = append $ips . -}}{{- else -}}{{- $dns = append $dns . -}}{{- end -}}
{{- end -}}
{{- $sans := printf "%s %s" (join "," $ips) (join "," $dns) -}}
{{- if and (eq (get $old "apiserver.sans") $sans) (hasKey $old "apiserver.crt") (eq (get $old "ca.crt") (get $pki "ca.crt")) -}}
{{- $_ := set $pki "apiserver.crt" (get $old "apiserver.crt") -}}
{{- $_ := set $pki "apiserver.key" (get $old "apiserver.key") -}}
{{- else -}}
{{- $ca := buildCustomCert (b64enc (get $pki "ca.crt")) (b64enc (get $pki "ca.key")) -}}
{{- $cert := genSignedCert "kube-apiserver" $ips $dns $days $ca -}}
{{- $_ := set $pki "apiserver.crt" $cert.Cert -}}
{{- $_ := set $pki "apiserver.key" $cert.Key -}}
{{- end -}}
{{- $_ := set $pki "apiserver.sans" $sans -}}
{{- /* etcd's serving certificate and the apiserver's client certificate of etcd. */ -}}
{{- $etcd := include "flotilla.hubName" (dict "root" . "component" "etcd") -}}
{{- $etcdDns := list "localhost" (printf "%s.%s.svc" $etcd .Release.Namespace) (printf "%s-0.%s.%s.svc" $etcd $etcd .Release.Namespace) -}}
{{- if and (hasKey $old "etcd-server.crt") (eq (get $old "etcd-ca.crt") (get $pki "etcd-ca.crt")) -}}
{{- range $k := list "etcd-server.crt" "etcd-server.key" "etcd-client.crt" "etcd-client.key" -}}
{{- $_ := set $pki $k (get $old $k) -}}
{{- end -}}
{{- else -}}
{{- $etcdCa := buildCustomCert (b64enc (get $pki "etcd-ca.crt")) (b64enc (get $pki "etcd-ca.key")) -}}
{{- $server := genSignedCert "etcd" (list "127.0.0.1") $etcdDns $days $etcdCa -}}
{{- $client := genSignedCert "kube-apiserver-etcd-client" nil nil $days $etcdCa -}}
{{- $_ := set $pki "etcd-server.crt" $server.Cert -}}
{{- $_ := set $pki "etcd-server.key" $server.Key -}}
{{- $_ := set $pki "etcd-client.crt" $client.Cert -}}
{{- $_ := set $pki "etcd-client.key" $client.Key -}}
{{- end -}}
{{- /* The key that encrypts Secrets and Works in etcd (hub.apiserver.encryptionAtRest). */ -}}
{{- $_ := set $pki "encryption-key" (get $old "encryption-key" | default (randBytes 32)) -}}
{{- /* The admin's client certificate (see flotilla.hubAdminUser), issued again when its
       generation changes, when the client CA changes, or once a third of its validity is left. */ -}}
{{- $adminDays := int .Values.hub.adminCredential.validityDays -}}
{{- $generation := toString .Values.hub.adminCredential.generation -}}
{{- $now := now | unixEpoch | int64 -}}
{{- $renewAt := sub (int64 (get $old "admin.not-after" | default "0")) (div (mul $adminDays 86400) 3) -}}
{{- if and (hasKey $old "admin.crt") (eq (get $old "admin.generation") $generation) (eq (get $old "client-ca.crt") (get $pki "client-ca.crt")) (lt $now $renewAt) -}}
{{- range $k := list "admin.crt" "admin.key" "admin.generation" "admin.not-after" -}}
{{- $_ := set $pki $k (get $old $k) -}}
{{- end -}}
{{- else -}}
{{- $clientCa := buildCustomCert (b64enc (get $pki "client-ca.crt")) (b64enc (get $pki "client-ca.key")) -}}
{{- $admin := genSignedCert (include "flotilla.hubAdminUser" .) nil nil $adminDays $clientCa -}}
{{- $_ := set $pki "admin.crt" $admin.Cert -}}
{{- $_ := set $pki "admin.key" $admin.Key -}}
{{- $_ := set $pki "admin.generation" $generation -}}
{{- $_ := set $pki "admin.not-after" (toString (add $now (mul $adminDays 86400))) -}}
{{- end -}}
{{- /* One static token per identity that is not a person: the setup Job's and the
       controllers'. */ -}}
{{- range $id := list "setup" "controller-manager" "registration" "syncer" "splitter" "negotiator" "csr-approval" -}}
{{- $key := printf "token-%s" $id -}}
{{- $_ := set $pki $key (get $old $key | default (randAlphaNum 48)) -}}
{{- end -}}
{{- $_ := set .Values "__flotillaHubPki" $pki -}}
{{- end -}}
{{- end -}}

{{/* The static token file of the hub's apiserver: token,user,uid,"groups". Each controller is
known by its ServiceAccount's user name and groups, so the chart's RBAC and admission policies
(written for ServiceAccounts) apply to it unchanged. */}}
{{- define "flotilla.hubTokens" -}}
{{- $pki := index .Values "__flotillaHubPki" -}}
{{- printf "%s,flotilla-setup,flotilla-setup,\"system:masters\"\n" (get $pki "token-setup") -}}
{{- printf "%s,system:kube-controller-manager,system:kube-controller-manager\n" (get $pki "token-controller-manager") -}}
{{- range $c := list "registration" "syncer" "splitter" "negotiator" "csr-approval" -}}
{{- $user := printf "system:serviceaccount:%s:%s" $.Release.Namespace (include "flotilla.name" (dict "root" $ "controller" $c)) -}}
{{- printf "%s,%s,%s,\"system:serviceaccounts,system:serviceaccounts:%s\"\n" (get $pki (printf "token-%s" $c)) $user $user $.Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* The embedded apiserver's EncryptionConfiguration: Secrets and Works with the release's key;
what was stored before encryption (or with it off) stays readable. */}}
{{- define "flotilla.hubEncryption" -}}
{{- $pki := index .Values "__flotillaHubPki" -}}
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets, works.flotilla.dev]
    providers:
      - secretbox:
          keys:
            - {name: key1, secret: {{ get $pki "encryption-key" | quote }}}
      - identity: {}
{{- end -}}

{{/* The embedded apiserver's audit policy: who did what to which object, never a body (Secrets
and Works carry tenants' data). Health checks, Lease renewals and Events are left out. */}}
{{- define "flotilla.hubAuditPolicy" -}}
{{- $rules := .Values.hub.apiserver.audit.policy -}}
{{- if not $rules -}}
{{- $rules = list
  (dict "level" "None" "nonResourceURLs" (list "/healthz*" "/livez*" "/readyz*" "/version"))
  (dict "level" "None" "verbs" (list "get" "update") "resources" (list (dict "group" "coordination.k8s.io" "resources" (list "leases"))))
  (dict "level" "None" "resources" (list (dict "group" "" "resources" (list "events")) (dict "group" "events.k8s.io" "resources" (list "events"))))
  (dict "level" "Metadata") -}}
{{- end -}}
{{- toYaml (dict "apiVersion" "audit.k8s.io/v1" "kind" "Policy" "omitStages" (list "RequestReceived") "rules" $rules) -}}
{{- end -}}

{{/* A kubeconfig of the embedded hub for a token: .root, .token, .user. */}}
{{/* The user name of the embedded hub admin's certificate: a new one per generation, so that
rotating it leaves the old certificate without rights. */}}
{{- define "flotilla.hubAdminUser" -}}
{{- printf "flotilla-admin-g%s" (toString .Values.hub.adminCredential.generation) -}}
{{- end -}}

{{/* A kubeconfig of the embedded hub for .user: with .token, or with the client certificate and
key in the hub's PKI under .cert and .key. */}}
{{- define "flotilla.hubKubeconfig" -}}
{{- $pki := index .root.Values "__flotillaHubPki" -}}
apiVersion: v1
kind: Config
clusters:
  - name: flotilla-hub
    cluster:
      server: {{ include "flotilla.hubEndpoint" .root }}
      certificate-authority-data: {{ get $pki "ca.crt" | b64enc }}
users:
  - name: {{ .user }}
    user:
      {{- if .token }}
      token: {{ .token }}
      {{- else }}
      client-certificate-data: {{ get $pki .cert | b64enc }}
      client-key-data: {{ get $pki .key | b64enc }}
      {{- end }}
contexts:
  - name: {{ .user }}@flotilla-hub
    context: {cluster: flotilla-hub, user: {{ .user }}}
current-context: {{ .user }}@flotilla-hub
{{- end -}}

{{/* The namespace of the read-only member kubeconfigs (memberCredentials.readersNamespace). */}}
{{- define "flotilla.readersNamespace" -}}
{{- .Values.memberCredentials.readersNamespace | default (printf "%s-readers" .Release.Namespace) -}}
{{- end -}}

{{/* "true" when the certificate approval webhook is installed: registration and
registration.approvalWebhook enabled, and a hub that can reach it (not hub.mode=external). */}}
{{- define "flotilla.csrApprovalEnabled" -}}
{{- if and .Values.registration.enabled .Values.registration.approvalWebhook.enabled (ne (include "flotilla.hubMode" .) "external") -}}true{{- end -}}
{{- end -}}

{{/* The approval webhook's serving certificate and its CA, made once and kept in the Secret
<release>-csr-approval-tls (issued again when its names change): ca.crt, tls.crt, tls.key. */}}
{{- define "flotilla.csrApprovalTls" -}}
{{- if not (hasKey .Values "__flotillaCsrApprovalTls") -}}
{{- $name := include "flotilla.name" (dict "root" . "controller" "csr-approval") -}}
{{- $old := dict -}}
{{- with (lookup "v1" "Secret" .Release.Namespace (printf "%s-tls" $name)) -}}
{{- range $k, $v := .data -}}{{- $_ := set $old $k (b64dec $v) -}}{{- end -}}
{{- end -}}
{{- $dns := list $name (printf "%s.%s" $name .Release.Namespace) (printf "%s.%s.svc" $name .Release.Namespace) (printf "%s.%s.svc.cluster.local" $name .Release.Namespace) -}}
{{- $sans := join "," $dns -}}
{{- $tls := dict -}}
{{- if and (hasKey $old "ca.crt") (hasKey $old "tls.crt") (hasKey $old "tls.key") (eq (get $old "sans") $sans) -}}
{{- range $k := list "ca.crt" "tls.crt" "tls.key" "sans" -}}{{- $_ := set $tls $k (get $old $k) -}}{{- end -}}
{{- else -}}
{{- $days := int .Values.hub.certificates.validityDays -}}
{{- $ca := genCA (printf "flotilla-%s-csr-approval-ca" .Release.Name) $days -}}
{{- $cert := genSignedCert $name (list "127.0.0.1") $dns $days $ca -}}
{{- $_ := set $tls "ca.crt" $ca.Cert -}}
{{- $_ := set $tls "tls.crt" $cert.Cert -}}
{{- $_ := set $tls "tls.key" $cert.Key -}}
{{- $_ := set $tls "sans" $sans -}}
{{- end -}}
{{- $_ := set .Values "__flotillaCsrApprovalTls" $tls -}}
{{- end -}}
{{- end -}}

{{/* The flags registration and its approval webhook must agree on, taken from
registration.extraArgs: --auto-accept and --max-agent-certificate-lifetime. */}}
{{- define "flotilla.csrApprovalSharedArgs" -}}
{{- range .Values.registration.extraArgs -}}
{{- if or (hasPrefix "--auto-accept" .) (hasPrefix "--max-agent-certificate-lifetime" .) }}
- {{ . | quote }}
{{- end -}}
{{- end -}}
{{- end -}}
