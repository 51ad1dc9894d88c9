#!/usr/bin/env bash
# Releases judged by two providers besides Prometheus at once: a Graphite metric read from a real
# Graphite (Debian's carbon-cache and graphite-web, fed with points over carbon's plaintext
# protocol) and a Datadog metric read from a loopback server that answers as Datadog's metrics query
# API documents (fixtures/datadog_api.py). Both templates take their credentials from Secrets:
# graphite-web answers only requests with its basic authentication, the stand-in only requests with
# both Datadog keys. A third metric is a Keptn KeptnMetric, served by the sandbox from Keptn's
# published CRDs (fixtures/keptn) and read by the operator through the Kubernetes API. A healthy
# version (errors 0 in Graphite, 0.5% in Datadog, 99.9% availability in Keptn) is promoted; a version with a 9% Datadog error
# rate, and then one with 12 errors in Graphite, each fail that check twice and are rolled back. Datadog received the query with a ten-interval window and both
# key headers; Graphite's render API answered the values the checks recorded.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the operator reaches Graphite and the Datadog stand-in on 127.0.0.1"
require_graphite
setup
start_graphite
start_datadog_api

log "Keptn's metrics CRDs and a KeptnMetric whose value Keptn's metrics operator would write"
kc apply -f "$E2E_DIR/fixtures/keptn/metrics.keptn.sh_keptnmetrics.yaml" >/dev/null
kc wait --for=condition=Established crd/keptnmetrics.metrics.keptn.sh >/dev/null
kc apply -f - >/dev/null <<EOF
apiVersion: metrics.keptn.sh/v1beta1
kind: KeptnMetric
metadata:
  name: podinfo-availability
  namespace: $NS
spec:
  provider:
    name: prometheus
  query: 100 * avg(up{job="podinfo"})
  fetchIntervalSeconds: 10
EOF
kc patch keptnmetric podinfo-availability --subresource=status --type=merge \
  -p '{"status":{"value":"99.9","rawValue":"OTkuOQ=="}}' >/dev/null

log "Secrets and MetricTemplates for Graphite, Datadog and Keptn"
create_secret datadog datadog_api_key=api-k3y datadog_application_key=app-k3y
create_secret graphite-auth username=e2e password=gr4phite
printf api-k3y >"$DATADOG_DIR/api_key"
printf app-k3y >"$DATADOG_DIR/application_key"
kc apply -f - >/dev/null <<EOF
apiVersion: serin.dev/v1beta1
kind: MetricTemplate
metadata:
  name: graphite-errors
  namespace: $NS
spec:
  provider:
    type: graphite
    address: $GRAPHITE_URL
    secretRef:
      name: graphite-auth
  query: target=sumSeries(podinfo.{{ namespace }}.{{ target }}.errors)&from=-30s
---
apiVersion: serin.dev/v1beta1
kind: MetricTemplate
metadata:
  name: datadog-error-rate
  namespace: $NS
spec:
  provider:
    type: datadog
    address: $DATADOG_URL
    secretRef:
      name: datadog
  query: "100 * sum:trace.http.request.errors{service:{{ target }},env:{{ namespace }}}.as_count() / sum:trace.http.request.hits{service:{{ target }},env:{{ namespace }}}.as_count()"
---
apiVersion: serin.dev/v1beta1
kind: MetricTemplate
metadata:
  name: keptn-availability
  namespace: $NS
spec:
  provider:
    type: keptn
  query: keptnmetric/{{ namespace }}/{{ target }}-availability
EOF

# Points for the canary's errors, one a second while a release runs (bounded by feed_graphite).
set_errors() { printf '%s' "$1" >"$WORK/graphite-errors"; printf '%s' "$2" >"$DATADOG_DIR/value"; }
set_errors 0 0.5
feed_graphite "podinfo.$NS.podinfo.errors" "$WORK/graphite-errors" 600

log "creating the Canary: a Graphite, a Datadog and a Keptn metric"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    maxWeight: 40
    stepWeight: 20
    metrics:
      - name: graphite-errors
        templateRef:
          name: graphite-errors
        thresholdRange:
          max: 1
        interval: 30s
      - name: datadog-error-rate
        templateRef:
          name: datadog-error-rate
        thresholdRange:
          max: 5
        interval: 1m
      - name: keptn-availability
        templateRef:
          name: keptn-availability
        thresholdRange:
          min: 99
        interval: 1m
$(load_test_hooks)
EOF
expect_initialized

CHECKS=""
sample_checks() {
  if [[ $PHASE == Progressing && $WEIGHT != 0 && -z $CHECKS ]]; then
    local graphite datadog keptn
    graphite=$(metric_check graphite-errors passed value)
    datadog=$(metric_check datadog-error-rate passed value)
    keptn=$(metric_check keptn-availability passed value)
    [[ $graphite == "|"* || $datadog == "|"* || $keptn == "|"* ]] ||
      CHECKS="graphite $graphite, datadog $datadog, keptn $keptn"
  fi
  return 0
}

log "releasing podinfo 6.0.1 (Graphite errors 0, Datadog error rate 0.5%, Keptn availability 99.9%)"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
FOLLOW_HOOK=sample_checks
follow_canary podinfo 180 Succeeded Failed
FOLLOW_HOOK=""
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence weights 0 20 40 0
expect_eq "checks during the analysis (passed|value)" "graphite true|0, datadog true|0.5, keptn true|99.9" "$CHECKS"

# What Datadog received: its query path, the rendered query, a window of ten 1m intervals, both keys.
datadog_request=$(tail -n 1 "$DATADOG_DIR/requests.jsonl")
expect_eq "Datadog request (path, query, window, keys)" \
  "/api/v1/query|100 * sum:trace.http.request.errors{service:podinfo,env:$NS}.as_count() / sum:trace.http.request.hits{service:podinfo,env:$NS}.as_count()|600|True True" \
  "$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); p=r["params"]; print("%s|%s|%d|%s %s" % (r["path"], p["query"], int(p["to"])-int(p["from"]), r["keys_match"]["DD-API-KEY"], r["keys_match"]["DD-APPLICATION-KEY"]))' "$datadog_request")"

# A faulty version fails on each provider alone: checks stop at the first failing metric of a tick,
# as in Flagger, so each release below is judged by one of them.
rollback_on() { # VERSION GRAPHITE_ERRORS DATADOG_RATE HALT_MESSAGE
  log "releasing podinfo $1 (Graphite errors $2, Datadog error rate $3%)"
  set_errors "$2" "$3"
  follow_baseline podinfo
  kc set image deployment/podinfo podinfod="ghcr.io/stefanprodan/podinfo:$1" >/dev/null
  follow_canary podinfo 180 Failed Succeeded
  expect_eq "final phase of $1" Failed "$PHASE"
  expect_sequence weights 0 20 0
  expect_eq "failed checks of $1 ($4)" 2 "$(count_events "$4")"
  expect_eq "primary image after the rollback of $1" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
}
rollback_on 6.0.2 0 9 "Halt podinfo.$NS advancement datadog-error-rate 9.00 > 5"
rollback_on 6.0.3 12 0.5 "Halt podinfo.$NS advancement graphite-errors 12.00 > 1"
log "PASS"
