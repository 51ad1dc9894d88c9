//! New Relic, Dynatrace, InfluxDB and Splunk templates against loopback servers that answer as
//! each API reference documents (New Relic's Insights query API, Dynatrace's metrics API v2,
//! InfluxDB 2's query API with annotated CSV, SignalFlow's execute API streaming Server-Sent
//! Events): a value, no data, an error in the provider's own words, bad credentials and a rate
//! limit. Each test checks the request the provider would receive.

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serin_core::plan::MetricReading;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::support;

/// One request as the provider received it.
#[derive(Clone, Debug, Default)]
struct Received {
    method: String,
    path: String,
    params: BTreeMap<String, String>,
    authorization: Option<String>,
    query_key: Option<String>,
    sf_token: Option<String>,
    content_type: Option<String>,
    body: String,
}

#[derive(Clone, Default)]
struct Providers {
    received: Arc<Mutex<Vec<Received>>>,
    limited: Arc<Mutex<u32>>,
}

fn params(raw: Option<String>) -> BTreeMap<String, String> {
    reqwest::Url::parse(&format!("http://provider/?{}", raw.unwrap_or_default()))
        .unwrap()
        .query_pairs()
        .into_owned()
        .collect()
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(String::from)
}

fn json(status: StatusCode, body: serde_json::Value) -> Response {
    (
        status,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

impl Providers {
    fn record(
        &self,
        method: &str,
        path: String,
        raw: Option<String>,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Received {
        let received = Received {
            method: method.into(),
            path,
            params: params(raw),
            authorization: header(headers, "authorization"),
            query_key: header(headers, "x-query-key"),
            sf_token: header(headers, "x-sf-token"),
            content_type: header(headers, "content-type"),
            body: String::from_utf8_lossy(body).into_owned(),
        };
        self.received.lock().unwrap().push(received.clone());
        received
    }

    /// True for the first request of a query that asks to be rate-limited once.
    fn limit_once(&self, text: &str) -> bool {
        if !text.contains("limited") {
            return false;
        }
        let mut limited = self.limited.lock().unwrap();
        *limited += 1;
        *limited == 1
    }
}

async fn newrelic(
    State(providers): State<Providers>,
    Path(account): Path<String>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Response {
    let received = providers.record(
        "GET",
        format!("/v1/accounts/{account}/query"),
        raw,
        &headers,
        b"",
    );
    if received.query_key.as_deref() != Some("NRIQ-k3y") {
        return json(
            StatusCode::UNAUTHORIZED,
            serde_json::json!({"error": "Invalid query key."}),
        );
    }
    let nrql = received.params.get("nrql").cloned().unwrap_or_default();
    if nrql.starts_with("SELEKT") {
        return json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"error": "NRQL Syntax Error: Error at line 1 position 1, unexpected 'SELEKT'"}),
        );
    }
    let result = if nrql.contains("nodata") {
        serde_json::Value::Null
    } else {
        serde_json::json!(0.75)
    };
    json(
        StatusCode::OK,
        serde_json::json!({"results": [{"result": result}],
            "metadata": {"eventTypes": ["Transaction"], "eventType": "Transaction", "openEnded": true,
                         "beginTimeMillis": 1_700_000_000_000_i64, "endTimeMillis": 1_700_000_060_000_i64}}),
    )
}

async fn dynatrace(
    State(providers): State<Providers>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Response {
    let received = providers.record("GET", "/api/v2/metrics/query".into(), raw, &headers, b"");
    if received.authorization.as_deref() != Some("Api-Token dt0c01.T0KEN") {
        return json(
            StatusCode::UNAUTHORIZED,
            serde_json::json!({"error": {"code": 401, "message": "Token Authentication failed"}}),
        );
    }
    let selector = received
        .params
        .get("metricSelector")
        .cloned()
        .unwrap_or_default();
    if providers.limit_once(&selector) {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("content-type", "application/json"), ("retry-after", "1")],
            serde_json::json!({"error": {"code": 429, "message": "Too Many Requests"}}).to_string(),
        )
            .into_response();
    }
    if selector.starts_with("builtin:nonsense") {
        return json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"error": {"code": 400, "message": "The metric selector is invalid: Metric builtin:nonsense does not exist."}}),
        );
    }
    let data = if selector.contains("nodata") {
        serde_json::json!([])
    } else {
        serde_json::json!([{"dimensions": ["SERVICE-1"], "dimensionMap": {"dt.entity.service": "SERVICE-1"},
                            "timestamps": [1_700_000_300_000_i64], "values": [212.5]}])
    };
    json(
        StatusCode::OK,
        serde_json::json!({"totalCount": 1, "nextPageKey": null, "resolution": "Inf",
            "result": [{"metricId": selector, "dataPointCountRatio": 0.0001, "dimensionCountRatio": 0.01, "data": data}]}),
    )
}

async fn influxdb(
    State(providers): State<Providers>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let received = providers.record("POST", "/api/v2/query".into(), raw, &headers, &body);
    if received.authorization.as_deref() != Some("Token infl0x") {
        return json(
            StatusCode::UNAUTHORIZED,
            serde_json::json!({"code": "unauthorized", "message": "unauthorized access"}),
        );
    }
    let flux = serde_json::from_slice::<serde_json::Value>(&body).unwrap()["query"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if flux.contains("bucke(") {
        return json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"code": "invalid", "message": "compilation failed: error at @1:1-1:6: undefined identifier bucke"}),
        );
    }
    let csv = if flux.contains("nodata") {
        "\r\n".to_string()
    } else {
        "#datatype,string,long,dateTime:RFC3339,dateTime:RFC3339,double,string,string\r\n\
#group,false,false,true,true,false,true,true\r\n\
#default,_result,,,,,,\r\n\
,result,table,_start,_stop,_value,_field,_measurement\r\n\
,,0,2026-11-27T09:00:00Z,2026-11-27T09:01:00Z,3.25,errors,http\r\n\r\n"
            .to_string()
    };
    (
        StatusCode::OK,
        [("content-type", "text/csv; charset=utf-8")],
        csv,
    )
        .into_response()
}

/// SignalFlow's `execute`: the computation's messages as Server-Sent Events. Like a live
/// computation's stream, it stays open after `END_OF_CHANNEL`.
async fn splunk(
    State(providers): State<Providers>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let received = providers.record(
        "POST",
        "/v2/signalflow/execute".into(),
        raw,
        &headers,
        &body,
    );
    if received.sf_token.as_deref() != Some("sf-t0ken") {
        return json(
            StatusCode::UNAUTHORIZED,
            serde_json::json!({"code": 401, "message": "Unauthorized"}),
        );
    }
    if providers.limit_once(&received.body) {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "1")],
            "rate limit exceeded",
        )
            .into_response();
    }
    if received.body.contains("dta(") {
        return json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"errorType": "ANALYTICS_PROGRAM_NAME_ERROR",
                               "message": "Unknown function or stream 'dta'"}),
        );
    }
    let start: i64 = received.params["start"].parse().unwrap();
    let event = |name: &str, data: serde_json::Value| format!("event: {name}\ndata: {data}\n\n");
    let mut events = vec![
        event(
            "control-message",
            serde_json::json!({"event": "STREAM_START", "timestampMs": start}),
        ),
        event(
            "control-message",
            serde_json::json!({"event": "JOB_START", "handle": "FwGq3AAAAAA", "timestampMs": start}),
        ),
    ];
    if !received.body.contains("nodata") {
        events.push(event(
            "metadata",
            serde_json::json!({"tsId": "AAAAAGrb3Gs", "properties": {"sf_metric": "spans.count"}}),
        ));
        for (i, value) in [
            serde_json::json!(2.0),
            serde_json::json!(4.5),
            serde_json::Value::Null,
        ]
        .iter()
        .enumerate()
        {
            let mut data = vec![serde_json::json!({"tsId": "AAAAAGrb3Gs", "value": value})];
            if received.body.contains("by_host") {
                data.push(serde_json::json!({"tsId": "AAAAAFEbGvk", "value": 1.0}));
            }
            events.push(event("data", serde_json::json!({"logicalTimestampMs": start + 60_000 * (i as i64 + 1), "data": data})));
        }
    }
    events.push(event(
        "control-message",
        serde_json::json!({"event": "END_OF_CHANNEL", "timestampMs": start}),
    ));
    let chunks = futures::stream::iter(
        events
            .into_iter()
            .map(|e| Ok::<_, std::io::Error>(Bytes::from(e))),
    )
    .chain(futures::stream::pending());
    (
        StatusCode::OK,
        [("content-type", "text/event-stream")],
        axum::body::Body::from_stream(chunks),
    )
        .into_response()
}

async fn serve() -> (String, Providers) {
    let providers = Providers::default();
    let app = axum::Router::new()
        .route("/v1/accounts/{account}/query", axum::routing::get(newrelic))
        .route("/api/v2/metrics/query", axum::routing::get(dynatrace))
        .route("/api/v2/query", axum::routing::post(influxdb))
        .route("/v2/signalflow/execute", axum::routing::post(splunk))
        .with_state(providers.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, providers)
}

fn template(kind: &str, address: &str, query: &str) -> serin_api::MetricTemplate {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "serin.dev/v1beta1", "kind": "MetricTemplate",
        "metadata": {"name": "check", "namespace": "test"},
        "spec": {"provider": {"type": kind, "address": address, "secretRef": {"name": "creds"}},
                 "query": query}
    }))
    .unwrap()
}

async fn read(template: &serin_api::MetricTemplate, secret: &[(&str, &str)]) -> MetricReading {
    let secret: BTreeMap<String, String> = secret
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    support::read_template(template, Some(&secret), "30s").await
}

fn error(reading: MetricReading) -> String {
    match reading {
        MetricReading::Error(message) => message,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[tokio::test]
async fn new_relic_reads_the_result_row_since_the_interval_with_the_query_key() {
    let (address, providers) = serve().await;
    let keys = [
        ("newrelic_account_id", "1234567"),
        ("newrelic_query_key", "NRIQ-k3y"),
    ];
    let nrql = "SELECT percentage(count(*), WHERE error IS true) AS result FROM Transaction WHERE appName = '{{ target }}'";
    assert_eq!(
        read(&template("newrelic", &address, nrql), &keys).await,
        MetricReading::Value(0.75)
    );
    let received = providers.received.lock().unwrap()[0].clone();
    assert_eq!(
        (received.method.as_str(), received.path.as_str()),
        ("GET", "/v1/accounts/1234567/query")
    );
    assert_eq!(
        received.params["nrql"],
        "SELECT percentage(count(*), WHERE error IS true) AS result FROM Transaction WHERE appName = 'podinfo' SINCE 30 seconds ago"
    );
    assert_eq!(received.query_key.as_deref(), Some("NRIQ-k3y"));

    assert_eq!(
        read(
            &template(
                "newrelic",
                &address,
                "SELECT nodata AS result FROM Transaction"
            ),
            &keys
        )
        .await,
        MetricReading::NoData
    );
    let syntax = error(read(&template("newrelic", &address, "SELEKT 1"), &keys).await);
    assert_eq!(
        syntax,
        "Metric template check.test (newrelic) query failed: newrelic answered HTTP 400: {\"error\":\"NRQL Syntax Error: Error at line 1 position 1, unexpected 'SELEKT'\"}"
    );
    let wrong = [
        ("newrelic_account_id", "1234567"),
        ("newrelic_query_key", "wr0ng"),
    ];
    let refused = error(read(&template("newrelic", &address, nrql), &wrong).await);
    assert!(
        refused.contains("HTTP 401: check newrelic_query_key"),
        "{refused}"
    );
    assert!(!refused.contains("wr0ng"), "{refused}");
}

#[tokio::test]
async fn dynatrace_reads_the_selector_over_ten_intervals_with_an_api_token() {
    let (address, providers) = serve().await;
    let token = [("dynatrace_token", "dt0c01.T0KEN")];
    let selector =
        "builtin:service.response.time:avg:filter(eq(\"dt.entity.service\",\"{{ target }}\"))";
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert_eq!(
        read(&template("dynatrace", &address, selector), &token).await,
        MetricReading::Value(212.5)
    );
    let received = providers.received.lock().unwrap()[0].clone();
    assert_eq!(received.path, "/api/v2/metrics/query");
    assert_eq!(
        received.params["metricSelector"],
        "builtin:service.response.time:avg:filter(eq(\"dt.entity.service\",\"podinfo\"))"
    );
    assert_eq!(received.params["resolution"], "Inf");
    let (from, to): (i64, i64) = (
        received.params["from"].parse().unwrap(),
        received.params["to"].parse().unwrap(),
    );
    assert_eq!(to - from, 300_000, "ten 30 s intervals, in milliseconds");
    assert!(
        to >= before - 1000 && to <= before + 5000,
        "{to} vs {before}"
    );
    assert_eq!(
        received.authorization.as_deref(),
        Some("Api-Token dt0c01.T0KEN")
    );

    assert_eq!(
        read(&template("dynatrace", &address, "builtin:nodata"), &token).await,
        MetricReading::NoData
    );
    let invalid = error(read(&template("dynatrace", &address, "builtin:nonsense"), &token).await);
    assert!(
        invalid.contains("HTTP 400: ")
            && invalid.contains("Metric builtin:nonsense does not exist"),
        "{invalid}"
    );
    let refused = error(
        read(
            &template("dynatrace", &address, selector),
            &[("dynatrace_token", "x")],
        )
        .await,
    );
    assert!(
        refused.contains("HTTP 401: check dynatrace_token"),
        "{refused}"
    );
    // A 429 with Retry-After: 1 is sent again within the 30 s interval.
    let count = providers.received.lock().unwrap().len();
    assert_eq!(
        read(&template("dynatrace", &address, "builtin:limited"), &token).await,
        MetricReading::Value(212.5)
    );
    assert_eq!(providers.received.lock().unwrap().len(), count + 2);
}

#[tokio::test]
async fn influxdb_posts_flux_with_the_org_and_reads_the_first_records_value() {
    let (address, providers) = serve().await;
    let creds = [("token", "infl0x"), ("org", "platform")];
    let flux = "from(bucket: \"app\") |> range(start: -1m) |> filter(fn: (r) => r.app == \"{{ target }}\") |> count()";
    assert_eq!(
        read(&template("influxdb", &address, flux), &creds).await,
        MetricReading::Value(3.25)
    );
    let received = providers.received.lock().unwrap()[0].clone();
    assert_eq!(
        (received.method.as_str(), received.path.as_str()),
        ("POST", "/api/v2/query")
    );
    assert_eq!(received.params["org"], "platform");
    assert_eq!(received.authorization.as_deref(), Some("Token infl0x"));
    assert_eq!(received.content_type.as_deref(), Some("application/json"));
    let body: serde_json::Value = serde_json::from_str(&received.body).unwrap();
    assert_eq!(
        body["query"],
        "from(bucket: \"app\") |> range(start: -1m) |> filter(fn: (r) => r.app == \"podinfo\") |> count()"
    );
    assert_eq!(body["type"], "flux");

    assert_eq!(
        read(&template("influxdb", &address, "nodata"), &creds).await,
        MetricReading::NoData
    );
    let invalid = error(read(&template("influxdb", &address, "bucke(\"x\")"), &creds).await);
    assert!(
        invalid.contains("HTTP 400: ") && invalid.contains("undefined identifier bucke"),
        "{invalid}"
    );
    let refused = error(
        read(
            &template("influxdb", &address, flux),
            &[("token", "no"), ("org", "platform")],
        )
        .await,
    );
    assert!(
        refused.contains("HTTP 401: check token and org"),
        "{refused}"
    );
}

#[tokio::test]
async fn splunk_runs_the_program_over_ten_intervals_and_reads_the_last_point() {
    let (address, providers) = serve().await;
    let token = [("sf_token_key", "sf-t0ken")];
    let program =
        "data('spans.count', filter=filter('sf_service', '{{ target }}')).sum().publish()";
    // The stand-in's stream never closes: only reading up to END_OF_CHANNEL gives a value, and
    // reading to the end would be a timeout error.
    assert_eq!(
        read(&template("splunk", &address, program), &token).await,
        MetricReading::Value(4.5)
    );
    let received = providers.received.lock().unwrap()[0].clone();
    assert_eq!(
        (received.method.as_str(), received.path.as_str()),
        ("POST", "/v2/signalflow/execute")
    );
    assert_eq!(
        received.body,
        "data('spans.count', filter=filter('sf_service', 'podinfo')).sum().publish()"
    );
    assert_eq!(received.content_type.as_deref(), Some("text/plain"));
    assert_eq!(received.sf_token.as_deref(), Some("sf-t0ken"));
    let (start, stop): (i64, i64) = (
        received.params["start"].parse().unwrap(),
        received.params["stop"].parse().unwrap(),
    );
    assert_eq!(
        stop - start,
        300_000,
        "ten 30-second intervals, in milliseconds"
    );
    assert_eq!(received.params["immediate"], "true");

    assert_eq!(
        read(
            &template("splunk", &address, "data('nodata').publish()"),
            &token
        )
        .await,
        MetricReading::NoData
    );
    let two = error(
        read(
            &template("splunk", &address, "data('by_host').publish()"),
            &token,
        )
        .await,
    );
    assert!(two.contains("published 2 time series"), "{two}");
    let syntax = error(read(&template("splunk", &address, "dta('x').publish()"), &token).await);
    assert_eq!(
        syntax,
        "Metric template check.test (splunk) query failed: splunk answered HTTP 400: {\"errorType\":\"ANALYTICS_PROGRAM_NAME_ERROR\",\"message\":\"Unknown function or stream 'dta'\"}"
    );
    let refused = error(
        read(
            &template("splunk", &address, program),
            &[("sf_token_key", "wr0ng")],
        )
        .await,
    );
    assert!(
        refused.contains("HTTP 401: check sf_token_key"),
        "{refused}"
    );
    assert!(!refused.contains("wr0ng"), "{refused}");
    let before = providers.received.lock().unwrap().len();
    assert_eq!(
        read(
            &template("splunk", &address, "data('limited').publish()"),
            &token
        )
        .await,
        MetricReading::Value(4.5)
    );
    assert_eq!(
        providers.received.lock().unwrap().len(),
        before + 2,
        "sent again after Retry-After"
    );
}
