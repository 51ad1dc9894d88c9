#!/usr/bin/env bash
# (sandbox) Serin in place of Flagger: Flagger's own CRDs (fixtures/flagger-crds.yaml, whose status
# schema prunes every field Flagger does not declare), the operator started as `flagger` with the
# Go-style flags Flagger's chart passes, a flagger.app/v1beta1 Canary and Flagger's global Slack
# alerts. Then the takeover: with the operator stopped, the Canary is left as Flagger leaves a
# release in flight (6.0.1 on the canary at weight 30, 2 iterations, a failed check, Flagger's own
# revision hashes, no Serin field); started again, the operator goes on at 40 and 50 and promotes,
# and writes back Flagger's hash for the template it promoted. A Canary Flagger left Succeeded is
# not released again.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox
API_GROUP=flagger.app
# Flagger's chart runs ./flagger: the same binary under Flagger's name.
ln -s "$OPERATOR_BIN" "$WORK/flagger"
OPERATOR_BIN=$WORK/flagger
OPERATOR_FLAGS=(-log-level=info -mesh-provider=istio -enable-config-tracking=true -slack-user=flagger
  -include-label-prefix=app.kubernetes.io)
build
start_sandbox
start_receiver
OPERATOR_FLAGS+=(-slack-url="$RECEIVER_URL/slack" -slack-channel=general)
install_crds
start_operator "${OPERATOR_FLAGS[@]}"
deploy_workloads
expect_contains "operator log" "watching Canaries of flagger.app/v1beta1 in $NS" "$(cat "$WORK/operator.log")"

kc apply -f - >/dev/null <<EOF
apiVersion: flagger.app/v1beta1
kind: Canary
metadata:
  name: podinfo
  namespace: $NS
spec:
  targetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: podinfo
  progressDeadlineSeconds: 60
  revertOnDeletion: true
  service:
    port: 9898
    portDiscovery: true
    apex:
      annotations:
        test: annotations-test
        team: release-bot
    unmanagedMetadata:
      annotations: [team]
  analysis:
    interval: $INTERVAL
    threshold: 5
    maxWeight: 50
    stepWeight: 10
    webhooks:
      - name: load-test
        url: http://flagger-loadtester.$NS/
        timeout: 5s
        metadata:
          type: cmd
          cmd: "hey -z 1m -q 10 -c 2 http://podinfo-canary.$NS:9898/"
EOF
expect_initialized
wait_for "Flagger's finalizer on the Canary" 20 \
  bash -c "kubectl -n $NS get canary podinfo -o jsonpath='{.metadata.finalizers}' | grep -q finalizer.flagger.app"
expect_eq "apex annotation test" annotations-test "$(kc get service podinfo -o jsonpath='{.metadata.annotations.test}')"
expect_eq "apex annotation team (unmanaged: never set)" "" "$(kc get service podinfo -o jsonpath='{.metadata.annotations.team}')"
kc annotate service podinfo team=platform >/dev/null
status_keys() { kc get canary podinfo -o json | python3 -c 'import json,sys; print(" ".join(sorted(json.load(sys.stdin)["status"])))'; }
expect_eq "status fields (Flagger's only)" \
  "canaryWeight conditions failedChecks iterations lastAppliedSpec lastPromotedSpec lastTransitionTime phase trackedConfigs" \
  "$(status_keys)"
expect_contains "Serin's own fields, in the status annotation" '"statusDigest"' \
  "$(kc get canary podinfo -o jsonpath='{.metadata.annotations.serin\.dev/status}')"
# The sandbox prunes as a cluster does: a field Flagger's schema does not declare is dropped.
kc patch canary podinfo --subresource=status --type=merge -p '{"status":{"currentStepIndex":1}}' >/dev/null
expect_eq "a field Flagger does not declare, written by hand" "" \
  "$(kc get canary podinfo -o jsonpath='{.status.currentStepIndex}')"
wait_for "the initialization alert on the operator's Slack webhook" 20 receiver_has /slack 1
slack=$(receiver_bodies /slack | head -n 1)
expect_eq "Slack channel" general "$(json_value "$slack" channel)"
expect_eq "Slack user" flagger "$(json_value "$slack" username)"
expect_contains "Slack alert" "initialization completed" "$slack"
metrics=$(curl -sf --noproxy '*' "http://$OPERATOR_ADMIN/metrics")
expect_contains "/metrics under Flagger's names" "flagger_canary_status{name=\"podinfo\",namespace=\"$NS\"} 1" "$metrics"
expect_contains "/metrics under Flagger's names" 'flagger_info{version=' "$metrics"

log "stopping the operator; the Canary is left as Flagger leaves a release at weight 30"
stop_process "$OPERATOR_PID" operator
OPERATOR_PID=""
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
kc scale deployment podinfo --replicas=1 >/dev/null
kc rollout status deploy/podinfo --timeout=60s >/dev/null
kc patch virtualservice podinfo --type=json -p '[
  {"op": "replace", "path": "/spec/http/0/route/0/weight", "value": 70},
  {"op": "replace", "path": "/spec/http/0/route/1/weight", "value": 30}]' >/dev/null
expect_eq "VirtualService canary weight as Flagger left it" 30 "$(vs_weight podinfo-canary)"
promoted=$(kc get canary podinfo -o jsonpath='{.status.lastTransitionTime}')
# Flagger's status at that point (pkg/controller/scheduler.go: SyncStatus with Progressing, then
# SetStatusWeight and SetStatusIterations; its hashes are ten characters of k8s' SafeEncodeString
# alphabet) and no Serin annotation.
kc annotate canary podinfo serin.dev/status- >/dev/null
kc patch canary podinfo --subresource=status --type=merge -p "{\"status\": {
  \"phase\": \"Progressing\", \"canaryWeight\": 30, \"iterations\": 2, \"failedChecks\": 1,
  \"lastAppliedSpec\": \"84c4d8b7c9\", \"lastPromotedSpec\": \"5d4b8f6c7z\",
  \"lastTransitionTime\": \"$promoted\",
  \"conditions\": [{\"type\": \"Promoted\", \"status\": \"Unknown\", \"reason\": \"Progressing\",
    \"message\": \"New revision detected, progressing canary analysis.\",
    \"lastUpdateTime\": \"$promoted\", \"lastTransitionTime\": \"$promoted\"}]}}" >/dev/null

log "starting the operator again"
follow_baseline podinfo
start_operator "${OPERATOR_FLAGS[@]}"
follow_canary podinfo 120 Succeeded Failed
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence weights 30 40 50 0
expect_sequence phases Progressing Promoting Finalising Succeeded
expect_no_event "New revision detected"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
wait_for "podinfo scaled to zero after the promotion" 30 deployment_has_replicas podinfo 0
expect_eq "lastAppliedSpec, as Flagger computed it for 6.0.1" 84c4d8b7c9 \
  "$(kc get canary podinfo -o jsonpath='{.status.lastAppliedSpec}')"
expect_eq "lastPromotedSpec, as Flagger computed it for 6.0.1" 84c4d8b7c9 \
  "$(kc get canary podinfo -o jsonpath='{.status.lastPromotedSpec}')"
expect_eq "status fields (Flagger's only)" \
  "canaryWeight conditions failedChecks iterations lastAppliedSpec lastPromotedSpec lastTransitionTime phase trackedConfigs" \
  "$(status_keys)"
expect_contains "kubectl serin get under Flagger's group" "Succeeded" \
  "$(SERIN_API_GROUP=flagger.app "$SERIN_BIN" get podinfo -n "$NS")"
expect_eq "apex annotation team, as its owner set it" platform "$(kc get service podinfo -o jsonpath='{.metadata.annotations.team}')"
wait_for "the promotion alert on the operator's Slack webhook" 20 \
  bash -c "python3 '$E2E_DIR/fixtures/receiver.py' bodies '$RECEIVER_DIR' /slack | grep -q 'promotion finished'"

log "a Canary Flagger left Succeeded, taken over, is not released again"
stop_process "$OPERATOR_PID" operator
OPERATOR_PID=""
kc annotate canary podinfo serin.dev/status- >/dev/null
kc patch canary podinfo --subresource=status --type=merge \
  -p '{"status": {"lastAppliedSpec": "7bcd5f9d6x", "lastPromotedSpec": "7bcd5f9d6x"}}' >/dev/null
events_before=$(events_recorded)
start_operator "${OPERATOR_FLAGS[@]}"
wait_for "the operator to write its annotation beside Flagger's status" 20 \
  bash -c "kubectl -n $NS get canary podinfo -o jsonpath='{.metadata.annotations.serin\.dev/status}' | grep -q statusDigest"
expect_eq "phase" Succeeded "$(kc get canary podinfo -o jsonpath='{.status.phase}')"
expect_eq "lastAppliedSpec kept" 7bcd5f9d6x "$(kc get canary podinfo -o jsonpath='{.status.lastAppliedSpec}')"
expect_eq "podinfo replicas" 0 "$(spec_replicas podinfo)"
expect_eq "events since the takeover" "$events_before" "$(events_recorded)"

log "deleting the Canary: Flagger's finalizer gives podinfo its replicas back"
kc delete canary podinfo --wait=false >/dev/null
wait_for "podinfo scaled back to 1 replica" 60 deployment_has_replicas podinfo 1
wait_for "the Canary gone" 30 bash -c "! kubectl -n $NS get canary podinfo 2>/dev/null"
log "PASS"
