#!/usr/bin/env bash
# A DaemonSet target (Flagger's DaemonSet support): the operator makes `agent-primary` and scales
# the target to zero the way Flagger does, with a nodeSelector no node has
# (flagger.app/scale-to-zero); a new version scales it back up, is analysed on Istio weights and
# promoted into the primary DaemonSet; deleting the Canary with revertOnDeletion gives the target
# its pods back. A DaemonSet runs one pod per node, so the counts follow the node count.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the scenario reads the sandbox's data plane through its mesh proxy"
LOADTESTER_FIXTURE=$E2E_DIR/fixtures/flagger-loadtester.yaml
setup
kc apply -f "$E2E_DIR/fixtures/podinfo-daemonset.yaml" >/dev/null
kc rollout status ds/agent --timeout=60s >/dev/null
NODES=$(kc get nodes -o name | wc -l)
log "the cluster has $NODES nodes"

ds_field() { kc get ds "$1" -o jsonpath="$2"; }
agent_version() {
  mesh_get "http://agent.$NS:9898/" | sed -n 's/.*"version"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p'
}

log "creating the Canary of DaemonSet agent"
kc apply -f - >/dev/null <<EOF
apiVersion: serin.dev/v1beta1
kind: Canary
metadata:
  name: agent
  namespace: $NS
spec:
  targetRef:
    apiVersion: apps/v1
    kind: DaemonSet
    name: agent
  progressDeadlineSeconds: 60
  service:
    port: 9898
  analysis:
    interval: $INTERVAL
    threshold: 2
    stepWeight: 25
    maxWeight: 50
    metrics:
$(success_rate_metric)
$(load_test_hooks "http://agent-canary.$NS:9898/")
EOF
follow_canary agent 90 Initialized Failed
expect_eq "phase after initialization" Initialized "$PHASE"
expect_eq "primary DaemonSet image" ghcr.io/stefanprodan/podinfo:6.0.0 \
  "$(ds_field agent-primary '{.spec.template.spec.containers[0].image}')"
expect_eq "primary DaemonSet selector" agent-primary "$(ds_field agent-primary '{.spec.selector.matchLabels.app}')"
scaled_to_zero() {
  [[ $(ds_field agent '{.spec.template.spec.nodeSelector.flagger\.app/scale-to-zero}') == true &&
    $(ds_field agent '{.status.desiredNumberScheduled}') == 0 &&
    -z $(kc get pods -l app=agent -o name) ]]
}
wait_for "the target DaemonSet scaled to zero (scale-to-zero nodeSelector, no pods)" 30 scaled_to_zero
expect_eq "version served by the apex Service" 6.0.0 "$(echo "$(agent_version)")"

log "releasing agent 6.0.1"
follow_baseline agent
kc set image ds/agent agent=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
follow_canary agent 180 Succeeded Failed
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence weights 0 25 50 0
expect_eq "primary DaemonSet image" ghcr.io/stefanprodan/podinfo:6.0.1 \
  "$(ds_field agent-primary '{.spec.template.spec.containers[0].image}')"
kc rollout status ds/agent-primary --timeout=60s >/dev/null
expect_eq "version served by the apex Service" 6.0.1 "$(echo "$(agent_version)")"
wait_for "the target DaemonSet scaled to zero after the promotion" 30 scaled_to_zero
expect_eq "primary DaemonSet's template has no scale-to-zero selector" "" \
  "$(ds_field agent-primary '{.spec.template.spec.nodeSelector}')"

log "deleting the Canary with revertOnDeletion"
kc patch canary agent --type=merge -p '{"spec":{"revertOnDeletion":true}}' >/dev/null
has_finalizer() { [[ $(kc get canary agent -o jsonpath='{.metadata.finalizers[*]}') == *finalizer.serin.dev* ]]; }
wait_for "the Canary's finalizer" 30 has_finalizer
kc delete canary agent --wait=true --timeout=60s >/dev/null
kc rollout status ds/agent --timeout=60s >/dev/null
expect_eq "target DaemonSet pods after the Canary is deleted" "$NODES" "$(ds_field agent '{.status.numberReady}')"
expect_eq "nodes running a target DaemonSet pod" "$NODES" \
  "$(kc get pods -l app=agent -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort -u | wc -l)"
expect_eq "target DaemonSet nodeSelector after the Canary is deleted" "" "$(ds_field agent '{.spec.template.spec.nodeSelector}')"
primary_gone() { [[ -z $(kc get ds agent-primary --ignore-not-found -o name) ]]; }
wait_for "the primary DaemonSet to go with the Canary" 30 primary_gone
expect_eq "image of the target's pods" ghcr.io/stefanprodan/podinfo:6.0.1 \
  "$(kc get pods -l app=agent -o jsonpath='{range .items[*]}{.spec.containers[0].image}{"\n"}{end}' | sort -u)"
