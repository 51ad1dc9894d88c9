#!/usr/bin/env bash
# (sandbox) Flagger's own Helm chart in istio-system, where Flagger's Istio tests install it, with
# Serin's image in place of Flagger's, and Flagger's own Istio e2e script
# test/istio/test-skip-analysis.sh run as written after test/workloads/init.sh (fixtures/flagger):
# skipAnalysis promotes 6.0.1 at once, and a version whose image never runs fails at the progress
# deadline while the primary keeps serving.
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
log "PASS"
