#!/usr/bin/env bash
# API server faults aimed at the operator (the sandbox's fault rules, matched on its User-Agent): 5%
# of its requests of every verb fail with 500, each waits 200 ms more, its watches are dropped every
# 3 s and a third of its resumed watches are told 410 Gone. A promotion and a rollback still end as
# without faults, on the same ladder of weights, and the operator's request rate stays bounded (it
# retries with backoff; no hot loop).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the sandbox's fault rules"
if [[ $INSTALL == helm ]]; then
  log "skipped with E2E_INSTALL=helm: the rules match the host-run operator's User-Agent"
  exit 77
fi
setup

API=$(json_field "$WORK/sandbox/endpoints.json" apiserver)
# requests_so_far: every request the API server answered, from its /metrics.
requests_so_far() {
  curl -sf --noproxy '*' --max-time 10 "$API/metrics" |
    awk '/^sandbox_apiserver_request_total\{/ {n += $NF} END {printf "%d\n", n}'
}
# injected_so_far: the requests the faults failed (500 InternalError).
injected_so_far() {
  curl -sf --noproxy '*' --max-time 10 "$API/metrics" |
    awk '/^sandbox_apiserver_request_total\{/ && /code="500"/ {n += $NF} END {printf "%d\n", n}'
}

apply_ladder_canary 2
expect_initialized

PROFILE='{"userAgent": "serin-operator", "errorRate": 0.05, "latencyMs": 200},
  {"userAgent": "serin-operator", "verb": "WATCH", "watchDropAfterMs": 3000, "expireRate": 0.33}'
log "faults on the operator's requests: 5% errors, +200 ms, watches dropped every 3 s, 1 in 3 resumed watches expired;"
log "for the first 20 s of the release, every VirtualService write of the operator fails too"
set_faults "$PROFILE,
  {\"userAgent\": \"serin-operator\", \"verb\": \"APPLY\", \"resource\": \"virtualservices.networking.istio.io\", \"errorRate\": 1}"
started=$EPOCHSECONDS
before=$(requests_so_far)

log "releasing podinfo 6.0.1"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
(sleep 20 && set_faults "$PROFILE" && log "VirtualService writes no longer fail; the 5% profile stays") &
follow_canary podinfo 300 Succeeded Failed
expect_eq "final phase of the healthy release" Succeeded "$PHASE"
expect_sequence phases Initialized Progressing Promoting Finalising Succeeded
expect_sequence weights 0 20 40 60 0
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
expect_eq "VirtualService canary weight" 0 "$(vs_weight podinfo-canary)"

log "releasing a faulty podinfo 6.0.2 (ERROR_RATE=0.5)"
follow_baseline podinfo
release_faulty_podinfo 6.0.2
follow_canary podinfo 300 Failed
expect_eq "final phase of the faulty release" Failed "$PHASE"
expect_eq "primary image after the rollback" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
expect_eq "VirtualService canary weight" 0 "$(vs_weight podinfo-canary)"
wait_for "podinfo scaled to zero" 60 deployment_has_replicas podinfo 0

seconds=$((EPOCHSECONDS - started))
requests=$(($(requests_so_far) - before))
injected=$(injected_so_far)
log "$requests API requests in ${seconds}s (this script's kubectl polls included), $injected failed by the faults"
((injected > 0)) || fail "no fault was injected: the rules did not match the operator"
expect_event "injected fault: APPLY virtualservices.networking.istio.io failed"
# The script polls the Canary twice a second; a hot loop of the operator would be hundreds a second.
((requests < seconds * 10)) || fail "$requests requests in ${seconds}s: more than 10 a second"
log "ok: at most 10 requests a second"
