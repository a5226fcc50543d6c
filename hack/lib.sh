# shellcheck shell=bash
# Shared helpers for the hack/ scripts. Source it; do not run it.

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${HACK_DIR}/.." && pwd)"

# shellcheck source=hack/versions.env
source "${HACK_DIR}/versions.env"

# Versioned tool cache, outside the repository so that every clone and every run reuses it.
FLOTILLA_CACHE_DIR="${FLOTILLA_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/flotilla}"
TOOLS_BIN="${FLOTILLA_TOOLS_BIN:-${FLOTILLA_CACHE_DIR}/bin-k8s-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}}"
KWOK_STAGES_DIR="${TOOLS_BIN}/kwok-stages"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Seconds since the epoch, for elapsed-time reporting.
now() { date +%s; }
