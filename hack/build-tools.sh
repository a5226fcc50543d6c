#!/usr/bin/env bash
# Builds the binaries of the local test environment from the Go module proxy into a versioned
# cache directory outside the repository:
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd, etcdctl (in the
#   local etcd image, for the chart's defragmentation CronJob), kwok, helm,
#   kstatus (hack/kstatus: the readiness verdict GitOps tools compute, from cli-utils' kstatus),
#   kubelet (for hack/clusters.sh's real host node; KUBERNETES_VERSION only) and pause (static,
#   from Kubernetes' own build/pause/linux/pause.c in the k8s.io/kubernetes module; the sandbox
#   image that hack/build-image.sh --components makes of it)
# and, in crds/, real CRDs of widely used projects (Argo Rollouts' Rollout, OpenKruise's
# CloneSet, KubeRay's RayCluster) from their Go modules, named <plural>.<group>.yaml, and Gateway API's HTTPRoute at
# two releases, named <plural>.<group>@<version>.yaml
# and, for the older Kubernetes minor that some members run (KUBERNETES_OLDER_VERSION),
#   k8s-<version>/{kube-apiserver,kube-controller-manager,kube-scheduler}
# Versions come from hack/versions.env. Binaries already present are not rebuilt, so a second run
# finishes in seconds. Prints the cache directory on stdout when done; progress goes to stderr.
#
# Usage: hack/build-tools.sh [--print-dir | --check]
#   --print-dir   only print the cache directory (nothing is built)
#   --check       exit 0 when every tool is in the cache, 1 otherwise (nothing is built)
# Environment:
#   FLOTILLA_CACHE_DIR   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/flotilla)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ALL_TOOLS=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd etcdctl kwok helm kstatus kubelet pause)
CRD_MARKERS=(".argo-rollouts-${ARGO_ROLLOUTS_VERSION}" ".openkruise-${OPENKRUISE_VERSION}" ".kuberay-${KUBERAY_VERSION}"
  ".gateway-api-${GATEWAY_API_OLD_VERSION}" ".gateway-api-${GATEWAY_API_VERSION}")
case "${1:-}" in
  --print-dir) echo "${TOOLS_BIN}"; exit 0 ;;
  --check)
    for b in "${ALL_TOOLS[@]}"; do [[ -x "${TOOLS_BIN}/${b}" ]] || { echo "missing: ${b}"; exit 1; }; done
    for v in "${KUBERNETES_VERSIONS[@]}"; do
      for b in "${K8S_SERVER_TOOLS[@]}"; do
        [[ -x "$(k8s_bin_dir "${v}")/${b}" ]] || { echo "missing: ${b} ${v}"; exit 1; }
      done
    done
    [[ -f "${KWOK_STAGES_DIR}/.ready" ]] || { echo "missing: kwok stages"; exit 1; }
    for m in "${CRD_MARKERS[@]}"; do [[ -f "${TOOLS_BIN}/crds/${m}" ]] || { echo "missing: crds ${m}"; exit 1; }; done
    echo "${TOOLS_BIN}"; exit 0 ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) die "unknown argument '$1' (see --help)" ;;
esac

command -v gcc >/dev/null 2>&1 || die "a C compiler is needed for the pause binary of the host node's sandbox image (Debian: apt-get install gcc libc6-dev)"
command -v go >/dev/null 2>&1 || die "Go is not installed or not on PATH: hack/build-tools.sh needs the 'go' command (Go >= 1.25) to build the Kubernetes binaries"

export GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0
WORK="${FLOTILLA_CACHE_DIR}/work"
mkdir -p "${TOOLS_BIN}" "${WORK}"
# One build at a time per cache; a second caller waits and then finds everything cached.
exec 8>"${FLOTILLA_CACHE_DIR}/.build.lock"
flock 8

K8S_MINOR="$(echo "${KUBERNETES_VERSION}" | cut -d. -f2)"
BUILD_DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

have() { [[ -x "${TOOLS_BIN}/$1" ]]; }

report() { # name start
  log "$(printf '%-24s built in %4ss' "$1" "$(( $(now) - $2 ))")"
}

skip() { log "$(printf '%-24s cached' "$1")"; }

# The commands of k8s.io/kubernetes a wrapper module of a version builds (the kubelet only for
# KUBERNETES_VERSION, the version of the host node).
k8s_tools() { # version
  echo kube-apiserver kube-controller-manager kube-scheduler kubectl
  [[ "$1" != "${KUBERNETES_VERSION}" ]] || echo kubelet
}

# A throw-away module that requires k8s.io/kubernetes at one version, with its staging modules
# pointed at their published versions. Prints its directory.
k8s_wrapper() { # version
  local version="$1" dir="${WORK}/kubernetes-$1" staging="v0.${1#v1.}" t
  if [[ -f "${dir}/.ready" ]]; then
    # A wrapper made before a command was added to k8s_tools: add it.
    local add=()
    for t in $(k8s_tools "${version}"); do
      grep -q "k8s.io/kubernetes/cmd/${t}\$" "${dir}/go.mod" || add+=("-tool=k8s.io/kubernetes/cmd/${t}")
    done
    if [[ ${#add[@]} -gt 0 ]]; then
      (cd "${dir}" && go mod edit "${add[@]}" \
        && go_or_die "k8s.io/kubernetes@${version} (go mod tidy)" go mod tidy) >&2
    fi
    echo "${dir}"; return
  fi
  rm -rf "${dir}"; mkdir -p "${dir}"
  (
    cd "${dir}"
    go_or_die "k8s.io/kubernetes@${version}" go mod init flotilla.local/k8s-tools
    local gomod
    gomod="$(go mod download -json "k8s.io/kubernetes@${version}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
    [[ -f "${gomod}" ]] || die "the Go module proxy did not serve k8s.io/kubernetes@${version}"
    # k8s.io/kubernetes replaces its staging modules with ./staging/...; point them at the
    # published versions instead.
    local mods
    mods="$(grep -E '^[[:space:]]*k8s\.io/[a-z0-9-]+ => \./staging/' "${gomod}" | awk '{print $1}')"
    [[ -n "${mods}" ]] || die "found no staging replace directives in k8s.io/kubernetes@${version}'s go.mod"
    local args=()
    for m in ${mods}; do args+=("-replace=${m}=${m}@${staging}"); done
    for t in $(k8s_tools "${version}"); do args+=("-tool=k8s.io/kubernetes/cmd/${t}"); done
    go mod edit "${args[@]}" "-require=k8s.io/kubernetes@${version}"
    go_or_die "k8s.io/kubernetes@${version} (go mod tidy)" go mod tidy
  ) >&2
  touch "${dir}/.ready"
  echo "${dir}"
}

build_k8s() { # version binaries...
  local version="$1"; shift
  local dest missing=() b
  dest="$(k8s_bin_dir "${version}")"
  mkdir -p "${dest}"
  for b in "$@"; do
    if [[ -x "${dest}/$b" ]]; then skip "$b ${version}"; else missing+=("$b"); fi
  done
  [[ ${#missing[@]} -gt 0 ]] || return 0
  local t0 dir minor
  t0="$(now)"
  dir="$(k8s_wrapper "${version}")"
  minor="$(echo "${version}" | cut -d. -f2)"
  log "$(printf '%-24s module graph ready in %ss' "kubernetes ${version}" "$(( $(now) - t0 ))")"
  # Without these /version says v0.0.0, and helm's kubeVersion checks fail.
  local ldf="" p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldf+=" -X ${p}.gitVersion=${version} -X ${p}.gitMajor=1 -X ${p}.gitMinor=${minor}"
    ldf+=" -X ${p}.gitTreeState=clean -X ${p}.buildDate=${BUILD_DATE}"
  done
  for b in "${missing[@]}"; do
    t0="$(now)"
    (cd "${dir}" && go_or_die "$b ${version}" go build -mod=mod -trimpath -ldflags "-s -w${ldf}" -o "${dest}/.$b.tmp" "k8s.io/kubernetes/cmd/$b")
    mv "${dest}/.$b.tmp" "${dest}/$b"
    report "$b ${version}" "${t0}"
  done
}

# The sandbox ("pause") container's binary: Kubernetes' own build/pause/linux/pause.c from the
# k8s.io/kubernetes module, static, as upstream builds registry.k8s.io/pause.
build_pause() {
  if have pause; then skip pause; return; fi
  local t0 dir src tag
  t0="$(now)"
  dir="$(cd "${WORK}" && go mod download -json "k8s.io/kubernetes@${KUBERNETES_VERSION}" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  src="${dir}/build/pause/linux/pause.c"
  [[ -f "${src}" ]] || die "k8s.io/kubernetes@${KUBERNETES_VERSION} has no build/pause/linux/pause.c"
  tag="$(sed -n 's/^TAG ?= *//p' "${dir}/build/pause/Makefile" 2>/dev/null || true)"
  gcc -Os -Wall -Werror -static "-DVERSION=v${tag:-unknown}-k8s-${KUBERNETES_VERSION}" \
    -o "${TOOLS_BIN}/.pause.tmp" "${src}" >&2 \
    || die "compiling ${src} failed (a static build needs the C library's archive: Debian: apt-get install libc6-dev)"
  strip --strip-all "${TOOLS_BIN}/.pause.tmp"
  mv "${TOOLS_BIN}/.pause.tmp" "${TOOLS_BIN}/pause"
  report pause "${t0}"
}

# build_etcd_tool NAME MODULE: etcd's server or etcdctl, from their Go module at ETCD_VERSION.
build_etcd_tool() {
  local name="$1" module="$2" t0 dir
  if have "${name}"; then skip "${name}"; return; fi
  t0="$(now)"
  dir="${WORK}/${name}-${ETCD_VERSION}"
  if [[ ! -f "${dir}/.ready" ]]; then
    rm -rf "${dir}"; mkdir -p "${dir}"
    (
      cd "${dir}"
      go_or_die "${name}" go mod init "flotilla.local/${name}-tools"
      go mod edit "-require=${module}@${ETCD_VERSION}" "-tool=${module}"
      go_or_die "${module}@${ETCD_VERSION}" go mod tidy
    ) >&2
    touch "${dir}/.ready"
  fi
  (cd "${dir}" && go_or_die "${name}" go build -mod=mod -trimpath -ldflags "-s -w" -o "${TOOLS_BIN}/.${name}.tmp" "${module}")
  mv "${TOOLS_BIN}/.${name}.tmp" "${TOOLS_BIN}/${name}"
  report "${name}" "${t0}"
}

build_kwok() {
  if have kwok && [[ -f "${KWOK_STAGES_DIR}/.ready" ]]; then skip kwok; return; fi
  local t0
  t0="$(now)"
  local tmp="${WORK}/kwok-gobin"
  rm -rf "${tmp}"; mkdir -p "${tmp}"
  (cd "${WORK}" && GOBIN="${tmp}" go_or_die "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}")
  # kwok v0.8 ships no built-in stages: take the stage files from its module.
  local moddir
  moddir="$(go env GOMODCACHE)/sigs.k8s.io/kwok@${KWOK_VERSION}"
  [[ -d "${moddir}/kustomize/stage" ]] || die "kwok's stage files are missing from ${moddir}/kustomize/stage"
  rm -rf "${KWOK_STAGES_DIR}"; mkdir -p "${KWOK_STAGES_DIR}"
  # The "fast" stages: nodes become Ready at once and renew Leases; pods go straight to Running.
  local f
  for f in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
      pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
    [[ -f "${moddir}/kustomize/stage/${f}.yaml" ]] || die "kwok stage ${f}.yaml not found under ${moddir}/kustomize/stage"
    cp "${moddir}/kustomize/stage/${f}.yaml" "${KWOK_STAGES_DIR}/"
  done
  chmod u+w "${KWOK_STAGES_DIR}"/*.yaml
  touch "${KWOK_STAGES_DIR}/.ready"
  mv "${tmp}/kwok" "${TOOLS_BIN}/kwok"
  report kwok "${t0}"
}

build_helm() {
  if have helm; then skip helm; return; fi
  local t0
  t0="$(now)"
  local tmp="${WORK}/helm-gobin" ldf="-s -w"
  for p in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ldf+=" -X ${p}.k8sVersionMajor=1 -X ${p}.k8sVersionMinor=${K8S_MINOR}"
  done
  rm -rf "${tmp}"; mkdir -p "${tmp}"
  (cd "${WORK}" && GOBIN="${tmp}" go_or_die "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" go install -trimpath -ldflags "${ldf}" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}")
  mv "${tmp}/helm" "${TOOLS_BIN}/helm"
  report helm "${t0}"
}

# hack/kstatus/main.go in a throw-away module that requires cli-utils at CLI_UTILS_VERSION.
build_kstatus() {
  if have kstatus; then skip kstatus; return; fi
  local t0 dir
  t0="$(now)"
  dir="${WORK}/kstatus-${CLI_UTILS_VERSION}"
  rm -rf "${dir}"; mkdir -p "${dir}"
  cp "${HACK_DIR}/kstatus/main.go" "${dir}/"
  (
    cd "${dir}"
    go_or_die "kstatus" go mod init flotilla.local/kstatus
    go mod edit "-require=sigs.k8s.io/cli-utils@${CLI_UTILS_VERSION}"
    go_or_die "sigs.k8s.io/cli-utils@${CLI_UTILS_VERSION}" go mod tidy
    go_or_die kstatus go build -trimpath -ldflags "-s -w" -o "${TOOLS_BIN}/.kstatus.tmp" .
  ) >&2
  mv "${TOOLS_BIN}/.kstatus.tmp" "${TOOLS_BIN}/kstatus"
  report kstatus "${t0}"
}

# One CRD file of a Go module: fetch_crd MODULE VERSION PATH-IN-MODULE NAME MARKER.
fetch_crd() {
  local module="$1" version="$2" path="$3" name="$4" marker="$5" t0 dir
  if [[ -f "${TOOLS_BIN}/crds/${marker}" ]]; then skip "${name}"; return; fi
  t0="$(now)"
  mkdir -p "${TOOLS_BIN}/crds"
  (cd "${WORK}" && go_or_die "${module}@${version}" go mod download "${module}@${version}")
  dir="$(cd "${WORK}" && go mod download -json "${module}@${version}" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -f "${dir}/${path}" ]] || die "${module}@${version} has no ${path}"
  rm -f "${TOOLS_BIN}/crds/.${name}.tmp"
  cp "${dir}/${path}" "${TOOLS_BIN}/crds/.${name}.tmp"
  chmod u+w "${TOOLS_BIN}/crds/.${name}.tmp"
  mv "${TOOLS_BIN}/crds/.${name}.tmp" "${TOOLS_BIN}/crds/${name}"
  touch "${TOOLS_BIN}/crds/${marker}"
  report "${name}" "${t0}"
}

# Consecutive releases of a project's CRDs, for the corpus of real schemas:
# fetch_crd_releases PROJECT MODULE DIR-IN-MODULE "VERSION..." copies every file of the module's
# directory that is a CustomResourceDefinition (other manifests there are skipped) into
# crds/releases/<project>/<version>/, one directory per release with a .ready marker. The modules
# go into a module cache of their own that is removed after each release, so only the CRDs stay on
# disk (a module is 3-9 MB zipped, 30-90 MB unpacked).
fetch_crd_releases() {
  local project="$1" module="$2" path="$3" versions="$4" v t0 dir dest f n
  local modcache="${WORK}/crd-releases-modcache"
  for v in ${versions}; do
    dest="${TOOLS_BIN}/crds/releases/${project}/${v}"
    if [[ -f "${dest}/.ready" ]]; then skip "${project} ${v} CRDs"; continue; fi
    t0="$(now)"
    rm -rf "${modcache}"
    (cd "${WORK}" && GOMODCACHE="${modcache}" GOFLAGS=-modcacherw \
      go_or_die "${module}@${v}" go mod download "${module}@${v}")
    dir="$(cd "${WORK}" && GOMODCACHE="${modcache}" GOFLAGS=-modcacherw go mod download -json "${module}@${v}" \
      | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [[ -d "${dir}/${path}" ]] || die "${module}@${v} has no ${path}/"
    rm -rf "${dest}.tmp"; mkdir -p "${dest}.tmp"
    n=0
    for f in "${dir}/${path}"/*.yaml; do
      grep -q '^kind: CustomResourceDefinition' "${f}" || continue
      cp "${f}" "${dest}.tmp/"
      n=$(( n + 1 ))
    done
    [[ ${n} -gt 0 ]] || die "${module}@${v} has no CustomResourceDefinition in ${path}/"
    chmod u+w "${dest}.tmp"/*.yaml
    touch "${dest}.tmp/.ready"
    rm -rf "${dest}"; mv "${dest}.tmp" "${dest}"
    rm -rf "${modcache}"
    report "${project} ${v} (${n} CRDs)" "${t0}"
  done
}

T0="$(now)"
log "tool cache: ${TOOLS_BIN}"
build_etcd_tool etcd go.etcd.io/etcd/server/v3
build_etcd_tool etcdctl go.etcd.io/etcd/etcdctl/v3
build_kwok
build_helm
build_kstatus
fetch_crd github.com/argoproj/argo-rollouts "${ARGO_ROLLOUTS_VERSION}" manifests/crds/rollout-crd.yaml \
  rollouts.argoproj.io.yaml ".argo-rollouts-${ARGO_ROLLOUTS_VERSION}"
fetch_crd github.com/openkruise/kruise "${OPENKRUISE_VERSION}" config/crd/bases/apps.kruise.io_clonesets.yaml \
  clonesets.apps.kruise.io.yaml ".openkruise-${OPENKRUISE_VERSION}"
fetch_crd github.com/ray-project/kuberay/ray-operator "${KUBERAY_VERSION}" config/crd/bases/ray.io_rayclusters.yaml \
  rayclusters.ray.io.yaml ".kuberay-${KUBERAY_VERSION}"
for v in "${GATEWAY_API_OLD_VERSION}" "${GATEWAY_API_VERSION}"; do
  fetch_crd sigs.k8s.io/gateway-api "${v}" config/crd/standard/gateway.networking.k8s.io_httproutes.yaml \
    "httproutes.gateway.networking.k8s.io@${v}.yaml" ".gateway-api-${v}"
done
fetch_crd_releases gateway-api sigs.k8s.io/gateway-api config/crd/standard "${GATEWAY_API_RELEASES}"
fetch_crd_releases prometheus-operator github.com/prometheus-operator/prometheus-operator \
  example/prometheus-operator-crd "${PROMETHEUS_OPERATOR_RELEASES}"
fetch_crd_releases argo-rollouts github.com/argoproj/argo-rollouts manifests/crds "${ARGO_ROLLOUTS_RELEASES}"
build_k8s "${KUBERNETES_VERSION}" "${K8S_SERVER_TOOLS[@]}" kubectl kubelet
build_pause
build_k8s "${KUBERNETES_OLDER_VERSION}" "${K8S_SERVER_TOOLS[@]}"
log "all tools ready in $(( $(now) - T0 ))s"
echo "${TOOLS_BIN}"
