//! Measurements of analysis-step metrics against loopback servers standing in for Prometheus and
//! for a `web` metric's endpoint: rendering with args, conditions, jsonPath, and the bounds on
//! what a tenant's endpoint may make the operator read or wait for.

use axum::http::{HeaderMap, StatusCode, Uri, header};
use serin_api::limits::MAX_WEB_METRIC_ANSWER_BYTES;
use serin_api::{AnalysisMetric, AnalysisPhase, MetricTemplate};
use serin_core::plan::Measurement;
use serin_metrics::{ClientCache, MetricInputs, PrometheusClient, QueryContext, measure};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the servers were asked: each query string, and each web request's body and auth header.
type Seen = Arc<Mutex<Vec<String>>>;

/// Serves `app` on a loopback port and returns its address.
async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}")
}

fn json(body: String) -> ([(header::HeaderName, &'static str); 1], String) {
    ([(header::CONTENT_TYPE, "application/json")], body)
}

/// A Prometheus whose answer depends on a word in the query (`good` 0.97, `bad` 0.5, `nan`, `none`),
/// and web endpoints.
async fn servers() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let queries = seen.clone();
    let posts = seen.clone();
    let app = axum::Router::new()
        .route(
            "/api/v1/query",
            axum::routing::get(move |uri: Uri, headers: HeaderMap| {
                let query = uri.query().unwrap_or_default().to_string();
                let auth = headers
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .map(|v| format!(" authorization={v}"))
                    .unwrap_or_default();
                queries.lock().unwrap().push(format!("{query}{auth}"));
                let values: &[&str] = if query.contains("good") {
                    &["0.97"]
                } else if query.contains("bad") {
                    &["0.5"]
                } else if query.contains("nan") {
                    &["NaN"]
                } else {
                    &[]
                };
                let series: Vec<String> = values
                    .iter()
                    .map(|v| format!(r#"{{"metric":{{}},"value":[1795319775.1,"{v}"]}}"#))
                    .collect();
                async move {
                    json(format!(
                        r#"{{"status":"success","data":{{"resultType":"vector","result":[{}]}}}}"#,
                        series.join(",")
                    ))
                }
            }),
        )
        .route(
            "/health/{service}",
            axum::routing::get(|uri: Uri| async move {
                let ok = uri.path().ends_with("/podinfo");
                json(format!(
                    r#"{{"data":{{"ok":{ok},"successPercent":0.93,"items":[{{"v":1}},{{"v":2}}]}}}}"#
                ))
            }),
        )
        .route(
            "/echo",
            axum::routing::post(move |headers: HeaderMap, body: String| {
                let auth = headers
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                posts.lock().unwrap().push(format!("{auth} {body}"));
                async move { json(body) }
            }),
        )
        .route(
            "/big",
            axum::routing::get(|| async {
                // Valid JSON one byte over the limit: a string padded with spaces after it.
                let json_text = r#"{"ok":true}"#;
                json(format!(
                    "{json_text}{}",
                    " ".repeat(MAX_WEB_METRIC_ANSWER_BYTES + 1 - json_text.len())
                ))
            }),
        )
        .route(
            "/slow",
            axum::routing::get(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                json(r#"{"ok":true}"#.into())
            }),
        )
        .route(
            "/down",
            axum::routing::get(|| async { (StatusCode::SERVICE_UNAVAILABLE, "maintenance") }),
        );
    (serve(app).await, seen)
}

fn metric(json: serde_json::Value) -> AnalysisMetric {
    serde_json::from_value(json).unwrap()
}

fn template(spec: serde_json::Value) -> MetricTemplate {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "serin.dev/v1beta1", "kind": "MetricTemplate",
        "metadata": {"name": "checks", "namespace": "test"},
        "spec": spec,
    }))
    .unwrap()
}

fn args(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn run(
    metric: &AnalysisMetric,
    template: Option<&MetricTemplate>,
    secret: Option<&BTreeMap<String, String>>,
    metrics_server: &PrometheusClient,
    args: &BTreeMap<String, String>,
) -> Measurement {
    let clients = ClientCache::default();
    let inputs = MetricInputs {
        context: QueryContext {
            name: "podinfo".into(),
            namespace: "test".into(),
            target: "podinfo".into(),
            ..QueryContext::default()
        },
        template,
        secret,
        metrics_server,
        provider: "istio",
        clients: &clients,
    };
    measure(metric, inputs, args).await
}

#[tokio::test]
async fn inline_queries_are_rendered_with_args_and_judged_by_their_conditions() {
    let (address, seen) = servers().await;
    let prometheus = PrometheusClient::new(&address).unwrap();
    let success_rate = metric(serde_json::json!({
        "name": "success-rate",
        "query": "sum(rate(requests{service=\"{{args.service-name}}\", quality=\"{{ args.quality }}\"}[{{ interval }}]))",
        "successCondition": "result[0] >= 0.95",
    }));
    let good = run(
        &success_rate,
        None,
        None,
        &prometheus,
        &args(&[("service-name", "podinfo-canary"), ("quality", "good")]),
    )
    .await;
    assert_eq!(good.phase, AnalysisPhase::Successful, "{good:?}");
    assert_eq!(good.value.as_deref(), Some("[0.97]"));
    let query = seen.lock().unwrap().last().cloned().unwrap();
    assert!(query.contains("podinfo-canary"), "{query}");

    let bad = run(
        &success_rate,
        None,
        None,
        &prometheus,
        &args(&[("service-name", "podinfo-canary"), ("quality", "bad")]),
    )
    .await;
    assert_eq!(bad.phase, AnalysisPhase::Failed, "{bad:?}");
    assert_eq!(bad.value.as_deref(), Some("[0.5]"));

    // NaN reaches the condition as a float.
    let nan = metric(serde_json::json!({
        "name": "nan", "query": "nan", "successCondition": "isNaN(result[0])",
    }));
    let measured = run(&nan, None, None, &prometheus, &BTreeMap::new()).await;
    assert_eq!(measured.phase, AnalysisPhase::Successful, "{measured:?}");
    assert_eq!(measured.value.as_deref(), Some("[NaN]"));

    // An empty answer: Argo's message, and Flagger's for a thresholdRange.
    let empty = metric(serde_json::json!({
        "name": "empty", "query": "none", "successCondition": "result[0] >= 0.95",
    }));
    let measured = run(&empty, None, None, &prometheus, &BTreeMap::new()).await;
    assert_eq!(measured.phase, AnalysisPhase::Error);
    assert!(
        measured
            .message
            .unwrap()
            .contains("metric result is nil or empty")
    );
    let ranged = metric(serde_json::json!({
        "name": "empty", "query": "none", "thresholdRange": {"min": 0.9},
    }));
    let measured = run(&ranged, None, None, &prometheus, &BTreeMap::new()).await;
    assert_eq!(measured.phase, AnalysisPhase::Failed);
    assert!(measured.message.unwrap().starts_with("no values found"));
    // Neither conditions nor range: any result passes, as in Argo.
    let plain = metric(serde_json::json!({"name": "plain", "query": "bad"}));
    let measured = run(&plain, None, None, &prometheus, &BTreeMap::new()).await;
    assert_eq!(measured.phase, AnalysisPhase::Successful);
}

#[tokio::test]
async fn a_missing_arg_is_an_error_naming_it_and_the_fix() {
    let (address, seen) = servers().await;
    let prometheus = PrometheusClient::new(&address).unwrap();
    let m = metric(serde_json::json!({
        "name": "success-rate",
        "query": "requests{service=\"{{ args.service-name }}\"}",
        "successCondition": "result[0] >= 0.95",
    }));
    let measured = run(&m, None, None, &prometheus, &BTreeMap::new()).await;
    assert_eq!(measured.phase, AnalysisPhase::Error);
    let message = measured.message.unwrap();
    assert!(
        message.contains("\"service-name\"") && message.contains("analysis.args"),
        "{message}"
    );
    assert!(seen.lock().unwrap().is_empty(), "nothing was queried");
}

#[tokio::test]
async fn prometheus_templates_are_rendered_with_args_and_variables() {
    let (address, seen) = servers().await;
    let unused = PrometheusClient::new("http://127.0.0.1:9").unwrap();
    let t = template(serde_json::json!({
        "provider": {"type": "prometheus", "address": address},
        "query": "rate(x{service=\"{{ args.service }}\", q=\"{{ variables.quality }}\"}[1m])",
    }));
    let m = metric(serde_json::json!({
        "name": "rate", "templateRef": {"name": "checks"},
        "templateVariables": {"quality": "good"},
        "failureCondition": "result[0] < 0.95",
    }));
    let measured = run(&m, Some(&t), None, &unused, &args(&[("service", "api")])).await;
    assert_eq!(measured.phase, AnalysisPhase::Successful, "{measured:?}");
    assert!(seen.lock().unwrap()[0].contains("api"));

    // Args fill the template's headers too, as Argo's templates use them for credentials.
    let mut with_header = t.clone();
    with_header.spec.provider.headers = Some(BTreeMap::from([(
        "Authorization".to_string(),
        vec!["Bearer {{args.token}}".to_string()],
    )]));
    let given = args(&[("service", "api"), ("token", "s3cret")]);
    let measured = run(&m, Some(&with_header), None, &unused, &given).await;
    assert_eq!(measured.phase, AnalysisPhase::Successful, "{measured:?}");
    assert!(
        seen.lock()
            .unwrap()
            .last()
            .unwrap()
            .ends_with("authorization=Bearer s3cret"),
        "{:?}",
        seen.lock().unwrap()
    );

    // A prometheus template without its query says which field to write.
    let mut without_query = t.clone();
    without_query.spec.query = String::new();
    let measured = run(&m, Some(&without_query), None, &unused, &BTreeMap::new()).await;
    assert_eq!(measured.phase, AnalysisPhase::Error);
    assert!(measured.message.unwrap().contains("spec.query is empty"));
}

#[tokio::test]
async fn web_metrics_read_the_json_at_their_path() {
    let (address, seen) = servers().await;
    let unused = PrometheusClient::new("http://127.0.0.1:9").unwrap();
    let t = template(serde_json::json!({
        "provider": {
            "type": "web",
            "address": format!("{address}/health/{{{{ args.service }}}}"),
            "jsonPath": "{$.data}",
        },
    }));
    let m = metric(serde_json::json!({
        "name": "health", "templateRef": {"name": "checks"},
        "successCondition": "result.ok == true && result.successPercent >= 0.9",
    }));
    let passing = run(
        &m,
        Some(&t),
        None,
        &unused,
        &args(&[("service", "podinfo")]),
    )
    .await;
    assert_eq!(passing.phase, AnalysisPhase::Successful, "{passing:?}");
    let failing = run(&m, Some(&t), None, &unused, &args(&[("service", "other")])).await;
    assert_eq!(failing.phase, AnalysisPhase::Failed, "{failing:?}");
    assert!(failing.value.unwrap().contains("\"ok\":false"));

    // The whole URL may come from an arg (a Secret's key, in Argo's examples); what it renders to
    // must be an http(s) URL, and the error does not repeat it.
    let mut from_arg = t.clone();
    from_arg.spec.provider.address = Some("{{args.url}}".into());
    let url = format!("{address}/health/podinfo");
    let measured = run(&m, Some(&from_arg), None, &unused, &args(&[("url", &url)])).await;
    assert_eq!(measured.phase, AnalysisPhase::Successful, "{measured:?}");
    let secret = "not-a-url-but-a-s3cret";
    let measured = run(
        &m,
        Some(&from_arg),
        None,
        &unused,
        &args(&[("url", secret)]),
    )
    .await;
    assert_eq!(measured.phase, AnalysisPhase::Error);
    let message = measured.message.unwrap();
    assert!(message.contains("with its args filled in"), "{message}");
    assert!(!message.contains(secret), "{message}");

    // Several matches are an array; none is an error naming the path.
    let mut items = t.clone();
    items.spec.provider.json_path = Some("$.data.items[*].v".into());
    let several = metric(serde_json::json!({
        "name": "items", "templateRef": {"name": "checks"}, "successCondition": "len(result) == 2",
    }));
    let measured = run(
        &several,
        Some(&items),
        None,
        &unused,
        &args(&[("service", "x")]),
    )
    .await;
    assert_eq!(measured.phase, AnalysisPhase::Successful, "{measured:?}");
    assert_eq!(measured.value.as_deref(), Some("[1,2]"));
    items.spec.provider.json_path = Some("$.data.missing".into());
    let measured = run(
        &several,
        Some(&items),
        None,
        &unused,
        &args(&[("service", "x")]),
    )
    .await;
    assert_eq!(measured.phase, AnalysisPhase::Error);
    assert!(
        measured
            .message
            .unwrap()
            .contains("jsonPath $.data.missing matched nothing in the answer")
    );

    // POST with a rendered body and the Secret's token.
    let post = template(serde_json::json!({
        "provider": {
            "type": "web", "method": "POST", "address": format!("{address}/echo"),
            "body": "{\"service\": \"{{ args.service }}\", \"ok\": true}",
            "jsonPath": "$.ok", "secretRef": {"name": "token"},
        },
    }));
    let m = metric(serde_json::json!({
        "name": "echo", "templateRef": {"name": "checks"}, "successCondition": "result == true",
    }));
    let secret = args(&[("token", "t0ken")]);
    let measured = run(
        &m,
        Some(&post),
        Some(&secret),
        &unused,
        &args(&[("service", "api")]),
    )
    .await;
    assert_eq!(measured.phase, AnalysisPhase::Successful, "{measured:?}");
    let request = seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(request, r#"Bearer t0ken {"service": "api", "ok": true}"#);
}

#[tokio::test]
async fn web_answers_over_the_limit_late_or_failing_are_errors() {
    let (address, _) = servers().await;
    let unused = PrometheusClient::new("http://127.0.0.1:9").unwrap();
    let m = metric(serde_json::json!({
        "name": "web", "templateRef": {"name": "checks"}, "successCondition": "result.ok",
    }));
    let at = |path: &str, timeout: Option<i64>| {
        template(serde_json::json!({
            "provider": {"type": "web", "address": format!("{address}{path}"), "timeoutSeconds": timeout},
        }))
    };
    let none = BTreeMap::new();

    let big = run(&m, Some(&at("/big", None)), None, &unused, &none).await;
    assert_eq!(big.phase, AnalysisPhase::Error);
    let message = big.message.unwrap();
    assert!(
        message.contains("more than 1048576 bytes (1 MiB)"),
        "{message}"
    );

    let started = Instant::now();
    let slow = run(&m, Some(&at("/slow", Some(1))), None, &unused, &none).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(slow.phase, AnalysisPhase::Error);
    let message = slow.message.unwrap();
    assert!(message.contains("did not answer within 1 s"), "{message}");

    let down = run(&m, Some(&at("/down", None)), None, &unused, &none).await;
    assert_eq!(down.phase, AnalysisPhase::Error);
    let message = down.message.unwrap();
    assert!(message.contains("answered HTTP 503"), "{message}");
}
