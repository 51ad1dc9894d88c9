# The body of the managed-routes scenarios (42 on Istio, 43 on the Gateway API), sourced after
# lib.sh with ROUTER set to istio or gatewayapi:v1. The steps are setWeight 10, setHeaderRoute
# (x-tester: yes to the canary), setMirrorRoute (requests with x-copy: yes copied to the canary),
# then an indefinite pause. During the pause every request with the tester header reaches the new
# version, requests without it keep the 90/10 split, and each request with the copy header reaches
# the canary once more as a copy. A promotion removes both routes with the weights.

if [[ $ROUTER == istio ]]; then
  # version_with [HEADER]: the version answering one request to the apex Service, through the mesh.
  version_with() { served_version_with "${1:-}"; }
  routes_named() { kc get virtualservice podinfo -o jsonpath='{range .spec.http[*]}{.name}{" "}{end}' | xargs; }
  MANAGED_ROUTES="testers copies"
else
  log "a Gateway of class istio, reached through kubectl port-forward"
  kubectl apply -f "$E2E_DIR/fixtures/gateway-api-gateway.yaml" >/dev/null
  gateway_programmed() {
    [[ $(kubectl -n istio-system get gateway.gateway.networking.k8s.io public-gateway \
      -o jsonpath='{.status.conditions[?(@.type=="Programmed")].status}') == True ]]
  }
  wait_for "the Gateway to be programmed" 30 gateway_programmed
  kubectl -n istio-system rollout status deployment/public-gateway-istio --timeout=60s >/dev/null
  port_forward_gateway public-gateway-istio
  CANARY_SERVICE_LINES=("gatewayRefs: [{name: public-gateway, namespace: istio-system}]")
  version_with() { gateway_version / "${1:-}"; }
  # The header rule's single backend, or the mirror filter, names each managed rule.
  routes_named() {
    kc get httproute podinfo -o jsonpath='{range .spec.rules[*]}{.matches[0].headers[0].name}{" "}{end}' | xargs
  }
  MANAGED_ROUTES="x-tester x-copy"
fi

log "creating the Canary ($ROUTER): setWeight 10, a header route, a mirror route, a pause"
apply_canary "provider: $ROUTER" <<EOF
    interval: $INTERVAL
    threshold: 2
    managedRoutes:
      - name: testers
      - name: copies
    steps:
      - setWeight: 10
      - setHeaderRoute:
          name: testers
          match:
            - headerName: x-tester
              headerValue:
                exact: "yes"
      - setMirrorRoute:
          name: copies
          percentage: 100
          match:
            - headers:
                x-copy:
                  exact: "yes"
      - pause: {}
EOF
expect_initialized

at_pause() {
  [[ $(kc get canary podinfo -o jsonpath='{.status.phase} {.status.currentStepIndex}') == "Progressing 3" ]]
}
log "releasing podinfo 6.0.1"
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
wait_for "the release to reach the pause after the route steps" 90 at_pause
expect_eq "managed routes before the weighted one" "$MANAGED_ROUTES" "$(routes_named)"

# canary_requests: how many requests the canary's pods have served (answers and copies), by the
# mesh's telemetry in the sandbox's Prometheus.
canary_requests() {
  curl -sf --noproxy '*' --max-time 5 -G "$PROMETHEUS_URL/api/v1/query" --data-urlencode \
    "query=sum(istio_requests_total{reporter=\"destination\",destination_workload_namespace=\"$NS\",destination_workload=\"podinfo\"})" |
    python3 -c 'import json, sys; r = json.load(sys.stdin)["data"]["result"]; print(int(float(r[0]["value"][1])) if r else 0)'
}
log "20 requests with x-copy: yes (answered by the 90/10 split, each copied to the canary)"
answered=""
for ((i = 0; i < 20; i++)); do answered+="$(version_with 'x-copy: yes') "; done
log "answered by: $(tr ' ' '\n' <<<"$answered" | sort | uniq -c | tr -s ' \n' ' ')"
copies_counted() { (($(canary_requests) >= 20)); }
wait_for "the canary to have served the 20 copies (the mesh's telemetry)" 30 copies_counted
log "the canary has served $(canary_requests) requests"

testers=""
for ((i = 0; i < 20; i++)); do testers+="$(version_with 'x-tester: yes') "; done
expect_eq "20 requests with x-tester: yes" "20 6.0.1" "$(tr ' ' '\n' <<<"$testers" | grep . | sort | uniq -c | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')"
others=""
for ((i = 0; i < 20; i++)); do others+="$(version_with) "; done
log "20 requests without the header: $(tr ' ' '\n' <<<"$others" | grep . | sort | uniq -c | tr -s ' \n' ' ')"
[[ $others == *6.0.0* ]] || fail "no request without the header reached the primary (6.0.0): $others"

log "promoting past the pause"
kc annotate canary podinfo "serin.dev/promote=$(new_token)" --overwrite >/dev/null
follow_canary podinfo 120 Succeeded Failed
expect_eq "phase" Succeeded "$PHASE"
expect_eq "managed routes after the promotion" "" "$(routes_named)"
expect_eq "a request with x-tester after the promotion" 6.0.1 "$(version_with 'x-tester: yes')"
