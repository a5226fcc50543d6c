#!/usr/bin/env bash
# Benchmarks of Flotilla's controllers against a local environment of their own (run directory
# ${TMPDIR:-/tmp}/flotilla-bench-<name>, ports from 19443), torn down afterwards. Prints Markdown.
#
#   syncer   N ConfigMaps as Works in each of M push-mode members (one Work per ConfigMap per
#            member): time until every object exists in every member, against the same client
#            writing the same objects straight into the members in the same run (the baseline);
#            the syncer's RSS at idle and with the objects managed. A last row writes the same
#            Works into namespaces of no member: what the Work envelopes alone cost the hub.
#
#   splitter A D-replica Deployment (default 30) applied to the hub and divided over the M
#            members, until the hub says Available with every replica available, against the
#            same Deployment applied straight into one member, alternating, R runs (default 5);
#            then failover with the default settings (probe every 10 s, 30 s grace, 20 s
#            toleration): from stopping a member until its Cluster is not Ready (detection) and
#            until the hub Deployment is Available again without it (movement).
#
#   user     The user's path: N ConfigMaps (default 1000) created, edited and deleted on the hub
#            under a Placement that places them on the M members, against the same client doing
#            the same straight in the members in parallel (the baseline; once more with the
#            labels and annotations the syncer adds to each object) and on the hub alone,
#            placed nowhere: seconds until every member agrees and until the Placement reports
#            every copy; the hub's API requests per object, the hub's and the members' requests
#            by verb; single edits (write to last member, p50/p99: 50 on a settled fleet, 50 each
#            0.2 s after the previous one; of the settled ones also until every member's Work on
#            the hub had the edit, the splitter's share); the splitter's and the
#            syncer's RSS (all of it, and its anonymous part: without the binary's pages, which
#            the first burst brings in once) and live heap (their allocator's metrics) per
#            placed object × member, and most open file descriptors; each
#            component's CPU seconds per phase. With --profile DIR, CPU profiles of the hub's
#            and the first member's apiserver over the first 20 s of the hub's create and edit
#            phases are written to DIR/hub-<phase>.pprof and DIR/member-<phase>.pprof, the hub's
#            over the first 10 s of the delete to DIR/hub-delete.pprof, and of the
#            first member's over the direct create to DIR/member-direct.pprof (read them with
#            `go tool pprof -top DIR/hub-create.pprof`); the splitter's and the syncer's
#            allocator statistics per size class with the copies placed to
#            DIR/<controller>-allocator.txt (their /debug/allocator).
#
#   fleet    How the user's path grows with the fleet: for each size of --members (a list, default
#            3,10,20), push members are added (`hack/clusters.sh add-member`, `kubectl flotilla
#            join`) until the fleet has that many; one member of every size is a pull member (its
#            agent and syncer run as processes beside it). Then N ConfigMaps (default 200) are
#            placed on every member under one Placement, single edits of one of them are timed
#            (write to last member, p50/p99: 50 on a settled fleet, 50 each 0.2 s after the
#            previous one), and they are deleted again. One row per size: seconds until the
#            members and the Placement agree, the single edits (and the splitter's share of the
#            settled ones: until every member's Work had the edit), CPU seconds of the hub's
#            apiserver, etcd, the members' apiservers (also per member: they share the two cores
#            here) and the controllers (also per placed copy), the controllers' RSS, the hub's
#            requests, its Works (count and bytes) and its keys in etcd (count and bytes). Then,
#            per size, what one single edit costs: each component's CPU milliseconds, with the
#            fleet's load at rest over the same seconds and without it (the load measured over
#            10 s idle), the hub's requests per edit, and its most frequent ones.
#
#   envelopes
#            What the hub pays per object for Works of 1, 10, 50 and 100 manifests: N objects
#            (default 1000) for each of the M members written as Works into namespaces of no
#            member, then one status per Work as the syncer writes it, then both again with every
#            object changed; the hub apiserver's CPU seconds, requests and wall time for each size,
#            with the manifests and status entries as JSON strings (as the controllers write
#            them) and, side by side, with the status entries as objects (as before), with both
#            as objects (the baseline), with statuses of conditions alone (no entry per
#            manifest: what the entries cost at all), and as the first, each Work created and
#            then written with JSON merge patches instead of server-side apply, or replaced whole
#            (update); and a stand-in for a shared envelope (each bundle's manifests written once,
#            as a Work of a namespace of its own, with per member a Work of one small manifest
#            that names it and holds the member's status: shared, its members' Works rewritten when the
#            envelope changes; shared-unpinned, written once). --bundles and --forms (strings,
#            typed-status, objects, bare, merge, update, shared, shared-unpinned) choose which run.
#
#   plan     The splitter's plan alone, without I/O or an environment: the CPU time of the pass
#            of a single edit (one of N ConfigMaps, default 200, edited on a settled fleet) for
#            each fleet size of --members (default 3,10,20), mean / p50 / p99 of R passes
#            (--runs, default 200), and per placed copy. Run it at two commits to compare them
#            (`controllers/splitter/examples/bench_plan.rs`).
#
# Usage: hack/bench.sh syncer [--members M] [--count N] [--concurrency C]
#        hack/bench.sh splitter [--members M] [--replicas D] [--runs R]
#        hack/bench.sh user [--members M] [--count N] [--concurrency C] [--profile DIR]
#        hack/bench.sh fleet [--members M1,M2,...] [--count N] [--concurrency C]
#        hack/bench.sh envelopes [--members M] [--count N] [--concurrency C]
#                                [--bundles B1,B2,...] [--forms F1,F2,...]
#        hack/bench.sh plan [--members M1,M2,...] [--count N] [--runs R]
# Environment: FLOTILLA_BENCH_LOGS=DIR keeps the controllers' logs in DIR.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "${REPO_ROOT}"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
WHAT="${1:-}"; shift || true
[[ "${WHAT}" =~ ^(-h|--help)$ ]] && { usage; exit 0; }
[[ "${WHAT}" =~ ^(syncer|splitter|user|fleet|envelopes|plan)$ ]] \
  || die "usage: hack/bench.sh syncer|splitter|user|fleet|envelopes|plan [options] (see --help)"
MEMBERS=3
COUNT=1000
[[ "${WHAT}" =~ ^(fleet|plan)$ ]] && MEMBERS=3,10,20 COUNT=200
CONCURRENCY=32
# REPLICAS and RUNS are read by the sourced hack/bench-splitter.sh.
# shellcheck disable=SC2034
REPLICAS=30
# shellcheck disable=SC2034
RUNS=5
[[ "${WHAT}" == plan ]] && RUNS=200
PROFILE_DIR=""
BUNDLES=1,10,50,100
FORMS=strings,typed-status,objects,bare,merge
# shellcheck disable=SC2034
while [[ $# -gt 0 ]]; do
  case "$1" in
    --members) MEMBERS="$2"; shift 2 ;;
    --count) COUNT="$2"; shift 2 ;;
    --concurrency) CONCURRENCY="$2"; shift 2 ;;
    --replicas) REPLICAS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --bundles) BUNDLES="$2"; shift 2 ;;
    --forms) FORMS="$2"; shift 2 ;;
    --profile) PROFILE_DIR="$(mkdir -p "$2" && cd "$2" && pwd)"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1'" ;;
  esac
done

if [[ "${WHAT}" == plan ]]; then
  [[ "${MEMBERS}" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "--members: '${MEMBERS}' is not a list of fleet sizes (e.g. 3,10,20)"
  [[ "${COUNT}" =~ ^[1-9][0-9]*$ ]] || die "--count: '${COUNT}' is not a number of objects"
  [[ "${RUNS}" =~ ^[1-9][0-9]*$ ]] || die "--runs: '${RUNS}' is not a number of passes"
  log "== building (release)"
  cargo build --release -q -p flotilla-splitter --example bench_plan
  "${CARGO_TARGET_DIR:-${REPO_ROOT}/target}/release/examples/bench_plan" "${COUNT}" "${MEMBERS}" "${RUNS}"
  exit 0
fi

# The fleet benchmark grows the fleet through a list of sizes, starting from the first.
FLEET_SIZES=()
if [[ "${WHAT}" == fleet ]]; then
  IFS=',' read -r -a FLEET_SIZES <<<"${MEMBERS}"
  previous=0
  for size in "${FLEET_SIZES[@]}"; do
    [[ "${size}" =~ ^[1-9][0-9]*$ ]] && (( size > previous )) \
      || die "--members: '${MEMBERS}' is not a growing list of fleet sizes (e.g. 3,10,20)"
    previous="${size}"
  done
  # The first size's last member is a pull member, added by hack/bench-fleet.sh.
  (( FLEET_SIZES[0] >= 2 )) || die "--members: the first fleet size must be at least 2 (one is a pull member)"
  MEMBERS="$(( FLEET_SIZES[0] - 1 ))"
fi
[[ "${MEMBERS}" =~ ^[1-9][0-9]*$ ]] || die "--members: '${MEMBERS}' is not a number of members"
RUN="${TMPDIR:-/tmp}/flotilla-bench-${WHAT}"
PORT_BASE=19443
CL=("${HACK_DIR}/clusters.sh" --run-dir "${RUN}" --port-base "${PORT_BASE}")
TARGET="${CARGO_TARGET_DIR:-${REPO_ROOT}/target}/release"
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "${p}" 2>/dev/null || true; done
  if [[ -n "${FLOTILLA_BENCH_LOGS:-}" ]]; then
    mkdir -p "${FLOTILLA_BENCH_LOGS}" && cp "${RUN}"/*.log "${FLOTILLA_BENCH_LOGS}/" 2>/dev/null || true
  fi
  "${CL[@]}" down >/dev/null 2>&1 || true
}

log "== building (release)"
"${HACK_DIR}/build-tools.sh" >/dev/null
cargo build --release --quiet -p flotilla-syncer -p flotilla-registration -p flotilla-splitter \
  -p flotilla-cli --bins --example bench_load --example bench_place --example bench_user
"${CL[@]}" down >/dev/null 2>&1 || true
trap cleanup EXIT
log "== starting hub + ${MEMBERS} members"
[[ -z "${PROFILE_DIR}" ]] || export FLOTILLA_HUB_PROFILING=true FLOTILLA_MEMBER_PROFILING=true
"${CL[@]}" up --members "${MEMBERS}" >/dev/null
ENV_LINES="$("${CL[@]}" env)" || die "no environment to describe"
eval "${ENV_LINES}"
KUBECTL="${TOOLS_BIN}/kubectl"
HUB="${FLOTILLA_HUB_KUBECONFIG}"
k() { "${KUBECTL}" --kubeconfig "${HUB}" "$@"; }

k apply --server-side -f crds/yaml >/dev/null
k wait --for condition=Established crd --all --timeout 60s >/dev/null
k create namespace flotilla-system >/dev/null
# The splitter's Pod Security check namespaces, as the chart makes them for a release named
# flotilla (charts/flotilla/templates/_hub-pod-security.tpl; the splitter's default prefix).
for level in baseline restricted; do
  k create namespace "flotilla-pod-security-${level}" >/dev/null
  k label namespace "flotilla-pod-security-${level}" "pod-security.kubernetes.io/enforce=${level}" >/dev/null
done
MEMBER_LIST=()
IFS=',' read -r -a PAIRS <<<"${FLOTILLA_MEMBER_KUBECONFIGS}"
for pair in "${PAIRS[@]}"; do
  name="${pair%%=*}"; path="${pair#*=}"
  MEMBER_LIST+=("${name}=${path}")
  # The benchmark's members have admin kubeconfigs only: registration reads them with those.
  "${TARGET}/kubectl-flotilla" --kubeconfig "${HUB}" join "${name}" --member-kubeconfig "${path}" \
    --read-writable >/dev/null
done
MEMBERS_ARG="$(IFS=,; echo "${MEMBER_LIST[*]}")"

log "== starting the registration controller and the syncer (release builds)"
# The benchmark's members have admin kubeconfigs only: registration reads them with those.
"${TARGET}/flotilla-registration" --kubeconfig "${HUB}" --leader-elect=false --read-writable-kubeconfigs \
  --metrics-address 127.0.0.1:0 --health-address 127.0.0.1:0 >"${RUN}/registration.log" 2>&1 &
PIDS+=("$!")
"${TARGET}/flotilla-syncer" --kubeconfig "${HUB}" --leader-elect=false \
  --metrics-address 127.0.0.1:0 --health-address 127.0.0.1:0 >"${RUN}/syncer.log" 2>&1 &
SYNCER_PID="$!"
PIDS+=("${SYNCER_PID}")
k wait --for condition=Ready cluster --all --timeout 120s >/dev/null || {
  tail -n 20 "${RUN}/registration.log" "${RUN}/syncer.log" >&2
  die "the members did not become Ready"
}
sleep 5

if [[ "${WHAT}" == splitter ]]; then
  source "${HACK_DIR}/bench-splitter.sh"
  exit 0
fi
if [[ "${WHAT}" == user ]]; then
  source "${HACK_DIR}/bench-user.sh"
  exit 0
fi
if [[ "${WHAT}" == fleet ]]; then
  source "${HACK_DIR}/bench-fleet.sh"
  exit 0
fi
if [[ "${WHAT}" == envelopes ]]; then
  TICKS="$(getconf CLK_TCK)"
  hub_ticks() { awk '{print $14 + $15}' "/proc/$(awk '{print $1}' "${RUN}/pids/hub.apiserver")/stat"; }
  echo
  echo "| manifests per Work (${COUNT} objects × ${MEMBERS} members, written and given a status twice) | written as | Works | hub requests | hub apiserver CPU, s | hub CPU per object × member, ms | wall, s |"
  echo "|---:|---|---:|---:|---:|---:|---:|"
  IFS=',' read -r -a bundles <<<"${BUNDLES}"
  IFS=',' read -r -a forms <<<"${FORMS}"
  for bundle in "${bundles[@]}"; do
    [[ "${bundle}" =~ ^[1-9][0-9]*$ ]] || die "--bundles: '${bundle}' is not a number of manifests"
    for form in "${forms[@]}"; do
      case "${form}" in
        strings) mode="envelopes-${bundle}" label="manifests and status entries as JSON strings (what the controllers write)" ;;
        typed-status) mode="envelopes-typed-status-${bundle}" label="manifests as strings, status entries as objects (before)" ;;
        objects) mode="envelopes-objects-${bundle}" label="manifests and status entries as objects (the baseline)" ;;
        bare) mode="envelopes-bare-${bundle}" label="manifests as strings, statuses without an entry per manifest" ;;
        merge) mode="envelopes-merge-${bundle}" label="as JSON strings, created, then JSON merge patches instead of server-side apply" ;;
        update) mode="envelopes-update-${bundle}" label="as JSON strings, created, then replaced whole (PUT) instead of server-side apply" ;;
        shared) mode="envelopes-shared-${bundle}" label="a shared envelope (stand-in): the manifests once, each member's Work naming it and its version, with the member's status" ;;
        shared-unpinned) mode="envelopes-shared-unpinned-${bundle}" label="a shared envelope (stand-in), the members' Works written once: a change writes the envelope and the statuses" ;;
        *) die "--forms: '${form}' is none of strings, typed-status, objects, bare, merge, update, shared, shared-unpinned" ;;
      esac
      log "== ${COUNT} objects per member as Works of ${bundle} manifest(s), as ${form}"
      before="$(hub_ticks)"
      read -r _ requests wall < <("${TARGET}/examples/bench_load" "${mode}" bench-envelopes \
        "${COUNT}" "${CONCURRENCY}" "${HUB}" "${MEMBERS_ARG}")
      cpu="$(awk -v a="${before}" -v b="$(hub_ticks)" -v hz="${TICKS}" 'BEGIN {printf "%.1f", (b - a) / hz}')"
      per="$(awk -v c="${cpu}" -v n="$((COUNT * MEMBERS))" 'BEGIN {printf "%.2f", c * 1000 / n}')"
      works="$((requests / 4))"
      # Shared: a member's Work per bundle, and the bundle's envelope.
      [[ "${form}" == shared* ]] && works="$(( (COUNT + bundle - 1) / bundle * (MEMBERS + 1) ))"
      echo "| ${bundle} | ${label} | ${works} | ${requests} | ${cpu} | ${per} | ${wall} |"
    done
  done
  exit 0
fi

rss() { awk '/^VmRSS:/ {printf "%.1f", $2/1024}' "/proc/$1/status"; }
RSS_IDLE="$(rss "${SYNCER_PID}")"

log "== baseline: ${COUNT} ConfigMaps straight into each of ${MEMBERS} members"
read -r _ N_DIRECT W_DIRECT T_DIRECT < <("${TARGET}/examples/bench_load" direct bench-direct \
  "${COUNT}" "${CONCURRENCY}" "${HUB}" "${MEMBERS_ARG}")
log "== syncer: the same ConfigMaps as Works on the hub"
read -r _ N_WORKS W_WORKS T_WORKS < <("${TARGET}/examples/bench_load" works bench-works \
  "${COUNT}" "${CONCURRENCY}" "${HUB}" "${MEMBERS_ARG}")
RSS_LOADED="$(rss "${SYNCER_PID}")"
log "== the same Works once more, into namespaces of no member: the cost of the Works alone"
read -r _ _ W_HUB _ < <("${TARGET}/examples/bench_load" hub-only bench-works \
  "${COUNT}" "${CONCURRENCY}" "${HUB}" "${MEMBERS_ARG}")
log "== waiting for every Work to report Applied"
applied() {
  k get works -A -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Applied")].status}{"\n"}{end}' \
    | grep -c '^True$' || true
}
for _ in $(seq 300); do
  [[ "$(applied)" -ge "${N_WORKS}" ]] && break
  sleep 1
done
[[ "$(applied)" -ge "${N_WORKS}" ]] || die "not every Work reported Applied=True within 300 s"
sleep 10
RSS_SETTLED="$(rss "${SYNCER_PID}")"
RATIO="$(awk -v a="${T_WORKS}" -v b="${T_DIRECT}" 'BEGIN {printf "%.2f", a / b}')"
PER_1000="$(awk -v s="${RSS_SETTLED}" -v i="${RSS_IDLE}" -v n="${N_WORKS}" 'BEGIN {printf "%.1f", (s - i) * 1000 / n}')"

echo
echo "| path (${N_DIRECT} ConfigMaps, ${MEMBERS} members, concurrency ${CONCURRENCY}) | writes done, s | all objects in the members, s | ratio |"
echo "|---|---:|---:|---:|"
echo "| direct: straight into the members (baseline) | ${W_DIRECT} | ${T_DIRECT} | 1.00 |"
echo "| Works on the hub, applied by the syncer | ${W_WORKS} | ${T_WORKS} | ${RATIO} |"
echo "| the same Works written to the hub only (no member served, nothing applied) | ${W_HUB} | – | $(awk -v a="${W_HUB}" -v b="${T_DIRECT}" 'BEGIN {printf "%.2f", a / b}') |"
echo
echo "| syncer RSS | MiB |"
echo "|---|---:|"
echo "| idle (${MEMBERS} members, no Work) | ${RSS_IDLE} |"
echo "| right after the load | ${RSS_LOADED} |"
echo "| settled, ${N_WORKS} objects managed | ${RSS_SETTLED} |"
echo "| per 1,000 managed objects | ${PER_1000} |"
