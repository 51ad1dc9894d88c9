#!/usr/bin/env bash
# Session affinity with the Gateway API router, through a Gateway of class istio (the HTTPRoute's
# cookie rules and the Set-Cookie filters on its backends, as Flagger writes them), checked with
# real requests as a user sends them (e2e/session-affinity.sh). podinfo and the load tester are
# Flagger's published manifests.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the sandbox's Gateway is reached with kubectl port-forward"
PODINFO_FIXTURE=$E2E_DIR/fixtures/flagger-podinfo.yaml
LOADTESTER_FIXTURE=$E2E_DIR/fixtures/flagger-loadtester.yaml
setup
ROUTER=gatewayapi:v1
source "$E2E_DIR/session-affinity.sh"
