#!/usr/bin/env bash
# Runs every test of the workspace (doc tests, then unit and integration tests) and ends with one
# line totalling them, so a reader of the log sees at a glance what ran.
#
# The test binaries run side by side, TEST_JOBS at a time (default 5): most of their time is spent
# waiting on sandboxes, intervals and leases rather than on the CPU, and `cargo test` would run them
# one after another. Each binary runs in its package's directory, as `cargo test` runs it; its output
# is printed whole when it ends, followed by its time, so outputs never interleave.
set -uo pipefail
cargo="${CARGO:-cargo}"
jobs="${TEST_JOBS:-5}"
if ! [[ $jobs =~ ^[1-9][0-9]*$ ]]; then
  echo "TEST_JOBS must be a positive number, got '$jobs'" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

status=0
"$cargo" test --workspace --doc 2>&1 | tee -a "$work/all.log" || status=1

# Build every test binary, then list them: executable, package directory, label.
if ! "$cargo" test --workspace --all-targets --no-run --message-format=json-render-diagnostics \
  >"$work/artifacts.json"; then
  echo "building the tests failed" >&2
  exit 1
fi
python3 - "$work/artifacts.json" >"$work/binaries" <<'PY'
import json, os, sys

# The binaries that take over a minute each (the times this script prints after each one): they
# start first, so the short ones fill the other slots around them.
LONG_FIRST = ["serin-sandbox/integration", "serin-controller/progressive", "serin-controller/features",
              "serin-operator/leader_election", "serin-cli/images"]
# The binaries that hold many files' tests run more of them at once than libtest's default (one per
# core): those tests mostly wait on sandboxes and loopback servers.
TEST_THREADS = {"serin-sandbox/integration": 6, "serin-metrics/integration": 4}
rows = []
for line in open(sys.argv[1]):
    try:
        message = json.loads(line)
    except ValueError:
        continue
    if message.get("reason") != "compiler-artifact" or not message.get("executable"):
        continue
    if not message["profile"]["test"]:
        continue
    target = message["target"]
    # `path+file:///…/crates/serin-cli#0.1.0`, or `…/apiserver#serin-sandbox-apiserver@0.1.0`.
    location, _, fragment = message["package_id"].partition("#")
    package = fragment.split("@")[0] if "@" in fragment else location.rstrip("/").rsplit("/", 1)[-1]
    kind = target["kind"][0]
    label = f"{package}/{target['name']}" if kind in ("test", "bench") else f"{package} ({kind} {target['name']})"
    rank = LONG_FIRST.index(label) if label in LONG_FIRST else (len(LONG_FIRST) if kind == "test" else len(LONG_FIRST) + 1)
    threads = TEST_THREADS.get(label, 0)
    rows.append((rank, label, message["executable"], os.path.dirname(message["manifest_path"]), threads))
for rank, label, executable, directory, threads in sorted(rows):
    print(f"{executable}\t{directory}\t{label}\t{threads}")
PY

# run_binary N EXECUTABLE DIRECTORY THREADS: runs one test binary (with THREADS tests at a time, or
# libtest's default when 0); its output goes to $work/N.out, and `exit-code seconds` to $work/N.done
# when it ends.
run_binary() {
  local n=$1 executable=$2 directory=$3 threads=$4 started rc args=()
  ((threads == 0)) || args=(--test-threads "$threads")
  started=$(date +%s)
  (cd "$directory" && CARGO="$cargo" CARGO_MANIFEST_DIR="$directory" "$executable" "${args[@]}") >"$work/$n.out" 2>&1
  rc=$?
  echo "$rc $(($(date +%s) - started))" >"$work/$n.done.tmp"
  mv "$work/$n.done.tmp" "$work/$n.done"
}

labels=()
printed=()
# Prints the outputs of the binaries that ended since the last call.
print_finished() {
  local n rc seconds
  for n in "${!labels[@]}"; do
    [[ -e $work/$n.done && -z ${printed[$n]:-} ]] || continue
    printed[n]=1
    read -r rc seconds <"$work/$n.done"
    {
      echo "     Running ${labels[$n]}"
      cat "$work/$n.out"
      echo "     ${labels[$n]}: exit $rc in ${seconds}s"
      echo
    } | tee -a "$work/all.log"
    ((rc == 0)) || status=1
  done
}

n=0
running=0
while IFS=$'\t' read -r executable directory label threads; do
  while ((running >= jobs)); do
    wait -n
    running=$((running - 1))
    print_finished
  done
  labels[n]=$label
  run_binary "$n" "$executable" "$directory" "$threads" &
  running=$((running + 1))
  n=$((n + 1))
done <"$work/binaries"
wait
print_finished

totals=$(awk '/^test result:/ {
    for (i = 1; i <= NF; i++) {
        if ($(i+1) ~ /^passed;?$/) p += $i
        if ($(i+1) ~ /^failed;?$/) f += $i
    }
} END { printf "%d %d", p, f }' "$work/all.log")
read -r passed failed <<<"$totals"
echo
echo "tests: ${passed} passed, ${failed} failed (${n} test binaries, ${jobs} at a time)"
if [ "$passed" -eq 0 ]; then
  echo "no test ran" >&2
  exit 1
fi
exit "$status"
