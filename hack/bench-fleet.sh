# shellcheck shell=bash
# Sourced by `hack/bench.sh fleet` once the environment (its first fleet size of members), the
# registration controller and the syncer run (see hack/bench.sh for the variables it sets). Not
# meant to be run on its own.
#
# For each fleet size of FLEET_SIZES, in order: push members are added with
# `hack/clusters.sh add-member` and joined with `kubectl flotilla join` until the fleet has that
# many, then COUNT ConfigMaps are placed on every member, 50 single edits of one of them are
# timed, and the ConfigMaps are deleted again. Prints one table row per fleet size.

source "${HACK_DIR}/bench-lib.sh"
start_splitter
user_namespace bench-fleet

# One member of every fleet size is a pull member: hack/bench.sh started one push member fewer
# than the first size, and this one's agent and syncer run beside it as processes (with the
# member's admin kubeconfig, as the benchmark reads its push members; the hub side as for a real
# pull member: a bootstrap token, its Cluster accepted, then the agent's own certificate).
PULL="member${FLEET_SIZES[0]}"
log "== adding ${PULL}, a pull member (its agent and syncer run beside it)"
"${CL[@]}" add-member "${PULL}" >/dev/null
eval "$("${CL[@]}" env)"
PULL_KUBECONFIG="$(tr ',' '\n' <<<"${FLOTILLA_MEMBER_KUBECONFIGS}" | awk -F= -v m="${PULL}" '$1 == m {print $2}')"
k apply --server-side -f deploy/bootstrap >/dev/null
k -n flotilla-system create serviceaccount "flotilla-bootstrap-${PULL}" >/dev/null
k create clusterrolebinding "flotilla-bootstrap-${PULL}" --clusterrole flotilla:bootstrap \
  --serviceaccount "flotilla-system:flotilla-bootstrap-${PULL}" >/dev/null
BOOTSTRAP="${RUN}/${PULL}-bootstrap.kubeconfig"
cp "${HUB}" "${BOOTSTRAP}"
"${KUBECTL}" --kubeconfig "${BOOTSTRAP}" config set-credentials bootstrap \
  --token "$(k -n flotilla-system create token "flotilla-bootstrap-${PULL}" --duration 2h)" >/dev/null
"${KUBECTL}" --kubeconfig "${BOOTSTRAP}" config set-context --current --user bootstrap >/dev/null
k apply --server-side -f - >/dev/null <<EOF
apiVersion: flotilla.dev/v1alpha1
kind: Cluster
metadata: {name: ${PULL}}
spec: {syncMode: Pull, hubAcceptsClient: true}
EOF
pk() { "${KUBECTL}" --kubeconfig "${PULL_KUBECONFIG}" "$@"; }
pk create namespace flotilla-system >/dev/null
"${TARGET}/flotilla-registration" agent --kubeconfig "${PULL_KUBECONFIG}" \
  --lease-namespace flotilla-system --identity "agent-${PULL}" --cluster-name "${PULL}" \
  --hub-kubeconfig "${BOOTSTRAP}" --hub-credential-namespace flotilla-system \
  --metrics-address 127.0.0.1:0 --health-address 127.0.0.1:0 >"${RUN}/agent.log" 2>&1 &
AGENT_PID="$!"
PIDS+=("${AGENT_PID}")
for _ in $(seq 120); do
  pk -n flotilla-system get secret flotilla-hub-kubeconfig >/dev/null 2>&1 && break
  sleep 1
done
pk -n flotilla-system get secret flotilla-hub-kubeconfig >/dev/null 2>&1 || {
  tail -n 20 "${RUN}/agent.log" >&2
  die "the agent of ${PULL} got no hub credential"
}
"${TARGET}/flotilla-syncer" --kubeconfig "${PULL_KUBECONFIG}" --leader-elect=false --pull \
  --cluster-name "${PULL}" --hub-credential-namespace flotilla-system \
  --metrics-address 127.0.0.1:0 --health-address 127.0.0.1:0 >"${RUN}/pull-syncer.log" 2>&1 &
PULL_SYNCER_PID="$!"
PIDS+=("${PULL_SYNCER_PID}")
# Followed and counted like the push members (its apiserver's CPU among the members').
MEMBER_LIST+=("${PULL}=${PULL_KUBECONFIG}")
MEMBERS_ARG="$(IFS=,; echo "${MEMBER_LIST[*]}")"
k wait --for condition=Ready cluster --all --timeout 120s >/dev/null || {
  tail -n 20 "${RUN}/agent.log" "${RUN}/pull-syncer.log" >&2
  die "${PULL} did not become Ready"
}
# Its agent and syncer count among the controllers.
# shellcheck disable=SC2034 # read by cpu_snapshot (hack/bench-lib.sh)
EXTRA_CONTROLLER_PIDS=("${AGENT_PID}" "${PULL_SYNCER_PID}")
sleep 5

# The hub's keys in the shared etcd: "count bytes" (keys and values), read through etcd's gRPC
# gateway like hack/clusters.sh does (the hub's keys are under /hub/).
hub_etcd() {
  local range
  range="$(printf '%s' '/hub/' | base64)"
  curl -sf -X POST "http://127.0.0.1:$((PORT_BASE + 7347))/v3/kv/range" \
    -d "{\"key\": \"${range}\", \"range_end\": \"$(printf '%s' '/hub0' | base64)\"}" \
    | python3 -c '
import base64, json, sys
kvs = json.load(sys.stdin).get("kvs", [])
print(len(kvs), sum(len(base64.b64decode(kv["key"])) + len(base64.b64decode(kv.get("value", ""))) for kv in kvs))'
}
# The Works on the hub: "count bytes" (as JSON).
hub_works() {
  k get works -A -o json | python3 -c '
import json, sys
items = json.load(sys.stdin)["items"]
print(len(items), sum(len(json.dumps(i, separators=(",", ":"))) for i in items))'
}
user() { "${TARGET}/examples/bench_user" "$1" bench-fleet "${COUNT}" "${CONCURRENCY}" "${HUB}" "${MEMBERS_ARG}"; }
kib() { awk -v b="$1" 'BEGIN {printf "%.0f", b / 1024}'; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'; }
# CPU milliseconds per edit of the 100 single edits (50 on a settled fleet, 50 0.2 s apart).
per_edit() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.0f", (b - a) * 1000 / 100}'; }
# The same beyond the load of the fleet at rest over the edits' seconds (rest: CPU seconds over
# 10 s idle, from $3 to $4; $5 the seconds the 100 edits took).
own_per_edit() {
  awk -v a="$1" -v b="$2" -v r0="$3" -v r1="$4" -v s="$5" \
    'BEGIN {printf "%.0f", ((b - a) - (r1 - r0) / 10 * s) * 1000 / 100}'
}

ROWS=()
EDIT_ROWS=()
EDIT_REQUEST_ROWS=()
current="${#MEMBER_LIST[@]}"
SPLITTER_IDLE="$(rss "${SPLITTER_PID}")"
SYNCER_IDLE="$(rss "${SYNCER_PID}")"
PULL_SYNCER_IDLE="$(rss "${PULL_SYNCER_PID}")"
for size in "${FLEET_SIZES[@]}"; do
  if (( size > current )); then
    log "== adding members $((current + 1))..${size}"
    for n in $(seq $((current + 1)) "${size}"); do
      "${CL[@]}" add-member "member${n}" >/dev/null
    done
    eval "$("${CL[@]}" env)"
    MEMBER_LIST=()
    IFS=',' read -r -a PAIRS <<<"${FLOTILLA_MEMBER_KUBECONFIGS}"
    for pair in "${PAIRS[@]}"; do
      MEMBER_LIST+=("${pair}")
      name="${pair%%=*}"
      n="${name#member}"
      if (( n > current )); then
        "${TARGET}/kubectl-flotilla" --kubeconfig "${HUB}" join "${name}" \
          --member-kubeconfig "${pair#*=}" --read-writable >/dev/null
      fi
    done
    MEMBERS_ARG="$(IFS=,; echo "${MEMBER_LIST[*]}")"
    current="${size}"
    k wait --for condition=Ready cluster --all --timeout 300s >/dev/null \
      || die "the members did not all become Ready"
    sleep 5
  fi
  log "== ${size} members: placing ${COUNT} ConfigMaps on every member"
  cpu_before_place="$(cpu_snapshot)"
  requests_before="$(hub_requests)"
  read -r _ _ members_s placement_s < <(user hub-create)
  place_requests="$(( $(hub_requests) - requests_before ))"
  read -r -a a <<<"$(cpu_snapshot)"
  sleep 10
  splitter_rss="$(rss "${SPLITTER_PID}")"
  syncer_rss="$(rss "${SYNCER_PID}")"
  pull_rss="$(rss "${PULL_SYNCER_PID}")"
  read -r works works_bytes < <(hub_works)
  read -r keys etcd_bytes < <(hub_etcd)
  # The fleet at rest (probes, leases, heartbeats): CPU per second over 10 s with nothing placed
  # or edited, to tell an edit's own cost from the load of the seconds it takes.
  read -r -a i0 <<<"$(cpu_snapshot)"
  sleep 10
  read -r -a i1 <<<"$(cpu_snapshot)"
  log "== ${size} members: 50 single edits"
  cpu_before="$(cpu_snapshot)"
  requests_before="$(hub_requests)"
  by_before="$(hub_requests_by)"
  edits_start="$(date +%s.%N)"
  read -r _ p50 p99 _ s50 s99 _ w50 w99 < <(user hub-single)
  edits_s="$(awk -v a="${edits_start}" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')"
  requests_after="$(hub_requests)"
  EDIT_REQUESTS="$(requests_between "${by_before}" "$(hub_requests_by)" | awk '$1 >= 20' \
    | awk -v s="${size}" '{printf "| %s | %s %s | %.1f |\n", s, $2, $3, $1 / 100}')"
  read -r -a b <<<"${cpu_before}"
  read -r -a e <<<"$(cpu_snapshot)"
  # What one edit costs each component: CPU milliseconds and hub requests per edit.
  EDIT_REQUEST_ROWS+=("${EDIT_REQUESTS}")
  row="| ${size} | ${edits_s} |"
  for c in 0 1 2 3 4; do
    row+=" $(per_edit "${b[$c]}" "${e[$c]}") ($(own_per_edit "${b[$c]}" "${e[$c]}" "${i0[$c]}" "${i1[$c]}" "${edits_s}")) |"
  done
  EDIT_ROWS+=("${row} $(awk -v n="$((requests_after - requests_before))" 'BEGIN {printf "%.1f", n / 100}') |")
  read -r -a b <<<"${cpu_before_place}"
  log "== ${size} members: deleting the ConfigMaps"
  user hub-delete >/dev/null
  copies=$((COUNT * size))
  members_cpu="$(sub "${b[2]}" "${a[2]}")"
  controllers_cpu="$(awk -v s="$(sub "${b[3]}" "${a[3]}")" -v y="$(sub "${b[4]}" "${a[4]}")" 'BEGIN {printf "%.1f", s + y}')"
  ROWS+=("| ${size} | ${members_s} | ${placement_s} | ${p50} | ${p99} | ${w50} / ${w99} | ${s50} / ${s99} | $(sub "${b[0]}" "${a[0]}") | $(sub "${b[1]}" "${a[1]}") | ${members_cpu} ($(awk -v c="${members_cpu}" -v n="${size}" 'BEGIN {printf "%.2f", c / n}')) | ${controllers_cpu} ($(awk -v c="${controllers_cpu}" -v n="${copies}" 'BEGIN {printf "%.2f", c * 1000 / n}')) | ${splitter_rss} / ${syncer_rss} / ${pull_rss} | ${place_requests} | ${works} / $(kib "${works_bytes}") | ${keys} / $(kib "${etcd_bytes}") |")
done

echo
echo "Placing ${COUNT} ConfigMaps on every member (one Placement), then 50 single edits of one of them; CPU seconds over the placing."
echo "Idle RSS: splitter ${SPLITTER_IDLE} MiB, syncer ${SYNCER_IDLE} MiB, ${PULL}'s pull syncer ${PULL_SYNCER_IDLE} MiB. One member of each size (${PULL}) is a pull member."
echo "Single edits: each on a settled fleet (1 s after the previous one reached every member), and each 0.2 s after the previous one (while the passes reporting it still run)."
echo
echo "| members | placed: members agree, s | Placement reports every copy, s | single edit p50, s | p99, s | of which until every member's Work had it (the splitter's share), p50 / p99, s | edits 0.2 s apart p50 / p99, s | hub apiserver CPU, s | etcd CPU, s | members' apiservers CPU, s (per member) | controllers' CPU, s (ms per copy) | RSS splitter / syncer / pull syncer with the copies placed, MiB | hub requests | Works / KiB | hub keys in etcd / KiB |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${ROWS[@]}"
echo
echo "What one single edit costs, per edit (100 edits), CPU ms with the fleet's load at rest over the same seconds (and without it):"
echo
echo "| members | 100 edits took, s | hub apiserver CPU, ms | etcd CPU, ms | members' apiservers CPU, ms | splitter CPU, ms | syncers' CPU, ms | hub requests (all) |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${EDIT_ROWS[@]}"
echo
echo "| members | hub requests per single edit (each at least 0.2 per edit) | per edit |"
echo "|---:|---|---:|"
printf '%s\n' "${EDIT_REQUEST_ROWS[@]}"
