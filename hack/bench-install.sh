#!/usr/bin/env bash
# Measures installing Flotilla with its chart on the local environment's real node, next to the
# process-based environment in the same run: the time from `helm install` to a ready hub (every
# pod Ready, the CRDs installed), and the resident memory of the chart's pods (etcd,
# kube-apiserver, kube-controller-manager, the four controllers) and of the node agent (kubelet,
# containerd and its shims) beside the same components run as local processes by hack/clusters.sh.
# Runs an environment of its own (run directory ${TMPDIR:-/tmp}/flotilla-bench-install, ports from
# 22443: one member with the real node) and tears it down afterwards. Prints Markdown tables.
#
# Usage: hack/bench-install.sh [--runs N] [--settle SECONDS]
#   --runs N          install and uninstall N times (default 3); the times of every run are shown
#   --settle SECONDS  wait this long after the last install before reading memory (default 30)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "${REPO_ROOT}"

RUNS=3
SETTLE=30
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --settle) SETTLE="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1'" ;;
  esac
done

RUN="${TMPDIR:-/tmp}/flotilla-bench-install"
PORT_BASE=22443
CL=("${HACK_DIR}/clusters.sh" --run-dir "${RUN}" --port-base "${PORT_BASE}")
NS=flotilla-system
RELEASE=flotilla
"${HACK_DIR}/build-tools.sh" >/dev/null
cargo build --workspace --bins --quiet
image="$("${HACK_DIR}/build-image.sh" --dev)"
"${CL[@]}" down >/dev/null 2>&1 || true
trap '"${CL[@]}" down >/dev/null 2>&1 || true' EXIT

eval "$("${CL[@]}" up --members 1 --host-node member1)"
"${CL[@]}" load-image "${image}" >/dev/null
HOST_KUBECONFIG="${FLOTILLA_MEMBER_KUBECONFIGS#member1=}"
K=("${TOOLS_BIN}/kubectl" --kubeconfig "${HOST_KUBECONFIG}")
HELM=("${TOOLS_BIN}/helm" --kubeconfig "${HOST_KUBECONFIG}" --namespace "${NS}")

mapfile -t ports < <(chart_port_values $(( PORT_BASE + 2637 )))
values=(--values deploy/quickstart/values-local.yaml --set hub.keepDataOnUninstall=false "${ports[@]}")

volume() { # a fresh etcd volume for one install
  local dir="${RUN}/volumes/etcd-$1"
  "${K[@]}" delete pv "${RELEASE}-etcd" --ignore-not-found --wait=false >/dev/null
  "${K[@]}" patch pv "${RELEASE}-etcd" --type merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
  etcd_volume_yaml "${RELEASE}" "${NS}" "${dir}" "${FLOTILLA_HOST_NODE}" | "${K[@]}" apply -f - >/dev/null
}

times=()
for run in $(seq "${RUNS}"); do
  volume "${run}"
  t0="$(date +%s%N)"
  "${HELM[@]}" install "${RELEASE}" charts/flotilla --create-namespace "${values[@]}" \
    --wait --wait-for-jobs --timeout 5m >/dev/null 2> >(grep -v 'found symbolic link' >&2)
  times+=("$(( ($(date +%s%N) - t0) / 1000000 ))")
  log "install ${run}: ${times[-1]} ms"
  if (( run < RUNS )); then
    "${HELM[@]}" uninstall "${RELEASE}" --wait >/dev/null
    "${K[@]}" -n "${NS}" wait --for=delete pod --all --timeout 120s >/dev/null 2>&1 || true
  fi
done
sleep "${SETTLE}"

# The RSS (kB) of one process.
rss() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
recorded_rss() { # process name in the run directory
  local pid
  read -r pid _ <"${RUN}/pids/$1"
  rss "${pid}"
}
# The RSS (kB) of the containers' processes by the name of their program (argv[0]), and of the
# shims themselves: the containers are the descendants of this environment's shims.
declare -A container_kb=()
shims=0
descendants() { local c; for c in $(pgrep -P "$1" 2>/dev/null); do echo "${c}"; descendants "${c}"; done; }
for shim in $(pgrep -f "containerd-shim.*-address ${RUN}" 2>/dev/null); do
  shims=$(( shims + $(rss "${shim}") ))
  for p in $(descendants "${shim}"); do
    name="$(tr '\0' '\n' <"/proc/${p}/cmdline" 2>/dev/null | head -1)"
    name="$(basename "${name:-unknown}")"
    container_kb["${name}"]=$(( ${container_kb["${name}"]:-0} + $(rss "${p}") ))
  done
done
container_rss() { echo "${container_kb["$1"]:-0}"; }
mib() { awk -v k="$1" 'BEGIN {printf "%.0f", k / 1024}'; }


echo
echo "| helm install --wait --wait-for-jobs to a ready hub | $(for i in "${!times[@]}"; do printf 'run %d |' $(( i + 1 )); done)"
echo "|---|$(for _ in "${times[@]}"; do printf -- '---:|'; done)"
echo "| seconds | $(for t in "${times[@]}"; do printf '%d.%d |' $(( t / 1000 )) $(( t % 1000 / 100 )); done)"
echo
echo "| component | as a local process (hack/clusters.sh), RSS MiB | as a pod of the chart on the real node, RSS MiB |"
echo "|---|---:|---:|"
printf '| etcd | %s (shared by hub + member1) | %s |\n' "$(mib "$(recorded_rss etcd)")" "$(mib "$(container_rss etcd)")"
printf '| kube-apiserver (hub) | %s | %s |\n' "$(mib "$(recorded_rss hub.apiserver)")" "$(mib "$(container_rss kube-apiserver)")"
printf '| kube-controller-manager (hub) | %s | %s |\n' "$(mib "$(recorded_rss hub.controller-manager)")" "$(mib "$(container_rss kube-controller-manager)")"
for c in registration syncer splitter negotiator; do
  printf '| flotilla-%s (idle, no members) | - | %s |\n' "${c}" "$(mib "$(container_rss "flotilla-${c}")")"
done
printf '| kubelet | - | %s |\n' "$(mib "$(recorded_rss member1.kubelet)")"
printf '| containerd | - | %s |\n' "$(mib "$(recorded_rss member1.containerd)")"
printf '| pause (one per pod) | - | %s |\n' "$(mib "$(container_rss pause)")"
printf '| containerd shims (one per pod) | - | %s |\n' "$(mib "${shims}")"
