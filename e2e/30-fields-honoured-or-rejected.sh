#!/usr/bin/env bash
# Every field the API accepts works through the operator, or is refused with its path:
# - a Canary with fields Serin does not act on (spec.provider linkerd, service.gatewayRefs,
#   analysis.sessionAffinity on an A/B release) is refused: the status and a Warning event (reason InvalidSpec) name
#   each field, and nothing is created;
# - a MetricTemplate of an unsupported provider type holds the release (status and event name the
#   template and spec.provider.type) instead of failing checks; fixing the template lets it go on;
# - the deprecated spelling `canaryAnalysis` drives an A/B release completely: the cookie route is
#   in the VirtualService, the builtin metrics are checked, and 6.0.1 is promoted;
# - spec.metricsServer is the Prometheus the builtin metrics are read from: the operator's own
#   --metrics-server points at a closed port here, so the release passes only through it.
E2E_OPERATOR_METRICS_SERVER=http://127.0.0.1:9
export E2E_OPERATOR_METRICS_SERVER
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup

# canary_yaml [SPEC_LINES [SERVICE_LINES [ANALYSIS_LINES]]]: the A/B Canary, written with
# canaryAnalysis, with extra lines in spec, spec.service and spec.canaryAnalysis.
canary_yaml() {
  cat <<EOF
apiVersion: serin.dev/v1beta1
kind: Canary
metadata:
  name: podinfo
  namespace: $NS
spec:
${1:-}
  metricsServer: $PROMETHEUS_URL
  targetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: podinfo
  progressDeadlineSeconds: 60
  service:
${2:-}
    port: 9898
  canaryAnalysis:
${3:-}
    interval: $INTERVAL
    threshold: 2
    iterations: 3
    match:
      - headers:
          cookie:
            regex: "^(.*?;)?(canary=always)(;.*)?$"
    metrics:
$(success_rate_metric)
      - name: not-found-rate
        templateRef:
          name: not-found-rate
        thresholdRange:
          max: 5
        interval: 30s
$(load_test_hooks "-H 'Cookie: canary=always' http://podinfo.$NS:9898/")
EOF
}

template_yaml() {
  cat <<EOF
apiVersion: serin.dev/v1beta1
kind: MetricTemplate
metadata:
  name: not-found-rate
  namespace: $NS
spec:
  provider:
    type: $1
    address: $PROMETHEUS_URL
  query: |
    100 * sum(rate(istio_requests_total{reporter="destination",
        destination_workload_namespace="{{ namespace }}", destination_workload="{{ target }}",
        response_code="404"}[{{ interval }}])) or on() vector(0)
EOF
}

status_message() {
  kc get canary podinfo -o jsonpath='{.status.message}'
}

message_mentions() {
  [[ $(status_message) == *"$1"* ]]
}

log "applying a Canary with fields Serin does not act on"
canary_yaml "  provider: linkerd" "    gatewayRefs: [{name: public}]" \
  "    sessionAffinity: {cookieName: canary-affinity}" | kc apply -f - >/dev/null
wait_for "the refusal in the Canary's status" 30 message_mentions "spec.provider"
message=$(status_message)
expect_contains "status message" 'spec.provider: "linkerd" is not supported yet' "$message"
expect_contains "status message" "spec.service.gatewayRefs: is not supported yet" "$message"
expect_contains "status message" "spec.canaryAnalysis.sessionAffinity: pins users to the canary while weights move" "$message"
expect_contains "InvalidSpec events" "spec.service.gatewayRefs" \
  "$(kc get events --field-selector reason=InvalidSpec,type=Warning -o jsonpath='{.items[*].message}')"
expect_eq "primary created for a refused Canary" "" \
  "$(kc get deployment podinfo-primary --ignore-not-found -o name)"

log "fixing the Canary; its MetricTemplate names a provider Serin does not query (externalmetrics)"
template_yaml externalmetrics | kc apply -f - >/dev/null
canary_yaml "" | kc apply -f - >/dev/null
wait_for "the template problem in the Canary's status" 30 message_mentions "MetricTemplate not-found-rate.$NS"
message=$(status_message)
expect_contains "status message" "spec.provider.type" "$message"
expect_contains "status message" "write prometheus" "$message"
expect_eq "primary created while the template is invalid" "" \
  "$(kc get deployment podinfo-primary --ignore-not-found -o name)"

log "fixing the MetricTemplate (prometheus): the Canary goes on without being touched"
template_yaml prometheus | kc apply -f - >/dev/null
follow_canary podinfo 90 Initialized Failed
expect_eq "phase after initialization" Initialized "$PHASE"
[[ $(status_message) != *MetricTemplate* ]] ||
  fail "the status still shows the template problem after it was fixed: $(status_message)"
# The operator folds canaryAnalysis into analysis only in memory: it never rewrites the spec a GitOps
# tool applied.
expect_eq "spec.analysis of the stored Canary" "" "$(kc get canary podinfo -o jsonpath='{.spec.analysis}')"

AB_ROUTE_SEEN=""
check_ab_route() {
  if [[ $PHASE == Progressing && ${ITERATIONS:-0} -ge 1 && -z $AB_ROUTE_SEEN ]]; then
    expect_eq "cookie match of the first route" '^(.*?;)?(canary=always)(;.*)?$' \
      "$(kc get virtualservice podinfo -o jsonpath='{.spec.http[0].match[0].headers.cookie.regex}')"
    expect_eq "canary weight of the matched route" 100 "$(vs_weight podinfo-canary 0)"
    expect_eq "version served without the cookie" 6.0.0 "$(served_version)"
    expect_eq "version served with the cookie" 6.0.1 "$(served_version_with 'Cookie: canary=always')"
    AB_ROUTE_SEEN=yes
  fi
  return 0
}

log "releasing podinfo 6.0.1 to cookie holders"
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
FOLLOW_HOOK=check_ab_route
follow_canary podinfo 150 Succeeded Failed
FOLLOW_HOOK=""
expect_eq "final phase" Succeeded "$PHASE"
expect_eq "A/B route checked during the analysis" yes "$AB_ROUTE_SEEN"
expect_eq "failed checks" 0 "$(kc get canary podinfo -o jsonpath='{.status.failedChecks}')"
expect_contains "events" "Advance podinfo.$NS canary iteration 3/3" "$(kc get events)"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
