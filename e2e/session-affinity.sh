# The body of the session-affinity scenarios (32 on Istio, 50 on the Gateway API), sourced after
# lib.sh and setup with ROUTER set to istio or gatewayapi:v1. Real requests through a gateway
# reached with `kubectl port-forward`, as a user sends them; the Canary has Flagger's
# test-session-affinity settings (cookieName canary-flagger-cookie, primaryCookieName
# primary-flagger-cookie). With the canary at its maximum weight (held there by a closed
# confirm-promotion gate), a client that got the canary's cookie stays on the new version and one
# that got the primary's stays on the old, whatever the weights; after the promotion the canary
# cookie is expired (status previousSessionAffinityCookie, answered with Max-Age=-1).

if [[ $ROUTER == istio ]]; then
  log "an Istio Gateway on the ingress gateway, and a port-forward to it"
  kubectl apply -f "$E2E_DIR/fixtures/istio-gateway.yaml" >/dev/null
  GATEWAY_SERVICE=istio-ingressgateway
  CANARY_SERVICE_LINES=("gateways: [istio-system/public-gateway]" 'hosts: ["*"]')
  CANARY_SPEC_LINES=()
else
  log "a Gateway API Gateway of class istio, and a port-forward to it"
  kubectl apply -f "$E2E_DIR/fixtures/gateway-api-gateway.yaml" >/dev/null
  GATEWAY_SERVICE=public-gateway-istio
  CANARY_SERVICE_LINES=("gatewayRefs: [{name: public-gateway, namespace: istio-system}]")
  CANARY_SPEC_LINES=("provider: $ROUTER")
fi
kubectl -n istio-system rollout status "deployment/$GATEWAY_SERVICE" --timeout=60s >/dev/null
port_forward_gateway "$GATEWAY_SERVICE"

log "creating the Canary ($ROUTER): stepWeight 10 up to 30, session affinity, a promotion gate"
apply_canary "${CANARY_SPEC_LINES[@]}" <<EOF
    interval: $INTERVAL
    threshold: 5
    stepWeight: 10
    maxWeight: 30
    sessionAffinity:
      cookieName: canary-flagger-cookie
      primaryCookieName: primary-flagger-cookie
    metrics:
$(success_rate_metric)
$(load_test_hooks "http://$GATEWAY_SERVICE.istio-system/")
      - name: promotion-gate
        type: confirm-promotion
        url: http://flagger-loadtester.$NS/gate/check
EOF
expect_initialized
gateway_answers() { curl -sf --noproxy '*' --max-time 5 "$GATEWAY/" >/dev/null; }
wait_for "the gateway to route podinfo through the port-forward" 30 gateway_answers

# get [COOKIE]: one request through the port-forward; leaves the version in VERSION and the first
# Set-Cookie's name=value in SET_COOKIE (empty without one), the full header in SET_COOKIE_LINE.
get() {
  local headers body
  headers=$WORK/headers.txt
  body=$(curl -sS --noproxy '*' --max-time 5 -D "$headers" ${1:+-H "Cookie: $1"} "$GATEWAY/")
  VERSION=$(sed -n 's/.*"version"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' <<<"$body")
  SET_COOKIE_LINE=$({ grep -i '^set-cookie:' "$headers" || true; } | head -n 1 | tr -d '\r')
  SET_COOKIE=$(sed -n 's/^[Ss]et-[Cc]ookie: *\([^;]*\).*/\1/p' <<<"$SET_COOKIE_LINE")
}

log "releasing podinfo 3.1.1; the gate holds it at weight 30"
kc set image deployment/podinfo podinfod=stefanprodan/podinfo:3.1.1 >/dev/null
follow_canary podinfo 150 WaitingPromotion Succeeded Failed
expect_eq "phase with the promotion gate closed" WaitingPromotion "$PHASE"
expect_eq "canary weight at the gate" 30 "$WEIGHT"
canary_cookie_in_status=$(kc get canary podinfo -o jsonpath='{.status.sessionAffinityCookie}')
expect_contains "status.sessionAffinityCookie" "canary-flagger-cookie=" "$canary_cookie_in_status"

# Requests without a cookie until each side has answered once with its cookie (bounded).
CANARY_COOKIE="" PRIMARY_COOKIE="" requests=0
while [[ -z $CANARY_COOKIE || -z $PRIMARY_COOKIE ]] && ((requests < 200)); do
  get
  requests=$((requests + 1))
  case "$VERSION/$SET_COOKIE" in
    3.1.1/canary-flagger-cookie=*) CANARY_COOKIE=$SET_COOKIE CANARY_SET_COOKIE=$SET_COOKIE_LINE ;;
    3.1.0/primary-flagger-cookie=*) PRIMARY_COOKIE=$SET_COOKIE ;;
    3.1.1/* | 3.1.0/*) ;;
    *) fail "request $requests answered version '$VERSION' with cookie '$SET_COOKIE'" ;;
  esac
done
[[ -n $CANARY_COOKIE && -n $PRIMARY_COOKIE ]] ||
  fail "after $requests requests: canary cookie '$CANARY_COOKIE', primary cookie '$PRIMARY_COOKIE'"
log "after $requests requests: the canary handed out $CANARY_COOKIE, the primary $PRIMARY_COOKIE"
expect_eq "the canary's cookie is the one in the status" "$canary_cookie_in_status" "$CANARY_COOKIE"
expect_contains "the canary cookie's lifetime (maxAge's default)" "Max-Age=86400" "$CANARY_SET_COOKIE"
for ((i = 1; i <= 10; i++)); do
  get "$CANARY_COOKIE"
  expect_eq "version for a client with the canary cookie (request $i)" 3.1.1 "$VERSION"
  get "$PRIMARY_COOKIE"
  expect_eq "version for a client with the primary cookie (request $i)" 3.1.0 "$VERSION"
done

log "opening the gate: promotion"
loadtester_post /gate/open "{\"name\":\"podinfo\",\"namespace\":\"$NS\"}"
follow_canary podinfo 150 Succeeded Failed
expect_eq "final phase" Succeeded "$PHASE"
previous=$(kc get canary podinfo -o jsonpath='{.status.previousSessionAffinityCookie}')
expect_eq "status.previousSessionAffinityCookie" "$CANARY_COOKIE" "$previous"
expect_eq "status.sessionAffinityCookie after the promotion" "" \
  "$(kc get canary podinfo -o jsonpath='{.status.sessionAffinityCookie}')"
get "$previous"
expect_eq "version for the old canary cookie after the promotion" 3.1.1 "$VERSION"
expect_contains "the answer to the old canary cookie expires it" "$previous; Max-Age=-1" "$SET_COOKIE_LINE"
get
expect_eq "version without a cookie after the promotion" 3.1.1 "$VERSION"
expect_eq "cookie handed out without one after the promotion" "" "$SET_COOKIE"
