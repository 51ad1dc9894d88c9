#!/usr/bin/env bash
# The Gateway API router's other strategies, through a Gateway of class istio reached with
# `kubectl port-forward`: an A/B release where only requests with `x-canary: insider` reach the new
# version during the iterations, then a blue/green release where every request stays on the primary
# during the iterations and the switch sends all of it to the new version before the promotion.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the sandbox's Gateway is reached with kubectl port-forward"
PODINFO_FIXTURE=$E2E_DIR/fixtures/flagger-podinfo.yaml
LOADTESTER_FIXTURE=$E2E_DIR/fixtures/flagger-loadtester.yaml
OPERATOR_FLAGS=(--mesh-provider gatewayapi:v1)
setup

log "a Gateway of class istio"
kubectl apply -f "$E2E_DIR/fixtures/gateway-api-gateway.yaml" >/dev/null
kubectl -n istio-system rollout status deployment/public-gateway-istio --timeout=60s >/dev/null
port_forward_gateway public-gateway-istio

log "creating the A/B Canary (no provider: the operator's --mesh-provider gatewayapi:v1)"
CANARY_SERVICE_LINES=("gatewayRefs: [{name: public-gateway, namespace: istio-system}]")
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    iterations: 3
    match:
      - headers:
          x-canary:
            exact: insider
    metrics:
$(success_rate_metric)
$(load_test_hooks "-H x-canary:insider http://public-gateway-istio.istio-system/")
EOF
expect_initialized
gateway_routes() { [[ $(gateway_version /) == 3.1.0 ]]; }
wait_for "podinfo through the Gateway" 30 gateway_routes

# During the iterations, insiders get the new version and everyone else the old one.
AB_SAMPLED=""
sample_ab() {
  if [[ $PHASE == Progressing && ${ITERATIONS:-0} -ge 1 && -z $AB_SAMPLED ]]; then
    AB_SAMPLED="insider=$(gateway_version / 'x-canary: insider') other=$(gateway_version /) other=$(gateway_version /)"
    log "during iteration $ITERATIONS: $AB_SAMPLED"
  fi
  return 0
}
log "releasing podinfo 3.1.1 (A/B by header)"
kc set image deployment/podinfo podinfod=stefanprodan/podinfo:3.1.1 >/dev/null
FOLLOW_HOOK=sample_ab
follow_canary podinfo 180 Succeeded Failed
FOLLOW_HOOK=""
expect_eq "final phase" Succeeded "$PHASE"
expect_eq "versions during the A/B iterations" "insider=3.1.1 other=3.1.0 other=3.1.0" "$AB_SAMPLED"
expect_eq "version through the Gateway after the promotion" 3.1.1 "$(gateway_version /)"

log "switching the Canary to blue/green"
# Blue/green keeps every user on the primary until the switch, so the load test goes to the canary
# Service, as Flagger's blue/green tutorial sends it.
hey="hey -z 1m -q 10 -c 2 http://podinfo-canary.$NS:9898/"
kc patch canary podinfo --type=json -p '[{"op": "remove", "path": "/spec/analysis/match"},
  {"op": "replace", "path": "/spec/analysis/webhooks/0/metadata/cmd", "value": "'"$hey"'"},
  {"op": "replace", "path": "/spec/analysis/webhooks/1/metadata/cmd", "value": "'"$hey"'"}]' >/dev/null
ON_PRIMARY=() SWITCHED=""
sample_blue_green() {
  local version
  version=$(gateway_version /)
  if [[ $PHASE == Progressing && ${ITERATIONS:-0} -ge 1 && ${ITERATIONS:-0} -le 2 ]]; then
    ON_PRIMARY+=("$version")
  fi
  if [[ $version == 3.1.2 && -z $SWITCHED ]]; then
    SWITCHED="phase $PHASE"
    log "the Gateway serves 3.1.2 from $SWITCHED"
  fi
  return 0
}
log "releasing podinfo 3.1.2 (blue/green)"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=stefanprodan/podinfo:3.1.2 >/dev/null
FOLLOW_HOOK=sample_blue_green
follow_canary podinfo 180 Succeeded Failed
FOLLOW_HOOK=""
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence phases Succeeded Progressing Promoting Finalising Succeeded
((${#ON_PRIMARY[@]} > 0)) || fail "no request sampled during the blue/green iterations"
expect_eq "versions during the blue/green iterations" "3.1.1" "$(printf '%s\n' "${ON_PRIMARY[@]}" | sort -u | tr -d '\n')"
[[ -n $SWITCHED ]] || fail "the Gateway never served 3.1.2"
expect_eq "version through the Gateway after the promotion" 3.1.2 "$(gateway_version /)"
expect_event "Routing all traffic to canary"
