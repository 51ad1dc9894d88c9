#!/usr/bin/env bash
# setCanaryScale and a timed pause, on a 4-replica podinfo. Steps:
#   0 setCanaryScale {replicas: 1}   1 setWeight 20   2 pause {duration: 15s}
#   3 setCanaryScale {weight: 50}    4 setWeight 40   5 setWeight 60
#   6 setCanaryScale {matchTrafficWeight: true}        7 setWeight 80
# - the canary Deployment's replicas when traffic reaches each weight: 20% → 1 (replicas: 1), 40% → 2
#   (weight 50 of 4), 60% → 3 and 80% → 4 (matchTrafficWeight: ceil(4 × weight / 100)); the primary
#   keeps 4;
# - the canary is never larger than the setCanaryScale in effect: its replica history is exactly
#   0 1 2 3 4 0 (step 0 sizes it before any traffic reaches it, as Argo Rollouts does);
# - the pause holds the release at step 2 for at least its 15 s (one interval tick inside it) and
#   ends by itself, without a promote (event "Step 3/8 completed (pause: 15s)");
# - the weights go exactly 0 20 40 60 80 0 and the release is promoted.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup

PAUSE=15
scale_podinfo 4

log "creating the Canary with setCanaryScale steps and a ${PAUSE}s pause"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    steps:
      - setCanaryScale:
          replicas: 1
      - setWeight: 20
      - pause:
          duration: ${PAUSE}s
      - setCanaryScale:
          weight: 50
      - setWeight: 40
      - setWeight: 60
      - setCanaryScale:
          matchTrafficWeight: true
      - setWeight: 80
    metrics:
$(success_rate_metric)
$(load_test_hooks)
EOF
expect_initialized
wait_for "podinfo scaled to zero after initialization" 30 deployment_has_replicas podinfo 0
expect_eq "primary replicas" 4 "$(spec_replicas podinfo-primary)"

# Every poll records the canary's and the primary's spec.replicas at the first poll that shows each
# status weight (AT_WEIGHT[w] = "canary primary"; the tick that moved the weight had already
# scaled the canary, and the next tick is an interval away), the canary's replica history (each
# change once) in CANARY_REPLICAS, and the primary's replica counts seen in PRIMARY_SEEN.
declare -A AT_WEIGHT=()
PRIMARY_SEEN=()
CANARY_REPLICAS=()
sample_scale() {
  local canary primary
  canary=$(spec_replicas podinfo)
  primary=$(spec_replicas podinfo-primary)
  [[ -n ${AT_WEIGHT[$WEIGHT]:-} ]] || AT_WEIGHT[$WEIGHT]="$canary $primary"
  [[ " ${PRIMARY_SEEN[*]} " == *" $primary "* ]] || PRIMARY_SEEN+=("$primary")
  if ((${#CANARY_REPLICAS[@]} == 0)) || [[ ${CANARY_REPLICAS[-1]} != "$canary" ]]; then
    CANARY_REPLICAS+=("$canary")
    log "canary Deployment: $canary replicas (status: $PHASE, weight $WEIGHT, step ${STEP:--})"
  fi
  return 0
}


log "releasing podinfo 6.0.1"
CANARY_REPLICAS=("$(spec_replicas podinfo)")
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
FOLLOW_HOOK=sample_scale
follow_canary podinfo 240 Succeeded Failed
FOLLOW_HOOK=""
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence phases Initialized Progressing Promoting Finalising Succeeded
expect_sequence weights 0 20 40 60 80 0

expect_eq "canary and primary replicas when traffic reached 20% (setCanaryScale replicas: 1)" "1 4" "${AT_WEIGHT[20]:-}"
expect_eq "canary and primary replicas when traffic reached 40% (setCanaryScale weight: 50)" "2 4" "${AT_WEIGHT[40]:-}"
expect_eq "canary and primary replicas when traffic reached 60% (matchTrafficWeight)" "3 4" "${AT_WEIGHT[60]:-}"
expect_eq "canary and primary replicas when traffic reached 80% (matchTrafficWeight)" "4 4" "${AT_WEIGHT[80]:-}"
expect_eq "primary replica counts seen during the release" 4 "${PRIMARY_SEEN[*]}"

# Timed by the operator's Events, not by when a poll happened to see the step; each time is cut to
# the whole second, so the difference may read a second short.
held=$(($(event_time "Step 3/8 completed (pause: ${PAUSE}s)") - $(event_time "Paused podinfo.$NS at step 3/8 for ${PAUSE}s")))
log "the pause held the release for ${held}s (from its Paused event to its Step 3/8 completed event)"
((held >= PAUSE - 1)) || fail "the ${PAUSE}s pause ended after ${held}s"
((held <= PAUSE + $(interval_seconds) + 5)) || fail "the ${PAUSE}s pause ended only after ${held}s (it ends on the first tick after its duration)"
expect_eq "promote requests handled" "" "$(kc get canary podinfo -o jsonpath='{.status.handledRequests.promote}')"

expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
expect_eq "primary replicas after the promotion" 4 "$(spec_replicas podinfo-primary)"
wait_for "podinfo scaled to zero after the promotion" 30 deployment_has_replicas podinfo 0
CANARY_REPLICAS+=(0)
# Last, so that the per-step checks above are reported whatever this finds.
expect_eq "canary replica history (each change once)" "0 1 2 3 4 0" "$(tr ' ' '\n' <<<"${CANARY_REPLICAS[*]}" | uniq | tr '\n' ' ' | sed 's/ $//')"
