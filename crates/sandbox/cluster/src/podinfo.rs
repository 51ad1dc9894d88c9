//! The built-in podinfo demo app that pods with a podinfo image run: the endpoints Flagger's tests
//! use, podinfo's request metrics at `/metrics`, plus faults set from the container's args
//! (`--random-error`, `--random-delay`) or env (`ERROR_RATE`, `LATENCY`).

use axum::Router;
use axum::body::Bytes;
use axum::extract::{MatchedPath, Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Longest `/delay/{seconds}` sleeps, so a request cannot hold a server for long.
pub const MAX_DELAY: Duration = Duration::from_secs(30);

/// The port podinfo listens on when `--port` is not given.
pub const DEFAULT_PORT: u16 = 9898;

/// How one podinfo container behaves, read from its image, args and env.
#[derive(Clone, Debug, PartialEq)]
pub struct PodinfoSettings {
    /// Reported as `hostname` (the pod's name).
    pub hostname: String,
    /// Reported as `version`: the image tag, e.g. `6.0.1`.
    pub version: String,
    /// The port the app would listen on in a cluster (`--port`, default 9898).
    pub port: u16,
    /// The port podinfo serves `/metrics` on in a cluster (`--port-metrics`; podinfo's default, 0,
    /// is none).
    pub metrics_port: Option<u16>,
    /// The port podinfo serves gRPC on (`--grpc-port`; podinfo's default, 0, is none): the health
    /// service, for the server and for `grpc_service_name`.
    pub grpc_port: Option<u16>,
    /// The service name podinfo's health service reports serving (`--grpc-service-name`).
    pub grpc_service_name: String,
    /// The container's environment as `/env` reports it, `KEY=value` each.
    pub env: Vec<String>,
    /// Share of requests (0 to 1) answered 500, from `ERROR_RATE`; the failures are spread evenly.
    pub error_rate: f64,
    /// Added to every request, from `LATENCY` (`250ms`, `1s`).
    pub latency: Duration,
    /// podinfo's `--random-error`: a third of requests fail with 500.
    pub random_error: bool,
    /// podinfo's `--random-delay`: each request waits a random time between these bounds.
    pub random_delay: Option<(Duration, Duration)>,
}

/// The version in an image reference's tag: `ghcr.io/stefanprodan/podinfo:6.0.1` gives `6.0.1`,
/// no tag gives `latest`; a digest is ignored.
pub fn image_version(image: &str) -> String {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last_segment = without_digest.rsplit('/').next().unwrap_or(without_digest);
    match last_segment.split_once(':') {
        Some((_, tag)) if !tag.is_empty() => tag.to_string(),
        _ => "latest".to_string(),
    }
}

/// A Go duration such as `250ms`, `1s`, `1.5s` or `2m`, or a bare number of milliseconds.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    match text.parse::<f64>() {
        Ok(millis) => {
            (millis.is_finite() && millis >= 0.0).then(|| Duration::from_secs_f64(millis / 1000.0))
        }
        Err(_) => serin_api::duration::parse_go_duration(text).ok(),
    }
}

fn flag_enabled(value: Option<&str>) -> bool {
    !matches!(value, Some("false") | Some("0") | Some("False"))
}

impl PodinfoSettings {
    /// Settings for `container` (a Pod spec container) of the pod named `hostname`: the version
    /// from the image tag, flags from `command` and `args`, faults and `/env` from literal `env`
    /// values.
    pub fn from_container(container: &Value, hostname: &str) -> PodinfoSettings {
        let mut settings = PodinfoSettings {
            hostname: hostname.to_string(),
            version: image_version(container["image"].as_str().unwrap_or_default()),
            port: DEFAULT_PORT,
            metrics_port: None,
            grpc_port: None,
            grpc_service_name: "podinfo".into(),
            env: Vec::new(),
            error_rate: 0.0,
            latency: Duration::ZERO,
            random_error: false,
            random_delay: None,
        };
        let words = ["command", "args"]
            .iter()
            .flat_map(|key| container[*key].as_array().cloned().unwrap_or_default())
            .filter_map(|w| w.as_str().map(String::from))
            // A shell-style command (`./podinfo --port=9898 ...`) is one string.
            .flat_map(|w| {
                w.split_whitespace()
                    .map(String::from)
                    .collect::<Vec<String>>()
            });
        let (mut delay_min, mut delay_max, mut delay_unit) = (0.0_f64, 5.0_f64, "s".to_string());
        let mut random_delay = false;
        for word in words {
            let flag = word.trim_start_matches('-');
            if flag.len() == word.len() {
                continue;
            }
            let (name, value) = match flag.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (flag, None),
            };
            match name {
                "port" => {
                    if let Some(port) = value.and_then(|v| v.parse().ok()) {
                        settings.port = port;
                    }
                }
                "port-metrics" => {
                    settings.metrics_port = value.and_then(|v| v.parse().ok()).filter(|p| *p > 0)
                }
                "grpc-port" => {
                    settings.grpc_port = value.and_then(|v| v.parse().ok()).filter(|p| *p > 0)
                }
                "grpc-service-name" => {
                    if let Some(name) = value {
                        settings.grpc_service_name = name.to_string();
                    }
                }
                "random-error" => settings.random_error = flag_enabled(value),
                "random-delay" => random_delay = flag_enabled(value),
                "random-delay-min" => delay_min = value.and_then(|v| v.parse().ok()).unwrap_or(0.0),
                "random-delay-max" => delay_max = value.and_then(|v| v.parse().ok()).unwrap_or(5.0),
                "random-delay-unit" => delay_unit = value.unwrap_or("s").to_string(),
                _ => {}
            }
        }
        if random_delay {
            let unit = if delay_unit == "ms" { 0.001 } else { 1.0 };
            let bound = |n: f64| Duration::from_secs_f64((n * unit).clamp(0.0, 30.0));
            settings.random_delay = Some((bound(delay_min), bound(delay_max.max(delay_min))));
        }
        // Literal values only here; `for_pod` resolves the downward-API ones too.
        settings.env = std::iter::once(format!("HOSTNAME={hostname}"))
            .chain(
                container["env"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|var| {
                        Some(format!(
                            "{}={}",
                            var["name"].as_str()?,
                            var["value"].as_str()?
                        ))
                    }),
            )
            .collect();
        for var in container["env"].as_array().into_iter().flatten() {
            let Some(value) = var["value"].as_str() else {
                continue;
            };
            match var["name"].as_str().unwrap_or_default() {
                "ERROR_RATE" => {
                    settings.error_rate = value.trim().parse::<f64>().unwrap_or(0.0).clamp(0.0, 1.0)
                }
                "LATENCY" => settings.latency = parse_duration(value).unwrap_or_default(),
                "PODINFO_RANDOM_ERROR" => settings.random_error = flag_enabled(Some(value)),
                _ => {}
            }
        }
        settings
    }

    /// Settings for `container` of `pod`: as [`PodinfoSettings::from_container`], with the env's
    /// downward-API `fieldRef`s (the pod's name, namespace, ...) resolved for `/env`.
    pub fn for_pod(pod: &Value, container: &Value) -> PodinfoSettings {
        let hostname = pod["metadata"]["name"].as_str().unwrap_or_default();
        let mut settings = PodinfoSettings::from_container(container, hostname);
        settings.env = std::iter::once(format!("HOSTNAME={hostname}"))
            .chain(
                crate::process::container_env(pod, container)
                    .into_iter()
                    .map(|(name, value)| format!("{name}={value}")),
            )
            .collect();
        settings
    }
}

/// The buckets of `http_request_duration_seconds`: the Prometheus clients' defaults, which podinfo
/// uses.
pub const DURATION_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// What `/metrics` answers with: OpenMetrics text, which Prometheus reads as it reads the older
/// text format podinfo's Go client serves.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DurationLabels {
    method: String,
    path: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: String,
}

/// podinfo's RED metrics: `http_request_duration_seconds{method,path,status}` and
/// `http_requests_total{status}`, for every request but the scrapes of `/metrics`.
struct RequestMetrics {
    registry: Registry,
    durations: Family<DurationLabels, Histogram, fn() -> Histogram>,
    requests: Family<StatusLabels, Counter>,
}

impl RequestMetrics {
    fn new() -> Self {
        let durations: Family<DurationLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(|| Histogram::new(DURATION_BUCKETS));
        let requests = Family::<StatusLabels, Counter>::default();
        let mut registry = Registry::default();
        // The client appends the `.` podinfo's help texts end with, and `_total` to counters.
        registry.register(
            "http_request_duration_seconds",
            "Seconds spent serving HTTP requests",
            durations.clone(),
        );
        registry.register(
            "http_requests",
            "The total number of HTTP requests",
            requests.clone(),
        );
        RequestMetrics {
            registry,
            durations,
            requests,
        }
    }

    fn observe(&self, method: &str, path: &str, status: u16, took: Duration) {
        let status = status.to_string();
        self.durations
            .get_or_create(&DurationLabels {
                method: method.to_string(),
                path: path.to_string(),
                status: status.clone(),
            })
            .observe(took.as_secs_f64());
        self.requests.get_or_create(&StatusLabels { status }).inc();
    }

    fn render(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}

/// podinfo's `path` label: the route's template without its parameters (podinfo names its
/// `/status/{code}` and `/delay/{wait}` routes `status` and `delay`), lower-cased with every run of
/// other characters than letters and digits made one `_`; `root` for `/`.
fn path_label(route: &str) -> String {
    let without_parameters: Vec<&str> = route
        .split('/')
        .filter(|segment| !segment.starts_with('{'))
        .collect();
    let mut label = String::new();
    for c in without_parameters.join("/").chars() {
        if c.is_ascii_alphanumeric() {
            label.push(c.to_ascii_lowercase());
        } else if !label.ends_with('_') {
            label.push('_');
        }
    }
    let label = label.trim_matches('_');
    if label.is_empty() {
        "root".to_string()
    } else {
        label.to_string()
    }
}

/// Observes every request but `/metrics` itself (the scrapes) in podinfo's metrics, faults
/// included: it runs outside the faults middleware, as podinfo's Prometheus middleware does.
async fn record(
    State(metrics): State<Arc<RequestMetrics>>,
    request: Request,
    next: Next,
) -> Response {
    if request.uri().path() == "/metrics" {
        return next.run(request).await;
    }
    let path = match request.extensions().get::<MatchedPath>() {
        Some(route) => path_label(route.as_str()),
        // An unknown URL is labelled by itself, as in podinfo.
        None => path_label(request.uri().path_and_query().map_or("/", |p| p.as_str())),
    };
    let method = request.method().to_string();
    let started = Instant::now();
    let response = next.run(request).await;
    metrics.observe(
        &method,
        &path,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

/// Go's canonical form of a header name, as podinfo's `/headers` shows it: `x-request-id` gives
/// `X-Request-Id`.
fn canonical_header_name(name: &str) -> String {
    let mut canonical = String::with_capacity(name.len());
    let mut upper = true;
    for c in name.chars() {
        canonical.push(if upper {
            c.to_ascii_uppercase()
        } else {
            c.to_ascii_lowercase()
        });
        upper = c == '-';
    }
    canonical
}

/// `/headers`: the request's headers as Go's `http.Header` encodes them, each name with the list of
/// its values (`Host` is not among them in Go either).
async fn headers(request_headers: HeaderMap) -> Response {
    let mut grouped: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in &request_headers {
        if name == axum::http::header::HOST {
            continue;
        }
        grouped
            .entry(canonical_header_name(name.as_str()))
            .or_default()
            .push(String::from_utf8_lossy(value.as_bytes()).into_owned());
    }
    json_response(StatusCode::OK, json!(grouped))
}

/// A uniformly distributed number in [0, 1) from the operating system's randomness.
fn random_fraction() -> f64 {
    let bits = (uuid::Uuid::new_v4().as_u128() >> 64) as u64 >> 11;
    bits as f64 / (1u64 << 53) as f64
}

fn json_response(status: StatusCode, body: Value) -> Response {
    (
        status,
        [("content-type", "application/json; charset=utf-8")],
        body.to_string(),
    )
        .into_response()
}

/// Decides which requests `ERROR_RATE` fails: they are spread evenly over the requests a pod serves,
/// so any stretch of N requests holds the configured share of errors to within one request. With
/// random picks, a metric window seeing a few thousand requests could stray by two points or more.
#[derive(Debug, Default)]
struct EvenErrors {
    served: AtomicU64,
}

impl EvenErrors {
    /// Whether the next request fails at `rate` (0 to 1): request n fails when the running count of
    /// `n * rate` passes a whole number.
    fn next_fails(&self, rate: f64) -> bool {
        if rate <= 0.0 {
            return false;
        }
        let n = self.served.fetch_add(1, Ordering::Relaxed) as f64;
        ((n + 1.0) * rate).floor() > (n * rate).floor()
    }
}

/// What the faults layer needs: the pod's settings and where it is in its spread of errors.
struct FaultState {
    settings: Arc<PodinfoSettings>,
    errors: EvenErrors,
}

/// Faults apply to everything but the probe endpoints and `/metrics` (podinfo serves it on its own
/// metrics port), so a faulty version still becomes Ready, receives traffic and is scraped, which is
/// what canary analysis has to catch.
async fn faults(State(state): State<Arc<FaultState>>, request: Request, next: Next) -> Response {
    let settings = &state.settings;
    let path = request.uri().path();
    if path == "/healthz" || path == "/readyz" || path == "/metrics" {
        return next.run(request).await;
    }
    let mut wait = settings.latency;
    if let Some((low, high)) = settings.random_delay {
        wait += low + (high - low).mul_f64(random_fraction());
    }
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    let failed = state.errors.next_fails(settings.error_rate)
        || (settings.random_error && random_fraction() < 1.0 / 3.0);
    if failed {
        return json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"code": 500, "message": "injected fault"}),
        );
    }
    next.run(request).await
}

async fn info(State(s): State<Arc<PodinfoSettings>>) -> Response {
    json_response(
        StatusCode::OK,
        json!({
            "hostname": s.hostname,
            "version": s.version,
            "revision": "",
            "color": "#34577c",
            "logo": "https://raw.githubusercontent.com/stefanprodan/podinfo/gh-pages/cuddle_clap.gif",
            "message": format!("greetings from podinfo v{}", s.version),
            "goos": "linux",
            "goarch": "amd64",
            "runtime": "serin-sandbox",
            "num_goroutine": "1",
            "num_cpu": "1"
        }),
    )
}

async fn status_code(Path(code): Path<String>) -> Response {
    match code
        .parse::<u16>()
        .ok()
        .and_then(|c| StatusCode::from_u16(c).ok())
    {
        Some(status) => json_response(status, json!({"status": status.as_u16()})),
        None => json_response(
            StatusCode::BAD_REQUEST,
            json!({"code": 400, "message": "invalid status code"}),
        ),
    }
}

async fn delay(Path(seconds): Path<String>) -> Response {
    let Ok(seconds) = seconds.parse::<u64>() else {
        return json_response(
            StatusCode::BAD_REQUEST,
            json!({"code": 400, "message": "invalid delay"}),
        );
    };
    tokio::time::sleep(Duration::from_secs(seconds).min(MAX_DELAY)).await;
    json_response(StatusCode::OK, json!({"delay": seconds}))
}

async fn token(State(s): State<Arc<PodinfoSettings>>) -> Response {
    json_response(
        StatusCode::OK,
        json!({
            "token": format!("sandbox.{}.{}", s.hostname, uuid::Uuid::new_v4().simple()),
            "expires_at": "2099-01-01T00:00:00Z"
        }),
    )
}

/// `/env`: the container's environment, as podinfo lists its process's (`KEY=value` each).
async fn env(State(s): State<Arc<PodinfoSettings>>) -> Response {
    json_response(StatusCode::OK, json!(s.env))
}

async fn echo(body: Bytes) -> Response {
    (StatusCode::ACCEPTED, body).into_response()
}

/// The podinfo app as an axum router with its faults applied and its requests measured.
pub fn router(settings: PodinfoSettings) -> Router {
    // gRPC shares the pod's one server (HTTP/2 without TLS); podinfo's HTTP faults do not touch it.
    let grpc = match settings.grpc_port {
        Some(_) => crate::grpc_health::health_router(settings.grpc_service_name.clone()),
        None => Router::new(),
    };
    let settings = Arc::new(settings);
    let metrics = Arc::new(RequestMetrics::new());
    let scraped = metrics.clone();
    Router::new()
        .route("/", get(info))
        .route(
            "/version",
            get(|State(s): State<Arc<PodinfoSettings>>| async move {
                json_response(StatusCode::OK, json!({"commit": "", "version": s.version}))
            }),
        )
        .route(
            "/healthz",
            get(|| async { json_response(StatusCode::OK, json!({"status": "OK"})) }),
        )
        .route(
            "/readyz",
            get(|| async { json_response(StatusCode::OK, json!({"status": "OK"})) }),
        )
        .route("/status/{code}", get(status_code))
        .route("/delay/{seconds}", get(delay))
        .route("/token", post(token))
        .route("/echo", post(echo))
        .route("/headers", get(headers).post(headers))
        .route("/env", get(env).post(env))
        .route(
            "/metrics",
            get(
                move || async move { ([("content-type", METRICS_CONTENT_TYPE)], scraped.render()) },
            ),
        )
        // Set here, so the layers below measure it and the gRPC routes merged after keep it.
        .fallback(|| async { StatusCode::NOT_FOUND })
        .layer(middleware::from_fn_with_state(
            Arc::new(FaultState {
                settings: settings.clone(),
                errors: EvenErrors::default(),
            }),
            faults,
        ))
        // Outermost, so what the faults did (delays, 500s) is measured.
        .layer(middleware::from_fn_with_state(metrics, record))
        .with_state(settings)
        .merge(grpc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_comes_from_the_image_tag() {
        assert_eq!(image_version("ghcr.io/stefanprodan/podinfo:6.0.1"), "6.0.1");
        assert_eq!(image_version("localhost:5000/podinfo"), "latest");
        assert_eq!(image_version("podinfo:6.1.0@sha256:abc"), "6.1.0");
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("1s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("40"), Some(Duration::from_millis(40)));
        assert_eq!(parse_duration("fast"), None);
        assert_eq!(parse_duration("1x"), None);
    }

    #[test]
    fn settings_come_from_the_e2e_fixture_command_and_env() {
        let container = json!({
            "image": "ghcr.io/stefanprodan/podinfo:6.0.0",
            "command": ["./podinfo", "--port=9898", "--random-delay=false", "--random-error=false"],
            "env": [{"name": "ERROR_RATE", "value": "0.2"}, {"name": "LATENCY", "value": "250ms"},
                    {"name": "PODINFO_SECRET_VALUE", "valueFrom": {"secretKeyRef": {"name": "s", "key": "v"}}}]
        });
        let s = PodinfoSettings::from_container(&container, "podinfo-abc");
        assert_eq!(s.version, "6.0.0");
        assert_eq!(s.hostname, "podinfo-abc");
        assert_eq!(s.port, 9898);
        assert_eq!(s.error_rate, 0.2);
        assert_eq!(s.latency, Duration::from_millis(250));
        assert!(!s.random_error);
        assert_eq!(s.random_delay, None);
    }

    #[test]
    fn podinfo_flags_turn_faults_on() {
        let container = json!({
            "image": "podinfo",
            "args": ["--port=8080", "--random-error", "--random-delay=true",
                     "--random-delay-min=10", "--random-delay-max=50", "--random-delay-unit=ms"],
            "env": [{"name": "ERROR_RATE", "value": "7"}]
        });
        let s = PodinfoSettings::from_container(&container, "p");
        assert_eq!(s.port, 8080);
        assert!(s.random_error);
        assert_eq!(
            s.random_delay,
            Some((Duration::from_millis(10), Duration::from_millis(50)))
        );
        assert_eq!(s.error_rate, 1.0, "rates are clamped to 0..1");
    }

    #[test]
    fn the_metrics_port_and_the_env_come_from_the_published_deployment() {
        let container = json!({
            "image": "ghcr.io/stefanprodan/podinfo:6.0.1",
            "command": ["./podinfo", "--port=9898", "--port-metrics=9797", "--grpc-port=9999",
                        "--grpc-service-name=podinfo", "--level=info"],
            "env": [{"name": "PODINFO_UI_COLOR", "value": "#34577c"},
                    {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
        });
        let pod = json!({"metadata": {"name": "podinfo-7d9f-x2b4c", "namespace": "test"}});
        let s = PodinfoSettings::for_pod(&pod, &container);
        assert_eq!((s.port, s.metrics_port), (9898, Some(9797)));
        assert_eq!(
            (s.grpc_port, s.grpc_service_name.as_str()),
            (Some(9999), "podinfo")
        );
        assert_eq!(
            s.env,
            [
                "HOSTNAME=podinfo-7d9f-x2b4c",
                "PODINFO_UI_COLOR=#34577c",
                "POD=podinfo-7d9f-x2b4c"
            ]
        );
        let off = json!({"image": "podinfo", "args": ["--port-metrics=0"]});
        assert_eq!(
            PodinfoSettings::from_container(&off, "p").metrics_port,
            None
        );
    }

    #[test]
    fn the_metrics_text_has_podinfos_histogram_and_counter() {
        let metrics = RequestMetrics::new();
        metrics.observe("GET", "root", 200, Duration::from_millis(3));
        metrics.observe("GET", "root", 200, Duration::from_millis(70));
        metrics.observe("GET", "status", 500, Duration::from_secs(20));
        let text = metrics.render();
        let expected_root = [
            r#"http_request_duration_seconds_sum{method="GET",path="root",status="200"} 0.073"#,
            r#"http_request_duration_seconds_count{method="GET",path="root",status="200"} 2"#,
            r#"http_request_duration_seconds_bucket{le="0.005",method="GET",path="root",status="200"} 1"#,
            r#"http_request_duration_seconds_bucket{le="0.05",method="GET",path="root",status="200"} 1"#,
            r#"http_request_duration_seconds_bucket{le="0.1",method="GET",path="root",status="200"} 2"#,
            r#"http_request_duration_seconds_bucket{le="10.0",method="GET",path="root",status="200"} 2"#,
            r#"http_request_duration_seconds_bucket{le="+Inf",method="GET",path="root",status="200"} 2"#,
            r#"http_request_duration_seconds_bucket{le="10.0",method="GET",path="status",status="500"} 0"#,
            r#"http_request_duration_seconds_bucket{le="+Inf",method="GET",path="status",status="500"} 1"#,
            r#"http_requests_total{status="200"} 2"#,
            r#"http_requests_total{status="500"} 1"#,
            "# HELP http_request_duration_seconds Seconds spent serving HTTP requests.",
            "# TYPE http_request_duration_seconds histogram",
            "# HELP http_requests The total number of HTTP requests.",
            "# TYPE http_requests counter",
        ];
        for line in expected_root {
            assert!(
                text.lines().any(|l| l.starts_with(line)),
                "{line} missing from:\n{text}"
            );
        }
        let buckets = text
            .lines()
            .filter(|l| l.contains(r#"path="root""#) && l.contains("_bucket"))
            .count();
        assert_eq!(buckets, 12, "11 default buckets and +Inf:\n{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn path_labels_are_podinfos_route_names() {
        assert_eq!(path_label("/"), "root");
        assert_eq!(path_label("/version"), "version");
        assert_eq!(path_label("/status/{code}"), "status");
        assert_eq!(path_label("/delay/{seconds}"), "delay");
        assert_eq!(path_label("/api/Echo"), "api_echo");
        assert_eq!(path_label("/no/such-page?x=1"), "no_such_page_x_1");
    }

    #[test]
    fn header_names_take_gos_canonical_form() {
        assert_eq!(canonical_header_name("x-request-id"), "X-Request-Id");
        assert_eq!(canonical_header_name("user-agent"), "User-Agent");
        assert_eq!(canonical_header_name("accept"), "Accept");
    }

    #[tokio::test]
    async fn the_router_measures_what_it_served_but_not_the_scrapes() {
        let container = json!({"image": "podinfo:6.0.1", "env": [{"name": "A", "value": "1"}]});
        let app = router(PodinfoSettings::from_container(&container, "p"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let get =
            |path: &'static str| crate::http_probe::http_get(address, path, Duration::from_secs(5));
        assert_eq!(get("/").await.unwrap().0, 200);
        assert_eq!(get("/status/503").await.unwrap().0, 503);
        assert_eq!(get("/nowhere").await.unwrap().0, 404);
        let (status, env) = get("/env").await.unwrap();
        assert_eq!(status, 200);
        assert_eq!(
            serde_json::from_str::<Value>(&env).unwrap(),
            json!(["HOSTNAME=p", "A=1"])
        );
        let (_, headers) = get("/headers").await.unwrap();
        let headers: Value = serde_json::from_str(&headers).unwrap();
        assert_eq!(headers["Connection"], json!(["close"]), "{headers}");
        assert!(headers.get("Host").is_none(), "{headers}");
        let (status, text) = get("/metrics").await.unwrap();
        assert_eq!(status, 200);
        for line in [
            r#"http_request_duration_seconds_count{method="GET",path="root",status="200"} 1"#,
            r#"http_request_duration_seconds_count{method="GET",path="status",status="503"} 1"#,
            r#"http_request_duration_seconds_count{method="GET",path="nowhere",status="404"} 1"#,
            r#"http_request_duration_seconds_count{method="GET",path="env",status="200"} 1"#,
            r#"http_requests_total{status="200"} 3"#,
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert!(!text.contains(r#"path="metrics""#), "{text}");
        server.abort();
    }

    #[tokio::test]
    async fn with_a_grpc_port_the_same_server_answers_grpc_health_checks_and_http() {
        use crate::grpc_health::{CheckError, Route, ServingStatus, check_health, code};
        let container = json!({"image": "podinfo:6.0.1", "args": ["--grpc-port=9999", "--random-error"],
                               "env": [{"name": "ERROR_RATE", "value": "1"}]});
        let settings = PodinfoSettings::from_container(&container, "p");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { axum::serve(listener, router(settings)).await });
        let route = Route {
            authority: address.to_string(),
            proxy: None,
        };
        let second = Duration::from_secs(1);
        assert_eq!(
            check_health(&route, "podinfo", "test", second, second).await,
            Ok(ServingStatus::Serving),
            "podinfo's HTTP faults do not touch gRPC"
        );
        assert!(matches!(
            check_health(&route, "other", "test", second, second).await,
            Err(CheckError::Rpc {
                code: code::NOT_FOUND,
                ..
            })
        ));
        let (status, _) = crate::http_probe::http_get(address, "/", second)
            .await
            .unwrap();
        assert_eq!(status, 500, "HTTP/1 on the same port keeps its faults");
        server.abort();
        let without = PodinfoSettings::from_container(&json!({"image": "podinfo:6.0.1"}), "p");
        assert_eq!(without.grpc_port, None);
    }

    #[test]
    fn error_rate_failures_are_spread_evenly() {
        let errors = EvenErrors::default();
        let fails: Vec<bool> = (0..1000).map(|_| errors.next_fails(0.2)).collect();
        assert_eq!(fails.iter().filter(|f| **f).count(), 200);
        // Every window of 50 requests holds 10 failures, give or take one.
        for window in fails.windows(50) {
            let failed = window.iter().filter(|f| **f).count();
            assert!((9..=11).contains(&failed), "{failed} of 50 failed");
        }
        let never = EvenErrors::default();
        assert!((0..100).all(|_| !never.next_fails(0.0)));
        let always = EvenErrors::default();
        assert!((0..100).all(|_| always.next_fails(1.0)));
    }

    #[test]
    fn random_fractions_stay_in_range() {
        for _ in 0..1000 {
            let f = random_fraction();
            assert!((0.0..1.0).contains(&f));
        }
    }
}
