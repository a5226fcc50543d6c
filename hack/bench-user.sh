# shellcheck shell=bash
# Sourced by `hack/bench.sh user` once the environment, the registration controller and the
# syncer run (see hack/bench.sh for the variables it sets). Not meant to be run on its own.

source "${HACK_DIR}/bench-lib.sh"
start_splitter
user_namespace bench-user
sleep 5

declare -A CPU
cpu_phase() { # phase before after
  local -a b a
  read -r -a b <<<"$2"; read -r -a a <<<"$3"
  local i
  for i in "${!COMPONENTS[@]}"; do
    CPU[$1,${COMPONENTS[$i]}]="$(awk -v x="${a[$i]}" -v y="${b[$i]}" 'BEGIN {printf "%.1f", x - y}')"
  done
}
# Requests by verb and resource (as hub_requests_by), summed over every member's apiserver.
member_requests_by() {
  local m
  for m in "${MEMBER_LIST[@]}"; do requests_by "${m#*=}"; done \
    | awk '{n[$1 " " $2] += $3} END {for (k in n) print k, n[k]}'
}
user() { "${TARGET}/examples/bench_user" "$1" "$2" "${COUNT}" "${CONCURRENCY}" "${HUB}" "${MEMBERS_ARG}"; }
per_object() { awk -v a="$1" -v b="$2" -v n="${COUNT}" 'BEGIN {printf "%.1f", (b - a) / n}'; }

# A CPU profile of the apiserver of `kubeconfig` over `seconds` into `out`.
profile() { "${KUBECTL}" --kubeconfig "$1" get --raw "/debug/pprof/profile?seconds=$2" >"$3"; }
FIRST_MEMBER="${MEMBER_LIST[0]#*=}"
log "== baseline: ${COUNT} ConfigMaps created, edited and deleted straight in each of ${MEMBERS} members"
cpu_before="$(cpu_snapshot)"
direct_profile=""
if [[ -n "${PROFILE_DIR}" ]]; then
  # About the length of the direct create.
  profile "${FIRST_MEMBER}" 3 "${PROFILE_DIR}/member-direct.pprof" & direct_profile="$!"
fi
DIRECT="$(user direct bench-user-direct)"
[[ -z "${direct_profile}" ]] || wait "${direct_profile}" || log "no profile of the direct create"
cpu_phase direct "${cpu_before}" "$(cpu_snapshot)"
d_time() { awk -v p="$1" '$1 == "phase" && $2 == p {print $3}' <<<"${DIRECT}"; }
# The same with the labels and annotations the syncer adds to every object it applies: what the
# members pay for them.
log "== baseline: the same, with the labels and annotations the syncer adds"
cpu_before="$(cpu_snapshot)"
LINKED="$(user direct-linked bench-user-linked)"
cpu_phase linked "${cpu_before}" "$(cpu_snapshot)"
l_time() { awk -v p="$1" '$1 == "phase" && $2 == p {print $3}' <<<"${LINKED}"; }
# What the hub itself takes of the user's writes: the same client, the same objects, straight to
# the hub in a namespace no Placement selects.
log "== baseline: the same ${COUNT} ConfigMaps created, edited and deleted on the hub, placed nowhere"
cpu_before="$(cpu_snapshot)"
ALONE="$("${TARGET}/examples/bench_user" direct bench-user-alone "${COUNT}" "${CONCURRENCY}" "${HUB}" "hub=${HUB}")"
cpu_phase alone "${cpu_before}" "$(cpu_snapshot)"
a_time() { awk -v p="$1" '$1 == "phase" && $2 == p {print $3}' <<<"${ALONE}"; }

SPLITTER_IDLE="$(rss "${SPLITTER_PID}")"
SYNCER_IDLE="$(rss "${SYNCER_PID}")"
SPLITTER_IDLE_ANON="$(rss_anon "${SPLITTER_PID}")"
SYNCER_IDLE_ANON="$(rss_anon "${SYNCER_PID}")"
read -r SPLITTER_HEAP_IDLE SPLITTER_RES_IDLE SPLITTER_ACT_IDLE SPLITTER_META_IDLE < <(heap "${SPLITTER_PID}" flotilla_splitter)
read -r SYNCER_HEAP_IDLE SYNCER_RES_IDLE SYNCER_ACT_IDLE SYNCER_META_IDLE < <(heap "${SYNCER_PID}" flotilla_syncer)
# The most file descriptors (nearly all connections: to the hub and the members) each controller
# holds open during the hub's phases, sampled every 0.2 s.
FDS="${RUN}/open-fds"
(
  shopt -s nullglob
  most_splitter=0 most_syncer=0
  while kill -0 "${SYNCER_PID}" 2>/dev/null; do
    open=("/proc/${SPLITTER_PID}/fd/"*); ((${#open[@]} > most_splitter)) && most_splitter="${#open[@]}"
    open=("/proc/${SYNCER_PID}/fd/"*); ((${#open[@]} > most_syncer)) && most_syncer="${#open[@]}"
    echo "${most_splitter} ${most_syncer}" >"${FDS}.tmp" && mv "${FDS}.tmp" "${FDS}"
    sleep 0.2
  done
) &
SAMPLER="$!"
PIDS+=("${SAMPLER}")
declare -A MEMBERS_S PLACEMENT_S CALLS BY MEMBER_BY
for phase in create edit; do
  log "== hub: ${phase} ${COUNT} ConfigMaps under a Placement (copies on ${MEMBERS} members)"
  before="$(hub_requests)"
  by_before="$(hub_requests_by)"
  members_before="$(member_requests_by)"
  cpu_before="$(cpu_snapshot)"
  profiling=()
  if [[ -n "${PROFILE_DIR}" ]]; then
    profile "${HUB}" 20 "${PROFILE_DIR}/hub-${phase}.pprof" & profiling+=("$!")
    profile "${FIRST_MEMBER}" 20 "${PROFILE_DIR}/member-${phase}.pprof" & profiling+=("$!")
  fi
  read -r _ _ MEMBERS_S[${phase}] PLACEMENT_S[${phase}] < <(user "hub-${phase}" bench-user)
  cpu_phase "${phase}" "${cpu_before}" "$(cpu_snapshot)"
  CALLS[${phase}]="$(per_object "${before}" "$(hub_requests)")"
  BY[${phase}]="$(requests_between "${by_before}" "$(hub_requests_by)")"
  MEMBER_BY[${phase}]="$(requests_between "${members_before}" "$(member_requests_by)")"
  for p in "${profiling[@]}"; do wait "${p}" || log "a profile of the ${phase} is missing"; done
  if [[ "${phase}" == create ]]; then
    sleep 10
    SPLITTER_LOADED="$(rss "${SPLITTER_PID}")"
    SYNCER_LOADED="$(rss "${SYNCER_PID}")"
    SPLITTER_LOADED_ANON="$(rss_anon "${SPLITTER_PID}")"
    SYNCER_LOADED_ANON="$(rss_anon "${SYNCER_PID}")"
    read -r SPLITTER_HEAP SPLITTER_RES SPLITTER_ACT SPLITTER_META < <(heap "${SPLITTER_PID}" flotilla_splitter)
    read -r SYNCER_HEAP SYNCER_RES SYNCER_ACT SYNCER_META < <(heap "${SYNCER_PID}" flotilla_syncer)
    if [[ -n "${PROFILE_DIR}" ]]; then
      allocator_stats "${SPLITTER_PID}" "${PROFILE_DIR}/splitter-allocator.txt"
      allocator_stats "${SYNCER_PID}" "${PROFILE_DIR}/syncer-allocator.txt"
    fi
    STATUS_BYTES="$(k -n bench-user get placement user -o json | wc -c)"
    # The largest Work as the hub stores it, and how much of that is its managed fields.
    read -r WORK_BYTES WORK_MF_BYTES < <(k get works -A -o json --show-managed-fields | python3 -c '
import json, sys
works = json.load(sys.stdin)["items"]
size = lambda o: len(json.dumps(o, separators=(",", ":")))
w = max(works, key=size)
print(size(w), size(w["metadata"].get("managedFields", [])))')
  fi
done
log "== hub: single edits of one ConfigMap among ${COUNT}"
read -r _ P50 P99 PMAX S50 S99 SMAX W50 W99 < <(user hub-single bench-user)
log "== hub: delete ${COUNT} ConfigMaps"
before="$(hub_requests)"
by_before="$(hub_requests_by)"
members_before="$(member_requests_by)"
cpu_before="$(cpu_snapshot)"
profiling=()
if [[ -n "${PROFILE_DIR}" ]]; then
  profile "${HUB}" 10 "${PROFILE_DIR}/hub-delete.pprof" & profiling+=("$!")
fi
read -r _ _ "MEMBERS_S[delete]" "PLACEMENT_S[delete]" < <(user hub-delete bench-user)
cpu_phase delete "${cpu_before}" "$(cpu_snapshot)"
for p in "${profiling[@]}"; do wait "${p}" || log "a profile of the delete is missing"; done
CALLS[delete]="$(per_object "${before}" "$(hub_requests)")"
BY[delete]="$(requests_between "${by_before}" "$(hub_requests_by)")"
MEMBER_BY[delete]="$(requests_between "${members_before}" "$(member_requests_by)")"

kill "${SAMPLER}" 2>/dev/null || true
read -r SPLITTER_FDS SYNCER_FDS <"${FDS}" || SPLITTER_FDS="-" SYNCER_FDS="-"

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
kib_per_copy() { awk -v s="$1" -v i="$2" -v n="$((COUNT * MEMBERS))" 'BEGIN {printf "%.1f", (s - i) * 1024 / n}'; }
echo
echo "| phase (${COUNT} ConfigMaps, ${MEMBERS} members, concurrency ${CONCURRENCY}) | direct: members agree, s | direct with the syncer's labels and annotations, s | hub alone (placed nowhere), s | hub: members agree, s | ratio to direct | hub: Placement reports every copy, s | hub API requests per object |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for phase in create edit delete; do
  echo "| ${phase} | $(d_time "${phase}") | $(l_time "${phase}") | $(a_time "${phase}") | ${MEMBERS_S[${phase}]} | $(ratio "${MEMBERS_S[${phase}]}" "$(d_time "${phase}")") | ${PLACEMENT_S[${phase}]} | ${CALLS[${phase}]} |"
done
echo
echo "| 50 single edits on the hub, write to last member | each on a settled fleet, s | each 0.2 s after the previous one, s |"
echo "|---|---:|---:|"
echo "| p50 | ${P50} | ${S50} |"
echo "| p99 | ${P99} | ${S99} |"
echo "| max | ${PMAX} | ${SMAX} |"
echo "| of which until every member's Work on the hub had it (the splitter's share), p50 / p99 | ${W50} / ${W99} | – |"
echo
echo "| controller | RSS idle, MiB | RSS with ${COUNT} × ${MEMBERS} copies placed, MiB | KiB per placed object × member | anonymous RSS idle / placed, MiB | KiB per placed object × member (anonymous) | open file descriptors at most (hub phases) |"
echo "|---|---:|---:|---:|---:|---:|---:|"
echo "| splitter | ${SPLITTER_IDLE} | ${SPLITTER_LOADED} | $(kib_per_copy "${SPLITTER_LOADED}" "${SPLITTER_IDLE}") | ${SPLITTER_IDLE_ANON} / ${SPLITTER_LOADED_ANON} | $(kib_per_copy "${SPLITTER_LOADED_ANON}" "${SPLITTER_IDLE_ANON}") | ${SPLITTER_FDS} |"
echo "| syncer | ${SYNCER_IDLE} | ${SYNCER_LOADED} | $(kib_per_copy "${SYNCER_LOADED}" "${SYNCER_IDLE}") | ${SYNCER_IDLE_ANON} / ${SYNCER_LOADED_ANON} | $(kib_per_copy "${SYNCER_LOADED_ANON}" "${SYNCER_IDLE_ANON}") | ${SYNCER_FDS} |"
echo
echo "| controller | live heap idle, MiB | live heap with the copies placed, MiB | KiB per placed object × member | pages holding live objects (active) idle / placed, MiB | allocator resident idle / placed, MiB | allocator metadata idle / placed, MiB |"
echo "|---|---:|---:|---:|---:|---:|---:|"
echo "| splitter | ${SPLITTER_HEAP_IDLE} | ${SPLITTER_HEAP} | $(kib_per_copy "${SPLITTER_HEAP}" "${SPLITTER_HEAP_IDLE}") | ${SPLITTER_ACT_IDLE} / ${SPLITTER_ACT} | ${SPLITTER_RES_IDLE} / ${SPLITTER_RES} | ${SPLITTER_META_IDLE} / ${SPLITTER_META} |"
echo "| syncer | ${SYNCER_HEAP_IDLE} | ${SYNCER_HEAP} | $(kib_per_copy "${SYNCER_HEAP}" "${SYNCER_HEAP_IDLE}") | ${SYNCER_ACT_IDLE} / ${SYNCER_ACT} | ${SYNCER_RES_IDLE} / ${SYNCER_RES} | ${SYNCER_META_IDLE} / ${SYNCER_META} |"
echo
echo "| CPU seconds during the phase | direct (create+edit+delete) | direct with the syncer's labels and annotations | hub alone (create+edit+delete) | hub create | hub edit | hub delete |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for c in "${COMPONENTS[@]}"; do
  echo "| ${c} | ${CPU[direct,${c}]} | ${CPU[linked,${c}]} | ${CPU[alone,${c}]} | ${CPU[create,${c}]} | ${CPU[edit,${c}]} | ${CPU[delete,${c}]} |"
done
echo
echo "The Placement with ${COUNT} objects × ${MEMBERS} copies placed: ${STATUS_BYTES} bytes (\`kubectl get -o json\`)."
echo "The largest Work: ${WORK_BYTES} bytes as compact JSON, ${WORK_MF_BYTES} of them managed fields."
echo
# A table of the most frequent requests of each phase: title, then the requests_between outputs
# of the create, the edit and the delete (rows: the eight most frequent of any phase).
requests_table() { # title create edit delete
  local _ verb resource
  echo "| $1 | create | edit | delete |"
  echo "|---|---:|---:|---:|"
  count_in() { awk -v v="${verb}" -v r="${resource}" '$2 == v && $3 == r {print $1}' <<<"$1"; }
  while read -r verb resource; do
    echo "| ${verb} ${resource} | $(count_in "$2") | $(count_in "$3") | $(count_in "$4") |"
  done < <(printf '%s\n' "$2" "$3" "$4" | awk 'NF == 3 {n[$2 " " $3] += $1} END {for (k in n) print n[k], k}' \
    | sort -rn | head -n 10 | cut -d' ' -f2-)
}
requests_table "hub requests during the phase (most frequent)" "${BY[create]}" "${BY[edit]}" "${BY[delete]}"
echo
requests_table "member requests during the phase, all members (most frequent; the direct path: one APPLY per object and member)" \
  "${MEMBER_BY[create]}" "${MEMBER_BY[edit]}" "${MEMBER_BY[delete]}"
