# shellcheck shell=bash
# Helpers of the benchmarks that run controllers against hack/bench.sh's environment (sourced by
# hack/bench-user.sh and hack/bench-fleet.sh; they read RUN, KUBECTL and HUB from hack/bench.sh).

rss() { awk '/^VmRSS:/ {printf "%.1f", $2/1024}' "/proc/$1/status"; }
# The anonymous part of the RSS, MiB: without the pages of the binary's code and data, of which
# the first burst of work brings in more (once, whatever the number of copies).
rss_anon() { awk '/^RssAnon:/ {printf "%.1f", $2/1024}' "/proc/$1/status"; }
# A controller's live heap and what its allocator keeps resident, MiB, from its /metrics (the
# one port it listens on): "allocated resident active".
# The port a controller serves /metrics on (the one port it listens on).
metrics_port() { ss -ltnpH 2>/dev/null | awk -v p="pid=$1," 'index($0, p) {n = split($4, a, ":"); print a[n]; exit}'; }
heap() { # pid metric-prefix
  curl -sf "http://127.0.0.1:$(metrics_port "$1")/metrics" | awk -v p="$2" '
    $1 == p "_allocator_allocated_bytes" {a = $2}
    $1 == p "_allocator_active_bytes" {c = $2}
    $1 == p "_allocator_resident_bytes" {r = $2}
    $1 == p "_allocator_metadata_bytes" {m = $2}
    END {printf "%.1f %.1f %.1f %.1f\n", a / 1048576, r / 1048576, c / 1048576, m / 1048576}'
}
# The allocator's statistics per size class (jemalloc's stats_print) of a controller, into a file.
allocator_stats() { curl -sf "http://127.0.0.1:$(metrics_port "$1")/debug/allocator" >"$2" || true; }
# CPU seconds (user + system) used so far by the processes of each component: where the time of
# a phase goes on a machine whose cores every process shares.
TICKS="$(getconf CLK_TCK)"
cpu_of() { # pid...
  local p total=0
  for p in "$@"; do
    [[ -r "/proc/${p}/stat" ]] || continue
    total=$((total + $(awk '{print $14 + $15}' "/proc/${p}/stat")))
  done
  awk -v t="${total}" -v hz="${TICKS}" 'BEGIN {printf "%.1f", t / hz}'
}
pid_of() { awk '{print $1}' "${RUN}/pids/$1" 2>/dev/null; }
# Every request the hub's apiserver has served so far (apiserver_request_total, all verbs).
hub_requests() {
  k get --raw /metrics | awk '/^apiserver_request_total\{/ {n += $NF} END {printf "%d", n}'
}
# Starts the splitter (release build, default flags) beside hack/bench.sh's registration and syncer.
start_splitter() {
  "${TARGET}/flotilla-splitter" --kubeconfig "${HUB}" --leader-elect=false \
    --metrics-address 127.0.0.1:0 --health-address 127.0.0.1:0 >"${RUN}/splitter.log" 2>&1 &
  SPLITTER_PID="$!"
  PIDS+=("${SPLITTER_PID}")
}
# Namespace $1 on the hub with Placement `user`, which places its ConfigMaps labelled bench=user
# on every member (what controllers/splitter/examples/bench_user.rs writes into).
user_namespace() {
  k create namespace "$1" >/dev/null
  k apply --server-side -f - >/dev/null <<EOF
apiVersion: flotilla.dev/v1alpha1
kind: Placement
metadata: {name: user, namespace: $1}
spec:
  resourceSelectors: [{apiVersion: v1, kind: ConfigMap, labelSelector: {matchLabels: {bench: user}}}]
EOF
}
# The CPU seconds used so far by each of COMPONENTS, in that order.
# shellcheck disable=SC2034 # read by the benchmarks that source this
COMPONENTS=(hub-apiserver etcd member-apiservers splitter syncer)
# Controllers beside the hub's (a pull member's agent and syncer): counted with the syncer.
EXTRA_CONTROLLER_PIDS=()
cpu_snapshot() {
  local members=() m
  for m in "${MEMBER_LIST[@]}"; do members+=("$(pid_of "${m%%=*}.apiserver")"); done
  echo "$(cpu_of "$(pid_of hub.apiserver)") $(cpu_of "$(pid_of etcd)") $(cpu_of "${members[@]}") $(cpu_of "${SPLITTER_PID}") $(cpu_of "${SYNCER_PID}" "${EXTRA_CONTROLLER_PIDS[@]}")"
}
# Every request the hub's apiserver has served so far, by verb, resource and subresource:
# "verb resource[/subresource] count" lines.
hub_requests_by() { requests_by "${HUB}"; }
requests_by() { # kubeconfig
  "${KUBECTL}" --kubeconfig "$1" get --raw /metrics | awk '/^apiserver_request_total\{/ {
      verb = res = sub_ = ""
      if (match($0, /verb="[^"]*"/)) verb = substr($0, RSTART + 6, RLENGTH - 7)
      if (match($0, /resource="[^"]*"/)) res = substr($0, RSTART + 10, RLENGTH - 11)
      if (match($0, /subresource="[^"]*"/)) sub_ = substr($0, RSTART + 13, RLENGTH - 14)
      key = verb " " (res == "" ? "-" : res) (sub_ == "" ? "" : "/" sub_)
      n[key] += $NF
    } END { for (k in n) print k, n[k] }'
}
# Requests of each verb and resource between two hub_requests_by snapshots, most first.
requests_between() { # before after
  awk 'NR == FNR {b[$1 " " $2] = $3; next} {d = $3 - b[$1 " " $2]; if (d > 0) print d, $1, $2}' \
    <(echo "$1") <(echo "$2") | sort -rn
}
