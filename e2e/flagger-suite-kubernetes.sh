#!/usr/bin/env bash
# (sandbox; `make flagger-suites`, not in `make test`: about 8 minutes) Flagger's whole Kubernetes
# e2e suite as its test/kubernetes/run.sh runs it, each script as written, against Flagger's own
# chart with Serin's image: test-deployment.sh, test-daemonset.sh, then podinfo re-created and
# test-hpa.sh. The sandbox has one node, as the kind cluster the scripts were written for
# (test-daemonset.sh waits for a DaemonSet with one ready pod).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox
build
SANDBOX_NODES=1
start_sandbox
# Flagger's own Kubernetes install passes -include-label-prefix=app.kubernetes.io.
install_flagger_chart --set includeLabelPrefix=app.kubernetes.io
run_flagger_script test/workloads/init.sh
run_flagger_script test/kubernetes/test-deployment.sh
run_flagger_script test/kubernetes/test-daemonset.sh
kubectl -n test delete deploy podinfo >/dev/null
kubectl -n test delete svc podinfo-svc >/dev/null
kubectl apply -f "$FLAGGER_TREE/test/workloads/deployment.yaml" -n test >/dev/null
run_flagger_script test/kubernetes/test-hpa.sh
log "PASS"
