#!/usr/bin/env bash
# A/B testing: for `iterations` intervals only requests with the cookie canary=always reach the new
# version (a match route in the VirtualService); the load goes through the apex host with the
# cookie. Then the new version is promoted.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup

log "creating the A/B Canary"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    iterations: 3
    match:
      - headers:
          cookie:
            regex: "^(.*?;)?(canary=always)(;.*)?$"
    metrics:
$(success_rate_metric)
      - name: request-duration
        thresholdRange:
          max: 500
        interval: 30s
$(load_test_hooks "-H 'Cookie: canary=always' http://podinfo.$NS:9898/")
EOF
expect_initialized

# While the analysis runs (an iteration started), the first http route of the VirtualService
# matches the cookie and sends everything to the canary; requests without it stay on the primary.
AB_ROUTE_SEEN=""
check_ab_route() {
  if [[ $PHASE == Progressing && ${ITERATIONS:-0} -ge 1 && -z $AB_ROUTE_SEEN ]]; then
    local regex canary fallback with without
    regex=$(kc get virtualservice podinfo -o jsonpath='{.spec.http[0].match[0].headers.cookie.regex}')
    canary=$(vs_weight podinfo-canary 0)
    # As in Flagger, the fallback route has the primary as its only destination (its weight is the
    # primary's share, 0 here; Istio sends all of a route's traffic to a lone destination).
    fallback=$(kc get virtualservice podinfo -o jsonpath='{.spec.http[1].route[*].destination.host}')
    expect_eq "cookie match of the first route" '^(.*?;)?(canary=always)(;.*)?$' "$regex"
    expect_eq "canary weight of the matched route" 100 "$canary"
    expect_eq "destinations of the fallback route" podinfo-primary "$fallback"
    with=$(served_version_with 'Cookie: canary=always')
    without=$(served_version)
    expect_eq "version served with the cookie" 6.0.1 "$with"
    expect_eq "version served without the cookie" 6.0.0 "$without"
    AB_ROUTE_SEEN=yes
  fi
  return 0
}

log "releasing podinfo 6.0.1 to cookie holders"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
FOLLOW_HOOK=check_ab_route
follow_canary podinfo 150 Succeeded Failed
FOLLOW_HOOK=""
expect_eq "final phase" Succeeded "$PHASE"
expect_eq "A/B route checked during the analysis" yes "$AB_ROUTE_SEEN"
expect_sequence phases Initialized Progressing Promoting Finalising Succeeded
# As in Flagger, the status weight of an iterations-based release stays 0.
expect_sequence weights 0
expect_contains "events" "Advance podinfo.$NS canary iteration 3/3" "$(kc get events)"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
kc rollout status deployment/podinfo-primary --timeout=60s >/dev/null
expect_eq "version served without the cookie" 6.0.1 "$(served_version)"
wait_for "podinfo scaled to zero after the promotion" 30 deployment_has_replicas podinfo 0
