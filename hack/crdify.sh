#!/usr/bin/env bash
# Compares Flotilla's CRD upgrade checker (flotilla-negotiator compat) with OLM's
# sigs.k8s.io/crdify on every pair of the CRD upgrade corpus (controllers/schema/testdata/corpus)
# and prints a Markdown table on stdout: case, what it exercises, both verdicts, whether they agree.
# Two verdicts agree when both let the change through (exit 0) or both stop it (non-zero exit).
# Progress goes to stderr. docs/crdify-comparison.md explains the disagreements.
#
# crdify is built from the Go module proxy into the tool cache of hack/build-tools.sh, as
# crdify-<CRDIFY_VERSION> (hack/versions.env), the first time it is needed; build-tools.sh itself
# does not build it. flotilla-negotiator is built with cargo (release profile) unless given.
#
# Usage: hack/crdify.sh [--build | --check]
#   --build       only build crdify if it is missing and print its path
#   --check       exit 0 when crdify is in the cache, 1 otherwise (nothing is built)
# Environment:
#   FLOTILLA_CACHE_DIR    cache root (default: ${XDG_CACHE_HOME:-~/.cache}/flotilla)
#   FLOTILLA_NEGOTIATOR   flotilla-negotiator binary to use (default: cargo build --release -p
#                         flotilla-negotiator, then ${CARGO_TARGET_DIR:-target}/release/flotilla-negotiator)
#   CRDIFY_CORPUS         corpus directory (default: controllers/schema/testdata/corpus)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CRDIFY_BIN="${TOOLS_BIN}/crdify-${CRDIFY_VERSION}"
MODE=compare
case "${1:-}" in
  --build) MODE=build ;;
  --check)
    [[ -x "${CRDIFY_BIN}" ]] || { echo "missing: crdify-${CRDIFY_VERSION}"; exit 1; }
    echo "${CRDIFY_BIN}"; exit 0 ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) die "unknown argument '$1' (see --help)" ;;
esac

build_crdify() {
  if [[ -x "${CRDIFY_BIN}" ]]; then return 0; fi
  command -v go >/dev/null 2>&1 || die "Go is not installed or not on PATH: hack/crdify.sh needs the 'go' command to build sigs.k8s.io/crdify@${CRDIFY_VERSION}"
  export GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0
  local work="${FLOTILLA_CACHE_DIR}/work" dir t0
  mkdir -p "${TOOLS_BIN}" "${work}"
  # The same lock as hack/build-tools.sh: one build at a time per cache.
  exec 8>"${FLOTILLA_CACHE_DIR}/.build.lock"
  flock 8
  if [[ ! -x "${CRDIFY_BIN}" ]]; then
    t0="$(now)"
    log "building sigs.k8s.io/crdify@${CRDIFY_VERSION} into ${TOOLS_BIN}"
    dir="${work}/crdify-${CRDIFY_VERSION}"
    if [[ ! -f "${dir}/.ready" ]]; then
      rm -rf "${dir}"; mkdir -p "${dir}"
      (
        cd "${dir}"
        go_or_die "crdify" go mod init flotilla.local/crdify-tools
        go mod edit "-require=sigs.k8s.io/crdify@${CRDIFY_VERSION}" -tool=sigs.k8s.io/crdify
        go_or_die "sigs.k8s.io/crdify@${CRDIFY_VERSION}" go mod tidy
      ) >&2
      touch "${dir}/.ready"
    fi
    (cd "${dir}" && go_or_die crdify go build -mod=mod -trimpath -ldflags "-s -w" -o "${TOOLS_BIN}/.crdify.tmp" sigs.k8s.io/crdify)
    mv "${TOOLS_BIN}/.crdify.tmp" "${CRDIFY_BIN}"
    log "$(printf '%-24s built in %4ss' "crdify" "$(( $(now) - t0 ))")"
  fi
  flock -u 8
  exec 8>&-
}

build_crdify
if [[ "${MODE}" == build ]]; then echo "${CRDIFY_BIN}"; exit 0; fi

command -v jq >/dev/null 2>&1 || die "jq is not installed: hack/crdify.sh reads both checkers' JSON reports with it"

CORPUS="${CRDIFY_CORPUS:-${REPO_ROOT}/controllers/schema/testdata/corpus}"
[[ -f "${CORPUS}/expected.yaml" ]] || die "no expected.yaml in ${CORPUS}"

if [[ -n "${FLOTILLA_NEGOTIATOR:-}" ]]; then
  NEGOTIATOR="${FLOTILLA_NEGOTIATOR}"
else
  log "building flotilla-negotiator (cargo build --release -p flotilla-negotiator)"
  (cd "${REPO_ROOT}" && cargo build --release --locked -p flotilla-negotiator >&2)
  target_dir="${CARGO_TARGET_DIR:-${REPO_ROOT}/target}"
  [[ "${target_dir}" == /* ]] || target_dir="${REPO_ROOT}/${target_dir}"
  NEGOTIATOR="${target_dir}/release/flotilla-negotiator"
fi
[[ -x "${NEGOTIATOR}" ]] || die "flotilla-negotiator not found at ${NEGOTIATOR}"

# expected.yaml (written by generate.py) as one line per case: name, version, path, kind,
# separated by \x1f (a tab would merge empty fields).
cases() {
  awk '
    function flush() { if (name != "") printf "%s\037%s\037%s\037%s\n", name, version, path, kind }
    /^- name: /   { flush(); name = $3; version = ""; path = ""; kind = "" }
    /^    path: / { sub(/^    path: /, ""); path = $0 }
    /^    kind: / { kind = $2 }
    /^    version: / { version = $2 }
    END { flush() }
  ' "${CORPUS}/expected.yaml"
}

# A table cell: no pipes or newlines, at most 110 characters.
cell() {
  local s="${1//$'\n'/ }"
  s="${s//|/\\|}"
  if (( ${#s} > 110 )); then s="${s:0:107}..."; fi
  printf '%s' "${s}"
}

# "<exit> <Verdict>: <worst change>" from flotilla-negotiator compat --output json.
flotilla_verdict() { # old new
  local out rc=0
  out="$("${NEGOTIATOR}" compat "$1" "$2" --output json 2>/dev/null)" || rc=$?
  local summary
  summary="$(jq -r '
    def rank: {"Breaking": 0, "Unknown": 1, "Narrowing": 2, "Safe": 3}[.verdict] // 4;
    if .error then "\(.verdict // "Unknown"): \(.error)"
    else (.changes | length) as $n | (.changes | sort_by(rank) | first) as $c
      | "\(.verdict): " + if $c == null then "no change"
          else "\($c.kind) \(if $c.version then $c.version + " " else "" end)\($c.path)"
            + (if $n > 1 then " (+\($n - 1))" else "" end) end
    end' <<<"${out}" 2>/dev/null)" || summary="unreadable report"
  printf '%s\x1f%s' "${rc}" "${summary}"
}

# "<exit> <first error>" from crdify -o json. crdify exits 1 both for incompatible changes and
# (through log.Fatal) for input it cannot load; the latter has no JSON report.
crdify_verdict() { # old new
  local out err rc=0
  err="$(mktemp)"
  out="$("${CRDIFY_BIN}" "file://$1" "file://$2" -o json 2>"${err}")" || rc=$?
  local summary
  if [[ -z "${out}" ]] || ! summary="$(jq -r '
      def short: split("\n")[0] | sub(" :$"; "");
      # For "unhandled changes found": the field of the first changed line of the go-cmp diff
      # that follows (go-cmp mixes in non-breaking spaces at random).
      def unhandled: gsub("\u00a0"; " ") | split("\n") as $l
        | ([range(0; $l | length) | select($l[.] | test("^[-+]"))] | first) as $i
        | if $i == null then ""
          else ([$l[0:$i + 1][] | capture("^[-+ ]\\s*(?<f>[A-Z][A-Za-z]*):") | .f] | last) as $f
            | if $f then " (\($f))" else "" end
          end;
      def msgs($scope):
        to_entries[] | .key as $v | .value | to_entries[] | .key as $p | .value[]
        | .name as $n | (.errors // [])[] | {rank: (if $n == "unhandled" then 1 else 0 end), scope: $scope,
            text: ("\($n) \($v) \($p): \(short)" + (if $n == "unhandled" then unhandled else "" end))};
      [ (.crdValidation // [])[] | .name as $n | (.errors // [])[] | {rank: 0, scope: 0, text: "\($n): \(short)"} ]
      + [ (.sameVersionValidation // {}) | msgs(1) ]
      + [ (.servedVersionValidation // {}) | msgs(2) ]
      | sort_by(.rank, .scope, .text)
      | if length == 0 then "no error"
        else .[0].text + (if length > 1 then " (+\(length - 1))" else "" end) end' <<<"${out}" 2>/dev/null)"; then
    summary="not run: $(tail -n 1 "${err}" | sed 's/^[0-9/]* [0-9:]* //')"
    rc="${rc}!"
  fi
  rm -f "${err}"
  printf '%s\x1f%s' "${rc}" "${summary}"
}

log "comparing with crdify ${CRDIFY_VERSION} on ${CORPUS}"
echo "| case | exercises | flotilla-negotiator compat | crdify ${CRDIFY_VERSION} | agree |"
echo "|---|---|---|---|---|"
total=0 agree=0 disagreements=()
while IFS=$'\x1f' read -r name version path kind; do
  old="${CORPUS}/${name}/old.yaml" new="${CORPUS}/${name}/new.yaml"
  [[ -f "${old}" && -f "${new}" ]] || die "case ${name}: old.yaml or new.yaml is missing"
  if [[ -n "${kind}" ]]; then exercises="${kind} ${version:+${version} }${path}"; else exercises="no change expected"; fi
  IFS=$'\x1f' read -r frc fsum < <(flotilla_verdict "${old}" "${new}"; echo)
  IFS=$'\x1f' read -r crc csum < <(crdify_verdict "${old}" "${new}"; echo)
  total=$((total + 1))
  if [[ "${crc}" == *'!' ]]; then
    ok=no
  elif [[ ( "${frc}" == 0 && "${crc}" == 0 ) || ( "${frc}" != 0 && "${crc}" != 0 ) ]]; then
    ok=yes; agree=$((agree + 1))
  else
    ok=no
  fi
  [[ "${ok}" == yes ]] || disagreements+=("${name}")
  printf '| %s | %s | %s | %s | %s |\n' "${name}" "$(cell "${exercises}")" \
    "$(cell "${frc} ${fsum}")" "$(cell "${crc} ${csum}")" "${ok}"
done < <(cases)
echo
echo "Agreements: ${agree} of ${total}. Disagreements (${#disagreements[@]}): ${disagreements[*]:-none}."
