#!/usr/bin/env bash
# Argo Rollouts' setHeaderRoute and setMirrorRoute steps on the Istio router (the body is in
# e2e/managed-routes.sh, shared with the Gateway API scenario).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "requests go through the sandbox's mesh proxy and its telemetry"
setup
ROUTER=istio
source "$E2E_DIR/managed-routes.sh"
