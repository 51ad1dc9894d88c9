#!/usr/bin/env bash
# Mirroring on a progressive canary, and suspending a release half-way:
# - `mirror: true` with stepWeight 20 / maxWeight 40: the first step mirrors every request to the
#   canary while the primary keeps 100% (status weight 0, event "Advance ... canary weight 0"); the
#   next step stops mirroring and moves 20%. The VirtualService's states over the release are
#   exactly 100/0 → 100/0 mirrored to podinfo-canary → 80/20 → 60/40 → 100/0;
# - at 20%, `kubectl patch canary podinfo -p '{"spec":{"suspend":true}}'`: for two intervals the
#   weight (status and VirtualService) and status.lastTickTime stay as they were, and the Canary
#   says "skipping canary run as object is suspended" (status message and a Normal event);
#   `suspend: false` lets it go on to 40% and Succeeded.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup

log "creating the mirroring Canary (stepWeight 20, maxWeight 40)"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    maxWeight: 40
    stepWeight: 20
    mirror: true
    metrics:
$(success_rate_metric)
$(load_test_hooks)
EOF
expect_initialized

# vs_state: the route's primary and canary weights and its mirror host, as "P/C mirror:HOST".
vs_state() {
  kget virtualservice podinfo '.spec.http[0] | "\([.route[]? | select(.destination.host == "podinfo-primary") | .weight] | join(" "))/\([.route[]? | select(.destination.host == "podinfo-canary") | .weight] | join(" ")) mirror:\(.mirror.host // "")"'
}
VS_STATES=()
sample_vs() {
  local state
  state=$(vs_state)
  if ((${#VS_STATES[@]} == 0)) || [[ ${VS_STATES[-1]} != "$state" ]]; then
    VS_STATES+=("$state")
    log "VirtualService: $state"
  fi
  return 0
}
# Ends the follow once the release runs at 20% (after the mirrored step).
sample_until_twenty() {
  sample_vs
  ! [[ $PHASE == Progressing && $WEIGHT == 20 ]]
}

log "releasing podinfo 6.0.1 (mirrored first)"
VS_STATES=()
sample_vs
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
FOLLOW_HOOK=sample_until_twenty
follow_canary podinfo 120 Promoting Succeeded Failed
FOLLOW_HOOK=""
expect_sequence phases Initialized Progressing
expect_sequence weights 0 20
expect_event "Advance podinfo.$NS canary weight 0"

# ----- suspend -------------------------------------------------------------------------------------
log "suspending the release at 20%"
kc patch canary podinfo --type=merge -p '{"spec":{"suspend":true}}' >/dev/null
suspension_shown() {
  [[ $(kc get canary podinfo -o jsonpath='{.status.message}') == "skipping canary run as object is suspended" ]]
}
wait_for "the suspension to show in status" 30 suspension_shown
suspended_tick=$(kc get canary podinfo -o jsonpath='{.status.lastTickTime}')
log "holding for two intervals while suspended"
for ((i = 0; i < 4 * $(interval_seconds); i++)); do
  sample_vs
  [[ $(kc get canary podinfo -o jsonpath='{.status.canaryWeight}') == 20 ]] ||
    fail "the canary weight moved while suspended"
  sleep 0.5
done
expect_eq "canary weight after two suspended intervals" 20 "$(kc get canary podinfo -o jsonpath='{.status.canaryWeight}')"
expect_eq "VirtualService canary weight while suspended" 20 "$(vs_weight podinfo-canary)"
expect_eq "phase while suspended" Progressing "$(kc get canary podinfo -o jsonpath='{.status.phase}')"
expect_eq "last tick while suspended" "$suspended_tick" "$(kc get canary podinfo -o jsonpath='{.status.lastTickTime}')"
expect_event "skipping canary run as object is suspended"

log "resuming"
follow_baseline podinfo
kc patch canary podinfo --type=merge -p '{"spec":{"suspend":false}}' >/dev/null
FOLLOW_HOOK=sample_vs
follow_canary podinfo 150 Succeeded Failed
FOLLOW_HOOK=""
sample_vs
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence phases Progressing Promoting Finalising Succeeded
expect_sequence weights 20 40 0
expect_eq "VirtualService states over the release" \
  "100/0 mirror: | 100/0 mirror:podinfo-canary | 80/20 mirror: | 60/40 mirror: | 100/0 mirror:" \
  "$(printf '%s | ' "${VS_STATES[@]}" | sed 's/ | $//')"
expect_eq "status message after resuming" "" "$(kc get canary podinfo -o jsonpath='{.status.message}')"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
wait_for "podinfo scaled to zero after the promotion" 30 deployment_has_replicas podinfo 0
