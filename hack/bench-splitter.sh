# shellcheck shell=bash
# Sourced by `hack/bench.sh splitter` once the environment, the registration controller and the
# syncer run (see hack/bench.sh for the variables it sets). Not meant to be run on its own.

"${TARGET}/flotilla-splitter" --kubeconfig "${HUB}" --leader-elect=false \
  --metrics-address 127.0.0.1:0 --health-address 127.0.0.1:0 >"${RUN}/splitter.log" 2>&1 &
PIDS+=("$!")
k create namespace bench-place >/dev/null
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
  k get clusters.flotilla.dev "${FIRST}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}'
}
moved() {
  k -n bench-place get deployment failover -o \
    jsonpath='{.status.conditions[?(@.type=="Placed")].message}|{.status.availableReplicas}|{.status.conditions[?(@.type=="Available")].status}'
}
done_moving() { [[ "$1" != *"${FIRST}="* && "$1" == *"|${REPLICAS}|True" ]]; }
T0="$(now_s)"
"${CL[@]}" stop-member "${FIRST}" >/dev/null
until [[ "$(ready_status)" != True ]]; do sleep 0.5; done
T_DETECT="$(now_s)"
m="$(moved)"
for _ in $(seq 600); do
  done_moving "${m}" && break
  sleep 0.5
  m="$(moved)"
done
done_moving "${m}" || die "the replicas of ${FIRST} did not move: ${m}"
T_MOVED="$(now_s)"

secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'; }
RATIO="$(awk -v a="${H_MED}" -v b="${D_MED}" 'BEGIN {printf "%.2f", a / b}')"
echo
echo "| ${REPLICAS} replicas until Available (${RUNS} runs each, alternating) | median, s | min, s | max, s | ratio of medians |"
echo "|---|---:|---:|---:|---:|"
echo "| applied straight into ${FIRST} (baseline) | ${D_MED} | ${D_MIN} | ${D_MAX} | 1.00 |"
echo "| applied to the hub, divided over ${MEMBERS} members | ${H_MED} | ${H_MIN} | ${H_MAX} | ${RATIO} |"
echo
echo "| failover of ${FIRST}, ${REPLICAS} replicas (probe 10 s, grace 40 s, toleration 30 s) | s after the stop |"
echo "|---|---:|"
echo "| detection: its Cluster no longer Ready | $(secs "${T0}" "${T_DETECT}") |"
echo "| the hub Deployment Available again with every replica, none on ${FIRST} | $(secs "${T0}" "${T_MOVED}") |"
echo "| of which after detection (the 30 s toleration, then re-placement) | $(secs "${T_DETECT}" "${T_MOVED}") |"
