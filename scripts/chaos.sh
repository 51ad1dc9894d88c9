#!/usr/bin/env bash
# The reliability campaign (`make chaos`): runs e2e/21-kill-operator.sh with CHAOS_RUNS seeds (each
# a fresh sandbox: a promotion, a rollback, a blue/green switch and paused steps, with CHAOS_KILLS
# kill -9s of the operator in each release), CHAOS_JOBS at a time, and prints one row per run and
# the totals; then the other fault scenarios once each (CHAOS_FAULTS, default all of them: API faults,
# a GitOps loop, a Prometheus outage, a silent gate, the malformed corpus, a failed promotion,
# leader failover, a read-only root filesystem) through e2e/run.sh, with a row per scenario.
#
#   CHAOS_RUNS   runs (default 10)       CHAOS_KILLS  kills per release (default 3)
#   CHAOS_JOBS   runs at a time (4)      CHAOS_SEED   first seed (default 1)
#   CHAOS_FAULTS the other scenarios, by number (default "22 23 24 25 26 27 28 29"; empty: none)
# Every run is bounded: a scenario fails after 300 s per release, and `timeout` stops a run after 25 min.
set -Eeuo pipefail
REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
runs=${CHAOS_RUNS:-10}
kills=${CHAOS_KILLS:-3}
jobs_limit=${CHAOS_JOBS:-4}
first_seed=${CHAOS_SEED:-1}
logs=$(mktemp -d "${TMPDIR:-/tmp}/serin-chaos.XXXXXX")

echo "building the workspace's binaries"
# The whole workspace, as e2e/run.sh builds it, so both share one build.
(cd "$REPO_DIR" && "${CARGO:-cargo}" build -q --workspace --bins)

run_one() {
  local seed=$1
  E2E_SKIP_BUILD=1 E2E_CHAOS_SEED=$seed E2E_CHAOS_KILLS=$kills \
    timeout 1500 "$REPO_DIR/e2e/21-kill-operator.sh" >"$logs/seed-$seed.log" 2>&1
}

started=$(date +%s)
pids=()
for ((seed = first_seed; seed < first_seed + runs; seed++)); do
  while (($(jobs -rp | wc -l) >= jobs_limit)); do
    wait -n || true
  done
  run_one "$seed" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || true; done

printf '\n%-6s %-6s %-10s %-10s %-10s %-10s %s\n' SEED KILLS PROMOTION ROLLBACK BLUE-GREEN STEPS RESULT
total_kills=0 passed=0
for ((seed = first_seed; seed < first_seed + runs; seed++)); do
  log=$logs/seed-$seed.log
  n=$(grep -c 'kill -9 #' "$log" || true)
  total_kills=$((total_kills + n))
  promotion=$(grep -q "ok: final phase of the healthy release = 'Succeeded'" "$log" && echo Succeeded || echo -)
  rollback=$(grep -q "ok: final phase of the faulty release = 'Failed'" "$log" && echo Failed || echo -)
  blue_green=$(grep -q "ok: final phase of the blue/green release = 'Succeeded'" "$log" && echo Succeeded || echo -)
  steps=$(grep -q "ok: final phase of the paused-steps release = 'Succeeded'" "$log" && echo Succeeded || echo -)
  if grep -q 'PASS in' "$log"; then
    result=held
    passed=$((passed + 1))
  else
    result="FAILED: $(grep -m1 -E 'FAIL|fail' "$log" | cut -c1-120) ($log)"
  fi
  printf '%-6s %-6s %-10s %-10s %-10s %-10s %s\n' "$seed" "$n" "$promotion" "$rollback" "$blue_green" "$steps" "$result"
done
echo
if ((runs > 0)); then
  echo "where the kills landed (phase, canary weight, blue/green iteration, step index):"
  grep -h 'kill -9 #' "$logs"/seed-*.log | sed 's/.* of the operator at //' | sort | uniq -c | sort -rn || true
  echo
fi
echo "$passed of $runs runs held; $total_kills kill -9s of the operator in $(($(date +%s) - started))s; logs in $logs"

faults=${CHAOS_FAULTS-22 23 24 25 26 27 28 29}
faults_held=true
if [[ -n $faults ]]; then
  echo
  echo "the other faults, once each: $faults"
  # shellcheck disable=SC2086 # one argument per scenario number
  E2E_SKIP_BUILD=1 E2E_JOBS=$jobs_limit timeout 3600 "$REPO_DIR/e2e/run.sh" $faults >"$logs/faults.log" 2>&1 ||
    faults_held=false
  printf '\n%-32s %-6s %s\n' SCENARIO RESULT TIME
  sed -n '/e2e summary/,$p' "$logs/faults.log" | grep -E '^[0-9]{2}-' | awk '{printf "%-32s %-6s %s\n", $1, $2 == "PASS" ? "held" : "FAILED", $3}'
  tail -n 1 "$logs/faults.log"
fi
((passed == runs)) && $faults_held
