#!/usr/bin/env bash
# Explicit steps with an indefinite pause: 20% of the traffic, then the release holds until it is
# promoted with the serin.dev/promote annotation, then 40% and the promotion.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup

log "creating the Canary with steps"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    steps:
      - setWeight: 20
      - pause: {}
      - setWeight: 40
    metrics:
$(success_rate_metric)
$(load_test_hooks)
EOF
expect_initialized

# Ends the follow once the release sits at the pause (step index 1, at 20%).
at_pause() {
  ! [[ $PHASE == Progressing && $STEP == 1 && $WEIGHT == 20 ]]
}

log "releasing podinfo 6.0.1"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
FOLLOW_HOOK=at_pause
follow_canary podinfo 120 Succeeded Failed WaitingPromotion Promoting
FOLLOW_HOOK=""
expect_eq "phase at the pause" Progressing "$PHASE"
expect_eq "step index at the pause" 1 "$STEP"
expect_sequence phases Initialized Progressing
expect_sequence weights 0 20

log "holding for two intervals at the pause"
sleep "$((2 * $(interval_seconds)))"
expect_eq "phase at the pause" Progressing "$(kc get canary podinfo -o jsonpath='{.status.phase}')"
expect_eq "step index at the pause" 1 "$(kc get canary podinfo -o jsonpath='{.status.currentStepIndex}')"
expect_eq "canary weight at the pause" 20 "$(kc get canary podinfo -o jsonpath='{.status.canaryWeight}')"
expect_eq "VirtualService canary weight at the pause" 20 "$(vs_weight podinfo-canary)"
expect_eq "failed checks at the pause" 0 "$(kc get canary podinfo -o jsonpath='{.status.failedChecks}')"
expect_contains "events" "Paused podinfo.$NS at step 2/3 until promoted" "$(kc get events)"

follow_baseline podinfo
token=$(new_token)
log "promoting past the pause (serin.dev/promote=$token)"
kc annotate canary podinfo "serin.dev/promote=$token" --overwrite >/dev/null
follow_canary podinfo 120 Succeeded Failed
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence weights 20 40 0
expect_sequence phases Progressing Promoting Finalising Succeeded
expect_eq "handled promote request" "$token" "$(kc get canary podinfo -o jsonpath='{.status.handledRequests.promote}')"
expect_contains "events" "Promoted: podinfo.$NS leaves the pause at step 2/3" "$(kc get events)"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
wait_for "podinfo scaled to zero after the promotion" 30 deployment_has_replicas podinfo 0
