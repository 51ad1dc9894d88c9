#!/usr/bin/env bash
# dynamicStableScale on a 4-replica podinfo (stepWeight 25, maxWeight 75), then an abort at 75%:
# - the primary shrinks with the traffic it has left, one step behind it: its replicas go exactly
#   4 → 3 → 2 while the canary takes 25, 50 and 75%;
# - on every poll the primary's share of the VirtualService is at most what its available pods can
#   serve (share ≤ available / 4): traffic moves to the primary only once it has the pods;
# - after `serin.dev/abort` at 75%: Failed at once, the primary is scaled back to 4, all traffic
#   returns to it, and the canary is scaled to 0 only once it has (never while the primary has less
#   than 100%).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup

FULL=4
scale_podinfo $FULL

log "creating the Canary with dynamicStableScale"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    stepWeight: 25
    maxWeight: 75
    dynamicStableScale: true
    metrics:
$(success_rate_metric)
$(load_test_hooks)
EOF
expect_initialized
expect_eq "primary replicas" $FULL "$(spec_replicas podinfo-primary)"

# available_replicas NAME: a Deployment's status.availableReplicas ("" counts as 0).
available_replicas() {
  local n
  n=$(kget deployment "$1" '.status.availableReplicas')
  echo "${n:-0}"
}

PRIMARY_HISTORY=()
CHECKS=0
# Runs on every poll: the primary's VirtualService share against its available pods (the share is
# read first: available pods only grow while traffic moves toward the primary), the primary's
# replica history, and the canary kept until the primary has all traffic back.
check_traffic_rule() {
  local share available replicas canary
  # The canary's size is read before the share: it goes to 0 only after the share reached 100, so
  # this order cannot see a 0 from after a share from before one tick.
  canary=$(spec_replicas podinfo)
  share=$(vs_weight podinfo-primary)
  available=$(available_replicas podinfo-primary)
  replicas=$(spec_replicas podinfo-primary)
  if ((${#PRIMARY_HISTORY[@]} == 0)) || [[ ${PRIMARY_HISTORY[-1]} != "$replicas" ]]; then
    PRIMARY_HISTORY+=("$replicas")
    log "primary: $replicas replicas ($available available), ${share:-?}% of the traffic"
  fi
  if [[ -n $share ]] && ((share * FULL > available * 100)); then
    fail "the primary has ${share}% of the traffic but only $available of $FULL pods available"
  fi
  if [[ ${ABORTED:-} == yes && -n $share ]] && ((share < 100)); then
    ((canary > 0)) || fail "the canary was scaled to 0 while the primary had only ${share}% of the traffic"
  fi
  CHECKS=$((CHECKS + 1))
  # Ends the release's follow at 75%, where the abort comes.
  [[ ${ABORTED:-} == yes || $WEIGHT != 75 ]]
}

log "releasing podinfo 6.0.1"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
FOLLOW_HOOK=check_traffic_rule
follow_canary podinfo 150 Succeeded Failed Promoting
expect_eq "phase at 75%" Progressing "$PHASE"
expect_sequence weights 0 25 50 75
expect_eq "primary replica history while the canary took 25, 50 and 75%" "4 3 2" "${PRIMARY_HISTORY[*]}"

ABORTED=yes
follow_baseline podinfo
request podinfo abort
follow_canary podinfo 30 Failed Succeeded
expect_eq "phase after the abort" Failed "$PHASE"
expect_sequence weights 75 0
expect_event "Rolling back podinfo.$NS aborted by user"

log "following the traffic back to the primary"
back() {
  check_traffic_rule >/dev/null || true
  [[ $(vs_weight podinfo-primary) == 100 && $(available_replicas podinfo-primary) == "$FULL" ]] &&
    deployment_has_replicas podinfo 0
}
deadline=$((SECONDS + 90))
until back; do
  ((SECONDS < deadline)) || fail "traffic, primary and canary did not settle within 90s (primary history: ${PRIMARY_HISTORY[*]})"
  sleep 0.5
done
FOLLOW_HOOK=""
expect_eq "primary replica history" "4 3 2 4" "${PRIMARY_HISTORY[*]}"
expect_eq "VirtualService canary weight" 0 "$(vs_weight podinfo-canary)"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.0 "$(image_of podinfo-primary)"
expect_eq "version served" 6.0.0 "$(served_version)"
log "traffic rule held on $CHECKS polls"
