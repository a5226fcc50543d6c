# shellcheck shell=bash
# Its variables are for the scripts that source it.
# shellcheck disable=SC2034
# Shared helpers for the hack/ scripts. Source it; do not run it.

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${HACK_DIR}/.." && pwd)"

# shellcheck source=hack/versions.env
source "${HACK_DIR}/versions.env"

# Versioned tool cache, outside the repository so that every clone and every run reuses it.
FLOTILLA_CACHE_DIR="${FLOTILLA_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/flotilla}"
TOOLS_BIN="${FLOTILLA_TOOLS_BIN:-${FLOTILLA_CACHE_DIR}/bin-k8s-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}}"
KWOK_STAGES_DIR="${TOOLS_BIN}/kwok-stages"

# The Kubernetes versions a cluster of the local environment can run, the default first.
KUBERNETES_VERSIONS=("${KUBERNETES_VERSION}" "${KUBERNETES_OLDER_VERSION}")
# The control-plane binaries that exist once per version (kubectl is shared).
K8S_SERVER_TOOLS=(kube-apiserver kube-controller-manager kube-scheduler)

# The tag of the sandbox image that hack/build-image.sh --components builds from the tool cache's
# pause binary (Kubernetes' own pause.c), flotilla.local/pause:<tag>, and that the host node's
# containerd runs every pod sandbox with (hack/clusters.sh up --host-node).
PAUSE_IMAGE_TAG=3.10
PAUSE_IMAGE="flotilla.local/pause:${PAUSE_IMAGE_TAG}"

# Where the control-plane binaries of a Kubernetes version live: the default version's in the
# cache directory itself, every other version's in k8s-<version>/ inside it.
k8s_bin_dir() { # version
  if [[ "$1" == "${KUBERNETES_VERSION}" ]]; then echo "${TOOLS_BIN}"; else echo "${TOOLS_BIN}/k8s-$1"; fi
}

# The file in a run directory's kubeconfigs/ where the quick start stores the kubeconfig of the
# hub its chart runs; hack/clusters.sh env names it when there is no hub of processes (up --no-hub).
CHART_HUB_KUBECONFIG=flotilla-hub.kubeconfig

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Seconds since the epoch, for elapsed-time reporting.
now() { date +%s; }

# Prints hack/templates/TEMPLATE with every ${NAME} replaced by the value given as NAME=VALUE, else
# by the shell variable NAME. A NAME that is neither is an error: no file goes out with a hole in
# it. Nothing else is touched: ${NAME:-default}, $NAME and $(...) stay as they are.
render() { # template [NAME=VALUE]...
  local template="$1" text out="" name value a
  local -A values=()
  shift
  for a in "$@"; do values["${a%%=*}"]="${a#*=}"; done
  text="$(<"${HACK_DIR}/templates/${template}")" || die "no template ${template} in ${HACK_DIR}/templates"
  while [[ "${text}" =~ \$\{([A-Za-z_][A-Za-z0-9_]*)\} ]]; do
    name="${BASH_REMATCH[1]}"
    if [[ -v "values[${name}]" ]]; then value="${values[${name}]}"
    elif [[ -v "${name}" ]]; then value="${!name}"
    else die "template ${template}: \${${name}} has no value"; fi
    out+="${text%%"${BASH_REMATCH[0]}"*}${value}"
    text="${text#*"${BASH_REMATCH[0]}"}"
  done
  printf '%s\n' "${out}${text}"
}

# Runs a go command, turning a refused module into a message that names it.
go_or_die() {
  local what="$1"; shift
  local out
  if ! out="$("$@" 2>&1)"; then
    printf '%s\n' "${out}" | tail -n 30 >&2
    if grep -qE 'not found|410 Gone|404 Not Found|unknown revision|invalid version' <<<"${out}"; then
      die "the Go module proxy refused a module needed for ${what} (see the lines above); check hack/versions.env"
    fi
    die "building ${what} failed (see the lines above)"
  fi
}

# Keys and certificates (openssl), each valid for ten years.

# A private key: RSA 2048 bits or ECDSA P-256.
new_key() { # file rsa|ec
  if [[ "$2" == ec ]]; then
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
  else
    openssl genrsa -out "$1" 2048 2>/dev/null
  fi
  chmod 600 "$1"
}

# A CA: OUT.key and the self-signed OUT.crt.
new_ca() { # out subject rsa|ec
  new_key "$1.key" "$3"
  openssl req -x509 -new -key "$1.key" -days 3650 -subj "$2" -out "$1.crt" 2>/dev/null
}

# OUT.key and OUT.crt: a certificate for SUBJECT with the extensions EXT (one an argument), signed
# by the CA CA.crt/CA.key.
issue_cert() { # out subject ca rsa|ec ext...
  local out="$1" subject="$2" ca="$3" keys="$4"; shift 4
  new_key "${out}.key" "${keys}"
  openssl req -new -key "${out}.key" -subj "${subject}" -out "${out}.csr" 2>/dev/null
  printf '%s\n' "$@" >"${out}.ext"
  openssl x509 -req -in "${out}.csr" -CA "${ca}.crt" -CAkey "${ca}.key" -set_serial "0x$(openssl rand -hex 16)" \
    -days 3650 -extfile "${out}.ext" -out "${out}.crt" 2>/dev/null
  rm -f "${out}.csr" "${out}.ext"
  [[ -s "${out}.crt" ]] || die "could not create the certificate ${out}.crt"
}

# Processes: every process is recorded as "<pid> <start time>" in pids/<name>; it is only ever
# signalled when both still match, so a recycled PID is never hit.

proc_starttime() { awk '{print $22}' "/proc/$1/stat" 2>/dev/null || true; }
# A process that exited but was not reaped yet (state Z) counts as dead.
proc_state() { awk '{print $3}' "/proc/$1/stat" 2>/dev/null || true; }

proc_alive() { # name
  local f="${PIDS}/$1" pid st
  [[ -f "${f}" ]] || return 1
  read -r pid st <"${f}" || return 1
  [[ -n "${pid}" && -d "/proc/${pid}" && "$(proc_starttime "${pid}")" == "${st}" ]] \
    && [[ "$(proc_state "${pid}")" != Z ]]
}

start_proc() { # name binary args...
  local name="$1"; shift
  mkdir -p "${PIDS}" "${LOGS}"
  if proc_alive "${name}"; then return 0; fi
  setsid "$@" >>"${LOGS}/${name}.log" 2>&1 </dev/null 9>&- &
  local pid=$!
  local st=""
  for _ in $(seq 50); do
    st="$(proc_starttime "${pid}")"
    [[ -n "${st}" ]] && break
    sleep 0.1
  done
  echo "${pid} ${st}" >"${PIDS}/${name}"
}

signal_proc() { # name signal: e.g. STOP to pause a process (it hangs, holding its sockets), CONT
  local f="${PIDS}/$1" pid st
  proc_alive "$1" || return 1
  read -r pid st <"${f}"
  kill "-$2" "${pid}"
}

stop_proc() { # name
  local f="${PIDS}/$1" pid st
  [[ -f "${f}" ]] || return 0
  read -r pid st <"${f}" || true
  if proc_alive "$1"; then
    kill -TERM "${pid}" 2>/dev/null || true
    # A paused process (see signal_proc) only acts on TERM once it runs again.
    kill -CONT "${pid}" 2>/dev/null || true
    for _ in $(seq 100); do
      proc_alive "$1" || break
      sleep 0.1
    done
    if proc_alive "$1"; then kill -KILL "${pid}" 2>/dev/null || true; fi
    for _ in $(seq 50); do
      proc_alive "$1" || break
      sleep 0.1
    done
  fi
  rm -f "${f}"
}

tail_log() { # name
  if [[ -f "${LOGS}/$1.log" ]]; then
    echo "--- last lines of ${LOGS}/$1.log ---" >&2
    tail -n 20 "${LOGS}/$1.log" >&2
  fi
}

# Waits until CHECK succeeds; fails after TIMEOUT seconds, and dies (with the last lines of its
# log) as soon as one of the processes PROCS, which CHECK waits for, exits.
wait_until() { # timeout "procs..." check...
  local timeout="$1" procs="$2" p t0; shift 2
  t0="$(now)"
  until "$@" >/dev/null 2>&1; do
    for p in ${procs}; do
      proc_alive "${p}" || { tail_log "${p}"; die "${p} exited during start-up"; }
    done
    (( $(now) - t0 < timeout )) || return 1
    sleep 0.5
  done
}


# The chart on the local environment's real node (hostNetwork): the --set arguments that give its
# pods node ports from FIRST on, one per line (mapfile them): the hub's apiserver FIRST, etcd's
# client, peer and metrics ports FIRST+1..+3, the controller-manager FIRST+4, then each
# controller's metrics and health ports (registration FIRST+5/+6, syncer +7/+8, splitter +9/+10,
# negotiator +11/+12), the certificate approval webhook FIRST+13 (HTTPS) and +14 (metrics). The
# ports from FIRST+15 on are free for the caller.
chart_port_values() { # first-port
  local p="$1" c
  printf -- '--set\n%s\n' "hub.apiserver.port=${p}" "hub.etcd.clientPort=$(( p + 1 ))" \
    "hub.etcd.peerPort=$(( p + 2 ))" "hub.etcd.metricsPort=$(( p + 3 ))" \
    "hub.controllerManager.port=$(( p + 4 ))"
  p=$(( p + 5 ))
  for c in registration syncer splitter negotiator; do
    printf -- '--set\n%s\n' "${c}.metricsPort=${p}" "${c}.healthPort=$(( p + 1 ))"
    p=$(( p + 2 ))
  done
  printf -- '--set\n%s\n' "registration.approvalWebhook.port=${p}" \
    "registration.approvalWebhook.metricsPort=$(( p + 1 ))"
}

# A hostPath PersistentVolume (StorageClass flotilla-local) on the real node NODE for the etcd of
# chart release RELEASE in NAMESPACE, bound in advance to its claim; the directory DIR is created,
# writable by etcd's non-root user. Prints the YAML.
etcd_volume_yaml() { # release namespace dir node
  mkdir -p "$3" && chmod 0777 "$3"
  cat <<EOF
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $1-etcd
spec:
  capacity: {storage: 2Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: flotilla-local
  claimRef: {namespace: $2, name: data-$1-etcd-0}
  hostPath: {path: $3, type: Directory}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/hostname, operator: In, values: [$4]}
EOF
}

# What the local environment needs from the machine, as "test:package" pairs: a command on the
# PATH, or a file (a path) that Debian's package provides. The host node (up --host-node) needs
# containerd, runc, the CNI plugins and a static C library (for its pause binary).
PREREQUISITES=(
  openssl:openssl curl:curl flock:util-linux setsid:util-linux cc:gcc make:make python3:python3
  ip:iproute2 ps:procps base64:coreutils shellcheck:shellcheck
  containerd:containerd runc:runc /usr/lib/cni/bridge:containernetworking-plugins
  /usr/lib/x86_64-linux-gnu/libc.a:libc6-dev
)

# Checks every prerequisite before anything is built, installs the missing Debian packages when
# it can (root with apt-get, as on a fresh CI machine), and otherwise stops naming each missing
# one and its package. Go and Rust are named too: no package manager installs the right ones.
ensure_prerequisites() {
  local p what pkg missing=() pkgs=()
  for p in "${PREREQUISITES[@]}"; do
    what="${p%%:*}"; pkg="${p#*:}"
    if [[ "${what}" == /* ]]; then
      [[ -e "${what}" || ( "${pkg}" == libc6-dev && -f /usr/lib/libc.a ) ]] && continue
    else
      command -v "${what}" >/dev/null 2>&1 && continue
    fi
    missing+=("${what} (Debian: ${pkg})")
    [[ " ${pkgs[*]} " == *" ${pkg} "* ]] || pkgs+=("${pkg}")
  done
  if [[ ${#pkgs[@]} -gt 0 ]]; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
      log "installing what this machine lacks: ${pkgs[*]}"
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}"; } >&2 \
        || die "could not install ${pkgs[*]} with apt-get (see above); missing: ${missing[*]}"
    else
      die "missing: ${missing[*]}; install them (as root: apt-get install ${pkgs[*]}) and run again"
    fi
  fi
  command -v go >/dev/null 2>&1 \
    || die "Go is required to build the Kubernetes binaries of the local environment (https://go.dev/dl)"
  command -v cargo >/dev/null 2>&1 || die "Rust (cargo) is required (https://rustup.rs)"
  return 0
}
