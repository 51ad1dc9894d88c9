#!/usr/bin/env bash
# Prometheus goes down in the middle of an analysis (its address, the Canary's spec.metricsServer,
# refuses connections): the release holds its weight, each check fails and says why ("Metric query
# failed ... Connection refused", not "no values"), and when Prometheus comes back before the
# threshold the analysis continues to a promotion. Down for a whole release, a healthy version is
# never promoted without evidence: it is rolled back at the threshold.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the loopback receiver stands in for Prometheus"
setup
start_receiver

log "the Canary reads Prometheus through the receiver, which forwards to the sandbox's"
apply_ladder_canary 3 "metricsServer: $RECEIVER_URL/prometheus"
expect_initialized

OUTAGE=before
WEIGHT_IN_OUTAGE=""
# The follow hook: Prometheus goes down once the canary has 20%; it comes
# back once two checks failed (one short of the threshold).
outage() {
  local failed
  case $OUTAGE in
    before)
      if [[ $WEIGHT == 20 ]]; then
        stop_receiver
        OUTAGE=down
      fi
      ;;
    down)
      failed=$(kget canary podinfo '.status.failedChecks')
      if ((${failed:-0} >= 2)); then
        WEIGHT_IN_OUTAGE=$WEIGHT
        restart_receiver
        OUTAGE=over
      fi
      ;;
  esac
  return 0
}

log "releasing podinfo 6.0.1; Prometheus goes down at 20%"
FOLLOW_HOOK=outage
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
follow_canary podinfo 300 Succeeded Failed
FOLLOW_HOOK=""
expect_eq "outage played out" over "$OUTAGE"
expect_eq "weight held while Prometheus was down" 20 "$WEIGHT_IN_OUTAGE"
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence weights 0 20 40 60 0
failed_query=$(event_messages | grep -F "Metric query failed for request-success-rate" | head -n 1 || true)
quote "$failed_query"
expect_contains "the failed check says why" "onnection refused" "$failed_query"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"

log "Prometheus down for the whole release of podinfo 6.0.2 (a healthy version)"
stop_receiver
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.2 >/dev/null
follow_canary podinfo 300 Failed
expect_eq "final phase without evidence" Failed "$PHASE"
expect_eq "primary image (never promoted without evidence)" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
expect_event "Rolling back podinfo.$NS failed checks threshold reached 3"
expect_eq "VirtualService canary weight" 0 "$(vs_weight podinfo-canary)"
