#!/usr/bin/env bash
# Runs e2e scenarios one after another and prints a summary.
#
#   e2e/run.sh                 every scenario (e2e/[0-9][0-9]-*.sh)
#   e2e/run.sh 01 02           the scenarios whose names start with 01 and 02
#   e2e/run.sh 05-confirm-promotion e2e/08-steps-pause.sh
#
# In sandbox mode (no E2E_KUBECONFIG) the binaries are built once here, then every scenario starts
# its own sandbox and operator. E2E_FAIL_FAST=1 stops at the first failure. Each scenario's output
# also goes to $E2E_LOG_DIR/<scenario>.log (default: a new directory under /tmp).
set -Eeuo pipefail

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$E2E_DIR/.." && pwd)

scenarios=()
if (($# == 0)); then
  for script in "$E2E_DIR"/[0-9][0-9]-*.sh; do
    scenarios+=("$script")
  done
else
  for name in "$@"; do
    name=$(basename "$name" .sh)
    matches=("$E2E_DIR/$name"*.sh)
    if [[ ! -e ${matches[0]} ]]; then
      echo "no scenario matches '$name'; the scenarios are:" >&2
      for script in "$E2E_DIR"/[0-9][0-9]-*.sh; do echo "  $(basename "$script" .sh)" >&2; done
      exit 2
    fi
    scenarios+=("${matches[@]}")
  done
fi

missing=()
for tool in kubectl curl; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if [[ -z ${E2E_KUBECONFIG:-} ]]; then
  command -v prometheus >/dev/null || missing+=(prometheus)
  command -v "${CARGO:-cargo}" >/dev/null || missing+=(cargo)
fi
if ((${#missing[@]} > 0)); then
  echo "e2e needs: ${missing[*]} (Debian: apt-get install ${missing[*]//cargo/})" >&2
  exit 2
fi

if [[ -z ${E2E_KUBECONFIG:-} && ${E2E_SKIP_BUILD:-} != 1 ]]; then
  echo "building serin and serin-operator"
  (cd "$REPO_DIR" && "${CARGO:-cargo}" build -q -p serin-cli -p serin-operator)
fi
export E2E_SKIP_BUILD=1

LOG_DIR=${E2E_LOG_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/serin-e2e-logs.XXXXXX")}
mkdir -p "$LOG_DIR"

results=()
failed=0
total_started=$(date +%s)
for script in "${scenarios[@]}"; do
  name=$(basename "$script" .sh)
  echo
  echo "=================== $name ==================="
  started=$(date +%s)
  status=PASS
  if ! "$script" 2>&1 | tee "$LOG_DIR/$name.log"; then
    status=FAIL
    failed=$((failed + 1))
  fi
  results+=("$(printf '%-26s %s  %4ss' "$name" "$status" $(($(date +%s) - started)))")
  if [[ $status == FAIL && ${E2E_FAIL_FAST:-} == 1 ]]; then
    break
  fi
done

echo
echo "=================== e2e summary ($( [[ -n ${E2E_KUBECONFIG:-} ]] && echo cluster || echo sandbox) mode) ==================="
printf '%s\n' "${results[@]}"
echo "${#results[@]} run, $failed failed, $(($(date +%s) - total_started))s in all; logs in $LOG_DIR"
((failed == 0))
