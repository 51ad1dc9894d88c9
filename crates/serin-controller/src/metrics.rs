//! The operator's own Prometheus metrics, named and labelled as Flagger's (`flagger_` becomes
//! `serin_`), so dashboards and alerts carry over, plus what Flagger lacks: reconcile latency,
//! Kubernetes API requests by verb and code (counted by [`ApiRequestCounter`], a layer of the kube
//! client) and the process's resident memory.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use serin_api::Phase;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::task::{Context, Poll};
use std::time::Instant;

/// The content type of [`OperatorMetrics::render`]'s text, for the `/metrics` response.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Prometheus' default histogram buckets, as Flagger's duration histogram uses.
const BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NamespaceLabels {
    namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CanaryLabels {
    name: String,
    namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkloadLabels {
    workload: String,
    namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AnalysisLabels {
    name: String,
    namespace: String,
    metric: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReleaseLabels {
    name: String,
    namespace: String,
    deployment_strategy: String,
    analysis_status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiRequestLabels {
    verb: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InfoLabels {
    version: String,
    mesh_provider: String,
}

fn canary_labels(name: &str, namespace: &str) -> CanaryLabels {
    CanaryLabels {
        name: name.to_string(),
        namespace: namespace.to_string(),
    }
}

fn duration_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// The canary metrics the operator serves at `/metrics`.
pub struct OperatorMetrics {
    registry: Registry,
    info: Family<InfoLabels, Gauge>,
    total: Family<NamespaceLabels, Gauge>,
    status: Family<CanaryLabels, Gauge>,
    weight: Family<WorkloadLabels, Gauge>,
    failed_checks: Family<CanaryLabels, Gauge>,
    analysis: Family<AnalysisLabels, Gauge<f64, AtomicU64>>,
    successes: Family<ReleaseLabels, Counter>,
    failures: Family<ReleaseLabels, Counter>,
    duration: Family<CanaryLabels, Histogram>,
    reconciles: Counter,
    reconcile_duration: Histogram,
    api_requests: Family<ApiRequestLabels, Counter>,
    resident_memory: Gauge,
    leader: Gauge,
    cache_objects: Family<KindLabels, Gauge>,
    cache_bytes: Family<KindLabels, Gauge>,
}

impl Default for OperatorMetrics {
    fn default() -> Self {
        let info = Family::default();
        let total = Family::default();
        let status = Family::default();
        let weight = Family::default();
        let failed_checks = Family::default();
        let analysis = Family::default();
        let successes = Family::default();
        let failures = Family::default();
        let duration = Family::new_with_constructor(duration_histogram as fn() -> Histogram);
        let reconciles = Counter::default();
        let reconcile_duration = duration_histogram();
        let api_requests = Family::default();
        let resident_memory = Gauge::default();
        let leader = Gauge::default();
        let cache_objects = Family::default();
        let cache_bytes = Family::default();
        // A family's clone shares its values, so the registry encodes what the methods below set.
        // Help texts have no final period: the encoder adds one.
        let mut registry = Registry::default();
        registry.register(
            "serin_info",
            "Build and mesh provider of the operator",
            Family::clone(&info),
        );
        registry.register(
            "serin_canary_total",
            "Canaries per namespace",
            Family::clone(&total),
        );
        registry.register(
            "serin_canary_status",
            "Last phase of each canary: 0 progressing, 1 any other phase, 2 failed",
            Family::clone(&status),
        );
        registry.register(
            "serin_canary_weight",
            "Traffic weight of the primary and the canary workload",
            Family::clone(&weight),
        );
        registry.register(
            "serin_canary_failed_checks",
            "Failed checks of the current release of each canary",
            Family::clone(&failed_checks),
        );
        registry.register(
            "serin_canary_metric_analysis",
            "Last value read for each analysis metric",
            Family::clone(&analysis),
        );
        // prometheus-client appends `_total` to counter names.
        registry.register(
            "serin_canary_successes",
            "Releases promoted",
            Family::clone(&successes),
        );
        registry.register(
            "serin_canary_failures",
            "Releases rolled back or whose promotion failed",
            Family::clone(&failures),
        );
        registry.register(
            "serin_reconcile",
            "Reconciles of Canaries",
            reconciles.clone(),
        );
        registry.register(
            "serin_reconcile_duration_seconds",
            "Duration of reconciles of Canaries, whatever their outcome",
            reconcile_duration.clone(),
        );
        registry.register(
            "serin_kubernetes_api_requests",
            "Requests the operator sent to the Kubernetes API server, by verb and response code (error when none came)",
            Family::clone(&api_requests),
        );
        registry.register(
            "process_resident_memory_bytes",
            "Resident memory of the operator process, read from /proc/self/statm at each scrape",
            resident_memory.clone(),
        );
        registry.register(
            "serin_cache_objects",
            "Objects the operator's watch caches hold, by kind",
            Family::clone(&cache_objects),
        );
        registry.register(
            "serin_cache_bytes",
            "Bytes the operator's watch caches hold, by kind (Deployments, DaemonSets and routing objects as their compressed JSON, the other kinds as the size of their JSON)",
            Family::clone(&cache_bytes),
        );
        registry.register(
            "serin_leader",
            "Whether this replica acts: 1 when it holds the Lease or runs without leader election, 0 while it waits",
            leader.clone(),
        );
        registry.register(
            "serin_canary_duration_seconds",
            "Duration of analysing ticks",
            Family::clone(&duration),
        );
        Self {
            registry,
            info,
            total,
            status,
            weight,
            failed_checks,
            analysis,
            successes,
            failures,
            duration,
            reconciles,
            reconcile_duration,
            api_requests,
            resident_memory,
            leader,
            cache_objects,
            cache_bytes,
        }
    }
}

/// `serin_canary_status`'s value for a phase: 0 while progressing, 2 when failed, 1 otherwise.
pub fn status_value(phase: Option<Phase>) -> i64 {
    match phase {
        Some(Phase::Progressing) => 0,
        Some(Phase::Failed) => 2,
        _ => 1,
    }
}

impl OperatorMetrics {
    /// Also exposes the canary metrics under Flagger's names (`flagger_info`,
    /// `flagger_canary_status`, ...), with the same labels and values, so that Flagger's Grafana
    /// dashboard and alert rules keep working when Serin serves Flagger's Canaries.
    pub fn add_flagger_names(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "flagger_info",
            "serin_info under Flagger's name",
            Family::clone(&self.info),
        );
        registry.register(
            "flagger_canary_total",
            "serin_canary_total under Flagger's name",
            Family::clone(&self.total),
        );
        registry.register(
            "flagger_canary_status",
            "serin_canary_status under Flagger's name",
            Family::clone(&self.status),
        );
        registry.register(
            "flagger_canary_weight",
            "serin_canary_weight under Flagger's name",
            Family::clone(&self.weight),
        );
        registry.register(
            "flagger_canary_metric_analysis",
            "serin_canary_metric_analysis under Flagger's name",
            Family::clone(&self.analysis),
        );
        registry.register(
            "flagger_canary_successes",
            "serin_canary_successes under Flagger's name",
            Family::clone(&self.successes),
        );
        registry.register(
            "flagger_canary_failures",
            "serin_canary_failures under Flagger's name",
            Family::clone(&self.failures),
        );
        registry.register(
            "flagger_canary_duration_seconds",
            "serin_canary_duration_seconds under Flagger's name",
            Family::clone(&self.duration),
        );
    }

    /// Sets `serin_info`: the operator's version and the mesh provider it routes with.
    pub fn set_info(&self, version: &str, mesh_provider: &str) {
        self.info
            .get_or_create(&InfoLabels {
                version: version.to_string(),
                mesh_provider: mesh_provider.to_string(),
            })
            .set(1);
    }

    /// Sets `serin_leader`: whether this replica acts (holds the Lease) or waits.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Sets the number of Canaries per namespace (namespaces no longer listed keep their last
    /// value, as Flagger's do).
    pub fn set_totals(&self, totals: &BTreeMap<String, usize>) {
        for (namespace, count) in totals {
            self.total
                .get_or_create(&NamespaceLabels {
                    namespace: namespace.clone(),
                })
                .set(i64::try_from(*count).unwrap_or(i64::MAX));
        }
    }

    /// Sets the objects and bytes the watch cache of `kind` holds.
    pub fn set_cache_footprint(&self, kind: &str, footprint: crate::json_store::Footprint) {
        let labels = KindLabels {
            kind: kind.to_string(),
        };
        self.cache_objects
            .get_or_create(&labels)
            .set(i64::try_from(footprint.objects).unwrap_or(i64::MAX));
        self.cache_bytes
            .get_or_create(&labels)
            .set(i64::try_from(footprint.bytes).unwrap_or(i64::MAX));
    }

    /// Records a tick's outcome for the canary of `target` in `namespace`: its phase, weights
    /// and failed checks.
    pub fn record_tick(
        &self,
        target: &str,
        namespace: &str,
        phase: Option<Phase>,
        weight: i32,
        failed_checks: i32,
    ) {
        self.status
            .get_or_create(&canary_labels(target, namespace))
            .set(status_value(phase));
        self.failed_checks
            .get_or_create(&canary_labels(target, namespace))
            .set(i64::from(failed_checks));
        let canary = weight.clamp(0, 100);
        for (workload, value) in [
            (format!("{target}-primary"), 100 - canary),
            (target.to_string(), canary),
        ] {
            self.weight
                .get_or_create(&WorkloadLabels {
                    workload,
                    namespace: namespace.to_string(),
                })
                .set(i64::from(value));
        }
    }

    /// Counts one reconcile of any Canary (`serin_reconcile_total`, for API requests per tick).
    pub fn count_reconcile(&self) {
        self.reconciles.inc();
    }

    /// Counts one reconcile, like [`OperatorMetrics::count_reconcile`], and times it: the returned
    /// timer observes `serin_reconcile_duration_seconds` when dropped, however the reconcile ends.
    pub fn start_reconcile(&self) -> ReconcileTimer {
        self.reconciles.inc();
        ReconcileTimer {
            histogram: self.reconcile_duration.clone(),
            started: Instant::now(),
        }
    }

    /// A layer for a kube client that counts each request it sends in
    /// `serin_kubernetes_api_requests_total{verb, code}`.
    pub fn kubernetes_api_layer(&self) -> ApiRequestCounter {
        ApiRequestCounter {
            requests: Family::clone(&self.api_requests),
        }
    }

    /// Sets the last value read for `metric` of the canary of `target`.
    pub fn record_metric(&self, target: &str, namespace: &str, metric: &str, value: f64) {
        self.analysis
            .get_or_create(&AnalysisLabels {
                name: target.to_string(),
                namespace: namespace.to_string(),
                metric: metric.to_string(),
            })
            .set(value);
    }

    /// Counts a finished release: `succeeded` or failed, with its strategy (`canary`, `blue-green`,
    /// `ab-testing`) and whether the analysis ran (`completed`) or was `skipped`.
    pub fn record_release(
        &self,
        target: &str,
        namespace: &str,
        succeeded: bool,
        strategy: &str,
        analysis_status: &str,
    ) {
        let counter = if succeeded {
            &self.successes
        } else {
            &self.failures
        };
        counter
            .get_or_create(&ReleaseLabels {
                name: target.to_string(),
                namespace: namespace.to_string(),
                deployment_strategy: strategy.to_string(),
                analysis_status: analysis_status.to_string(),
            })
            .inc();
    }

    /// Observes how long an analysing tick of the canary of `target` took.
    pub fn observe_duration(&self, target: &str, namespace: &str, seconds: f64) {
        self.duration
            .get_or_create(&canary_labels(target, namespace))
            .observe(seconds);
    }

    /// The metrics in OpenMetrics text, served with [`CONTENT_TYPE`].
    pub fn render(&self) -> String {
        // Read at scrape time, so the value is as fresh as the scrape.
        if let Some(bytes) = resident_memory_bytes() {
            self.resident_memory
                .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}

/// Times one reconcile (see [`OperatorMetrics::start_reconcile`]).
#[must_use = "the reconcile is timed until the timer is dropped"]
pub struct ReconcileTimer {
    histogram: Histogram,
    started: Instant,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.histogram.observe(self.started.elapsed().as_secs_f64());
    }
}

/// The resident memory of this process: the resident pages in `/proc/self/statm` (its second
/// field) times the page size; `None` where there is no such file.
fn resident_memory_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf only reads a configuration value; _SC_PAGESIZE is always defined on Linux.
    let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page_size).ok()?)
}

/// The Kubernetes verb of an API request, as the API server's audit log and RBAC name it: a GET
/// is `get`, `list` or `watch`, a DELETE of a collection `deletecollection`.
pub fn kubernetes_verb(method: &http::Method, uri: &http::Uri) -> String {
    let collection = names_a_collection(uri.path());
    let watching = uri.query().is_some_and(|query| {
        query
            .split('&')
            .any(|p| p == "watch=true" || p == "watch=1")
    });
    match *method {
        http::Method::GET if watching => "watch",
        http::Method::GET if collection => "list",
        http::Method::GET => "get",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if collection => "deletecollection",
        http::Method::DELETE => "delete",
        ref other => return other.as_str().to_ascii_lowercase(),
    }
    .to_string()
}

/// Whether an API path names a collection (`/api/v1/namespaces/test/pods`) rather than an object,
/// a subresource or a discovery document.
fn names_a_collection(path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segments.as_slice() {
        ["api", _, rest @ ..] | ["apis", _, _, rest @ ..] => rest,
        _ => return false,
    };
    let resource = match rest {
        ["namespaces", _, resource @ ..] if !resource.is_empty() => resource,
        other => other,
    };
    resource.len() == 1
}

/// A tower layer for the kube client that counts every request in
/// `serin_kubernetes_api_requests_total` once its answer (or failure) comes; made by
/// [`OperatorMetrics::kubernetes_api_layer`]. Put it below a layer that refuses requests, so only
/// requests that were sent are counted.
#[derive(Clone)]
pub struct ApiRequestCounter {
    requests: Family<ApiRequestLabels, Counter>,
}

impl<S> tower::Layer<S> for ApiRequestCounter {
    type Service = CountedRequests<S>;

    fn layer(&self, inner: S) -> CountedRequests<S> {
        CountedRequests {
            inner,
            requests: Family::clone(&self.requests),
        }
    }
}

/// The service [`ApiRequestCounter`] wraps around the kube client's stack.
#[derive(Clone)]
pub struct CountedRequests<S> {
    inner: S,
    requests: Family<ApiRequestLabels, Counter>,
}

impl<S, RequestBody, ResponseBody> tower::Service<http::Request<RequestBody>> for CountedRequests<S>
where
    S: tower::Service<http::Request<RequestBody>, Response = http::Response<ResponseBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResponseBody: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<RequestBody>) -> Self::Future {
        let verb = kubernetes_verb(request.method(), request.uri());
        let requests = Family::clone(&self.requests);
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            let code = match &answer {
                Ok(response) => response.status().as_u16().to_string(),
                Err(_) => "error".to_string(),
            };
            requests
                .get_or_create(&ApiRequestLabels { verb, code })
                .inc();
            answer
        })
    }
}

/// The `GET /metrics` route of an admin server: `metrics` in OpenMetrics text.
pub fn metrics_route<S: Clone + Send + Sync + 'static>(
    metrics: std::sync::Arc<OperatorMetrics>,
) -> axum::routing::MethodRouter<S> {
    axum::routing::get(move || {
        let text = metrics.render();
        async move { ([(http::header::CONTENT_TYPE, CONTENT_TYPE)], text) }
    })
}

/// The reference page of every metric the operator serves: name, type, labels and meaning, from
/// one sample of each family (`make reference` writes it to `docs/reference/metrics.md`).
#[cfg(test)]
fn reference_markdown() -> String {
    use std::fmt::Write as _;
    let mut metrics = OperatorMetrics::default();
    metrics.add_flagger_names();
    metrics.set_info("VERSION", "istio");
    metrics.set_leader(true);
    metrics.set_totals(&BTreeMap::from([("NS".to_string(), 1)]));
    metrics.set_cache_footprint("Deployment", crate::json_store::Footprint::default());
    metrics.record_tick("NAME", "NS", Some(Phase::Progressing), 10, 0);
    metrics.count_reconcile();
    drop(metrics.start_reconcile());
    metrics.record_metric("NAME", "NS", "METRIC", 1.0);
    metrics.record_release("NAME", "NS", true, "canary", "completed");
    metrics.record_release("NAME", "NS", false, "canary", "completed");
    metrics.observe_duration("NAME", "NS", 1.0);
    metrics
        .api_requests
        .get_or_create(&ApiRequestLabels {
            verb: "GET".into(),
            code: "200".into(),
        })
        .inc();
    let text = metrics.render();
    let mut out = String::from(
        "# Reference: the operator's Prometheus metrics\n\n\
         <!-- Generated by `make reference` from crates/serin-controller; do not edit. -->\n\n\
         Served at `/metrics` on the operator's `--admin-address` (the chart's metrics Service and its\n\
         ServiceMonitor or PodMonitor scrape it). The `flagger_*` names carry the same values for\n\
         dashboards and alerts written for Flagger.\n\n\
         | metric | type | labels | meaning |\n|---|---|---|---|\n",
    );
    let mut types = BTreeMap::new();
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            types.insert(name.to_string(), kind.to_string());
        } else if !line.starts_with('#')
            && let Some((series, _)) = line.split_once('{')
        {
            let family = types
                .keys()
                .filter(|name| series.starts_with(name.as_str()))
                .max_by_key(|name| name.len())
                .cloned()
                .unwrap_or_default();
            let keys: Vec<&str> = line[series.len() + 1..]
                .split(',')
                .filter_map(|pair| pair.split_once('=').map(|(key, _)| key))
                .filter(|key| *key != "le")
                .collect();
            labels.entry(family).or_insert_with(|| keys.join(", "));
        }
    }
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            let kind = types.get(name).map_or("", String::as_str);
            let shown = match kind {
                "counter" => format!("{name}_total"),
                _ => name.to_string(),
            };
            let labels = labels.get(name).map_or("", String::as_str);
            let _ = writeln!(
                out,
                "| `{shown}` | {kind} | {labels} | {} |",
                help.replace('|', "\\|")
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_checked_in_metrics_reference_is_current() {
        let page = super::reference_markdown();
        assert!(page.contains("| `serin_canary_weight` | gauge | workload, namespace |"));
        serin_api::reference::check_checked_in("docs/reference/metrics.md", &page)
            .unwrap_or_else(|problem| panic!("{problem}"));
    }

    use super::*;

    #[test]
    fn serving_flaggers_canaries_the_metrics_also_go_by_flaggers_names() {
        let mut metrics = OperatorMetrics::default();
        metrics.add_flagger_names();
        metrics.set_info("1.2.3", "istio");
        metrics.set_totals(&BTreeMap::from([("test".to_string(), 1)]));
        metrics.record_tick("podinfo", "test", Some(Phase::Progressing), 30, 0);
        metrics.record_metric("podinfo", "test", "request-success-rate", 100.0);
        metrics.observe_duration("podinfo", "test", 0.03);
        metrics.record_release("podinfo", "test", true, "canary", "completed");
        let text = metrics.render();
        for line in [
            "flagger_info{version=\"1.2.3\",mesh_provider=\"istio\"} 1",
            "flagger_canary_total{namespace=\"test\"} 1",
            "flagger_canary_status{name=\"podinfo\",namespace=\"test\"} 0",
            "flagger_canary_weight{workload=\"podinfo\",namespace=\"test\"} 30",
            "flagger_canary_weight{workload=\"podinfo-primary\",namespace=\"test\"} 70",
            "flagger_canary_metric_analysis{name=\"podinfo\",namespace=\"test\",metric=\"request-success-rate\"} 100.0",
            "flagger_canary_successes_total{name=\"podinfo\",namespace=\"test\",deployment_strategy=\"canary\",analysis_status=\"completed\"} 1",
            "flagger_canary_duration_seconds_count{name=\"podinfo\",namespace=\"test\"} 1",
            "serin_canary_status{name=\"podinfo\",namespace=\"test\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }

    #[test]
    fn a_progressing_canary_is_rendered_with_flaggers_labels() {
        let metrics = OperatorMetrics::default();
        metrics.set_totals(&BTreeMap::from([("test".to_string(), 2)]));
        metrics.record_tick("podinfo", "test", Some(Phase::Progressing), 20, 1);
        metrics.record_metric("podinfo", "test", "request-success-rate", 99.5);
        metrics.observe_duration("podinfo", "test", 0.03);
        metrics.record_release("podinfo", "test", false, "canary", "completed");
        let text = metrics.render();
        for line in [
            "serin_canary_total{namespace=\"test\"} 2",
            "serin_canary_status{name=\"podinfo\",namespace=\"test\"} 0",
            "serin_canary_weight{workload=\"podinfo\",namespace=\"test\"} 20",
            "serin_canary_failed_checks{name=\"podinfo\",namespace=\"test\"} 1",
            "serin_canary_weight{workload=\"podinfo-primary\",namespace=\"test\"} 80",
            "serin_canary_metric_analysis{name=\"podinfo\",namespace=\"test\",metric=\"request-success-rate\"} 99.5",
            "serin_canary_failures_total{name=\"podinfo\",namespace=\"test\",deployment_strategy=\"canary\",analysis_status=\"completed\"} 1",
            "serin_canary_duration_seconds_bucket{le=\"0.025\",name=\"podinfo\",namespace=\"test\"} 0",
            "serin_canary_duration_seconds_bucket{le=\"0.05\",name=\"podinfo\",namespace=\"test\"} 1",
            "serin_canary_duration_seconds_count{name=\"podinfo\",namespace=\"test\"} 1",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        metrics.record_tick("podinfo", "test", Some(Phase::Failed), 0, 0);
        assert!(
            metrics
                .render()
                .contains("serin_canary_status{name=\"podinfo\",namespace=\"test\"} 2")
        );
    }

    #[test]
    fn the_caches_footprint_is_shown_by_kind() {
        let metrics = OperatorMetrics::default();
        let footprint = |objects, bytes| crate::json_store::Footprint { objects, bytes };
        metrics.set_cache_footprint("Deployment", footprint(2, 3350));
        metrics.set_cache_footprint("Service", footprint(3, 2202));
        metrics.set_cache_footprint("Deployment", footprint(1, 1675));
        let text = metrics.render();
        for line in [
            "serin_cache_objects{kind=\"Deployment\"} 1",
            "serin_cache_bytes{kind=\"Deployment\"} 1675",
            "serin_cache_objects{kind=\"Service\"} 3",
            "serin_cache_bytes{kind=\"Service\"} 2202",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }

    #[test]
    fn a_reconcile_is_counted_and_timed_when_its_timer_is_dropped() {
        let metrics = OperatorMetrics::default();
        let timer = metrics.start_reconcile();
        assert!(
            metrics
                .render()
                .contains("serin_reconcile_duration_seconds_count 0"),
            "observed before the reconcile ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(30));
        drop(timer);
        let text = metrics.render();
        for line in [
            "serin_reconcile_total 1",
            "serin_reconcile_duration_seconds_count 1",
            "serin_reconcile_duration_seconds_bucket{le=\"0.025\"} 0",
            "serin_reconcile_duration_seconds_bucket{le=\"10.0\"} 1",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }

    #[test]
    fn resident_memory_is_read_at_each_render() {
        let text = OperatorMetrics::default().render();
        let bytes: u64 = text
            .lines()
            .find_map(|line| line.strip_prefix("process_resident_memory_bytes "))
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("no process_resident_memory_bytes in\n{text}"));
        // A test binary's resident set is megabytes, and never a whole terabyte.
        assert!((1 << 20..1 << 40).contains(&bytes), "{bytes}");
    }

    #[test]
    fn requests_are_named_by_their_kubernetes_verb() {
        for (method, uri, verb) in [
            ("GET", "/api/v1/namespaces/test/pods", "list"),
            (
                "GET",
                "/api/v1/namespaces/test/pods?watch=true&resourceVersion=5",
                "watch",
            ),
            ("GET", "/apis/apps/v1/deployments?watch=1", "watch"),
            (
                "GET",
                "/apis/apps/v1/namespaces/test/deployments/podinfo",
                "get",
            ),
            ("GET", "/api/v1/namespaces", "list"),
            ("GET", "/api/v1/namespaces/test", "get"),
            ("GET", "/apis", "get"),
            ("GET", "/apis/serin.dev/v1beta1", "get"),
            ("POST", "/api/v1/namespaces/test/events", "create"),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/default/leases/serin-operator",
                "update",
            ),
            (
                "PATCH",
                "/apis/serin.dev/v1beta1/namespaces/test/canaries/podinfo/status",
                "patch",
            ),
            ("DELETE", "/api/v1/namespaces/test/pods/podinfo-1", "delete"),
            ("DELETE", "/api/v1/namespaces/test/pods", "deletecollection"),
        ] {
            let method: http::Method = method.parse().unwrap();
            let uri: http::Uri = uri.parse().unwrap();
            assert_eq!(kubernetes_verb(&method, &uri), verb, "{method} {uri}");
        }
    }

    /// An API server stand-in that answers every request with one status, or fails it.
    struct Answers(Option<u16>);

    impl tower::Service<http::Request<()>> for Answers {
        type Response = http::Response<()>;
        type Error = &'static str;
        type Future = std::future::Ready<Result<http::Response<()>, &'static str>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<()>) -> Self::Future {
            std::future::ready(match self.0 {
                Some(status) => Ok(http::Response::builder().status(status).body(()).unwrap()),
                None => Err("connection refused"),
            })
        }
    }

    #[test]
    fn the_client_layer_counts_each_request_by_verb_and_code() {
        use tower::{Layer, Service};
        let metrics = OperatorMetrics::default();
        let layer = metrics.kubernetes_api_layer();
        let send = |answer: Option<u16>, method: &str, uri: &str| {
            let request = http::Request::builder()
                .method(method)
                .uri(uri)
                .body(())
                .unwrap();
            let _ = futures::executor::block_on(layer.layer(Answers(answer)).call(request));
        };
        send(
            Some(200),
            "GET",
            "/apis/serin.dev/v1beta1/namespaces/test/canaries?watch=true",
        );
        send(
            Some(200),
            "GET",
            "/apis/serin.dev/v1beta1/namespaces/test/canaries?watch=true",
        );
        send(
            Some(404),
            "GET",
            "/api/v1/namespaces/test/configmaps/missing",
        );
        send(
            None,
            "PATCH",
            "/apis/apps/v1/namespaces/test/deployments/podinfo",
        );
        let text = metrics.render();
        for line in [
            "serin_kubernetes_api_requests_total{verb=\"watch\",code=\"200\"} 2",
            "serin_kubernetes_api_requests_total{verb=\"get\",code=\"404\"} 1",
            "serin_kubernetes_api_requests_total{verb=\"patch\",code=\"error\"} 1",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
}
