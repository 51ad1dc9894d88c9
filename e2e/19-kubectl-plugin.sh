#!/usr/bin/env bash
# The kubectl plugin: with kubectl-serin on the PATH, `kubectl serin` lints manifests, lists and shows
# Canaries (`get NAME --watch` redraws in place in a real terminal, driven with tmux), and steers
# releases: status --watch exits 0 once a new Canary is Initialized and for a promoted release, 1 for
# a failed one and 2 on timeout;
# promote leaves a pause; restart runs the analysis again; abort rolls a running release back; pause
# and resume suspend; status exits 3 for an invalid Canary. `kubectl wait` reads the Ready and
# Stalled conditions.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup

PLUGINS=$WORK/plugins
mkdir -p "$PLUGINS"
ln -s "$TARGET_DIR/debug/kubectl-serin" "$PLUGINS/kubectl-serin"
export PATH=$PLUGINS:$PATH
ks() { kubectl serin -n "$NS" "$@"; }

# run_status ARGS...: runs `kubectl serin status`, keeping its output in STATUS_OUT and its exit code
# in STATUS_RC (a non-zero code must not end the scenario).
run_status() {
  STATUS_RC=0
  STATUS_OUT=$(ks status "$@" 2>&1) || STATUS_RC=$?
  quote "$STATUS_OUT"
}

log "kubectl serin lint"
lint_ok=$(kubectl serin lint "$REPO_DIR"/artifacts/examples/*.yaml)
expect_contains "lint of the examples" "Canary manifest(s) valid" "$lint_ok"
lint_rc=0
lint_bad=$(kubectl serin lint "$REPO_DIR/artifacts/examples/broken/canary-broken.yaml") || lint_rc=$?
expect_eq "lint exit code for a broken manifest" 1 "$lint_rc"
expect_contains "lint of a broken manifest" "canary-broken.yaml: Canary podinfo-broken: spec.provider: unknown provider" "$lint_bad"

log "creating the Canary with steps (20%, a pause, 40%)"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    steps:
      - setWeight: 20
      - pause: {}
      - setWeight: 40
    metrics:
$(success_rate_metric)
$(load_test_hooks)
EOF
# The first pipeline a user writes: apply, then follow; a new Canary settles once Initialized.
run_status podinfo --watch --timeout 2m
expect_eq "status --watch exit code right after a new Canary is applied" 0 "$STATUS_RC"
expect_contains "status --watch after the first deploy" "Initialized" "$STATUS_OUT"
expect_eq "phase once status --watch ended" Initialized "$(kc get canary podinfo -o jsonpath='{.status.phase}')"
listed=$(ks list)
quote "$listed"
expect_contains "kubectl serin list" "podinfo   Initialized" "$listed"

paused() { [[ $(kget canary podinfo '"\(.status.phase)/\(.status.currentStepIndex)"') == Progressing/1 ]]; }

log "releasing podinfo 6.0.1; it stops at the pause"
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
wait_for "the release to reach the pause" 90 paused
shown=$(ks get podinfo)
quote "$shown"
expect_contains "kubectl serin get podinfo" "Canary   $NS/podinfo   Progressing   weight 20%" "$shown"
expect_contains "kubectl serin get podinfo: the current step" '20% > [pause] > 40%' "$shown"
expect_contains "kubectl serin get podinfo: the images" "podinfo ghcr.io/stefanprodan/podinfo:6.0.1 (canary)" "$shown"
expect_contains "kubectl serin get podinfo: the metric against its range" "request-success-rate" "$shown"

log "kubectl serin get podinfo --watch in a terminal (tmux)"
TMUX_SOCKET=serin-e2e-$$
CLEANUP_HOOKS+=('tmux -L "$TMUX_SOCKET" kill-server >/dev/null 2>&1')
tmux -L "$TMUX_SOCKET" -f /dev/null new-session -d -s watch -x 160 -y 40 \
  "env KUBECONFIG='$KUBECONFIG' PATH='$PATH' kubectl serin -n '$NS' get podinfo --watch; sleep 600"
screen() { tmux -L "$TMUX_SOCKET" capture-pane -p -t watch; }
screen_shows() { screen | grep -qF -- "$1"; }
wait_for "the watch to draw the pause" 20 screen_shows '[pause]'
quote "$(screen)"

run_status podinfo --watch --timeout 5s
expect_eq "status --watch exit code on timeout" 2 "$STATUS_RC"
promoted=$(ks promote podinfo)
quote "$promoted"
expect_contains "kubectl serin promote" "promote requested for podinfo" "$promoted"
expect_contains "kubectl serin promote: the operator's answer" "RequestHandled" "$promoted"
run_status podinfo --watch --timeout 3m
expect_eq "status --watch exit code for a promoted release" 0 "$STATUS_RC"
expect_contains "status --watch" "Succeeded" "$STATUS_OUT"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
kubectl wait "canary/podinfo" -n "$NS" --for=condition=Ready --timeout=30s >/dev/null ||
  fail "kubectl wait --for=condition=Ready did not return for a promoted Canary"
wait_for "the watch to redraw the promotion" 20 screen_shows "Succeeded"
drawn=$(screen)
quote "$drawn"
expect_eq "release headers on the terminal (redrawn in place, not appended)" 1 "$(grep -c '^Canary ' <<<"$drawn")"
expect_contains "the redrawn release" "Canary   $NS/podinfo   Succeeded   weight 0%" "$drawn"
tmux -L "$TMUX_SOCKET" kill-server
as_yaml=$(ks get podinfo -o yaml)
expect_contains "kubectl serin get -o yaml" "phase: Succeeded" "$as_yaml"
expect_contains "kubectl serin get -o yaml: the Ready condition" "type: Ready" "$as_yaml"

log "restarting the analysis of podinfo 6.0.1"
restarted=$(ks restart podinfo)
quote "$restarted"
expect_contains "kubectl serin restart: the operator's answer" \
  "RequestHandled: Restart requested: running the analysis of podinfo.$NS's current revision again" "$restarted"
wait_for "the restarted analysis to reach the pause" 90 paused
expect_eq "Reconciling while the analysis runs again" True \
  "$(kc get canary podinfo -o jsonpath='{.status.conditions[?(@.type=="Reconciling")].status}')"

log "releasing podinfo 6.0.2 during the pause; aborting it at the pause"
applied_before=$(kc get canary podinfo -o jsonpath='{.status.lastAppliedSpec}')
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.2 >/dev/null
new_revision_applied() { [[ $(kc get canary podinfo -o jsonpath='{.status.lastAppliedSpec}') != "$applied_before" ]]; }
wait_for "the operator to restart the analysis for 6.0.2" 60 new_revision_applied
wait_for "the release to reach the pause" 90 paused
aborted=$(ks abort podinfo)
quote "$aborted"
expect_contains "kubectl serin abort: the operator's answer" "RolledBack: Rolling back podinfo.$NS aborted by user" "$aborted"
run_status podinfo --watch --timeout 3m
expect_eq "status --watch exit code for an aborted release" 1 "$STATUS_RC"
expect_contains "status --watch" "Failed" "$STATUS_OUT"
expect_eq "primary image after the abort" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
kubectl wait "canary/podinfo" -n "$NS" --for=condition=Stalled --timeout=30s >/dev/null ||
  fail "kubectl wait --for=condition=Stalled did not return for a rolled-back Canary"

log "kubectl serin completion"
completion=$(kubectl serin completion bash)
expect_contains "bash completion script" "kubectl-serin" "$completion"
expect_contains "bash completion offers the subcommands" "restart" "$completion"

log "pause and resume"
expect_contains "kubectl serin pause" "paused" "$(ks pause podinfo)"
expect_eq "spec.suspend after pause" true "$(kc get canary podinfo -o jsonpath='{.spec.suspend}')"
expect_contains "kubectl serin resume" "resumed" "$(ks resume podinfo)"
expect_eq "spec.suspend after resume" false "$(kc get canary podinfo -o jsonpath='{.spec.suspend}')"
missing_rc=0
ks get no-such-canary >/dev/null 2>&1 || missing_rc=$?
expect_eq "exit code for a Canary that does not exist" 4 "$missing_rc"

log "an invalid Canary: status exits 3 and lists its problems; Stalled names the reason"
kc apply -f - >/dev/null <<YAML
apiVersion: serin.dev/v1beta1
kind: Canary
metadata:
  name: misspelt
spec:
  provider: istiod
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: podinfo}
  service: {port: 9898}
  analysis: {interval: $INTERVAL, threshold: 2, stepWeight: 10, maxWeight: 50}
YAML
run_status misspelt
expect_eq "status exit code for an invalid Canary" 3 "$STATUS_RC"
expect_contains "status of an invalid Canary" "spec.provider" "$STATUS_OUT"
kubectl wait canary/misspelt -n "$NS" --for=condition=Stalled --timeout=30s >/dev/null ||
  fail "kubectl wait --for=condition=Stalled did not return for an invalid Canary"
expect_eq "Stalled reason" InvalidSpec \
  "$(kc get canary misspelt -o jsonpath='{.status.conditions[?(@.type=="Stalled")].reason}')"
kc delete canary misspelt --timeout=30s >/dev/null
