#!/usr/bin/env bash
# Runs flotilla-negotiator compat's comparison over every consecutive pair of releases of the corpus
# of real CRDs in the tool cache (crds/releases/<project>/<version>/, fetched by
# hack/build-tools.sh; versions in hack/versions.env) and prints the summary: pairs per project,
# and how many are safe, narrowing, breaking, unknown (a pair's verdict is its worst change's).
# It is the test `cargo test -p flotilla-negotiator --test compat_corpus`, which also checks that
# every unknown change is explained in docs/schema-compatibility.md ("Real releases: what stays
# unknown"); when it is not, the missing rows are printed ready to paste. Exit code: the test's.
#
# Usage: hack/compat-corpus.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "${REPO_ROOT}"

# The tool cache's progress only when it fails.
if ! out="$("${HACK_DIR}/build-tools.sh" 2>&1 >/dev/null)"; then
  printf '%s\n' "${out}" >&2
  exit 1
fi
export FLOTILLA_TOOLS_BIN="${TOOLS_BIN}"
cargo test -q -p flotilla-negotiator --test compat_corpus -- --nocapture 2>&1 \
  | grep -vE '^(running [0-9]+ tests?|test result:.*|\.|)$'
