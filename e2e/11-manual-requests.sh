#!/usr/bin/env bash
# Manual requests (README "Manual requests"): abort, retry and promote-full on a steps release
# [setWeight 20, pause {}, setWeight 60] of a 2-replica podinfo, with abortScaleDownDelaySeconds 20:
# - abort at the pause: Failed at once, all traffic on the primary (still 6.0.0), events
#   "Rolling back podinfo.test aborted by user" and "Canary failed!"; the canary keeps its 2
#   replicas for 20 s, then goes to 0 (event "Scaling down ... after the abort scale-down delay");
# - retry: the same revision is released again from the first step (event "Retrying the release");
# - promote-full at the pause: promoted at once, skipping setWeight 60 (the weights never reach
#   60), Succeeded with the primary on 6.0.1.
# Each request's token is recorded in status.handledRequests.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup

ABORT_DELAY=20
scale_podinfo 2

log "creating the Canary with steps and abortScaleDownDelaySeconds $ABORT_DELAY"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    abortScaleDownDelaySeconds: $ABORT_DELAY
    steps:
      - setWeight: 20
      - pause: {}
      - setWeight: 60
    metrics:
$(success_rate_metric)
$(load_test_hooks)
EOF
expect_initialized
expect_eq "primary replicas" 2 "$(spec_replicas podinfo-primary)"

# Ends a follow once the release sits at the pause (step index 1, at 20%).
at_pause() {
  ! [[ $PHASE == Progressing && $STEP == 1 && $WEIGHT == 20 ]]
}
handled() {
  kc get canary podinfo -o jsonpath="{.status.handledRequests.$1}"
}

log "releasing podinfo 6.0.1"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
FOLLOW_HOOK=at_pause
follow_canary podinfo 120 Succeeded Failed WaitingPromotion Promoting
FOLLOW_HOOK=""
expect_sequence phases Initialized Progressing
expect_sequence weights 0 20
expect_eq "canary replicas at the pause" 2 "$(spec_replicas podinfo)"

# ----- abort -------------------------------------------------------------------------------------
follow_baseline podinfo
request podinfo abort
abort_token=$REQUEST_TOKEN
follow_canary podinfo 30 Failed Succeeded
# The operator's own clock: the follow may see Failed seconds late on a starved machine, which would
# shorten the delay measured below.
aborted_at=$(event_time "Rolling back podinfo.$NS aborted by user")
expect_eq "phase after the abort" Failed "$PHASE"
expect_sequence phases Progressing Failed
expect_sequence weights 20 0
expect_eq "handled abort request" "$abort_token" "$(handled abort)"
expect_eq "VirtualService canary weight after the abort" 0 "$(vs_weight podinfo-canary)"
expect_eq "VirtualService primary weight after the abort" 100 "$(vs_weight podinfo-primary)"
expect_eq "primary image after the abort" ghcr.io/stefanprodan/podinfo:6.0.0 "$(image_of podinfo-primary)"
expect_event "Rolling back podinfo.$NS aborted by user"
expect_event "Canary failed! Scaling down podinfo.$NS"

log "the canary keeps its replicas for ${ABORT_DELAY}s after the abort"
kept_until=""
for ((i = 0; i < 2 * ABORT_DELAY + 40; i++)); do
  replicas=$(spec_replicas podinfo)
  if [[ $replicas != 2 ]]; then
    kept_until=$EPOCHSECONDS
    break
  fi
  sleep 0.5
done
[[ -n $kept_until ]] || fail "the canary still has 2 replicas $((2 * ABORT_DELAY + 20))s after the abort"
kept=$((kept_until - aborted_at))
log "canary replicas changed to $replicas ${kept}s after the abort's Event"
((kept >= ABORT_DELAY - 1)) || fail "the canary was scaled down ${kept}s after the abort, before abortScaleDownDelaySeconds ($ABORT_DELAY)"
((kept <= ABORT_DELAY + 15)) || fail "the canary was scaled down ${kept}s after the abort, long after abortScaleDownDelaySeconds ($ABORT_DELAY)"
wait_for "podinfo scaled to zero after the abort delay" 30 deployment_has_replicas podinfo 0
expect_event "Scaling down podinfo.$NS after the abort scale-down delay of ${ABORT_DELAY}s"
expect_eq "phase after the delayed scale-down" Failed "$(kc get canary podinfo -o jsonpath='{.status.phase}')"

# ----- retry -------------------------------------------------------------------------------------
follow_baseline podinfo
request podinfo retry
retry_token=$REQUEST_TOKEN
FOLLOW_HOOK=at_pause
follow_canary podinfo 120 Succeeded WaitingPromotion Promoting
FOLLOW_HOOK=""
expect_sequence phases Failed Progressing
expect_sequence weights 0 20
expect_eq "handled retry request" "$retry_token" "$(handled retry)"
expect_event "Retrying the release of podinfo.$NS"
expect_eq "canary replicas at the pause of the retried release" 2 "$(spec_replicas podinfo)"
expect_eq "VirtualService canary weight at the pause" 20 "$(vs_weight podinfo-canary)"

# ----- promote-full ------------------------------------------------------------------------------
follow_baseline podinfo
request podinfo promote-full
full_token=$REQUEST_TOKEN
follow_canary podinfo 150 Succeeded Failed
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence phases Progressing Promoting Finalising Succeeded
# No setWeight 60: the remaining steps are skipped.
expect_sequence weights 20 0
expect_eq "handled promote-full request" "$full_token" "$(handled promoteFull)"
expect_event "Full promotion requested: skipping the remaining analysis of podinfo.$NS"
expect_no_event "Advance podinfo.$NS canary weight 60"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
expect_eq "primary replicas" 2 "$(spec_replicas podinfo-primary)"
kc rollout status deployment/podinfo-primary --timeout=60s >/dev/null
expect_eq "version served by the apex Service" 6.0.1 "$(served_version)"
wait_for "podinfo scaled to zero after the promotion" 30 deployment_has_replicas podinfo 0
