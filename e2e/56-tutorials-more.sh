#!/usr/bin/env bash
# The other four tutorials of docs/tutorials/ in one sandbox: A/B testing by header and cookie,
# blue/green with pre- and post-promotion analysis, blue/green on the kubernetes provider and the
# manual gate. The body is in e2e/tutorials.sh, shared with 53.
# e2e: long
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$E2E_DIR/tutorials.sh" ab blue_green kubernetes_blue_green manual_gates
