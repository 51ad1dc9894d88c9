#!/usr/bin/env bash
# A machine without kubectl: kubectl is not a Debian package, so scripts/install-tools.sh puts one
# in the tools directory when none is on the PATH (target/tools, which the Makefile and e2e/run.sh
# append to the PATH). With a PATH that holds only what the script needs, it installs kubectl, says
# where, and that kubectl drives the sandbox; run again, it installs nothing.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the installed kubectl is tried on the sandbox"
BARE=$WORK/bare-path
mkdir -p "$BARE"
for tool in env bash dirname mktemp rm id; do
  ln -s "$(command -v "$tool")" "$BARE/$tool"
done
# The interpreter itself, not a version manager's shim that needs more tools.
ln -s "$(python3 -c 'import sys; print(sys.executable)')" "$BARE/python3"
PATH=$BARE type -P kubectl >/dev/null && fail "the bare PATH has a kubectl"
TOOLS=$WORK/tools
log "scripts/install-tools.sh kubectl with a PATH without kubectl"
out=$(PATH=$BARE SERIN_TOOLS_DIR=$TOOLS "$REPO_DIR/scripts/install-tools.sh" kubectl 2>&1) ||
  { printf '%s\n' "$out" >&2; fail "install-tools.sh failed"; }
printf '%s\n' "$out" | sed 's/^/    | /'
expect_contains "what install-tools.sh says" "installed kubectl v1." "$out"
[[ -x $TOOLS/kubectl ]] || fail "no kubectl in $TOOLS"
[[ ! -e $TOOLS/helm ]] || fail "install-tools.sh kubectl installed helm too"
expect_eq "a second run (kubectl is there)" "" "$(PATH=$BARE SERIN_TOOLS_DIR=$TOOLS "$REPO_DIR/scripts/install-tools.sh" kubectl 2>&1)"

start_sandbox
expect_contains "namespaces listed by the installed kubectl" "namespace/default" \
  "$(env PATH="$BARE:$TOOLS" kubectl get namespaces -o name)"
