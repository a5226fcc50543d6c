#!/usr/bin/env bash
# Flotilla's quick start: builds everything, starts a local hub and three members, installs
# Flotilla on the hub (CRDs and the chart's ServiceAccounts and RBAC — the controllers run as
# local processes with those ServiceAccounts' tokens, since there are no container images here),
# registers member1 and member2 in push mode and member3 in pull mode (its agent asks, the hub
# accepts), applies an example workload and shows it running 10/10, spread over the members.
#
# Usage: hack/quickstart.sh [--tour]
#   --tour   then stop one member and show its replicas moving while the Deployment stays
#            Available, and start it again
# Everything it starts is stopped, and its data deleted, by: hack/clusters.sh down
# Environment: FLOTILLA_RUN_DIR, FLOTILLA_PORT_BASE (see hack/clusters.sh --help) and
# FLOTILLA_CONTROLLER_PORT (first of the local ports the controllers serve on; default the port
# base + 2637: 19080 with the default port base).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "${REPO_ROOT}"

TOUR=0
for arg in "$@"; do
  case "${arg}" in
    --tour) TOUR=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '${arg}' (see --help)" ;;
  esac
done

RUN_DIR="${FLOTILLA_RUN_DIR:-${TMPDIR:-/tmp}/flotilla-env}"
PIDS="${RUN_DIR}/pids"
LOGS="${RUN_DIR}/logs"
NS=flotilla-system
T0="$(now)"

log "== building the tools (the first time: about 10-15 minutes) and the controllers"
"${HACK_DIR}/build-tools.sh" >/dev/null
cargo build --workspace --bins --quiet
BIN="${CARGO_TARGET_DIR:-${REPO_ROOT}/target}/debug"

log "== starting the hub and three members"
# `eval "$(...)"` would go on after a failed start-up: check first.
ENV_LINES="$("${HACK_DIR}/clusters.sh" --run-dir "${RUN_DIR}" up --members 3)" \
  || die "the local clusters did not start (see the messages above)"
eval "${ENV_LINES}"
K=("${TOOLS_BIN}/kubectl" --kubeconfig "${FLOTILLA_HUB_KUBECONFIG}")
member_kubeconfig() { tr ',' '\n' <<<"${FLOTILLA_MEMBER_KUBECONFIGS}" | sed -n "s/^$1=//p"; }
apply() { "${K[@]}" apply --server-side --force-conflicts --field-manager flotilla-quickstart "$@" >/dev/null; }
# The objects of a YAML file but its Deployments (there are no container images here).
without_deployments() {
  python3 -c 'import sys; docs = open(sys.argv[1]).read().split("\n---"); print("\n---".join(d for d in docs if "\nkind: Deployment" not in d))' "$1"
}

log "== installing Flotilla on the hub: CRDs, the chart's ServiceAccounts and RBAC, bootstrap RBAC"
apply -f crds/yaml/
"${K[@]}" wait --for condition=Established -f crds/yaml/ >/dev/null
"${K[@]}" create namespace "${NS}" --dry-run=client -o yaml | apply -f -
"${TOOLS_BIN}/helm" template flotilla charts/flotilla --namespace "${NS}" 2>/dev/null \
  | without_deployments /dev/stdin | apply -f -
apply -f deploy/bootstrap/

# A kubeconfig for a cluster (given by an admin kubeconfig) that authenticates as one of its
# ServiceAccounts; sa_kubeconfig: one of the hub.
sa_kubeconfig_of() { # kubeconfig namespace name file
  local token
  token="$("${TOOLS_BIN}/kubectl" --kubeconfig "$1" -n "$2" create token "$3" --duration 24h)"
  sed "s|^\(\s*token:\).*|\1 ${token}|" "$1" >"$4"
  chmod 600 "$4"
}
sa_kubeconfig() { sa_kubeconfig_of "${FLOTILLA_HUB_KUBECONFIG}" "$@"; }

wait_ready() { # name port
  local t0; t0="$(now)"
  until [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$2/readyz")" == 200 ]]; do
    proc_alive "$1" || { tail -n 20 "${LOGS}/$1.log" >&2; die "$1 exited"; }
    (( $(now) - t0 < 60 )) || { tail -n 20 "${LOGS}/$1.log" >&2; die "$1 not ready after 60s"; }
    sleep 1
  done
}

log "== starting the four controllers, each with its own ServiceAccount"
mkdir -p "${RUN_DIR}/controllers"
# Derived from the port base, so environments side by side do not collide.
port="${FLOTILLA_CONTROLLER_PORT:-$(( ${FLOTILLA_PORT_BASE:-16443} + 2637 ))}"
first_port="${port}"
for c in registration syncer splitter negotiator; do
  kc="${RUN_DIR}/controllers/${c}.kubeconfig"
  sa_kubeconfig "${NS}" "flotilla-${c}" "${kc}"
  extra=()
  case "${c}" in
    # The agent ClusterRole of the chart's release "flotilla", as its Deployment passes it.
    registration) extra=(--probe-interval 5s --grace-period 20s --agent-cluster-role flotilla:flotilla:agent) ;;
    syncer) extra=(--resync-interval 10s) ;;
  esac
  start_proc "flotilla.${c}" "${BIN}/flotilla-${c}" --kubeconfig "${kc}" --lease-namespace "${NS}" \
    --metrics-address "127.0.0.1:${port}" --health-address "127.0.0.1:${port}" "${extra[@]}"
  wait_ready "flotilla.${c}" "${port}"
  log "flotilla-${c} ready (metrics and health on 127.0.0.1:${port})"
  port=$((port + 1))
done

log "== registering member1 and member2 (push: the hub holds their kubeconfigs in Secrets)"
for m in member1 member2; do
  "${K[@]}" -n "${NS}" create secret generic "${m}-kubeconfig" --from-file=kubeconfig="$(member_kubeconfig "${m}")" \
    --dry-run=client -o yaml | apply -f -
  cat <<EOF | apply -f -
apiVersion: flotilla.dev/v1alpha1
kind: Cluster
metadata:
  name: ${m}
spec:
  syncMode: Push
  kubeconfigSecretRef: {name: ${m}-kubeconfig}
EOF
done

log "== registering member3 (pull: its agent asks with a bootstrap token, the hub admin accepts)"
"${K[@]}" -n "${NS}" create serviceaccount flotilla-bootstrap-member3 --dry-run=client -o yaml | apply -f -
"${K[@]}" create clusterrolebinding flotilla-bootstrap-member3 --clusterrole flotilla:bootstrap \
  --serviceaccount "${NS}:flotilla-bootstrap-member3" --dry-run=client -o yaml | apply -f -
sa_kubeconfig "${NS}" flotilla-bootstrap-member3 "${RUN_DIR}/controllers/member3-bootstrap.kubeconfig"
M3=("${TOOLS_BIN}/kubectl" --kubeconfig "$(member_kubeconfig member3)")
"${M3[@]}" create namespace "${NS}" --dry-run=client -o yaml | "${M3[@]}" apply -f - >/dev/null
start_proc "member3.flotilla-agent" "${BIN}/flotilla-registration" agent \
  --kubeconfig "$(member_kubeconfig member3)" --lease-namespace "${NS}" \
  --metrics-address "127.0.0.1:${port}" --health-address "127.0.0.1:${port}" \
  --cluster-name member3 --hub-kubeconfig "${RUN_DIR}/controllers/member3-bootstrap.kubeconfig" \
  --heartbeat-interval 5s
wait_ready "member3.flotilla-agent" "${port}"
port=$((port + 1))
t0="$(now)"
until "${K[@]}" get clusters.flotilla.dev member3 >/dev/null 2>&1; do
  (( $(now) - t0 < 60 )) || die "the agent of member3 did not create its Cluster"
  sleep 1
done
log "member3's agent created its Cluster and asks to join; accepting it (hubAcceptsClient: true)"
"${K[@]}" patch clusters.flotilla.dev member3 --type merge -p '{"spec":{"hubAcceptsClient":true}}' >/dev/null

log "== starting member3's syncer (pull) as the ServiceAccount of deploy/agent/syncer.yaml"
without_deployments deploy/agent/syncer.yaml \
  | "${M3[@]}" apply --server-side --force-conflicts --field-manager flotilla-quickstart -f - >/dev/null
t0="$(now)"
until [[ -n "$("${M3[@]}" get clusterrole flotilla:syncer -o jsonpath='{.rules[0].verbs}' 2>/dev/null)" ]]; do
  (( $(now) - t0 < 60 )) || die "member3's controller-manager did not aggregate the ClusterRole flotilla:syncer"
  sleep 1
done
sa_kubeconfig_of "$(member_kubeconfig member3)" "${NS}" flotilla-syncer "${RUN_DIR}/controllers/member3-syncer.kubeconfig"
start_proc "member3.flotilla-syncer" "${BIN}/flotilla-syncer" --pull --cluster-name member3 \
  --kubeconfig "${RUN_DIR}/controllers/member3-syncer.kubeconfig" --lease-namespace "${NS}" \
  --metrics-address "127.0.0.1:${port}" --health-address "127.0.0.1:${port}"
port=$((port + 1))

log "== waiting for the members to be Ready"
"${K[@]}" wait --for condition=Ready clusters.flotilla.dev --all --timeout 120s >/dev/null

# Placement selects Clusters by their labels: give each the region its nodes are in, as an admin
# would (member1 and member3 share europe-west1, member2 is in us-east1).
log "== labelling each Cluster with its member's region (topology.kubernetes.io/region)"
for m in member1 member2 member3; do
  region="$("${TOOLS_BIN}/kubectl" --kubeconfig "$(member_kubeconfig "${m}")" get nodes \
    -o jsonpath='{.items[0].metadata.labels.topology\.kubernetes\.io/region}')"
  "${K[@]}" label clusters.flotilla.dev "${m}" "topology.kubernetes.io/region=${region}" --overwrite >/dev/null
done

log "== applying the example workload to the hub (deploy/quickstart/workload.yaml)"
apply -f deploy/quickstart/workload.yaml
"${K[@]}" -n demo wait deployment/web --for jsonpath='{.status.availableReplicas}'=10 --timeout 180s >/dev/null
"${K[@]}" -n demo wait deployment/web --for condition=Available --timeout 60s >/dev/null

show() {
  echo
  "${K[@]}" get clusters.flotilla.dev -L topology.kubernetes.io/region
  echo
  "${K[@]}" -n demo get deployment web
  echo
  echo "distribution: $("${K[@]}" -n demo get deployment web -o jsonpath='{.status.conditions[?(@.type=="Placed")].message}')"
  local m mk replicas ip
  for m in member1 member2 member3; do
    mk=("${TOOLS_BIN}/kubectl" --kubeconfig "$(member_kubeconfig "${m}")" --request-timeout 5s -n demo)
    if ! replicas="$("${mk[@]}" get deployment web -o jsonpath='{.status.availableReplicas}/{.spec.replicas} available' 2>/dev/null)"; then
      printf '  %-8s unreachable\n' "${m}"
      continue
    fi
    ip="$("${mk[@]}" get service web -o jsonpath='{.spec.clusterIP}' 2>/dev/null || true)"
    printf '  %-8s %-16s Service web at %s (allocated by the member)\n' "${m}" "${replicas}" "${ip:--}"
  done
  echo "  hub      Service web at $("${K[@]}" -n demo get service web -o jsonpath='{.spec.clusterIP}')"
}
show

if [[ "${TOUR}" == 1 ]]; then
  echo
  log "== tour: stopping member1; once it has been unready for the grace period and the Placement's failover toleration (30 s), its replicas move to the other members"
  "${HACK_DIR}/clusters.sh" --run-dir "${RUN_DIR}" stop-member member1 >/dev/null
  t0="$(now)"
  placed() { "${K[@]}" -n demo get deployment web -o jsonpath='{.status.conditions[?(@.type=="Placed")].message} {.status.availableReplicas}'; }
  until [[ "$(placed)" != *member1=* && "$(placed)" == *" 10" ]]; do
    (( $(now) - t0 < 240 )) || die "the replicas of member1 did not move within 240s: $(placed)"
    sleep 2
  done
  log "member1 is $("${K[@]}" get clusters.flotilla.dev member1 -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}'); its replicas moved in $(( $(now) - t0 ))s and the Deployment is Available again"
  show
  log "== tour: starting member1 again"
  "${HACK_DIR}/clusters.sh" --run-dir "${RUN_DIR}" start-member member1 >/dev/null
  "${K[@]}" wait --for condition=Ready clusters.flotilla.dev member1 --timeout 120s >/dev/null
  show
fi

cat <<EOF

Flotilla is running ($(( $(now) - T0 ))s). Explore:
  eval "\$(hack/clusters.sh --run-dir ${RUN_DIR} env)"
  export PATH="${TOOLS_BIN}:\$PATH"
  kubectl --kubeconfig \$FLOTILLA_HUB_KUBECONFIG get flotilla -A          # Clusters, Placements, Works
  kubectl --kubeconfig \$FLOTILLA_HUB_KUBECONFIG -n demo scale deployment web --replicas 13
  kubectl --kubeconfig \$FLOTILLA_HUB_KUBECONFIG describe clusters.flotilla.dev member3
  curl -s 127.0.0.1:${first_port}/metrics | grep flotilla_registration_clusters
Controller logs: ${LOGS}/flotilla.*.log
Stop everything and delete its data: hack/clusters.sh --run-dir ${RUN_DIR} down
EOF
