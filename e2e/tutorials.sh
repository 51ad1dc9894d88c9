# The body of the tutorial scenarios (53 and 56), sourced after lib.sh with the tutorials to run
# as its arguments: the tutorials of docs/tutorials/, run as a reader runs them. The operator is
# installed with the Helm chart, the workloads of artifacts/examples/workloads/ and each tutorial's
# example file from artifacts/examples/ are applied with kubectl, the analysis interval is shortened
# with kubectl patch as the tutorials suggest for the sandbox, releases are made with kubectl set
# image, and `kubectl serin status --watch` is waited on. The tutorials run side by side, each in a
# namespace of its own: the files are applied with their namespace `test` (and the `.test` of the
# cluster names in their URLs) renamed to that namespace, and nothing else changed. Four share a
# sandbox: each runs hey at 20 requests a second through the one mesh proxy, and the Istio checks
# read that proxy's p99 latency; with all eight in one sandbox on a heavily loaded machine, that
# p99 passed the examples' 500 ms.
require_sandbox "the tutorials start from the sandbox"
EXAMPLES=$REPO_DIR/artifacts/examples
TUTORIAL_INTERVAL=5s

PLUGINS=$WORK/plugins
mkdir -p "$PLUGINS"
ln -s "$TARGET_DIR/debug/kubectl-serin" "$PLUGINS/kubectl-serin"
export PATH=$PLUGINS:$PATH

build
start_sandbox
start_receiver
log "installing the chart as docs/tutorials/README.md does"
helm_cmd install serin "$REPO_DIR/charts/serin" --namespace serin-system --create-namespace \
  --set "metricsServer=$PROMETHEUS_URL" --wait --timeout 120s >"$WORK/helm-install.log" 2>&1 ||
  { cat "$WORK/helm-install.log" >&2; fail "helm install failed"; }
INSTALL=helm
kubectl apply -f "$EXAMPLES/workloads/gateway.yaml" >/dev/null

# in_namespace FILE: FILE with the namespace test renamed to $NS.
in_namespace() {
  sed -e "s/^\(  *\)namespace: test$/\1namespace: $NS/" -e "s/^  name: test$/  name: $NS/" \
    -e "s/\([a-z0-9-]\)\.test\([:/]\)/\1.$NS\2/g" "$1"
}

# apply FILE: kubectl apply -f FILE, in this tutorial's namespace.
apply() {
  in_namespace "$EXAMPLES/$1" | kubectl apply -f - >/dev/null || fail "kubectl apply -f artifacts/examples/$1 failed"
}

# The Canary a tutorial releases: podinfo, or agent in the DaemonSet tutorial.
CANARY=podinfo

# status_watch: `kubectl serin status CANARY --watch`, which must exit 0 (initialized or promoted).
status_watch() {
  local out rc=0
  out=$(kubectl serin -n "$NS" status "$CANARY" --watch --timeout 240s 2>&1) || rc=$?
  printf '%s\n' "$out" | sed 's/^/    | /'
  ((rc == 0)) || fail "kubectl serin status $CANARY --watch exited $rc"
}

# setup_workloads [WORKLOAD...]: podinfo and the load tester (workloads/podinfo.yaml), and more
# files of artifacts/examples/workloads, running.
setup_workloads() {
  local workload
  for workload in podinfo.yaml "$@"; do apply "workloads/$workload"; done
  kc rollout status deploy/podinfo --timeout=120s >/dev/null
  kc rollout status deploy/flagger-loadtester --timeout=120s >/dev/null
}

# start_canary EXAMPLE: the Canary of EXAMPLE, with the shorter interval, until it is initialized.
start_canary() {
  apply "$1"
  kc patch canary "$CANARY" --type merge -p "{\"spec\":{\"analysis\":{\"interval\":\"$TUTORIAL_INTERVAL\"}}}" >/dev/null
  status_watch
  expect_eq "phase after kubectl serin status --watch" Initialized "$(kc get canary "$CANARY" -o jsonpath='{.status.phase}')"
}

release() {
  log "releasing podinfo $1"
  kc set image deploy/podinfo "podinfod=ghcr.io/stefanprodan/podinfo:$1" >/dev/null
}

# expect_promoted VERSION: the release ended Succeeded, the primary runs VERSION and the apex
# Service serves it.
expect_promoted() {
  expect_eq "final phase" Succeeded "$(kc get canary podinfo -o jsonpath='{.status.phase}')"
  expect_eq "primary image" "ghcr.io/stefanprodan/podinfo:$1" "$(image_of podinfo-primary)"
  expect_eq "version served by the apex Service" "$1" "$(served_version)"
}

tutorial_istio() {
  setup_workloads podinfo-hpa.yaml
  # The chat service the tutorial's alerts go to: the loopback receiver stands in for Slack.
  kc create secret generic on-call-slack --from-literal="address=$RECEIVER_URL/slack/on-call" >/dev/null
  apply alert-provider-slack.yaml
  start_canary canary-progressive.yaml
  expect_eq "the primary's HorizontalPodAutoscaler targets" podinfo-primary \
    "$(kc get hpa podinfo-primary -o jsonpath='{.spec.scaleTargetRef.name}')"
  release 6.0.1
  status_watch
  expect_promoted 6.0.1
  expect_contains "events" "Advance podinfo.$NS canary weight 50" "$(kc get events)"

  log "releasing podinfo 6.0.2, which answers half its requests with a 500"
  release_faulty_podinfo 6.0.2
  local out rc=0
  out=$(kubectl serin -n "$NS" status podinfo --watch --timeout 240s 2>&1) || rc=$?
  printf '%s\n' "$out" | sed 's/^/    | /'
  expect_eq "exit code of kubectl serin status --watch for a rolled-back release" 1 "$rc"
  expect_eq "phase" Failed "$(kc get canary podinfo -o jsonpath='{.status.phase}')"
  expect_eq "primary image after the rollback" ghcr.io/stefanprodan/podinfo:6.0.1 "$(image_of podinfo-primary)"
  expect_eq "version served by the apex Service after the rollback" 6.0.1 "$(served_version)"
  wait_for "the rollback alert on the chat service" 30 receiver_has /slack/on-call 1
  expect_contains "the alert's text" "podinfo.$NS" "$(receiver_bodies /slack/on-call)"
}

tutorial_ab() {
  setup_workloads
  start_canary canary-ab-testing.yaml
  release 6.0.1
  insider_on_canary() { [[ $(served_version_with "x-canary: insider") == 6.0.1 ]]; }
  wait_for "requests with the x-canary: insider header to reach 6.0.1" 120 insider_on_canary
  expect_eq "version for the canary=always cookie" 6.0.1 "$(served_version_with "Cookie: theme=dark; canary=always")"
  expect_eq "version for everybody else" 6.0.0 "$(served_version)"
  status_watch
  expect_promoted 6.0.1
}

tutorial_blue_green() {
  setup_workloads
  start_canary canary-blue-green-post-promotion.yaml
  release 6.0.1
  status_watch
  expect_promoted 6.0.1
  local events
  events=$(kc get events)
  expect_contains "events" "Pre-promotion analysis of podinfo.$NS passed" "$events"
  expect_contains "events" "Post-promotion analysis of podinfo.$NS passed" "$events"
}

tutorial_kubernetes_blue_green() {
  setup_workloads
  start_canary canary-kubernetes-blue-green.yaml
  expect_eq "apex Service selector" podinfo-primary "$(kc get service podinfo -o jsonpath='{.spec.selector.app}')"
  expect_eq "VirtualServices" "" "$(kc get virtualservices -o name)"
  release 6.0.1
  status_watch
  expect_promoted 6.0.1
}

tutorial_gateway_api() {
  setup_workloads
  start_canary canary-gateway-api.yaml
  expect_eq "HTTPRoute parent" public-gateway "$(kc get httproute podinfo -o jsonpath='{.spec.parentRefs[0].name}')"
  release 6.0.1
  status_watch
  expect_promoted 6.0.1
}

tutorial_replica_ratio() {
  setup_workloads
  kc scale deploy/podinfo --replicas=10 >/dev/null
  kc rollout status deploy/podinfo --timeout=120s >/dev/null
  start_canary canary-replica-ratio.yaml
  release 6.0.1
  at_pause() { [[ $(kc get canary podinfo -o jsonpath='{.status.podSplit.canary}') == 4 ]]; }
  wait_for "the pause with 4 canary pods of 10" 180 at_pause
  expect_eq "pod split" '{"canary":4,"canaryPercent":40,"primary":6}' "$(kc get canary podinfo -o jsonpath='{.status.podSplit}')"
  local split
  split=$(served_versions 40)
  log "40 requests through the apex Service at the pause: $split"
  [[ $split =~ ^[0-9]+\ 6\.0\.0\ [0-9]+\ 6\.0\.1$ ]] || fail "both versions should answer at the pause, got: $split"
  kubectl serin -n "$NS" promote podinfo >/dev/null
  status_watch
  expect_promoted 6.0.1
}

tutorial_daemonset() {
  CANARY=agent
  setup_workloads agent.yaml
  kc rollout status ds/agent --timeout=120s >/dev/null
  start_canary canary-daemonset.yaml
  log "releasing agent 6.0.1"
  kc set image ds/agent agent=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
  status_watch
  expect_eq "final phase" Succeeded "$(kc get canary agent -o jsonpath='{.status.phase}')"
  expect_eq "primary DaemonSet image" ghcr.io/stefanprodan/podinfo:6.0.1 \
    "$(kc get ds agent-primary -o jsonpath='{.spec.template.spec.containers[0].image}')"
}

tutorial_manual_gates() {
  setup_workloads
  start_canary canary-manual-gates.yaml
  release 6.0.1
  follow_canary podinfo 120 WaitingPromotion Failed Succeeded
  expect_eq "phase at the gate" WaitingPromotion "$PHASE"
  expect_eq "canary weight at the gate" 40 "$WEIGHT"
  expect_contains "events" "Halt podinfo.$NS advancement waiting for promotion approval promotion-gate" "$(kc get events)"
  kc exec deploy/flagger-loadtester -- \
    curl -s -d "{\"name\": \"podinfo\", \"namespace\": \"$NS\"}" http://localhost:8080/gate/open >/dev/null
  status_watch
  expect_promoted 6.0.1
}

TUTORIALS=("$@")
declare -A PIDS=()
for tutorial in "${TUTORIALS[@]}"; do
  (
    NS=tutorial-${tutorial//_/-}
    SCENARIO="$SCENARIO/$tutorial"
    "tutorial_$tutorial"
    log "PASS"
  ) >"$WORK/tutorial-$tutorial.log" 2>&1 &
  PIDS[$tutorial]=$!
done
failed=()
for tutorial in "${TUTORIALS[@]}"; do
  rc=0
  wait "${PIDS[$tutorial]}" || rc=$?
  cat "$WORK/tutorial-$tutorial.log"
  if ((rc != 0)); then
    failed+=("$tutorial")
    NS=tutorial-${tutorial//_/-} dump_diagnostics
  fi
done
((${#failed[@]} == 0)) || fail "tutorials failed: ${failed[*]}"
log "the ${#TUTORIALS[@]} tutorials ${TUTORIALS[*]} ended as they say"
