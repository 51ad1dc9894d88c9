#!/usr/bin/env bash
# (sandbox) Flagger's own Helm chart in istio-system, where Flagger's Istio tests install it, with
# Serin's image in place of Flagger's, and Flagger's own Istio e2e script
# test/istio/test-skip-analysis.sh run as written after test/workloads/init.sh (fixtures/flagger):
# skipAnalysis promotes 6.0.1 at once, and a version whose image never runs fails at the progress
# deadline while the primary keeps serving. The load tester's grpc_health_probe reaches podinfo's gRPC
# health service.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox
build
start_sandbox
FLAGGER_NAMESPACE=istio-system
install_flagger_chart
run_flagger_script test/workloads/init.sh
run_flagger_script test/istio/test-skip-analysis.sh
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
expect_eq "phase" Failed "$(kc get canary podinfo -o jsonpath='{.status.phase}')"
# Flagger's Istio test-canary.sh checks podinfo's gRPC port with grpc_health_probe from its load
# tester: the Service's discovered port 9999 reaches the primary's health service through the mesh.
expect_eq "grpc_health_probe of podinfo:9999" "status: SERVING" \
  "$(kubectl -n test exec deploy/flagger-loadtester -- grpc_health_probe -connect-timeout=1s -addr=podinfo:9999 2>&1)"
code=0
unknown=$(kubectl -n test exec deploy/flagger-loadtester -- grpc_health_probe -addr=podinfo:9999 -service=billing 2>&1) || code=$?
expect_contains "an unknown gRPC service" "rpc error: code = NotFound desc = unknown service" "$unknown"
expect_eq "grpc_health_probe's exit code for a failed call" 3 "$code"
log "PASS"
