#!/usr/bin/env bash
# Four tutorials of docs/tutorials/ in one sandbox: the Istio canary (promoted, then a faulty
# release rolled back with a Slack alert), the Gateway API canary, the canary by replica ratio and
# the DaemonSet. The body is in e2e/tutorials.sh, shared with 56, which runs the other four.
# e2e: long
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$E2E_DIR/tutorials.sh" istio gateway_api replica_ratio daemonset
