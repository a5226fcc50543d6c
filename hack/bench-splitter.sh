# shellcheck shell=bash
# Sourced by `hack/bench.sh splitter` once the environment, the registration controller and the
# syncer run (see hack/bench.sh for the variables it sets). Not meant to be run on its own.

"${TARGET}/flotilla-splitter" --kubeconfig "${HUB}" --leader-elect=false \
  --metrics-address 127.0.0.1:0 --health-address 127.0.0.1:0 >"${RUN}/splitter.log" 2>&1 &
PIDS+=("$!")
k create namespace bench-place >/dev/null
# The baseline makes namespace bench-place in the first member itself: the hub admin lets the
# Placement use it (else the member's namespace is the member's, NamespaceNotFlotillas).
k annotate namespace bench-place flotilla.dev/allow-existing-namespaces=true >/dev/null
k apply --server-side -f - >/dev/null <<EOF
apiVersion: flotilla.dev/v1alpha1
kind: Placement
metadata: {name: spread, namespace: bench-place}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment}]
  replicaScheduling: {type: Divided, division: Even}
EOF
FIRST="${MEMBER_LIST[0]%%=*}"
FIRST_KUBECONFIG="${MEMBER_LIST[0]#*=}"

log "== ${REPLICAS} replicas until Available: on the hub (divided over ${MEMBERS} members) and straight into ${FIRST}, ${RUNS} runs each"
PLACE_OUT="$("${TARGET}/examples/bench_place" "${HUB}" "${FIRST_KUBECONFIG}" bench-place "${REPLICAS}" "${RUNS}")"
read -r _ D_MED D_MIN D_MAX <<<"$(grep '^direct ' <<<"${PLACE_OUT}")"
read -r _ H_MED H_MIN H_MAX <<<"$(grep '^hub ' <<<"${PLACE_OUT}")"

log "== failover: stopping ${FIRST} under a ${REPLICAS}-replica Deployment"
k -n bench-place apply --server-side -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: failover}
spec:
  replicas: ${REPLICAS}
  selector: {matchLabels: {app: failover}}
  template:
    metadata: {labels: {app: failover}}
    spec: {containers: [{name: app, image: registry.k8s.io/pause:3.10}]}
EOF
k -n bench-place wait deployment/failover --for jsonpath='{.status.availableReplicas}'="${REPLICAS}" --timeout 120s >/dev/null
k -n bench-place wait deployment/failover --for condition=Available --timeout 60s >/dev/null
now_s() { date +%s.%N; }
ready_status() {
  k get clusters.flotilla.dev "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}'
}
moved() {
  k -n bench-place get deployment failover -o \
    jsonpath='{.status.conditions[?(@.type=="Placed")].message}|{.status.availableReplicas}|{.status.conditions[?(@.type=="Available")].status}'
}
done_moving() { [[ "$1" != *"$2="* && "$1" == *"|${REPLICAS}|True" ]]; }
# Takes member $1 away with clusters.sh's command $2 (stop-member or pause-member); sets T0,
# T_DETECT and T_MOVED.
fail_member() {
  local m
  T0="$(now_s)"
  "${CL[@]}" "$2" "$1" >/dev/null
  until [[ "$(ready_status "$1")" != True ]]; do sleep 0.5; done
  T_DETECT="$(now_s)"
  m="$(moved)"
  for _ in $(seq 600); do
    done_moving "${m}" "$1" && break
    sleep 0.5
    m="$(moved)"
  done
  done_moving "${m}" "$1" || die "the replicas of $1 did not move: ${m}"
  T_MOVED="$(now_s)"
}
fail_member "${FIRST}" stop-member
STOPPED=("${T0}" "${T_DETECT}" "${T_MOVED}")
# A member that hangs: its apiserver takes connections and never answers (SIGSTOP).
SECOND="${MEMBER_LIST[1]%%=*}"
log "== failover: pausing ${SECOND} (SIGSTOP: it hangs) under the same Deployment"
fail_member "${SECOND}" pause-member
PAUSED=("${T0}" "${T_DETECT}" "${T_MOVED}")
"${CL[@]}" resume-member "${SECOND}" >/dev/null

secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'; }
RATIO="$(awk -v a="${H_MED}" -v b="${D_MED}" 'BEGIN {printf "%.2f", a / b}')"
echo
echo "| ${REPLICAS} replicas until Available (${RUNS} runs each, alternating) | median, s | min, s | max, s | ratio of medians |"
echo "|---|---:|---:|---:|---:|"
echo "| applied straight into ${FIRST} (baseline) | ${D_MED} | ${D_MIN} | ${D_MAX} | 1.00 |"
echo "| applied to the hub, divided over ${MEMBERS} members | ${H_MED} | ${H_MIN} | ${H_MAX} | ${RATIO} |"
echo
echo "| failover, ${REPLICAS} replicas (defaults: probe 10 s, grace 30 s, toleration 20 s) | ${FIRST} stopped, s after | ${SECOND} hung (SIGSTOP), s after |"
echo "|---|---:|---:|"
echo "| detection: its Cluster no longer Ready | $(secs "${STOPPED[0]}" "${STOPPED[1]}") | $(secs "${PAUSED[0]}" "${PAUSED[1]}") |"
echo "| the hub Deployment Available again with every replica, none on it | $(secs "${STOPPED[0]}" "${STOPPED[2]}") | $(secs "${PAUSED[0]}" "${PAUSED[2]}") |"
echo "| of which after detection (the toleration, then re-placement) | $(secs "${STOPPED[1]}" "${STOPPED[2]}") | $(secs "${PAUSED[1]}" "${PAUSED[2]}") |"
