#!/usr/bin/env bash
# A gate that never answers, against one that answers "closed" (progressDeadlineSeconds 60,
# interval 10s, a confirm-promotion gate on the loopback receiver with timeout 2s):
# - 6.0.1 with the gate silent (the receiver reads the request and never answers): the release
#   waits at its last step in WaitingPromotion, each tick's Event and the status message say the
#   gate gave no answer and how long until the deadline; after 60 s without an answer it is rolled
#   back ("... gave no answer for 60s (spec.progressDeadlineSeconds)"), Failed, all traffic on the
#   primary, which still runs 6.0.0;
# - 6.0.2 with the gate answering 403: it waits in WaitingPromotion past the 60 s deadline (someone
#   is deciding, as with Flagger's gates), then answering 200 promotes it.
# e2e: long
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the operator reaches the loopback receiver on 127.0.0.1"
setup
start_receiver
receiver_answer /promotion-gate silent

log "creating the Canary with a confirm-promotion gate on the receiver (timeout 2s)"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    maxWeight: 40
    stepWeight: 20
    metrics:
$(success_rate_metric)
$(load_test_hooks)
      - name: promotion-gate
        type: confirm-promotion
        url: $RECEIVER_URL/promotion-gate
        timeout: 2s
EOF
expect_initialized

log "releasing podinfo 6.0.1; the promotion gate gives no answer"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
follow_canary podinfo 120 WaitingPromotion Promoting Succeeded Failed
expect_eq "phase at the last step" WaitingPromotion "$PHASE"
expect_sequence weights 0 20 40
waiting_since=$SECONDS
silent_gate_announced() {
  [[ $(event_messages) == *"confirm-promotion gate promotion-gate gave no answer: webhook promotion-gate: POST $RECEIVER_URL/promotion-gate giving up after 1 attempt(s): no answer within 2s"* ]]
}
wait_for "an event saying the gate gave no answer" 30 silent_gate_announced
silence_in_status() {
  [[ $(kc get canary podinfo -o jsonpath='{.status.message}') == *"gave no answer"* &&
    -n $(kc get canary podinfo -o jsonpath='{.status.unansweredGateSince}') ]]
}
wait_for "the status to say the gate gave no answer" 20 silence_in_status
message=$(kc get canary podinfo -o jsonpath='{.status.message}')
quote "$message"
expect_contains "status message while the gate is silent" "the release holds, and is rolled back if the gate stays silent for 60s (spec.progressDeadlineSeconds)" "$message"
expect_eq "VirtualService canary weight while the gate is silent" 40 "$(vs_weight podinfo-canary)"

follow_canary podinfo 120 Failed Promoting Succeeded
expect_eq "final phase with a silent gate" Failed "$PHASE"
held=$((SECONDS - waiting_since))
log "the release held $held s in WaitingPromotion before the rollback"
((held >= 45)) || fail "the rollback came after ${held}s, before the 60 s deadline"
expect_event "Rolling back podinfo.$NS: confirm-promotion gate promotion-gate gave no answer for 60s (spec.progressDeadlineSeconds): webhook promotion-gate"
expect_eq "VirtualService canary weight after the rollback" 0 "$(vs_weight podinfo-canary)"
expect_eq "primary image after the rollback" ghcr.io/stefanprodan/podinfo:6.0.0 "$(image_of podinfo-primary)"
expect_eq "status message after the rollback" "" "$(kc get canary podinfo -o jsonpath='{.status.message}')"
expect_eq "status.unansweredGateSince after the rollback" "" "$(kc get canary podinfo -o jsonpath='{.status.unansweredGateSince}')"
calls=$(receiver_count /promotion-gate)
log "the silent gate was asked $calls times"
((calls >= 4)) || fail "the silent gate was asked only $calls times"

log "releasing podinfo 6.0.2; the gate answers 403 (closed) this time"
receiver_answer /promotion-gate 403
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.2 >/dev/null
follow_canary podinfo 120 WaitingPromotion Promoting Succeeded Failed
expect_eq "phase at the last step" WaitingPromotion "$PHASE"
log "holding 75 s, past the 60 s deadline, while the gate answers closed"
sleep 75
expect_eq "phase after 75 s of a closed gate" WaitingPromotion "$(kc get canary podinfo -o jsonpath='{.status.phase}')"
expect_eq "VirtualService canary weight while closed" 40 "$(vs_weight podinfo-canary)"
rollbacks=$(count_events "gave no answer for 60s")
expect_eq "rollbacks for a silent gate (the first release's only)" 1 "$rollbacks"

follow_baseline podinfo
receiver_answer /promotion-gate 200
follow_canary podinfo 120 Succeeded Failed
expect_eq "final phase once the gate opens" Succeeded "$PHASE"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.2 "$(image_of podinfo-primary)"
