#!/usr/bin/env bash
# Flotilla's test entry point: builds the tools if needed, checks formatting and lints (cargo fmt,
# clippy, shellcheck of hack/), runs the unit tests, then starts a local environment (hub +
# members) of its own, runs the end-to-end tests (tests/e2e) against it and tears it down again,
# also on failure. Exits non-zero on any failure; a failed unit test stops it before the
# environment starts.
#
# Usage: hack/test.sh [-- CARGO_TEST_ARGS...]
# Environment:
#   FLOTILLA_TEST_MEMBERS   members to start (default 3)
#   FLOTILLA_TEST_RUN_DIR   run directory of the test environment (default ${TMPDIR:-/tmp}/flotilla-test-env)
#   FLOTILLA_TEST_PORT_BASE port base of the test environment (default 17443, so a quick-start
#                           environment on 16443 can keep running)
#   FLOTILLA_SKIP_LINT=1    skip cargo fmt --check and cargo clippy
#   FLOTILLA_SKIP_QUICKSTART=1  skip running hack/quickstart.sh --tour after the tests
#   FLOTILLA_KEEP_ENV=1     leave the environment running afterwards (hack/clusters.sh down stops it)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "${REPO_ROOT}"

CARGO_TEST_ARGS=()
case "${1:-}" in
  "") ;;
  --) shift; CARGO_TEST_ARGS=("$@") ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) die "unknown argument '$1' (see --help; arguments for cargo test go after --)" ;;
esac

T0="$(now)"
log "== checking this machine's prerequisites (missing Debian packages are installed when root)"
ensure_prerequisites
export FLOTILLA_RUN_DIR="${FLOTILLA_TEST_RUN_DIR:-${TMPDIR:-/tmp}/flotilla-test-env}"
export FLOTILLA_PORT_BASE="${FLOTILLA_TEST_PORT_BASE:-17443}"
CLUSTERS=("${HACK_DIR}/clusters.sh" --run-dir "${FLOTILLA_RUN_DIR}" --port-base "${FLOTILLA_PORT_BASE}")

log "== building tools (cached after the first run)"
"${HACK_DIR}/build-tools.sh" >/dev/null

if [[ "${FLOTILLA_SKIP_LINT:-0}" != 1 ]]; then
  log "== cargo fmt --check"
  cargo fmt --all --check
  log "== cargo clippy --all-targets -- -D warnings"
  cargo clippy --workspace --all-targets --locked -- -D warnings
  log "== shellcheck hack/ .ci/run"
  shellcheck -S warning "${HACK_DIR}"/*.sh "${REPO_ROOT}/.ci/run"
fi

log "== building controllers and tests"
cargo build --workspace --bins --locked
cargo test --workspace --locked --no-run
log "== cargo test: the unit tests (no environment needed)"
FLOTILLA_TOOLS_BIN="$("${HACK_DIR}/build-tools.sh" --print-dir)" \
  cargo test --workspace --exclude flotilla-e2e --locked --no-fail-fast "${CARGO_TEST_ARGS[@]}"
log "== the controllers' image, from the binaries just built (the chart's tests run it)"
IMAGE="$("${HACK_DIR}/build-image.sh" --dev)"

teardown() {
  local rc=$?
  if [[ ${rc} -ne 0 && -d "${FLOTILLA_RUN_DIR}/logs" ]]; then
    local keep="${REPO_ROOT}/target/e2e-logs"
    rm -rf "${keep}"; mkdir -p "${keep}"
    cp -r "${FLOTILLA_RUN_DIR}/logs/." "${keep}/" 2>/dev/null || true
    mkdir -p "${keep}/e2e" && cp "${FLOTILLA_RUN_DIR}"/e2e/*.log "${keep}/e2e/" 2>/dev/null || true
    log "tests failed: component logs copied to ${keep}"
    # What a failure on another machine needs first: the clusters' and the real node's state and
    # the free disk (a full disk stops the node's containers, not the apiservers).
    "${CLUSTERS[@]}" status || true
    df -h "${FLOTILLA_RUN_DIR}" || true
  fi
  if [[ "${FLOTILLA_KEEP_ENV:-0}" == 1 ]]; then
    log "leaving the environment running (FLOTILLA_KEEP_ENV=1); stop it with: ${CLUSTERS[*]} down"
  else
    "${CLUSTERS[@]}" down || true
  fi
  log "hack/test.sh finished in $(( $(now) - T0 ))s with exit code ${rc}"
  exit "${rc}"
}
trap teardown EXIT
trap 'exit 130' INT TERM

log "== starting the environment (hub + ${FLOTILLA_TEST_MEMBERS:-3} members, member1 with a real node)"
# `eval "$(...)"` would go on after a failed start-up: check first.
ENV_LINES="$("${CLUSTERS[@]}" up --members "${FLOTILLA_TEST_MEMBERS:-3}" --host-node member1)" \
  || die "the local clusters did not start (see the messages above)"
eval "${ENV_LINES}"
"${CLUSTERS[@]}" load-image "${IMAGE}" >/dev/null

log "== cargo test: the end-to-end tests"
# A failed test's error chain, not a backtrace of where anyhow made it: the summary at the end
# of the output then says what went wrong in each.
RUST_LIB_BACKTRACE=0 cargo test -p flotilla-e2e --locked --no-fail-fast "${CARGO_TEST_ARGS[@]}"

if [[ ${#CARGO_TEST_ARGS[@]} -eq 0 && "${FLOTILLA_SKIP_QUICKSTART:-0}" != 1 ]]; then
  # The README's first command, as a user runs it, in an environment of its own.
  log "== hack/quickstart.sh --tour"
  QS_DIR="${FLOTILLA_RUN_DIR}-quickstart"
  keep_qs_logs() {
    local keep="${REPO_ROOT}/target/e2e-logs-quickstart"
    rm -rf "${keep}"; mkdir -p "${keep}"
    cp -r "${QS_DIR}/logs/." "${keep}/" 2>/dev/null || true
    log "the quick start failed: its component logs are in ${keep}"
  }
  trap 'rc=$?; [[ ${rc} -eq 0 ]] || keep_qs_logs; "${HACK_DIR}/clusters.sh" --run-dir "${QS_DIR}" down >/dev/null 2>&1 || true; (exit "${rc}"); teardown' EXIT
  FLOTILLA_RUN_DIR="${QS_DIR}" FLOTILLA_PORT_BASE=$(( FLOTILLA_PORT_BASE + 500 )) \
    "${HACK_DIR}/quickstart.sh" --tour
fi
