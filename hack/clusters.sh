#!/usr/bin/env bash
# A local Flotilla environment made of real Kubernetes control planes on one machine:
# one etcd, a hub (kube-apiserver + a controller-manager without workload controllers) and N
# members (kube-apiserver + controller-manager + scheduler + kwok with fake Nodes). The clusters
# differ the way a real fleet does: each has its own CAs, service and pod CIDRs, nodes and region,
# and one member runs an older Kubernetes minor. On request (up --host-node MEMBER) one member
# also gets one real node: containerd, runc and a kubelet, for pods that must really run
# (hack/host-node.sh). The files it writes and applies are rendered from hack/templates/.
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

# The host node's taint (NoSchedule) and label (see hack/host-node.sh).
# shellcheck disable=SC2034 # the templates use it (render)
HOST_NODE_TAINT=flotilla.dev/host-node
HOST_NODE_LABEL=flotilla.dev/host-node=true

usage() {
  render usage.txt VERSIONS="${KUBERNETES_VERSIONS[*]}" MEMBER_ROWS="$(for i in 1 2 3 4; do member_row "${i}"; done)"
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
    --run-dir=*|--port-base=*|--member-version=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
    --run-dir) RUN_DIR="$2"; shift 2 ;;
    --port-base) PORT_BASE="$2"; shift 2 ;;
    --member-version) MEMBER_VERSIONS+=("$2"); shift 2 ;;
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

# shellcheck source=hack/host-node.sh
source "${HACK_DIR}/host-node.sh"

recorded_procs() { [[ -d "${PIDS}" ]] && ls "${PIDS}" 2>/dev/null || true; }

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

require_tools() { # [host-member]: its host node's kubelet and pause too
  local missing=() v b
  for b in etcd kubectl kwok ${1:+kubelet pause}; do
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
# else its default (check_member_versions checked the entries).
member_version() { # name
  local e version=""
  for e in "${MEMBER_VERSIONS[@]}"; do
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

# The type of the keys of cluster N's CAs and certificates (new_key). Clusters differ here too:
# the hub and odd members use RSA, even members ECDSA P-256, as fleets assembled from several
# installers do.
key_type() { if (( $1 % 2 == 0 && $1 > 0 )); then echo ec; else echo rsa; fi; } # N

# Per-cluster PKI and credentials, none shared with another cluster:
#   ca.crt/key          serving CA (what kubeconfigs trust; kube-root-ca.crt publishes it)
#   serving.crt/key     the apiserver's certificate, for 127.0.0.1, localhost and the in-cluster
#                       names and address of the kubernetes Service
#   client-ca.crt/key   client CA: the apiserver accepts client certificates it signed, and the
#                       controller-manager signs approved CSRs with it
#   sa.key/pub          service-account signing key (each cluster also has its own issuer)
#   tokens.csv          static tokens of an admin (system:masters) and a non-admin user
gen_cluster_creds() { # name index
  local name="$1" dir="${CLUSTERS}/$1" first_ip keys admin user
  mkdir -p "${dir}"
  [[ -f "${dir}/tokens.csv" ]] && return 0
  first_ip="$(service_cidr "$2" | awk -F'[./]' '{print $1"."$2"."$3"."($4+1)}')"
  keys="$(key_type "$2")"
  new_ca "${dir}/ca" "/CN=flotilla-${name}-ca" "${keys}"
  issue_cert "${dir}/serving" "/CN=kube-apiserver" "${dir}/ca" "${keys}" extendedKeyUsage=serverAuth \
    "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:${first_ip},DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  new_ca "${dir}/client-ca" "/CN=flotilla-${name}-client-ca" "${keys}"
  openssl genrsa -out "${dir}/sa.key" 2048 2>/dev/null
  openssl rsa -in "${dir}/sa.key" -pubout -out "${dir}/sa.pub" 2>/dev/null
  admin="$(openssl rand -hex 24)"
  user="$(openssl rand -hex 24)"
  printf '%s,flotilla-admin,flotilla-admin,"system:masters"\n%s,flotilla-user,flotilla-user,"flotilla:users"\n' \
    "${admin}" "${user}" >"${dir}/tokens.csv"
  echo "${admin}" >"${dir}/admin.token"
  echo "${user}" >"${dir}/user.token"
  chmod 600 "${dir}/tokens.csv" "${dir}/sa.key" "${dir}/admin.token" "${dir}/user.token"
  [[ -f "${dir}/serving.crt" && -f "${dir}/client-ca.crt" ]] || die "could not create the PKI of ${name} in ${dir}"
}

write_kubeconfig() { # file cluster port token user
  local ca
  ca="$(base64 -w0 <"${CLUSTERS}/$2/ca.crt")"
  umask 077
  render kubeconfig.yaml CLUSTER="$2" SERVER_PORT="$3" CA_DATA="${ca}" TOKEN="$4" ACCOUNT="$5" >"$1"
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

etcd_healthy() { curl -sf "http://127.0.0.1:$(etcd_port)/health" >/dev/null 2>&1; }
wait_etcd() { wait_until 60 etcd etcd_healthy || { tail_log etcd; die "etcd not healthy after 60s"; }; }

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

# The HTTP status of a cluster's /readyz (000: unreachable).
readyz() { # name
  curl -s -o /dev/null -w '%{http_code}' --max-time 3 --cacert "${CLUSTERS}/$1/ca.crt" \
    -H "Authorization: Bearer $(cat "${CLUSTERS}/$1/admin.token")" "https://127.0.0.1:$(cluster_port "$1")/readyz" || true
}
apiserver_ready() { [[ "$(readyz "$1")" == 200 ]]; }

wait_apiserver() { # name
  wait_until "${APISERVER_TIMEOUT}" "$1.apiserver" apiserver_ready "$1" \
    || { tail_log "$1.apiserver"; die "the apiserver of $1 not ready after ${APISERVER_TIMEOUT}s"; }
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
  local procs="$1.apiserver $1.controller-manager"
  [[ "$(cluster_role "$1")" == hub ]] || procs+=" $1.scheduler $1.kwok"
  [[ "$1" != "${HOST_MEMBER}" ]] || procs+=" $1.containerd $1.kubelet"
  echo "${procs}"
}

fake_nodes_yaml() { # member
  local count cpu mem pods region i zones=(a b c d e f)
  read -r count cpu mem pods region <<<"$(node_profile "$(cluster_index "$1")")"
  for (( i = 0; i < count; i++ )); do
    render fake-node.yaml NODE="$1-node-${i}" CPU="${cpu}" MEMORY="${mem}" PODS="${pods}" \
      REGION="${region}" ZONE="${region}-${zones[i % 6]}"
  done
}

# The objects of every cluster, a member's fake Nodes, the host node's member's objects: one apply.
setup_cluster_objects() { # name
  {
    render cluster-objects.yaml
    [[ "$(cluster_role "$1")" != member ]] || fake_nodes_yaml "$1"
    [[ "$1" != "${HOST_MEMBER}" ]] || render host-node-objects.yaml NODE="$(host_node_name "$1")"
  } | kc "$1" apply -f - >/dev/null
}

smoke_test() { # members...
  local m
  for m in "$@"; do render smoke.yaml | kc "${m}" apply -f - >/dev/null; done
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
  printf 'export %s\n' "FLOTILLA_RUN_DIR=${RUN_DIR}" "FLOTILLA_TOOLS_BIN=${TOOLS_BIN}"
  if [[ -n "${hub}" ]]; then
    printf 'export %s\n' "FLOTILLA_HUB_KUBECONFIG=${KUBECONFIGS}/${hub}.kubeconfig" \
      "FLOTILLA_HUB_USER_KUBECONFIG=${KUBECONFIGS}/${hub}-user.kubeconfig"
  elif [[ -f "${KUBECONFIGS}/${CHART_HUB_KUBECONFIG}" ]]; then
    # No hub of processes (up --no-hub): the hub a chart runs, whose kubeconfig the quick start
    # stored here.
    echo "export FLOTILLA_HUB_KUBECONFIG=${KUBECONFIGS}/${CHART_HUB_KUBECONFIG}"
  fi
  printf 'export %s\n' "FLOTILLA_MEMBER_KUBECONFIGS=${mk}" "FLOTILLA_MEMBER_USER_KUBECONFIGS=${mu}"
  [[ -z "${HOST_MEMBER}" ]] || printf 'export %s\n' "FLOTILLA_HOST_MEMBER=${HOST_MEMBER}" \
    "FLOTILLA_HOST_NODE=$(host_node_name "${HOST_MEMBER}")" "FLOTILLA_CONTAINERD_ADDRESS=${CTRD_SOCK}"
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
  require_tools "${host}"
  local p ports=()
  if [[ -n "${host}" ]]; then
    check_host_node "${host}" "${n}"
    ports=("$(kubelet_port)" "$(kubelet_healthz_port)")
  fi
  for p in "${PORT_BASE}" $(seq $(( PORT_BASE + 1 )) $(( PORT_BASE + n ))) "$(etcd_port)" "$(etcd_peer_port)" "${ports[@]}"; do
    ! port_in_use "${p}" || die "port ${p} is in use (another environment?): pick another --port-base and --run-dir"
  done

  local T0; T0="$(now)"
  mkdir -p "${RUN_DIR}" "${CLUSTERS}" "${PIDS}" "${LOGS}"
  DATA_DIR="/dev/shm/flotilla-$(printf '%s' "${RUN_DIR}" | sha256sum | cut -c1-12)"
  printf '%s\n' "PORT_BASE=${PORT_BASE}" "DATA_DIR=${DATA_DIR}" "TOOLS_BIN=${TOOLS_BIN}" \
    "KWOK_STAGES_DIR=${KWOK_STAGES_DIR}" "HOST_MEMBER=${host}" "NO_HUB=${no_hub}" >"${CONF}"
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

status_row() { printf '%-14s %-7s %-6s %-10s %-10s %-9s %s\n' "$@"; }
# How many of the processes run, as running/all.
procs_running() { local p n=0; for p in "$@"; do proc_alive "${p}" && n=$(( n + 1 )); done; echo "${n}/$#"; }

cmd_status() {
  load_conf
  local c ready
  status_row CLUSTER ROLE PORT APISERVER PROCESSES VERSION DIFFERS
  status_row etcd - "$(etcd_port)" "$(etcd_healthy && echo healthy || echo down)" \
    "$(procs_running etcd)" "${ETCD_VERSION}" -
  for c in $(all_clusters); do
    ready="$(readyz "${c}")"
    case "${ready}" in 200) ready=ready ;; 000) ready=unreachable ;; *) ready="http-${ready}" ;; esac
    # shellcheck disable=SC2046 # one process a word
    status_row "${c}" "$(cluster_role "${c}")" "$(cluster_port "${c}")" "${ready}" \
      "$(procs_running $(cluster_components "${c}"))" "$(cluster_version "${c}")" "$(cluster_traits "${c}")"
  done
  if [[ -n "${HOST_MEMBER}" ]]; then
    local node state
    node="$(host_node_name "${HOST_MEMBER}")"
    state="$(host_node_ready "${HOST_MEMBER}" --request-timeout 3s)"
    case "${state}" in True) state=Ready ;; "") state=unknown ;; *) state=NotReady ;; esac
    status_row "${node}" node "$(kubelet_port)" "${state}" \
      "$(procs_running "${HOST_MEMBER}.containerd" "${HOST_MEMBER}.kubelet")" \
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

# Loads the environment, of which NAME must be a member.
load_member() { # name
  load_conf
  [[ -f "${CLUSTERS}/$1/role" && "$(cluster_role "$1")" == member ]] \
    || die "no member named '$1' in ${RUN_DIR} (members: $(members | xargs))"
}

cmd_stop_member() {
  local name="${1:?stop-member needs a member name}"
  load_member "${name}"
  local p
  for p in $(cluster_components "${name}" | tr ' ' '\n' | tac); do stop_proc "${p}"; done
  log "member ${name} stopped: its apiserver on 127.0.0.1:$(cluster_port "${name}") is unreachable"
}

cmd_start_member() {
  local name="${1:?start-member needs a member name}"
  load_member "${name}"
  proc_alive etcd || die "etcd of ${RUN_DIR} is not running"
  start_clusters "${name}"
  log "member ${name} started"
}

cmd_pause_member() {
  local name="${1:?pause-member needs a member name}"
  load_member "${name}"
  signal_proc "${name}.apiserver" STOP || die "the apiserver of ${name} is not running"
  log "member ${name} paused: its apiserver on 127.0.0.1:$(cluster_port "${name}") accepts connections and never answers"
}

cmd_resume_member() {
  local name="${1:?resume-member needs a member name}"
  load_member "${name}"
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
  load_member "${name}"
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
