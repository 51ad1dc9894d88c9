#!/usr/bin/env bash
# (sandbox) Flagger's own Helm chart, with Serin's image in place of Flagger's, and Flagger's own
# Kubernetes e2e script (test/kubernetes/test-deployment.sh: blue/green of podinfo behind a Service
# it made itself, gates, acceptance test, load test and builtin metrics) run as written, after
# Flagger's test/workloads/init.sh (fixtures/flagger).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox
build
start_sandbox
# Flagger's own Kubernetes install passes -include-label-prefix=app.kubernetes.io (its
# kustomize/kubernetes); the chart's value does the same.
install_flagger_chart --set includeLabelPrefix=app.kubernetes.io
expect_contains "operator log" "watching Canaries of flagger.app/v1beta1 in all namespaces" \
  "$(kubectl -n flagger-system logs deploy/flagger)"
run_flagger_script test/workloads/init.sh
run_flagger_script test/kubernetes/test-deployment.sh
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
# The tracked Secret's checksum is the one Flagger computes (the first 8 bytes of the sha256 of the
# JSON of its data, {"value":"czNjcjN0"}), so Flagger started again finds its own.
expect_eq "trackedConfigs of podinfo-secret" "$(printf '{"value":"czNjcjN0"}' | sha256sum | cut -c1-16)" \
  "$(kc get canary podinfo -o jsonpath='{.status.trackedConfigs.secret/podinfo-secret}')"
log "PASS"
