#!/usr/bin/env bash
# Gate, rollback and post-rollout hooks (stepWeight 20, maxWeight 40), with a loopback receiver
# (e2e/fixtures/receiver.py) and the load tester's gates:
# - confirm-rollout on the receiver, answering 403: the new revision waits in Waiting for two
#   intervals without being scaled up; answering 200 lets it start (event "Confirm-rollout check
#   ... passed", then "New revision detected! Scaling up");
# - confirm-traffic-increase on the load tester's /gate/check (closed): the weight stays 0 for two
#   intervals (event "Halt ... waiting for traffic increase approval"); /gate/open lets it go
#   0 → 20 → 40 and be promoted;
# - post-rollout on the receiver: one call after the promotion with Flagger's payload (name,
#   namespace, phase Succeeded, checksum, the hook's metadata);
# - a second release (6.0.2) with a rollback hook on the load tester's /rollback/check: opening it
#   (/rollback/open) at 20% rolls back at the next tick ("Rolling back ... manual webhook invoked"),
#   Failed with the primary on 6.0.1, and the post-rollout hook is called with phase Failed and
#   another checksum.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the operator reaches the loopback receiver on 127.0.0.1"
setup
start_receiver
receiver_answer /confirm-rollout 403

log "creating the Canary with confirm-rollout, confirm-traffic-increase, rollback and post-rollout hooks"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    maxWeight: 40
    stepWeight: 20
    metrics:
$(success_rate_metric)
$(load_test_hooks)
      - name: rollout-gate
        type: confirm-rollout
        url: $RECEIVER_URL/confirm-rollout
      - name: traffic-gate
        type: confirm-traffic-increase
        url: http://flagger-loadtester.$NS/gate/check
      - name: rollback-gate
        type: rollback
        url: http://flagger-loadtester.$NS/rollback/check
      - name: notify
        type: post-rollout
        url: $RECEIVER_URL/post-rollout
        metadata:
          team: e2e
EOF
expect_initialized

# ----- confirm-rollout -----------------------------------------------------------------------------
log "releasing podinfo 6.0.1; the confirm-rollout gate answers 403"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
follow_canary podinfo 60 Waiting Progressing Succeeded Failed
expect_eq "phase while confirm-rollout refuses" Waiting "$PHASE"
sleep "$((2 * $(interval_seconds)))"
expect_eq "phase after two intervals" Waiting "$(kc get canary podinfo -o jsonpath='{.status.phase}')"
expect_eq "canary replicas while waiting for approval" 0 "$(spec_replicas podinfo)"
expect_event "Halt podinfo.$NS advancement waiting for approval rollout-gate"
expect_no_event "New revision detected! Scaling up podinfo.$NS"
calls=$(receiver_count /confirm-rollout)
((calls >= 2)) || fail "confirm-rollout called $calls times; expected the first call and one per tick while Waiting"
log "ok: confirm-rollout called $calls times"
expect_contains "confirm-rollout payload phases" '"phase":"Waiting"' "$(receiver_bodies /confirm-rollout)"

# ----- confirm-traffic-increase ---------------------------------------------------------------------
receiver_answer /confirm-rollout 200
follow_canary podinfo 60 Progressing Succeeded Failed
expect_eq "phase after confirm-rollout passed" Progressing "$PHASE"
expect_event "Confirm-rollout check rollout-gate passed"
expect_event "New revision detected! Scaling up podinfo.$NS"
traffic_gate_halted() {
  [[ $(count_events "Halt podinfo.$NS advancement waiting for traffic increase approval traffic-gate") -ge 1 ]]
}
wait_for "the traffic gate to halt the release" 60 traffic_gate_halted
sleep "$((2 * $(interval_seconds)))"
expect_eq "canary weight while the traffic gate is closed" 0 "$(kc get canary podinfo -o jsonpath='{.status.canaryWeight}')"
expect_eq "VirtualService canary weight while the traffic gate is closed" 0 "$(vs_weight podinfo-canary)"
expect_eq "phase while the traffic gate is closed" Progressing "$(kc get canary podinfo -o jsonpath='{.status.phase}')"
expect_eq "post-rollout calls so far" 0 "$(receiver_count /post-rollout)"

follow_baseline podinfo
loadtester_post /gate/open "{\"name\":\"podinfo\",\"namespace\":\"$NS\"}"
follow_canary podinfo 150 Succeeded Failed
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence phases Progressing Promoting Finalising Succeeded
expect_sequence weights 0 20 40 0
expect_event "Confirm-traffic-increase check traffic-gate passed"
expect_event "Rollback hook rollback-gate not signaling a rollback"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"

# The post-rollout call: Flagger's payload, phase Succeeded.
wait_for "the post-rollout hook to be called" 20 receiver_has /post-rollout 1
expect_eq "post-rollout calls" 1 "$(receiver_count /post-rollout)"
post=$(receiver_bodies /post-rollout)
log "post-rollout payload: $post"
expect_eq "post-rollout name" podinfo "$(json_value "$post" name)"
expect_eq "post-rollout namespace" "$NS" "$(json_value "$post" namespace)"
expect_eq "post-rollout phase" Succeeded "$(json_value "$post" phase)"
expect_eq "post-rollout metadata" '{"team":"e2e"}' "$(json_value "$post" metadata)"
first_checksum=$(json_value "$post" checksum)
[[ $first_checksum =~ ^[0-9a-f]{16}$ ]] || fail "post-rollout checksum '$first_checksum' is not 16 hex digits"
log "ok: post-rollout checksum $first_checksum"
expect_eq "payload keys" "checksum metadata name namespace phase" "$(json_value "$post" @keys)"

# ----- rollback hook -------------------------------------------------------------------------------
at_twenty() {
  ! [[ $PHASE == Progressing && $WEIGHT == 20 ]]
}
log "releasing podinfo 6.0.2; the rollback gate is opened at 20%"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.2 >/dev/null
FOLLOW_HOOK=at_twenty
follow_canary podinfo 120 Promoting Succeeded Failed
FOLLOW_HOOK=""
expect_sequence phases Succeeded Progressing
expect_sequence weights 0 20
follow_baseline podinfo
loadtester_post /rollback/open "{\"name\":\"podinfo\",\"namespace\":\"$NS\"}"
follow_canary podinfo 60 Failed Succeeded
expect_eq "phase after the rollback hook" Failed "$PHASE"
expect_sequence phases Progressing Failed
expect_sequence weights 20 0
expect_event "Rollback check rollback-gate passed"
expect_event "Rolling back podinfo.$NS manual webhook invoked"
expect_eq "primary image after the rollback" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
expect_eq "VirtualService canary weight after the rollback" 0 "$(vs_weight podinfo-canary)"
wait_for "the second post-rollout call" 20 receiver_has /post-rollout 2
expect_eq "post-rollout calls" 2 "$(receiver_count /post-rollout)"
post=$(receiver_bodies /post-rollout | tail -n 1)
log "post-rollout payload: $post"
expect_eq "post-rollout phase after the rollback" Failed "$(json_value "$post" phase)"
second_checksum=$(json_value "$post" checksum)
[[ $second_checksum =~ ^[0-9a-f]{16}$ && $second_checksum != "$first_checksum" ]] ||
  fail "the rollback's post-rollout checksum '$second_checksum' should be 16 hex digits and differ from the promotion's ($first_checksum)"
log "ok: post-rollout checksum of the failed revision $second_checksum"
wait_for "podinfo scaled to zero after the rollback" 30 deployment_has_replicas podinfo 0
