#!/usr/bin/env bash
# Blue/green with Argo Rollouts' promotion controls, on a 2-replica podinfo:
# - release 6.0.1 with autoPromotionEnabled: false, previewReplicaCount: 1 and
#   scaleDownDelaySeconds: 25. The preview (canary) runs 1 replica through the iterations and waits
#   in WaitingPromotion (event "Halt ... waiting for a manual promote") for two intervals with every
#   request on the primary (6.0.0). A serin.dev/promote request releases it: the preview is scaled
#   to 2 replicas before any traffic reaches it, all traffic goes to it (VirtualService 0/100),
#   then the primary is updated and traffic returns to it (canary weight history 0 100 0). The
#   canary keeps its 2 replicas for 25 s of Finalising, then Succeeded and 0 replicas;
# - release 6.0.2 with autoPromotionSeconds: 15 (autoPromotionEnabled and previewReplicaCount
#   removed): no WaitingPromotion; traffic switches to the new pods by itself at least 15 s after the
#   last iteration, and 6.0.2 is promoted.
# e2e: long
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup

SCALE_DOWN_DELAY=25
AUTO_PROMOTION=15
scale_podinfo 2

log "creating the blue/green Canary (autoPromotionEnabled false, previewReplicaCount 1, scaleDownDelaySeconds $SCALE_DOWN_DELAY)"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    iterations: 2
    autoPromotionEnabled: false
    previewReplicaCount: 1
    scaleDownDelaySeconds: $SCALE_DOWN_DELAY
    metrics:
$(success_rate_metric)
$(load_test_hooks)
EOF
expect_initialized
expect_eq "primary replicas" 2 "$(spec_replicas podinfo-primary)"

# Every poll: the VirtualService's canary weight history (each change once), the canary's largest
# replica count before the promote request, and the start and end of Finalising.
VS_CANARY=()
PREVIEW_MAX=0
PROMOTE_SENT=""
FINALISING_SINCE=""
FINALISING_CANARY=()
CANARY_ZERO_AT=""
ITERATION_DONE_AT=""
SWITCHED_AT=""
sample_blue_green() {
  local vs replicas
  vs=$(vs_weight podinfo-canary)
  if ((${#VS_CANARY[@]} == 0)) || [[ ${VS_CANARY[-1]} != "$vs" ]]; then
    VS_CANARY+=("$vs")
  fi
  [[ $vs == 100 && -z $SWITCHED_AT ]] && SWITCHED_AT=$EPOCHSECONDS
  [[ ${ITERATIONS:-0} -ge 2 && -z $ITERATION_DONE_AT ]] && ITERATION_DONE_AT=$EPOCHSECONDS
  replicas=$(spec_replicas podinfo)
  if [[ -z $PROMOTE_SENT ]] && ((replicas > PREVIEW_MAX)); then
    PREVIEW_MAX=$replicas
  fi
  # From Finalising on: the canary's replica history, and when it reached 0. (The scale-down
  # comes just before the status write that says Succeeded, so a poll may see 0 in Finalising.)
  if [[ $PHASE == Finalising || ($PHASE == Succeeded && -n $FINALISING_SINCE) ]]; then
    [[ -n $FINALISING_SINCE ]] || FINALISING_SINCE=$EPOCHSECONDS
    if ((${#FINALISING_CANARY[@]} == 0)) || [[ ${FINALISING_CANARY[-1]} != "$replicas" ]]; then
      FINALISING_CANARY+=("$replicas")
    fi
    [[ $replicas != 0 || -n $CANARY_ZERO_AT ]] || CANARY_ZERO_AT=$EPOCHSECONDS
  fi
  return 0
}

log "releasing podinfo 6.0.1 (blue/green, manual promotion)"
VS_CANARY=("$(vs_weight podinfo-canary)")
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
FOLLOW_HOOK=sample_blue_green
follow_canary podinfo 150 WaitingPromotion Promoting Succeeded Failed
expect_eq "phase after the iterations" WaitingPromotion "$PHASE"
expect_sequence phases Initialized Progressing WaitingPromotion
expect_sequence weights 0
expect_eq "iterations done" 2 "$ITERATIONS"
expect_event "Halt podinfo.$NS advancement waiting for a manual promote"

log "holding for two intervals: no promotion without a promote request"
sleep "$((2 * $(interval_seconds)))"
expect_eq "phase while waiting" WaitingPromotion "$(kc get canary podinfo -o jsonpath='{.status.phase}')"
expect_eq "preview (canary) replicas while waiting" 1 "$(spec_replicas podinfo)"
expect_eq "largest canary replica count before the promote" 1 "$PREVIEW_MAX"
expect_eq "primary replicas while waiting" 2 "$(spec_replicas podinfo-primary)"
expect_eq "VirtualService primary weight while waiting" 100 "$(vs_weight podinfo-primary)"
expect_eq "VirtualService canary weight while waiting" 0 "$(vs_weight podinfo-canary)"
expect_eq "primary image while waiting" ghcr.io/stefanprodan/podinfo:6.0.0 "$(image_of podinfo-primary)"
expect_eq "version served while waiting" 6.0.0 "$(served_version)"

follow_baseline podinfo
request podinfo promote
PROMOTE_SENT=yes
follow_canary podinfo 240 Succeeded Failed
FOLLOW_HOOK=""
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence phases WaitingPromotion Promoting Finalising Succeeded
expect_sequence weights 0
expect_eq "handled promote request" "$REQUEST_TOKEN" "$(kc get canary podinfo -o jsonpath='{.status.handledRequests.promote}')"
expect_event "Promotion of podinfo.$NS approved manually"
expect_event "Scaling podinfo.$NS to 2 replicas before routing"
expect_event "Routing all traffic to canary"
expect_eq "VirtualService canary weights over the release" "0 100 0" "${VS_CANARY[*]}"
wait_for "podinfo scaled to zero after the scale-down delay" 30 deployment_has_replicas podinfo 0
[[ -n $CANARY_ZERO_AT ]] || CANARY_ZERO_AT=$EPOCHSECONDS
FINALISING_CANARY+=(0)
expect_eq "canary replicas from Finalising on (each change once)" "2 0" "$(tr ' ' '\n' <<<"${FINALISING_CANARY[*]}" | uniq | tr '\n' ' ' | sed 's/ $//')"
kept=$((CANARY_ZERO_AT - FINALISING_SINCE))
log "the canary kept its replicas for ${kept}s after traffic returned to the primary"
((kept >= SCALE_DOWN_DELAY - 1)) || fail "the canary was scaled down ${kept}s after Finalising began, before scaleDownDelaySeconds ($SCALE_DOWN_DELAY)"
((kept <= SCALE_DOWN_DELAY + $(interval_seconds) + 5)) || fail "the canary was scaled down only ${kept}s after Finalising began (scaleDownDelaySeconds $SCALE_DOWN_DELAY)"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"

# ----- release 6.0.2: autoPromotionSeconds -------------------------------------------------------
log "autoPromotionSeconds $AUTO_PROMOTION instead of the manual promotion"
kc patch canary podinfo --type=merge -p "{\"spec\":{\"analysis\":{\"autoPromotionEnabled\":null,\"previewReplicaCount\":null,\"scaleDownDelaySeconds\":null,\"autoPromotionSeconds\":$AUTO_PROMOTION}}}" >/dev/null
VS_CANARY=("$(vs_weight podinfo-canary)")
ITERATION_DONE_AT=""
SWITCHED_AT=""
PROMOTE_SENT=""
PREVIEW_MAX=0
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.2 >/dev/null
FOLLOW_HOOK=sample_blue_green
follow_canary podinfo 240 Succeeded Failed
FOLLOW_HOOK=""
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence phases Succeeded Progressing Promoting Finalising Succeeded
expect_eq "VirtualService canary weights over the release" "0 100 0" "${VS_CANARY[*]}"
expect_eq "canary replicas (no preview count)" 2 "$PREVIEW_MAX"
[[ -n $ITERATION_DONE_AT && -n $SWITCHED_AT ]] || fail "the last iteration or the switch was not seen"
waited=$((SWITCHED_AT - ITERATION_DONE_AT))
log "traffic switched ${waited}s after the last iteration"
((waited >= AUTO_PROMOTION - 1)) || fail "traffic switched ${waited}s after the last iteration, before autoPromotionSeconds ($AUTO_PROMOTION)"
((waited <= AUTO_PROMOTION + $(interval_seconds) + 5)) || fail "traffic switched only ${waited}s after the last iteration (autoPromotionSeconds $AUTO_PROMOTION)"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.2 "$(image_of podinfo-primary)"
kc rollout status deployment/podinfo-primary --timeout=60s >/dev/null
expect_eq "version served by the apex Service" 6.0.2 "$(served_version)"
wait_for "podinfo scaled to zero after the promotion" 30 deployment_has_replicas podinfo 0
