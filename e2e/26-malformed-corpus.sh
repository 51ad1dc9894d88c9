#!/usr/bin/env bash
# One bad object never stops the watch: a corpus of 300+ malformed Canaries, MetricTemplates and
# AlertProviders (e2e/fixtures/malformed.py: mutations of a valid base over field paths x bad
# values — wrong types, zero and negative numbers, numbers beyond 32 bits, bad durations, unknown
# providers and webhook types, min above max, missing references, unicode, strings where objects
# belong) is applied with kubectl, each object under its own name, while a healthy Canary releases:
# - every object gets a clear answer: either the API server refuses it and kubectl's error names
#   the field, or it is stored and, within a bounded time, its Canary's status.message names the
#   field (and the template or provider it concerns), its Stalled condition is True with reason
#   InvalidSpec (Blocked for a bad MetricTemplate or AlertProvider), and a Warning Event says so;
# - nothing is created for any of them (no Deployment, Service or VirtualService);
# - the healthy podinfo Canary is promoted all the same (weights exactly 0 → 25 → 50 → 0), and the
#   operator is still running with no panic in its log.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup

CORPUS=$WORK/corpus

LADDER_STEP=25 LADDER_MAX=50 apply_ladder_canary 2
expect_initialized

python3 "$E2E_DIR/fixtures/malformed.py" generate "$CORPUS" "$NS" | while read -r line; do log "corpus: $line"; done

# One `kubectl apply` per half of the files, side by side: kubectl goes on after an object the API
# server refuses, and prints one line per object (created, or the server's error).
log "applying the corpus with kubectl"
applied_at=$SECONDS
mapfile -t files < <(find "$CORPUS/objects" -type f | sort)
half=$((${#files[@]} / 2))
first_half=() second_half=()
for ((i = 0; i < ${#files[@]}; i++)); do
  if ((i < half)); then first_half+=(-f "${files[i]}"); else second_half+=(-f "${files[i]}"); fi
done
kubectl --request-timeout=20s apply "${first_half[@]}" >"$CORPUS/apply-1.out" 2>&1 &
first=$!
kubectl --request-timeout=20s apply "${second_half[@]}" >"$CORPUS/apply-2.out" 2>&1 || true
wait "$first" || true
cat "$CORPUS/apply-1.out" "$CORPUS/apply-2.out" >"$CORPUS/apply.out"
log "kubectl apply of ${#files[@]} files took $((SECONDS - applied_at))s: $(grep -c ' created$' "$CORPUS/apply.out" || true) created, $(grep -c '^Error from server' "$CORPUS/apply.out" || true) refused"

# The release of the healthy Canary, with the whole corpus present.
follow_baseline podinfo
log "releasing podinfo 6.0.1 beside the corpus"
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
follow_canary podinfo 150 Succeeded Failed
expect_sequence phases Initialized Progressing Promoting Finalising Succeeded
expect_sequence weights 0 25 50 0
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
expect_eq "version served by podinfo" 6.0.1 "$(served_version)"

# Every entry's answer, polled (each poll is two list requests) for at most 60 s more.
corpus_check() {
  kc get canaries -o json >"$CORPUS/canaries.json"
  kc get events --field-selector type=Warning -o json >"$CORPUS/events.json"
  python3 "$E2E_DIR/fixtures/malformed.py" check "$CORPUS" "$CORPUS/apply.out" \
    "$CORPUS/canaries.json" "$CORPUS/events.json" "$@"
}
deadline=$((SECONDS + 60))
while true; do
  rc=0
  corpus_check >"$CORPUS/check.out" || rc=$?
  ((rc == 2 && SECONDS < deadline)) || break
  sleep 3
done
rc=0
corpus_check --final >"$CORPUS/check.out" || rc=$?
quote "$(cat "$CORPUS/check.out")"
((rc == 0)) || fail "not every malformed object got a clear answer (malformed.py check exited $rc)"
log "every malformed object got a clear answer $((SECONDS - applied_at))s after the apply"
total=$(sed -n 's/^total \([0-9]*\):.*/\1/p' "$CORPUS/check.out")
((total >= 200)) || fail "the corpus has $total objects, fewer than 200"
refused=$(sed -n 's/^total .*refused by schema \([0-9]*\).*/\1/p' "$CORPUS/check.out")
reported=$(sed -n 's/^total .*reported by operator \([0-9]*\).*/\1/p' "$CORPUS/check.out")
log "corpus: $total objects, refused by schema ${refused:-0}, reported by operator ${reported:-0}"
((${refused:-0} > 0 && ${reported:-0} > 0)) || fail "expected both refusals and operator reports"

# Nothing was made for any malformed Canary: each targets a Deployment absent-<id> that does not
# exist, and its Services, VirtualService and primary would be named after it.
made=$(kc get deployments,services,virtualservices -o name | grep -c 'absent-' || true)
expect_eq "objects made for malformed Canaries" 0 "$made"

if [[ $MODE == sandbox && $INSTALL == host ]]; then
  kill -0 "$OPERATOR_PID" 2>/dev/null || fail "the operator is not running any more"
  expect_eq "panics in the operator's log" 0 "$(grep -c 'panicked' "$WORK/operator.log" || true)"
fi
