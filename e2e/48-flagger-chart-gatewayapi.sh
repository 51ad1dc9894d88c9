#!/usr/bin/env bash
# (sandbox) Flagger's own Helm chart with Serin's image in place of Flagger's and the Gateway API
# provider, as Flagger's test/gatewayapi/install.sh installs it (with its Gateway istio-ingress/
# gateway), and Flagger's own test/gatewayapi/test-bg.sh run as written after
# test/workloads/init.sh (fixtures/flagger): blue/green through an HTTPRoute, with a MetricTemplate
# on podinfo's own request durations, a smoke test and a load test.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox
build
start_sandbox
# What Flagger's install.sh creates besides Istio and its Prometheus (which the sandbox stands in for).
create_flagger_gateway
install_flagger_chart --set crd.create=false --set prometheus.install=false --set meshProvider=gatewayapi:v1
run_flagger_script test/workloads/init.sh
run_flagger_script test/gatewayapi/test-bg.sh
# The script deletes its Canary (and with it the primary) at the end; the Events stay.
expect_contains "events of bg-test" "Promotion completed! Scaling down podinfo.bg-test" \
  "$(kubectl -n bg-test get events -o jsonpath='{range .items[*]}{.message}{"\n"}{end}')"
log "PASS"
