#!/usr/bin/env bash
# Argo Rollouts' job metric in an analysis step: each measurement runs the MetricTemplate's Job in
# the Canary's namespace (the load tester image, whose shell runs the smoke test's command) and
# passes when the Job completes, fails when it fails. A release whose smoke test exits 1 is rolled
# back at the analysis step; with the test exiting 0 the next release is promoted. The operator
# runs with --allow-job-metrics (off by default), and deletes each Job once it has ended.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the Job's pod runs in the sandbox's load tester image"
OPERATOR_FLAGS=(--allow-job-metrics)
setup

log "creating the MetricTemplate smoke-test: a Job running the load tester image"
kc apply -f - >/dev/null <<EOF
apiVersion: serin.dev/v1beta1
kind: MetricTemplate
metadata:
  name: smoke-test
  namespace: $NS
spec:
  provider:
    type: job
    job:
      metadata:
        labels:
          purpose: smoke-test
      spec:
        backoffLimit: 0
        activeDeadlineSeconds: 60
        template:
          spec:
            restartPolicy: Never
            containers:
              - name: smoke
                image: ghcr.io/fluxcd/flagger-loadtester:0.34.0
                command: [sh, -c, "curl -sf http://podinfo-canary:9898/healthz && exit {{args.exit-code}}"]
EOF

# apply_job_canary EXIT_CODE: the Canary, its analysis step passing exit-code to the smoke test.
apply_job_canary() {
  apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    steps:
      - setWeight: 20
      - analysis:
          args:
            - name: exit-code
              value: "$1"
          metrics:
            - name: smoke-test
              templateRef:
                name: smoke-test
      - setWeight: 60
EOF
}
apply_job_canary 1
expect_initialized

# step_run_metric FIELD: a field of the smoke-test metric in the latest run of the analysis step.
step_run_metric() {
  kc get canary podinfo -o jsonpath='{.status.analysisRuns}' | python3 -c '
import json, sys
run = [r for r in json.load(sys.stdin) if r.get("step") == 1][-1]
metric = next(m for m in run["metrics"] if m["name"] == "smoke-test")
print(metric["measurements"][-1].get(sys.argv[1], ""))' "$1"
}
jobs_left() { kc get jobs -l serin.dev/canary=podinfo -o name | wc -l; }

log "releasing podinfo 6.0.1 with a smoke test that exits 1"
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
follow_canary podinfo 120 Failed Succeeded
expect_eq "phase after the failing smoke test" Failed "$PHASE"
expect_event 'metric "smoke-test" assessed Failed due to failed (1) > failureLimit (0)'
expect_eq "the measurement" Failed "$(step_run_metric phase)"
expect_contains "why it failed" "failed: Job has reached the specified backoff limit" "$(step_run_metric message)"
[[ " $(followed_values weights) " != *" 60 "* ]] || fail "the release went past the analysis: $(followed_values weights)"
wait_for "the smoke test's Job to be deleted" 30 test "$(jobs_left)" -eq 0
expect_eq "primary image (never promoted)" ghcr.io/stefanprodan/podinfo:6.0.0 "$(image_of podinfo-primary)"

log "releasing podinfo 6.0.2 with a smoke test that exits 0"
apply_job_canary 0
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.2 >/dev/null
follow_canary podinfo 150 Succeeded Failed
expect_eq "phase after the passing smoke test" Succeeded "$PHASE"
# The smoke test ends within a moment, so 20% may last less than one poll of the follower.
expect_sequence_includes weights 60
expect_event "Step 2/3 completed (analysis: smoke-test)"
expect_eq "the measurement" "Successful Complete" "$(step_run_metric phase) $(step_run_metric value)"
wait_for "the smoke test's Job to be deleted" 30 test "$(jobs_left)" -eq 0
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.2 "$(image_of podinfo-primary)"
