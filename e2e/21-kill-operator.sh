#!/usr/bin/env bash
# kill -9 of the operator at seeded random moments of a promotion and of a rollback, restarting it
# each time: each release still ends as it would have without the kills (Succeeded, then Failed), it
# walks the same ladder of weights with no step skipped or repeated (each "Advance" event exactly
# once), no traffic split is left behind and no object is orphaned.
#
#   E2E_CHAOS_SEED   seeds the kill moments (default 1; `make chaos` runs many seeds)
#   E2E_CHAOS_KILLS  kills per release (default 3)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the operator is killed and restarted on the host"
if [[ $INSTALL == helm ]]; then
  log "skipped with E2E_INSTALL=helm: the scenario kills the host-run operator"
  exit 77
fi
setup

SEED=${E2E_CHAOS_SEED:-1}
KILLS=${E2E_CHAOS_KILLS:-3}
RANDOM=$SEED
TOTAL_KILLS=0
log "seed $SEED, $KILLS kills per release"

# The kill moments: the first within two intervals of the release's start, then every 5 to 25 s,
# so they land in every phase of a release (a healthy one takes about six intervals).
NEXT_KILL_AT=0
KILLS_LEFT=0
schedule_kills() {
  KILLS_LEFT=$KILLS
  NEXT_KILL_AT=$((${EPOCHREALTIME/./} / 100000 + 10 + RANDOM % ($(interval_seconds) * 20)))
}

# The follow hook: at each scheduled moment, kill -9 the operator and start it again.
kill_when_due() {
  local now=$((${EPOCHREALTIME/./} / 100000))
  if ((KILLS_LEFT > 0 && now >= NEXT_KILL_AT)); then
    kill -KILL "$OPERATOR_PID" 2>/dev/null || true
    wait "$OPERATOR_PID" 2>/dev/null || true
    TOTAL_KILLS=$((TOTAL_KILLS + 1))
    log "kill -9 #$TOTAL_KILLS of the operator at $PHASE, weight $WEIGHT"
    start_operator
    KILLS_LEFT=$((KILLS_LEFT - 1))
    NEXT_KILL_AT=$((now + 50 + RANDOM % 200))
  fi
  return 0
}

# expect_no_split_or_orphan: all traffic on the primary, the canary scaled to zero, and only the
# objects Serin owns (no leftovers of an interrupted tick).
expect_no_split_or_orphan() {
  expect_eq "VirtualService primary weight" 100 "$(vs_weight podinfo-primary)"
  expect_eq "VirtualService canary weight" 0 "$(vs_weight podinfo-canary)"
  wait_for "podinfo scaled to zero" 30 deployment_has_replicas podinfo 0
  expect_eq "Deployments" "flagger-loadtester podinfo podinfo-primary" \
    "$(kc get deployments -o jsonpath='{.items[*].metadata.name}' | tr ' ' '\n' | sort | xargs)"
  expect_eq "Services" "flagger-loadtester podinfo podinfo-canary podinfo-primary" \
    "$(kc get services -o jsonpath='{.items[*].metadata.name}' | tr ' ' '\n' | sort | xargs)"
  expect_eq "VirtualServices" "podinfo" "$(kc get virtualservices -o jsonpath='{.items[*].metadata.name}')"
  expect_eq "DestinationRules" "podinfo-canary podinfo-primary" \
    "$(kc get destinationrules -o jsonpath='{.items[*].metadata.name}' | tr ' ' '\n' | sort | xargs)"
}

apply_ladder_canary 2
expect_initialized

log "releasing podinfo 6.0.1 while killing the operator $KILLS times"
FOLLOW_HOOK=kill_when_due
schedule_kills
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
follow_canary podinfo 300 Succeeded Failed
expect_eq "final phase of the healthy release" Succeeded "$PHASE"
expect_sequence phases Initialized Progressing Promoting Finalising Succeeded
expect_sequence weights 0 20 40 60 0
expect_each_step_once 20 40 60
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
expect_no_split_or_orphan

log "releasing a faulty podinfo 6.0.2 (ERROR_RATE=0.5) while killing the operator $KILLS times"
schedule_kills
follow_baseline podinfo
release_faulty_podinfo 6.0.2
follow_canary podinfo 300 Failed
expect_eq "final phase of the faulty release" Failed "$PHASE"
expect_sequence phases Succeeded Progressing Failed
expect_eq "primary image after the rollback" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
expect_eq "rollbacks announced" 1 "$(count_events "Rolling back podinfo.$NS failed checks threshold reached 2")"
expect_eq "failed checks announced (each counted once)" 2 "$(count_events "Halt podinfo.$NS advancement success rate")"
expect_no_split_or_orphan
log "$TOTAL_KILLS kills, both releases ended as without them"
