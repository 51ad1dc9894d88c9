#!/usr/bin/env bash
# skipAnalysis (Flagger's test-skip-analysis.sh): 6.0.1 is promoted without analysis; then an image
# that never runs (ErrImagePull) fails on the Canary's progress deadline.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup

log "creating the Canary (skipAnalysis, progressDeadlineSeconds 20)"
CANARY_DEADLINE=20 apply_canary "skipAnalysis: true" <<EOF
    interval: $INTERVAL
    threshold: 2
    maxWeight: 30
    stepWeight: 10
    metrics:
$(success_rate_metric)
    webhooks:
      - name: load-test
        url: http://flagger-loadtester.$NS/
        timeout: 5s
        metadata:
          cmd: "hey -z 1m -q 10 -c 2 http://podinfo-canary.$NS:9898/"
EOF
follow_canary podinfo 90 Initialized Failed
expect_eq "phase after initialization" Initialized "$PHASE"
# With skipAnalysis the primary's readiness is not awaited: initialized in the first tick.
expect_sequence phases Initialized
expect_sequence weights 0

log "releasing podinfo 6.0.1 with skipAnalysis"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
follow_canary podinfo 120 Succeeded Failed
expect_eq "phase after the skipped analysis" Succeeded "$PHASE"
expect_sequence phases Initialized Progressing Succeeded
expect_sequence weights 0
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
kc rollout status deployment/podinfo-primary --timeout=60s >/dev/null
expect_eq "version served by the apex Service" 6.0.1 "$(served_version)"
expect_contains "events" "Promotion completed! Canary analysis was skipped for podinfo.$NS" "$(kc get events)"
wait_for "podinfo scaled to zero after the promotion" 30 deployment_has_replicas podinfo 0

log "releasing an image that cannot be pulled"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=example.invalid/never:1 >/dev/null
follow_canary podinfo 120 Failed Succeeded
expect_eq "phase after the progress deadline" Failed "$PHASE"
expect_sequence phases Succeeded Progressing Failed
expect_sequence weights 0
expect_contains "events" "progress deadline" "$(kc get events)"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
expect_eq "version served by the apex Service" 6.0.1 "$(served_version)"
wait_for "podinfo scaled to zero after the rollback" 30 deployment_has_replicas podinfo 0
