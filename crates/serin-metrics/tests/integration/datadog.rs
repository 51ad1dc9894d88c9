//! Datadog templates against a loopback server that answers as Datadog's metrics query API
//! (`GET /api/v1/query`) documents: a series, no series, a 400 with `errors`, a 403 for bad keys and
//! a 429 with `X-RateLimit-Reset`. Each test checks the request Datadog would receive.

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serin_core::plan::MetricReading;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::support;

/// What the server received: the query parameters and the key headers of each request.
#[derive(Clone, Debug)]
struct Received {
    path: String,
    params: BTreeMap<String, String>,
    api_key: Option<String>,
    application_key: Option<String>,
}

#[derive(Clone, Default)]
struct Datadog {
    received: Arc<Mutex<Vec<Received>>>,
    limited: Arc<Mutex<u32>>,
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(String::from)
}

async fn query(
    State(datadog): State<Datadog>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Response {
    let params: BTreeMap<String, String> =
        reqwest::Url::parse(&format!("http://datadog/?{}", raw.unwrap_or_default()))
            .unwrap()
            .query_pairs()
            .into_owned()
            .collect();
    datadog.received.lock().unwrap().push(Received {
        path: "/api/v1/query".into(),
        params: params.clone(),
        api_key: header(&headers, "dd-api-key"),
        application_key: header(&headers, "dd-application-key"),
    });
    let json = |status: StatusCode, body: serde_json::Value| {
        (
            status,
            [("content-type", "application/json")],
            body.to_string(),
        )
            .into_response()
    };
    if header(&headers, "dd-api-key").as_deref() != Some("api-k3y") {
        return json(
            StatusCode::FORBIDDEN,
            serde_json::json!({"errors": ["Forbidden"]}),
        );
    }
    let text = params.get("query").cloned().unwrap_or_default();
    let from: i64 = params["from"].parse().unwrap();
    if text.contains("nodata") {
        return json(
            StatusCode::OK,
            serde_json::json!({"status": "ok", "res_type": "time_series", "series": [],
                               "query": text, "from_date": from * 1000}),
        );
    }
    if text.starts_with("bad") {
        return json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"errors": ["Error parsing query: unable to parse bad: Rule 'scope_expr' didn't match"]}),
        );
    }
    if text.contains("limited") {
        let mut limited = datadog.limited.lock().unwrap();
        *limited += 1;
        if *limited == 1 || text.contains("always") {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [
                    ("content-type", "application/json"),
                    ("x-ratelimit-limit", "100"),
                    ("x-ratelimit-period", "10"),
                    ("x-ratelimit-remaining", "0"),
                    ("x-ratelimit-reset", "1"),
                ],
                serde_json::json!({"errors": ["Too many requests"]}).to_string(),
            )
                .into_response();
        }
    }
    json(
        StatusCode::OK,
        serde_json::json!({"status": "ok", "res_type": "time_series", "query": text,
            "series": [{"metric": "trace.http.request.errors", "scope": "service:podinfo",
                        "pointlist": [[(from + 60) as f64 * 1000.0, 1.25], [(from + 120) as f64 * 1000.0, 9.0]],
                        "length": 2, "interval": 60},
                       {"metric": "other", "pointlist": [[(from + 60) as f64 * 1000.0, 50.0]]}]}),
    )
}

async fn serve() -> (String, Datadog) {
    let datadog = Datadog::default();
    let app = axum::Router::new()
        .route("/api/v1/query", axum::routing::get(query))
        .with_state(datadog.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, datadog)
}

fn template(address: &str, query: &str) -> serin_api::MetricTemplate {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "serin.dev/v1beta1", "kind": "MetricTemplate",
        "metadata": {"name": "errors", "namespace": "test"},
        "spec": {"provider": {"type": "datadog", "address": address, "secretRef": {"name": "datadog"}},
                 "query": query}
    }))
    .unwrap()
}

async fn read_with(
    template: &serin_api::MetricTemplate,
    secret: Option<&BTreeMap<String, String>>,
) -> MetricReading {
    support::read_template(template, secret, "1m").await
}

fn keys(api: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("datadog_api_key".to_string(), api.to_string()),
        ("datadog_application_key".to_string(), "app-k3y".to_string()),
    ])
}

#[tokio::test]
async fn a_datadog_query_reads_the_first_point_over_ten_intervals_with_the_keys_in_headers() {
    let (address, datadog) = serve().await;
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let reading = read_with(
        &template(
            &address,
            "sum:trace.http.request.errors{service:{{ target }}}.as_count()",
        ),
        Some(&keys("api-k3y")),
    )
    .await;
    assert_eq!(reading, MetricReading::Value(1.25));
    let received = datadog.received.lock().unwrap()[0].clone();
    assert_eq!(received.path, "/api/v1/query");
    assert_eq!(
        received.params["query"],
        "sum:trace.http.request.errors{service:podinfo}.as_count()"
    );
    let (from, to): (i64, i64) = (
        received.params["from"].parse().unwrap(),
        received.params["to"].parse().unwrap(),
    );
    assert_eq!(to - from, 600, "ten one-minute intervals");
    assert!(
        to >= before && to <= before + 5,
        "to is now: {to} vs {before}"
    );
    assert_eq!(received.api_key.as_deref(), Some("api-k3y"));
    assert_eq!(received.application_key.as_deref(), Some("app-k3y"));
}

#[tokio::test]
async fn no_series_is_no_data_and_errors_name_the_template_and_datadogs_words() {
    let (address, _) = serve().await;
    let keys = keys("api-k3y");
    assert_eq!(
        read_with(&template(&address, "sum:nodata{*}"), Some(&keys)).await,
        MetricReading::NoData
    );
    let MetricReading::Error(bad) = read_with(&template(&address, "bad"), Some(&keys)).await else {
        panic!("a rejected query is an error");
    };
    assert!(
        bad.starts_with(
            "Metric template errors.test (datadog) query failed: datadog answered HTTP 400: "
        ),
        "{bad}"
    );
    assert!(bad.contains("Error parsing query"), "{bad}");
    let MetricReading::Error(forbidden) =
        read_with(&template(&address, "sum:x{*}"), Some(&self::keys("wr0ng"))).await
    else {
        panic!("bad keys are an error");
    };
    assert!(
        forbidden.contains("HTTP 403: check datadog_api_key and datadog_application_key"),
        "{forbidden}"
    );
    assert!(
        !forbidden.contains("wr0ng") && !forbidden.contains("app-k3y"),
        "{forbidden}"
    );
    let MetricReading::Error(missing) = read_with(&template(&address, "sum:x{*}"), None).await
    else {
        panic!("a missing Secret is an error");
    };
    assert_eq!(
        missing,
        "Metric template errors.test (datadog) cannot be queried: the Secret datadog (provider.secretRef) was not found in the template's namespace"
    );
    let unreachable = read_with(&template("http://127.0.0.1:9", "sum:x{*}"), Some(&keys)).await;
    assert!(
        matches!(&unreachable, MetricReading::Error(m) if m.contains("http://127.0.0.1:9 is unreachable")),
        "{unreachable:?}"
    );
}

#[tokio::test]
async fn a_rate_limited_query_is_sent_again_after_the_reset_within_the_interval() {
    let (address, datadog) = serve().await;
    let keys = keys("api-k3y");
    let started = std::time::Instant::now();
    let reading = read_with(&template(&address, "sum:limited{*}"), Some(&keys)).await;
    assert_eq!(reading, MetricReading::Value(1.25));
    assert_eq!(datadog.received.lock().unwrap().len(), 2);
    assert!(started.elapsed() >= std::time::Duration::from_secs(1));
    let MetricReading::Error(limited) =
        read_with(&template(&address, "sum:always.limited{*}"), Some(&keys)).await
    else {
        panic!("a query that stays rate-limited is an error");
    };
    assert!(
        limited.contains("datadog rate-limited the query (HTTP 429, 3 times; Retry-After 1s)"),
        "{limited}"
    );
    assert_eq!(datadog.received.lock().unwrap().len(), 5);
}
