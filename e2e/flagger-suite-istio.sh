#!/usr/bin/env bash
# (sandbox; `make flagger-suites`, not in `make test`: about 15 minutes) Flagger's whole Istio e2e
# suite as its test/istio/run.sh runs it, each script as written, against Flagger's own chart with
# Serin's image in istio-system: test-canary.sh (canary with gRPC and HTTP acceptance tests,
# blue/green, A/B by cookie, deletion with revertOnDeletion, revert), test-skip-analysis.sh,
# test-delegation.sh and test-session-affinity.sh, each after test/workloads/init.sh. The sandbox
# has one node, as the kind cluster the scripts were written for; the session-affinity script runs
# test/verify_session_affinity.go with Go and forwards localhost:8080 to the ingress gateway.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox
command -v go >/dev/null || fail "Flagger's session-affinity script runs a Go program: apt-get install golang-go"
build
SANDBOX_NODES=1
start_sandbox
FLAGGER_NAMESPACE=istio-system
install_flagger_chart
export GOCACHE=$WORK/go-cache
for script in test-canary test-skip-analysis test-delegation test-session-affinity; do
  run_flagger_script test/workloads/init.sh
  run_flagger_script "test/istio/$script.sh"
done
log "PASS"
