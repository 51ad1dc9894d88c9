//! MetricTemplate providers beyond plain http: Debian's Prometheus serving https with basic
//! authentication (the sandbox's committed self-signed certificate), and a loopback recorder that
//! shows which headers and credentials a query carries.

use axum::http::{HeaderMap, Uri, header::CONTENT_TYPE};
use serin_core::plan::MetricReading;
use serin_metrics::{
    Auth, ClientOptions, MetricInputs, PrometheusClient, QueryContext, QueryError,
};
use serin_sandbox::prometheus::{FIXTURE_PASSWORD, FIXTURE_USER, Prometheus, WebConfig};
use serin_sandbox::telemetry::Telemetry;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn basic(password: &str) -> Option<Auth> {
    Some(Auth::Basic {
        username: FIXTURE_USER.into(),
        password: password.into(),
    })
}

fn template(provider: serde_json::Value) -> serin_api::MetricTemplate {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "serin.dev/v1beta1", "kind": "MetricTemplate",
        "metadata": {"name": "up", "namespace": "test"},
        "spec": {"provider": provider, "query": "sum(up{job=\"serin-mesh\"})\n  * {{ variables.factor }}"}
    }))
    .unwrap()
}

async fn read_with(
    template: &serin_api::MetricTemplate,
    secret: &BTreeMap<String, String>,
    metrics_server: &PrometheusClient,
) -> MetricReading {
    let metric: serin_api::CanaryMetric = serde_json::from_value(serde_json::json!({
        "name": "up", "templateRef": {"name": "up"}, "templateVariables": {"factor": "2"}
    }))
    .unwrap();
    let inputs = MetricInputs {
        context: QueryContext {
            name: "podinfo".into(),
            namespace: "test".into(),
            ..QueryContext::default()
        },
        template: Some(template),
        secret: Some(secret),
        metrics_server,
        clients: &serin_metrics::ClientCache::default(),
        provider: "istio",
    };
    serin_metrics::read(&metric, inputs).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_prometheus_with_basic_auth_is_queried_when_its_certificate_is_accepted() {
    let target = serin_sandbox::telemetry::serve(Arc::new(Telemetry::default()))
        .await
        .unwrap();
    let prometheus = tokio::task::spawn_blocking(move || {
        Prometheus::start_with_web_config(
            "prometheus",
            &[target],
            "/stats/prometheus",
            Some(&WebConfig::fixture()),
        )
        .expect("Debian's prometheus (apt-get install prometheus)")
    })
    .await
    .unwrap();
    assert!(prometheus.url.starts_with("https://127.0.0.1:"));
    let client = |auth: Option<Auth>, insecure_skip_verify: bool| {
        PrometheusClient::with_options(
            &prometheus.url,
            ClientOptions {
                auth,
                insecure_skip_verify,
                ..ClientOptions::default()
            },
        )
        .unwrap()
    };

    // The self-signed certificate is refused unless the template says to skip verification.
    let untrusted = client(basic(FIXTURE_PASSWORD), false)
        .is_online()
        .await
        .unwrap_err();
    assert!(
        matches!(&untrusted, QueryError::Certificate { reason, .. } if reason.contains("certificate")),
        "{untrusted:?}"
    );
    assert!(
        untrusted.to_string().contains("insecureSkipVerify"),
        "{untrusted}"
    );

    let trusted = client(basic(FIXTURE_PASSWORD), true);
    trusted
        .is_online()
        .await
        .expect("vector(1) is 1 over https");
    let started = Instant::now();
    let up = loop {
        match trusted.query("sum(up{job=\"serin-mesh\"})").await {
            Ok(value) => break value,
            Err(QueryError::NoValues) if started.elapsed() < Duration::from_secs(20) => {
                tokio::time::sleep(Duration::from_millis(500)).await
            }
            Err(other) => panic!("the scrape target never showed up: {other}"),
        }
    };
    assert_eq!(up, 1.0, "Prometheus scraped its one target");

    // Wrong or missing credentials are a failed query naming the Secret, not "no data".
    for auth in [basic("wrong-password"), None] {
        let refused = client(auth, true).is_online().await.unwrap_err();
        assert!(
            matches!(refused, QueryError::Status { status: 401, .. }),
            "{refused:?}"
        );
        assert!(
            matches!(refused.reading(), MetricReading::Error(m) if m.contains("provider.secretRef")),
            "{refused}"
        );
    }

    // Through a MetricTemplate, as the controller reads it.
    let secret = BTreeMap::from([
        ("username".to_string(), FIXTURE_USER.to_string()),
        ("password".to_string(), FIXTURE_PASSWORD.to_string()),
    ]);
    let unused = PrometheusClient::new("http://127.0.0.1:9").unwrap();
    let skipping = template(
        serde_json::json!({"type": "prometheus", "address": prometheus.url,
        "insecureSkipVerify": true, "secretRef": {"name": "prom-auth"}}),
    );
    assert_eq!(
        read_with(&skipping, &secret, &unused).await,
        MetricReading::Value(2.0)
    );
    let verifying = template(
        serde_json::json!({"type": "prometheus", "address": prometheus.url,
        "secretRef": {"name": "prom-auth"}}),
    );
    let refused = read_with(&verifying, &secret, &unused).await;
    assert!(
        matches!(&refused, MetricReading::Error(m) if m.contains("certificate") && m.contains("insecureSkipVerify")),
        "{refused:?}"
    );
}

/// What the recorder saw: each query's headers and its `query` parameter.
type Seen = Arc<Mutex<Vec<(HeaderMap, String)>>>;

/// A loopback stand-in for Prometheus under a path prefix: answers every query with two series
/// (the last one, 7, is the value) and records the request.
async fn recorder() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let app = axum::Router::new().route(
        "/prefix/api/v1/query",
        axum::routing::get(move |headers: HeaderMap, uri: Uri| {
            let log = log.clone();
            async move {
                log.lock()
                    .unwrap()
                    .push((headers, uri.query().unwrap_or_default().to_string()));
                (
                    [(CONTENT_TYPE, "application/json")],
                    r#"{"status":"success","data":{"resultType":"vector","result":[
                        {"metric":{"pod":"a"},"value":[1795319775.1,"3"]},
                        {"metric":{"pod":"b"},"value":[1795319775.1,"7"]}]}}"#,
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{address}/prefix/"), seen)
}

#[tokio::test]
async fn template_headers_and_credentials_arrive_with_each_query() {
    let (address, seen) = recorder().await;
    let unused = PrometheusClient::new("http://127.0.0.1:9").unwrap();
    let with_headers = template(serde_json::json!({"type": "prometheus", "address": address,
        "headers": {"X-Scope-OrgID": ["tenant-a"], "X-Extra": ["one", "two"]},
        "secretRef": {"name": "prom-token"}}));
    let token = BTreeMap::from([("token".to_string(), "t0ken".to_string())]);
    assert_eq!(
        read_with(&with_headers, &token, &unused).await,
        MetricReading::Value(7.0),
        "the last series wins"
    );
    let basic_auth = template(serde_json::json!({"type": "prometheus", "address": address,
        "secretRef": {"name": "prom-basic"}}));
    let user = BTreeMap::from([
        ("username".to_string(), "admin".to_string()),
        ("password".to_string(), "s3cret".to_string()),
    ]);
    assert_eq!(
        read_with(&basic_auth, &user, &unused).await,
        MetricReading::Value(7.0)
    );

    let seen = seen.lock().unwrap();
    let [(first, query), (second, _)] = seen.as_slice() else {
        panic!("expected two queries, saw {}", seen.len());
    };
    assert_eq!(first["x-scope-orgid"], "tenant-a");
    let extra: Vec<_> = first.get_all("x-extra").iter().collect();
    assert_eq!(extra, ["one", "two"]);
    assert_eq!(first["authorization"], "Bearer t0ken");
    assert_eq!(
        query, "query=sum%28up%7Bjob%3D%22serin-mesh%22%7D%29+*+2",
        "rendered, white space collapsed, form-encoded"
    );
    assert_eq!(second["authorization"], "Basic YWRtaW46czNjcmV0");
    assert!(second.get("x-scope-orgid").is_none());
}
