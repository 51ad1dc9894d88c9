#!/usr/bin/env bash
# (sandbox) Two things Flagger users have: a KEDA ScaledObject as autoscalerRef, and a Gateway API
# HTTPRoute whose parent is the apex Service (GAMMA, as Flagger's Linkerd tutorial has it), on one
# Canary. fixtures/keda-scaledobject-crd.yaml stands in for KEDA's CRD (nothing scales by it here):
# Serin makes podinfo-primary's ScaledObject as Flagger does (scaling podinfo-primary, its trigger's
# query naming podinfo-primary, the bounds of primaryScalerReplicas), holds the target's
# ScaledObject at zero (autoscaling.keda.sh/paused-replicas: "0") while the target is scaled down,
# lets it go while 6.0.1 is analysed, and holds it again once 6.0.1 is promoted. The HTTPRoute
# podinfo, accepted by the mesh for its Service parent, splits what the mesh sends to
# podinfo.test:9898: held at weight 20 by a closed promotion gate, both versions answer.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox
EXTRA_CRDS=("$E2E_DIR/fixtures/keda-scaledobject-crd.yaml")
setup

kc apply -f - >/dev/null <<EOF
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: podinfo
  namespace: $NS
spec:
  scaleTargetRef:
    name: podinfo
  minReplicaCount: 2
  maxReplicaCount: 6
  triggers:
    - type: prometheus
      name: requests
      metadata:
        serverAddress: $PROMETHEUS_URL
        threshold: "10"
        query: sum(rate(http_requests_total{app="podinfo"}[1m]))
---
apiVersion: serin.dev/v1beta1
kind: Canary
metadata:
  name: podinfo
  namespace: $NS
spec:
  targetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: podinfo
  autoscalerRef:
    apiVersion: keda.sh/v1alpha1
    kind: ScaledObject
    name: podinfo
    primaryScalerReplicas:
      maxReplicas: 4
  provider: gatewayapi:v1
  service:
    port: 9898
    portDiscovery: true
    gatewayRefs:
      - group: core
        kind: Service
        name: podinfo
        port: 9898
  analysis:
    interval: $INTERVAL
    threshold: 3
    maxWeight: 20
    stepWeight: 10
    webhooks:
      - name: promotion-gate
        type: confirm-promotion
        url: http://flagger-loadtester.$NS/gate/check
EOF
expect_initialized
so() { kc get scaledobject "$1" -o jsonpath="$2"; }
expect_eq "primary ScaledObject target" podinfo-primary "$(so podinfo-primary '{.spec.scaleTargetRef.name}')"
expect_eq "primary ScaledObject query" 'sum(rate(http_requests_total{app="podinfo-primary"}[1m]))' \
  "$(so podinfo-primary '{.spec.triggers[0].metadata.query}')"
expect_eq "primary ScaledObject bounds" "2 4" \
  "$(so podinfo-primary '{.spec.minReplicaCount} {.spec.maxReplicaCount}')"
expect_eq "primary ScaledObject owner" Canary "$(so podinfo-primary '{.metadata.ownerReferences[0].kind}')"
route_parent() { kc get httproute podinfo -o jsonpath="{.spec.parentRefs[0].kind}/{.spec.parentRefs[0].name} {.status.parents[0].conditions[?(@.type=='Accepted')].status}"; }
expect_eq "HTTPRoute parent, accepted" "Service/podinfo True" "$(route_parent)"
wait_for "the target's ScaledObject held at zero" 20 \
  bash -c "[[ \$(kubectl -n $NS get scaledobject podinfo -o jsonpath='{.metadata.annotations.autoscaling\.keda\.sh/paused-replicas}') == 0 ]]"

log "releasing podinfo 6.0.1"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
wait_for "the target's ScaledObject let go while 6.0.1 is analysed" 30 \
  bash -c "[[ -z \$(kubectl -n $NS get scaledobject podinfo -o jsonpath='{.metadata.annotations.autoscaling\.keda\.sh/paused-replicas}') ]]"
follow_canary podinfo 120 WaitingPromotion Failed
expect_eq "phase at the closed gate" WaitingPromotion "$PHASE"
expect_eq "weight at the closed gate" 20 "$WEIGHT"
versions=$(served_versions 40)
log "40 requests to podinfo.$NS:9898 through the mesh: $versions"
expect_contains "versions served at weight 20" 6.0.0 "$versions"
expect_contains "versions served at weight 20" 6.0.1 "$versions"
loadtester_post /gate/open "{\"name\":\"podinfo\",\"namespace\":\"$NS\"}"
follow_canary podinfo 120 Succeeded Failed
expect_eq "final phase" Succeeded "$PHASE"
expect_eq "versions served through the HTTPRoute" "40 6.0.1" "$(served_versions 40)"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
wait_for "the target's ScaledObject held at zero again" 20 \
  bash -c "[[ \$(kubectl -n $NS get scaledobject podinfo -o jsonpath='{.metadata.annotations.autoscaling\.keda\.sh/paused-replicas}') == 0 ]]"
log "PASS"
