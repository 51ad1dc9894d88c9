#!/usr/bin/env bash
# A promotion whose primary rollout fails never sends users to a primary that cannot serve the new
# version. podinfo's progressDeadlineSeconds is 30 (the primary copies it); a ResourceQuota of 3 pods
# fits the load tester, the primary and the canary, but not the extra pod the primary's rolling
# update needs at promotion, as when a namespace's quota is full in a real cluster:
# - 6.0.1 passes its analysis (20%, 40%) and enters Promoting; the primary's new ReplicaSet is
#   refused ("exceeded quota", FailedCreate); after 30 s the primary's Deployment reports
#   ProgressDeadlineExceeded and Serin ends the release Failed with all traffic on the canary that
#   passed the analysis (VirtualService 0/100, the canary kept at its size), saying why
#   ("Promotion of podinfo.test failed, primary not ready: ..."); every request through the mesh is
#   answered by 6.0.1 from then on;
# - `kubectl serin retry` while the quota still blocks the primary waits, saying why ("A new run ...
#   waits: all traffic is on the canary since a failed promotion, and podinfo-primary.test is not
#   ready to take it back"), traffic staying on the canary;
# - once the quota is removed, the primary finishes its rollout and the waiting retry starts from
#   it: traffic back on the primary, then the whole ladder again (weights 100 0 20 40 0), promoted.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup
mkdir -p "$WORK/plugins"
ln -s "$TARGET_DIR/debug/kubectl-serin" "$WORK/plugins/kubectl-serin"
export PATH=$WORK/plugins:$PATH
kc patch deployment podinfo -p '{"spec":{"progressDeadlineSeconds":30}}' >/dev/null

LADDER_STEP=20 LADDER_MAX=40 apply_ladder_canary 2
expect_initialized
expect_eq "primary's progressDeadlineSeconds" 30 "$(kc get deployment podinfo-primary -o jsonpath='{.spec.progressDeadlineSeconds}')"

log "a ResourceQuota of 3 pods: the load tester, the primary and the canary fit, a fourth does not"
kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ResourceQuota
metadata:
  name: pod-limit
  namespace: $NS
spec:
  hard:
    pods: "3"
EOF

log "releasing podinfo 6.0.1"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
follow_canary podinfo 240 Failed Succeeded
expect_eq "final phase when the primary cannot roll out" Failed "$PHASE"
expect_sequence phases Initialized Progressing Promoting Failed
expect_sequence_includes weights 0 20 40
expect_event "is forbidden: exceeded quota: pod-limit, requested: pods=1, used: pods=3, limited: pods=3"
expect_event "Promotion of podinfo.$NS failed, primary not ready: deployment \"podinfo-primary\" exceeded its progress deadline"
quote "$(kc get resourcequota pod-limit -o jsonpath='used {.status.used.pods} of {.status.hard.pods} pods')"
expect_eq "VirtualService primary weight after the failed promotion" 0 "$(vs_weight podinfo-primary)"
expect_eq "VirtualService canary weight after the failed promotion" 100 "$(vs_weight podinfo-canary)"
expect_eq "canary replicas ready (kept to serve)" 1 "$(ready_replicas podinfo)"
expect_eq "canary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo)"

log "20 requests through the mesh after the failed promotion"
versions=$(for _ in $(seq 20); do echo "$(served_version)"; done | sort | uniq -c | sed 's/^ *//')
quote "$versions"
expect_eq "versions answering users" "20 6.0.1" "$versions"

log "kubectl serin retry podinfo while the quota still blocks the primary"
retry_out=$(kubectl serin retry podinfo -n "$NS")
quote "$retry_out"
expect_contains "kubectl serin retry's answer" "the operator holds the retry request until this is resolved: A new run of podinfo.$NS waits" "$retry_out"
run_waits() {
  [[ $(kc get canary podinfo -o jsonpath='{.status.message}') == *"A new run of podinfo.$NS waits"* ]]
}
wait_for "the retry to wait for the primary" 30 run_waits
quote "$(kc get canary podinfo -o jsonpath='{.status.message}')"
expect_event "A new run of podinfo.$NS waits: all traffic is on the canary since a failed promotion, and podinfo-primary.$NS is not ready to take it back"
expect_eq "phase while the retry waits" Failed "$(kc get canary podinfo -o jsonpath='{.status.phase}')"
expect_eq "VirtualService canary weight while the retry waits" 100 "$(vs_weight podinfo-canary)"

log "the quota is removed: the primary finishes its rollout, and the waiting retry starts from it"
follow_baseline podinfo
kc delete resourcequota pod-limit >/dev/null
# Failed is where the follow starts, so only Succeeded ends it.
follow_canary podinfo 240 Succeeded
expect_eq "final phase after the retry" Succeeded "$PHASE"
expect_sequence phases Failed Progressing Promoting Finalising Succeeded
expect_sequence weights 100 0 20 40 0
expect_event "Routing all traffic of podinfo.$NS back to podinfo-primary.$NS before a new run"
expect_event "Retrying the release of podinfo.$NS"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
expect_eq "VirtualService primary weight after the retry" 100 "$(vs_weight podinfo-primary)"
expect_eq "VirtualService canary weight after the retry" 0 "$(vs_weight podinfo-canary)"
wait_for "podinfo scaled to zero after the promotion" 30 deployment_has_replicas podinfo 0
versions=$(for _ in $(seq 10); do echo "$(served_version)"; done | sort | uniq -c | sed 's/^ *//')
expect_eq "versions answering users after the retry" "10 6.0.1" "$versions"
