#!/usr/bin/env bash
# Leader failover under kill -9: two operators run with --leader-elect (Lease serin-operator in the
# test namespace, lease duration 6s). During a promotion (stepWeight 20 up to 60) the leader is
# killed with kill -9 twice — once at 20%, once at 40% or later — and a fresh standby is started in
# its place each time. Each time the standby takes the Lease within the lease duration (plus the
# retry period) of the kill, the release ends Succeeded on exactly the ladder 0 20 40 60 0, each
# "Advance" event is announced exactly once (no double step), and the Lease changed hands twice.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the scenario starts and kills operator processes on this machine"
setup
stop_process "$OPERATOR_PID" operator
OPERATOR_PID=""

LEASE_SECONDS=6
declare -A ADMIN=() PID=()
# start_replica NAME: an operator with leader election, identity NAME, its own log.
start_replica() {
  OPERATOR_LOG=$WORK/operator-$1.log start_operator --leader-elect \
    --leader-election-namespace "$NS" --leader-election-lease-duration "${LEASE_SECONDS}s" \
    --leader-election-identity "$1"
  ADMIN[$1]=$OPERATOR_ADMIN
  PID[$1]=$OPERATOR_PID
  OPERATOR_PID=""
  CLEANUP_HOOKS+=("kill -KILL ${PID[$1]} 2>/dev/null || true")
}
# leader: the replica whose serin_leader gauge is 1, if any.
leader() {
  local name
  for name in "${!ADMIN[@]}"; do
    if curl -sf --noproxy '*' --max-time 5 "http://${ADMIN[$name]}/metrics" 2>/dev/null |
      grep -qx 'serin_leader 1'; then
      echo "$name"
      return 0
    fi
  done
}

has_leader() { [[ -n $(leader) ]]; }

start_replica a
wait_for "replica a to lead" 30 has_leader
start_replica b
expect_eq "leader after both started" a "$(leader)"

apply_ladder_canary 2
expect_initialized

# The follow hook: kill the leader at 20%, then at 40% or later; measure each takeover.
KILLS=0 KILLED_AT="" GAPS=()
NEXT_REPLICA=c
kill_leader_when_due() {
  local now current
  now=${EPOCHREALTIME/./}
  if [[ -n $KILLED_AT ]]; then
    current=$(leader)
    if [[ -n $current ]]; then
      GAPS+=($(((now - KILLED_AT) / 100000)))
      log "replica $current took the Lease $((GAPS[-1] / 10)).$((GAPS[-1] % 10))s after the kill"
      KILLED_AT=""
    fi
    return 0
  fi
  if [[ $PHASE == Progressing ]] && { ((KILLS == 0 && WEIGHT == 20)) || ((KILLS == 1 && WEIGHT >= 40)); }; then
    current=$(leader)
    [[ -n $current ]] || return 0
    kill -KILL "${PID[$current]}"
    wait "${PID[$current]}" 2>/dev/null || true
    KILLED_AT=$now
    KILLS=$((KILLS + 1))
    log "kill -9 of the leader, replica $current, at $PHASE, weight $WEIGHT"
    unset "ADMIN[$current]" "PID[$current]"
    start_replica "$NEXT_REPLICA"
    NEXT_REPLICA=d
  fi
  return 0
}

transitions_before=$(kc get lease serin-operator -o jsonpath='{.spec.leaseTransitions}')
log "releasing podinfo 6.0.1"
follow_baseline podinfo
FOLLOW_HOOK=kill_leader_when_due
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
follow_canary podinfo 300 Succeeded Failed
FOLLOW_HOOK=""
expect_eq "kills of the leader" 2 "$KILLS"
expect_eq "takeovers measured" 2 "${#GAPS[@]}"
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence phases Initialized Progressing Promoting Finalising Succeeded
expect_sequence weights 0 20 40 60 0
expect_each_step_once 20 40 60
limit=$(((LEASE_SECONDS + 3) * 10))
for gap in "${GAPS[@]}"; do
  ((gap <= limit)) || fail "a takeover took $((gap / 10)).$((gap % 10))s, more than the ${LEASE_SECONDS}s lease plus 3s"
done
log "ok: both takeovers within the ${LEASE_SECONDS}s lease plus 3s ($(printf '%s ' "${GAPS[@]}")tenths of a second)"
expect_eq "Lease transitions during the release" 2 "$(($(kc get lease serin-operator -o jsonpath='{.spec.leaseTransitions}') - transitions_before))"
holder=$(kc get lease serin-operator -o jsonpath='{.spec.holderIdentity}')
# The standby b and the replicas started after the kills may all win a takeover; a killed one may not.
[[ -n ${PID[$holder]:-} ]] || fail "the Lease is held by $holder, a replica killed during the release"
# Read over HTTP from each replica: on a loaded machine one answer may be late, so look a few times.
leader_is() { [[ $(leader) == "$1" ]]; }
wait_for "the replica acting (serin_leader 1) to be the Lease holder $holder" 15 leader_is "$holder"
log "ok: the replica acting (serin_leader 1) is the Lease holder $holder"
expect_eq "VirtualService canary weight" 0 "$(vs_weight podinfo-canary)"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
