#!/usr/bin/env bash
# The operator needs nothing writable: it runs as uid 65532 (the chart's runAsUser) in a mount
# namespace where every filesystem is read-only (e2e/fixtures/read-only-root.sh: /, /tmp, /dev/shm,
# $HOME and the working directory refuse writes, even to root), as the chart's
# readOnlyRootFilesystem and runAsNonRoot run it, with only its kubeconfig to read. It becomes
# ready and releases podinfo 6.0.1 to Succeeded, and logs no error.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the operator runs on this machine, inside a read-only mount namespace"
[[ $(id -u) == 0 ]] || fail "read-only-root.sh needs root (unshare and mount)"
setup
stop_process "$OPERATOR_PID" operator
OPERATOR_PID=""

# The operator's user must be able to read its kubeconfig: a copy with the credentials inlined.
readable=$(mktemp -d "${TMPDIR:-/tmp}/serin-ro-kubeconfig.XXXXXX")
CLEANUP_HOOKS+=("rm -rf '$readable'")
chmod 755 "$readable"
kubectl config view --raw --flatten >"$readable/kubeconfig"
chmod 644 "$readable/kubeconfig"

OPERATOR_WRAPPER=("$E2E_DIR/fixtures/read-only-root.sh" 65532)
KUBECONFIG=$readable/kubeconfig start_operator
OPERATOR_WRAPPER=()
expect_contains "the wrapper's check" "read-only-root: /, /tmp, /dev/shm" "$(cat "$WORK/operator.log")"
expect_eq "the operator's user" 65532 "$(ps -o uid= -p "$OPERATOR_PID" | tr -d ' ')"

LADDER_STEP=25 LADDER_MAX=50 apply_ladder_canary 2
expect_initialized
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
follow_canary podinfo 150 Succeeded Failed
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence weights 0 25 50 0
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
kill -0 "$OPERATOR_PID" 2>/dev/null || fail "the operator is not running any more"
expect_eq "errors in the operator's log" 0 "$(grep -cE ' ERROR |Read-only file system|Permission denied' "$WORK/operator.log" || true)"
