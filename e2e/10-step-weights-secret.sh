#!/usr/bin/env bash
# A Secret change released over a stepWeights ladder, promoted in steps:
# - podinfo reads PODINFO_UI_MESSAGE from Secret podinfo-secret (env valueFrom secretKeyRef); at
#   initialization the operator copies it to podinfo-secret-primary and the primary uses the copy;
# - changing only the Secret's data is a new release; during the analysis the primary's copy keeps
#   the old data, after the promotion it holds the new data;
# - stepWeights [10, 30, 60]: the canary weight (status and VirtualService) goes exactly
#   0 → 10 → 30 → 60;
# - stepWeightPromotion 30: after the primary's update, traffic comes back to it in steps
#   (canary 60 → 30 → 0, events "Advance podinfo.test primary weight 70" and "... 100").
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup

log "podinfo takes PODINFO_UI_MESSAGE from Secret podinfo-secret"
create_secret podinfo-secret PODINFO_UI_MESSAGE=first
kc patch deployment podinfo --type=strategic -p '{"spec":{"template":{"spec":{"containers":[{"name":"podinfod","env":[{"name":"PODINFO_UI_MESSAGE","valueFrom":{"secretKeyRef":{"name":"podinfo-secret","key":"PODINFO_UI_MESSAGE"}}}]}]}}}}' >/dev/null
kc rollout status deployment/podinfo --timeout=60s >/dev/null

log "creating the Canary (stepWeights 10/30/60, stepWeightPromotion 30)"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    stepWeights: [10, 30, 60]
    stepWeightPromotion: 30
    metrics:
$(success_rate_metric)
$(load_test_hooks)
EOF
expect_initialized

# The Secret's data, decoded.
secret_message() {
  kget secret "$1" '.data.PODINFO_UI_MESSAGE' | base64 -d
}
primary_secret_ref() {
  kc get deployment podinfo-primary -o jsonpath='{.spec.template.spec.containers[0].env[?(@.name=="PODINFO_UI_MESSAGE")].valueFrom.secretKeyRef.name}'
}
expect_eq "tracked Secret in the Canary's status" true \
  "$([[ $(kc get canary podinfo -o jsonpath='{.status.trackedConfigs}') == *secret/podinfo-secret* ]] && echo true || echo false)"
expect_eq "podinfo-secret-primary data" first "$(secret_message podinfo-secret-primary)"
expect_eq "primary env secretKeyRef" podinfo-secret-primary "$(primary_secret_ref)"

# On every poll: the VirtualService's canary weight (its history must match the status'), and
# while the analysis runs, the primary's copy of the Secret still holds the old data.
VS_WEIGHTS=()
SECRET_CHECKED=""
sample_release() {
  local vs
  vs=$(vs_weight podinfo-canary)
  if ((${#VS_WEIGHTS[@]} == 0)) || [[ ${VS_WEIGHTS[-1]} != "$vs" ]]; then
    VS_WEIGHTS+=("$vs")
  fi
  if [[ $PHASE == Progressing ]]; then
    local data
    data=$(secret_message podinfo-secret-primary)
    # The promotion tick copies the new data just before it writes Promoting.
    if [[ $data != first ]] && ! phase_leaves podinfo Progressing 3; then
      fail "podinfo-secret-primary holds '$data' at weight $WEIGHT, before the promotion"
    fi
    SECRET_CHECKED=yes
  fi
  return 0
}

log "changing only the Secret's data"
VS_WEIGHTS=("$(vs_weight podinfo-canary)")
follow_baseline podinfo
kc patch secret podinfo-secret --type=merge -p "{\"data\":{\"PODINFO_UI_MESSAGE\":\"$(printf second | base64)\"}}" >/dev/null
FOLLOW_HOOK=sample_release
follow_canary podinfo 240 Succeeded Failed
FOLLOW_HOOK=""
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence phases Initialized Progressing Promoting Finalising Succeeded
# 10, 30, 60 as the ladder says; in Promoting the canary's share goes 60 → 30, then Finalising.
expect_sequence weights 0 10 30 60 30 0
expect_eq "VirtualService canary weights over the release" "0 10 30 60 30 0" "${VS_WEIGHTS[*]}"
expect_eq "primary Secret checked during the analysis" yes "$SECRET_CHECKED"
expect_event "Advance podinfo.$NS primary weight 70"
expect_event "Advance podinfo.$NS primary weight 100"
expect_eq "podinfo-secret-primary data after the promotion" second "$(secret_message podinfo-secret-primary)"
expect_eq "primary env secretKeyRef" podinfo-secret-primary "$(primary_secret_ref)"
expect_eq "target env secretKeyRef (untouched)" podinfo-secret \
  "$(kc get deployment podinfo -o jsonpath='{.spec.template.spec.containers[0].env[?(@.name=="PODINFO_UI_MESSAGE")].valueFrom.secretKeyRef.name}')"
expect_eq "VirtualService primary weight" 100 "$(vs_weight podinfo-primary)"
wait_for "podinfo scaled to zero after the promotion" 30 deployment_has_replicas podinfo 0
