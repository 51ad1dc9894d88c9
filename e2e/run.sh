#!/usr/bin/env bash
# Runs e2e scenarios, several at a time, and prints a summary.
#
#   e2e/run.sh                 every scenario (e2e/[0-9][0-9]-*.sh), then 01 and 02 again with
#                              the operator installed by the Helm chart (01-progressive@helm, ...)
#   e2e/run.sh 01 02           the scenarios whose names start with 01 and 02
#   e2e/run.sh 01@helm         scenario 01 with the operator installed by Helm (E2E_INSTALL=helm)
#   e2e/run.sh 05-confirm-promotion e2e/08-steps-pause.sh
#
# In sandbox mode (no E2E_KUBECONFIG) the binaries are built once here, then every scenario starts
# its own sandbox and operator, so scenarios can run side by side: at most E2E_JOBS at a time
# (default 8; the scenarios mostly wait on analysis intervals, and two suites of eight side by side
# have passed on two cores — see e2e/README.md). In cluster mode they share the namespace `test`, so they run
# one at a time whatever E2E_JOBS says.
#
# Each scenario's output goes to $E2E_LOG_DIR/<scenario>.log (default: a new directory under /tmp)
# and is printed whole when the scenario ends, so the outputs of concurrent scenarios never
# interleave. A scenario that exits 77 was skipped (it needs something this mode lacks).
# E2E_FAIL_FAST=1 starts no new scenario after the first failure. Exits non-zero if any failed.
set -Eeuo pipefail

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$E2E_DIR/.." && pwd)

scenarios=() # script paths
installs=()  # how each one installs the operator: host, or helm
if (($# == 0)); then
  for script in "$E2E_DIR"/[0-9][0-9]-*.sh; do
    scenarios+=("$script")
    installs+=(host)
  done
  if [[ -z ${E2E_KUBECONFIG:-} ]]; then
    for script in "$E2E_DIR"/01-*.sh "$E2E_DIR"/02-*.sh; do
      scenarios+=("$script")
      installs+=(helm)
    done
  fi
else
  for name in "$@"; do
    install=host
    if [[ $name == *@helm ]]; then
      install=helm
      name=${name%@helm}
    fi
    name=$(basename "$name" .sh)
    matches=("$E2E_DIR/$name"*.sh)
    if [[ ! -e ${matches[0]} ]]; then
      echo "no scenario matches '$name'; the scenarios are:" >&2
      for script in "$E2E_DIR"/[0-9][0-9]-*.sh; do echo "  $(basename "$script" .sh)" >&2; done
      exit 2
    fi
    for script in "${matches[@]}"; do
      scenarios+=("$script")
      installs+=("$install")
    done
  done
fi

jobs_limit=${E2E_JOBS:-8}
if ! [[ $jobs_limit =~ ^[1-9][0-9]*$ ]]; then
  echo "E2E_JOBS must be a whole number of at least 1, got '$jobs_limit'" >&2
  exit 2
fi
mode=sandbox
if [[ -n ${E2E_KUBECONFIG:-} ]]; then
  mode=cluster
  jobs_limit=1
fi

# kubectl is not a Debian package: scripts/install-tools.sh puts one in target/tools when none is on
# the PATH (an installed one comes first).
export PATH=$PATH:$REPO_DIR/target/tools
command -v kubectl >/dev/null || "$REPO_DIR/scripts/install-tools.sh" >/dev/null || true
missing=()
for tool in kubectl curl python3 gojq; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if [[ $mode == sandbox ]]; then
  command -v prometheus >/dev/null || missing+=(prometheus)
  command -v "${CARGO:-cargo}" >/dev/null || missing+=(cargo)
fi
if ((${#missing[@]} > 0)); then
  echo "e2e needs: ${missing[*]} (Debian: apt-get install ${missing[*]//cargo/})" >&2
  exit 2
fi

if [[ $mode == sandbox && ${E2E_SKIP_BUILD:-} != 1 ]]; then
  echo "building the workspace's binaries (serin, kubectl-serin, serin-operator among them)"
  # The whole workspace, not `-p serin-cli -p serin-operator`: a set of packages resolves its
  # dependencies' features on its own, so building a subset recompiles much of what
  # `cargo test --workspace` built already.
  (cd "$REPO_DIR" && "${CARGO:-cargo}" build -q --workspace --bins)
fi
export E2E_SKIP_BUILD=1

LOG_DIR=${E2E_LOG_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/serin-e2e-logs.XXXXXX")}
mkdir -p "$LOG_DIR"

names=()
for i in "${!scenarios[@]}"; do
  name=$(basename "${scenarios[i]}" .sh)
  [[ ${installs[i]} == helm ]] && name+=@helm
  names+=("$name")
done
if [[ " ${installs[*]} " == *" helm "* && -z ${HELM:-} && ! -x $REPO_DIR/target/tools/helm ]]; then
  "$REPO_DIR/scripts/install-tools.sh" >/dev/null
fi

declare -A pid_index=() # running scenario: pid -> index in scenarios
status=()               # index -> PASS | FAIL | SKIP | (empty: not run)
took=()                 # index -> seconds
started_at=()
failed=0
total_started=$EPOCHSECONDS

# Stops the scenarios still running (each one's own trap stops its sandbox and operator).
stop_running() {
  local pid i
  for pid in "${!pid_index[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for ((i = 0; i < 150 && ${#pid_index[@]} > 0; i++)); do
    for pid in "${!pid_index[@]}"; do
      kill -0 "$pid" 2>/dev/null || unset "pid_index[$pid]"
    done
    sleep 0.2
  done
}
trap 'echo "interrupted: stopping the running scenarios" >&2; stop_running; exit 130' INT
trap 'stop_running; exit 143' TERM

# Records and prints a finished scenario.
finish() {
  local i=$1 rc=$2 name=${names[$1]}
  took[i]=$((EPOCHSECONDS - started_at[i]))
  case $rc in
    0) status[i]=PASS ;;
    77) status[i]=SKIP ;;
    *)
      status[i]=FAIL
      failed=$((failed + 1))
      ;;
  esac
  echo
  echo "=================== $name: ${status[i]} in ${took[i]}s (log $LOG_DIR/$name.log) ==================="
  cat "$LOG_DIR/$name.log"
}

# Waits for one running scenario to end and finishes it.
reap_one() {
  local pid rc=0
  wait -n -p pid "${!pid_index[@]}" || rc=$?
  [[ -n ${pid:-} && -n ${pid_index[$pid]:-} ]] || return 0
  finish "${pid_index[$pid]}" "$rc"
  unset "pid_index[$pid]"
}

# The longest scenarios (a line `# e2e: long` in the script) start first, so the run does not end
# with one of them still going alone; the rest keep their number order.
order=()
for i in "${!scenarios[@]}"; do
  ! grep -qx '# e2e: long' "${scenarios[i]}" || order+=("$i")
done
for i in "${!scenarios[@]}"; do
  grep -qx '# e2e: long' "${scenarios[i]}" || order+=("$i")
done

echo "running ${#scenarios[@]} scenario(s), at most $jobs_limit at a time ($mode mode); logs in $LOG_DIR"
for i in "${order[@]}"; do
  if ((failed > 0)) && [[ ${E2E_FAIL_FAST:-} == 1 ]]; then
    break
  fi
  while ((${#pid_index[@]} >= jobs_limit)); do
    reap_one
  done
  if ((failed > 0)) && [[ ${E2E_FAIL_FAST:-} == 1 ]]; then
    break
  fi
  started_at[i]=$EPOCHSECONDS
  install=${installs[i]/host/}
  E2E_INSTALL=$install SCENARIO=${names[i]} "${scenarios[i]}" >"$LOG_DIR/${names[i]}.log" 2>&1 </dev/null &
  pid_index[$!]=$i
  echo "$(date +%H:%M:%S) started ${names[i]}"
done
while ((${#pid_index[@]} > 0)); do
  reap_one
done

echo
echo "=================== e2e summary ($mode mode, at most $jobs_limit at a time) ==================="
run=0
for i in "${!scenarios[@]}"; do
  [[ -n ${status[i]:-} ]] || continue
  run=$((run + 1))
  printf '%-32s %s  %4ss\n' "${names[i]}" "${status[i]}" "${took[i]}"
done
# The failures come last, where a truncated log still shows them: each one's first failed checks
# (or, when it ended without one, its last lines).
for i in "${!scenarios[@]}"; do
  [[ ${status[i]:-} == FAIL ]] || continue
  echo "failed: ${names[i]} (log $LOG_DIR/${names[i]}.log)"
  { grep -m 3 -F ' FAIL: ' "$LOG_DIR/${names[i]}.log" || tail -n 3 "$LOG_DIR/${names[i]}.log"; } |
    cut -c 1-300 | sed 's/^/  /'
done
echo "$run run, $failed failed, $((EPOCHSECONDS - total_started))s in all; logs in $LOG_DIR"
((failed == 0 && run == ${#scenarios[@]}))
