#!/usr/bin/env bash
# Builds container images on a machine without a container engine, as OCI archives
# (hack/oci-image.py writes them). Three modes:
#
# (default) Flotilla's image: the four controller binaries (release build), the shared libraries
#   they load and CA certificates, run as the non-root user 65532; no shell, no package manager.
#   The same commit gives the same bytes (every file dated by the commit, sorted tar entries, gzip
#   without timestamps), so the image digest is reproducible. With Docker, Podman or Buildah use
#   the Containerfile instead.
# --dev  the same image from the DEBUG binaries of ${CARGO_TARGET_DIR:-target}/debug (stripped;
#   'cargo build --workspace --bins' is run first when one is missing), named
#   flotilla.local/flotilla:dev, into the cache's images/flotilla-dev.oci.tar (overwritten). Takes
#   seconds instead of a 20-minute release build: for the tests and the quick start.
# --components  images of the Kubernetes components from the tool cache (hack/build-tools.sh):
#   flotilla.local/etcd:<ETCD_VERSION>, flotilla.local/kube-apiserver:<KUBERNETES_VERSION>,
#   flotilla.local/kube-controller-manager:<KUBERNETES_VERSION>,
#   flotilla.local/kubectl:<KUBERNETES_VERSION> and flotilla.local/pause:3.10 (the sandbox image
#   of hack/clusters.sh's host node). Each is the static binary at /usr/local/bin/<name>, its
#   entrypoint, PATH=/usr/local/bin (kubectl also HOME=/tmp), user 65532 (pause: 65535, as
#   upstream's). Written to the cache's images/<name>-<tag>.oci.tar; an archive already built
#   from the same inputs is kept. Prints one archive path a line.
#
# Usage: hack/build-image.sh [--output FILE] [--tag TAG] | --dev | --components
#   --output FILE  the OCI archive to write (default: the cache's images/flotilla-<tag>.oci.tar)
#   --tag TAG      the image tag (default: the crate version and the commit, e.g. 0.1.0-9bf4afa)
# The default mode prints the archive's path, its manifest digest and its size. The archive's
# index names the image (org.opencontainers.image.ref.name); load it with
#   skopeo copy oci-archive:FILE docker-daemon:flotilla:TAG     (Docker)
#   podman load -i FILE                                         (Podman)
#   ctr -n k8s.io images import --index-name flotilla:TAG FILE  (containerd)
#   hack/clusters.sh load-image FILE                            (the local host node)
# Environment: FLOTILLA_CACHE_DIR (see hack/build-tools.sh), CARGO_TARGET_DIR, SOURCE_DATE_EPOCH.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BINARIES=(flotilla-registration flotilla-syncer flotilla-splitter flotilla-negotiator)
IMAGES_DIR="${FLOTILLA_CACHE_DIR}/images"
MODE=release
OUTPUT=""
TAG=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --output) OUTPUT="${2:?--output needs a file}"; shift 2 ;;
    --tag) TAG="${2:?--tag needs a tag}"; shift 2 ;;
    --dev) MODE=dev; shift ;;
    --components) MODE=components; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[[ "${MODE}" == release || ( -z "${OUTPUT}" && -z "${TAG}" ) ]] \
  || die "--output and --tag apply to the release image only"

cd "${REPO_ROOT}"
mkdir -p "${IMAGES_DIR}"

# The files of the Flotilla image for binaries in DIR, as --file arguments in FILES. The binaries
# are stripped into STAGE; the shared libraries they load and the CA bundle are added.
FILES=()
flotilla_files() { # dir stage
  local dir="$1" stage="$2" b bin path lib
  local -A libs=()
  for b in "${BINARIES[@]}"; do
    bin="${dir}/${b}"
    [[ -x "${bin}" ]] || die "${bin} was not built"
    # Without symbols: a third of the size (a tenth for a debug build), and no build paths.
    strip --strip-all -o "${stage}/${b}" "${bin}"
    FILES+=(--file "/usr/local/bin/${b}=${stage}/${b}")
    # The shared libraries it loads (glibc, libgcc_s), at the paths the loader looks them up.
    while read -r path; do
      [[ -n "${path}" ]] && libs["${path}"]=1
    done < <(ldd "${bin}" | awk '/=> \//{print $3} /^\t\/.*ld-linux/{print $1}')
  done
  for lib in $(printf '%s\n' "${!libs[@]}" | sort); do
    FILES+=(--file "${lib}=$(readlink -f "${lib}")")
  done
  # CA certificates, for a hub whose serving certificate a public CA signed.
  if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
    FILES+=(--file "/etc/ssl/certs/ca-certificates.crt=/etc/ssl/certs/ca-certificates.crt")
  fi
}

# Prints "manifest <digest>, compressed layer <n> MiB" from oci-image.py's JSON result.
describe_result() { # json
  python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("manifest %s, compressed layer %d MiB" % (r["manifest"], r["layer_bytes"] // 1048576))' "$1"
}

build_release() {
  local version commit dirty epoch target
  version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
  commit="$(git rev-parse --short=7 HEAD)"
  dirty=""
  git diff --quiet HEAD -- || dirty="-dirty"
  TAG="${TAG:-${version}-${commit}${dirty}}"
  OUTPUT="${OUTPUT:-${IMAGES_DIR}/flotilla-${TAG}.oci.tar}"
  mkdir -p "$(dirname "${OUTPUT}")"
  # Every file is dated by the commit (SOURCE_DATE_EPOCH wins, as in reproducible-builds.org).
  epoch="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct HEAD)}"

  # A target directory of its own: the path remapping below changes RUSTFLAGS, which would
  # otherwise rebuild the development target from scratch every time.
  target="${FLOTILLA_IMAGE_TARGET_DIR:-${FLOTILLA_CACHE_DIR}/image-target}"
  log "building ${BINARIES[*]} (release) into ${target}"
  local packages=() b
  for b in "${BINARIES[@]}"; do packages+=(-p "${b}"); done
  # --remap-path-prefix keeps the build machine's paths out of the binaries (reproducibility).
  CARGO_TARGET_DIR="${target}" \
    RUSTFLAGS="${RUSTFLAGS:-} --remap-path-prefix=${REPO_ROOT}=/flotilla --remap-path-prefix=${CARGO_HOME:-${HOME}/.cargo}=/cargo" \
    cargo build --release --locked "${packages[@]}" --bins

  local result
  flotilla_files "${target}/release" "${STAGE}"
  result="$(python3 "${HACK_DIR}/oci-image.py" --output "${OUTPUT}" --epoch "${epoch}" \
    --ref "flotilla:${TAG}" \
    --label "org.opencontainers.image.source=https://github.com/flotilla-dev/flotilla" \
    --label "org.opencontainers.image.revision=$(git rev-parse HEAD)" \
    --label "org.opencontainers.image.version=${TAG}" \
    "${FILES[@]}")"
  log "image flotilla:${TAG}: $(describe_result "${result}")"
  echo "${OUTPUT}"
}

build_dev() {
  local target="${CARGO_TARGET_DIR:-${REPO_ROOT}/target}" b missing=0 t0 epoch
  t0="$(now)"
  for b in "${BINARIES[@]}"; do [[ -x "${target}/debug/${b}" ]] || missing=1; done
  if (( missing )); then
    log "building the debug binaries (cargo build --workspace --bins)"
    cargo build --workspace --bins >&2
  fi
  # Dated by the commit, as the release image; the layer is compressed fast (gzip level 1).
  epoch="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct HEAD)}"
  OUTPUT="${IMAGES_DIR}/flotilla-dev.oci.tar"
  local result
  flotilla_files "${target}/debug" "${STAGE}"
  # One writer of the archive at a time (the test suite and the quick start may both build it).
  exec 7>"${IMAGES_DIR}/.lock"
  flock 7
  result="$(python3 "${HACK_DIR}/oci-image.py" --output "${OUTPUT}" --epoch "${epoch}" \
    --ref flotilla.local/flotilla:dev --gzip-level 1 \
    --label "org.opencontainers.image.source=https://github.com/flotilla-dev/flotilla" \
    --label "org.opencontainers.image.revision=$(git rev-parse HEAD)" \
    --label "org.opencontainers.image.version=dev" \
    "${FILES[@]}")"
  log "image flotilla.local/flotilla:dev (debug binaries of ${target}/debug): $(describe_result "${result}") ($(( $(now) - t0 ))s)"
  echo "${OUTPUT}"
}

# One component image: component_image NAME TAG BINARY UID SOURCE-URL [oci-image.py args...].
# Prints the archive path.
component_image() {
  local name="$1" tag="$2" bin="$3" uid="$4" source="$5" out inputs args result t0
  shift 5
  [[ -x "${bin}" ]] || die "${bin} is missing: run hack/build-tools.sh"
  out="${IMAGES_DIR}/${name}-${tag}.oci.tar"
  # Fixed epoch: the archive depends only on the binary, the arguments and oci-image.py.
  args=(--epoch 0 --ref "flotilla.local/${name}:${tag}" --uid "${uid}"
    --entrypoint "/usr/local/bin/${name}" --file "/usr/local/bin/${name}=${bin}"
    --label "org.opencontainers.image.source=${source}"
    --label "org.opencontainers.image.version=${tag}" "$@")
  inputs="$( { sha256sum <"${bin}"; sha256sum <"${HACK_DIR}/oci-image.py"; printf '%s\n' "${args[@]}"; } \
    | sed "s|${bin}|BINARY|" | sha256sum | cut -d' ' -f1)"
  if [[ -f "${out}" && "$(cat "${out}.inputs" 2>/dev/null)" == "${inputs}" ]]; then
    log "$(printf '%-40s cached' "flotilla.local/${name}:${tag}")"
    echo "${out}"
    return
  fi
  t0="$(now)"
  rm -f "${out}.inputs"
  result="$(python3 "${HACK_DIR}/oci-image.py" --output "${out}" "${args[@]}")"
  echo "${inputs}" >"${out}.inputs"
  log "$(printf '%-40s built in %ss: %s' "flotilla.local/${name}:${tag}" "$(( $(now) - t0 ))" "$(describe_result "${result}")")"
  echo "${out}"
}

build_components() {
  # One build at a time per cache: a second caller waits, then finds the archives built.
  exec 7>"${IMAGES_DIR}/.lock"
  flock 7
  "${HACK_DIR}/build-tools.sh" --check >/dev/null \
    || die "the tool cache ${TOOLS_BIN} is incomplete: run hack/build-tools.sh first"
  local k8s=https://github.com/kubernetes/kubernetes b
  # With etcdctl, as registry.k8s.io/etcd has it (the chart's defragmentation CronJob runs it).
  component_image etcd "${ETCD_VERSION}" "${TOOLS_BIN}/etcd" 65532 https://github.com/etcd-io/etcd \
    --file "/usr/local/bin/etcdctl=${TOOLS_BIN}/etcdctl"
  for b in kube-apiserver kube-controller-manager; do
    component_image "${b}" "${KUBERNETES_VERSION}" "${TOOLS_BIN}/${b}" 65532 "${k8s}"
  done
  # kubectl keeps its cache and looks for its kuberc in $HOME, which must exist (the user's home
  # /nonexistent does not).
  component_image kubectl "${KUBERNETES_VERSION}" "${TOOLS_BIN}/kubectl" 65532 "${k8s}" --env HOME=/tmp
  # Kubernetes' own build/pause/linux/pause.c (hack/build-tools.sh builds it), as upstream's
  # registry.k8s.io/pause:3.10 runs it: user 65535.
  component_image pause "${PAUSE_IMAGE_TAG}" "${TOOLS_BIN}/pause" 65535 "${k8s}/tree/master/build/pause"
}

STAGE="$(mktemp -d)"
trap 'rm -rf "${STAGE}"' EXIT
case "${MODE}" in
  release) build_release ;;
  dev) build_dev ;;
  components) build_components ;;
esac
