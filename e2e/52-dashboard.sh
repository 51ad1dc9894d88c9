#!/usr/bin/env bash
# The web dashboard in a real headless Chromium (e2e/browser.py), run as in a cluster: its own
# ServiceAccount with the chart's ClusterRole, each viewer authenticated by a TokenReview and
# authorized by SubjectAccessReviews as themselves. A release runs while a releaser, signed in on the
# login page, watches the list change phase and weight without a reload, opens the Canary's page
# with its metric chart, and aborts (after confirming) — the operator rolls the release back. A
# viewer of another namespace, whose token comes in an Authorization header as from an OIDC proxy,
# sees only that namespace and is refused when acting. A foreign Host header, a request without the
# CSRF token and one from another origin are refused; no token reaches the log. Screenshots of every
# page go to E2E_SCREENSHOTS (default target/e2e-screenshots); docs/images holds the README's.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ $MODE == sandbox ]] || { log "the dashboard scenario runs the dashboard on the host: sandbox mode only"; exit 77; }
command -v chromium >/dev/null || fail "the dashboard scenario needs Debian's chromium: apt-get install chromium"
setup

SHOTS=${E2E_SCREENSHOTS:-$REPO_DIR/target/e2e-screenshots}
mkdir -p "$SHOTS"
browser() { /usr/bin/python3 "$E2E_DIR/browser.py" --screenshots "$SHOTS" "$@"; }

log "a second team's namespace with a Canary of its own (the operator here watches $NS only)"
kubectl create namespace team-b >/dev/null
kubectl apply -f - >/dev/null <<YAML
apiVersion: serin.dev/v1beta1
kind: Canary
metadata: {name: checkout, namespace: team-b}
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: checkout}
  service: {port: 8080}
  analysis: {interval: 1m, threshold: 5, stepWeight: 10, maxWeight: 50}
YAML

log "the dashboard's ServiceAccount with the chart's RBAC (helm template, dashboard.enabled=true)"
kubectl create namespace serin-system >/dev/null
helm_cmd template serin "$REPO_DIR/charts/serin" --namespace serin-system --set dashboard.enabled=true \
  --show-only templates/dashboard.yaml >"$WORK/dashboard-chart.yaml"
# The Deployment and Service are the chart's way to run it; here it runs on the host, as the operator does.
/usr/bin/python3 - "$WORK/dashboard-chart.yaml" >"$WORK/dashboard-rbac.yaml" <<'PY'
import sys
docs = open(sys.argv[1]).read().split("\n---")
print("\n---".join(d for d in docs if any(f"kind: {k}\n" in d for k in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"))))
PY
kubectl apply -f "$WORK/dashboard-rbac.yaml" >/dev/null

# kubeconfig_for NAMESPACE ACCOUNT FILE: a kubeconfig that acts as the ServiceAccount's token.
kubeconfig_for() {
  local token
  token=$(kubectl -n "$1" create token "$2")
  cp "$KUBECONFIG" "$3"
  kubectl --kubeconfig "$3" config set-credentials "$2" --token="$token" >/dev/null
  kubectl --kubeconfig "$3" config set-context --current --user="$2" >/dev/null
}
kubeconfig_for serin-system serin-dashboard "$WORK/dashboard.kubeconfig"

log "the viewers: a releaser of $NS (may patch Canaries there) and a reader of team-b"
kubectl -n "$NS" create serviceaccount releaser >/dev/null
kubectl -n "$NS" create role releaser --verb=get,list,watch,patch --resource=canaries.serin.dev >/dev/null
kubectl -n "$NS" create role releaser-reads --verb=get,list --resource=events,deployments.apps,virtualservices.networking.istio.io >/dev/null
kubectl -n "$NS" create rolebinding releaser --role=releaser --serviceaccount="$NS:releaser" >/dev/null
kubectl -n "$NS" create rolebinding releaser-reads --role=releaser-reads --serviceaccount="$NS:releaser" >/dev/null
kubectl -n team-b create serviceaccount reader >/dev/null
kubectl -n team-b create role reader --verb=get,list,watch --resource=canaries.serin.dev >/dev/null
kubectl -n team-b create rolebinding reader --role=reader --serviceaccount=team-b:reader >/dev/null
RELEASER_TOKEN=$(kubectl -n "$NS" create token releaser)
READER_TOKEN=$(kubectl -n team-b create token reader)

log "starting serin-dashboard (the operator binary under that name) as its ServiceAccount"
mkdir -p "$WORK/bin"
ln -s "$OPERATOR_BIN" "$WORK/bin/serin-dashboard"
"$WORK/bin/serin-dashboard" --kubeconfig "$WORK/dashboard.kubeconfig" --address 127.0.0.1:0 \
  --service-name serin-dashboard >"$WORK/dashboard.log" 2>&1 &
DASHBOARD_PID=$!
CLEANUP_HOOKS+=('stop_process "$DASHBOARD_PID" dashboard')
dashboard_port() { sed -nE 's/.*dashboard listening on http:\/\/127\.0\.0\.1:([0-9]+).*/\1/p' "$WORK/dashboard.log" | head -n 1; }
dashboard_listens() {
  kill -0 "$DASHBOARD_PID" 2>/dev/null || { cat "$WORK/dashboard.log" >&2; fail "the dashboard exited"; }
  [[ -n $(dashboard_port) ]]
}
wait_for "the dashboard to listen" 30 dashboard_listens
URL=http://127.0.0.1:$(dashboard_port)
wait_for "the dashboard's /healthz" 20 curl -sf --noproxy '*' "$URL/healthz"
log "dashboard at $URL"

log "creating the Canary (20%, 40%, 60%, then a pause)"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 3
    steps:
      - setWeight: 20
      - setWeight: 40
      - setWeight: 60
      - pause: {}
    metrics:
$(success_rate_metric)
$(load_test_hooks)
EOF
expect_initialized

# The releaser's browser reads its steps from a FIFO, so the release starts only once the list is
# on screen and marked: every later change must reach that same page, never a reload.
log "the releaser signs in; the release starts while the list is open"
mkfifo "$WORK/steps"
browser <"$WORK/steps" >"$WORK/browser.log" 2>&1 &
BROWSER_PID=$!
CLEANUP_HOOKS+=('stop_process "$BROWSER_PID" browser')
exec 7>"$WORK/steps"
cat >&7 <<STEPS
open $URL/
wait-text '#login h1' 'Sign in'
screenshot dashboard-login
type '#token' '$RELEASER_TOKEN'
click '#sign-in'
wait-text '#viewer' 'system:serviceaccount:$NS:releaser'
wait-count 'tr[data-canary="$NS/podinfo"]' 1
wait-count 'tr[data-canary^="team-b/"]' 0
wait-text 'tr[data-canary="$NS/podinfo"] .phase' 'Initialized'
mark
STEPS
browser_marked() {
  kill -0 "$BROWSER_PID" 2>/dev/null || { cat "$WORK/browser.log" >&2; fail "the browser stopped"; }
  grep -q '^ok: mark$' "$WORK/browser.log"
}
wait_for "the list to be on screen" 60 browser_marked
log "releasing podinfo 6.0.1"
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
cat >&7 <<STEPS
wait-text 'tr[data-canary="$NS/podinfo"] .phase' 'Progressing' --timeout 60
wait-text 'tr[data-canary="$NS/podinfo"] .weight-cell' '^20%' --timeout 60
wait-text 'tr[data-canary="$NS/podinfo"] .weight-cell' '^40%' --timeout 60
wait-text 'tr[data-canary="$NS/podinfo"] .weight-cell' '^60%' --timeout 60
wait-text 'tr[data-canary="$NS/podinfo"] .step' '^4/4' --timeout 60
wait-text 'tr[data-canary="$NS/podinfo"] .images' '6\.0\.0 → podinfo:6\.0\.1'
expect-mark
screenshot dashboard-list
click 'tr[data-canary="$NS/podinfo"] td.name a'
wait-text '#canary-title' 'podinfo'
wait-text '#ladder li.current' 'pause'
wait-text '.metric[data-metric="request-success-rate"] .caption' '^[1-9][0-9]* measurements? this release' --timeout 60
wait-count 'svg.chart[data-metric="request-success-rate"] rect.band' 1
wait-text '#routes' 'podinfo-canary 60%'
wait-text '#events' 'weight'
expect-mark
screenshot dashboard-canary
click 'button[data-action="abort"]'
wait-text '#confirm-title' 'Abort the release: $NS/podinfo\?'
screenshot dashboard-confirm
click '#confirm-ok'
wait-text '#action-status' 'abort acknowledged by the operator' --timeout 30
wait-text '#phase' 'Failed' --timeout 60
wait-text '#weight' '^0%'
expect-mark
screenshot dashboard-aborted
click '#logout'
wait-text '#login h1' 'Sign in'
STEPS
exec 7>&-
browser_rc=0
wait "$BROWSER_PID" || browser_rc=$?
quote "$(cat "$WORK/browser.log")"
((browser_rc == 0)) || fail "the releaser's browser session failed (exit $browser_rc)"
phase=$(kc get canary podinfo -o jsonpath='{.status.phase}/{.status.canaryWeight}')
expect_eq "the Canary after the dashboard's abort" "Failed/0" "$phase"
events=$(kc get events --field-selector involvedObject.name=podinfo -o jsonpath='{range .items[*]}{.message}{"\n"}{end}')
expect_contains "the operator's events" "abort" "$events"

log "a reader of team-b, signed in by an Authorization header, sees team-b only and may not act"
browser --header "Authorization: Bearer $READER_TOKEN" <<STEPS
open $URL/
wait-text '#viewer' 'system:serviceaccount:team-b:reader'
wait-count 'tr[data-canary="team-b/checkout"]' 1
wait-count 'tr[data-canary^="$NS/"]' 0
wait-text '#hidden-note' 'Some namespaces are hidden'
click 'tr[data-canary="team-b/checkout"] td.name a'
wait-text '#canary-title' 'checkout'
wait-text '#events' 'cannot read Events'
click 'button[data-action="abort"]'
click '#confirm-ok'
wait-text '#action-status' 'Refused: system:serviceaccount:team-b:reader may not patch canaries.serin.dev in namespace team-b'
screenshot dashboard-refused
STEPS
abort=$(kubectl -n team-b get canary checkout -o jsonpath='{.metadata.annotations.serin\.dev/abort}')
expect_eq "team-b's Canary after the refused abort (no abort annotation)" "" "$abort"

log "the list on a phone"
browser --mobile --header "Authorization: Bearer $RELEASER_TOKEN" <<STEPS
open $URL/
wait-count 'tr[data-canary="$NS/podinfo"]' 1
screenshot dashboard-phone
STEPS

log "kubectl serin dashboard: the same pages on this machine, with the kubeconfig's rights"
refused=$("$SERIN_BIN" dashboard --address 0.0.0.0:0 2>&1) && fail "a local dashboard on 0.0.0.0 was not refused"
expect_contains "a local dashboard on a non-loopback address" "must listen on a loopback address" "$refused"
"$SERIN_BIN" -n "$NS" dashboard --address 127.0.0.1:0 >"$WORK/local-dashboard.log" 2>&1 &
LOCAL_PID=$!
CLEANUP_HOOKS+=('stop_process "$LOCAL_PID" "local dashboard"')
local_url() { sed -nE 's/^Serin dashboard: (http:\/\/127\.0\.0\.1:[0-9]+)\/.*/\1/p' "$WORK/local-dashboard.log"; }
local_listens() {
  kill -0 "$LOCAL_PID" 2>/dev/null || { cat "$WORK/local-dashboard.log" >&2; fail "kubectl serin dashboard exited"; }
  [[ -n $(local_url) ]]
}
wait_for "kubectl serin dashboard to listen" 30 local_listens
browser <<STEPS
open $(local_url)/
wait-text '#viewer' 'you \(kubeconfig\)'
wait-text 'tr[data-canary="$NS/podinfo"] .phase' 'Failed'
wait-count 'tr[data-canary^="team-b/"]' 0
STEPS

log "requests the dashboard refuses"
status_of() { curl -s --noproxy '*' -o "$WORK/answer" -w '%{http_code}' "$@"; }
csrf=$(json_value "$(curl -sf --noproxy '*' -H "Authorization: Bearer $RELEASER_TOKEN" "$URL/api/me")" csrf)
[[ ${#csrf} == 64 ]] || fail "no CSRF token in /api/me"
code=$(status_of -H "Host: attacker.example:80" -H "Authorization: Bearer $RELEASER_TOKEN" "$URL/api/me")
expect_eq "a foreign Host header (DNS rebinding)" 403 "$code"
expect_contains "its refusal" "does not answer to the host name 'attacker.example'" "$(cat "$WORK/answer")"
code=$(status_of -X POST -H "Authorization: Bearer $RELEASER_TOKEN" "$URL/api/canaries/$NS/podinfo/actions/retry")
expect_eq "an action without the CSRF token" 403 "$code"
expect_contains "its refusal" "no valid CSRF token" "$(cat "$WORK/answer")"
code=$(status_of -X POST -H "Authorization: Bearer $RELEASER_TOKEN" -H "X-Serin-CSRF: $csrf" \
  -H "Origin: http://attacker.example" "$URL/api/canaries/$NS/podinfo/actions/retry")
expect_eq "an action from another origin" 403 "$code"
code=$(status_of -H "Authorization: Bearer not-a-token" "$URL/api/me")
expect_eq "a token the API server does not accept" 401 "$code"
handled=$(kc get canary podinfo -o jsonpath='{.metadata.annotations.serin\.dev/retry}')
expect_eq "no retry was written by the refused requests" "" "$handled"
for token in "$RELEASER_TOKEN" "$READER_TOKEN"; do
  if grep -qF "$token" "$WORK/dashboard.log"; then fail "a viewer's token is in the dashboard's log"; fi
done
log "ok: no token in the dashboard's log; screenshots in $SHOTS"
