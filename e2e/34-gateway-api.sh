#!/usr/bin/env bash
# The Gateway API router: a Gateway of class istio and the Canary's HTTPRoute attached to it
# (provider gatewayapi:v1, service.gatewayRefs). The HTTPRoute exists before the Canary with a rule of
# the user's own (/docs to the load tester), which must survive every write. podinfo and the load
# tester are Flagger's published manifests; the builtin metrics read podinfo's own histogram, as
# Flagger's do for this provider. A release through the Gateway is promoted (weights 0 → 25 → 50 →
# 0, both versions answering through the Gateway at 50), then a release whose canary is sent
# /status/500 through the Gateway is rolled back. Deleting the Canary with revertOnDeletion gives the
# HTTPRoute the user's spec back.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the sandbox's Gateway is reached with kubectl port-forward"
PODINFO_FIXTURE=$E2E_DIR/fixtures/flagger-podinfo.yaml
LOADTESTER_FIXTURE=$E2E_DIR/fixtures/flagger-loadtester.yaml
setup

log "a Gateway of class istio, and the HTTPRoute podinfo with the user's /docs rule"
kubectl apply -f "$E2E_DIR/fixtures/gateway-api-gateway.yaml" >/dev/null
kubectl apply -f - >/dev/null <<EOF
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: podinfo
  namespace: $NS
  # The route's owner hands it to the Canary podinfo (Serin takes over no object it did not make).
  annotations:
    serin.dev/adopt: podinfo
spec:
  parentRefs:
    - name: public-gateway
      namespace: istio-system
  rules:
    - matches:
        - path: {type: PathPrefix, value: /docs}
      filters:
        - type: URLRewrite
          urlRewrite:
            path: {type: ReplacePrefixMatch, replacePrefixMatch: /healthz}
      backendRefs:
        - name: flagger-loadtester
          port: 80
EOF
gateway_programmed() {
  [[ $(kubectl -n istio-system get gateway.gateway.networking.k8s.io public-gateway \
    -o jsonpath='{.status.conditions[?(@.type=="Programmed")].status}') == True ]]
}
wait_for "the Gateway to be programmed" 30 gateway_programmed
kubectl -n istio-system rollout status deployment/public-gateway-istio --timeout=60s >/dev/null
port_forward_gateway public-gateway-istio
docs_answers() { [[ $(curl -s --noproxy '*' --max-time 5 -o /dev/null -w '%{http_code}' "$GATEWAY/docs") == 200 ]]; }
wait_for "the user's /docs rule through the Gateway" 30 docs_answers

log "creating the Canary: provider gatewayapi:v1, stepWeight 25 up to 50"
CANARY_SERVICE_LINES=("gatewayRefs: [{name: public-gateway, namespace: istio-system}]")
apply_canary "provider: gatewayapi:v1" <<EOF
    interval: $INTERVAL
    threshold: 2
    stepWeight: 25
    maxWeight: 50
    metrics:
$(success_rate_metric)
$(load_test_hooks "http://public-gateway-istio.istio-system/")
EOF
expect_initialized
route_weights() {
  kc get httproute podinfo -o jsonpath='{range .spec.rules[*]}{range .backendRefs[*]}{.name}={.weight} {end}{end}'
}
expect_contains "HTTPRoute backends after initialization" "podinfo-primary=100 podinfo-canary=0" "$(route_weights)"
expect_contains "the user's rule kept" "flagger-loadtester=" "$(route_weights)"
accepted=$(kc get httproute podinfo -o jsonpath='{.status.parents[0].conditions[?(@.type=="Accepted")].status}')
expect_eq "HTTPRoute accepted by the Gateway" True "$accepted"
expect_eq "version through the Gateway" 3.1.0 "$(gateway_version /)"

sample_split() { gateway_split 50 /; }
log "releasing podinfo 3.1.1"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=stefanprodan/podinfo:3.1.1 >/dev/null
FOLLOW_HOOK=sample_split
follow_canary podinfo 180 Succeeded Failed
FOLLOW_HOOK=""
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence weights 0 25 50 0
expect_contains "versions through the Gateway at weight 50" "3.1.0" "$GATEWAY_SPLIT"
expect_contains "versions through the Gateway at weight 50" "3.1.1" "$GATEWAY_SPLIT"
expect_eq "version through the Gateway after the promotion" 3.1.1 "$(gateway_version /)"
expect_contains "HTTPRoute backends after the promotion" "podinfo-primary=100 podinfo-canary=0" "$(route_weights)"
expect_contains "the user's rule still there" "flagger-loadtester=" "$(route_weights)"
wait_for "the user's /docs rule still answering" 10 docs_answers

log "releasing podinfo 3.1.2 while the Gateway sends its share of /status/500 to it"
kubectl -n "$NS" patch canary podinfo --type=json -p '[{"op": "add", "path": "/spec/analysis/webhooks/-", "value":
  {"name": "errors-through-gateway", "url": "http://flagger-loadtester.'"$NS"'/", "timeout": "5s",
   "metadata": {"cmd": "hey -z 1m -q 10 -c 2 http://public-gateway-istio.istio-system/status/500"}}}]' >/dev/null
follow_baseline podinfo
kc set image deployment/podinfo podinfod=stefanprodan/podinfo:3.1.2 >/dev/null
follow_canary podinfo 180 Failed Succeeded
expect_eq "final phase" Failed "$PHASE"
expect_event "Rolling back podinfo.$NS failed checks threshold reached 2"
expect_contains "HTTPRoute backends after the rollback" "podinfo-primary=100 podinfo-canary=0" "$(route_weights)"
expect_eq "version through the Gateway after the rollback" 3.1.1 "$(gateway_version /)"
wait_for "the user's /docs rule after the rollback" 10 docs_answers

log "deleting the Canary with revertOnDeletion: the HTTPRoute gets the user's spec back"
kc patch canary podinfo --type=merge -p '{"spec":{"revertOnDeletion":true}}' >/dev/null
has_finalizer() { [[ $(kc get canary podinfo -o jsonpath='{.metadata.finalizers[*]}') == *finalizer.serin.dev* ]]; }
wait_for "the Canary's finalizer" 30 has_finalizer
kc delete canary podinfo --wait=true --timeout=60s >/dev/null
expect_eq "HTTPRoute backends after the Canary is deleted" flagger-loadtester \
  "$(kc get httproute podinfo -o jsonpath='{.spec.rules[*].backendRefs[*].name}')"
wait_for "the user's /docs rule after the Canary is deleted" 10 docs_answers
