#!/usr/bin/env bash
# Measures the local environment itself: warm 'up' time for the hub + N members, the resident
# memory of every component, and the cost of one extra member (add-member), side by side.
# Runs an environment of its own (run directory ${TMPDIR:-/tmp}/flotilla-bench-env, ports from
# 18443) and tears it down afterwards. Prints a Markdown table.
#
# Usage: hack/bench-env.sh [--members N] [--settle SECONDS]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MEMBERS=3
SETTLE=30
while [[ $# -gt 0 ]]; do
  case "$1" in
    --members) MEMBERS="$2"; shift 2 ;;
    --settle) SETTLE="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1'" ;;
  esac
done

RUN="${TMPDIR:-/tmp}/flotilla-bench-env"
CL=("${HACK_DIR}/clusters.sh" --run-dir "${RUN}" --port-base 18443)
"${HACK_DIR}/build-tools.sh" >/dev/null
"${CL[@]}" down >/dev/null 2>&1 || true
trap '"${CL[@]}" down >/dev/null 2>&1 || true' EXIT

# rss_of_processes: prints "<process> <kB>" for every recorded process (e.g. "member2.apiserver").
rss_of_processes() {
  local f pid
  for f in "${RUN}"/pids/*; do
    read -r pid _ <"${f}"
    echo "$(basename "${f}") $(awk '/^VmRSS:/ {print $2}' "/proc/${pid}/status" 2>/dev/null || echo 0)"
  done
}

# sum_by: prints "<key> <count> <MiB>" per key, the key being what sed makes of the process name.
sum_by() { # sed-expression
  rss_of_processes | sed -E "$1" \
    | awk '{n[$1]++; s[$1]+=$2} END {for (k in n) printf "%s %d %.0f\n", k, n[k], s[k]/1024}' | sort
}

# rss_by_kind: prints "<kind> <count> <MiB>" per component kind and "total <count> <MiB>".
rss_by_kind() {
  sum_by 's/^[^ ]*\.([^. ]+) /\1 /'
  sum_by 's/^[^ ]+ /total /'
}

# rss_by_cluster: prints "<cluster> <version> <count> <MiB>" per cluster (etcd is shared).
rss_by_cluster() {
  local cluster count mib
  sum_by 's/^([^. ]+)[^ ]* /\1 /' | while read -r cluster count mib; do
    echo "${cluster} $(cat "${RUN}/clusters/${cluster}/version" 2>/dev/null || echo "${ETCD_VERSION}") ${count} ${mib}"
  done
}

t0="$(date +%s%N)"
"${CL[@]}" up --members "${MEMBERS}" >/dev/null
t_up="$(( ($(date +%s%N) - t0) / 1000000 ))"
sleep "${SETTLE}"
before="$(rss_by_kind)"

t0="$(date +%s%N)"
"${CL[@]}" add-member extra >/dev/null
t_add="$(( ($(date +%s%N) - t0) / 1000000 ))"
sleep "${SETTLE}"
after="$(rss_by_kind)"
clusters="$(rss_by_cluster)"

get() { awk -v k="$2" '$1 == k {print $'"$3"'}' <<<"$1"; }


echo
echo "| component | processes (hub + ${MEMBERS}) | RSS MiB (hub + ${MEMBERS}) | processes (+1 member) | RSS MiB (+1 member) | cost of the extra member, MiB |"
echo "|---|---:|---:|---:|---:|---:|"
for k in etcd apiserver controller-manager scheduler kwok total; do
  b="$(get "${before}" "${k}" 3)"; a="$(get "${after}" "${k}" 3)"
  printf '| %s | %s | %s | %s | %s | %s |\n' "${k}" "$(get "${before}" "${k}" 2)" "${b:-0}" \
    "$(get "${after}" "${k}" 2)" "${a:-0}" "$(( ${a:-0} - ${b:-0} ))"
done
echo
echo "| cluster (hub + ${MEMBERS} + extra) | version | processes | RSS MiB |"
echo "|---|---|---:|---:|"
while read -r cluster version count mib; do
  printf '| %s | %s | %s | %s |\n' "${cluster}" "${version}" "${count}" "${mib}"
done <<<"${clusters}"
echo
printf '| step | seconds |\n|---|---:|\n| up (hub + %s members, warm tool cache) | %d.%d |\n| add-member (one more member) | %d.%d |\n' \
  "${MEMBERS}" $(( t_up / 1000 )) $(( t_up % 1000 / 100 )) $(( t_add / 1000 )) $(( t_add % 1000 / 100 ))
