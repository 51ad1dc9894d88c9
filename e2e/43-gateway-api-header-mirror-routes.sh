#!/usr/bin/env bash
# Argo Rollouts' setHeaderRoute and setMirrorRoute steps on the Gateway API router, through a
# Gateway (the body is in e2e/managed-routes.sh, shared with the Istio scenario).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the sandbox's Gateway is reached with kubectl port-forward"
setup
ROUTER=gatewayapi:v1
source "$E2E_DIR/managed-routes.sh"
