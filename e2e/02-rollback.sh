#!/usr/bin/env bash
# Rollback: a faulty 6.0.1 (half its requests answered 500) fails the success-rate check until the
# threshold; the release is rolled back with all traffic on the 6.0.0 primary.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup

log "creating the Canary"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    maxWeight: 50
    stepWeight: 10
    metrics:
$(success_rate_metric)
$(load_test_hooks)
EOF
expect_initialized

# ERROR_RATE is the sandbox podinfo's fault switch; PODINFO_RANDOM_ERROR the real podinfo's.
log "releasing a faulty podinfo 6.0.1 (ERROR_RATE=0.5)"
follow_baseline podinfo
kc patch deployment podinfo --type=strategic -p '{"spec":{"template":{"spec":{"containers":[{"name":"podinfod","image":"ghcr.io/stefanprodan/podinfo:6.0.1","env":[{"name":"ERROR_RATE","value":"0.5"},{"name":"PODINFO_RANDOM_ERROR","value":"true"}]}]}}}}' >/dev/null
follow_canary podinfo 180 Failed Succeeded
expect_eq "final phase" Failed "$PHASE"
expect_sequence phases Initialized Progressing Failed
expect_sequence weights 0 10 0
expect_eq "VirtualService primary weight" 100 "$(vs_weight podinfo-primary)"
expect_eq "VirtualService canary weight" 0 "$(vs_weight podinfo-canary)"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.0 "$(image_of podinfo-primary)"
expect_eq "version served by the apex Service" 6.0.0 "$(served_version)"
wait_for "podinfo scaled to zero after the rollback" 30 deployment_has_replicas podinfo 0
events=$(kc get events)
expect_contains "events" "Rolling back podinfo.$NS failed checks threshold reached 2" "$events"
expect_contains "events" "Canary failed! Scaling down podinfo.$NS" "$events"
expect_contains "events" "success rate" "$events"
