#!/usr/bin/env bash
# kill -9 of the operator at seeded random moments of four releases — a promotion (stepWeight 20 up
# to 60), a rollback (half the requests failing), a blue/green switch (3 iterations) and explicit
# steps with a timed pause (20%, pause 20s, 40%) — restarting it each time: each release still ends
# as it would have without the kills (Succeeded, Failed, Succeeded, Succeeded), it walks the same
# ladder with no step skipped or repeated (each "Advance", iteration, pause and switch announced
# exactly once), no traffic split is left behind and no object is orphaned.
#
#   E2E_CHAOS_SEED   seeds the kill moments (default 1; `make chaos` runs many seeds)
#   E2E_CHAOS_KILLS  kills per release (default 3)
# e2e: long
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
    log "kill -9 #$TOTAL_KILLS of the operator at $PHASE, weight $WEIGHT, iteration $ITERATIONS, step ${STEP:--}"
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
# announcements_before MESSAGE...: takes how many times each MESSAGE was announced so far;
# expect_announced_during_release MESSAGE...: each was announced exactly once since then.
declare -A ANNOUNCED_BEFORE=()
announcements_before() {
  local message
  for message in "$@"; do ANNOUNCED_BEFORE[$message]=$(announced "$message"); done
}
expect_announced_during_release() {
  local message
  for message in "$@"; do
    expect_eq "\"$message\" announced during this release (no step skipped or repeated)" 1 \
      "$(($(announced "$message") - ${ANNOUNCED_BEFORE[$message]:-0}))"
  done
}

log "blue/green: 3 iterations with no traffic on the canary, then the switch"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    iterations: 3
    metrics:
$(success_rate_metric)
$(load_test_hooks)
EOF
BLUE_GREEN=("Advance podinfo.$NS canary iteration 1/3" "Advance podinfo.$NS canary iteration 2/3"
  "Advance podinfo.$NS canary iteration 3/3" "Routing all traffic to canary")
announcements_before "${BLUE_GREEN[@]}"
log "releasing podinfo 6.0.3 (blue/green) while killing the operator $KILLS times"
schedule_kills
follow_baseline podinfo
# One change of the template: the new image, without the faulty release's ERROR_RATE.
kc patch deployment podinfo --type=json -p '[
  {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "ghcr.io/stefanprodan/podinfo:6.0.3"},
  {"op": "remove", "path": "/spec/template/spec/containers/0/env"}]' >/dev/null
# Failed is where the follow starts (the faulty release), so only Succeeded ends it.
follow_canary podinfo 300 Succeeded
expect_eq "final phase of the blue/green release" Succeeded "$PHASE"
expect_sequence phases Failed Progressing Promoting Finalising Succeeded
expect_announced_during_release "${BLUE_GREEN[@]}"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.3 "$(image_of podinfo-primary)"
expect_no_split_or_orphan

log "steps with a timed pause: 20%, a 20 s pause, 40%"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    steps:
      - setWeight: 20
      - pause: {duration: 20s}
      - setWeight: 40
    metrics:
$(success_rate_metric)
$(load_test_hooks)
EOF
STEPS=("Advance podinfo.$NS canary weight 20" "Paused podinfo.$NS at step 2/3 for 20s"
  "Advance podinfo.$NS canary weight 40")
announcements_before "${STEPS[@]}"
log "releasing podinfo 6.0.4 (steps with a pause) while killing the operator $KILLS times"
schedule_kills
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.4 >/dev/null
follow_canary podinfo 300 Succeeded Failed
expect_eq "final phase of the paused-steps release" Succeeded "$PHASE"
expect_sequence phases Succeeded Progressing Promoting Finalising Succeeded
expect_sequence weights 0 20 40 0
expect_announced_during_release "${STEPS[@]}"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.4 "$(image_of podinfo-primary)"
expect_no_split_or_orphan
log "$TOTAL_KILLS kills, all four releases ended as without them"
