#!/usr/bin/env bash
# Blue/green: `iterations` without `match`. The new version is analysed on its own Service while all
# user traffic stays on the primary; then traffic switches to it, the primary is updated and traffic
# comes back to the primary.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup

log "creating the blue/green Canary"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    iterations: 3
    metrics:
$(success_rate_metric)
      - name: request-duration
        thresholdRange:
          max: 500
        interval: 30s
$(load_test_hooks)
EOF
expect_initialized

# During the iterations (before the switch, which comes with iteration N+1) the VirtualService keeps
# every request on the primary.
ITERATIONS_SAMPLED=()
check_on_primary() {
  if [[ $PHASE == Progressing ]] && ((${ITERATIONS:-0} < 3)); then
    local primary canary
    primary=$(vs_weight podinfo-primary)
    canary=$(vs_weight podinfo-canary)
    # The status may already say N+1 while this sample was taken after the switch: re-read it.
    if [[ $primary != 100 || $canary != 0 ]]; then
      local now
      now=$(kc get canary podinfo -o jsonpath='{.status.iterations}')
      ((${now:-0} >= 3)) && return 0
      fail "during iteration ${ITERATIONS:-0} the VirtualService sends $canary% to the canary (primary $primary%)"
    fi
    if ((${#ITERATIONS_SAMPLED[@]} == 0)) || [[ ${ITERATIONS_SAMPLED[-1]} != "${ITERATIONS:-0}" ]]; then
      ITERATIONS_SAMPLED+=("${ITERATIONS:-0}")
    fi
  fi
  return 0
}

log "releasing podinfo 6.0.1 (blue/green)"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
FOLLOW_HOOK=check_on_primary
follow_canary podinfo 150 Succeeded Failed
FOLLOW_HOOK=""
expect_eq "final phase" Succeeded "$PHASE"
expect_eq "iterations seen with all traffic on the primary" "0 1 2" "${ITERATIONS_SAMPLED[*]}"
expect_sequence phases Initialized Progressing Promoting Finalising Succeeded
# As in Flagger, the status weight of an iterations-based release stays 0.
expect_sequence weights 0
events=$(kc get events)
expect_contains "events" "Advance podinfo.$NS canary iteration 3/3" "$events"
expect_contains "events" "Routing all traffic to canary" "$events"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
expect_eq "VirtualService primary weight" 100 "$(vs_weight podinfo-primary)"
kc rollout status deployment/podinfo-primary --timeout=60s >/dev/null
expect_eq "version served by the apex Service" 6.0.1 "$(served_version)"
wait_for "podinfo scaled to zero after the promotion" 30 deployment_has_replicas podinfo 0
