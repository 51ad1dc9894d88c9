//! The built-in podinfo demo app that pods with a podinfo image run: the endpoints Flagger's tests
//! use, plus faults set from the container's args (`--random-error`, `--random-delay`) or env
//! (`ERROR_RATE`, `LATENCY`).

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

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
    /// Share of requests (0 to 1) answered 500, from `ERROR_RATE`.
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
    /// from the image tag, flags from `command` and `args`, faults from literal `env` values.
    pub fn from_container(container: &Value, hostname: &str) -> PodinfoSettings {
        let mut settings = PodinfoSettings {
            hostname: hostname.to_string(),
            version: image_version(container["image"].as_str().unwrap_or_default()),
            port: DEFAULT_PORT,
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

/// Faults apply to everything but the probe endpoints, so a faulty version still becomes Ready and
/// receives traffic, which is what canary analysis has to catch.
async fn faults(
    State(settings): State<Arc<PodinfoSettings>>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    if path == "/healthz" || path == "/readyz" {
        return next.run(request).await;
    }
    let mut wait = settings.latency;
    if let Some((low, high)) = settings.random_delay {
        wait += low + (high - low).mul_f64(random_fraction());
    }
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    let failed = (settings.error_rate > 0.0 && random_fraction() < settings.error_rate)
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

async fn echo(body: Bytes) -> Response {
    (StatusCode::ACCEPTED, body).into_response()
}

/// The podinfo app as an axum router with its faults applied.
pub fn router(settings: PodinfoSettings) -> Router {
    let settings = Arc::new(settings);
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
        .layer(middleware::from_fn_with_state(settings.clone(), faults))
        .with_state(settings)
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
    fn random_fractions_stay_in_range() {
        for _ in 0..1000 {
            let f = random_fraction();
            assert!((0.0..1.0).contains(&f));
        }
    }
}
