#!/usr/bin/env bash
# Builds Flotilla's container image on a machine without a container engine: the four controller
# binaries (release build), the shared libraries they load and CA certificates, run as the
# non-root user 65532; no shell, no package manager. The same commit gives the same bytes (every
# file dated by the commit, sorted tar entries, gzip without timestamps), so the image digest is
# reproducible. With Docker, Podman or Buildah use the Containerfile instead.
#
# Usage: hack/build-image.sh [--output FILE] [--tag TAG]
#   --output FILE  the OCI archive to write (default: the cache's images/flotilla-<tag>.oci.tar)
#   --tag TAG      the image tag (default: the crate version and the commit, e.g. 0.1.0-9bf4afa)
# Prints the archive's path, its manifest digest and its size. Load it with
#   skopeo copy oci-archive:FILE docker-daemon:flotilla:TAG     (Docker)
#   podman load -i FILE                                         (Podman)
#   ctr -n k8s.io images import --index-name flotilla:TAG FILE  (containerd)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BINARIES=(flotilla-registration flotilla-syncer flotilla-splitter flotilla-negotiator)
OUTPUT=""
TAG=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --output) OUTPUT="${2:?--output needs a file}"; shift 2 ;;
    --tag) TAG="${2:?--tag needs a tag}"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

cd "${REPO_ROOT}"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
commit="$(git rev-parse --short=7 HEAD)"
dirty=""
git diff --quiet HEAD -- || dirty="-dirty"
TAG="${TAG:-${version}-${commit}${dirty}}"
OUTPUT="${OUTPUT:-${FLOTILLA_CACHE_DIR}/images/flotilla-${TAG}.oci.tar}"
mkdir -p "$(dirname "${OUTPUT}")"
# Every file is dated by the commit (SOURCE_DATE_EPOCH wins, as in reproducible-builds.org).
epoch="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct HEAD)}"

# A target directory of its own: the path remapping below changes RUSTFLAGS, which would
# otherwise rebuild the development target from scratch every time.
target="${FLOTILLA_IMAGE_TARGET_DIR:-${FLOTILLA_CACHE_DIR}/image-target}"
log "building ${BINARIES[*]} (release) into ${target}"
packages=()
for b in "${BINARIES[@]}"; do packages+=(-p "${b}"); done
# --remap-path-prefix keeps the build machine's paths out of the binaries (reproducibility).
CARGO_TARGET_DIR="${target}" \
  RUSTFLAGS="${RUSTFLAGS:-} --remap-path-prefix=${REPO_ROOT}=/flotilla --remap-path-prefix=${CARGO_HOME:-${HOME}/.cargo}=/cargo" \
  cargo build --release --locked "${packages[@]}" --bins

stage="$(mktemp -d)"
trap 'rm -rf "${stage}"' EXIT
files=()
declare -A libs=()
for b in "${BINARIES[@]}"; do
  bin="${target}/release/${b}"
  [[ -x "${bin}" ]] || die "${bin} was not built"
  # Without symbols: a third of the size, and no build paths.
  strip --strip-all -o "${stage}/${b}" "${bin}"
  files+=(--file "/usr/local/bin/${b}=${stage}/${b}")
  # The shared libraries it loads (glibc, libgcc_s), at the paths the loader looks them up.
  while read -r path; do
    [[ -n "${path}" ]] && libs["${path}"]=1
  done < <(ldd "${bin}" | awk '/=> \//{print $3} /^\t\/.*ld-linux/{print $1}')
done
for lib in "${!libs[@]}"; do
  files+=(--file "${lib}=$(readlink -f "${lib}")")
done
# CA certificates, for a hub whose serving certificate a public CA signed.
[[ -f /etc/ssl/certs/ca-certificates.crt ]] \
  && files+=(--file "/etc/ssl/certs/ca-certificates.crt=/etc/ssl/certs/ca-certificates.crt")

result="$(python3 "${HACK_DIR}/oci-image.py" --output "${OUTPUT}" --epoch "${epoch}" \
  --ref "flotilla:${TAG}" \
  --label "org.opencontainers.image.source=https://github.com/flotilla-dev/flotilla" \
  --label "org.opencontainers.image.revision=$(git rev-parse HEAD)" \
  --label "org.opencontainers.image.version=${TAG}" \
  "${files[@]}")"
manifest="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["manifest"])' "${result}")"
layer="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["layer_bytes"])' "${result}")"
log "image flotilla:${TAG}: manifest ${manifest}, compressed layer $(( layer / 1024 / 1024 )) MiB"
echo "${OUTPUT}"
