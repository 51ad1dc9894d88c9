#!/usr/bin/env bash
# Config tracking: podinfo takes its environment from a ConfigMap; changing only the ConfigMap's data
# is a new revision: analysed, promoted, and the primary runs on a `-primary` copy with the new data.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup

log "podinfo takes its environment from ConfigMap podinfo-config"
kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: podinfo-config
  namespace: $NS
data:
  PODINFO_UI_MESSAGE: first
EOF
kc patch deployment podinfo --type=strategic -p '{"spec":{"template":{"spec":{"containers":[{"name":"podinfod","envFrom":[{"configMapRef":{"name":"podinfo-config"}}]}]}}}}' >/dev/null
kc rollout status deployment/podinfo --timeout=60s >/dev/null

log "creating the Canary"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    maxWeight: 20
    stepWeight: 10
    metrics:
$(success_rate_metric)
$(load_test_hooks)
EOF
expect_initialized
expect_eq "tracked config in the Canary's status" true \
  "$([[ -n $(kc get canary podinfo -o jsonpath='{.status.trackedConfigs}') ]] && echo true || echo false)"
expect_eq "podinfo-config-primary data" first \
  "$(kc get configmap podinfo-config-primary -o jsonpath='{.data.PODINFO_UI_MESSAGE}')"
expect_eq "primary envFrom" podinfo-config-primary \
  "$(kc get deployment podinfo-primary -o jsonpath='{.spec.template.spec.containers[0].envFrom[0].configMapRef.name}')"

# Until the promotion the primary keeps running on the old data.
PRIMARY_DATA_CHECKED=""
check_primary_config() {
  if [[ $PHASE == Progressing ]]; then
    local data
    data=$(kget configmap podinfo-config-primary '.data.PODINFO_UI_MESSAGE')
    # The promotion tick copies the new data just before it writes Promoting.
    if [[ $data != first ]] && ! phase_leaves podinfo Progressing 3; then
      fail "podinfo-config-primary holds '$data' at weight $WEIGHT, before the promotion"
    fi
    PRIMARY_DATA_CHECKED=yes
  fi
  return 0
}

log "changing only the ConfigMap's data"
follow_baseline podinfo
kc patch configmap podinfo-config --type=merge -p '{"data":{"PODINFO_UI_MESSAGE":"second"}}' >/dev/null
FOLLOW_HOOK=check_primary_config
follow_canary podinfo 150 Succeeded Failed
FOLLOW_HOOK=""
expect_eq "primary config checked during the analysis" yes "$PRIMARY_DATA_CHECKED"
expect_eq "final phase" Succeeded "$PHASE"
expect_sequence phases Initialized Progressing Promoting Finalising Succeeded
expect_sequence weights 0 10 20 0
expect_eq "podinfo-config-primary data" second \
  "$(kc get configmap podinfo-config-primary -o jsonpath='{.data.PODINFO_UI_MESSAGE}')"
expect_eq "primary envFrom" podinfo-config-primary \
  "$(kc get deployment podinfo-primary -o jsonpath='{.spec.template.spec.containers[0].envFrom[0].configMapRef.name}')"
expect_eq "target envFrom (untouched)" podinfo-config \
  "$(kc get deployment podinfo -o jsonpath='{.spec.template.spec.containers[0].envFrom[0].configMapRef.name}')"
wait_for "podinfo scaled to zero after the promotion" 30 deployment_has_replicas podinfo 0
