#!/usr/bin/env bash
# confirm-promotion gate: the release reaches its last step and waits in WaitingPromotion while the
# load tester's gate is closed; opening the gate lets it be promoted.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup

log "creating the Canary with a confirm-promotion gate"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    maxWeight: 20
    stepWeight: 10
    metrics:
$(success_rate_metric)
$(load_test_hooks)
      - name: promotion-gate
        type: confirm-promotion
        url: http://flagger-loadtester.$NS/gate/check
EOF
expect_initialized

log "releasing podinfo 6.0.1; the promotion gate is closed"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
follow_canary podinfo 120 WaitingPromotion Promoting Succeeded Failed
expect_eq "phase at the last step" WaitingPromotion "$PHASE"
expect_sequence phases Initialized Progressing WaitingPromotion
expect_sequence weights 0 10 20

log "holding for two intervals while the gate stays closed"
sleep "$((2 * $(interval_seconds)))"
expect_eq "phase while the gate is closed" WaitingPromotion "$(kc get canary podinfo -o jsonpath='{.status.phase}')"
expect_eq "canary weight while waiting" 20 "$(kc get canary podinfo -o jsonpath='{.status.canaryWeight}')"
expect_eq "VirtualService canary weight while waiting" 20 "$(vs_weight podinfo-canary)"
expect_eq "primary image while waiting" ghcr.io/stefanprodan/podinfo:6.0.0 "$(image_of podinfo-primary)"
expect_contains "events" "Halt podinfo.$NS advancement waiting for promotion approval promotion-gate" "$(kc get events)"

follow_baseline podinfo
loadtester_post /gate/open "{\"name\":\"podinfo\",\"namespace\":\"$NS\"}"
follow_canary podinfo 120 Succeeded Failed
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence phases WaitingPromotion Promoting Finalising Succeeded
expect_sequence weights 20 0
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
expect_contains "events" "Confirm-promotion check promotion-gate passed" "$(kc get events)"
wait_for "podinfo scaled to zero after the promotion" 30 deployment_has_replicas podinfo 0
