#!/usr/bin/env bash
# Istio delegation (Flagger's test-delegation): a root VirtualService bound to the ingress gateway
# sends /podinfo to the delegate VirtualService the Canary writes (`service.delegation: true`: no
# hosts, no gateways, destinations with their port). podinfo and the load tester are Flagger's
# published manifests; the load test and the checks go through the ingress gateway (the load tester
# through the mesh, the checks through `kubectl port-forward`).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the sandbox's istio-ingressgateway is reached with kubectl port-forward"
PODINFO_FIXTURE=$E2E_DIR/fixtures/flagger-podinfo.yaml
LOADTESTER_FIXTURE=$E2E_DIR/fixtures/flagger-loadtester.yaml
setup

log "the ingress Gateway and the root VirtualService delegating /podinfo to test/podinfo"
kubectl apply -f "$E2E_DIR/fixtures/istio-gateway.yaml" >/dev/null
kubectl apply -f - >/dev/null <<EOF
apiVersion: networking.istio.io/v1beta1
kind: VirtualService
metadata:
  name: root-vs
  namespace: istio-system
spec:
  gateways: [istio-system/public-gateway]
  hosts: ["*"]
  http:
    - match:
        - uri: {prefix: /podinfo}
      rewrite: {uri: /}
      delegate: {name: podinfo, namespace: $NS}
EOF
root_spec_before=$(kubectl -n istio-system get virtualservice root-vs -o jsonpath='{.spec}')
kubectl -n istio-system rollout status deployment/istio-ingressgateway --timeout=60s >/dev/null
port_forward_gateway istio-ingressgateway

log "creating the Canary: delegation, stepWeight 10 up to 30"
CANARY_SERVICE_LINES=("portDiscovery: true" "delegation: true")
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 5
    stepWeight: 10
    maxWeight: 30
    metrics:
$(success_rate_metric)
$(load_test_hooks "http://istio-ingressgateway.istio-system/podinfo")
EOF
expect_initialized
expect_eq "delegate VirtualService hosts" "" "$(kc get virtualservice podinfo -o jsonpath='{.spec.hosts[*]}')"
expect_eq "delegate VirtualService gateways" "" "$(kc get virtualservice podinfo -o jsonpath='{.spec.gateways[*]}')"
expect_eq "delegate destination ports" "9898 9898" \
  "$(kc get virtualservice podinfo -o jsonpath='{.spec.http[0].route[*].destination.port.number}')"

routed_through_root() { [[ $(gateway_version /podinfo) == 3.1.0 ]]; }
wait_for "/podinfo through the root VirtualService to answer 3.1.0" 30 routed_through_root
expect_eq "a path the root VirtualService does not route" 404 \
  "$(curl -sS --noproxy '*' --max-time 5 -o /dev/null -w '%{http_code}' "$GATEWAY/other")"

# At weight 30, requests to /podinfo through the gateway reach both versions.
sample_split() { gateway_split 30 /podinfo; }
log "releasing podinfo 3.1.1"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=stefanprodan/podinfo:3.1.1 >/dev/null
FOLLOW_HOOK=sample_split
follow_canary podinfo 180 Succeeded Failed
FOLLOW_HOOK=""
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence weights 0 10 20 30 0
expect_contains "versions at weight 30" "3.1.0" "$GATEWAY_SPLIT"
expect_contains "versions at weight 30" "3.1.1" "$GATEWAY_SPLIT"
expect_eq "/podinfo through the root VirtualService after the promotion" 3.1.1 "$(gateway_version /podinfo)"
expect_eq "the root VirtualService, untouched" "$root_spec_before" \
  "$(kubectl -n istio-system get virtualservice root-vs -o jsonpath='{.spec}')"
