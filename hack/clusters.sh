#!/usr/bin/env bash
# A local Flotilla environment made of real Kubernetes control planes on one machine:
# one etcd, a hub (kube-apiserver + a controller-manager without workload controllers) and N
# members (kube-apiserver + controller-manager + scheduler + kwok with fake Nodes). The clusters
# differ the way a real fleet does: each has its own CAs, service and pod CIDRs, nodes and region,
# and one member runs an older Kubernetes minor. On request (up --host-node MEMBER) one member
# also gets one real node: containerd, runc and a kubelet, for pods that must really run.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# ---------------------------------------------------------------------------------------------
# How the clusters differ. Member N is the member on port PORT_BASE+N (member1, member2, ... for
# the members of 'up'; the next free N for 'add-member').

# The nodes of member N: "<count> <cpu> <memory> <pods> <region>" (each node has the same
# allocatable; one zone per node). Unequal on purpose, so that division by capacity (allocatable
# pods) is not an even split in disguise, and two members share a region.
node_profile() { # N
  case "$1" in
    1) echo "3 8 32Gi 100 europe-west1" ;;
    2) echo "2 4 16Gi 50 us-east1" ;;
    3) echo "1 16 64Gi 200 europe-west1" ;;
    *) echo "2 8 32Gi 100 asia-east1" ;;
  esac
}

# Service and pod CIDRs: the hub 10.96.0.0/16, member N 10.(100+N).0.0/16 for Services and
# 10.N.0.0/16 for pods (a /24 per node).
MAX_MEMBER_INDEX=95
service_cidr() { if [[ "$1" == 0 ]]; then echo 10.96.0.0/16; else echo "10.$(( 100 + $1 )).0.0/16"; fi; }
pod_cidr() { echo "10.$1.0.0/16"; }

# The default Kubernetes version of a cluster: member2 runs the older minor, so the standard
# environment has exactly one older member.
default_version() { # name
  if [[ "$1" == member2 ]]; then echo "${KUBERNETES_OLDER_VERSION}"; else echo "${KUBERNETES_VERSION}"; fi
}

member_row() { # N (4 stands for every later member)
  local count cpu mem pods region name="member$1" services pods_cidr
  read -r count cpu mem pods region <<<"$(node_profile "$1")"
  services="$(service_cidr "$1")"; pods_cidr="$(pod_cidr "$1")"
  if [[ "$1" -ge 4 ]]; then name="memberN"; services="10.(100+N).0.0/16"; pods_cidr="10.N.0.0/16"; fi
  printf '  %-8s %-8s %-17s %-12s %-33s %s\n' "${name}" "$(default_version "member$1")" \
    "${services}" "${pods_cidr}" "${count} x cpu ${cpu}, mem ${mem}, pods ${pods}" "${region}"
}

# Clusters of the newest version also enable NEWEST_FEATURE_GATES: a field that only they serve
# (VolumeBindMountOptions: a container's volumeMounts[].bindMountOptions) is then usable on the
# hub, as fields of a newer minor are in real fleets, and the older member does not have it.
NEWEST_FEATURE_GATES="VolumeBindMountOptions=true"

# The host node's taint (NoSchedule) and label (see "The host node" below).
HOST_NODE_TAINT=flotilla.dev/host-node
HOST_NODE_LABEL=flotilla.dev/host-node=true
# The host node's labels: HOST_NODE_LABEL, and the region of its member's nodes with a zone of
# its own (<region>-host), as every node of a real cluster has.
host_node_labels() { # member
  local count cpu mem pods region
  read -r count cpu mem pods region <<<"$(node_profile "$(cluster_index "$1")")"
  echo "${HOST_NODE_LABEL},topology.kubernetes.io/region=${region},topology.kubernetes.io/zone=${region}-host"
}

usage() {
  cat <<EOF
Usage: hack/clusters.sh [--run-dir DIR] [--port-base PORT] [--member-version NAME=VERSION]...
                        COMMAND [ARGS]

Commands:
  up [--members N] [--host-node MEMBER] [--no-hub]
                       start etcd, the hub and N members (default 3); on an environment that
                       is already running it only starts what crashed or was stopped.
                       --host-node (FLOTILLA_HOST_NODE) also gives MEMBER one real node (see
                       "The host node" below); needs root, containerd, runc and the CNI plugins.
                       --no-hub starts no hub of processes (the quick start's hub is the chart's,
                       on the host node); 'env' then names the hub kubeconfig stored as
                       kubeconfigs/${CHART_HUB_KUBECONFIG} in the run directory, once there is one
  down                 stop every process this environment recorded (by PID) and delete its data
  status               show each cluster, its processes and whether its apiserver is ready
  env                  print the export lines for tests and tools (FLOTILLA_HUB_KUBECONFIG, ...)
  stop-member NAME     stop a member's processes: its apiserver becomes unreachable
  start-member NAME    start a stopped member again; its data (kept in etcd) is intact
  pause-member NAME    pause a member's apiserver (SIGSTOP): it accepts connections and never
                       answers, as a hung apiserver does
  resume-member NAME   let a paused member's apiserver run again (SIGCONT)
  add-member NAME [--version VERSION]
                       add one more member to the running environment (default version:
                       ${KUBERNETES_VERSION})
  remove-member NAME   stop a member and delete its data
  load-image ARCHIVE...
                       import OCI archives (hack/build-image.sh --dev, ...) into the host node's
                       containerd; prints the image names pods can use

Options (also read from the environment):
  --run-dir DIR        FLOTILLA_RUN_DIR: where kubeconfigs, PKI, logs and PIDs live
                       (default: \${TMPDIR:-/tmp}/flotilla-env)
  --port-base PORT     FLOTILLA_PORT_BASE, used by 'up' only: the hub's apiserver listens on PORT,
                       member N on PORT+N, etcd on PORT+7347 and PORT+7357, the host node's
                       kubelet on PORT+7367 (healthz PORT+7368) (default 16443).
                       A second environment needs another run directory and port base; keep
                       PORT+7368 below 32768, where Linux hands out ephemeral ports.
  --member-version NAME=VERSION
                       FLOTILLA_MEMBER_VERSIONS (NAME=VERSION,...), for 'up' and 'add-member':
                       the Kubernetes version of member NAME, one of ${KUBERNETES_VERSIONS[*]}.
                       By default member2 runs the older ${KUBERNETES_OLDER_VERSION}, every other
                       cluster (the hub too) ${KUBERNETES_VERSION}: the standard 3-member
                       environment has exactly one older member, member2.
  FLOTILLA_HUB_PROFILING=true, FLOTILLA_MEMBER_PROFILING=true
                       serve the hub's (the members') apiserver's /debug/pprof (off by default,
                       to save the two cores); hack/bench.sh user --profile uses them

How the clusters differ (member N is the member on port PORT+N; N at most ${MAX_MEMBER_INDEX}):
  cluster  version  service CIDR      pod CIDR     nodes                             region
  hub      ${KUBERNETES_VERSION}  10.96.0.0/16      -            none                              -
$(for i in 1 2 3 4; do member_row "${i}"; done)
  Every cluster has its own serving CA, client CA (signer of its CSRs), service-account issuer
  and tokens: no credential or certificate of one cluster is trusted by another. Zones are
  <region>-a, -b, ... one per node (topology.kubernetes.io/region and zone on the Nodes).
  Clusters on ${KUBERNETES_VERSION} enable the feature gates ${NEWEST_FEATURE_GATES}, so a field
  the older minor lacks (volumeMounts[].bindMountOptions) can be used on the hub.

The host node (up --host-node MEMBER): a containerd (runc, CNI bridge) and a kubelet
(${KUBERNETES_VERSION}) of this machine, as the Node MEMBER-host of MEMBER beside its kwok nodes,
with the taint ${HOST_NODE_TAINT}:NoSchedule and the label ${HOST_NODE_LABEL}:
only pods that tolerate the taint run there (kwok leaves it alone). Its containerd has the images
flotilla.local/{etcd:${ETCD_VERSION},kube-apiserver:${KUBERNETES_VERSION},kube-controller-manager:${KUBERNETES_VERSION},
kubectl:${KUBERNETES_VERSION},pause:${PAUSE_IMAGE_TAG}} (hack/build-image.sh --components); 'load-image' adds more.
Pods with hostNetwork reach MEMBER's apiserver on 127.0.0.1:PORT+N; other pods get an address of
the bridge flotPORT (10.N.(128 + PORT mod 127).0/24; its .1 is the node's InternalIP). MEMBER has
the StorageClass flotilla-local (no provisioner, WaitForFirstConsumer) for PersistentVolumes made
by hand. Its data is in RUN_DIR/node; 'down' removes its containers, mounts and bridge too.
MEMBER must run ${KUBERNETES_VERSION} (the kubelet may not be newer than its apiserver).

Tools come from hack/build-tools.sh (run it first, or use hack/test.sh which does).
EOF
}

RUN_DIR="${FLOTILLA_RUN_DIR:-${TMPDIR:-/tmp}/flotilla-env}"
PORT_BASE="${FLOTILLA_PORT_BASE:-16443}"
HUB_PROFILING="${FLOTILLA_HUB_PROFILING:-false}"
MEMBER_PROFILING="${FLOTILLA_MEMBER_PROFILING:-false}"
# The member with the host node: --host-node of 'up', then env.conf (HOST_MEMBER).
HOST_MEMBER=""
# NAME=VERSION entries: --member-version options after FLOTILLA_MEMBER_VERSIONS, so the last wins.
MEMBER_VERSIONS=()
IFS=',' read -r -a MEMBER_VERSIONS <<<"${FLOTILLA_MEMBER_VERSIONS:-}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --run-dir) RUN_DIR="$2"; shift 2 ;;
    --run-dir=*) RUN_DIR="${1#*=}"; shift ;;
    --port-base) PORT_BASE="$2"; shift 2 ;;
    --port-base=*) PORT_BASE="${1#*=}"; shift ;;
    --member-version) MEMBER_VERSIONS+=("$2"); shift 2 ;;
    --member-version=*) MEMBER_VERSIONS+=("${1#*=}"); shift ;;
    -h|--help|help) usage; exit 0 ;;
    *) break ;;
  esac
done
[[ $# -ge 1 ]] || { usage >&2; exit 2; }
COMMAND="$1"; shift
mkdir -p "$(dirname "${RUN_DIR}")"
RUN_DIR="$(cd "$(dirname "${RUN_DIR}")" && pwd)/$(basename "${RUN_DIR}")"

PIDS="${RUN_DIR}/pids"
LOGS="${RUN_DIR}/logs"
CLUSTERS="${RUN_DIR}/clusters"
KUBECONFIGS="${RUN_DIR}/kubeconfigs"
CONF="${RUN_DIR}/env.conf"

APISERVER_TIMEOUT="${FLOTILLA_APISERVER_TIMEOUT:-180}"
SMOKE_TIMEOUT="${FLOTILLA_SMOKE_TIMEOUT:-240}"

recorded_procs() { [[ -d "${PIDS}" ]] && ls "${PIDS}" 2>/dev/null || true; }

tail_log() { # name
  if [[ -f "${LOGS}/$1.log" ]]; then
    echo "--- last lines of ${LOGS}/$1.log ---" >&2
    tail -n 20 "${LOGS}/$1.log" >&2
  fi
}

# ---------------------------------------------------------------------------------------------
# Configuration and PKI

load_conf() {
  [[ -f "${CONF}" ]] || die "no environment in ${RUN_DIR}: run 'hack/clusters.sh up' first"
  # shellcheck source=/dev/null
  source "${CONF}"
  [[ -x "${TOOLS_BIN}/kube-apiserver" ]] || die "tools missing in ${TOOLS_BIN}: run hack/build-tools.sh"
  [[ -f "${CLUSTERS}/hub/version" || "${NO_HUB:-0}" == 1 ]] \
    || die "the environment in ${RUN_DIR} was started by an older hack/clusters.sh (one shared CA): run 'hack/clusters.sh --run-dir ${RUN_DIR} down' and 'up' again"
  check_member_versions
}

etcd_port() { echo $(( PORT_BASE + 7347 )); }
etcd_peer_port() { echo $(( PORT_BASE + 7357 )); }

require_tools() {
  local missing=() v b
  for b in etcd kubectl kwok; do
    [[ -x "${TOOLS_BIN}/${b}" ]] || missing+=("${b}")
  done
  for v in "${KUBERNETES_VERSIONS[@]}"; do
    for b in "${K8S_SERVER_TOOLS[@]}"; do
      [[ -x "$(k8s_bin_dir "${v}")/${b}" ]] || missing+=("${b}@${v}")
    done
  done
  [[ ${#missing[@]} -eq 0 ]] || die "missing tools in ${TOOLS_BIN}: ${missing[*]} (run hack/build-tools.sh)"
  for c in openssl curl setsid flock; do
    command -v "${c}" >/dev/null || die "'${c}' is required (Debian: apt-get install openssl curl util-linux)"
  done
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A version as given on the command line (v1.34.4, 1.34.4, v1.34 or 1.34), as one of
# KUBERNETES_VERSIONS.
resolve_version() { # value
  local want="${1#v}" v
  for v in "${KUBERNETES_VERSIONS[@]}"; do
    if [[ "${want}" == "${v#v}" || "${want}" == "$(cut -d. -f1,2 <<<"${v#v}")" ]]; then echo "${v}"; return 0; fi
  done
  die "Kubernetes version '$1' is not one this environment builds (hack/versions.env): ${KUBERNETES_VERSIONS[*]}"
}

# The version member NAME runs: the last --member-version / FLOTILLA_MEMBER_VERSIONS entry for it,
# else its default.
member_version() { # name
  local e version=""
  for e in "${MEMBER_VERSIONS[@]}"; do
    [[ -n "${e}" ]] || continue
    [[ "${e}" == *=* ]] || die "--member-version needs NAME=VERSION, got '${e}'"
    [[ "${e%%=*}" == "$1" ]] && version="${e#*=}"
  done
  if [[ -n "${version}" ]]; then resolve_version "${version}"; else default_version "$1"; fi
}

# Checks every --member-version entry up front, so a typo fails before anything starts.
check_member_versions() {
  local e
  for e in "${MEMBER_VERSIONS[@]}"; do
    [[ -n "${e}" ]] || continue
    [[ "${e}" == *=* && -n "${e%%=*}" ]] || die "--member-version needs NAME=VERSION, got '${e}'"
    resolve_version "${e#*=}" >/dev/null
  done
}

# A key for a CA or a serving certificate. Clusters differ here too: the hub and odd members use
# RSA, even members ECDSA P-256, as fleets assembled from several installers do.
new_key() { # file index
  if (( $2 % 2 == 0 && $2 > 0 )); then
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
  else
    openssl genrsa -out "$1" 2048 2>/dev/null
  fi
}

# Per-cluster PKI and credentials, none shared with another cluster:
#   ca.crt/key          serving CA (what kubeconfigs trust; kube-root-ca.crt publishes it)
#   serving.crt/key     the apiserver's certificate, for 127.0.0.1, localhost and the in-cluster
#                       names and address of the kubernetes Service
#   client-ca.crt/key   client CA: the apiserver accepts client certificates it signed, and the
#                       controller-manager signs approved CSRs with it
#   sa.key/pub          service-account signing key (each cluster also has its own issuer)
#   tokens.csv          static tokens of an admin (system:masters) and a non-admin user
gen_cluster_creds() { # name index
  local name="$1" index="$2" dir="${CLUSTERS}/$1"
  mkdir -p "${dir}"
  [[ -f "${dir}/tokens.csv" ]] && return 0
  local first_ip
  first_ip="$(service_cidr "${index}" | awk -F'[./]' '{print $1"."$2"."$3"."($4+1)}')"
  (
    cd "${dir}"
    new_key ca.key "${index}"
    openssl req -x509 -new -key ca.key -days 3650 -subj "/CN=flotilla-${name}-ca" -out ca.crt 2>/dev/null
    new_key serving.key "${index}"
    openssl req -new -key serving.key -subj "/CN=kube-apiserver" -out serving.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,IP:%s,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\nextendedKeyUsage=serverAuth\n' \
      "${first_ip}" >serving.ext
    openssl x509 -req -in serving.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile serving.ext -out serving.crt 2>/dev/null
    rm -f serving.csr serving.ext ca.srl
    new_key client-ca.key "${index}"
    openssl req -x509 -new -key client-ca.key -days 3650 -subj "/CN=flotilla-${name}-client-ca" \
      -out client-ca.crt 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    local admin user
    admin="$(openssl rand -hex 24)"
    user="$(openssl rand -hex 24)"
    printf '%s,flotilla-admin,flotilla-admin,"system:masters"\n%s,flotilla-user,flotilla-user,"flotilla:users"\n' \
      "${admin}" "${user}" >tokens.csv
    chmod 600 tokens.csv sa.key ca.key serving.key client-ca.key
    echo "${admin}" >admin.token
    echo "${user}" >user.token
    chmod 600 admin.token user.token
  )
  [[ -f "${dir}/serving.crt" && -f "${dir}/client-ca.crt" ]] || die "could not create the PKI of ${name} in ${dir}"
}

write_kubeconfig() { # file cluster port token user
  local ca
  ca="$(base64 -w0 <"${CLUSTERS}/$2/ca.crt")"
  umask 077
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $2
  cluster:
    server: https://127.0.0.1:$3
    certificate-authority-data: ${ca}
users:
- name: $5@$2
  user:
    token: $4
contexts:
- name: $5@$2
  context:
    cluster: $2
    user: $5@$2
current-context: $5@$2
EOF
}

cluster_port() { cat "${CLUSTERS}/$1/port"; }
cluster_role() { cat "${CLUSTERS}/$1/role"; }
cluster_index() { cat "${CLUSTERS}/$1/index"; }
cluster_version() { cat "${CLUSTERS}/$1/version"; }
# The directory of a cluster's control-plane binaries (its Kubernetes version's).
cluster_bin() { k8s_bin_dir "$(cluster_version "$1")"; }

# Clusters in port order (the hub first).
all_clusters() {
  [[ -d "${CLUSTERS}" ]] || return 0
  local d
  for d in "${CLUSTERS}"/*/; do
    [[ -f "${d}/port" ]] && echo "$(cat "${d}/port") $(basename "${d}")"
  done | sort -n | awk '{print $2}'
}
members() { local c; for c in $(all_clusters); do [[ "$(cluster_role "${c}")" == member ]] && echo "${c}"; done; return 0; }

kc() { # cluster kubectl-args...
  local c="$1"; shift
  "${TOOLS_BIN}/kubectl" --kubeconfig "${KUBECONFIGS}/${c}.kubeconfig" "$@"
}

prepare_cluster() { # name role port version
  local name="$1" role="$2" port="$3" version="$4" index=$(( $3 - PORT_BASE )) b
  (( index <= MAX_MEMBER_INDEX )) \
    || die "${name} would be member ${index}: at most ${MAX_MEMBER_INDEX} fit the CIDR plan (10.N.0.0/16 for pods)"
  for b in "${K8S_SERVER_TOOLS[@]}"; do
    [[ -x "$(k8s_bin_dir "${version}")/${b}" ]] \
      || die "${b} ${version} is not in the tool cache $(k8s_bin_dir "${version}"): run hack/build-tools.sh"
  done
  gen_cluster_creds "${name}" "${index}"
  echo "${role}" >"${CLUSTERS}/${name}/role"
  echo "${port}" >"${CLUSTERS}/${name}/port"
  echo "${index}" >"${CLUSTERS}/${name}/index"
  echo "${version}" >"${CLUSTERS}/${name}/version"
  mkdir -p "${KUBECONFIGS}"
  write_kubeconfig "${KUBECONFIGS}/${name}.kubeconfig" "${name}" "${port}" \
    "$(cat "${CLUSTERS}/${name}/admin.token")" flotilla-admin
  write_kubeconfig "${KUBECONFIGS}/${name}-user.kubeconfig" "${name}" "${port}" \
    "$(cat "${CLUSTERS}/${name}/user.token")" flotilla-user
}

# ---------------------------------------------------------------------------------------------
# Components

start_etcd() {
  local p pp
  p="$(etcd_port)"; pp="$(etcd_peer_port)"
  mkdir -p "${DATA_DIR}"
  start_proc etcd "${TOOLS_BIN}/etcd" --name flotilla --data-dir "${DATA_DIR}/etcd" \
    --listen-client-urls "http://127.0.0.1:${p}" --advertise-client-urls "http://127.0.0.1:${p}" \
    --listen-peer-urls "http://127.0.0.1:${pp}" --initial-advertise-peer-urls "http://127.0.0.1:${pp}" \
    --initial-cluster "flotilla=http://127.0.0.1:${pp}" --unsafe-no-fsync --log-level warn
}

wait_etcd() {
  local t0; t0="$(now)"
  until curl -sf "http://127.0.0.1:$(etcd_port)/health" >/dev/null 2>&1; do
    proc_alive etcd || { tail_log etcd; die "etcd exited during start-up"; }
    (( $(now) - t0 < 60 )) || { tail_log etcd; die "etcd not healthy after 60s"; }
    sleep 0.5
  done
}

# Flags as kubeadm and managed clusters set them where they matter to workloads (privileged
# containers allowed, the Node authorizer and NodeRestriction, bootstrap tokens); priority and
# fairness and profiling are off to save the two cores (profiling on request).
start_apiserver() { # name
  local name="$1" dir="${CLUSTERS}/$1" profiling="${MEMBER_PROFILING}" gates=() kubelet=()
  [[ "$(cluster_role "${name}")" != hub ]] || profiling="${HUB_PROFILING}"
  [[ "$(cluster_version "${name}")" != "${KUBERNETES_VERSION}" ]] \
    || gates=(--feature-gates "${NEWEST_FEATURE_GATES}")
  # The host node's member calls its kubelet (logs, exec) with a client certificate, at the
  # node's InternalIP: its Hostname (<member>-host) resolves nowhere.
  # shellcheck disable=SC2054 # InternalIP,Hostname is one value
  [[ "${name}" != "${HOST_MEMBER}" ]] \
    || kubelet=(--kubelet-client-certificate "${dir}/kubelet-client.crt" --kubelet-client-key "${dir}/kubelet-client.key"
      --kubelet-preferred-address-types InternalIP,Hostname)
  start_proc "${name}.apiserver" "$(cluster_bin "${name}")/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$(etcd_port)" --etcd-prefix "/${name}/registry" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$(cluster_port "${name}")" \
    --endpoint-reconciler-type none \
    --tls-cert-file "${dir}/serving.crt" --tls-private-key-file "${dir}/serving.key" \
    --client-ca-file "${dir}/client-ca.crt" --token-auth-file "${dir}/tokens.csv" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --allow-privileged=true --enable-bootstrap-token-auth=true \
    --service-account-issuer "https://${name}.clusters.flotilla.local" \
    --service-account-key-file "${dir}/sa.pub" --service-account-signing-key-file "${dir}/sa.key" \
    --service-cluster-ip-range "$(service_cidr "$(cluster_index "${name}")")" \
    --enable-priority-and-fairness=false --profiling="${profiling}" "${gates[@]}" "${kubelet[@]}"
}

wait_apiserver() { # name
  local name="$1" t0 port token
  t0="$(now)"; port="$(cluster_port "${name}")"; token="$(cat "${CLUSTERS}/${name}/admin.token")"
  until curl -sf --cacert "${CLUSTERS}/${name}/ca.crt" -H "Authorization: Bearer ${token}" \
      "https://127.0.0.1:${port}/readyz" >/dev/null 2>&1; do
    proc_alive "${name}.apiserver" || { tail_log "${name}.apiserver"; die "the apiserver of ${name} exited during start-up"; }
    (( $(now) - t0 < APISERVER_TIMEOUT )) || { tail_log "${name}.apiserver"; die "the apiserver of ${name} not ready after ${APISERVER_TIMEOUT}s"; }
    sleep 1
  done
}

HUB_CONTROLLERS="namespace-controller,garbage-collector-controller,serviceaccount-controller,serviceaccount-token-controller,clusterrole-aggregation-controller,root-ca-certificate-publisher-controller,certificatesigningrequest-signing-controller,ttl-after-finished-controller"

start_controllers() { # name
  local name="$1" dir="${CLUSTERS}/$1" controllers='*' bin index
  bin="$(cluster_bin "${name}")"; index="$(cluster_index "${name}")"
  local ipam=(--service-cluster-ip-range "$(service_cidr "${index}")")
  if [[ "$(cluster_role "${name}")" == hub ]]; then
    controllers="${HUB_CONTROLLERS}"
  else
    # As in real clusters, the node-ipam controller gives every Node a /24 of the pod CIDR.
    ipam+=(--allocate-node-cidrs=true --cluster-cidr "$(pod_cidr "${index}")" --node-cidr-mask-size 24)
  fi
  start_proc "${name}.controller-manager" "${bin}/kube-controller-manager" \
    --kubeconfig "${KUBECONFIGS}/${name}.kubeconfig" --leader-elect=false --secure-port 0 \
    --controllers "${controllers}" "${ipam[@]}" \
    --service-account-private-key-file "${dir}/sa.key" --root-ca-file "${dir}/ca.crt" \
    --cluster-signing-cert-file "${dir}/client-ca.crt" --cluster-signing-key-file "${dir}/client-ca.key" \
    --use-service-account-credentials=false --profiling=false \
    --flex-volume-plugin-dir "${CLUSTERS}/${name}/flex-volume-plugins"
  [[ "$(cluster_role "${name}")" == member ]] || return 0
  start_proc "${name}.scheduler" "${bin}/kube-scheduler" \
    --kubeconfig "${KUBECONFIGS}/${name}.kubeconfig" --leader-elect=false --secure-port 0 \
    --profiling=false
  local stages=() s
  for s in node-initialize node-heartbeat-with-lease pod-ready pod-complete pod-delete; do
    stages+=(--config "${KWOK_STAGES_DIR}/${s}.yaml")
  done
  # kwok manages its fake nodes only (annotated kwok.x-k8s.io/node=fake), never the host node.
  start_proc "${name}.kwok" "${TOOLS_BIN}/kwok" \
    --kubeconfig "${KUBECONFIGS}/${name}.kubeconfig" \
    --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --node-lease-duration-seconds 40 --cidr "$(pod_cidr "${index}")" "${stages[@]}"
}

cluster_components() { # name
  if [[ "$(cluster_role "$1")" == hub ]]; then
    echo "$1.apiserver $1.controller-manager"
  elif [[ "$1" == "${HOST_MEMBER}" ]]; then
    echo "$1.apiserver $1.controller-manager $1.scheduler $1.kwok $1.containerd $1.kubelet"
  else
    echo "$1.apiserver $1.controller-manager $1.scheduler $1.kwok"
  fi
}

fake_nodes_yaml() { # member
  local count cpu mem pods region i zones=(a b c d e f)
  read -r count cpu mem pods region <<<"$(node_profile "$(cluster_index "$1")")"
  for (( i = 0; i < count; i++ )); do
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: $1-node-${i}
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/arch: amd64
    kubernetes.io/os: linux
    kubernetes.io/hostname: $1-node-${i}
    node-role.kubernetes.io/agent: ""
    node.kubernetes.io/instance-type: fake-${cpu}cpu-${mem}
    topology.kubernetes.io/region: ${region}
    topology.kubernetes.io/zone: ${region}-${zones[i % 6]}
    type: kwok
status:
  allocatable: {cpu: "${cpu}", memory: ${mem}, pods: "${pods}"}
  capacity: {cpu: "${cpu}", memory: ${mem}, pods: "${pods}"}
EOF
  done
}

setup_cluster_objects() { # name
  local name="$1"
  # The non-admin user may read (ClusterRole view) and nothing else.
  kc "${name}" create clusterrolebinding flotilla-user-view --clusterrole view --user flotilla-user \
    --dry-run=client -o yaml | kc "${name}" apply -f - >/dev/null
  if [[ "$(cluster_role "${name}")" == member ]]; then
    fake_nodes_yaml "${name}" | kc "${name}" apply -f - >/dev/null
  fi
  if [[ "${name}" == "${HOST_MEMBER}" ]]; then
    host_node_objects_yaml "${name}" | kc "${name}" apply -f - >/dev/null
  fi
}

smoke_yaml() {
  cat <<'EOF'
apiVersion: v1
kind: Namespace
metadata:
  name: flotilla-smoke
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: smoke
  namespace: flotilla-smoke
spec:
  replicas: 2
  selector:
    matchLabels: {app: smoke}
  template:
    metadata:
      labels: {app: smoke}
    spec:
      containers:
      - name: pause
        image: registry.k8s.io/pause:3.10
EOF
}

smoke_test() { # members...
  local m
  for m in "$@"; do smoke_yaml | kc "${m}" apply -f - >/dev/null; done
  for m in "$@"; do
    if ! kc "${m}" -n flotilla-smoke wait deployment/smoke --for condition=Available \
        --timeout "${SMOKE_TIMEOUT}s" >/dev/null; then
      kc "${m}" -n flotilla-smoke get deploy,rs,pods -o wide >&2 || true
      kc "${m}" get nodes -o wide >&2 || true
      tail_log "${m}.kwok"; tail_log "${m}.scheduler"; tail_log "${m}.controller-manager"
      die "the smoke Deployment in ${m} did not become Available within ${SMOKE_TIMEOUT}s"
    fi
  done
  for m in "$@"; do kc "${m}" delete namespace flotilla-smoke --wait=false >/dev/null; done
}

# Brings clusters up from a state where their processes are stopped.
start_clusters() { # names...
  local c t0
  t0="$(now)"
  for c in "$@"; do start_apiserver "${c}"; done
  for c in "$@"; do wait_apiserver "${c}"; done
  log "apiservers ready: $* ($(( $(now) - t0 ))s)"
  t0="$(now)"
  for c in "$@"; do setup_cluster_objects "${c}"; start_controllers "${c}"; done
  log "controller-managers, schedulers and kwok started ($(( $(now) - t0 ))s)"
  for c in "$@"; do [[ "${c}" != "${HOST_MEMBER}" ]] || start_host_node "${c}"; done
}

# ---------------------------------------------------------------------------------------------
# The host node: one real node — containerd, runc and the kubelet — in one member (up
# --host-node MEMBER), registered as <member>-host beside the member's kwok nodes, so that a Helm
# chart can run real pods there. Its taint and label keep the member's workloads off it:
# only pods that tolerate the taint (and select the label) land there.
#
# Everything it owns lives in RUN_DIR/node: containerd's config, root, state, socket and runc
# state, the CNI config and IPAM state, the kubelet's root, certificates and pod logs. Two
# environments (other run directory and port base) each have their own, side by side.

NODE_DIR="${RUN_DIR}/node"
CTRD_DIR="${NODE_DIR}/containerd"
CTRD_SOCK="${CTRD_DIR}/containerd.sock"
CNI_BIN_DIR="${FLOTILLA_CNI_BIN_DIR:-/usr/lib/cni}"
HOST_NODE_TIMEOUT="${FLOTILLA_HOST_NODE_TIMEOUT:-120}"
# Machine-wide state the kubelets of all environments share (see save_machine_state).
MACHINE_STATE=/run/flotilla-host-node.state

kubelet_port() { echo $(( PORT_BASE + 7367 )); }
kubelet_healthz_port() { echo $(( PORT_BASE + 7368 )); }
host_node_name() { echo "$1-host"; }
# The bridge of the pods that do not use the host network: unique per environment (port base).
host_bridge() { echo "flot${PORT_BASE}"; }
# Its subnet: 10.<member index>.<128 + PORT_BASE mod 127>.0/24. The member's node-ipam hands the
# /24s of its pod CIDR 10.N.0.0/16 out from the bottom (a few nodes), so the upper half is free;
# the third octet differs per port base, so that two environments' bridges never route the same
# subnet. The bridge's .1 is the node's InternalIP, where the kubelet listens.
host_subnet_octet() { echo $(( 128 + PORT_BASE % 127 )); }
host_subnet() { echo "10.$(cluster_index "$1").$(host_subnet_octet).0/24"; }
host_node_ip() { echo "10.$(cluster_index "$1").$(host_subnet_octet).1"; }

node_ctr() { ctr -a "${CTRD_SOCK}" -n k8s.io "$@"; }

# The host node's member and version checks, and what it needs of the machine, before anything
# starts.
check_host_node() { # member members-of-up
  local m="$1" n="$2"
  [[ "${m}" =~ ^member[0-9]+$ ]] && (( ${m#member} >= 1 && ${m#member} <= n )) \
    || die "up: --host-node must name one of the members of 'up' (member1..member${n}), got '${m}'"
  [[ "$(member_version "${m}")" == "${KUBERNETES_VERSION}" ]] \
    || die "up: the host node's kubelet is ${KUBERNETES_VERSION}, newer than ${m}'s $(member_version "${m}") (a kubelet may not be newer than its apiserver): pick another member, or --member-version ${m}=${KUBERNETES_VERSION}"
  [[ "$(id -u)" == 0 ]] \
    || die "up: --host-node needs root: containerd, runc and the kubelet manage mounts, cgroups and network namespaces"
  local missing=() c
  command -v containerd >/dev/null && command -v ctr >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  for c in bridge host-local loopback; do
    [[ -x "${CNI_BIN_DIR}/${c}" ]] || { missing+=(containernetworking-plugins); break; }
  done
  [[ ${#missing[@]} -eq 0 ]] \
    || die "up: the host node needs containerd, runc and the CNI plugins in ${CNI_BIN_DIR} (FLOTILLA_CNI_BIN_DIR); missing: ${missing[*]} (Debian: apt-get install containerd runc containernetworking-plugins)"
  for c in ip mount umount python3; do
    command -v "${c}" >/dev/null || die "up: the host node needs '${c}' (Debian: apt-get install iproute2 mount python3)"
  done
  (( ${#CTRD_SOCK} < 100 )) \
    || die "up: the run directory ${RUN_DIR} is too long for containerd's socket ${CTRD_SOCK} (a Unix socket path has at most 107 bytes): use a shorter --run-dir"
}

# The snapshotter of the node's containerd: overlayfs where the run directory's filesystem takes
# an overlay mount, else native (a full copy per container, slower but works everywhere).
pick_snapshotter() {
  local t="${NODE_DIR}/.overlay-test" s=native
  mkdir -p "${t}/lower" "${t}/upper" "${t}/work" "${t}/merged"
  if mount -t overlay overlay -o "lowerdir=${t}/lower,upperdir=${t}/upper,workdir=${t}/work" "${t}/merged" 2>/dev/null; then
    umount "${t}/merged"
    s=overlayfs
  fi
  rm -rf "${t}"
  echo "${s}"
}

write_containerd_config() { # member
  local snapshotter
  snapshotter="$(cat "${NODE_DIR}/snapshotter")"
  mkdir -p "${CTRD_DIR}" "${NODE_DIR}/cni/net.d"
  cat >"${CTRD_DIR}/config.toml" <<EOF
# containerd of the host node of ${RUN_DIR} (hack/clusters.sh). Everything under ${CTRD_DIR}.
version = 2
root = "${CTRD_DIR}/root"
state = "${CTRD_DIR}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = "${CTRD_SOCK}"
[ttrpc]
  address = "${CTRD_SOCK}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "${CTRD_DIR}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "${PAUSE_IMAGE}"
  # exec, attach and port-forward streams, proxied by the kubelet
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # This machine may not lower oom_score_adj below containerd's own: without this every pod
  # sandbox fails with "can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  disable_hugetlb_controller = true
  # No AppArmor profile loaded into the kernel, nothing left behind by 'down'.
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "${snapshotter}"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "${CTRD_DIR}/runc"
  # The loopback interface of every pod is set up by containerd itself (with ${CNI_BIN_DIR}/loopback).
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "${CNI_BIN_DIR}"
    conf_dir = "${NODE_DIR}/cni/net.d"
    max_conf_num = 1
EOF
}

# A bridge with host-local IPAM for the pods that do not use the host network. The bridge and
# its address are made by ensure_bridge (isGateway false: the plugin leaves the machine's
# net.ipv4.ip_forward alone; no masquerading: no iptables rules to clean up), so pods reach the
# host, each other and nothing beyond.
write_cni_config() { # member
  local m="$1"
  cat >"${NODE_DIR}/cni/net.d/10-flotilla.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "flotilla-$(host_bridge)",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$(host_bridge)",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$(host_subnet "${m}")", "gateway": "$(host_node_ip "${m}")"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "${NODE_DIR}/cni/ipam"
      }
    }
  ]
}
EOF
}

ensure_bridge() { # member
  local m="$1" br
  br="$(host_bridge)"
  if ! ip link show "${br}" >/dev/null 2>&1; then
    if [[ -n "$(ip -4 route show "$(host_subnet "${m}")" 2>/dev/null)" ]]; then
      die "the host node's subnet $(host_subnet "${m}") is routed already (another environment whose port base gives the same subnet?): pick another --port-base"
    fi
    ip link add "${br}" type bridge
    echo "${br}" >"${NODE_DIR}/bridge"
  fi
  ip addr replace "$(host_node_ip "${m}")/24" dev "${br}"
  ip link set "${br}" up
}

# Client certificates of the member's client CA: the kubelet's (system:node:<member>-host in
# system:nodes, so that the Node authorizer and NodeRestriction apply to it) and the apiserver's
# for the kubelet API (logs, exec, port-forward), which the ClusterRole system:kubelet-api-admin
# is bound to (setup_cluster_objects).
client_cert() { # member out-prefix subject
  local dir="${CLUSTERS}/$1"
  new_key "$2.key" "$(cluster_index "$1")"
  openssl req -new -key "$2.key" -subj "$3" -out "$2.csr" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >"$2.ext"
  openssl x509 -req -in "$2.csr" -CA "${dir}/client-ca.crt" -CAkey "${dir}/client-ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days 3650 -extfile "$2.ext" -out "$2.crt" 2>/dev/null
  rm -f "$2.csr" "$2.ext"
  chmod 600 "$2.key"
  [[ -s "$2.crt" ]] || die "could not create the certificate $2.crt"
}

gen_host_node_creds() { # member
  local m="$1"
  mkdir -p "${NODE_DIR}/pki"
  [[ -f "${CLUSTERS}/${m}/kubelet-client.crt" ]] \
    || client_cert "${m}" "${CLUSTERS}/${m}/kubelet-client" "/CN=flotilla:kube-apiserver-kubelet-client"
  [[ -f "${NODE_DIR}/pki/node.crt" ]] \
    || client_cert "${m}" "${NODE_DIR}/pki/node" "/O=system:nodes/CN=system:node:$(host_node_name "${m}")"
}

write_kubelet_config() { # member
  local m="$1" dir="${CLUSTERS}/$1"
  cat >"${NODE_DIR}/kubelet.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: ${m}
  cluster:
    server: https://127.0.0.1:$(cluster_port "${m}")
    certificate-authority: ${dir}/ca.crt
users:
- name: system:node:$(host_node_name "${m}")
  user:
    client-certificate: ${NODE_DIR}/pki/node.crt
    client-key: ${NODE_DIR}/pki/node.key
contexts:
- name: node@${m}
  context:
    cluster: ${m}
    user: system:node:$(host_node_name "${m}")
current-context: node@${m}
EOF
  cat >"${NODE_DIR}/kubelet.yaml" <<EOF
# The kubelet of the host node of ${RUN_DIR} (hack/clusters.sh).
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# It listens on the node address only (the bridge's, on this machine alone), and trusts nobody
# by default: a client certificate of ${m}'s client CA or a bearer token (TokenReview) proves who
# calls, and every request is authorized by ${m}'s apiserver (Webhook: a SubjectAccessReview), as
# on kubeadm nodes. AlwaysAllow would let any local user exec into its pods. The apiserver calls
# it for logs, exec and port-forward with a certificate bound to system:kubelet-api-admin.
address: $(host_node_ip "${m}")
port: $(kubelet_port)
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $(kubelet_healthz_port)
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: ${dir}/client-ca.crt}
authorization:
  mode: Webhook
# Its serving certificate is self-signed (in --cert-dir): the apiserver does not verify it.
rotateCertificates: false
serverTLSBootstrap: false
containerRuntimeEndpoint: unix://${CTRD_SOCK}
# cgroup v1 and a machine that is not a dedicated node: no per-QoS cgroups, no node allocatable
# enforcement, no iptables chains, swap tolerated.
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
makeIPTablesUtilChains: false
failSwapOn: false
registerNode: true
registerWithTaints:
- {key: ${HOST_NODE_TAINT}, effect: NoSchedule}
maxPods: 30
serializeImagePulls: false
# A busy development disk must not evict the pods, and the images imported by
# hack/clusters.sh are never collected (100 turns image garbage collection off).
evictionHard: {memory.available: 100Mi, nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%", imagefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
podLogsDir: ${NODE_DIR}/pod-logs
volumePluginDir: ${NODE_DIR}/kubelet/volume-plugins
clusterDomain: cluster.local
EOF
}

# The kubelet sets six kernel parameters machine-wide, as on every Kubernetes node
# (vm.overcommit_memory=1, kernel.panic=10, kernel.panic_on_oops=1, ...: it has no switch to leave
# them alone, protectKernelDefaults only makes it refuse to start), and creates
# /var/lib/kubelet/device-plugins and /var/log/containers whatever its root and log directories;
# containerd has its shims' sockets in /run/containerd/s, the pods' network namespaces in
# /run/netns and the CNI results in /var/lib/cni.
# The first host node on this machine records the parameters' values and which of these
# directories did not exist in MACHINE_STATE; the last one to go restores and removes them.
KUBELET_SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes)
KUBELET_SHARED_DIRS=(/var/lib/kubelet /var/lib/kubelet/device-plugins /var/log/containers
  /run/containerd /run/containerd/s /run/netns /var/lib/cni /var/lib/cni/results)

# Succeeds when a kubelet runs on this machine (another environment's host node, or any other;
# one that exited and was not reaped yet does not count).
kubelet_running() {
  local p stat
  for p in /proc/[0-9]*; do
    stat="$(cat "${p}/stat" 2>/dev/null)" || continue
    [[ "${stat}" == *" (kubelet) "[!Z]* ]] && return 0
  done
  return 1
}

save_machine_state() {
  [[ -f "${MACHINE_STATE}" ]] && return 0
  # A kubelet that is not ours already changed the parameters: nothing to record.
  kubelet_running && return 0
  local k d
  {
    for k in "${KUBELET_SYSCTLS[@]}"; do echo "sysctl ${k} $(cat "/proc/sys/${k}")"; done
    for d in "${KUBELET_SHARED_DIRS[@]}"; do [[ -e "${d}" ]] || echo "created ${d}"; done
  } >"${MACHINE_STATE}.tmp"
  mv "${MACHINE_STATE}.tmp" "${MACHINE_STATE}"
}

restore_machine_state() {
  [[ -f "${MACHINE_STATE}" ]] || return 0
  kubelet_running && return 0
  local what a b dirs=()
  while read -r what a b; do
    case "${what}" in
      sysctl) echo "${b}" >"/proc/sys/${a}" 2>/dev/null || log "warning: could not restore ${a//\//.}=${b}" ;;
      created) dirs+=("${a}") ;;
    esac
  done <"${MACHINE_STATE}"
  # The kubelet's device-plugin socket and checkpoint, in a directory that was not there before.
  local d
  for d in "${dirs[@]}"; do
    if [[ "${d}" == /var/lib/kubelet/device-plugins ]]; then
      rm -f "${d}/kubelet.sock" "${d}/kubelet_internal_checkpoint"
    fi
  done
  # Deepest first; rmdir keeps whatever something else put there since.
  for d in $(printf '%s\n' "${dirs[@]}" | sort -r); do
    mountpoint -q "${d}" 2>/dev/null || rmdir "${d}" 2>/dev/null || true
  done
  rm -f "${MACHINE_STATE}"
}

wait_containerd() { # member
  local t0; t0="$(now)"
  until node_ctr version >/dev/null 2>&1; do
    proc_alive "$1.containerd" || { tail_log "$1.containerd"; die "the host node's containerd exited during start-up"; }
    (( $(now) - t0 < 30 )) || { tail_log "$1.containerd"; die "the host node's containerd did not answer on ${CTRD_SOCK} within 30s"; }
    sleep 0.3
  done
}

# The name the CRI looks an image up by (docker.io/library/ for a short name).
normalize_ref() { # ref
  local first="${1%%/*}"
  if [[ "$1" != */* ]]; then echo "docker.io/library/$1"
  elif [[ "${first}" == *.* || "${first}" == *:* || "${first}" == localhost ]]; then echo "$1"
  else echo "docker.io/$1"; fi
}

# Imports OCI archives into the host node's containerd (namespace k8s.io, unpacked for its
# snapshotter); prints each image's name. An image a short name registers ("flotilla:TAG") is also
# tagged with the name the CRI looks it up by (docker.io/library/flotilla:TAG).
import_images() { # archives...
  local a out name full
  for a in "$@"; do
    out="$(node_ctr images import --snapshotter "$(cat "${NODE_DIR}/snapshotter")" "${a}" 2>&1)" \
      || { printf '%s\n' "${out}" >&2; die "could not import ${a} into the host node's containerd"; }
    for name in $(sed -n 's/^unpacking \([^ ]*\) (sha256:.*/\1/p' <<<"${out}"); do
      full="$(normalize_ref "${name}")"
      [[ "${full}" == "${name}" ]] || node_ctr images tag --force "${name}" "${full}" >/dev/null
      echo "${full}"
    done
  done
}

wait_node_ready() { # member
  local m="$1" node t0
  node="$(host_node_name "$1")"; t0="$(now)"
  until [[ "$(kc "${m}" get node "${node}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]; do
    proc_alive "${m}.kubelet" || { tail_log "${m}.kubelet"; die "the kubelet of ${node} exited during start-up"; }
    proc_alive "${m}.containerd" || { tail_log "${m}.containerd"; die "the containerd of ${node} exited during start-up"; }
    if (( $(now) - t0 >= HOST_NODE_TIMEOUT )); then
      kc "${m}" get node "${node}" -o wide >&2 || true
      tail_log "${m}.kubelet"
      die "node ${node} not Ready after ${HOST_NODE_TIMEOUT}s"
    fi
    sleep 1
  done
}

# Starts (or restarts what died of) the host node of MEMBER and waits until its Node is Ready.
start_host_node() { # member
  local m="$1" t0 archives images
  t0="$(now)"
  mkdir -p "${NODE_DIR}/kubelet" "${NODE_DIR}/pod-logs" "${NODE_DIR}/cni/ipam"
  echo "${m}" >"${NODE_DIR}/member"
  [[ -f "${NODE_DIR}/snapshotter" ]] || pick_snapshotter >"${NODE_DIR}/snapshotter"
  write_containerd_config "${m}"
  write_cni_config "${m}"
  ensure_bridge "${m}"
  save_machine_state
  # umask 022 (this script runs with 077 once write_kubeconfig ran): containerd's snapshots are the
  # containers' root directories, which a non-root user must be able to search.
  (umask 022 && start_proc "${m}.containerd" containerd --config "${CTRD_DIR}/config.toml")
  wait_containerd "${m}"
  # The component images before the kubelet, so no pod of it ever tries to pull them.
  archives="$("${HACK_DIR}/build-image.sh" --components)" || die "building the component images failed"
  # shellcheck disable=SC2086
  images="$(import_images ${archives} | xargs)"
  gen_host_node_creds "${m}"
  write_kubelet_config "${m}"
  (umask 022 && start_proc "${m}.kubelet" "${TOOLS_BIN}/kubelet" --config "${NODE_DIR}/kubelet.yaml" \
    --kubeconfig "${NODE_DIR}/kubelet.kubeconfig" --root-dir "${NODE_DIR}/kubelet" \
    --cert-dir "${NODE_DIR}/pki" --hostname-override "$(host_node_name "${m}")" \
    --node-ip "$(host_node_ip "${m}")" --node-labels "$(host_node_labels "${m}")")
  wait_node_ready "${m}"
  log "host node $(host_node_name "${m}") Ready in ${m} ($(( $(now) - t0 ))s): kubelet on $(host_node_ip "${m}"):$(kubelet_port), containerd on ${CTRD_SOCK} ($(cat "${NODE_DIR}/snapshotter")); images: ${images}"
}

host_node_objects_yaml() { # member
  cat <<EOF
# The apiserver's client certificate for the kubelet API (logs, exec, port-forward).
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: flotilla:kube-apiserver-kubelet-client
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:kubelet-api-admin
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: flotilla:kube-apiserver-kubelet-client
---
# Volumes on the host node: PersistentVolumes made by hand (local or hostPath, with node
# affinity to $(host_node_name "$1")); no provisioner. WaitForFirstConsumer, as for every local
# volume: a claim is bound only once its pod is scheduled, so the scheduler weighs the pod's
# other constraints (the taint, its node selector) together with the volume's node.
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: flotilla-local
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
EOF
}

# The mount points under a directory, deepest first.
mounts_under() { # dir
  awk -v d="$1/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r
}

# Stops the host node and removes everything it made: the kubelet first, then every container
# and shim of its containerd, containerd, then the mounts (the kubelet's secret and token tmpfs,
# the containers' rootfs), network namespaces, cgroups, the bridge and the kubelet's log links.
# Works from the files in NODE_DIR alone, also when containerd or the kubelet died.
teardown_host_node() {
  [[ -d "${NODE_DIR}" ]] || return 0
  local m="" what x netns=() cgroups=() ids=() sockets=() pid p
  m="$(cat "${NODE_DIR}/member" 2>/dev/null || true)"
  [[ -z "${m}" ]] || stop_proc "${m}.kubelet"
  # The pod sandboxes' network namespaces and the containers' cgroups, from the task bundles.
  while read -r what x; do
    case "${what}" in
      netns) netns+=("${x}") ;;
      cgroup) cgroups+=("${x}") ;;
      id) ids+=("${x}") ;;
      socket) sockets+=("${x}") ;;
    esac
  done < <(python3 - "${CTRD_DIR}/state/io.containerd.runtime.v2.task/k8s.io" <<'EOF' 2>/dev/null || true
import glob, json, os, sys
for f in glob.glob(os.path.join(sys.argv[1], "*", "config.json")):
    print("id", os.path.basename(os.path.dirname(f)))
    try:
        with open(os.path.join(os.path.dirname(f), "address")) as a:
            address = a.read().strip()
        if address.startswith("unix:///run/containerd/s/"):
            print("socket", address[len("unix://"):])
    except OSError:
        pass
    try:
        linux = json.load(open(f)).get("linux", {})
    except (OSError, ValueError):
        continue
    for ns in linux.get("namespaces", []):
        path = ns.get("path", "")
        if ns.get("type") == "network" and path.startswith(("/var/run/netns/", "/run/netns/")):
            print("netns", path)
    if linux.get("cgroupsPath", "").startswith("/"):
        print("cgroup", linux["cgroupsPath"])
EOF
  )
  if [[ -n "${m}" ]] && proc_alive "${m}.containerd"; then
    local tasks
    tasks="$(node_ctr tasks ls -q 2>/dev/null || true)"
    for x in ${tasks}; do node_ctr tasks kill -s SIGKILL "${x}" >/dev/null 2>&1 || true; done
    # The shim unmounts the container's rootfs on delete, and exits with its last task.
    for x in ${tasks}; do node_ctr tasks delete -f "${x}" >/dev/null 2>&1 || true; done
  fi
  [[ -z "${m}" ]] || stop_proc "${m}.containerd"
  # Shims left (containerd died, or a delete failed): they name our socket in their command line.
  local shims=()
  for p in /proc/[0-9]*; do
    [[ "$(tr '\0' ' ' <"${p}/cmdline" 2>/dev/null)" == *containerd-shim*" -address ${CTRD_SOCK} "* ]] \
      && shims+=("${p#/proc/}")
  done
  for pid in "${shims[@]}"; do
    # Its containers' first processes (each the init of its own PID namespace) first.
    for p in $(ps -o pid= --ppid "${pid}" 2>/dev/null); do kill -KILL "${p}" 2>/dev/null || true; done
    kill -KILL "${pid}" 2>/dev/null || true
  done
  for _ in $(seq 50); do
    local left=0
    for pid in "${shims[@]}"; do [[ -d "/proc/${pid}" ]] && left=1; done
    (( left )) || break
    sleep 0.1
  done
  # The sockets of shims that could not remove theirs.
  for x in "${sockets[@]}"; do rm -f "${x}"; done
  for x in "${netns[@]}"; do
    umount "${x}" 2>/dev/null || umount -l "${x}" 2>/dev/null || true
    rm -f "${x}"
  done
  # The CNI results cached for the pods (a network delete would have removed them).
  rm -f /var/lib/cni/results/"flotilla-$(cat "${NODE_DIR}/bridge" 2>/dev/null || echo none)"-*
  for x in "${ids[@]}"; do rm -f "/var/lib/cni/results/cni-loopback-${x}-lo"; done
  for x in $(mounts_under "${RUN_DIR}"); do
    umount "${x}" 2>/dev/null || umount -l "${x}" 2>/dev/null || log "warning: could not unmount ${x}"
  done
  for x in "${cgroups[@]}"; do
    for p in /sys/fs/cgroup/*"${x}" /sys/fs/cgroup"${x}"; do
      [[ -d "${p}" ]] && rmdir "${p}" 2>/dev/null || true
    done
    # Its parent (/k8s.io) too, when no other container is left in it.
    for p in /sys/fs/cgroup/*"$(dirname "${x}")"; do
      [[ -d "${p}" && "$(dirname "${x}")" != / ]] && rmdir "${p}" 2>/dev/null || true
    done
  done
  if [[ -f "${NODE_DIR}/bridge" ]]; then
    ip link del "$(cat "${NODE_DIR}/bridge")" 2>/dev/null || true
  fi
  # The kubelet's links to our pods' logs.
  for p in /var/log/containers/*.log; do
    [[ -L "${p}" && "$(readlink "${p}")" == "${NODE_DIR}/pod-logs/"* ]] && rm -f "${p}"
  done
  restore_machine_state
  if [[ -n "$(mounts_under "${RUN_DIR}")" ]]; then
    log "warning: mounts under ${RUN_DIR} are left (see above): not deleting ${NODE_DIR}"
    return 0
  fi
  rm -rf --one-file-system "${NODE_DIR}"
  [[ -z "${m}" ]] || log "host node $(host_node_name "${m}") stopped and removed"
}

# ---------------------------------------------------------------------------------------------
# Commands

# Prints the clusters of which at least one process is not running.
clusters_not_running() {
  local c p
  for c in $(all_clusters); do
    for p in $(cluster_components "${c}"); do
      if ! proc_alive "${p}"; then echo "${c}"; break; fi
    done
  done
}

any_alive() {
  local p
  for p in $(recorded_procs); do proc_alive "${p}" && return 0; done
  return 1
}

cmd_env() {
  load_conf
  local hub="" mk="" mu="" c
  for c in $(all_clusters); do
    if [[ "$(cluster_role "${c}")" == hub ]]; then hub="${c}"; continue; fi
    mk+="${mk:+,}${c}=${KUBECONFIGS}/${c}.kubeconfig"
    mu+="${mu:+,}${c}=${KUBECONFIGS}/${c}-user.kubeconfig"
  done
  cat <<EOF
export FLOTILLA_RUN_DIR=${RUN_DIR}
export FLOTILLA_TOOLS_BIN=${TOOLS_BIN}
EOF
  if [[ -n "${hub}" ]]; then
    cat <<EOF
export FLOTILLA_HUB_KUBECONFIG=${KUBECONFIGS}/${hub}.kubeconfig
export FLOTILLA_HUB_USER_KUBECONFIG=${KUBECONFIGS}/${hub}-user.kubeconfig
EOF
  elif [[ -f "${KUBECONFIGS}/${CHART_HUB_KUBECONFIG}" ]]; then
    # No hub of processes (up --no-hub): the hub a chart runs, whose kubeconfig the quick start
    # stored here.
    echo "export FLOTILLA_HUB_KUBECONFIG=${KUBECONFIGS}/${CHART_HUB_KUBECONFIG}"
  fi
  cat <<EOF
export FLOTILLA_MEMBER_KUBECONFIGS=${mk}
export FLOTILLA_MEMBER_USER_KUBECONFIGS=${mu}
EOF
  if [[ -n "${HOST_MEMBER}" ]]; then
    cat <<EOF
export FLOTILLA_HOST_MEMBER=${HOST_MEMBER}
export FLOTILLA_HOST_NODE=$(host_node_name "${HOST_MEMBER}")
export FLOTILLA_CONTAINERD_ADDRESS=${CTRD_SOCK}
EOF
  fi
}

cmd_up() {
  local n=3 host="${FLOTILLA_HOST_NODE:-}" no_hub=0
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --no-hub) no_hub=1; shift ;;
      --members) n="$2"; shift 2 ;;
      --members=*) n="${1#*=}"; shift ;;
      --host-node) host="${2:?--host-node needs a member name}"; shift 2 ;;
      --host-node=*) host="${1#*=}"; shift ;;
      *) die "up: unknown argument '$1' (see --help)" ;;
    esac
  done
  [[ "${n}" =~ ^[0-9]+$ ]] || die "up: --members needs a number, got '${n}'"
  [[ "${PORT_BASE}" =~ ^[0-9]+$ ]] && (( PORT_BASE > 1024 && PORT_BASE + 7368 < 65536 )) \
    || die "up: --port-base must be a number in 1025..58167, got '${PORT_BASE}'"
  (( n <= MAX_MEMBER_INDEX )) || die "up: at most ${MAX_MEMBER_INDEX} members fit the CIDR plan, got ${n}"
  check_member_versions

  if [[ -f "${CONF}" ]]; then
    if any_alive; then
      load_conf
      [[ -z "${host}" || "${host}" == "${HOST_MEMBER}" ]] \
        || die "up: the environment in ${RUN_DIR} runs with host node '${HOST_MEMBER:-none}', not '${host}': 'down' first to change it"
      local stopped
      stopped="$(clusters_not_running | xargs)"
      if proc_alive etcd && [[ -z "${stopped}" ]]; then
        log "environment in ${RUN_DIR} is already running"
      else
        # Repair: start what crashed or was stopped; data in etcd is kept.
        log "environment in ${RUN_DIR} is partly running: starting ${stopped:-etcd} again"
        proc_alive etcd || { start_etcd; wait_etcd; }
        # shellcheck disable=SC2086
        [[ -z "${stopped}" ]] || start_clusters ${stopped}
      fi
      cmd_env
      return 0
    fi
    log "removing the stopped environment left in ${RUN_DIR}"
    cmd_down >/dev/null
  fi
  if ! "${HACK_DIR}/build-tools.sh" --check >/dev/null 2>&1; then
    log "building the tools first (hack/build-tools.sh; the first build takes about 10-15 minutes)"
    "${HACK_DIR}/build-tools.sh" >/dev/null
  fi
  require_tools
  local p ports=()
  if [[ -n "${host}" ]]; then
    check_host_node "${host}" "${n}"
    ports=("$(kubelet_port)" "$(kubelet_healthz_port)")
    for p in kubelet pause; do
      [[ -x "${TOOLS_BIN}/${p}" ]] || die "missing tools in ${TOOLS_BIN}: ${p} (run hack/build-tools.sh)"
    done
  fi
  for p in "${PORT_BASE}" $(seq $(( PORT_BASE + 1 )) $(( PORT_BASE + n ))) "$(etcd_port)" "$(etcd_peer_port)" "${ports[@]}"; do
    if port_in_use "${p}"; then
      die "port ${p} is in use (another environment?): pick another --port-base and --run-dir"
    fi
  done

  local T0; T0="$(now)"
  mkdir -p "${RUN_DIR}" "${CLUSTERS}" "${PIDS}" "${LOGS}"
  DATA_DIR="/dev/shm/flotilla-$(printf '%s' "${RUN_DIR}" | sha256sum | cut -c1-12)"
  cat >"${CONF}" <<EOF
PORT_BASE=${PORT_BASE}
DATA_DIR=${DATA_DIR}
TOOLS_BIN=${TOOLS_BIN}
KWOK_STAGES_DIR=${KWOK_STAGES_DIR}
HOST_MEMBER=${host}
NO_HUB=${no_hub}
EOF
  HOST_MEMBER="${host}"
  NO_HUB="${no_hub}"
  local names=() i hub=()
  if [[ "${NO_HUB}" != 1 ]]; then
    hub=(hub)
    prepare_cluster hub hub "${PORT_BASE}" "${KUBERNETES_VERSION}"
  fi
  for i in $(seq 1 "${n}"); do
    prepare_cluster "member${i}" member $(( PORT_BASE + i )) "$(member_version "member${i}")"
    names+=("member${i}")
  done
  [[ -z "${HOST_MEMBER}" ]] || gen_host_node_creds "${HOST_MEMBER}"
  log "PKI and kubeconfigs written to ${RUN_DIR} ($(( $(now) - T0 ))s)"
  for c in "${hub[@]}" "${names[@]}"; do log "  $(describe_cluster "${c}")"; done

  start_etcd
  wait_etcd
  log "etcd ready on 127.0.0.1:$(etcd_port) ($(( $(now) - T0 ))s)"
  start_clusters "${hub[@]}" "${names[@]}"
  if [[ ${n} -gt 0 ]]; then
    local t0; t0="$(now)"
    smoke_test "${names[@]}"
    log "smoke Deployment Available in ${names[*]} ($(( $(now) - t0 ))s)"
  fi
  log "environment up in $(( $(now) - T0 ))s: ${hub[*]:+hub + }${n} member(s); processes: $(recorded_procs | wc -l)"
  if [[ ${n} -ge 2 ]]; then
    log "older member(s): $(older_members | xargs) (see hack/clusters.sh --help for how the clusters differ)"
  fi
  cmd_env
}

cmd_down() {
  if [[ ! -d "${RUN_DIR}" ]]; then log "nothing to stop in ${RUN_DIR}"; return 0; fi
  local data=""
  if [[ -f "${CONF}" ]]; then data="$(sed -n 's/^DATA_DIR=//p' "${CONF}")"; fi
  # The host node first: the kubelet, its containers and containerd, their mounts and network.
  teardown_host_node
  # Reverse start order: controllers, agents and the like, then apiservers, then etcd.
  local p
  for p in $(recorded_procs | grep -vE '(\.apiserver|^etcd)$' || true); do stop_proc "${p}"; done
  for p in $(recorded_procs | grep -E '\.apiserver$' || true); do stop_proc "${p}"; done
  for p in $(recorded_procs); do stop_proc "${p}"; done
  if [[ -n "${data}" && "${data}" == /dev/shm/flotilla-* ]]; then rm -rf "${data}"; fi
  [[ -z "$(mounts_under "${RUN_DIR}")" ]] \
    || die "mounts under ${RUN_DIR} are left: not deleting it; unmount them and run 'down' again"
  rm -rf --one-file-system "${RUN_DIR}"
  log "environment in ${RUN_DIR} stopped and its data removed"
}

cmd_status() {
  load_conf
  local c p alive total ready code token
  printf '%-14s %-7s %-6s %-10s %-10s %-9s %s\n' CLUSTER ROLE PORT APISERVER PROCESSES VERSION DIFFERS
  printf '%-14s %-7s %-6s %-10s %-10s %-9s %s\n' etcd - "$(etcd_port)" \
    "$(curl -sf "http://127.0.0.1:$(etcd_port)/health" >/dev/null 2>&1 && echo healthy || echo down)" \
    "$(proc_alive etcd && echo 1/1 || echo 0/1)" "${ETCD_VERSION}" -
  for c in $(all_clusters); do
    alive=0; total=0
    for p in $(cluster_components "${c}"); do
      total=$(( total + 1 ))
      proc_alive "${p}" && alive=$(( alive + 1 ))
    done
    token="$(cat "${CLUSTERS}/${c}/admin.token")"
    code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 --cacert "${CLUSTERS}/${c}/ca.crt" \
      -H "Authorization: Bearer ${token}" "https://127.0.0.1:$(cluster_port "${c}")/readyz" || true)"
    case "${code}" in 200) ready=ready ;; 000) ready=unreachable ;; *) ready="http-${code}" ;; esac
    printf '%-14s %-7s %-6s %-10s %-10s %-9s %s\n' "${c}" "$(cluster_role "${c}")" "$(cluster_port "${c}")" \
      "${ready}" "${alive}/${total}" "$(cluster_version "${c}")" "$(cluster_traits "${c}")"
  done
  if [[ -n "${HOST_MEMBER}" ]]; then
    local node state
    node="$(host_node_name "${HOST_MEMBER}")"
    state="$(kc "${HOST_MEMBER}" get node "${node}" --request-timeout 3s \
      -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)"
    case "${state}" in True) state=Ready ;; "") state=unknown ;; *) state=NotReady ;; esac
    alive=0
    for p in containerd kubelet; do proc_alive "${HOST_MEMBER}.${p}" && alive=$(( alive + 1 )); done
    printf '%-14s %-7s %-6s %-10s %-10s %-9s %s\n' "${node}" node "$(kubelet_port)" "${state}" "${alive}/2" \
      "${KUBERNETES_VERSION}" "host node of ${HOST_MEMBER}: kubelet on $(host_node_ip "${HOST_MEMBER}"), containerd ${CTRD_SOCK}"
  fi
}

# One line on how a cluster differs from the others.
cluster_traits() { # name
  local index count cpu mem pods region
  index="$(cluster_index "$1")"
  if [[ "$(cluster_role "$1")" == hub ]]; then
    echo "services $(service_cidr 0), no nodes"
    return
  fi
  read -r count cpu mem pods region <<<"$(node_profile "${index}")"
  echo "services $(service_cidr "${index}"), pods $(pod_cidr "${index}"), ${count} node(s) of cpu ${cpu}/memory ${mem}/pods ${pods}, region ${region}"
}

describe_cluster() { # name
  echo "$1: Kubernetes $(cluster_version "$1"), $(cluster_traits "$1")"
}

# Members that run another version than the hub.
older_members() {
  local c
  for c in $(members); do [[ "$(cluster_version "${c}")" == "${KUBERNETES_VERSION}" ]] || echo "${c}"; done
  return 0
}

member_exists() { [[ -f "${CLUSTERS}/$1/role" && "$(cluster_role "$1")" == member ]]; }

cmd_stop_member() {
  local name="${1:?stop-member needs a member name}"
  load_conf
  member_exists "${name}" || die "no member named '${name}' in ${RUN_DIR} (members: $(members | xargs))"
  local p
  for p in $(cluster_components "${name}" | tr ' ' '\n' | tac); do stop_proc "${p}"; done
  log "member ${name} stopped: its apiserver on 127.0.0.1:$(cluster_port "${name}") is unreachable"
}

cmd_start_member() {
  local name="${1:?start-member needs a member name}"
  load_conf
  member_exists "${name}" || die "no member named '${name}' in ${RUN_DIR} (members: $(members | xargs))"
  proc_alive etcd || die "etcd of ${RUN_DIR} is not running"
  start_clusters "${name}"
  log "member ${name} started"
}

cmd_pause_member() {
  local name="${1:?pause-member needs a member name}"
  load_conf
  member_exists "${name}" || die "no member named '${name}' in ${RUN_DIR} (members: $(members | xargs))"
  signal_proc "${name}.apiserver" STOP || die "the apiserver of ${name} is not running"
  log "member ${name} paused: its apiserver on 127.0.0.1:$(cluster_port "${name}") accepts connections and never answers"
}

cmd_resume_member() {
  local name="${1:?resume-member needs a member name}"
  load_conf
  member_exists "${name}" || die "no member named '${name}' in ${RUN_DIR} (members: $(members | xargs))"
  signal_proc "${name}.apiserver" CONT || die "the apiserver of ${name} is not running"
  log "member ${name} resumed"
}

cmd_add_member() {
  local name="${1:?add-member needs a name}"; shift
  [[ "${name}" =~ ^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$ ]] \
    || die "add-member: '${name}' is not a valid name (lower-case letters, digits and '-', at most 32)"
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --version) MEMBER_VERSIONS+=("${name}=${2:?--version needs a version}"); shift 2 ;;
      --version=*) MEMBER_VERSIONS+=("${name}=${1#*=}"); shift ;;
      *) die "add-member: unknown argument '$1' (see --help)" ;;
    esac
  done
  load_conf
  [[ -e "${CLUSTERS}/${name}" ]] && die "add-member: a cluster named '${name}' already exists"
  proc_alive etcd || die "etcd of ${RUN_DIR} is not running: run 'hack/clusters.sh up' first"
  local port=$(( PORT_BASE + 1 )) c
  for c in $(all_clusters); do
    (( $(cluster_port "${c}") >= port )) && port=$(( $(cluster_port "${c}") + 1 ))
  done
  port_in_use "${port}" && die "add-member: port ${port} is in use"
  local t0; t0="$(now)"
  prepare_cluster "${name}" member "${port}" "$(member_version "${name}")"
  start_clusters "${name}"
  smoke_test "${name}"
  log "member ${name} added on port ${port} ($(( $(now) - t0 ))s): $(describe_cluster "${name}")"
  cmd_env
}

cmd_remove_member() {
  local name="${1:?remove-member needs a member name}"
  load_conf
  member_exists "${name}" || die "no member named '${name}' in ${RUN_DIR}"
  if [[ "${name}" == "${HOST_MEMBER}" ]]; then
    teardown_host_node
    sed -i 's/^HOST_MEMBER=.*/HOST_MEMBER=/' "${CONF}"
  fi
  cmd_stop_member "${name}" >/dev/null
  # Delete the member's keys from etcd through etcd's gRPC gateway (range /<name>/ .. /<name>0).
  local from to
  from="$(printf '/%s/' "${name}" | base64 -w0)"
  to="$(printf '/%s0' "${name}" | base64 -w0)"
  curl -sf -X POST "http://127.0.0.1:$(etcd_port)/v3/kv/deleterange" \
    -d "{\"key\":\"${from}\",\"range_end\":\"${to}\"}" >/dev/null \
    || log "warning: could not delete the data of ${name} from etcd"
  rm -rf "${CLUSTERS:?}/${name}" "${KUBECONFIGS}/${name}.kubeconfig" "${KUBECONFIGS}/${name}-user.kubeconfig"
  rm -f "${LOGS}/${name}".*.log
  log "member ${name} removed"
}

cmd_load_image() {
  [[ $# -ge 1 ]] || die "load-image needs at least one OCI archive (e.g. from hack/build-image.sh --dev)"
  load_conf
  [[ -n "${HOST_MEMBER}" ]] || die "the environment in ${RUN_DIR} has no host node: 'up --host-node MEMBER'"
  proc_alive "${HOST_MEMBER}.containerd" || die "the host node's containerd is not running: run 'hack/clusters.sh up'"
  local a t0
  for a in "$@"; do [[ -f "${a}" ]] || die "load-image: no such file: ${a}"; done
  t0="$(now)"
  import_images "$@"
  log "loaded into the containerd of $(host_node_name "${HOST_MEMBER}") ($(( $(now) - t0 ))s)"
}

# Commands that change the environment hold a lock, so parallel tests can add members safely.
with_lock() {
  mkdir -p "${RUN_DIR}"
  exec 9>"${RUN_DIR}/.lock"
  flock 9
  "$@"
}

case "${COMMAND}" in
  up) with_lock cmd_up "$@" ;;
  down) with_lock cmd_down ;;
  status) cmd_status ;;
  env) cmd_env ;;
  stop-member) with_lock cmd_stop_member "$@" ;;
  start-member) with_lock cmd_start_member "$@" ;;
  pause-member) with_lock cmd_pause_member "$@" ;;
  resume-member) with_lock cmd_resume_member "$@" ;;
  add-member) with_lock cmd_add_member "$@" ;;
  remove-member) with_lock cmd_remove_member "$@" ;;
  load-image) cmd_load_image "$@" ;;
  *) usage >&2; die "unknown command '${COMMAND}'" ;;
esac
