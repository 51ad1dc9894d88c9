#!/usr/bin/env bash
# Progressive canary (Flagger's test-canary.sh #1): stepWeight 10 up to 30 with the builtin success
# rate and a latency MetricTemplate, load from the load tester; 6.0.1 is promoted.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup

log "creating the latency MetricTemplate and the Canary"
kc apply -f - >/dev/null <<EOF
apiVersion: serin.dev/v1beta1
kind: MetricTemplate
metadata:
  name: latency
  namespace: $NS
spec:
  provider:
    type: prometheus
    address: $PROMETHEUS_URL
  query: |
    histogram_quantile(
        0.99,
        sum(
            rate(
                istio_request_duration_milliseconds_bucket{
                    reporter="{{ variables.reporter }}",
                    destination_workload_namespace="{{ namespace }}",
                    destination_workload=~"{{ target }}"
                }[{{ interval }}]
            )
        ) by (le)
    )
---
apiVersion: serin.dev/v1beta1
kind: Canary
metadata:
  name: podinfo
  namespace: $NS
spec:
  targetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: podinfo
  progressDeadlineSeconds: 60
  service:
    port: 9898
    portDiscovery: true
  analysis:
    interval: $INTERVAL
    threshold: 3
    maxWeight: 30
    stepWeight: 10
    metrics:
$(success_rate_metric)
      - name: latency
        templateRef:
          name: latency
          namespace: $NS
        thresholdRange:
          max: 500
        interval: 30s
        templateVariables:
          reporter: destination
    webhooks:
      # The same command as a pre-rollout hook starts the load one tick before the first metric
      # check; the load tester runs one copy of a command per canary, so the rollout hook only
      # restarts it once it ended.
      - name: load-test-start
        type: pre-rollout
        url: http://flagger-loadtester.$NS/
        timeout: 5s
        metadata:
          type: cmd
          cmd: "hey -z 1m -q 10 -c 2 http://podinfo-canary.$NS:9898/"
      - name: load-test
        url: http://flagger-loadtester.$NS/
        timeout: 5s
        metadata:
          type: cmd
          cmd: "hey -z 1m -q 10 -c 2 http://podinfo-canary.$NS:9898/"
          logCmdOutput: "true"
EOF

expect_initialized
expect_eq "apex Service selector" podinfo-primary "$(kc get service podinfo -o jsonpath='{.spec.selector.app}')"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.0 "$(image_of podinfo-primary)"
wait_for "podinfo scaled to zero after initialization" 30 deployment_has_replicas podinfo 0

log "releasing podinfo 6.0.1"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
follow_canary podinfo 180 Succeeded Failed
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence weights 0 10 20 30 0
expect_sequence phases Initialized Progressing Promoting Finalising Succeeded
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
kc rollout status deployment/podinfo-primary --timeout=60s >/dev/null
expect_eq "version served by the apex Service" 6.0.1 "$(served_version)"
wait_for "podinfo scaled to zero after the promotion" 30 deployment_has_replicas podinfo 0
expect_eq "VirtualService primary weight" 100 "$(vs_weight podinfo-primary)"
expect_eq "VirtualService canary weight" 0 "$(vs_weight podinfo-canary)"
