#!/usr/bin/env bash
# Blue/green with Argo Rollouts' pre- and post-promotion analyses, written with the analysis's
# metric blocks. The analysis itself only runs the load (hey on the canary Service and on the apex
# Service, through the mesh); the pre-promotion analysis checks the preview's latency before the
# switch; the post-promotion analysis checks the success rate of live traffic once it is on the new
# version, while the primary still runs the previous one. A release answering half its requests
# with 500 passes the preview's latency check, takes the traffic, fails the post-promotion check at
# the first interval after the switch and hands the traffic straight back: Failed, the previous
# version serving, never promoted. A healthy release passes both and is promoted.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the scenario reads the sandbox's data plane through its mesh proxy"
setup

log "creating the blue/green Canary with pre- and post-promotion analyses"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    iterations: 2
    prePromotionAnalysis:
      metrics:
        - name: request-duration
          thresholdRange:
            max: 500
          interval: 30s
    postPromotionAnalysis:
      iterations: 2
      metrics:
        - name: request-success-rate
          thresholdRange:
            min: 99
          interval: 30s
    webhooks:
      - name: load-canary
        url: http://flagger-loadtester.$NS/
        timeout: 5s
        metadata:
          cmd: "hey -z 1m -q 10 -c 2 http://podinfo-canary.$NS:9898/"
      - name: load-live
        url: http://flagger-loadtester.$NS/
        timeout: 5s
        metadata:
          cmd: "hey -z 1m -q 10 -c 2 http://podinfo.$NS:9898/"
EOF
expect_initialized

log "releasing podinfo 6.0.1, which answers half its requests with 500"
follow_baseline podinfo
release_faulty_podinfo 6.0.1
follow_canary podinfo 180 Failed Succeeded
expect_eq "phase after the failed post-promotion analysis" Failed "$PHASE"
expect_event "Pre-promotion analysis of podinfo.$NS passed 1/1"
expect_event "Routing all traffic to canary"
expect_event "the post-promotion analysis failed after the switch; all traffic returns to podinfo-primary.$NS"
switched=$(event_time "Routing all traffic to canary")
returned=$(event_time "the post-promotion analysis failed after the switch")
log "traffic went to the new version at $(date -d "@$switched" +%T) and came back at $(date -d "@$returned" +%T)"
(((returned - switched) <= $(interval_seconds) + 5)) ||
  fail "traffic came back $((returned - switched))s after the switch, more than one interval ($INTERVAL)"
expect_no_event "Copying podinfo.$NS template spec"
expect_eq "primary image (never promoted)" ghcr.io/stefanprodan/podinfo:6.0.0 "$(image_of podinfo-primary)"
expect_eq "VirtualService primary weight" 100 "$(vs_weight podinfo-primary)"
expect_eq "versions answering 10 requests after the rollback" "10 6.0.0" "$(served_versions 10)"

log "releasing podinfo 6.0.2, healthy"
follow_baseline podinfo
kc patch deployment podinfo --type=strategic -p '{"spec":{"template":{"spec":{"containers":[{"name":"podinfod","image":"ghcr.io/stefanprodan/podinfo:6.0.2","env":[{"name":"ERROR_RATE","value":"0"}]}]}}}}' >/dev/null
follow_canary podinfo 240 Succeeded Failed
expect_eq "phase after the passing analyses" Succeeded "$PHASE"
expect_event "Post-promotion analysis of podinfo.$NS passed 2/2"
order=$(event_messages | grep -E "Pre-promotion analysis|Routing all traffic to canary|Post-promotion analysis|Copying podinfo.$NS template" |
  sed -E 's/ of podinfo\.[a-z0-9-]+//; s/podinfo\.[a-z0-9-]+ template spec to podinfo-primary\.[a-z0-9-]+/template/' | tail -n 5 | tr '\n' '|')
expect_eq "order of the healthy release" \
  "Pre-promotion analysis passed 1/1|Routing all traffic to canary|Post-promotion analysis passed 1/2|Post-promotion analysis passed 2/2|Copying template|" "$order"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.2 "$(image_of podinfo-primary)"
expect_eq "versions answering 10 requests after the promotion" "10 6.0.2" "$(served_versions 10)"
