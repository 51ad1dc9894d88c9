#!/usr/bin/env bash
# analysis.antiAffinity (Argo Rollouts'): the canary's pods never share a node with the primary's.
# The sandbox runs three nodes; podinfo's two primary pods spread over two of them, so with
# `requiredDuringSchedulingIgnoredDuringExecution` both canary pods must land on the third. The
# term is Serin's: on the target's pod template only (not the primary's), and not a new revision.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the scenario counts the sandbox's nodes"
setup
scale_podinfo 2
expect_eq "nodes" 3 "$(kubectl get nodes -o name | wc -l)"

log "creating the Canary with a required anti-affinity to the primary's pods"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    stepWeight: 50
    maxWeight: 50
    antiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution: {}
    metrics:
$(success_rate_metric)
$(load_test_hooks)
EOF
expect_initialized
wait_for "podinfo scaled to zero" 60 deployment_has_replicas podinfo 0
expect_eq "the target's anti-affinity term" \
  '[{"labelSelector":{"matchLabels":{"app":"podinfo-primary"}},"topologyKey":"kubernetes.io/hostname"}]' \
  "$(kc get deployment podinfo -o jsonpath='{.spec.template.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution}')"
expect_eq "the primary's affinity" "" "$(kc get deployment podinfo-primary -o jsonpath='{.spec.template.spec.affinity}')"
expect_eq "phase (the term is not a revision)" Initialized "$(kc get canary podinfo -o jsonpath='{.status.phase}')"

# nodes_of LABEL: the distinct nodes of the running pods with app=LABEL.
nodes_of() {
  kc get pods -l "app=$1" --field-selector=status.phase=Running \
    -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort -u | tr '\n' ' '
}

SHARED=""
SAMPLES=0
check_nodes() {
  local canary primary node
  canary=$(nodes_of podinfo)
  primary=$(nodes_of podinfo-primary)
  if [[ -n $canary && $PHASE == Progressing ]]; then
    SAMPLES=$((SAMPLES + 1))
    for node in $canary; do
      [[ " $primary " == *" $node "* ]] && SHARED+="$node "
    done
    ((SAMPLES == 1)) && log "canary pods on: $canary; primary pods on: $primary"
  fi
  return 0
}

log "releasing podinfo 6.0.1"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
FOLLOW_HOOK=check_nodes
follow_canary podinfo 150 Succeeded Failed
FOLLOW_HOOK=""
expect_eq "final phase" Succeeded "$PHASE"
((SAMPLES > 0)) || fail "no sample saw the canary's pods running"
expect_eq "nodes shared by canary and primary pods in $SAMPLES samples" "" "$SHARED"
expect_event "Advance podinfo.$NS canary weight 50"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
