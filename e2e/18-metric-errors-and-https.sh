#!/usr/bin/env bash
# What a MetricTemplate's query can go wrong with, and an https Prometheus, through the real
# operator. One Canary, three releases, each analysed by one template metric (threshold 1):
# - 6.0.1 with `broken` (bad PromQL): the check fails with Prometheus' own parse error ("Metric query
#   failed for broken: Prometheus could not run the query (bad_data: ..."), a Warning event, and the
#   release is rolled back;
# - 6.0.2 with `absent` (a series nobody exports): the check fails as no data ("Halt advancement no
#   values found for custom metric: absent") — a different message — and is rolled back;
# - 6.0.3 with `secured`: a second Prometheus serving https with a self-signed certificate and basic
#   auth, reached with provider.insecureSkipVerify and the username/password of a Secret applied as
#   YAML; the check passes and the release is promoted.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the operator reaches a second Prometheus on 127.0.0.1"
setup
start_https_prometheus

log "the Secret and the MetricTemplates"
kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Secret
metadata:
  name: prom-tls-auth
  namespace: $NS
type: Opaque
stringData:
  username: serin
  password: serin-test-password
---
apiVersion: serin.dev/v1beta1
kind: MetricTemplate
metadata:
  name: broken
  namespace: $NS
spec:
  provider:
    type: prometheus
    address: $PROMETHEUS_URL
  query: |
    sum(rate(istio_requests_total{destination_workload_namespace="{{ namespace }}"}[{{ interval }}]
---
apiVersion: serin.dev/v1beta1
kind: MetricTemplate
metadata:
  name: absent
  namespace: $NS
spec:
  provider:
    type: prometheus
    address: $PROMETHEUS_URL
  query: |
    sum(rate(serin_e2e_never_recorded_total{namespace="{{ namespace }}"}[{{ interval }}]))
---
apiVersion: serin.dev/v1beta1
kind: MetricTemplate
metadata:
  name: secured
  namespace: $NS
spec:
  provider:
    type: prometheus
    address: $HTTPS_PROMETHEUS_URL
    insecureSkipVerify: true
    secretRef:
      name: prom-tls-auth
  query: |
    vector(1)
EOF

# analysed_by METRIC: the Canary, analysed by the one template metric METRIC.
analysed_by() {
  apply_canary <<EOF
    interval: $INTERVAL
    threshold: 1
    maxWeight: 20
    stepWeight: 20
    metrics:
      - name: $1
        templateRef:
          name: $1
        thresholdRange:
          min: 1
        interval: 30s
EOF
}

# warnings: the messages of the namespace's Warning events, one per line.
warnings() {
  kc get events -o jsonpath='{range .items[?(@.type=="Warning")]}{.message}{"\n"}{end}'
}

# release VERSION METRIC UNTIL...: analyses VERSION with METRIC until one of the phases UNTIL.
release() {
  log "releasing podinfo $1, analysed by $2"
  analysed_by "$2"
  follow_baseline podinfo
  kc set image deployment/podinfo "podinfod=ghcr.io/stefanprodan/podinfo:$1" >/dev/null
  shift 2
  follow_canary podinfo 180 "$@"
}

log "creating the Canary"
analysed_by secured
expect_initialized

release 6.0.1 broken Failed Succeeded
expect_eq "final phase (bad PromQL)" Failed "$PHASE"
broken=$(warnings | grep -F "Metric query failed for broken: " | head -n 1 || true)
expect_contains "Warning event of the bad query" "Prometheus could not run the query (bad_data: " "$broken"
expect_contains "Warning event of the bad query" "parse error" "$broken"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.0 "$(image_of podinfo-primary)"
wait_for "podinfo scaled to zero after the rollback" 30 deployment_has_replicas podinfo 0

release 6.0.2 absent Failed Succeeded
expect_eq "final phase (no data)" Failed "$PHASE"
expect_contains "Warning events of the no-data query" \
  "Halt advancement no values found for custom metric: absent" "$(warnings)"
expect_no_event "Metric query failed for absent"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.0 "$(image_of podinfo-primary)"
wait_for "podinfo scaled to zero after the rollback" 30 deployment_has_replicas podinfo 0

release 6.0.3 secured Succeeded Failed
expect_eq "final phase (https Prometheus)" Succeeded "$PHASE"
expect_sequence weights 0 20 0
expect_no_event "Metric query failed for secured"
expect_no_event "no values found for custom metric: secured"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.3 "$(image_of podinfo-primary)"

log "no Secret value leaks"
expect_no_leak serin-test-password
