# shellcheck shell=bash
# Shared setup and assertions of the e2e scenarios; each scenario sources this file first.
#
# Sandbox mode (the default): builds `serin` and `serin-operator` (once; run.sh builds before the
# scenarios and sets E2E_SKIP_BUILD=1), starts `serin sandbox up` and the operator in the background,
# installs the CRDs, the namespace `test`, the load tester and podinfo 6.0.0. Everything started is
# stopped by a trap when the script exits, however it exits.
#
# Cluster mode (E2E_KUBECONFIG=path): uses that cluster as it is. Istio, Prometheus, Serin's CRDs and
# the operator must already be installed there; the namespace `test` is deleted and re-created.
#
# Environment:
#   E2E_KUBECONFIG     run against this cluster instead of a sandbox
#   E2E_PROMETHEUS     Prometheus URL for MetricTemplates in cluster mode
#                      (default http://prometheus.istio-system:9090)
#   E2E_OPERATOR_NAMESPACE, E2E_OPERATOR_DEPLOYMENT
#                      where `kubectl logs` finds the operator in cluster mode (serin-system, serin:
#                      the Helm chart's Deployment)
#   E2E_INTERVAL       the Canaries' analysis interval (default 10s, the shortest the operator runs:
#                      serin_api::MIN_INTERVAL_SECONDS raises shorter ones to 10s)
#   E2E_OPERATOR_METRICS_SERVER
#                      the operator's --metrics-server in sandbox mode (default: the sandbox's
#                      Prometheus); a scenario sets it to prove a Canary's own spec.metricsServer is used
#   E2E_INSTALL=helm   sandbox mode: install the operator with the Helm chart (charts/serin, two
#                      replicas with leader election, in serin-system, under the chart's RBAC) instead
#                      of starting it on the host; the sandbox runs its image as the serin-operator
#                      binary. A scenario that passes this way must also have met no 403.
#   HELM               the helm binary (default target/tools/helm, from scripts/install-tools.sh)
#   E2E_SKIP_BUILD=1   use the binaries in target/debug as they are
#   E2E_KEEP=1         keep the work directory (logs, kubeconfig) after a passing run
#   E2E_WORK_ROOT      where work directories are made (default: $TMPDIR or /tmp)

set -Eeuo pipefail

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$E2E_DIR/.." && pwd)
SCENARIO=${SCENARIO:-$(basename "$0" .sh)}
NS="test"
INTERVAL=${E2E_INTERVAL:-10s}
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO_DIR/target}
SERIN_BIN=$TARGET_DIR/debug/serin
OPERATOR_BIN=$TARGET_DIR/debug/serin-operator

if [[ -n ${E2E_KUBECONFIG:-} ]]; then
  MODE=cluster
else
  MODE=sandbox
fi
INSTALL=${E2E_INSTALL:-host}
[[ $INSTALL == host || $INSTALL == helm ]] || { echo "E2E_INSTALL must be helm or empty, got '$INSTALL'" >&2; exit 2; }
HELM=${HELM:-$REPO_DIR/target/tools/helm}
if [[ $INSTALL == helm && $MODE == cluster ]]; then
  echo "E2E_INSTALL=helm runs in sandbox mode only: on a cluster, install the chart yourself" >&2
  exit 2
fi

WORK=$(mktemp -d "${E2E_WORK_ROOT:-${TMPDIR:-/tmp}}/serin-e2e-$SCENARIO.XXXXXX")
SANDBOX_PID=""
OPERATOR_PID=""
OPERATOR_WRAPPER=()
OPERATOR_ENV=()
OPERATOR_FLAGS=()
EXTRA_CRDS=()
CANARY_SERVICE_LINES=()
# The host-run operator's admin address (/metrics, /healthz, /readyz), e.g. 127.0.0.1:34567; set by
# start_operator.
OPERATOR_ADMIN=""
RECEIVER_PID=""
RECEIVER_DIR=""
RECEIVER_URL=""
PROXY_URL=""
PROMETHEUS_URL=""
# The sandbox API server's loopback HTTP listener (no TLS, no credentials); set by start_sandbox.
API_URL=""
HTTPS_PROMETHEUS_PID=""
HTTPS_PROMETHEUS_URL=""
SCENARIO_STARTED=$EPOCHSECONDS

# ----- output ----------------------------------------------------------------------------------

log() {
  printf '%s [%s] %s\n' "$(date +%H:%M:%S)" "$SCENARIO" "$*"
}

fail() {
  printf '%s [%s] FAIL: %s\n' "$(date +%H:%M:%S)" "$SCENARIO" "$*" >&2
  exit 1
}

# ----- teardown --------------------------------------------------------------------------------

# Sends TERM to a process we started, waits up to 10 s, then KILL.
stop_process() {
  local pid=$1 name=$2 i
  [[ -n $pid ]] || return 0
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    sleep 0.1
  done
  log "$name (pid $pid) did not stop on TERM; killing it"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# What a failing scenario leaves to read: the Canary, the events, the operator's log.
dump_diagnostics() {
  set +e
  local k=(kubectl --request-timeout=10s -n "$NS")
  echo "---------------- kubectl describe canary ----------------"
  "${k[@]}" describe canary 2>&1 | tail -n 80
  echo "---------------- canary status ----------------"
  "${k[@]}" get canary -o jsonpath='{range .items[*]}{.metadata.name}: {.status}{"\n"}{end}' 2>&1
  echo "---------------- kubectl get events ----------------"
  "${k[@]}" get events --sort-by=.lastTimestamp 2>&1 | tail -n 60
  echo "---------------- deployments, virtualservice ----------------"
  "${k[@]}" get deployments -o wide 2>&1
  "${k[@]}" get virtualservice -o jsonpath='{range .items[*]}{.metadata.name}: {.spec.http}{"\n"}{end}' 2>&1
  if [[ -n $RECEIVER_DIR ]]; then
    echo "---------------- loopback receiver: requests (last 30) ----------------"
    tail -n 30 "$RECEIVER_DIR/requests.jsonl" 2>&1
  fi
  echo "---------------- operator log (last 80 lines) ----------------"
  if [[ $INSTALL == helm ]]; then
    kubectl --request-timeout=10s -n serin-system get pods -o wide 2>&1
    kubectl --request-timeout=10s -n serin-system logs -l app.kubernetes.io/name=serin --prefix --tail=60 2>&1
    kubectl --request-timeout=10s -n serin-system get lease serin-operator -o yaml 2>&1 | tail -n 8
  elif [[ $MODE == sandbox ]]; then
    tail -n 80 "$WORK/operator.log" 2>&1
  else
    kubectl --request-timeout=10s -n "${E2E_OPERATOR_NAMESPACE:-serin-system}" \
      logs "deploy/${E2E_OPERATOR_DEPLOYMENT:-serin}" --tail=80 2>&1
  fi
  echo "-------------------------------------------------------"
}

# Commands a scenario adds (e.g. stopping a tmux server it started), run by cleanup first.
CLEANUP_HOOKS=()

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  # Output may go to a closed pipe (`| head`): that must not stop the cleanup half-way.
  trap '' PIPE
  set +e
  if ((rc == 0)) && [[ $INSTALL == helm ]]; then
    no_forbidden_requests || rc=1
  fi
  if ((rc != 0 && rc != 77)) && [[ -n ${KUBECONFIG:-} ]]; then
    dump_diagnostics >&2
  fi
  local hook
  for hook in "${CLEANUP_HOOKS[@]}"; do
    eval "$hook"
  done
  canary_watch_stop
  stop_process "$OPERATOR_PID" operator
  stop_process "$SANDBOX_PID" sandbox
  stop_process "$RECEIVER_PID" receiver
  stop_process "$HTTPS_PROMETHEUS_PID" "https prometheus"
  local took=$((EPOCHSECONDS - SCENARIO_STARTED))
  if ((rc == 77)); then
    log "SKIPPED"
    rm -rf "$WORK"
  elif ((rc == 0)); then
    log "PASS in ${took}s"
    if [[ ${E2E_KEEP:-} == 1 ]]; then
      log "work directory kept: $WORK"
    else
      rm -rf "$WORK"
    fi
  else
    log "FAILED (exit $rc) after ${took}s; logs and kubeconfig kept in $WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 141' PIPE

# ----- small utilities -------------------------------------------------------------------------

# The scenarios' kubectl runs are short (a get, an apply, a wait), and a few hundred of them make up
# much of a scenario's CPU: about a third of each run is the Go runtime's garbage collector and its
# threads, which such a run does not need (it peaks under 70 MiB without them). A run that lasts (the
# Canary's watch, a port-forward) starts the binary itself, with the runtime's defaults.
kubectl() {
  GOGC=off GOMAXPROCS=1 command kubectl "$@"
}

# kubectl in the scenario namespace, never hanging on a request.
kc() {
  kubectl --request-timeout=20s -n "$NS" "$@"
}

# apply_canary [SPEC_LINE...]: applies the Canary podinfo of $NS, targeting Deployment podinfo
# behind port 9898 with progressDeadlineSeconds ${CANARY_DEADLINE:-60}. Each argument is one more
# `spec` line (e.g. "skipAnalysis: true"); standard input is the body of `spec.analysis`, indented
# four spaces. CANARY_SERVICE_LINES (an array) adds lines to `spec.service`.
# shellcheck disable=SC2120 # the arguments are optional
apply_canary() {
  local line
  {
    printf '%s\n' "apiVersion: serin.dev/v1beta1" "kind: Canary" "metadata:" "  name: podinfo" \
      "  namespace: $NS" "spec:" "  targetRef:" "    apiVersion: apps/v1" "    kind: Deployment" \
      "    name: podinfo" "  progressDeadlineSeconds: ${CANARY_DEADLINE:-60}"
    for line in "$@"; do printf '  %s\n' "$line"; done
    printf '%s\n' "  service:" "    port: 9898"
    for line in "${CANARY_SERVICE_LINES[@]}"; do printf '    %s\n' "$line"; done
    printf '%s\n' "  analysis:"
    cat
  } | kc apply -f - >/dev/null
}

# apply_ladder_canary THRESHOLD [SPEC_LINE...]: the Canary the reliability scenarios release:
# stepWeight LADDER_STEP (default 20) up to LADDER_MAX (default 60), the builtin success-rate check
# and the load tester's hooks.
apply_ladder_canary() {
  local threshold=$1 step=${LADDER_STEP:-20} max=${LADDER_MAX:-60}
  shift
  log "creating the Canary: stepWeight $step up to $max, threshold $threshold"
  apply_canary "$@" <<EOF
    interval: $INTERVAL
    threshold: $threshold
    stepWeight: $step
    maxWeight: $max
    metrics:
$(success_rate_metric)
$(load_test_hooks)
EOF
}

# release_faulty_podinfo VERSION: sets podinfo VERSION with half its requests answered 500
# (ERROR_RATE is the sandbox podinfo's fault switch).
release_faulty_podinfo() {
  kc patch deployment podinfo --type=strategic -p '{"spec":{"template":{"spec":{"containers":[{"name":"podinfod","image":"ghcr.io/stefanprodan/podinfo:'"$1"'","env":[{"name":"ERROR_RATE","value":"0.5"}]}]}}}}' >/dev/null
}

# load_test_hooks [HEY_TARGET]: the `webhooks:` block of a Canary's analysis, indented for
# apply_canary, that runs the load tester's hey against HEY_TARGET (default the canary Service) as a
# pre-rollout hook, so the load starts one tick before the first metric check, and as a rollout
# hook, which restarts it once it ended (the load tester runs one copy of a command per canary).
# shellcheck disable=SC2120 # the argument is optional
load_test_hooks() {
  local cmd="hey -z 1m -q 10 -c 2 ${1:-http://podinfo-canary.$NS:9898/}"
  cat <<HOOKS
    webhooks:
      - name: load-test-start
        type: pre-rollout
        url: http://flagger-loadtester.$NS/
        timeout: 5s
        metadata:
          cmd: "$cmd"
      - name: load-test
        url: http://flagger-loadtester.$NS/
        timeout: 5s
        metadata:
          cmd: "$cmd"
HOOKS
}

# success_rate_metric: the builtin request-success-rate check (at least 99% over 30s) as an entry of
# `metrics:`, indented for apply_canary.
success_rate_metric() {
  cat <<'METRIC'
      - name: request-success-rate
        thresholdRange:
          min: 99
        interval: 30s
METRIC
}

# The value of a top-level string field of a flat JSON file (endpoints.json).
json_field() {
  sed -n "s/.*\"$2\"[[:space:]]*:[[:space:]]*\"\([^\"]*\)\".*/\1/p" "$1" | head -n 1
}

# A TCP port on 127.0.0.1 nobody listens on.
free_port() {
  local port i
  for ((i = 0; i < 50; i++)); do
    port=$((20000 + RANDOM % 30000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return 0
    fi
  done
  fail "no free port found on 127.0.0.1"
}

# wait_for DESCRIPTION TIMEOUT_SECONDS COMMAND...: runs COMMAND every 0.5 s until it succeeds.
wait_for() {
  local what=$1 timeout=$2
  shift 2
  local deadline=$((EPOCHSECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    ((EPOCHSECONDS < deadline)) || fail "timed out after ${timeout}s waiting for $what"
    sleep 0.5
  done
}

# INTERVAL in seconds (`10s`, `1m`).
interval_seconds() {
  case $INTERVAL in
    *m) echo $((${INTERVAL%m} * 60)) ;;
    *s) echo "${INTERVAL%s}" ;;
    *) echo "$INTERVAL" ;;
  esac
}

# The token for a manual request annotation: a new value every time.
new_token() {
  date +%s%N
}

# request NAME KIND: a manual request (KIND promote, promote-full, abort or retry) on canary NAME,
# as the annotation serin.dev/KIND with a new token; the token is left in REQUEST_TOKEN.
request() {
  REQUEST_TOKEN=$(new_token)
  log "request: serin.dev/$2=$REQUEST_TOKEN on canary/$1"
  kc annotate canary "$1" "serin.dev/$2=$REQUEST_TOKEN" --overwrite >/dev/null
}

# require_sandbox WHY: ends the scenario as skipped (exit 77, which run.sh reports as SKIP) unless
# it runs in sandbox mode. Call it before setup.
require_sandbox() {
  if [[ $MODE != sandbox ]]; then
    log "skipped in $MODE mode: $*"
    exit 77
  fi
}

# ----- the load tester and the mesh ------------------------------------------------------------

# mesh_get URL [HEADER]: GETs URL from inside the mesh (with an extra `Name: value` header); prints
# the body.
mesh_get() {
  local url=$1 header=(-H "X-Serin-E2E: $SCENARIO")
  [[ -z ${2:-} ]] || header=(-H "$2")
  if [[ $MODE == sandbox ]]; then
    curl -sS --max-time 10 -x "$PROXY_URL" "${header[@]}" "$url"
  else
    kc exec deploy/flagger-loadtester -- curl -sS --max-time 10 "${header[@]}" "$url"
  fi
}

# loadtester_post PATH BODY: POSTs a JSON body to the load tester (gates, tasks); fails unless the
# answer is 2xx. Sandbox: through the mesh proxy, as the operator reaches it. Cluster: curl inside
# the load tester pod.
loadtester_post() {
  local path=${1#/} body=$2 code
  if [[ $MODE == sandbox ]]; then
    code=$(curl -sS --max-time 10 -x "$PROXY_URL" -o "$WORK/loadtester-post.out" -w '%{http_code}' \
      -H 'Content-Type: application/json' -d "$body" "http://flagger-loadtester.$NS/$path")
  else
    code=$(kc exec deploy/flagger-loadtester -- curl -sS --max-time 10 -o /dev/null -w '%{http_code}' \
      -H 'Content-Type: application/json' -d "$body" "http://localhost:8080/$path")
  fi
  [[ $code == 2?? ]] || fail "POST /$path to the load tester answered $code"
  log "POST /$path $body -> $code"
}

# ----- gateways, reached as a user reaches them -------------------------------------------------

# port_forward_gateway SERVICE: `kubectl port-forward` from a free 127.0.0.1 port to port 80 of
# istio-system/SERVICE (stopped at cleanup); sets GATEWAY to its URL.
port_forward_gateway() {
  local port log=$WORK/port-forward.log
  # kubectl picks the local port itself: a port chosen beforehand may be taken by a concurrent
  # scenario before kubectl binds it (it then listens on [::1] alone).
  command kubectl -n istio-system port-forward --address 127.0.0.1 "svc/$1" ":80" >"$log" 2>&1 &
  PORT_FORWARD_PID=$!
  CLEANUP_HOOKS+=('stop_process "$PORT_FORWARD_PID" port-forward')
  wait_for "kubectl port-forward to svc/$1 to listen" 30 grep -q '^Forwarding from 127.0.0.1:' "$log"
  port=$(sed -n 's/^Forwarding from 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$log" | head -n 1)
  GATEWAY=http://127.0.0.1:$port
}

# gateway_version PATH [HEADER]: the version podinfo answers at PATH through $GATEWAY (with an
# extra `Name: value` header).
gateway_version() {
  curl -sS --noproxy '*' --max-time 5 ${2:+-H "$2"} "$GATEWAY$1" |
    sed -n 's/.*"version"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p'
}

# gateway_split WEIGHT PATH: a FOLLOW_HOOK helper; the first time the Canary is at WEIGHT, sends 40
# requests to PATH through $GATEWAY and leaves the count per version in GATEWAY_SPLIT.
GATEWAY_SPLIT=""
gateway_split() {
  if [[ $WEIGHT == "$1" && -z $GATEWAY_SPLIT ]]; then
    local i versions=""
    for ((i = 0; i < 40; i++)); do versions+="$(gateway_version "$2") "; done
    GATEWAY_SPLIT=$(tr ' ' '\n' <<<"$versions" | sort | uniq -c | tr -s ' \n' ' ')
    log "40 requests to $2 through the gateway at weight $1: $GATEWAY_SPLIT"
  fi
  return 0
}

# ----- the loopback receiver (e2e/fixtures/receiver.py) ------------------------------------------

# start_receiver: starts the receiver on a free 127.0.0.1 port, forwarding /prometheus/ to the
# sandbox's Prometheus; sets RECEIVER_URL. The operator runs on the host with NO_PROXY=127.0.0.1,
# so webhooks, alerts and MetricTemplates can name RECEIVER_URL directly. Sandbox mode only.
start_receiver() {
  [[ $MODE == sandbox ]] || fail "the loopback receiver needs sandbox mode"
  RECEIVER_DIR=$WORK/receiver
  mkdir -p "$RECEIVER_DIR"
  rm -f "$RECEIVER_DIR/port"
  python3 "$E2E_DIR/fixtures/receiver.py" serve "$RECEIVER_DIR" --prometheus "$PROMETHEUS_URL" \
    >>"$WORK/receiver.log" 2>&1 &
  RECEIVER_PID=$!
  local deadline=$((EPOCHSECONDS + 15))
  until [[ -s $RECEIVER_DIR/port ]]; do
    kill -0 "$RECEIVER_PID" 2>/dev/null || { cat "$WORK/receiver.log" >&2; fail "the receiver exited"; }
    ((EPOCHSECONDS < deadline)) || fail "the receiver did not start within 15s"
    sleep 0.1
  done
  RECEIVER_URL=http://127.0.0.1:$(cat "$RECEIVER_DIR/port")
  log "loopback receiver on $RECEIVER_URL (requests in $RECEIVER_DIR/requests.jsonl)"
}

# stop_receiver / restart_receiver: the receiver goes down (its port refuses connections, and
# stays bound by the receiver so that no other process can take it), then comes back on that port
# with what it recorded so far.
stop_receiver() {
  rm -f "$RECEIVER_DIR/down"
  kill -USR1 "$RECEIVER_PID"
  wait_for "the receiver to go down" 15 test -e "$RECEIVER_DIR/down"
  log "receiver stopped: $RECEIVER_URL refuses connections"
}
restart_receiver() {
  kill -USR2 "$RECEIVER_PID"
  wait_for "the receiver to answer again on $RECEIVER_URL" 15 \
    curl -sf --noproxy '*' --max-time 2 -o /dev/null "$RECEIVER_URL/prometheus/-/ready"
  log "receiver back on $RECEIVER_URL"
}

# start_https_prometheus: a second, empty Debian prometheus on 127.0.0.1 that serves https with the
# sandbox's fixture certificate (self-signed for 127.0.0.1) and requires basic authentication
# (user serin, password serin-test-password; crates/sandbox/mesh/fixtures/prometheus-tls). Sets
# HTTPS_PROMETHEUS_URL.
start_https_prometheus() {
  [[ $MODE == sandbox ]] || fail "the https Prometheus needs sandbox mode"
  local dir=$WORK/https-prometheus fixtures=$REPO_DIR/crates/sandbox/mesh/fixtures/prometheus-tls port
  mkdir -p "$dir"
  printf 'global:\n  scrape_interval: 1s\nscrape_configs: []\n' >"$dir/prometheus.yml"
  # The bcrypt hash is the one in crates/sandbox/mesh/src/prometheus.rs (FIXTURE_PASSWORD_BCRYPT).
  cat >"$dir/web.yml" <<WEB
tls_server_config:
  cert_file: '$fixtures/cert.pem'
  key_file: '$fixtures/key.pem'
basic_auth_users:
  serin: '\$2b\$10\$c.3n245IE6cig07jcpgq.eNCJSdpONyMqj4nVSQErkhY1sl6ZnnAO'
WEB
  local deadline
  # Port 0: Prometheus binds a free port itself and names it in its log ("Listening on"), so a
  # scenario running beside this one can never take it between picking and binding.
  prometheus --config.file="$dir/prometheus.yml" --web.config.file="$dir/web.yml" \
    --storage.tsdb.path="$dir/data" --web.listen-address=127.0.0.1:0 >"$dir/log" 2>&1 &
  HTTPS_PROMETHEUS_PID=$!
  deadline=$((EPOCHSECONDS + 30))
  until grep -q "Server is ready to receive web requests" "$dir/log"; do
    if ! kill -0 "$HTTPS_PROMETHEUS_PID" 2>/dev/null; then
      cat "$dir/log" >&2
      fail "the https prometheus exited"
    fi
    ((EPOCHSECONDS < deadline)) || fail "the https prometheus was not ready within 30s"
    sleep 0.2
  done
  port=$(sed -nE 's/.*msg="Listening on" address=127\.0\.0\.1:([0-9]+).*/\1/p' "$dir/log" | head -n 1)
  [[ -n $port ]] || fail "the https prometheus did not say which port it listens on"
  HTTPS_PROMETHEUS_URL=https://127.0.0.1:$port
  log "https prometheus with basic auth on $HTTPS_PROMETHEUS_URL"
}

# require_graphite: Debian's graphite-carbon and graphite-web (.ci/run and `make e2e-prerequisites`
# install them).
require_graphite() {
  [[ -x /usr/bin/carbon-cache && -x /usr/bin/django-admin ]] ||
    fail "this scenario runs Debian's Graphite: apt-get install graphite-carbon graphite-web"
}

# start_graphite: a Graphite of its own on 127.0.0.1, all of it under $WORK/graphite: carbon-cache
# (plaintext protocol on CARBON_PORT, 1 s resolution kept for an hour) and graphite-web's render API
# under Django's runserver, reading carbon's unflushed points through its cache-query port, behind
# basic authentication (user e2e, password gr4phite). Debian's /usr/bin/python3 runs both (they are
# Debian's Python packages). Sets GRAPHITE_URL and CARBON_PORT.
start_graphite() {
  local dir=$WORK/graphite attempt query_port web_port deadline
  for attempt in 1 2 3 4 5; do
    # Ports that were free when picked; a process that cannot bind makes this try others.
    CARBON_PORT=$(free_port) query_port=$(free_port) web_port=$(free_port)
    rm -rf "$dir" && mkdir -p "$dir/conf" "$dir/storage/whisper" "$dir/storage/log" "$dir/py"
    cat >"$dir/conf/carbon.conf" <<CONF
[cache]
STORAGE_DIR = $dir/storage
LOCAL_DATA_DIR = $dir/storage/whisper
WHITELISTS_DIR = $dir/storage/lists
LOG_DIR = $dir/storage/log
PID_DIR = $dir/storage
USER =
ENABLE_TAGS = False
CARBON_METRIC_INTERVAL = 0
MAX_CACHE_SIZE = inf
MAX_UPDATES_PER_SECOND = inf
MAX_CREATES_PER_MINUTE = inf
LINE_RECEIVER_INTERFACE = 127.0.0.1
LINE_RECEIVER_PORT = $CARBON_PORT
ENABLE_UDP_LISTENER = False
PICKLE_RECEIVER_INTERFACE = 127.0.0.1
PICKLE_RECEIVER_PORT = 0
CACHE_QUERY_INTERFACE = 127.0.0.1
CACHE_QUERY_PORT = $query_port
LOG_UPDATES = False
LOG_CREATES = False
CONF
    printf '[default]\npattern = .*\nretentions = 1s:1h\n' >"$dir/conf/storage-schemas.conf"
    # graphite.settings reads GRAPHITE_SETTINGS_MODULE before it derives its paths, so these
    # overrides keep it off /etc/graphite and /var/lib/graphite.
    cat >"$dir/py/graphite_e2e_settings.py" <<PY
from graphite.app_settings import *  # noqa: F401,F403 (loaded first, so the settings below stick)
SECRET_KEY = 'e2e-only'
ALLOWED_HOSTS = ['127.0.0.1', 'localhost']
CONF_DIR = '$dir/conf'
STORAGE_DIR = '$dir/storage'
WHISPER_DIR = '$dir/storage/whisper'
STANDARD_DIRS = ['$dir/storage/whisper']
INDEX_FILE = '$dir/storage/index'
LOG_DIR = '$dir/storage/log'
LOG_ROTATION = False
LOG_FILE_INFO = '-'
LOG_FILE_EXCEPTION = '-'
LOG_FILE_CACHE = '-'
LOG_FILE_RENDERING = '-'
DATABASES = {'default': {'ENGINE': 'django.db.backends.sqlite3', 'NAME': '$dir/storage/graphite.db'}}
CARBONLINK_HOSTS = ['127.0.0.1:$query_port']
CARBONLINK_TIMEOUT = 1.0
SILENCED_SYSTEM_CHECKS = ['urls.W002', 'admin.W411', 'models.W042']
WSGI_APPLICATION = 'graphite_e2e_wsgi.application'
PY
    # graphite-web behind basic authentication, as a proxy in front of it would put it.
    cat >"$dir/py/graphite_e2e_wsgi.py" <<'PY'
import base64
from django.core.wsgi import get_wsgi_application

_app = get_wsgi_application()
_expected = 'Basic ' + base64.b64encode(b'e2e:gr4phite').decode()


def application(environ, start_response):
    if environ.get('HTTP_AUTHORIZATION') != _expected:
        start_response('401 Unauthorized', [('WWW-Authenticate', 'Basic realm="graphite"'),
                                            ('Content-Type', 'text/plain')])
        return [b'unauthorized\n']
    return _app(environ, start_response)
PY
    /usr/bin/carbon-cache --config="$dir/conf/carbon.conf" --pidfile="$dir/carbon.pid" --nodaemon start \
      >"$dir/carbon.log" 2>&1 &
    CARBON_PID=$!
    PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$dir/py" DJANGO_SETTINGS_MODULE=graphite.settings \
      GRAPHITE_SETTINGS_MODULE=graphite_e2e_settings \
      /usr/bin/django-admin runserver --noreload "127.0.0.1:$web_port" >"$dir/web.log" 2>&1 &
    GRAPHITE_WEB_PID=$!
    if ((attempt == 1)); then
      CLEANUP_HOOKS+=('stop_process "$CARBON_PID" carbon-cache' 'stop_process "$GRAPHITE_WEB_PID" graphite-web')
    fi
    deadline=$((EPOCHSECONDS + 30))
    until grep -q "starting on $CARBON_PORT" "$dir/carbon.log" &&
      curl -sf --noproxy '*' --max-time 2 -u e2e:gr4phite -o /dev/null "http://127.0.0.1:$web_port/render?target=none&format=json"; do
      if ! kill -0 "$CARBON_PID" 2>/dev/null || ! kill -0 "$GRAPHITE_WEB_PID" 2>/dev/null; then
        stop_process "$CARBON_PID" carbon-cache
        stop_process "$GRAPHITE_WEB_PID" graphite-web
        if ((attempt < 5)) && grep -qi "in use" "$dir/carbon.log" "$dir/web.log"; then
          log "a Graphite port was taken meanwhile; trying others"
          continue 2
        fi
        cat "$dir/carbon.log" "$dir/web.log" >&2
        fail "Graphite exited"
      fi
      ((EPOCHSECONDS < deadline)) || { cat "$dir/carbon.log" "$dir/web.log" >&2; fail "Graphite was not ready within 30s"; }
      sleep 0.2
    done
    break
  done
  GRAPHITE_URL=http://127.0.0.1:$web_port
  log "Graphite: carbon on 127.0.0.1:$CARBON_PORT, render API on $GRAPHITE_URL"
}

# feed_graphite METRIC VALUE_FILE SECONDS: in the background, one point a second of METRIC with the
# number in VALUE_FILE, over carbon's plaintext protocol, for at most SECONDS.
feed_graphite() {
  local metric=$1 file=$2 seconds=$3
  (
    for ((i = 0; i < seconds; i++)); do
      { printf '%s %s %s\n' "$metric" "$(cat "$file")" "$EPOCHSECONDS" >"/dev/tcp/127.0.0.1/$CARBON_PORT"; } 2>/dev/null || true
      sleep 1
    done
  ) &
  GRAPHITE_FEED_PID=$!
  CLEANUP_HOOKS+=('stop_process "$GRAPHITE_FEED_PID" graphite-feed')
}

# start_datadog_api: the loopback server that answers as Datadog's metrics query API
# (fixtures/datadog_api.py). Sets DATADOG_URL and DATADOG_DIR, where the test writes the keys it
# accepts (api_key, application_key) and the value of its series (value), and reads what it
# received (requests.jsonl).
start_datadog_api() {
  DATADOG_DIR=$WORK/datadog
  mkdir -p "$DATADOG_DIR"
  python3 "$E2E_DIR/fixtures/datadog_api.py" "$DATADOG_DIR" >>"$WORK/datadog.log" 2>&1 &
  DATADOG_PID=$!
  CLEANUP_HOOKS+=('stop_process "$DATADOG_PID" datadog-api')
  wait_for "the Datadog stand-in to listen" 15 test -s "$DATADOG_DIR/port"
  DATADOG_URL=http://127.0.0.1:$(cat "$DATADOG_DIR/port")
  log "Datadog's query API stands in on $DATADOG_URL"
}

# receiver_answer PATH CODE: the receiver answers requests to PATH with CODE from now on.
receiver_answer() {
  local file
  file=$RECEIVER_DIR/status/$(printf '%s' "${1#/}" | tr / _)
  printf '%s\n' "$2" >"$file.tmp" && mv "$file.tmp" "$file"
  log "receiver answers $2 on $1"
}

# receiver_bodies PATH: the JSON bodies received on PATH, one compact line each (keys sorted).
receiver_bodies() {
  python3 "$E2E_DIR/fixtures/receiver.py" bodies "$RECEIVER_DIR" "$1"
}

# receiver_count PATH: how many requests PATH received.
receiver_count() {
  python3 "$E2E_DIR/fixtures/receiver.py" count "$RECEIVER_DIR" "$1"
}

# receiver_has PATH N: PATH received at least N requests (for wait_for).
receiver_has() {
  (($(receiver_count "$1") >= $2))
}

# receiver_authorization PATH: the Authorization header of each request to PATH, one per line.
receiver_authorization() {
  python3 "$E2E_DIR/fixtures/receiver.py" authorization "$RECEIVER_DIR" "$1"
}

# json_value JSON KEY: the value of KEY in a JSON object (a string as it is, anything else as compact
# JSON with sorted keys); KEY @keys gives the object's keys, sorted, space-separated.
json_value() {
  python3 -c '
import json, sys
obj, key = json.loads(sys.argv[1]), sys.argv[2]
value = " ".join(sorted(obj)) if key == "@keys" else obj.get(key)
print(value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), sort_keys=True))
' "$1" "$2"
}

# ----- the sandbox's Prometheus ----------------------------------------------------------------

# register_scrape_target NAME JOB ADDRESS: the sandbox's Prometheus scrapes http://ADDRESS/metrics
# as job JOB from now on, through the file NAME.json in its targets directory (file_sd_configs,
# docs/sandbox.md). The file is written whole under another name first: Prometheus may read it at
# any moment.
register_scrape_target() {
  [[ $MODE == sandbox ]] || fail "scrape targets are registered in sandbox mode only"
  local dir=$WORK/sandbox/prometheus-targets
  [[ -d $dir ]] || fail "the sandbox has no Prometheus targets directory ($dir)"
  printf '[{"targets": ["%s"], "labels": {"job": "%s"}}]\n' "$3" "$2" >"$dir/.$1.json.partial"
  mv "$dir/.$1.json.partial" "$dir/$1.json"
  log "prometheus scrapes $3 as job $2 ($dir/$1.json)"
}

# prometheus_has QUERY: the sandbox's Prometheus answers QUERY with at least one series.
prometheus_has() {
  curl -sf --noproxy '*' --max-time 5 -G "$PROMETHEUS_URL/api/v1/query" --data-urlencode "query=$1" |
    grep -q '"result":\[{'
}

# ----- setup -----------------------------------------------------------------------------------

helm_cmd() {
  HELM_CACHE_HOME=$WORK/helm/cache HELM_CONFIG_HOME=$WORK/helm/config HELM_DATA_HOME=$WORK/helm/data \
    "$HELM" "$@"
}

# install_with_helm: the operator as users install it — the chart's CRDs, ServiceAccount, ClusterRole
# and a Deployment of two replicas with leader election — and waits until both are Ready.
install_with_helm() {
  [[ -x $HELM ]] || fail "$HELM is missing: run scripts/install-tools.sh"
  helm_cmd install serin "$REPO_DIR/charts/serin" --namespace serin-system --create-namespace \
    --set "metricsServer=${E2E_OPERATOR_METRICS_SERVER:-$PROMETHEUS_URL}" \
    --set leaderElection.enabled=true --set replicaCount=2 \
    --wait --timeout 120s >"$WORK/helm-install.log" 2>&1 ||
    { cat "$WORK/helm-install.log" >&2; fail "helm install failed"; }
  log "operator installed with Helm: $(kubectl -n serin-system get deploy serin -o jsonpath='{.status.readyReplicas}')/2 replicas ready, Lease held by $(kubectl -n serin-system get lease serin-operator -o jsonpath='{.spec.holderIdentity}' 2>/dev/null)"
}

# no_forbidden_requests: the sandbox answered no request with 403 (only the operator runs as a
# ServiceAccount here, so a 403 is the chart's RBAC missing a rule).
no_forbidden_requests() {
  local api forbidden
  api=$(json_field "$WORK/sandbox/endpoints.json" apiserver)
  forbidden=$(curl -sf --noproxy '*' --max-time 10 "$api/metrics" | grep 'code="403"' || true)
  if [[ -n $forbidden ]]; then
    log "FAIL: the operator met 403s (the chart's RBAC lacks a rule): $forbidden"
    return 1
  fi
  log "no request was refused (403) by RBAC; the operator used:"
  curl -sf --noproxy '*' --max-time 10 "$api/sandbox/access" | python3 -c '
import json, sys
used = json.load(sys.stdin).get("system:serviceaccount:serin-system:serin", [])
rules = {}
for a in used:
    rules.setdefault((a["group"] or "core", a["resource"] + ("/" + a["subresource"] if a["subresource"] else "")), []).append(a["verb"])
for (group, resource), verbs in sorted(rules.items()):
    print("    %s %s: %s" % (group, resource, ",".join(sorted(verbs))))
' || true
}

build() {
  [[ ${E2E_SKIP_BUILD:-} == 1 ]] && return 0
  log "building the workspace's binaries (cargo build --workspace --bins, as run.sh does)"
  if ! (cd "$REPO_DIR" && "${CARGO:-cargo}" build -q --workspace --bins) >"$WORK/build.log" 2>&1; then
    tail -n 40 "$WORK/build.log" >&2
    fail "cargo build failed (log: $WORK/build.log)"
  fi
}

# cluster_priority: the command prefix (as root: `nice -n -5`; otherwise nothing) a sandbox starts
# under. A sandbox stands for a cluster whose pods have CPU of their own, while on a machine of two
# cores it shares the CPU with the operators and the kubectl runs of every scenario running beside
# it: they would delay the requests its mesh times, and a release could fail its latency check
# because of the test, not of the release.
cluster_priority() {
  if ((EUID == 0)); then
    echo nice -n -5
  fi
}

start_sandbox() {
  [[ -x $SERIN_BIN ]] || fail "$SERIN_BIN is missing: run cargo build -p serin-cli"
  command -v prometheus >/dev/null || fail "the sandbox needs Debian's prometheus: apt-get install prometheus"
  # SANDBOX_NODES: a scenario that needs a cluster of another size (Flagger's scripts assume kind's one node).
  $(cluster_priority) "$SERIN_BIN" sandbox up --dir "$WORK/sandbox" --nodes "${SANDBOX_NODES:-3}" >"$WORK/sandbox.log" 2>&1 &
  SANDBOX_PID=$!
  local endpoints=$WORK/sandbox/endpoints.json deadline=$((EPOCHSECONDS + 60))
  until [[ -s $endpoints ]] && [[ -n $(json_field "$endpoints" prometheus) ]]; do
    kill -0 "$SANDBOX_PID" 2>/dev/null || { cat "$WORK/sandbox.log" >&2; fail "the sandbox exited"; }
    ((EPOCHSECONDS < deadline)) || fail "the sandbox did not write $endpoints within 60s"
    sleep 0.2
  done
  PROXY_URL=$(json_field "$endpoints" proxy)
  API_URL=$(json_field "$endpoints" apiserver)
  PROMETHEUS_URL=$(json_field "$endpoints" prometheus)
  export KUBECONFIG=$WORK/sandbox/kubeconfig
  export KUBECACHEDIR=$WORK/kube-cache
  log "sandbox up: api $(json_field "$endpoints" apiserver), mesh proxy $PROXY_URL, prometheus $PROMETHEUS_URL"
}

# The operator runs on the host, outside the mesh. Its webhooks go to cluster names such as
# http://flagger-loadtester.test/, which only the mesh proxy resolves, so it gets the proxy as
# HTTP_PROXY (as a pod's sidecar would carry them); the API server and Prometheus are on 127.0.0.1
# and stay direct through NO_PROXY. Arguments are more operator flags (e.g. --leader-elect);
# OPERATOR_LOG, when set, is the log to append to instead of $WORK/operator.log; OPERATOR_WRAPPER,
# a command the operator is started through (e2e/fixtures/read-only-root.sh); OPERATOR_ENV, more
# NAME=value settings of its environment; OPERATOR_ALL_NAMESPACES=1 has it watch every namespace
# instead of $NS alone, as an operator installed for a whole cluster does.
start_operator() {
  [[ -x $OPERATOR_BIN ]] || fail "$OPERATOR_BIN is missing: run cargo build -p serin-operator"
  local port="" deadline logged log=${OPERATOR_LOG:-$WORK/operator.log}
  # Appended: a scenario that restarts the operator keeps every run's log. The log exists before the
  # operator starts, so the loop below can read it before the operator's shell has opened it.
  : >>"$log"
  logged=$(stat -c %s "$log")
  # Port 0: the operator binds a port nobody holds and names it in its log, so a scenario running
  # beside this one can never take it between picking and binding.
  local scope=(--namespace "$NS")
  [[ ${OPERATOR_ALL_NAMESPACES:-} != 1 ]] || scope=()
  env -u http_proxy -u no_proxy -u HTTPS_PROXY -u https_proxy \
    KUBECONFIG="$KUBECONFIG" HTTP_PROXY="$PROXY_URL" NO_PROXY=127.0.0.1,localhost "${OPERATOR_ENV[@]}" \
    "${OPERATOR_WRAPPER[@]}" "$OPERATOR_BIN" "${scope[@]}" --metrics-server "${E2E_OPERATOR_METRICS_SERVER:-$PROMETHEUS_URL}" \
    --admin-address 127.0.0.1:0 "$@" >>"$log" 2>&1 &
  OPERATOR_PID=$!
  deadline=$((EPOCHSECONDS + 30))
  until [[ -n $port ]] && curl -sf --noproxy '*' --max-time 2 "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; do
    if ! kill -0 "$OPERATOR_PID" 2>/dev/null; then
      cat "$log" >&2
      fail "the operator exited"
    fi
    ((EPOCHSECONDS < deadline)) || fail "the operator was not ready within 30s"
    [[ -n $port ]] || port=$(tail -c "+$((logged + 1))" "$log" |
      sed -nE 's/.*admin server listening on 127\.0\.0\.1:([0-9]+).*/\1/p' | head -n 1)
    sleep 0.2
  done
  OPERATOR_ADMIN=127.0.0.1:$port
  log "operator ready (admin $OPERATOR_ADMIN, log $log)"
}

# install_flagger_chart [HELM_FLAGS...]: Flagger's own chart (fixtures/flagger/charts/flagger, as
# Flagger ships it) in FLAGGER_NAMESPACE (default flagger-system; Flagger's Istio tests install it in
# istio-system), with Serin's operator image in place of Flagger's and the
# sandbox's Prometheus; more chart values may follow. Sets FLAGGER_TREE: a scratch git repository
# holding fixtures/flagger, where Flagger's scripts find their files as they do in Flagger's.
install_flagger_chart() {
  [[ -x $HELM ]] || fail "$HELM is missing: run scripts/install-tools.sh"
  FLAGGER_TREE=$WORK/flagger
  cp -r "$E2E_DIR/fixtures/flagger" "$FLAGGER_TREE"
  # The one change to Flagger's scripts: where Prometheus is (the sandbox's, not Istio's addon).
  grep -rl 'http://prometheus.istio-system:9090' "$FLAGGER_TREE/test" |
    xargs -r sed -i "s|http://prometheus.istio-system:9090|$PROMETHEUS_URL|g"
  git -C "$FLAGGER_TREE" init -q
  local version
  version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO_DIR/Cargo.toml" | head -n 1)
  local namespace=${FLAGGER_NAMESPACE:-flagger-system}
  helm_cmd upgrade -i flagger "$FLAGGER_TREE/charts/flagger" --namespace "$namespace" --create-namespace \
    --set image.repository=ghcr.io/serin-dev/serin-operator --set "image.tag=$version" \
    --set "metricsServer=$PROMETHEUS_URL" "$@" --wait --timeout 120s >"$WORK/helm-install.log" 2>&1 ||
    { cat "$WORK/helm-install.log" >&2; fail "helm install of Flagger's chart failed"; }
  log "Flagger's chart installed in $namespace with Serin's image: $(kubectl -n "$namespace" get deploy flagger -o jsonpath='{.status.readyReplicas}')/1 ready"
}

# create_flagger_gateway: the Gateway API Gateway istio-ingress/gateway (class istio, *.example.com
# on port 80), as Flagger's test/gatewayapi/install.sh creates it.
create_flagger_gateway() {
  kubectl create namespace istio-ingress >/dev/null
  kubectl apply -f - >/dev/null <<YAML
apiVersion: gateway.networking.k8s.io/v1beta1
kind: Gateway
metadata:
  name: gateway
  namespace: istio-ingress
spec:
  gatewayClassName: istio
  listeners:
  - name: default
    hostname: "*.example.com"
    port: 80
    protocol: HTTP
    allowedRoutes:
      namespaces:
        from: All
YAML
}

# run_flagger_script PATH: runs one of Flagger's scripts (PATH inside FLAGGER_TREE) as written,
# from the tree's root; fails when it does.
run_flagger_script() {
  log "running Flagger's $1"
  (cd "$FLAGGER_TREE" && bash "$FLAGGER_TREE/$1") >"$WORK/flagger-$(basename "$1" .sh).log" 2>&1 || {
    tail -n 60 "$WORK/flagger-$(basename "$1" .sh).log" >&2
    fail "Flagger's $1 failed (log: $WORK/flagger-$(basename "$1" .sh).log)"
  }
  log "ok: Flagger's $1 passed"
}

# install_crds: Serin's CRDs, or with API_GROUP=flagger.app Flagger's own (fixtures/flagger-crds.yaml).
install_crds() {
  local group=${API_GROUP:-serin.dev} crds=$REPO_DIR/artifacts/crds/serin.yaml
  [[ $group == serin.dev ]] || crds=$E2E_DIR/fixtures/flagger-crds.yaml
  kubectl apply -f "$crds" >/dev/null
  kubectl wait --for=condition=Established --timeout=30s \
    "crd/canaries.$group" "crd/metrictemplates.$group" "crd/alertproviders.$group" >/dev/null
  # EXTRA_CRDS: more CRD manifests a scenario needs before the operator starts (it looks for
  # KEDA's ScaledObjects once, at start).
  local extra
  for extra in "${EXTRA_CRDS[@]}"; do
    kubectl apply -f "$extra" >/dev/null
  done
}

reset_namespace() {
  if [[ $MODE == cluster ]]; then
    kubectl delete namespace "$NS" --ignore-not-found --wait=true --timeout=180s >/dev/null
  fi
  kubectl apply -f "$E2E_DIR/fixtures/namespace.yaml" >/dev/null
}

# setup: everything a scenario starts from — podinfo 6.0.0 and the load tester running in `test`.
# A scenario may set PODINFO_FIXTURE and LOADTESTER_FIXTURE to other manifests, and OPERATOR_FLAGS
# (an array) to more flags for the operator.
setup() {
  log "mode: $MODE, work directory $WORK"
  if [[ $MODE == sandbox ]]; then
    build
    start_sandbox
    if [[ $INSTALL == helm ]]; then
      install_with_helm
    else
      install_crds
      start_operator "${OPERATOR_FLAGS[@]}"
    fi
  else
    export KUBECONFIG=$E2E_KUBECONFIG
    PROMETHEUS_URL=${E2E_PROMETHEUS:-http://prometheus.istio-system:9090}
    kubectl get crd canaries.serin.dev >/dev/null ||
      fail "Serin's CRDs are not installed in the cluster of $E2E_KUBECONFIG"
  fi
  deploy_workloads
}

# deploy_workloads: the namespace `test` with the load tester and podinfo 6.0.0 running (setup's
# last part, for a scenario that starts the operator its own way).
deploy_workloads() {
  reset_namespace
  kc apply -f "${LOADTESTER_FIXTURE:-$E2E_DIR/fixtures/loadtester.yaml}" >/dev/null
  kc apply -f "${PODINFO_FIXTURE:-$E2E_DIR/fixtures/podinfo.yaml}" >/dev/null
  kc rollout status deploy/flagger-loadtester --timeout=120s >/dev/null
  kc rollout status deploy/podinfo --timeout=120s >/dev/null
  log "podinfo 6.0.0 and the load tester are running"
}

# scale_podinfo N: podinfo (the target) runs N replicas, rolled out, before its Canary is made.
scale_podinfo() {
  log "podinfo runs $1 replicas"
  kc scale deployment podinfo --replicas="$1" >/dev/null
  kc rollout status deployment/podinfo --timeout=90s >/dev/null
}

# ----- following a Canary ----------------------------------------------------------------------

# Filled by follow_canary: the phases and weights seen, in order (each change once), and the last
# values.
FOLLOW_PHASES=()
FOLLOW_WEIGHTS=()
# Set by follow_baseline: the sample the next follow_canary starts its record with.
FOLLOW_BASELINE=""
PHASE=""
WEIGHT=""
ITERATIONS=""
STEP=""
# A scenario may set FOLLOW_HOOK to a function name; it is called after every poll (with PHASE,
# WEIGHT, ITERATIONS and STEP set) to sample more state while the release runs, and ends the
# follow (successfully) by returning non-zero.
FOLLOW_HOOK=""

# The Canary fields follow_canary samples, '|'-separated: phase, weight, iterations, failed checks,
# step, the condition's message and the status message (last, so a '|' inside it stays in it).
CANARY_SAMPLE_JSONPATH='{.status.phase}|{.status.canaryWeight}|{.status.iterations}|{.status.failedChecks}|{.status.currentStepIndex}|{.status.conditions[0].message}|{.status.message}'

# canary_sample NAME: the Canary's status in CANARY_SAMPLE_JSONPATH's format; empty when unreadable.
canary_sample() {
  kc get canary "$1" --request-timeout=5s -o jsonpath="$CANARY_SAMPLE_JSONPATH" 2>/dev/null || true
}

# follow_baseline NAME: samples the Canary now, before a change the operator may act on at once (a
# new revision, a manual request). The next follow_canary starts its record with this sample, so
# the phases and weights it records begin with the state before the change however fast the
# operator reacts, and an exact expect_sequence does not depend on that race; and it ends only at a
# state after this one, however slowly the operator reacts.
follow_baseline() {
  FOLLOW_BASELINE=$(canary_sample "$1")
  [[ $FOLLOW_BASELINE == [A-Z]* ]] || fail "canary/$1 has no phase to start a follow from"
}

# follow_record SAMPLE ELAPSED_TENTHS: sets PHASE, WEIGHT, ITERATIONS and STEP from a sample, prints
# it, and appends its phase and weight to FOLLOW_PHASES and FOLLOW_WEIGHTS when they changed.
follow_record() {
  local failed condition message
  IFS='|' read -r PHASE WEIGHT ITERATIONS failed STEP condition message <<<"$1" || true
  WEIGHT=${WEIGHT:-0}
  printf '%s [%s]   +%d.%ds  %-16s weight=%-3s iterations=%-2s failedChecks=%-2s step=%-2s %s\n' \
    "$(date +%H:%M:%S)" "$SCENARIO" $(($2 / 10)) $(($2 % 10)) "$PHASE" "$WEIGHT" \
    "${ITERATIONS:-0}" "${failed:-0}" "${STEP:--}" "${message:-$condition}"
  if ((${#FOLLOW_PHASES[@]} == 0)) || [[ ${FOLLOW_PHASES[-1]} != "$PHASE" ]]; then
    FOLLOW_PHASES+=("$PHASE")
  fi
  if ((${#FOLLOW_WEIGHTS[@]} == 0)) || [[ ${FOLLOW_WEIGHTS[-1]} != "$WEIGHT" ]]; then
    FOLLOW_WEIGHTS+=("$WEIGHT")
  fi
}

# The `kubectl get --watch` follow_canary reads the Canary's states from: its process and the
# descriptor of its output (one line per change, in CANARY_SAMPLE_JSONPATH's format).
CANARY_WATCH_PID=""
CANARY_WATCH_FD=""

# canary_watch_start NAME: starts watching the Canary; the first line is its state now.
canary_watch_start() {
  exec {CANARY_WATCH_FD}< <(exec kubectl -n "$NS" get canary "$1" --watch \
    -o jsonpath="$CANARY_SAMPLE_JSONPATH"'{"\n"}' 2>>"$WORK/canary-watch.log")
  CANARY_WATCH_PID=$!
}

# canary_watch_read: the watch's next line, in CANARY_WATCH_LINE; returns 0 with a line, 1 when none
# began within CANARY_WATCH_WAIT seconds (0.5), and 2 when the watch ended (or a begun line did not
# end within 5 s: watching again reads the Canary's state afresh).
#
# Only a line's first character is read with the short timeout: bash's `read -t` can take a line's
# newline from the pipe and still report the timeout, which left that line unended until the next
# one came (and the last line of a release never ended). A single character bash keeps when it
# times out, and kubectl writes the rest of a line (its text, then its newline) right after it.
# e2e/fixtures/watch-read-check.sh counts what each way loses.
canary_watch_read() {
  local first rest rc=0
  CANARY_WATCH_LINE=""
  IFS= read -r -n 1 -t "${CANARY_WATCH_WAIT:-0.5}" -u "$CANARY_WATCH_FD" first || rc=$?
  if ((rc > 128)); then
    [[ -n $first ]] || return 1
  elif ((rc != 0)); then
    return 2
  fi
  # An empty first character is an empty line.
  [[ -n $first ]] || return 0
  IFS= read -r -t 5 -u "$CANARY_WATCH_FD" rest || return 2
  CANARY_WATCH_LINE=$first$rest
}

canary_watch_stop() {
  [[ -n $CANARY_WATCH_PID ]] || return 0
  kill "$CANARY_WATCH_PID" 2>/dev/null
  exec {CANARY_WATCH_FD}<&-
  CANARY_WATCH_PID=""
}

# follow_canary NAME TIMEOUT UNTIL_PHASE...: follows the Canary through a watch, prints one line per
# change (time, phase, weight, iterations, failed checks, step, status message), records the phases
# and weights (each change once, in order; after follow_baseline, starting with its sample) and
# returns at one of UNTIL_PHASE; fails after TIMEOUT seconds.
#
# A watch delivers every state the Canary's status passes through, however briefly it holds and
# however busy the machine is, at the cost of one kubectl process; polling cost a kubectl run (about
# 0.1 s of CPU) twice a second and could miss a state while the machine was starved. FOLLOW_HOOK runs
# after every change and at least every 0.5 s in between.
follow_canary() {
  local name=$1 timeout=$2
  shift 2
  local until=" $* " start=${EPOCHREALTIME/./} deadline=$((EPOCHSECONDS + timeout))
  local line last="" changed before_change="" now previous_hook=${EPOCHREALTIME/./} rc
  FOLLOW_PHASES=()
  FOLLOW_WEIGHTS=()
  log "following canary/$name until ${*// /|} (at most ${timeout}s)"
  if [[ -n $FOLLOW_BASELINE ]]; then
    last=$FOLLOW_BASELINE
    follow_record "$FOLLOW_BASELINE" 0
    FOLLOW_BASELINE=""
    # The baseline is the state before the change the caller made: a follow ends at one of
    # UNTIL_PHASE only once the Canary has moved on from it.
    before_change=yes
  fi
  canary_watch_start "$name"
  while true; do
    changed=""
    rc=0
    canary_watch_read || rc=$?
    if ((rc == 0)); then
      line=$CANARY_WATCH_LINE
      if [[ $line == [A-Z]* && $line != "$last" ]]; then
        last=$line
        changed=yes
      fi
    elif ((rc == 2)); then
      # The watch ended (the server closed it) or stalled in the middle of a line; a new one
      # starts with the Canary's state then.
      log "the watch of canary/$name ended or stalled mid-line; watching again"
      canary_watch_stop
      sleep 0.5
      canary_watch_start "$name"
    fi
    now=${EPOCHREALTIME/./}
    if [[ -n $changed ]]; then
      follow_record "$last" $(((now - start) / 100000))
      before_change=""
    fi
    if [[ -n $last ]]; then
      if [[ -n $FOLLOW_HOOK ]] && { [[ -n $changed ]] || ((now - previous_hook >= 500000)); }; then
        if ((now - previous_hook > 5000000)); then
          log "warning: $(((now - previous_hook) / 1000000))s between two calls of $FOLLOW_HOOK; a short-lived state of what it samples may have been missed"
        fi
        previous_hook=$now
        if ! "$FOLLOW_HOOK"; then
          canary_watch_stop
          log "canary/$name: $FOLLOW_HOOK ended the follow at $PHASE (phases: ${FOLLOW_PHASES[*]}; weights: ${FOLLOW_WEIGHTS[*]})"
          return 0
        fi
      fi
      if [[ -z $before_change && $until == *" $PHASE "* ]]; then
        canary_watch_stop
        log "canary/$name reached $PHASE (phases: ${FOLLOW_PHASES[*]}; weights: ${FOLLOW_WEIGHTS[*]})"
        return 0
      fi
    fi
    if ((EPOCHSECONDS >= deadline)); then
      # What the watch had not delivered, if anything: the Canary's state read afresh, and whether
      # the watch's kubectl was still running.
      local watching=exited current
      ! kill -0 "$CANARY_WATCH_PID" 2>/dev/null || watching=running
      current=$(canary_sample "$name")
      current=${current%%|*}
      canary_watch_stop
      fail "canary/$name did not reach ${*// /|} within ${timeout}s (phases: ${FOLLOW_PHASES[*]:-}; weights: ${FOLLOW_WEIGHTS[*]:-}; read afresh now: ${current:-unreadable}; the watch's kubectl: $watching)"
    fi
  done
}

# phase_leaves NAME PHASE SECONDS: the Canary's phase is other than PHASE within SECONDS. A tick
# acts (copies configs, scales, routes) just before it writes its status, so a poll can see the
# action with the previous phase; a scenario uses this to tell that from a real anomaly.
phase_leaves() {
  local deadline=$((SECONDS + $3))
  while ((SECONDS <= deadline)); do
    [[ $(kget canary "$1" '.status.phase') != "$2" ]] && return 0
    sleep 0.2
  done
  return 1
}

# ----- assertions ------------------------------------------------------------------------------

# expect_initialized: the Canary podinfo goes from Initializing to Initialized with weight 0 (the
# first thing every scenario checks after applying it).
expect_initialized() {
  follow_canary podinfo 90 Initialized Failed
  expect_eq "phase after initialization" Initialized "$PHASE"
  expect_sequence phases Initializing Initialized
  expect_sequence weights 0
}

# expect_eq WHAT EXPECTED ACTUAL
expect_eq() {
  [[ $3 == "$2" ]] || fail "$1: expected '$2', got '$3'"
  log "ok: $1 = '$3'"
}

# expect_contains WHAT NEEDLE HAYSTACK
# quote TEXT: shows a command's output in the log, indented.
quote() { printf '%s\n' "$1" | sed 's/^/    | /'; }

expect_contains() {
  [[ $3 == *"$2"* ]] || fail "$1: expected to contain '$2', got: $3"
  log "ok: $1 contains '$2'"
}

# followed_values phases|weights: what the last follow_canary recorded, space-separated.
followed_values() {
  case $1 in
    phases) echo "${FOLLOW_PHASES[*]}" ;;
    weights) echo "${FOLLOW_WEIGHTS[*]}" ;;
    *) fail "unknown kind $1 (phases or weights)" ;;
  esac
}

# expect_sequence phases|weights EXPECTED...: the values recorded by the last follow_canary (each
# change once, in order) are exactly EXPECTED: an extra, a missing or a reordered value fails.
expect_sequence() {
  local kind=$1
  shift
  local seen
  seen=$(followed_values "$kind")
  [[ $seen == "$*" ]] || fail "$kind: expected exactly '$*', saw '$seen'"
  log "ok: $kind are exactly $*"
}

# expect_sequence_includes phases|weights EXPECTED...: the recorded values include EXPECTED in this
# order, others may come between. Only for a ladder whose other values depend on timing a scenario
# does not control (each use says why); expect_sequence is the rule.
expect_sequence_includes() {
  local kind=$1
  shift
  local -a seen
  read -r -a seen <<<"$(followed_values "$kind")"
  local i=0 want
  for want in "$@"; do
    while ((i < ${#seen[@]})) && [[ ${seen[i]} != "$want" ]]; do
      i=$((i + 1))
    done
    ((i < ${#seen[@]})) || fail "$kind: expected to include $* in this order, saw ${seen[*]:-nothing} ('$want' missing or out of order)"
    i=$((i + 1))
  done
  log "ok: $kind ${seen[*]} include $* in order"
}

# The API paths kget reads objects of the scenario namespace from, by kind.
declare -A KGET_PATHS=(
  [deployment]=apis/apps/v1/namespaces/%s/deployments
  [virtualservice]=apis/networking.istio.io/v1beta1/namespaces/%s/virtualservices
  [canary]=apis/serin.dev/v1beta1/namespaces/%s/canaries
  [configmap]=api/v1/namespaces/%s/configmaps
  [secret]=api/v1/namespaces/%s/secrets
  [service]=api/v1/namespaces/%s/services
)

# kget KIND NAME FILTER: values of an object of the scenario namespace, read fresh from the API server
# and picked out by a jq FILTER (run by gojq); several values come space-separated, and a missing
# object or field gives nothing. The helpers the scenarios sample with several times a second use it:
# in sandbox mode the request goes straight from bash to the API server's loopback HTTP listener,
# and a read costs under a tenth of a kubectl run's CPU; in cluster mode it is `kubectl get --raw`.
kget() {
  local path filter="[($3) | select(. != null) | tostring] | join(\" \")"
  # shellcheck disable=SC2059 # the format is one of KGET_PATHS
  printf -v path "/${KGET_PATHS[$1]:?kget: unknown kind $1}/%s" "$NS" "$2"
  if [[ -z $API_URL ]]; then
    kubectl get --raw "$path" --request-timeout=20s 2>/dev/null | gojq -r "$filter" 2>/dev/null || true
    return 0
  fi
  local address=${API_URL#http://} fd status line
  { exec {fd}<>"/dev/tcp/${address%:*}/${address##*:}"; } 2>/dev/null || return 0
  # HTTP/1.0: the server closes the connection after the body, which gojq then reads to its end.
  printf 'GET %s HTTP/1.0\r\nHost: %s\r\nAccept: application/json\r\n\r\n' "$path" "$address" >&"$fd"
  IFS= read -r -t 20 status <&"$fd" || status=""
  while IFS= read -r -t 20 line <&"$fd" && [[ -n $line && $line != $'\r' ]]; do :; done
  if [[ $status == "HTTP/1."?" 200 "* ]]; then
    timeout 20 gojq -r "$filter" <&"$fd" 2>/dev/null || true
  fi
  exec {fd}<&-
}

# metric_check CHECK FIELD...: the FIELDs of the metric check CHECK in the status of the Canary
# podinfo, '|'-separated (an absent field, or check, is an empty one).
metric_check() {
  local check=$1 field fields=()
  shift
  for field in "$@"; do
    fields+=("\\(.$field | if . == null then \"\" else tostring end)")
  done
  local IFS='|'
  kget canary podinfo "first(.status.metricChecks[]? | select(.name == \"$check\")) // {} | \"${fields[*]}\""
}

# The image of a Deployment's first container.
image_of() {
  kget deployment "$1" '.spec.template.spec.containers[0].image'
}

# Ready pods of a Deployment ("" counts as 0).
ready_replicas() {
  local n
  n=$(kget deployment "$1" '.status.readyReplicas')
  echo "${n:-0}"
}

# deployment_has_replicas NAME N: spec and status both at N (pods gone when N is 0).
deployment_has_replicas() {
  local spec status
  read -r spec status <<<"$(kget deployment "$1" '.spec.replicas // 0, .status.replicas // 0')"
  [[ ${spec:-0} == "$2" && ${status:-0} == "$2" ]]
}

# create_secret NAME KEY=VALUE...: creates (or updates) an Opaque Secret. Through `kubectl create
# --dry-run=client | kubectl apply`, so that a second call updates the Secret instead of failing.
create_secret() {
  local name=$1 kv
  shift
  local literals=()
  for kv in "$@"; do literals+=("--from-literal=$kv"); done
  kc create secret generic "$name" "${literals[@]}" --dry-run=client -o yaml | kc apply -f - >/dev/null
}

# spec_replicas NAME: a Deployment's spec.replicas ("" counts as 0).
spec_replicas() {
  local n
  n=$(kget deployment "$1" '.spec.replicas')
  echo "${n:-0}"
}

# event_messages: the messages of the namespace's Events, oldest first, one per line.
event_messages() {
  kc get events --sort-by=.lastTimestamp -o jsonpath='{range .items[*]}{.message}{"\n"}{end}'
}

# event_time NEEDLE: when (epoch seconds) the first Event whose message contains NEEDLE was first
# recorded: the operator's own clock, unlike the moment a poll happens to see a change.
event_time() {
  local stamp
  stamp=$(kc get events --sort-by=.firstTimestamp \
    -o jsonpath='{range .items[*]}{.firstTimestamp}{"\t"}{.message}{"\n"}{end}' |
    grep -F -- "$1" | head -n 1 | cut -f1)
  [[ -n $stamp ]] || fail "no event contains '$1'"
  date -d "$stamp" +%s
}

# expect_event NEEDLE: some Event's message contains NEEDLE.
expect_event() {
  local messages
  messages=$(event_messages)
  [[ $messages == *"$1"* ]] || fail "no event contains '$1'; the events are:"$'\n'"$messages"
  log "ok: an event contains '$1'"
}

# expect_no_event NEEDLE: no Event's message contains NEEDLE.
expect_no_event() {
  local messages
  messages=$(event_messages)
  [[ $messages != *"$1"* ]] || fail "an event contains '$1', which should not happen; the events are:"$'\n'"$messages"
  log "ok: no event contains '$1'"
}

# expect_no_leak VALUE...: no Secret value planted by the scenario appears in the operator's log,
# the namespace's Events, or any Serin object (status included).
expect_no_leak() {
  local value where text
  for value in "$@"; do
    for where in "operator log" events "Serin objects"; do
      case $where in
        "operator log")
          if [[ -f $WORK/operator.log ]]; then
            text=$(cat "$WORK/operator.log")
          else
            text=$(kubectl -n "${E2E_OPERATOR_NAMESPACE:-serin-system}" logs "deploy/${E2E_OPERATOR_DEPLOYMENT:-serin}" --tail=-1 2>&1 || true)
          fi
          ;;
        events) text=$(kc get events -o json) ;;
        "Serin objects") text=$(kc get canaries,metrictemplates,alertproviders -o json) ;;
      esac
      [[ $text != *"$value"* ]] || fail "the Secret value '$value' appears in the $where"
    done
    log "ok: the Secret value '$value' appears in no log, Event or status"
  done
}

# set_faults RULES: the sandbox's fault rules from now on (JSON objects separated by commas, see
# docs/sandbox.md; empty clears them).
set_faults() {
  local api
  api=$(json_field "$WORK/sandbox/endpoints.json" apiserver)
  curl -sf --noproxy '*' --max-time 10 -X PUT "$api/sandbox/faults" \
    -H 'Content-Type: application/json' -d "[$1]" >/dev/null || fail "could not set the sandbox's fault rules"
}

# kill_tree PID: stops PID and every process it started, found by parentage (never by a command-line
# pattern, which would also match another scenario's processes).
kill_tree() {
  local child
  for child in $(pgrep -P "$1" || true); do
    kill_tree "$child"
  done
  kill "$1" 2>/dev/null || true
}

# count_events NEEDLE: how many times an Event whose message contains NEEDLE was recorded (a
# repeat raises the first Event's `count` instead of adding one, as in any cluster).
count_events() {
  kc get events -o jsonpath='{range .items[*]}{.count}{"\t"}{.message}{"\n"}{end}' |
    awk -F'\t' -v m="$1" 'index($2, m) > 0 {n += ($1 == "" ? 1 : $1)} END {print n + 0}'
}

# events_recorded: how many Events were recorded in the namespace, repeats included.
events_recorded() {
  kc get events -o jsonpath='{range .items[*]}{.count}{"\n"}{end}' |
    awk '{n += ($1 == "" ? 1 : $1)} END {print n + 0}'
}

# announced MESSAGE: how many times the operator announced exactly MESSAGE (Events of the same
# message are counted with their `count`).
announced() {
  kc get events -o jsonpath='{range .items[*]}{.count}{"\t"}{.message}{"\n"}{end}' |
    awk -F'\t' -v m="$1" '$2 == m {n += $1} END {print n + 0}'
}

# advance_count WEIGHT: how many times the operator announced advancing to WEIGHT.
advance_count() {
  announced "Advance podinfo.$NS canary weight $1"
}

# expect_each_step_once WEIGHT...: each "Advance ... canary weight W" was announced exactly once.
expect_each_step_once() {
  local weight
  for weight in "$@"; do
    expect_eq "\"Advance ... canary weight $weight\" events (no step skipped or repeated)" 1 "$(advance_count "$weight")"
  done
}

# vs_weight HOST [ROUTE]: the weight of destination HOST in http route ROUTE (default: the last
# route, the one without a match) of the VirtualService podinfo; empty when HOST is not there.
vs_weight() {
  local host=$1 route=${2:--1}
  kget virtualservice podinfo ".spec.http[$route].route[]? | select(.destination.host == \"$host\") | .weight"
}

# The version podinfo answers with on the apex Service, through the mesh.
served_version() {
  served_version_with ""
}

# served_versions N: the versions N requests to the apex Service get, counted and sorted by version
# ("116 3.1.0 84 3.1.1").
served_versions() {
  local i
  for ((i = 0; i < $1; i++)); do echo "$(served_version)"; done | sort | uniq -c | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'
}

# served_version_with HEADER: the same, for a request with an extra `Name: value` header.
served_version_with() {
  mesh_get "http://podinfo.$NS:9898/" "$1" | sed -n 's/.*"version"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p'
}
