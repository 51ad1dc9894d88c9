#!/usr/bin/env bash
# Argo Rollouts' analysis step, through the operator with the sandbox's Prometheus and real traffic.
# The steps are setWeight 20, an analysis, setWeight 60. The analysis measures the canary's error
# ratio from Istio's telemetry (count 3, 10s apart, failureLimit 1, successCondition in Argo's
# syntax, the workload passed as an arg), a dry-run metric that always fails, and a `web` metric
# reading a loopback JSON endpoint. A version answering half its requests with 500 fails at the
# analysis step and never reaches 60%; a healthy one passes it and is promoted, with the dry-run
# metric recorded as Failed; a healthy version whose web endpoint says no is rolled back. Every
# measurement is in status.analysisRuns, and `kubectl serin get` draws them.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the web metric reads a loopback receiver"
setup
start_receiver
receiver_answer /release-check 'json:{"ok":true,"checks":3}'

log "creating the MetricTemplates: the canary's error ratio, a query that never passes, a web check"
kc apply -f - >/dev/null <<EOF
apiVersion: serin.dev/v1beta1
kind: MetricTemplate
metadata:
  name: error-ratio
  namespace: $NS
spec:
  provider:
    type: prometheus
    address: $PROMETHEUS_URL
  query: |
    sum(rate(istio_requests_total{reporter="destination",destination_workload_namespace="{{ namespace }}",destination_workload="{{args.workload}}",response_code=~"5.."}[10s]))
    /
    sum(rate(istio_requests_total{reporter="destination",destination_workload_namespace="{{ namespace }}",destination_workload="{{args.workload}}"}[10s]))
---
apiVersion: serin.dev/v1beta1
kind: MetricTemplate
metadata:
  name: request-count
  namespace: $NS
spec:
  provider:
    type: prometheus
    address: $PROMETHEUS_URL
  query: |
    sum(increase(istio_requests_total{reporter="destination",destination_workload_namespace="{{ namespace }}",destination_workload="{{args.workload}}"}[10s])) or vector(0)
---
apiVersion: serin.dev/v1beta1
kind: MetricTemplate
metadata:
  name: release-check
  namespace: $NS
spec:
  provider:
    type: web
    address: $RECEIVER_URL/release-check?revision={{args.revision}}
    jsonPath: "{\$.ok}"
    timeoutSeconds: 5
EOF

log "creating the Canary: setWeight 20, an analysis step, setWeight 60"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 5
    steps:
      - setWeight: 20
      - analysis:
          args:
            - name: workload
              value: podinfo
            - name: revision
              valueFrom:
                podTemplateHashValue: Latest
          metrics:
            - name: error-ratio
              templateRef:
                name: error-ratio
              initialDelay: 10s
              count: 3
              interval: 10s
              failureLimit: 1
              successCondition: "len(result) > 0 && result[0] <= 0.1"
            - name: never-enough
              templateRef:
                name: request-count
              count: 2
              interval: 10s
              successCondition: "result[0] > 1000000000"
            - name: release-check
              templateRef:
                name: release-check
              successCondition: "result == true"
          dryRun:
            - metricName: never-enough
      - setWeight: 60
$(load_test_hooks)
EOF
expect_initialized

# runs_json: status.analysisRuns of the Canary.
runs_json() { kc get canary podinfo -o jsonpath='{.status.analysisRuns}'; }
# step_run EXPR: a Python expression over `run`, the latest run of the analysis step (step 1), and
# `metric(NAME)`, one of its metrics; prints the result (lists joined by spaces).
step_run() {
  runs_json | python3 -c '
import json, sys
runs = [r for r in json.load(sys.stdin) if r.get("step") == 1]
run = runs[-1]
metric = lambda name: next(m for m in run["metrics"] if m["name"] == name)
phases = lambda name: [m["phase"] for m in metric(name).get("measurements", [])]
value = eval(sys.argv[1])
print(" ".join(map(str, value)) if isinstance(value, list) else value)
' "$1"
}

log "releasing podinfo 6.0.1, which answers half its requests with 500"
follow_baseline podinfo
release_faulty_podinfo 6.0.1
follow_canary podinfo 150 Failed Succeeded
expect_eq "phase after the failed analysis" Failed "$PHASE"
expect_event 'metric "error-ratio" assessed Failed due to failed (2) > failureLimit (1)'
expect_sequence_includes weights 20
[[ " $(followed_values weights) " != *" 60 "* ]] || fail "the faulty release reached 60%: $(followed_values weights)"
expect_eq "analysis run phase" Failed "$(step_run 'run["phase"]')"
expect_eq "error-ratio measurements" "Failed Failed" "$(step_run 'phases("error-ratio")')"
expect_eq "primary image (never promoted)" ghcr.io/stefanprodan/podinfo:6.0.0 "$(image_of podinfo-primary)"

log "releasing podinfo 6.0.2, healthy"
follow_baseline podinfo
kc patch deployment podinfo --type=strategic -p '{"spec":{"template":{"spec":{"containers":[{"name":"podinfod","image":"ghcr.io/stefanprodan/podinfo:6.0.2","env":[{"name":"ERROR_RATE","value":"0"}]}]}}}}' >/dev/null
follow_canary podinfo 180 Succeeded Failed
expect_eq "phase after the passing analysis" Succeeded "$PHASE"
expect_sequence_includes weights 20 60
expect_eq "analysis run phase" Successful "$(step_run 'run["phase"]')"
expect_eq "error-ratio: measurements, all Successful" "3 Successful Successful Successful" \
  "$(step_run '[metric("error-ratio")["count"]] + phases("error-ratio")')"
expect_eq "never-enough: a dry run, Failed, not blocking" "True Failed" \
  "$(step_run '[metric("never-enough").get("dryRun"), metric("never-enough")["phase"]]')"
expect_eq "release-check: read true from the web endpoint" "Successful true" \
  "$(step_run '[metric("release-check")["phase"], metric("release-check")["measurements"][0]["value"]]')"
revision=$(kc get canary podinfo -o jsonpath='{.status.lastAppliedSpec}')
expect_contains "the web metric's request carried the revision arg" "revision=$revision" \
  "$(grep -F '"/release-check"' "$RECEIVER_DIR/requests.jsonl" | tail -n 1)"
measured=$(step_run '[m["finishedAt"] for m in metric("error-ratio")["measurements"]]')
log "error-ratio measured at: $measured"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.2 "$(image_of podinfo-primary)"
shown=$("$TARGET_DIR/debug/serin" get podinfo -n "$NS" 2>&1)
printf '%s\n' "$shown" | sed 's/^/    | /'
expect_contains "serin get: the analysis run" "Analysis at step 2 (Successful)" "$shown"
expect_contains "serin get: error-ratio's three verdicts" "✔✔✔" "$(grep -F error-ratio <<<"$shown")"

log "releasing podinfo 6.0.3, healthy, but the release check says no"
receiver_answer /release-check 'json:{"ok":false,"checks":3}'
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.3 >/dev/null
follow_canary podinfo 150 Failed Succeeded
expect_eq "phase after the web check said no" Failed "$PHASE"
expect_event 'metric "release-check" assessed Failed due to failed (1) > failureLimit (0)'
expect_eq "primary image (still 6.0.2)" ghcr.io/stefanprodan/podinfo:6.0.2 "$(image_of podinfo-primary)"
expect_eq "analysis runs kept: one per release" 3 \
  "$(runs_json | python3 -c 'import json, sys; print(len(json.load(sys.stdin)))')"
