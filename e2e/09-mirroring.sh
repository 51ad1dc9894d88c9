#!/usr/bin/env bash
# Traffic mirroring (blue/green with `mirror: true`): during the iterations the primary answers every
# request and half of them are copied to the canary (`mirrorPercentage` 50); then mirroring stops,
# traffic switches to the new version, the primary is updated and traffic comes back to it.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup

log "creating the mirroring Canary"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    iterations: 3
    mirror: true
    mirrorWeight: 50
    metrics:
$(success_rate_metric)
$(load_test_hooks "http://podinfo.$NS:9898/")
EOF
expect_initialized

# While the analysis runs, sample the VirtualService: mirrored to the canary, all weight on the
# primary.
MIRROR_SEEN=""
check_mirror() {
  if [[ $PHASE == Progressing ]] && ((${ITERATIONS:-0} >= 1 && ${ITERATIONS:-0} < 3)); then
    local mirror
    mirror=$(kget virtualservice podinfo '.spec.http[0] | .mirror.host, .mirrorPercentage.value, .route[0].weight')
    if [[ -z $MIRROR_SEEN && $mirror == "podinfo-canary 50 100" ]]; then
      MIRROR_SEEN=$mirror
      log "iteration $ITERATIONS: VirtualService mirrors to podinfo-canary at 50%, primary weight 100"
    fi
  fi
  return 0
}

log "releasing podinfo 6.0.1 (mirrored)"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
FOLLOW_HOOK=check_mirror
follow_canary podinfo 150 Succeeded Failed
FOLLOW_HOOK=""
expect_eq "final phase" Succeeded "$PHASE"
expect_eq "mirror during the iterations (host, percentage, primary weight)" "podinfo-canary 50 100" "$MIRROR_SEEN"
expect_sequence phases Initialized Progressing Promoting Finalising Succeeded
# As in Flagger, the status weight of an iterations-based release stays 0.
expect_sequence weights 0
events=$(kc get events)
expect_contains "events" "Stop traffic mirroring and route all traffic to canary" "$events"
expect_eq "mirror after the release" "" "$(kc get virtualservice podinfo -o jsonpath='{.spec.http[0].mirror.host}')"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
expect_eq "VirtualService primary weight" 100 "$(vs_weight podinfo-primary)"
