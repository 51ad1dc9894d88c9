#!/usr/bin/env bash
# A GitOps loop: as Flux does, the Deployment and the Canary are re-applied every 5 s with
# server-side apply under their own field manager (`flux`, with --force-conflicts) while releases
# run, and a release starts by changing the image in "Git" (the applied file), not with kubectl set
# image. The promotion and the rollback end as without the loop, and neither side undoes the other:
# the Deployment changes only for the new image and Serin's scale-up and scale-down, and the
# Canary's spec is never changed (no flapping of replicas or weights). During the healthy release
# another tool also annotates the Canary every second (its own bookkeeping) and, in a sandbox, the
# operator's writes of the Canary take 1.2 s more (a busy API server): most land after a foreign
# write the tick did not read, and the release still takes each step once.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup

GIT=$WORK/git
mkdir -p "$GIT"
# git_state IMAGE [ERROR_RATE]: the Deployment as kept in Git (the fixture: no `replicas`, as Flux
# and Flagger advise) at IMAGE, and the Canary.
git_state() {
  sed "s#ghcr.io/stefanprodan/podinfo:6.0.0#$1#" "$E2E_DIR/fixtures/podinfo.yaml" |
    python3 -c '
import sys
text = sys.stdin.read()
rate = sys.argv[1]
if rate:
    text = text.replace("          imagePullPolicy: IfNotPresent\n",
        "          imagePullPolicy: IfNotPresent\n          env:\n            - name: ERROR_RATE\n              value: \"%s\"\n" % rate, 1)
print(text)
' "${2:-}" >"$GIT/.podinfo.yaml.new"
  mv "$GIT/.podinfo.yaml.new" "$GIT/podinfo.yaml"
}

CANARY_FILE=$GIT/canary.yaml
apply_canary() {
  local line
  {
    printf '%s\n' "apiVersion: serin.dev/v1beta1" "kind: Canary" "metadata:" "  name: podinfo" \
      "  namespace: $NS" "spec:" "  targetRef:" "    apiVersion: apps/v1" "    kind: Deployment" \
      "    name: podinfo" "  progressDeadlineSeconds: 60" "  service:" "    port: 9898" "  analysis:"
    cat
  } >"$CANARY_FILE"
  kc apply --server-side --field-manager=flux -f "$CANARY_FILE" >/dev/null
}

apply_ladder_canary 2
expect_initialized
git_state ghcr.io/stefanprodan/podinfo:6.0.0

log "the GitOps loop: server-side apply of Git every 5 s as field manager flux (at most 10 minutes)"
(
  for ((i = 0; i < 120; i++)); do
    kubectl -n "$NS" apply --server-side --field-manager=flux --force-conflicts \
      -f "$GIT/podinfo.yaml" -f "$CANARY_FILE" >>"$WORK/gitops.log" 2>&1 || true
    sleep 5
  done
) &
GITOPS_PID=$!
CLEANUP_HOOKS+=('kill "$GITOPS_PID" 2>/dev/null || true')
sleep 6

generation() { kc get "$1" podinfo -o jsonpath='{.metadata.generation}'; }
canary_generation=$(generation canary)

log "a commit sets podinfo 6.0.1"
deployment_generation=$(generation deployment)
follow_baseline podinfo
(
  for ((i = 0; i < 240; i++)); do
    kc annotate --overwrite canary podinfo "example.com/synced=$i" >/dev/null 2>&1 || true
    sleep 1
  done
) &
ANNOTATOR_PID=$!
CLEANUP_HOOKS+=('kill "$ANNOTATOR_PID" 2>/dev/null || true')
SLOW_WRITES='{"userAgent": "serin-operator", "verb": "PATCH", "resource": "canaries.serin.dev", "latencyMs": 1200}'
[[ $MODE != sandbox ]] || set_faults "$SLOW_WRITES"
git_state ghcr.io/stefanprodan/podinfo:6.0.1
follow_canary podinfo 300 Succeeded Failed
kill "$ANNOTATOR_PID" 2>/dev/null || true
[[ $MODE != sandbox ]] || set_faults ""
expect_eq "final phase of the healthy release" Succeeded "$PHASE"
expect_sequence phases Initialized Progressing Promoting Finalising Succeeded
expect_sequence weights 0 20 40 60 0
expect_eq "promotions started (the annotations written meanwhile: $(kc get canary podinfo -o jsonpath='{.metadata.annotations.example\.com/synced}'))" \
  1 "$(announced "Copying podinfo.$NS template spec to podinfo-primary.$NS")"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
wait_for "podinfo scaled to zero" 30 deployment_has_replicas podinfo 0
sleep 12 # two more turns of the loop
expect_eq "podinfo still scaled to zero after the loop re-applied it" 0 "$(spec_replicas podinfo)"
expect_eq "Deployment changes during the release: the image, Serin's scale-up and scale-down" \
  $((deployment_generation + 3)) "$(generation deployment)"

log "a commit sets a faulty podinfo 6.0.2 (ERROR_RATE=0.5)"
deployment_generation=$(generation deployment)
follow_baseline podinfo
git_state ghcr.io/stefanprodan/podinfo:6.0.2 0.5
follow_canary podinfo 300 Failed
expect_eq "final phase of the faulty release" Failed "$PHASE"
expect_eq "primary image after the rollback" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
expect_eq "VirtualService canary weight" 0 "$(vs_weight podinfo-canary)"
wait_for "podinfo scaled to zero" 30 deployment_has_replicas podinfo 0
sleep 12
expect_eq "podinfo still scaled to zero after the loop re-applied it" 0 "$(spec_replicas podinfo)"
expect_eq "Deployment changes during the rollback: the image, Serin's scale-up and scale-down" \
  $((deployment_generation + 3)) "$(generation deployment)"
expect_eq "Canary spec generation (the loop and Serin never changed it)" "$canary_generation" "$(generation canary)"
grep -q "serverside-applied\|unchanged" "$WORK/gitops.log" || fail "the GitOps loop never applied: $(tail -5 "$WORK/gitops.log")"
log "ok: the loop applied $(grep -c 'deployment.apps/podinfo' "$WORK/gitops.log") times without fighting the operator"
