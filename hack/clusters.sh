#!/usr/bin/env bash
# A local Flotilla environment made of real Kubernetes control planes on one machine:
# one etcd, a hub (kube-apiserver + a controller-manager without workload controllers) and N
# members (kube-apiserver + controller-manager + scheduler + kwok with fake Nodes). The clusters
# differ the way a real fleet does: each has its own CAs, service and pod CIDRs, nodes and region,
# and one member runs an older Kubernetes minor.
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

usage() {
  cat <<EOF
Usage: hack/clusters.sh [--run-dir DIR] [--port-base PORT] [--member-version NAME=VERSION]...
                        COMMAND [ARGS]

Commands:
  up [--members N]     start etcd, the hub and N members (default 3); on an environment that
                       is already running it only starts what crashed or was stopped
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

Options (also read from the environment):
  --run-dir DIR        FLOTILLA_RUN_DIR: where kubeconfigs, PKI, logs and PIDs live
                       (default: \${TMPDIR:-/tmp}/flotilla-env)
  --port-base PORT     FLOTILLA_PORT_BASE, used by 'up' only: the hub's apiserver listens on PORT,
                       member N on PORT+N, etcd on PORT+7347 and PORT+7357 (default 16443).
                       A second environment needs another run directory and port base; keep
                       PORT+7357 below 32768, where Linux hands out ephemeral ports.
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

Tools come from hack/build-tools.sh (run it first, or use hack/test.sh which does).
EOF
}

RUN_DIR="${FLOTILLA_RUN_DIR:-${TMPDIR:-/tmp}/flotilla-env}"
PORT_BASE="${FLOTILLA_PORT_BASE:-16443}"
HUB_PROFILING="${FLOTILLA_HUB_PROFILING:-false}"
MEMBER_PROFILING="${FLOTILLA_MEMBER_PROFILING:-false}"
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
  [[ -f "${CLUSTERS}/hub/version" ]] \
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
  local name="$1" dir="${CLUSTERS}/$1" profiling="${MEMBER_PROFILING}" gates=()
  [[ "$(cluster_role "${name}")" != hub ]] || profiling="${HUB_PROFILING}"
  [[ "$(cluster_version "${name}")" != "${KUBERNETES_VERSION}" ]] \
    || gates=(--feature-gates "${NEWEST_FEATURE_GATES}")
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
    --enable-priority-and-fairness=false --profiling="${profiling}" "${gates[@]}"
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

HUB_CONTROLLERS="namespace-controller,garbage-collector-controller,serviceaccount-controller,serviceaccount-token-controller,clusterrole-aggregation-controller,root-ca-certificate-publisher-controller,certificatesigningrequest-signing-controller"

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
    --use-service-account-credentials=false --profiling=false
  [[ "$(cluster_role "${name}")" == member ]] || return 0
  start_proc "${name}.scheduler" "${bin}/kube-scheduler" \
    --kubeconfig "${KUBECONFIGS}/${name}.kubeconfig" --leader-elect=false --secure-port 0 \
    --profiling=false
  local stages=() s
  for s in node-initialize node-heartbeat-with-lease pod-ready pod-complete pod-delete; do
    stages+=(--config "${KWOK_STAGES_DIR}/${s}.yaml")
  done
  start_proc "${name}.kwok" "${TOOLS_BIN}/kwok" \
    --kubeconfig "${KUBECONFIGS}/${name}.kubeconfig" --manage-all-nodes=true \
    --node-lease-duration-seconds 40 --cidr "$(pod_cidr "${index}")" "${stages[@]}"
}

cluster_components() { # name
  if [[ "$(cluster_role "$1")" == hub ]]; then
    echo "$1.apiserver $1.controller-manager"
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
export FLOTILLA_HUB_KUBECONFIG=${KUBECONFIGS}/${hub}.kubeconfig
export FLOTILLA_HUB_USER_KUBECONFIG=${KUBECONFIGS}/${hub}-user.kubeconfig
export FLOTILLA_MEMBER_KUBECONFIGS=${mk}
export FLOTILLA_MEMBER_USER_KUBECONFIGS=${mu}
EOF
}

cmd_up() {
  local n=3
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --members) n="$2"; shift 2 ;;
      --members=*) n="${1#*=}"; shift ;;
      *) die "up: unknown argument '$1' (see --help)" ;;
    esac
  done
  [[ "${n}" =~ ^[0-9]+$ ]] || die "up: --members needs a number, got '${n}'"
  [[ "${PORT_BASE}" =~ ^[0-9]+$ ]] && (( PORT_BASE > 1024 && PORT_BASE + 7357 < 65536 )) \
    || die "up: --port-base must be a number in 1025..58178, got '${PORT_BASE}'"
  (( n <= MAX_MEMBER_INDEX )) || die "up: at most ${MAX_MEMBER_INDEX} members fit the CIDR plan, got ${n}"
  check_member_versions

  if [[ -f "${CONF}" ]]; then
    if any_alive; then
      load_conf
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
  local p
  for p in "${PORT_BASE}" $(seq $(( PORT_BASE + 1 )) $(( PORT_BASE + n ))) "$(etcd_port)" "$(etcd_peer_port)"; do
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
EOF
  prepare_cluster hub hub "${PORT_BASE}" "${KUBERNETES_VERSION}"
  local names=() i
  for i in $(seq 1 "${n}"); do
    prepare_cluster "member${i}" member $(( PORT_BASE + i )) "$(member_version "member${i}")"
    names+=("member${i}")
  done
  log "PKI and kubeconfigs written to ${RUN_DIR} ($(( $(now) - T0 ))s)"
  for c in hub "${names[@]}"; do log "  $(describe_cluster "${c}")"; done

  start_etcd
  wait_etcd
  log "etcd ready on 127.0.0.1:$(etcd_port) ($(( $(now) - T0 ))s)"
  start_clusters hub "${names[@]}"
  if [[ ${n} -gt 0 ]]; then
    local t0; t0="$(now)"
    smoke_test "${names[@]}"
    log "smoke Deployment Available in ${names[*]} ($(( $(now) - t0 ))s)"
  fi
  log "environment up in $(( $(now) - T0 ))s: hub + ${n} member(s); processes: $(recorded_procs | wc -l)"
  if [[ ${n} -ge 2 ]]; then
    log "older member(s): $(older_members | xargs) (see hack/clusters.sh --help for how the clusters differ)"
  fi
  cmd_env
}

cmd_down() {
  if [[ ! -d "${RUN_DIR}" ]]; then log "nothing to stop in ${RUN_DIR}"; return 0; fi
  local data=""
  if [[ -f "${CONF}" ]]; then data="$(sed -n 's/^DATA_DIR=//p' "${CONF}")"; fi
  # Reverse start order: controllers, agents and the like, then apiservers, then etcd.
  local p
  for p in $(recorded_procs | grep -vE '(\.apiserver|^etcd)$' || true); do stop_proc "${p}"; done
  for p in $(recorded_procs | grep -E '\.apiserver$' || true); do stop_proc "${p}"; done
  for p in $(recorded_procs); do stop_proc "${p}"; done
  if [[ -n "${data}" && "${data}" == /dev/shm/flotilla-* ]]; then rm -rf "${data}"; fi
  rm -rf "${RUN_DIR}"
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
  *) usage >&2; die "unknown command '${COMMAND}'" ;;
esac
