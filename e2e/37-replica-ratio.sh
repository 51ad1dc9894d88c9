#!/usr/bin/env bash
# A canary by replica ratio (provider kubernetes with steps: Argo Rollouts' canary without traffic
# routing), with no mesh object at all. podinfo runs 10 replicas (Flagger's manifest: maxSurge 25%,
# maxUnavailable 1, so at most 13 pods and at least 9 ready). Steps [setWeight: 41, pause: {},
# setWeight: 100]: at the pause 4 canary and 6 primary pods are ready (Argo's rounding), and real
# requests through the apex Service, which selects both sides, split about 40/60 by version. A
# watch on the pods (not polling) records every change: the window holds for the whole release.
# A second release is aborted at the pause: all 10 pods return to the primary.
# e2e: long
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the scenario reads the sandbox's data plane through its mesh proxy"
PODINFO_FIXTURE=$E2E_DIR/fixtures/flagger-podinfo.yaml
LOADTESTER_FIXTURE=$E2E_DIR/fixtures/flagger-loadtester.yaml
OPERATOR_FLAGS=(--mesh-provider kubernetes)
setup
scale_podinfo 10

apex_selector() {
  kc get service podinfo -o jsonpath='{.spec.selector}'
}

log "creating the Canary: steps [setWeight 41, pause, setWeight 100] by replica ratio"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    steps:
      - setWeight: 41
      - pause: {}
      - setWeight: 100
    metrics:
$(success_rate_metric)
$(load_test_hooks "http://podinfo.$NS:9898/")
EOF
expect_initialized
wait_for "podinfo scaled to zero" 60 deployment_has_replicas podinfo 0
expect_eq "apex Service selector after initialization" '{"app":"podinfo-primary"}' "$(apex_selector)"
expect_eq "apex label on the target's pod template" podinfo \
  "$(kc get deployment podinfo -o jsonpath='{.spec.template.metadata.labels.serin\.dev/apex}')"
expect_eq "apex label on the primary's pod template" podinfo \
  "$(kc get deployment podinfo-primary -o jsonpath='{.spec.template.metadata.labels.serin\.dev/apex}')"
expect_eq "mesh objects" "" "$(kc get virtualservices,destinationrules,httproutes -o name)"

# watch_pods FILE: follows every pod of both sides with a watch, appending after each event
# "total ready canary_ready primary_ready" to FILE; WATCH_PID is the watch's pipeline.
watch_pods() {
  : >"$1"
  (kc get pods -l serin.dev/apex=podinfo --watch --output-watch-events -o json --request-timeout=0 |
    python3 "$E2E_DIR/fixtures/pod_window.py" podinfo >>"$1") &
  WATCH_PID=$!
  wait_for "the pod watch to list the 10 primary pods" 30 grep -q '^10 10 0 10$' "$1"
}

# expect_window FILE: from the moment all 10 pods were listed, no sample had more than 13 pods
# (replicas + maxSurge 25%) nor fewer than 9 ready (replicas - maxUnavailable 1).
expect_window() {
  local summary
  summary=$(awk 'started || ($1 == 10 && $2 == 10) { started = 1; n++;
      if ($1 > max) max = $1; if (min == "" || $2 < min) min = $2 }
    END { print n + 0, max + 0, min + 0 }' "$1")
  read -r samples most fewest <<<"$summary"
  log "pod watch: $samples samples, at most $most pods, at least $fewest ready"
  ((samples > 10)) || fail "the pod watch saw only $samples changes"
  ((most <= 13)) || fail "$most pods at once, above replicas + maxSurge (13): $(sort -u "$1" | tr '\n' ';')"
  ((fewest >= 9)) || fail "only $fewest ready pods at once, below replicas - maxUnavailable (9)"
}

# stop_watch: ends this scenario's pod watch, and only it (another scenario may watch pods the same
# way beside this one).
stop_watch() {
  kill_tree "$WATCH_PID"
  wait "$WATCH_PID" 2>/dev/null || true
}

# all_on_primary: 10 primary pods ready and no canary pod left.
all_on_primary() {
  local canary_pods
  canary_pods=$(kget deployment podinfo '.status.replicas')
  [[ $(ready_replicas podinfo-primary) == 10 && ${canary_pods:-0} == 0 ]]
}

# at_pause: the Canary waits at the pause (step 2) with 4 canary and 6 primary pods ready.
at_pause() {
  [[ $(kget canary podinfo '.status.currentStepIndex') == 1 &&
    $(ready_replicas podinfo) == 4 && $(ready_replicas podinfo-primary) == 6 ]]
}

log "releasing podinfo 3.1.1"
WINDOW=$WORK/pod-window-release.txt
watch_pods "$WINDOW"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=stefanprodan/podinfo:3.1.1 >/dev/null
wait_for "the pause at 4 canary / 6 primary ready pods" 150 at_pause
expect_eq "requested weight" 41 "$(kc get canary podinfo -o jsonpath='{.status.canaryWeight}')"
expect_eq "pod split in the status" '{"canary":4,"canaryPercent":40,"primary":6}' \
  "$(kc get canary podinfo -o jsonpath='{.status.podSplit}')"
expect_eq "apex Service selects both sides" '{"serin.dev/apex":"podinfo"}' "$(apex_selector)"
expect_contains "kubectl serin get at the pause" "Pods     4 canary / 6 primary ready (40% canary" \
  "$("$TARGET_DIR/debug/kubectl-serin" -n "$NS" get podinfo)"
split=$(served_versions 200)
log "200 requests through the apex Service at the pause: $split"
[[ $split =~ ^([0-9]+)\ 3\.1\.0\ ([0-9]+)\ 3\.1\.1$ ]] || fail "versions other than 3.1.0 and 3.1.1 answered: $split"
new=${BASH_REMATCH[2]}
((new >= 60 && new <= 100)) || fail "$new of 200 requests reached the canary; 4 of 10 pods should get about 80"
expect_event "Paused podinfo.$NS at step 2/3 until promoted"

request podinfo promote
follow_canary podinfo 240 Succeeded Failed
expect_eq "final phase" Succeeded "$PHASE"
wait_for "10 primary pods ready and podinfo at zero" 60 all_on_primary
stop_watch
expect_window "$WINDOW"
expect_eq "primary image" stefanprodan/podinfo:3.1.1 "$(image_of podinfo-primary)"
expect_eq "apex Service selector after the promotion" '{"app":"podinfo-primary"}' "$(apex_selector)"
expect_eq "\"Promotion completed\" events" 1 "$(count_events "Promotion completed")"
expect_eq "failed checks" 0 "$(kc get events --field-selector reason=CheckFailed -o name | wc -l)"
expect_eq "versions answering 20 requests after the promotion" "20 3.1.1" "$(served_versions 20)"

log "releasing podinfo 3.1.2 and aborting it at the pause"
WINDOW=$WORK/pod-window-abort.txt
watch_pods "$WINDOW"
kc set image deployment/podinfo podinfod=stefanprodan/podinfo:3.1.2 >/dev/null
wait_for "the pause at 4 canary / 6 primary ready pods" 150 at_pause
request podinfo abort
follow_canary podinfo 60 Failed Succeeded
expect_eq "phase after the abort" Failed "$PHASE"
expect_event "Rolling back podinfo.$NS aborted by user"
wait_for "10 primary pods ready and podinfo at zero after the abort" 60 all_on_primary
wait_for "the apex Service back on the primary alone" 30 \
  bash -c "[[ \$(kubectl -n $NS get service podinfo -o jsonpath='{.spec.selector}') == '{\"app\":\"podinfo-primary\"}' ]]"
stop_watch
expect_window "$WINDOW"
expect_eq "primary image after the abort" stefanprodan/podinfo:3.1.1 "$(image_of podinfo-primary)"
expect_eq "versions answering 20 requests after the abort" "20 3.1.1" "$(served_versions 20)"

log "without steps: podinfo 3.1.3 rolls over like a rolling update, within the same window"
kc patch canary podinfo --type=json -p '[{"op":"remove","path":"/spec/analysis/steps"}]' >/dev/null
WINDOW=$WORK/pod-window-rolling.txt
watch_pods "$WINDOW"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=stefanprodan/podinfo:3.1.3 >/dev/null
follow_canary podinfo 240 Succeeded Failed
expect_eq "phase of the rolling release" Succeeded "$PHASE"
expect_sequence weights 0 100 0
wait_for "10 primary pods ready and podinfo at zero after the rolling release" 60 all_on_primary
stop_watch
expect_window "$WINDOW"
expect_eq "primary image after the rolling release" stefanprodan/podinfo:3.1.3 "$(image_of podinfo-primary)"
