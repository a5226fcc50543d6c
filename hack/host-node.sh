# shellcheck shell=bash
# The host node of hack/clusters.sh, which sources this file: one real node — containerd, runc and
# the kubelet — in one member (up --host-node MEMBER), registered as <member>-host beside the
# member's kwok nodes, so that a Helm chart can run real pods there. Its taint and label keep the
# member's workloads off it: only pods that tolerate the taint (and select the label) land there.
#
# Everything it owns lives in RUN_DIR/node: containerd's config, root, state, socket and runc
# state, the CNI config and IPAM state, the kubelet's root, certificates and pod logs. Two
# environments (other run directory and port base) each have their own, side by side. Its
# configuration files are rendered from hack/templates/ (containerd.toml, cni.conflist,
# kubelet.kubeconfig, kubelet.yaml, host-node-objects.yaml).

NODE_DIR="${RUN_DIR}/node"
CTRD_DIR="${NODE_DIR}/containerd"
CTRD_SOCK="${CTRD_DIR}/containerd.sock"
CNI_BIN_DIR="${FLOTILLA_CNI_BIN_DIR:-/usr/lib/cni}"
HOST_NODE_TIMEOUT="${FLOTILLA_HOST_NODE_TIMEOUT:-120}"
# Machine-wide state the kubelets of all environments share (see save_machine_state).
MACHINE_STATE=/run/flotilla-host-node.state

kubelet_port() { echo $(( PORT_BASE + 7367 )); }
kubelet_healthz_port() { echo $(( PORT_BASE + 7368 )); }
host_node_name() { echo "$1-host"; }
# The bridge of the pods that do not use the host network: unique per environment (port base).
host_bridge() { echo "flot${PORT_BASE}"; }
# Its subnet: 10.<member index>.<128 + PORT_BASE mod 127>.0/24. The member's node-ipam hands the
# /24s of its pod CIDR 10.N.0.0/16 out from the bottom (a few nodes), so the upper half is free;
# the third octet differs per port base, so that two environments' bridges never route the same
# subnet. The bridge's .1 is the node's InternalIP, where the kubelet listens.
host_subnet_octet() { echo $(( 128 + PORT_BASE % 127 )); }
host_subnet() { echo "10.$(cluster_index "$1").$(host_subnet_octet).0/24"; }
host_node_ip() { echo "10.$(cluster_index "$1").$(host_subnet_octet).1"; }

# The host node's labels: HOST_NODE_LABEL, and the region of its member's nodes with a zone of
# its own (<region>-host), as every node of a real cluster has.
host_node_labels() { # member
  local region
  read -r _ _ _ _ region <<<"$(node_profile "$(cluster_index "$1")")"
  echo "${HOST_NODE_LABEL},topology.kubernetes.io/region=${region},topology.kubernetes.io/zone=${region}-host"
}

node_ctr() { ctr -a "${CTRD_SOCK}" -n k8s.io "$@"; }

# The status of the host node's Ready condition (True, False, Unknown; empty when unknown).
host_node_ready() { # member [kubectl-args...]
  local m="$1"; shift
  kc "${m}" get node "$(host_node_name "${m}")" "$@" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true
}
host_node_is_ready() { [[ "$(host_node_ready "$1")" == True ]]; }

# The host node's member and version checks, and what it needs of the machine, before anything
# starts.
check_host_node() { # member members-of-up
  local m="$1" n="$2"
  [[ "${m}" =~ ^member[0-9]+$ ]] && (( ${m#member} >= 1 && ${m#member} <= n )) \
    || die "up: --host-node must name one of the members of 'up' (member1..member${n}), got '${m}'"
  [[ "$(member_version "${m}")" == "${KUBERNETES_VERSION}" ]] \
    || die "up: the host node's kubelet is ${KUBERNETES_VERSION}, newer than ${m}'s $(member_version "${m}") (a kubelet may not be newer than its apiserver): pick another member, or --member-version ${m}=${KUBERNETES_VERSION}"
  [[ "$(id -u)" == 0 ]] \
    || die "up: --host-node needs root: containerd, runc and the kubelet manage mounts, cgroups and network namespaces"
  local missing=() c
  command -v containerd >/dev/null && command -v ctr >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  for c in bridge host-local loopback; do
    [[ -x "${CNI_BIN_DIR}/${c}" ]] || { missing+=(containernetworking-plugins); break; }
  done
  [[ ${#missing[@]} -eq 0 ]] \
    || die "up: the host node needs containerd, runc and the CNI plugins in ${CNI_BIN_DIR} (FLOTILLA_CNI_BIN_DIR); missing: ${missing[*]} (Debian: apt-get install containerd runc containernetworking-plugins)"
  for c in ip mount umount python3; do
    command -v "${c}" >/dev/null || die "up: the host node needs '${c}' (Debian: apt-get install iproute2 mount python3)"
  done
  (( ${#CTRD_SOCK} < 100 )) \
    || die "up: the run directory ${RUN_DIR} is too long for containerd's socket ${CTRD_SOCK} (a Unix socket path has at most 107 bytes): use a shorter --run-dir"
}

# The snapshotter of the node's containerd: overlayfs where the run directory's filesystem takes
# an overlay mount, else native (a full copy per container, slower but works everywhere).
pick_snapshotter() {
  local t="${NODE_DIR}/.overlay-test" s=native
  mkdir -p "${t}/lower" "${t}/upper" "${t}/work" "${t}/merged"
  if mount -t overlay overlay -o "lowerdir=${t}/lower,upperdir=${t}/upper,workdir=${t}/work" "${t}/merged" 2>/dev/null; then
    umount "${t}/merged"
    s=overlayfs
  fi
  rm -rf "${t}"
  echo "${s}"
}

# The bridge of the CNI config (cni.conflist: host-local IPAM) for the pods that do not use the
# host network, with the node's address. Made here rather than by the plugin (isGateway false)
# so that the plugin leaves the machine's net.ipv4.ip_forward alone; no masquerading either (no
# iptables rules to clean up): pods reach the host, each other and nothing beyond.
ensure_bridge() { # member
  local m="$1" br
  br="$(host_bridge)"
  if ! ip link show "${br}" >/dev/null 2>&1; then
    if [[ -n "$(ip -4 route show "$(host_subnet "${m}")" 2>/dev/null)" ]]; then
      die "the host node's subnet $(host_subnet "${m}") is routed already (another environment whose port base gives the same subnet?): pick another --port-base"
    fi
    ip link add "${br}" type bridge
    echo "${br}" >"${NODE_DIR}/bridge"
  fi
  ip addr replace "$(host_node_ip "${m}")/24" dev "${br}"
  ip link set "${br}" up
}

# Client certificates of the member's client CA: the kubelet's (system:node:<member>-host in
# system:nodes, so that the Node authorizer and NodeRestriction apply to it) and the apiserver's
# for the kubelet API (logs, exec, port-forward), which the ClusterRole system:kubelet-api-admin
# is bound to (host-node-objects.yaml).
gen_host_node_creds() { # member
  local m="$1" ca="${CLUSTERS}/$1/client-ca" keys
  keys="$(key_type "$(cluster_index "${m}")")"
  mkdir -p "${NODE_DIR}/pki"
  [[ -f "${CLUSTERS}/${m}/kubelet-client.crt" ]] || issue_cert "${CLUSTERS}/${m}/kubelet-client" \
    "/CN=flotilla:kube-apiserver-kubelet-client" "${ca}" "${keys}" extendedKeyUsage=clientAuth
  [[ -f "${NODE_DIR}/pki/node.crt" ]] || issue_cert "${NODE_DIR}/pki/node" \
    "/O=system:nodes/CN=system:node:$(host_node_name "${m}")" "${ca}" "${keys}" extendedKeyUsage=clientAuth
}

# The kubelet sets six kernel parameters machine-wide, as on every Kubernetes node
# (vm.overcommit_memory=1, kernel.panic=10, kernel.panic_on_oops=1, ...: it has no switch to leave
# them alone, protectKernelDefaults only makes it refuse to start), and creates
# /var/lib/kubelet/device-plugins and /var/log/containers whatever its root and log directories;
# containerd has its shims' sockets in /run/containerd/s, the pods' network namespaces in
# /run/netns and the CNI results in /var/lib/cni.
# The first host node on this machine records the parameters' values and which of these
# directories did not exist in MACHINE_STATE; the last one to go restores and removes them.
KUBELET_SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes)
KUBELET_SHARED_DIRS=(/var/lib/kubelet /var/lib/kubelet/device-plugins /var/log/containers
  /run/containerd /run/containerd/s /run/netns /var/lib/cni /var/lib/cni/results)

# Succeeds when a kubelet runs on this machine (another environment's host node, or any other;
# one that exited and was not reaped yet does not count).
kubelet_running() {
  local p stat
  for p in /proc/[0-9]*; do
    stat="$(cat "${p}/stat" 2>/dev/null)" || continue
    [[ "${stat}" == *" (kubelet) "[!Z]* ]] && return 0
  done
  return 1
}

save_machine_state() {
  [[ -f "${MACHINE_STATE}" ]] && return 0
  # A kubelet that is not ours already changed the parameters: nothing to record.
  kubelet_running && return 0
  local k d
  {
    for k in "${KUBELET_SYSCTLS[@]}"; do echo "sysctl ${k} $(cat "/proc/sys/${k}")"; done
    for d in "${KUBELET_SHARED_DIRS[@]}"; do [[ -e "${d}" ]] || echo "created ${d}"; done
  } >"${MACHINE_STATE}.tmp"
  mv "${MACHINE_STATE}.tmp" "${MACHINE_STATE}"
}

restore_machine_state() {
  [[ -f "${MACHINE_STATE}" ]] || return 0
  kubelet_running && return 0
  local what a b d dirs=()
  while read -r what a b; do
    case "${what}" in
      sysctl) echo "${b}" >"/proc/sys/${a}" 2>/dev/null || log "warning: could not restore ${a//\//.}=${b}" ;;
      created) dirs+=("${a}") ;;
    esac
  done <"${MACHINE_STATE}"
  # The kubelet's device-plugin socket and checkpoint, in a directory that was not there before.
  [[ " ${dirs[*]} " != *" /var/lib/kubelet/device-plugins "* ]] \
    || rm -f /var/lib/kubelet/device-plugins/kubelet.sock /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
  # Deepest first; rmdir keeps whatever something else put there since.
  for d in $(printf '%s\n' "${dirs[@]}" | sort -r); do
    mountpoint -q "${d}" 2>/dev/null || rmdir "${d}" 2>/dev/null || true
  done
  rm -f "${MACHINE_STATE}"
}

# The name the CRI looks an image up by (docker.io/library/ for a short name).
normalize_ref() { # ref
  local first="${1%%/*}"
  if [[ "$1" != */* ]]; then echo "docker.io/library/$1"
  elif [[ "${first}" == *.* || "${first}" == *:* || "${first}" == localhost ]]; then echo "$1"
  else echo "docker.io/$1"; fi
}

# Imports OCI archives into the host node's containerd (namespace k8s.io, unpacked for its
# snapshotter); prints each image's name. An image a short name registers ("flotilla:TAG") is also
# tagged with the name the CRI looks it up by (docker.io/library/flotilla:TAG).
import_images() { # archives...
  local a out name full
  for a in "$@"; do
    out="$(node_ctr images import --snapshotter "$(cat "${NODE_DIR}/snapshotter")" "${a}" 2>&1)" \
      || { printf '%s\n' "${out}" >&2; die "could not import ${a} into the host node's containerd"; }
    for name in $(sed -n 's/^unpacking \([^ ]*\) (sha256:.*/\1/p' <<<"${out}"); do
      full="$(normalize_ref "${name}")"
      [[ "${full}" == "${name}" ]] || node_ctr images tag --force "${name}" "${full}" >/dev/null
      echo "${full}"
    done
  done
}

# Starts (or restarts what died of) the host node of MEMBER and waits until its Node is Ready.
start_host_node() { # member
  local m="$1" node ip t0 archives images
  node="$(host_node_name "${m}")"; ip="$(host_node_ip "${m}")"; t0="$(now)"
  mkdir -p "${CTRD_DIR}" "${NODE_DIR}/cni/net.d" "${NODE_DIR}/cni/ipam" "${NODE_DIR}/kubelet" "${NODE_DIR}/pod-logs"
  echo "${m}" >"${NODE_DIR}/member"
  [[ -f "${NODE_DIR}/snapshotter" ]] || pick_snapshotter >"${NODE_DIR}/snapshotter"
  render containerd.toml SNAPSHOTTER="$(cat "${NODE_DIR}/snapshotter")" >"${CTRD_DIR}/config.toml"
  render cni.conflist BRIDGE="$(host_bridge)" SUBNET="$(host_subnet "${m}")" NODE_IP="${ip}" \
    >"${NODE_DIR}/cni/net.d/10-flotilla.conflist"
  ensure_bridge "${m}"
  save_machine_state
  # umask 022 (this script runs with 077 once write_kubeconfig ran): containerd's snapshots are the
  # containers' root directories, which a non-root user must be able to search.
  (umask 022 && start_proc "${m}.containerd" containerd --config "${CTRD_DIR}/config.toml")
  wait_until 30 "${m}.containerd" node_ctr version \
    || { tail_log "${m}.containerd"; die "the host node's containerd did not answer on ${CTRD_SOCK} within 30s"; }
  # The component images before the kubelet, so no pod of it ever tries to pull them.
  archives="$("${HACK_DIR}/build-image.sh" --components)" || die "building the component images failed"
  # shellcheck disable=SC2086
  images="$(import_images ${archives} | xargs)"
  gen_host_node_creds "${m}"
  render kubelet.kubeconfig MEMBER="${m}" NODE="${node}" SERVER_PORT="$(cluster_port "${m}")" \
    CLUSTER_DIR="${CLUSTERS}/${m}" >"${NODE_DIR}/kubelet.kubeconfig"
  render kubelet.yaml MEMBER="${m}" NODE_IP="${ip}" KUBELET_PORT="$(kubelet_port)" \
    HEALTHZ_PORT="$(kubelet_healthz_port)" CLUSTER_DIR="${CLUSTERS}/${m}" >"${NODE_DIR}/kubelet.yaml"
  (umask 022 && start_proc "${m}.kubelet" "${TOOLS_BIN}/kubelet" --config "${NODE_DIR}/kubelet.yaml" \
    --kubeconfig "${NODE_DIR}/kubelet.kubeconfig" --root-dir "${NODE_DIR}/kubelet" \
    --cert-dir "${NODE_DIR}/pki" --hostname-override "${node}" \
    --node-ip "${ip}" --node-labels "$(host_node_labels "${m}")")
  if ! wait_until "${HOST_NODE_TIMEOUT}" "${m}.kubelet ${m}.containerd" host_node_is_ready "${m}"; then
    kc "${m}" get node "${node}" -o wide >&2 || true
    tail_log "${m}.kubelet"
    die "node ${node} not Ready after ${HOST_NODE_TIMEOUT}s"
  fi
  log "host node ${node} Ready in ${m} ($(( $(now) - t0 ))s): kubelet on ${ip}:$(kubelet_port), containerd on ${CTRD_SOCK} ($(cat "${NODE_DIR}/snapshotter")); images: ${images}"
}

# The mount points under a directory, deepest first.
mounts_under() { # dir
  awk -v d="$1/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r
}

# Stops the host node and removes everything it made: the kubelet first, then every container
# and shim of its containerd, containerd, then the mounts (the kubelet's secret and token tmpfs,
# the containers' rootfs), network namespaces, cgroups, the bridge and the kubelet's log links.
# Works from the files in NODE_DIR alone, also when containerd or the kubelet died.
teardown_host_node() {
  [[ -d "${NODE_DIR}" ]] || return 0
  local m what x p pid tasks netns=() cgroups=() ids=() sockets=() shims=()
  m="$(cat "${NODE_DIR}/member" 2>/dev/null || true)"
  [[ -z "${m}" ]] || stop_proc "${m}.kubelet"
  # The pod sandboxes' network namespaces and the containers' cgroups, from the task bundles.
  while read -r what x; do
    case "${what}" in
      netns) netns+=("${x}") ;;
      cgroup) cgroups+=("${x}") ;;
      id) ids+=("${x}") ;;
      socket) sockets+=("${x}") ;;
    esac
  done < <(python3 "${HACK_DIR}/containerd-tasks.py" "${CTRD_DIR}/state/io.containerd.runtime.v2.task/k8s.io" 2>/dev/null || true)
  if [[ -n "${m}" ]] && proc_alive "${m}.containerd"; then
    tasks="$(node_ctr tasks ls -q 2>/dev/null || true)"
    for x in ${tasks}; do node_ctr tasks kill -s SIGKILL "${x}" >/dev/null 2>&1 || true; done
    # The shim unmounts the container's rootfs on delete, and exits with its last task.
    for x in ${tasks}; do node_ctr tasks delete -f "${x}" >/dev/null 2>&1 || true; done
  fi
  [[ -z "${m}" ]] || stop_proc "${m}.containerd"
  # Shims left (containerd died, or a delete failed): they name our socket in their command line.
  for p in /proc/[0-9]*; do
    # (stderr first: a process that exits meanwhile fails the '<', whose message goes where
    # stderr pointed then)
    [[ "$(tr '\0' ' ' 2>/dev/null <"${p}/cmdline")" == *containerd-shim*" -address ${CTRD_SOCK} "* ]] \
      && shims+=("${p#/proc/}")
  done
  for pid in "${shims[@]}"; do
    # Its containers' first processes (each the init of its own PID namespace) first.
    for p in $(ps -o pid= --ppid "${pid}" 2>/dev/null); do kill -KILL "${p}" 2>/dev/null || true; done
    kill -KILL "${pid}" 2>/dev/null || true
  done
  # Until they are gone (ps -p fails when none of them is left, or there was none).
  for _ in $(seq 50); do
    ps -p "$(IFS=,; echo "${shims[*]}")" >/dev/null 2>&1 || break
    sleep 0.1
  done
  # The sockets of shims that could not remove theirs.
  for x in "${sockets[@]}"; do rm -f "${x}"; done
  for x in "${netns[@]}"; do
    umount "${x}" 2>/dev/null || umount -l "${x}" 2>/dev/null || true
    rm -f "${x}"
  done
  # The CNI results cached for the pods (a network delete would have removed them).
  rm -f /var/lib/cni/results/"flotilla-$(cat "${NODE_DIR}/bridge" 2>/dev/null || echo none)"-*
  for x in "${ids[@]}"; do rm -f "/var/lib/cni/results/cni-loopback-${x}-lo"; done
  for x in $(mounts_under "${RUN_DIR}"); do
    umount "${x}" 2>/dev/null || umount -l "${x}" 2>/dev/null || log "warning: could not unmount ${x}"
  done
  for x in "${cgroups[@]}"; do
    for p in /sys/fs/cgroup/*"${x}" /sys/fs/cgroup"${x}"; do
      [[ -d "${p}" ]] && rmdir "${p}" 2>/dev/null || true
    done
    # Its parent (/k8s.io) too, when no other container is left in it.
    for p in /sys/fs/cgroup/*"$(dirname "${x}")"; do
      [[ -d "${p}" && "$(dirname "${x}")" != / ]] && rmdir "${p}" 2>/dev/null || true
    done
  done
  if [[ -f "${NODE_DIR}/bridge" ]]; then
    ip link del "$(cat "${NODE_DIR}/bridge")" 2>/dev/null || true
  fi
  # The kubelet's links to our pods' logs.
  for p in /var/log/containers/*.log; do
    [[ -L "${p}" && "$(readlink "${p}")" == "${NODE_DIR}/pod-logs/"* ]] && rm -f "${p}"
  done
  restore_machine_state
  if [[ -n "$(mounts_under "${RUN_DIR}")" ]]; then
    log "warning: mounts under ${RUN_DIR} are left (see above): not deleting ${NODE_DIR}"
    return 0
  fi
  rm -rf --one-file-system "${NODE_DIR}"
  [[ -z "${m}" ]] || log "host node $(host_node_name "${m}") stopped and removed"
}
