#!/usr/bin/env bash
# The Grafana dashboards of the chart (charts/serin/dashboards): the sandbox's Prometheus scrapes
# the operator's /metrics through a target file, two releases run with load on the canary and on the
# apex Service, and while the second one progresses every panel query of canary.json and
# operator.json, with its template variables resolved as Grafana resolves them, returns data; the
# annotation queries return data over both releases.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_sandbox "the operator's /metrics is registered with the sandbox's Prometheus"
if [[ $INSTALL == helm ]]; then
  log "skipped with E2E_INSTALL=helm: the scenario registers the host-run operator's admin address"
  exit 77
fi
setup

DASHBOARDS=("$REPO_DIR/charts/serin/dashboards/canary.json" "$REPO_DIR/charts/serin/dashboards/operator.json")

register_scrape_target operator serin-operator "$OPERATOR_ADMIN"
wait_for "Prometheus to scrape the operator's /metrics" 30 prometheus_has 'up{job="serin-operator"} == 1'
log "ok: Prometheus scrapes the operator at $OPERATOR_ADMIN"

# hey_hooks URL...: a pre-rollout and a rollout hook per URL, each running the load tester's hey
# against it for at most a minute at 10 requests a second (the load tester runs one copy of a command
# per canary, so the rollout hook only restarts it once it ended).
hey_hooks() {
  local url type i=0
  echo "    webhooks:"
  for url in "$@"; do
    i=$((i + 1))
    for type in pre-rollout rollout; do
      printf '%s\n' "      - name: load-$type-$i" "        type: $type" \
        "        url: http://flagger-loadtester.$NS/" "        timeout: 5s" "        metadata:" \
        "          cmd: \"hey -z 1m -q 10 -c 2 $url\""
    done
  done
}

log "creating the Canary: stepWeight 20 up to 60, success rate and latency checks, load on the canary and the apex Service"
apply_canary <<EOF
    interval: $INTERVAL
    threshold: 2
    stepWeight: 20
    maxWeight: 60
    metrics:
$(success_rate_metric)
      - name: request-duration
        thresholdRange:
          max: 500
        interval: 30s
$(hey_hooks "http://podinfo-canary.$NS:9898/" "http://podinfo.$NS:9898/")
EOF
expect_initialized
wait_for "podinfo scaled to zero after initialization" 30 deployment_has_replicas podinfo 0

RELEASES_STARTED=$EPOCHSECONDS
log "release 1: podinfo 6.0.1 (its promotion gives the release counters their first value)"
follow_baseline podinfo
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.1 >/dev/null
follow_canary podinfo 180 Succeeded Failed
expect_eq "release 1 final phase" Succeeded "$PHASE"
expect_sequence weights 0 20 40 60 0

# progressing_at_40: release 2 is progressing with at least 40% on the canary, so its metrics have
# been checked at least once and both workloads serve traffic.
progressing_at_40() {
  local state
  state=$(kc get canary podinfo -o jsonpath='{.status.phase} {.status.canaryWeight}')
  [[ ${state% *} == Progressing ]] && ((${state#* } >= 40))
}

log "release 2: podinfo 6.0.2; the dashboards' queries run while it progresses"
kc set image deployment/podinfo podinfod=ghcr.io/stefanprodan/podinfo:6.0.2 >/dev/null
wait_for "release 2 to progress at 40%" 120 progressing_at_40
log "canary/podinfo: $(kc get canary podinfo -o jsonpath='{.status.phase}, weight {.status.canaryWeight}'); running every dashboard query"
checked=0
python3 "$E2E_DIR/fixtures/dashboards.py" "$PROMETHEUS_URL" "${DASHBOARDS[@]}" \
  --var "namespace=$NS" --var target=podinfo --var job=serin-operator \
  --rate-interval 1m --annotations-since "$RELEASES_STARTED" --wait 20 >"$WORK/dashboards.out" 2>&1 || checked=$?
sed 's/^/    | /' "$WORK/dashboards.out"
((checked == 0)) || fail "a dashboard query errs or returns no data: $(grep '^FAIL' "$WORK/dashboards.out" | tr '\n' ' ')"
targets=$(python3 -c '
import json, sys
count = 0
for path in sys.argv[1:]:
    for panel in json.load(open(path))["panels"]:
        count += sum(1 for t in panel.get("targets", []) if "expr" in t)
print(count)
' "${DASHBOARDS[@]}")
expect_contains "dashboard check" "dashboards: $targets/$targets panel queries returned data" "$(cat "$WORK/dashboards.out")"
expect_contains "dashboard check" "dashboards: 2/2 annotation queries returned data" "$(cat "$WORK/dashboards.out")"

follow_canary podinfo 180 Succeeded Failed
expect_eq "release 2 final phase" Succeeded "$PHASE"
expect_eq "primary image" ghcr.io/stefanprodan/podinfo:6.0.2 "$(image_of podinfo-primary)"
