#!/usr/bin/env bash
# An operator killed while it writes a transition's Event: the sandbox holds each of the operator's
# Event creations for 20 s, the operator is killed with kill -9 while it writes the first Event of
# a release ("New revision detected! Scaling up"), and is started again without the delay. The
# status had not moved yet (a transition's Events are written before the status that commits it),
# the release still ends Succeeded on the ladder 0 20 40 60 0, and that Event and every "Advance"
# are announced exactly once: none lost with the killed operator, none repeated by the new one.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the operator is killed and restarted on the host, and the sandbox's fault rules delay its Events"
if [[ $INSTALL == helm ]]; then
  log "skipped with E2E_INSTALL=helm: the scenario kills the host-run operator"
  exit 77
fi
setup

apply_ladder_canary 2
expect_initialized

NEW_REVISION="New revision detected! Scaling up podinfo.$NS"
logged_from=$(stat -c %s "$WORK/operator.log")
# operator_wrote_first_event: the operator has logged the release's first Event, which it logs
# just before it creates it.
operator_wrote_first_event() {
  tail -c "+$((logged_from + 1))" "$WORK/operator.log" | grep -qF "$NEW_REVISION"
}

log "every Event the operator creates is held 20 s by the sandbox; releasing podinfo 6.0.1"
set_faults '{"userAgent": "serin-operator", "verb": "CREATE", "resource": "events", "latencyMs": 20000}'
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
wait_for "the operator to write the release's first Event" 60 operator_wrote_first_event
phase_at_kill=$(kc get canary podinfo -o jsonpath='{.status.phase}')
kill -KILL "$OPERATOR_PID" 2>/dev/null || true
wait "$OPERATOR_PID" 2>/dev/null || true
log "kill -9 of the operator while it wrote \"$NEW_REVISION\""
expect_eq "phase while the release's first Event was being written" Initialized "$phase_at_kill"

set_faults ''
start_operator
follow_canary podinfo 300 Succeeded Failed
expect_eq "final phase of the release" Succeeded "$PHASE"
expect_sequence weights 0 20 40 60 0
expect_eq "\"$NEW_REVISION\" events (announced once across the kill)" 1 "$(count_events "$NEW_REVISION")"
expect_each_step_once 20 40 60
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
