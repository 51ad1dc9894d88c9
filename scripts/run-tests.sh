#!/usr/bin/env bash
# Runs every test of the workspace (doc tests, then unit and integration tests) and ends with one
# line totalling them, so a reader of the log sees at a glance what ran.
set -uo pipefail
cargo="${CARGO:-cargo}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

status=0
"$cargo" test --workspace --doc 2>&1 | tee -a "$log" || status=1
"$cargo" test --workspace --all-targets 2>&1 | tee -a "$log" || status=1

totals=$(awk '/^test result:/ {
    for (i = 1; i <= NF; i++) {
        if ($(i+1) ~ /^passed;?$/) p += $i
        if ($(i+1) ~ /^failed;?$/) f += $i
    }
} END { printf "%d %d", p, f }' "$log")
read -r passed failed <<<"$totals"
echo
echo "tests: ${passed} passed, ${failed} failed"
if [ "$passed" -eq 0 ]; then
  echo "no test ran" >&2
  exit 1
fi
exit "$status"
