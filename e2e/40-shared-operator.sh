#!/usr/bin/env bash
# One operator for the whole cluster, and a namespace that tries what a tenant could do to it:
# - MetricTemplates whose query is a template program (a CPU bomb and a memory bomb for a template
#   engine), a placeholder repeated until the rendered query passes its limit, and a query longer
#   than the template limit;
# - a MetricTemplate whose Prometheus answers 300 MiB;
# - four Canaries (the operator's four reconcile slots) whose confirm-rollout gates never answer,
#   with the longest timeout validation accepts (5m), and one asking for 1000h;
# - Canaries that reference team-b's MetricTemplate and AlertProvider, which use team-b's Secrets;
# - a Canary whose <target>-primary Deployment was made by hand;
# - calls to the load tester that open another namespace's rollback gate or close its promotion
#   gate, without the load tester's token.
# Meanwhile `test` releases podinfo 6.0.1 (promoted) and `team-b` a faulty 6.0.1 (rolled back), with
# every analysis step within its interval + 2 s (read from the operator's log); the operator never
# restarts and stays under 256 MiB resident (read from /proc during the scenario); each hostile
# object ends with a status message naming its field and the limit or rule it broke; no Secret
# value appears in the operator's or the load testers' output.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the hostile endpoints are loopback servers that the host-run operator reaches"
OPERATOR_ALL_NAMESPACES=1
setup
[[ -x $HELM ]] || fail "$HELM is missing: run scripts/install-tools.sh"
start_receiver

# Secret values planted by this scenario; none may reach a log, an Event or a status.
TEAMB_PROM_TOKEN=teamb-prom-token-$RANDOM$RANDOM
TEAMB_SLACK_PATH=teamb-slack-path-$RANDOM$RANDOM
EVENTS_PATH=operator-events-path-$RANDOM$RANDOM
LOADTESTER_TOKEN=loadtester-token-$RANDOM$RANDOM
HEY_PASSWORD=hey-password-$RANDOM$RANDOM
HEY_BEARER=hey-bearer-$RANDOM$RANDOM

log "restarting the operator for every namespace, with an event webhook URL from its environment, logging JSON"
stop_process "$OPERATOR_PID" operator
LOG_BEFORE_RESTART=$(stat -c %s "$WORK/operator.log")
receiver_answer "/events/$EVENTS_PATH" 500
OPERATOR_ENV=("EVENT_WEBHOOK_URL=$RECEIVER_URL/events/$EVENTS_PATH")
start_operator --log-format json
OPERATOR=$OPERATOR_PID
OPERATOR_LOG_FILE=$WORK/operator.log

for namespace in team-b hostile loadtester; do
  kubectl create namespace "$namespace" >/dev/null
done

log "the load tester chart in namespace loadtester, its gates and tasks behind a token"
kubectl -n loadtester create secret generic loadtester-token --from-literal=token="$LOADTESTER_TOKEN" >/dev/null
helm_cmd install loadtester "$REPO_DIR/charts/loadtester" --namespace loadtester \
  --set auth.secretName=loadtester-token --wait --timeout 90s >"$WORK/helm-loadtester.log" 2>&1 ||
  { cat "$WORK/helm-loadtester.log" >&2; fail "helm install of the load tester failed"; }
# gate_call PATH NAMESPACE [TOKEN]: POSTs a gate request for canary podinfo of NAMESPACE to the
# chart's load tester through the mesh; prints the HTTP status.
gate_call() {
  local auth=()
  [[ -z ${3:-} ]] || auth=(-H "Authorization: Bearer $3")
  curl -sS --max-time 10 -x "$PROXY_URL" -o /dev/null -w '%{http_code}' "${auth[@]}" \
    -H 'Content-Type: application/json' -d "{\"name\":\"podinfo\",\"namespace\":\"$2\"}" \
    "http://loadtester.loadtester/$1"
}
expect_eq "test opens its own promotion gate with the token" 202 "$(gate_call gate/open test "$LOADTESTER_TOKEN")"

# ----- team-b: podinfo, a MetricTemplate and an AlertProvider of its own, with Secrets --------------
log "team-b: podinfo, a MetricTemplate and an AlertProvider that use team-b's Secrets"
sed 's/namespace: test/namespace: team-b/' "$E2E_DIR/fixtures/podinfo.yaml" | kubectl apply -f - >/dev/null
kubectl -n team-b create secret generic prom-creds --from-literal=token="$TEAMB_PROM_TOKEN" >/dev/null
kubectl -n team-b create secret generic slack --from-literal=address="$RECEIVER_URL/slack/$TEAMB_SLACK_PATH" >/dev/null
receiver_answer "/slack/$TEAMB_SLACK_PATH" 500
kubectl apply -f - >/dev/null <<EOF
apiVersion: serin.dev/v1beta1
kind: MetricTemplate
metadata: {name: success-rate, namespace: team-b}
spec:
  provider: {type: prometheus, address: "$RECEIVER_URL/prometheus", secretRef: {name: prom-creds}}
  query: |
    sum(rate(istio_requests_total{reporter="destination", destination_workload_namespace="{{ namespace }}",
      destination_workload=~"{{ target }}", response_code!~"5.*"}[{{ interval }}]))
    / sum(rate(istio_requests_total{reporter="destination", destination_workload_namespace="{{ namespace }}",
      destination_workload=~"{{ target }}"}[{{ interval }}])) * 100
---
apiVersion: serin.dev/v1beta1
kind: AlertProvider
metadata: {name: chat, namespace: team-b}
spec: {type: slack, channel: releases, secretRef: {name: slack}}
---
apiVersion: serin.dev/v1beta1
kind: Canary
metadata: {name: podinfo, namespace: team-b}
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: podinfo}
  progressDeadlineSeconds: 60
  service: {port: 9898}
  analysis:
    interval: $INTERVAL
    threshold: 2
    stepWeight: 20
    maxWeight: 60
    metrics:
      - name: success-rate
        templateRef: {name: success-rate}
        thresholdRange: {min: 99}
        interval: 30s
    alerts:
      - name: team
        severity: info
        providerRef: {name: chat}
    webhooks:
      - name: load-test
        url: http://flagger-loadtester.$NS/
        timeout: 5s
        metadata:
          cmd: "hey -z 1m -q 10 -c 2 http://podinfo-canary.team-b:9898/"
EOF

# ----- test: the healthy release, with gates on the token-protected load tester --------------------
log "test: the Canary, its load test carrying hey credentials, its gates on the chart's load tester"
hey_cmd="hey -z 1m -q 10 -c 2 -a tester:$HEY_PASSWORD -H 'Authorization: Bearer $HEY_BEARER' http://podinfo-canary.$NS:9898/"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    stepWeight: 20
    maxWeight: 60
    metrics:
$(success_rate_metric)
    webhooks:
      - name: load-test-start
        type: pre-rollout
        url: http://flagger-loadtester.$NS/
        timeout: 5s
        metadata:
          cmd: "$hey_cmd"
      - name: load-test
        url: http://flagger-loadtester.$NS/
        timeout: 5s
        metadata:
          cmd: "$hey_cmd"
      - name: promotion-gate
        type: confirm-promotion
        url: http://loadtester.loadtester/gate/check
      - name: rollback-gate
        type: rollback
        url: http://loadtester.loadtester/rollback/check
EOF
# Followed at once: Initializing lasts as long as the primary takes to start, shorter than the
# hostile namespace's setup below.
expect_initialized

# ----- hostile ------------------------------------------------------------------------------------
log "hostile: a target Deployment for each Canary, and one <target>-primary made by hand"
# hostile_target NAME: a one-replica podinfo Deployment NAME in namespace hostile.
hostile_target() {
  kubectl apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: $1, namespace: hostile}
spec:
  replicas: 1
  selector: {matchLabels: {app: $1}}
  template:
    metadata: {labels: {app: $1}}
    spec:
      containers:
        - name: podinfod
          image: ghcr.io/stefanprodan/podinfo:6.0.0
          ports: [{name: http, containerPort: 9898}]
          readinessProbe: {httpGet: {path: /readyz, port: 9898}, periodSeconds: 2}
EOF
}
# hostile_canary NAME [SPEC_LINE...]: the Canary NAME in hostile targeting Deployment NAME; each
# argument is one more `spec` line, standard input the body of `spec.analysis`.
hostile_canary() {
  local name=$1 line
  shift
  {
    printf '%s\n' "apiVersion: serin.dev/v1beta1" "kind: Canary" "metadata: {name: $name, namespace: hostile}" \
      "spec:" "  targetRef: {apiVersion: apps/v1, kind: Deployment, name: $name}" \
      "  progressDeadlineSeconds: 600" "  service: {port: 9898}"
    for line in "$@"; do printf '  %s\n' "$line"; done
    printf '%s\n' "  analysis:"
    cat
  } | kubectl apply -f - >/dev/null
}
SILENT=(silent-1 silent-2 silent-3 silent-4)
HOSTILE=(cpu-bomb memory-bomb amplified too-long huge-answer "${SILENT[@]}" forever borrow-template
  borrow-alerts takeover)
for name in "${HOSTILE[@]}"; do hostile_target "$name"; done
kubectl -n hostile create deployment takeover-primary --image=ghcr.io/stefanprodan/podinfo:6.0.0 >/dev/null

log "hostile: MetricTemplates that would cost a template engine memory and CPU, one past each limit, one answering 300 MiB"
long_query="sum(up{job=\"$(head -c 70000 /dev/zero | tr '\0' x)\"})"
amplified_query=$(printf '{{ variables.label }}%.0s' $(seq 100))
receiver_answer /huge/api/v1/query huge:300
# hostile_template NAME ADDRESS QUERY: the MetricTemplate NAME in hostile, its query as a literal
# block (kept exactly as given, whatever quotes it holds).
hostile_template() {
  kubectl apply -f - >/dev/null <<EOF
apiVersion: serin.dev/v1beta1
kind: MetricTemplate
metadata: {name: $1, namespace: hostile}
spec:
  provider: {type: prometheus, address: "$2"}
  query: |-
    $3
EOF
}
hostile_template cpu-bomb "$PROMETHEUS_URL" '{% for i in [0]*100000 %}{% for j in [0]*100000 %}x{% endfor %}{% endfor %}'
hostile_template memory-bomb "$PROMETHEUS_URL" '{% for i in [0]*20 %}{{ "x"*100000000 }}{% endfor %}'
hostile_template amplified "$PROMETHEUS_URL" "$amplified_query"
hostile_template too-long "$PROMETHEUS_URL" "$long_query"
hostile_template huge-answer "$RECEIVER_URL/huge" 'vector(1)'
for template in cpu-bomb memory-bomb amplified too-long huge-answer; do
  variables=""
  [[ $template != amplified ]] || variables="templateVariables: {label: $(head -c 2048 /dev/zero | tr '\0' y)}"
  hostile_canary "$template" <<EOF
    interval: $INTERVAL
    threshold: 100
    iterations: 100
    metrics:
      - name: $template
        templateRef: {name: $template}
        thresholdRange: {max: 10}
        $variables
EOF
done

log "hostile: four Canaries whose confirm-rollout gates never answer (timeout 5m), one asking for 1000h"
receiver_answer /silent silent
for name in "${SILENT[@]}"; do
  hostile_canary "$name" <<EOF
    interval: $INTERVAL
    threshold: 1
    iterations: 1
    webhooks:
      - name: gate
        type: confirm-rollout
        url: $RECEIVER_URL/silent
        timeout: 5m
EOF
done
hostile_canary forever <<EOF
    interval: $INTERVAL
    threshold: 1
    iterations: 1
    webhooks:
      - name: gate
        type: confirm-rollout
        url: $RECEIVER_URL/silent
        timeout: 1000h
EOF

log "hostile: Canaries borrowing team-b's MetricTemplate and AlertProvider, and one whose primary exists"
hostile_canary borrow-template <<EOF
    interval: $INTERVAL
    threshold: 1
    iterations: 1
    metrics:
      - name: success-rate
        templateRef: {name: success-rate, namespace: team-b}
        templateVariables: {value: "1) or vector(100"}
        thresholdRange: {min: 99}
EOF
hostile_canary borrow-alerts <<EOF
    interval: $INTERVAL
    threshold: 1
    iterations: 1
    alerts:
      - name: spam
        severity: info
        providerRef: {name: chat, namespace: team-b}
EOF
hostile_canary takeover <<EOF
    interval: $INTERVAL
    threshold: 1
    iterations: 1
EOF

# ----- initialization --------------------------------------------------------------------------
# initialized NAMESPACE NAME: the Canary's phase is Initialized.
initialized() {
  [[ $(kubectl -n "$1" get canary "$2" -o jsonpath='{.status.phase}') == Initialized ]]
}
wait_for "team-b's Canary to initialize" 90 initialized team-b podinfo
for name in huge-answer "${SILENT[@]}"; do
  wait_for "hostile/$name to initialize" 90 initialized hostile "$name"
done

log "hostile: new revisions, so the silent gates are called and the 300 MiB answer is asked for"
for name in huge-answer "${SILENT[@]}"; do
  kubectl -n hostile set image "deployment/$name" podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
done
log "hostile: load tester calls for other namespaces' Canaries, without the token"
expect_eq "opening test's rollback gate without the token" 401 "$(gate_call rollback/open test)"
expect_eq "closing test's promotion gate without the token" 401 "$(gate_call gate/close test)"
expect_eq "opening test's rollback gate with a wrong token" 401 "$(gate_call rollback/open test wrong-token)"

# ----- the two releases, side by side ----------------------------------------------------------
PEAK_RSS_KB=0
# sample_operator: the operator is alive; its resident memory's peak is kept in PEAK_RSS_KB.
sample_operator() {
  local rss
  kill -0 "$OPERATOR" 2>/dev/null || fail "the operator (pid $OPERATOR) is gone"
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$OPERATOR/status")
  ((rss <= PEAK_RSS_KB)) || PEAK_RSS_KB=$rss
  return 0
}
FOLLOW_HOOK=sample_operator
log "releasing podinfo 6.0.1 in test and a faulty 6.0.1 in team-b"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
kubectl -n team-b patch deployment podinfo --type=strategic -p '{"spec":{"template":{"spec":{"containers":[{"name":"podinfod","image":"ghcr.io/stefanprodan/podinfo:6.0.1","env":[{"name":"ERROR_RATE","value":"0.5"}]}]}}}}' >/dev/null
follow_canary podinfo 180 Succeeded Failed
expect_eq "test's release" Succeeded "$PHASE"
expect_sequence weights 0 20 40 60 0
team_b_done() {
  sample_operator
  [[ $(kubectl -n team-b get canary podinfo -o jsonpath='{.status.phase}') == Failed ]]
}
wait_for "team-b's faulty release to be rolled back" 120 team_b_done
expect_eq "primary image in test" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
expect_eq "primary image in team-b" ghcr.io/stefanprodan/podinfo:6.0.0 \
  "$(kubectl -n team-b get deployment podinfo-primary -o jsonpath='{.spec.template.spec.containers[0].image}')"
expect_eq "credentials of the queries of team-b's MetricTemplate" "Bearer $TEAMB_PROM_TOKEN" \
  "$(receiver_authorization /prometheus/api/v1/query | sort -u | tr '\n' ' ' | sed 's/ $//')"
expect_eq "namespaces the queries with team-b's credentials were about" team-b "$(python3 -c '
import json, re, sys, urllib.parse
seen = set()
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["path"] == "/prometheus/api/v1/query":
        query = urllib.parse.parse_qs(r["query"]).get("query", [""])[0]
        seen.update(re.findall(r"destination_workload_namespace=\"([^\"]*)\"", query))
print(" ".join(sorted(seen)))' "$RECEIVER_DIR/requests.jsonl")"

log "the step times of both releases, from the operator's log (interval $INTERVAL, at most +2 s)"
python3 - "$OPERATOR_LOG_FILE" "$(interval_seconds)" >"$WORK/steps.txt" <<'PY' || { cat "$WORK/steps.txt" >&2; fail "a step came late"; }
import json, sys
from datetime import datetime
log, interval = sys.argv[1], float(sys.argv[2])
steps = {"test": [], "team-b": []}
for line in open(log):
    try:
        entry = json.loads(line)
    except ValueError:
        continue
    span = entry.get("span") or {}
    message = entry.get("message") or entry.get("fields", {}).get("message", "")
    if span.get("canary") != "podinfo" or span.get("namespace") not in steps or "reason" not in entry:
        continue
    when = datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00")).timestamp()
    steps[span["namespace"]].append((when, message))
late = False
for namespace, events in steps.items():
    # From the first step of the analysis to the end of the release.
    first = next(i for i, (_, m) in enumerate(events) if m.startswith("Advance"))
    last = next(i for i, (_, m) in enumerate(events) if "Promotion completed" in m or "Canary failed" in m)
    window = events[first:last + 1]
    gaps = [b[0] - a[0] for a, b in zip(window, window[1:])]
    print("%s: %d events from %r to %r; longest gap %.2fs" % (namespace, len(window), window[0][1], window[-1][1], max(gaps)))
    for (t0, m0), (t1, m1) in zip(window, window[1:]):
        if t1 - t0 > interval + 2:
            print("  late: %.2fs between %r and %r" % (t1 - t0, m0, m1))
            late = True
sys.exit(1 if late else 0)
PY
quote "$(cat "$WORK/steps.txt")"

# ----- what the hostile objects ended with -----------------------------------------------------
# hostile_message NAME: the status message of hostile's Canary NAME (the message of its first metric
# check when the status has none).
hostile_message() {
  local message
  message=$(kubectl -n hostile get canary "$1" -o jsonpath='{.status.message}')
  [[ -n $message ]] || message=$(kubectl -n hostile get canary "$1" -o jsonpath='{.status.metricChecks[0].message}')
  echo "$message"
}
# expect_hostile NAME NEEDLE...: hostile's Canary NAME has a status message containing every NEEDLE.
expect_hostile() {
  local name=$1 message needle
  shift
  message=$(hostile_message "$name")
  for needle in "$@"; do
    [[ $message == *"$needle"* ]] || fail "hostile/$name: expected the status message to contain '$needle', got: $message"
  done
  log "ok: hostile/$name: $message"
}
expect_hostile cpu-bomb "spec.analysis.metrics[0].templateRef" "spec.query" '"{% for i in [0]*100000 %}" is not a placeholder'
expect_hostile memory-bomb "spec.analysis.metrics[0].templateRef" "spec.query" "is not a placeholder"
expect_hostile amplified "spec.analysis.metrics[0].templateRef" "spec.query" "over the limit of 65536 bytes (64 KiB)"
expect_hostile too-long "spec.analysis.metrics[0].templateRef" "spec.query" "over the limit of 65536 bytes (64 KiB)"
expect_hostile huge-answer "$RECEIVER_URL/huge" "more than 4194304 bytes (4 MiB)"
huge_sent=$(sort -n "$RECEIVER_DIR/huge-sent" | tail -n 1)
log "the 300 MiB answer was cut after $huge_sent bytes were sent"
((huge_sent < 64 * 1024 * 1024)) || fail "the operator read $huge_sent bytes of the huge answer"
for name in "${SILENT[@]}"; do
  expect_hostile "$name" "for the confirm-rollout webhook gate" "up to 300s per attempt (spec.analysis.webhooks[].timeout"
done
expect_hostile forever "spec.analysis.webhooks[0].timeout" "above the maximum of 5m"
expect_hostile borrow-template "spec.analysis.metrics[0].templateRef" "Secret prom-creds of namespace team-b" \
  "serin.dev/share-with-namespaces"
expect_hostile borrow-alerts "spec.analysis.alerts[0].providerRef" "Secret slack of namespace team-b" \
  "serin.dev/share-with-namespaces"
expect_hostile takeover "Deployment takeover-primary.hostile exists and was not created by this Canary" \
  "rewrite its pod template and replicas" "serin.dev/adopt=takeover"
expect_eq "the hand-made takeover-primary, untouched" "" \
  "$(kubectl -n hostile get deployment takeover-primary -o jsonpath='{.metadata.ownerReferences}')"
for name in cpu-bomb memory-bomb amplified too-long borrow-template borrow-alerts takeover; do
  expect_eq "hostile/$name held before initializing (no $name-primary)" "" \
    "$(kubectl -n hostile get deployment "$name-primary" --ignore-not-found -o name | grep -v takeover-primary)"
done
expect_eq "team-b's Slack address posted to (team-b's own alerts only)" 0 \
  "$(python3 -c 'import json,sys
n=0
for line in open(sys.argv[1]):
    r=json.loads(line)
    if r["path"].startswith("/slack/") and "hostile" in json.dumps(r["body"]): n+=1
print(n)' "$RECEIVER_DIR/requests.jsonl")"

# ----- the operator, and what it and the load testers wrote ------------------------------------
sample_operator
log "operator: pid $OPERATOR alive, peak resident memory $((PEAK_RSS_KB / 1024)) MiB"
((PEAK_RSS_KB < 256 * 1024)) || fail "the operator's resident memory reached $((PEAK_RSS_KB / 1024)) MiB"
expect_eq "operator starts in its log since the restart for this scenario" 1 \
  "$(tail -c "+$((LOG_BEFORE_RESTART + 1))" "$OPERATOR_LOG_FILE" | grep -c 'admin server listening')"
expect_eq "panics in the operator's log" 0 "$(grep -c 'panicked' "$OPERATOR_LOG_FILE" || true)"
kubectl -n test logs deploy/flagger-loadtester --tail=-1 >"$WORK/loadtester-test.log" 2>&1
kubectl -n loadtester logs deploy/loadtester --tail=-1 >"$WORK/loadtester-chart.log" 2>&1
grep -q "hey" "$WORK/loadtester-test.log" || fail "the load tester's log shows no hey command"
for value in "$TEAMB_PROM_TOKEN" "$TEAMB_SLACK_PATH" "$EVENTS_PATH" "$LOADTESTER_TOKEN" "$HEY_PASSWORD" "$HEY_BEARER"; do
  for file in "$OPERATOR_LOG_FILE" "$WORK/loadtester-test.log" "$WORK/loadtester-chart.log" "$WORK/sandbox.log"; do
    ! grep -qF -- "$value" "$file" || fail "the secret value '$value' appears in $file: $(grep -F -- "$value" "$file" | head -n 2)"
  done
done
for value in "$TEAMB_PROM_TOKEN" "$TEAMB_SLACK_PATH" "$EVENTS_PATH" "$LOADTESTER_TOKEN"; do
  text=$(kubectl get events,canaries,metrictemplates,alertproviders -A -o json)
  [[ $text != *"$value"* ]] || fail "the secret value '$value' appears in an Event or a Serin object"
done
log "ok: no Secret value in the operator's log, the load testers' logs, Events or Serin objects"
