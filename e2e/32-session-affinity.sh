#!/usr/bin/env bash
# Istio session affinity through the ingress gateway (an Istio Gateway and a Canary bound to it),
# checked with real requests as a user sends them (e2e/session-affinity.sh). podinfo and the load
# tester are Flagger's published manifests.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the sandbox's istio-ingressgateway is reached with kubectl port-forward"
PODINFO_FIXTURE=$E2E_DIR/fixtures/flagger-podinfo.yaml
LOADTESTER_FIXTURE=$E2E_DIR/fixtures/flagger-loadtester.yaml
setup
ROUTER=istio
source "$E2E_DIR/session-affinity.sh"
