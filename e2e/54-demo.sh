#!/usr/bin/env bash
# `make demo`, the first command the README gives a new user, exactly as the README gives it: it
# starts a sandbox of its own, releases a healthy podinfo (promoted) and a faulty one (rolled back)
# while traffic flows, checks the chart's dashboards, and exits 0 only when both releases ended so.
# The scenario reads its summary as the user does.
# e2e: long
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the demo starts its own sandbox"
build
log "make demo"
rc=0
# The demo's sandbox runs in its own process, started as any sandbox of the suite (cluster_priority).
$(cluster_priority) make -C "$REPO_DIR" --no-print-directory demo >"$WORK/demo.out" 2>&1 </dev/null || rc=$?
sed 's/^/    | /' "$WORK/demo.out"
expect_eq "exit code of make demo" 0 "$rc"
summary=$(sed -n '/^summary$/,$p' "$WORK/demo.out")
expect_contains "the demo's summary" "release 1 (6.0.1, healthy): Succeeded" "$summary"
expect_contains "the demo's summary" "release 2 (6.0.2, faulty):  Failed" "$summary"
expect_contains "the demo's summary" "primary now runs ghcr.io/stefanprodan/podinfo:6.0.1" "$summary"
answered=$(sed -n 's/.*dashboards: \([0-9]*\)\/\([0-9]*\) panel queries returned data.*/\1 \2/p' "$WORK/demo.out")
[[ -n $answered ]] || fail "the demo printed no dashboards line"
read -r got total <<<"$answered"
((total > 0 && got == total)) || fail "only $got of $total dashboard panel queries returned data"
log "ok: every one of the $total dashboard panel queries returned data"
