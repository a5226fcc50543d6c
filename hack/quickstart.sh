#!/usr/bin/env bash
# Flotilla's quick start, as a user installs it: builds everything, starts three member clusters,
# one of which (member1, the "host") also has a real node (containerd + kubelet), and installs
# Flotilla there with `helm install --wait`: the chart runs a whole hub (etcd, kube-apiserver, a
# restricted kube-controller-manager) and the four controllers as pods on that node. Then it
# fetches the hub's kubeconfig from its Secret, registers member1 and member2 in push mode and
# member3 in pull mode (its agent asks, the hub accepts), applies an example workload to the hub
# and shows it running 10/10, spread over the members.
#
# Usage: hack/quickstart.sh [--tour]
#   --tour   then stop member2 and show its replicas moving while the Deployment stays
#            Available, and start it again
# Everything it starts is stopped, and its data deleted, by: hack/clusters.sh down
# Environment: FLOTILLA_RUN_DIR, FLOTILLA_PORT_BASE (see hack/clusters.sh --help) and
# FLOTILLA_CONTROLLER_PORT (first of the 21 node ports the chart's pods listen on; default the
# port base + 2637: 19080 with the default port base).
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
NS=flotilla-system
RELEASE=flotilla
HOST=member1
T0="$(now)"

log "== checking this machine's prerequisites (missing Debian packages are installed when root)"
ensure_prerequisites
[[ "$(id -u)" == 0 ]] \
  || die "the quick start runs a real node (containerd and a kubelet) and needs root; run it as root"

log "== building the tools (the first time: about 20 minutes), the controllers and their image"
"${HACK_DIR}/build-tools.sh" >/dev/null
cargo build --workspace --bins --quiet
image="$("${HACK_DIR}/build-image.sh" --dev)"

log "== starting three members; ${HOST} also gets a real node (containerd + kubelet): the host"
CLUSTERS=("${HACK_DIR}/clusters.sh" --run-dir "${RUN_DIR}")
# `eval "$(...)"` would go on after a failed start-up: check first.
# No hub of processes: the hub is the chart's (clusters.sh env names its kubeconfig afterwards).
ENV_LINES="$("${CLUSTERS[@]}" up --members 3 --host-node "${HOST}" --no-hub)" \
  || die "the local clusters did not start (see the messages above)"
eval "${ENV_LINES}"
"${CLUSTERS[@]}" load-image "${image}" >/dev/null
member_kubeconfig() { tr ',' '\n' <<<"${FLOTILLA_MEMBER_KUBECONFIGS}" | sed -n "s/^$1=//p"; }
HOST_KUBECONFIG="$(member_kubeconfig "${HOST}")"
HOST_K=("${TOOLS_BIN}/kubectl" --kubeconfig "${HOST_KUBECONFIG}")

# The node ports of the chart's pods (hostNetwork), derived from the port base so that
# environments side by side do not collide.
port="${FLOTILLA_CONTROLLER_PORT:-$(( ${FLOTILLA_PORT_BASE:-16443} + 2637 ))}"
mapfile -t ports < <(chart_port_values "${port}")
AGENT_PORT=$(( port + 15 ))
REGISTRATION_METRICS=$(( port + 5 ))

log "== a volume for the hub's etcd on the host node (StorageClass flotilla-local)"
etcd_volume_yaml "${RELEASE}" "${NS}" "${RUN_DIR}/volumes/${RELEASE}-etcd" "${FLOTILLA_HOST_NODE}" \
  | "${HOST_K[@]}" apply -f - >/dev/null

log "== helm install ${RELEASE} charts/flotilla --wait (into ${HOST}, namespace ${NS})"
t0="$(now)"
if ! "${TOOLS_BIN}/helm" --kubeconfig "${HOST_KUBECONFIG}" upgrade --install "${RELEASE}" \
    charts/flotilla --namespace "${NS}" --create-namespace \
    --values deploy/quickstart/values-local.yaml "${ports[@]}" \
    --wait --wait-for-jobs --timeout 5m 2> >(grep -v 'found symbolic link' >&2); then
  "${HOST_K[@]}" -n "${NS}" get pods -o wide >&2 || true
  "${HOST_K[@]}" -n "${NS}" get events --sort-by .lastTimestamp 2>&1 | tail -n 20 >&2 || true
  die "helm install did not finish: the pods and events above say which part is not ready"
fi
log "the hub and the controllers are ready after $(( $(now) - t0 ))s:"
"${HOST_K[@]}" -n "${NS}" get pods -o wide >&2

HUB_KUBECONFIG="${RUN_DIR}/kubeconfigs/${CHART_HUB_KUBECONFIG}"
( umask 077; "${HOST_K[@]}" -n "${NS}" get secret "${RELEASE}-hub-admin-kubeconfig" \
    -o jsonpath='{.data.kubeconfig}' | base64 -d >"${HUB_KUBECONFIG}" )
K=("${TOOLS_BIN}/kubectl" --kubeconfig "${HUB_KUBECONFIG}")
apply() { "${K[@]}" apply --server-side --force-conflicts --field-manager flotilla-quickstart "$@" >/dev/null; }
apply -f deploy/bootstrap/

# A kubeconfig for a cluster (given by an admin kubeconfig) that authenticates as one of its
# ServiceAccounts.
sa_kubeconfig_of() { # kubeconfig namespace name file
  local token
  token="$("${TOOLS_BIN}/kubectl" --kubeconfig "$1" -n "$2" create token "$3" --duration 720h)"
  "${TOOLS_BIN}/kubectl" --kubeconfig "$1" config view --raw --minify -o json | python3 -c '
import json, sys
config = json.load(sys.stdin)
config["users"][0]["user"] = {"token": sys.argv[1]}
json.dump(config, sys.stdout)' "${token}" >"$4"
  chmod 600 "$4"
}

log "== registering member1 and member2 (push: kubectl flotilla join, the hub holds their kubeconfigs)"
# `kubectl flotilla join` (controllers/cli) stores two kubeconfigs per member: the syncer's, which
# writes (Secret <member>-kubeconfig of ${NS}), and a read-only one for registration and the
# negotiator (the identity of deploy/member/reader.yaml, which it applies in the member; Secret
# <member>-reader of ${NS}-readers, the only namespace whose Secrets they may read).
PATH="${CARGO_TARGET_DIR:-${REPO_ROOT}/target}/debug:${PATH}"
for m in member1 member2; do
  "${TOOLS_BIN}/kubectl" flotilla --kubeconfig "${HUB_KUBECONFIG}" join "${m}" -n "${NS}" \
    --member-kubeconfig "$(member_kubeconfig "${m}")" >/dev/null
done

log "== registering member3 (pull: its agent asks with a bootstrap token, the hub admin accepts)"
"${K[@]}" -n "${NS}" create serviceaccount flotilla-bootstrap-member3 --dry-run=client -o yaml | apply -f -
"${K[@]}" create clusterrolebinding flotilla-bootstrap-member3 --clusterrole flotilla:bootstrap \
  --serviceaccount "${NS}:flotilla-bootstrap-member3" --dry-run=client -o yaml | apply -f -
mkdir -p "${RUN_DIR}/controllers"
sa_kubeconfig_of "${HUB_KUBECONFIG}" "${NS}" flotilla-bootstrap-member3 "${RUN_DIR}/controllers/member3-bootstrap.kubeconfig"
M3_KUBECONFIG="$(member_kubeconfig member3)"
# member3 has only kwok nodes: its agent, syncer and importer run hosted, as pods on the host
# node, with the member chart (charts/flotilla-agent) installed twice: in member3 their
# identities (ServiceAccounts and least-privilege RBAC), on the host the Deployments, which reach
# member3 with kubeconfigs of those ServiceAccounts. In a member with nodes of its own, one
# `helm install flotilla charts/flotilla-agent --set clusterName=...` does both.
HELM=("${TOOLS_BIN}/helm")
log "== helm install ${RELEASE} charts/flotilla-agent --set install.controllers=false (into member3: the identities)"
"${HELM[@]}" --kubeconfig "${M3_KUBECONFIG}" upgrade --install "${RELEASE}" charts/flotilla-agent \
  --namespace "${NS}" --create-namespace --set install.controllers=false --wait >/dev/null
AGENT_NS=flotilla-member3
"${HOST_K[@]}" create namespace "${AGENT_NS}" --dry-run=client -o yaml | "${HOST_K[@]}" apply -f - >/dev/null
for c in agent syncer importer; do
  sa_kubeconfig_of "${M3_KUBECONFIG}" "${NS}" "${RELEASE}-${c}" "${RUN_DIR}/controllers/member3-${c}.kubeconfig"
done
"${HOST_K[@]}" -n "${AGENT_NS}" create secret generic member3-kubeconfigs \
  --from-file=agent="${RUN_DIR}/controllers/member3-agent.kubeconfig" \
  --from-file=syncer="${RUN_DIR}/controllers/member3-syncer.kubeconfig" \
  --from-file=importer="${RUN_DIR}/controllers/member3-importer.kubeconfig" \
  --dry-run=client -o yaml | "${HOST_K[@]}" apply -f - >/dev/null
"${HOST_K[@]}" -n "${AGENT_NS}" create secret generic flotilla-bootstrap \
  --from-file=kubeconfig="${RUN_DIR}/controllers/member3-bootstrap.kubeconfig" \
  --dry-run=client -o yaml | "${HOST_K[@]}" apply -f - >/dev/null
log "== helm install member3 charts/flotilla-agent (into ${HOST}, namespace ${AGENT_NS}: the agent, syncer and importer, hosted)"
# Not --wait: the syncer and importer become ready once the hub accepted member3.
"${HELM[@]}" --kubeconfig "${HOST_KUBECONFIG}" upgrade --install member3 charts/flotilla-agent \
  --namespace "${AGENT_NS}" --values deploy/quickstart/values-member3.yaml \
  --set clusterName=member3 --set member.kubeconfigSecret=member3-kubeconfigs \
  --set member.namespace="${NS}" --set member.release="${RELEASE}" \
  --set agent.metricsPort="${AGENT_PORT}" --set agent.healthPort="$(( AGENT_PORT + 1 ))" \
  --set syncer.metricsPort="$(( AGENT_PORT + 2 ))" --set syncer.healthPort="$(( AGENT_PORT + 3 ))" \
  --set importer.metricsPort="$(( AGENT_PORT + 4 ))" --set importer.healthPort="$(( AGENT_PORT + 5 ))" \
  >/dev/null
t0="$(now)"
until "${K[@]}" get clusters.flotilla.dev member3 >/dev/null 2>&1; do
  if (( $(now) - t0 > 120 )); then
    "${HOST_K[@]}" -n "${AGENT_NS}" get pods -o wide >&2 || true
    "${HOST_K[@]}" -n "${AGENT_NS}" logs deploy/member3-agent --tail 20 >&2 || true
    die "the agent of member3 did not create its Cluster"
  fi
  sleep 1
done
log "member3's agent created its Cluster and asks to join; accepting it (hubAcceptsClient: true)"
"${K[@]}" patch clusters.flotilla.dev member3 --type merge -p '{"spec":{"hubAcceptsClient":true}}' >/dev/null
for d in member3-agent member3-syncer member3-importer; do
  "${HOST_K[@]}" -n "${AGENT_NS}" rollout status "deploy/${d}" --timeout 120s >/dev/null \
    || die "${d} did not become ready: kubectl --kubeconfig ${HOST_KUBECONFIG} -n ${AGENT_NS} logs deploy/${d}"
done

log "== waiting for the members to be Ready"
"${K[@]}" wait --for condition=Ready clusters.flotilla.dev --all --timeout 120s >/dev/null

# Placement selects Clusters by their labels: give each the region its nodes are in, as an admin
# would (member1 and member3 share europe-west1, member2 is in us-east1).
log "== labelling each Cluster with its member's region (topology.kubernetes.io/region)"
for m in member1 member2 member3; do
  region="$("${TOOLS_BIN}/kubectl" --kubeconfig "$(member_kubeconfig "${m}")" get nodes -l type=kwok \
    -o jsonpath='{.items[0].metadata.labels.topology\.kubernetes\.io/region}')"
  "${K[@]}" label clusters.flotilla.dev "${m}" "topology.kubernetes.io/region=${region}" --overwrite >/dev/null
done

log "== applying the example workload to the hub (deploy/quickstart/workload.yaml)"
apply -f deploy/quickstart/workload.yaml
"${K[@]}" -n demo wait deployment/web --for jsonpath='{.status.availableReplicas}'=10 --timeout 180s >/dev/null
"${K[@]}" -n demo wait deployment/web --for condition=Available --timeout 60s >/dev/null
# The Secret reaches every member, push and pull alike (its data travels in a hub Secret the
# syncer of each member reads, never in the Work).
for m in member1 member2 member3; do
  t0="$(now)"
  until "${TOOLS_BIN}/kubectl" --kubeconfig "$(member_kubeconfig "${m}")" -n demo \
      get secret web-credentials >/dev/null 2>&1; do
    if (( $(now) - t0 > 60 )); then
      "${K[@]}" get works.flotilla.dev -n "flotilla-cluster-${m}" -o wide >&2 || true
      die "the Secret web-credentials did not reach ${m}: the Works above say why"
    fi
    sleep 1
  done
done

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
  log "== tour: stopping member2; once it has been unready for the grace period (15 s here) and the Placement's failover toleration (10 s), its replicas move to the other members"
  "${CLUSTERS[@]}" stop-member member2 >/dev/null
  t0="$(now)"
  placed() { "${K[@]}" -n demo get deployment web -o jsonpath='{.status.conditions[?(@.type=="Placed")].message} {.status.availableReplicas}'; }
  until [[ "$(placed)" != *member2=* && "$(placed)" == *" 10" ]]; do
    (( $(now) - t0 < 240 )) || die "the replicas of member2 did not move within 240s: $(placed)"
    sleep 2
  done
  log "member2 is $("${K[@]}" get clusters.flotilla.dev member2 -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}'); its replicas moved in $(( $(now) - t0 ))s and the Deployment is Available again"
  show
  log "== tour: starting member2 again"
  "${CLUSTERS[@]}" start-member member2 >/dev/null
  "${K[@]}" wait --for condition=Ready clusters.flotilla.dev member2 --timeout 120s >/dev/null
  show
fi

cat <<EOF

Flotilla is running ($(( $(now) - T0 ))s): the hub and its controllers are pods on ${FLOTILLA_HOST_NODE}.
Explore:
  export PATH="${TOOLS_BIN}:\$PATH"
  kubectl --kubeconfig ${HOST_KUBECONFIG} -n ${NS} get pods        # the hub, on the host
  kubectl --kubeconfig ${HUB_KUBECONFIG} get flotilla -A          # Clusters, Placements, Works
  kubectl --kubeconfig ${HUB_KUBECONFIG} -n demo scale deployment web --replicas 13
  kubectl --kubeconfig ${HUB_KUBECONFIG} describe clusters.flotilla.dev member3
  curl -s 127.0.0.1:${REGISTRATION_METRICS}/metrics | grep flotilla_registration_clusters
  helm --kubeconfig ${HOST_KUBECONFIG} -n ${NS} status ${RELEASE}
The hub's kubeconfig is the Secret ${RELEASE}-hub-admin-kubeconfig in ${NS} on ${HOST}, kept as
${HUB_KUBECONFIG}; eval "\$(hack/clusters.sh --run-dir ${RUN_DIR} env)" exports it as
FLOTILLA_HUB_KUBECONFIG, with the members' kubeconfigs.
Stop everything and delete its data: hack/clusters.sh --run-dir ${RUN_DIR} down
EOF
