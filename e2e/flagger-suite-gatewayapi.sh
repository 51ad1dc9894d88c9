#!/usr/bin/env bash
# (sandbox; `make flagger-suites`, not in `make test`: about 12 minutes) Flagger's whole Gateway
# API e2e suite as its test/gatewayapi/run.sh runs it, each script as written, against Flagger's
# own chart with Serin's image and meshProvider gatewayapi:v1: test-canary.sh, test-bg.sh,
# test-ab.sh and test-session-affinity.sh, after test/workloads/init.sh. The Gateway
# istio-ingress/gateway is the one its install.sh creates; the session-affinity script runs
# test/verify_session_affinity.go with Go and forwards localhost:8888 to the Gateway's Service.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox
command -v go >/dev/null || fail "Flagger's session-affinity script runs a Go program: apt-get install golang-go"
build
SANDBOX_NODES=1
start_sandbox
create_flagger_gateway
install_flagger_chart --set crd.create=false --set prometheus.install=false --set meshProvider=gatewayapi:v1
export GOCACHE=$WORK/go-cache
run_flagger_script test/workloads/init.sh
for script in test-canary test-bg test-ab test-session-affinity; do
  run_flagger_script "test/gatewayapi/$script.sh"
done
log "PASS"
