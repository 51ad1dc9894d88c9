#!/usr/bin/env bash
# MetricTemplates (noData, secretRef) and AlertProviders (secretRef, severity), with a loopback
# receiver (e2e/fixtures/receiver.py) standing in for a chat service and for an authenticating
# Prometheus:
# - MetricTemplate `authed` queries http://<receiver>/prometheus, which forwards to the sandbox's
#   Prometheus; its provider has secretRef prom-auth (username/password): every query carries
#   `Authorization: Basic base64(e2e:s3cret)` and the check passes with a value;
# - MetricTemplate `quiet` queries a series that never exists. With `noData: ignore` release 6.0.1
#   passes it ("no values found ...; passed because noData is ignore") and is promoted; with
#   `noData: fail` release 6.0.2 fails it twice ("Halt advancement no values found for custom
#   metric: quiet") and is rolled back (weights 0 20 0);
# - two Slack AlertProviders whose address (and, for one, token) come from Secrets: `chat-info`
#   (alert severity info) receives every alert, with `Authorization: Bearer <token>`; `chat-error`
#   (severity error; its spec.address is a dead port, the Secret's address overrides it) receives
#   only the rollback's error alert.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the operator reaches the loopback receiver on 127.0.0.1"
setup
start_receiver

log "Secrets, MetricTemplates and AlertProviders"
create_secret prom-auth username=e2e password=s3cret
create_secret chat-info-secret address="$RECEIVER_URL/slack/info" token=t0k3n
create_secret chat-error-secret address="$RECEIVER_URL/slack/error"
kc apply -f - >/dev/null <<EOF
apiVersion: serin.dev/v1beta1
kind: MetricTemplate
metadata:
  name: authed
  namespace: $NS
spec:
  provider:
    type: prometheus
    address: $RECEIVER_URL/prometheus
    secretRef:
      name: prom-auth
  query: |
    sum(rate(istio_requests_total{reporter="destination",destination_workload_namespace="{{ namespace }}",destination_workload="{{ target }}"}[{{ interval }}]))
---
apiVersion: serin.dev/v1beta1
kind: MetricTemplate
metadata:
  name: quiet
  namespace: $NS
spec:
  provider:
    type: prometheus
    address: $PROMETHEUS_URL
  query: |
    sum(rate(serin_e2e_never_recorded_total{namespace="{{ namespace }}"}[{{ interval }}]))
---
apiVersion: serin.dev/v1beta1
kind: AlertProvider
metadata:
  name: chat-info
  namespace: $NS
spec:
  type: slack
  channel: releases
  secretRef:
    name: chat-info-secret
---
apiVersion: serin.dev/v1beta1
kind: AlertProvider
metadata:
  name: chat-error
  namespace: $NS
spec:
  type: slack
  channel: incidents
  address: http://127.0.0.1:9/the-secret-address-wins
  secretRef:
    name: chat-error-secret
EOF

log "creating the Canary (quiet with noData: ignore)"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    maxWeight: 40
    stepWeight: 20
    metrics:
$(success_rate_metric)
      - name: authed
        templateRef:
          name: authed
        thresholdRange:
          min: 0
        interval: 30s
      - name: quiet
        templateRef:
          name: quiet
        thresholdRange:
          max: 1
        interval: 30s
        noData: ignore
    alerts:
      - name: everything
        severity: info
        providerRef:
          name: chat-info
      - name: errors-only
        severity: error
        providerRef:
          name: chat-error
$(load_test_hooks)
EOF
expect_initialized

# While the analysis runs, the last results of the two template metrics in status.metricChecks.
QUIET_CHECK=""
AUTHED_CHECK=""
sample_checks() {
  if [[ $PHASE == Progressing && $WEIGHT != 0 ]]; then
    local quiet authed
    quiet=$(metric_check quiet passed value message)
    authed=$(metric_check authed passed value)
    [[ $quiet == "|"* ]] || QUIET_CHECK=$quiet
    [[ $authed == "|"* ]] || AUTHED_CHECK=$authed
  fi
  return 0
}

log "releasing podinfo 6.0.1"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
FOLLOW_HOOK=sample_checks
follow_canary podinfo 180 Succeeded Failed
FOLLOW_HOOK=""
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence phases Initialized Progressing Promoting Finalising Succeeded
expect_sequence weights 0 20 40 0
expect_eq "quiet check during the analysis (passed|value|message)" \
  "true||no values found for metric quiet; passed because noData is ignore" "$QUIET_CHECK"
[[ $AUTHED_CHECK == "true|"[0-9]* ]] || fail "authed check during the analysis: expected passed with a value, got '$AUTHED_CHECK'"
log "ok: authed check passed with a value (passed|value: $AUTHED_CHECK)"

# Every query of the `authed` template went through the receiver with the Secret's credentials.
auth=$(receiver_authorization /prometheus/api/v1/query)
queries=$(wc -l <<<"$auth")
((queries >= 2)) || fail "the authed template sent $queries queries through the receiver; expected at least 2"
expect_eq "Authorization of the authed template's queries ($queries)" "Basic $(printf e2e:s3cret | base64)" "$(sort -u <<<"$auth")"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"

# ----- noData: fail --------------------------------------------------------------------------------
log "quiet with noData: fail"
kc patch canary podinfo --type=json -p '[{"op":"replace","path":"/spec/analysis/metrics/2/noData","value":"fail"}]' >/dev/null
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.2 >/dev/null
follow_canary podinfo 180 Failed Succeeded
expect_eq "final phase" Failed "$PHASE"
expect_sequence phases Succeeded Progressing Failed
expect_sequence weights 0 20 0
expect_eq "failed checks of the quiet metric" 2 "$(count_events "Halt advancement no values found for custom metric: quiet")"
# As a cluster's recorder does, the repeat is counted on the first Event instead of adding one.
expect_eq "Events saying so" 1 "$(event_messages | grep -cxF -- "Halt advancement no values found for custom metric: quiet" || true)"
expect_event "Rolling back podinfo.$NS failed checks threshold reached 2"
expect_eq "primary image after the rollback" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
wait_for "podinfo scaled to zero after the rollback" 30 deployment_has_replicas podinfo 0

# ----- alerts --------------------------------------------------------------------------------------
# alert_texts PATH: the text of each Slack alert posted to PATH, one per line.
alert_texts() {
  receiver_bodies "$1" | python3 -c '
import json, sys
for line in sys.stdin:
    print(json.loads(line)["attachments"][0]["text"])'
}
info_alerts="New Deployment detected, initialization completed.
New revision detected, progressing canary analysis.
Canary analysis completed successfully, promotion finished.
New revision detected, progressing canary analysis.
Failed checks threshold reached 2"
wait_for "the rollback alert on chat-info" 20 receiver_has /slack/info 5
wait_for "the rollback alert on chat-error" 20 receiver_has /slack/error 1
sleep 2
expect_eq "alerts posted to chat-info (severity info: all of them)" "$info_alerts" "$(alert_texts /slack/info)"
expect_eq "alerts posted to chat-error (severity error: errors only)" "Failed checks threshold reached 2" "$(alert_texts /slack/error)"
expect_eq "Authorization of chat-info's posts" "Bearer t0k3n" "$(receiver_authorization /slack/info | sort -u)"
expect_eq "Authorization of chat-error's posts" "" "$(receiver_authorization /slack/error | sort -u)"
error_post=$(receiver_bodies /slack/error)
expect_eq "chat-error channel" incidents "$(json_value "$error_post" channel)"
expect_contains "chat-error attachment" '"author_name":"podinfo.'"$NS"'"' "$(json_value "$error_post" attachments)"
expect_contains "chat-error attachment colour" '"color":"danger"' "$(json_value "$error_post" attachments)"
expect_eq "chat-info channel" releases "$(json_value "$(receiver_bodies /slack/info | head -n 1)" channel)"

log "no Secret value leaks"
expect_no_leak s3cret t0k3n
