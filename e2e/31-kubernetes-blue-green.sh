#!/usr/bin/env bash
# The kubernetes provider (no mesh objects): blue/green by switching the apex Service's selector.
# podinfo and Flagger's load tester are applied exactly as Flagger's docs deploy them; the operator
# runs with --mesh-provider kubernetes and the Canary (Flagger's blue/green tutorial, shorter) names
# no provider. The pre-rollout smoke test is the tutorial's bash task, run by the load tester:
# `curl -sd 'anon' http://podinfo-canary.test:9898/token | grep token` (with the load test started
# as a pre-rollout hook too, so the first check has data). The builtin metrics are
# Flagger's kubernetes-provider queries over podinfo's own http_request_duration_seconds, which
# Prometheus scrapes from the annotated pods. A confirm-promotion gate holds the switch until it is
# opened; then the apex Service selects the canary's pods while the primary is updated, and the
# primary's again once it is ready.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the scenario reads the sandbox's data plane through its mesh proxy"
PODINFO_FIXTURE=$E2E_DIR/fixtures/flagger-podinfo.yaml
LOADTESTER_FIXTURE=$E2E_DIR/fixtures/flagger-loadtester.yaml
OPERATOR_FLAGS=(--mesh-provider kubernetes)
setup

apex_selector() {
  kget service podinfo '.spec.selector.app'
}

log "creating the blue/green Canary (no provider: the operator's --mesh-provider kubernetes)"
CANARY_SERVICE_LINES=("portDiscovery: true")
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    iterations: 3
    metrics:
      - name: request-success-rate
        thresholdRange:
          min: 99
        interval: 30s
      - name: request-duration
        thresholdRange:
          max: 500
        interval: 30s
    webhooks:
      - name: smoke-test
        type: pre-rollout
        url: http://flagger-loadtester.$NS/
        timeout: 15s
        metadata:
          type: bash
          cmd: "curl -sd 'anon' http://podinfo-canary.$NS:9898/token | grep token"
      - name: load-test-start
        type: pre-rollout
        url: http://flagger-loadtester.$NS/
        timeout: 5s
        metadata:
          type: cmd
          cmd: "hey -z 1m -q 10 -c 2 http://podinfo-canary.$NS:9898/"
      - name: load-test
        url: http://flagger-loadtester.$NS/
        timeout: 5s
        metadata:
          type: cmd
          cmd: "hey -z 1m -q 10 -c 2 http://podinfo-canary.$NS:9898/"
      - name: promotion-gate
        type: confirm-promotion
        url: http://flagger-loadtester.$NS/gate/check
EOF
expect_initialized
expect_eq "apex Service selector after initialization" podinfo-primary "$(apex_selector)"
expect_eq "canary Service selector" podinfo "$(kc get service podinfo-canary -o jsonpath='{.spec.selector.app}')"
expect_eq "primary Service selector" podinfo-primary "$(kc get service podinfo-primary -o jsonpath='{.spec.selector.app}')"
expect_eq "apex Service ports (portDiscovery)" "9898 9797 9999" "$(kc get service podinfo -o jsonpath='{.spec.ports[*].port}')"
expect_eq "apex Service GitOps annotation" disabled \
  "$(kc get service podinfo -o jsonpath='{.metadata.annotations.kustomize\.toolkit\.fluxcd\.io/reconcile}')"
mesh_objects=$(kc get virtualservices,destinationrules -o name)
expect_eq "VirtualServices and DestinationRules of the kubernetes provider" "" "$mesh_objects"
expect_eq "version served by the apex Service" 3.1.0 "$(echo "$(served_version)")"

# Sampled at every poll: the apex Service's selector (each change once) and, while it selects the
# canary's pods, the version those requests get.
SELECTORS=()
SERVED_WHILE_SWITCHED=""
sample_apex() {
  local selector
  selector=$(apex_selector)
  if ((${#SELECTORS[@]} == 0)) || [[ ${SELECTORS[-1]} != "$selector" ]]; then
    SELECTORS+=("$selector")
    log "apex Service selects app=$selector (phase $PHASE, iterations ${ITERATIONS:-0})"
  fi
  if [[ $selector == podinfo && -z $SERVED_WHILE_SWITCHED ]]; then
    SERVED_WHILE_SWITCHED=$(served_version)
  fi
  # The switch comes with iteration N+1; a tick moves the selector just before it writes the status,
  # so a sample that sees the switch with N iterations re-reads them.
  if [[ $PHASE == WaitingPromotion && ${ITERATIONS:-0} -le 3 && $selector != podinfo-primary ]]; then
    local now
    now=$(kc get canary podinfo -o jsonpath='{.status.iterations}')
    ((${now:-0} > 3)) || fail "the apex Service selects app=$selector while the promotion gate is closed"
  fi
  return 0
}

log "releasing podinfo 3.1.1"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=stefanprodan/podinfo:3.1.1 >/dev/null
FOLLOW_HOOK=sample_apex
follow_canary podinfo 150 WaitingPromotion Succeeded Failed
expect_eq "phase with the promotion gate closed" WaitingPromotion "$PHASE"
expect_event "Pre-rollout check smoke-test passed"
expect_event "Advance podinfo.$NS canary iteration 3/3"
expect_eq "version served by the apex Service while the gate is closed" 3.1.0 "$(echo "$(served_version)")"
loadtester_post /gate/open "{\"name\":\"podinfo\",\"namespace\":\"$NS\"}"
follow_canary podinfo 150 Succeeded Failed
FOLLOW_HOOK=""
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence phases WaitingPromotion Promoting Finalising Succeeded
expect_eq "apex Service selectors during the release" "podinfo-primary podinfo podinfo-primary" "${SELECTORS[*]}"
expect_eq "version served by the apex Service while it selected the canary" 3.1.1 "$SERVED_WHILE_SWITCHED"
expect_event "Routing all traffic to canary"
expect_event "Routing all traffic to primary"
failed_checks=$(kc get events --field-selector reason=CheckFailed -o name | wc -l)
expect_eq "failed checks (the metrics read podinfo's own histogram)" 0 "$failed_checks"
expect_contains "last metric checks" "request duration" \
  "$(kc get canary podinfo -o jsonpath='{.status.metricChecks[*].message}')"
expect_eq "primary image" stefanprodan/podinfo:3.1.1 "$(image_of podinfo-primary)"
kc rollout status deployment/podinfo-primary --timeout=60s >/dev/null
expect_eq "version served by the apex Service" 3.1.1 "$(echo "$(served_version)")"
wait_for "podinfo scaled to zero after the promotion" 30 deployment_has_replicas podinfo 0
mesh_objects=$(kc get virtualservices,destinationrules -o name)
expect_eq "VirtualServices and DestinationRules after the release" "" "$mesh_objects"

log "a traffic weight on blue/green is refused for the kubernetes provider, in the status and an event"
kc patch canary podinfo --type=merge -p '{"spec":{"analysis":{"stepWeight":10}}}' >/dev/null
refused() {
  kc get canary podinfo -o jsonpath='{.status.message}' | grep -q "spec.analysis.stepWeight: the kubernetes provider splits traffic by pods only"
}
wait_for "the stepWeight refusal in the status" 30 refused
expect_event "spec.analysis.stepWeight: the kubernetes provider splits traffic by pods only"
