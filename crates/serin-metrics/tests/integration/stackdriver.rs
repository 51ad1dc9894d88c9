//! Stackdriver (Cloud Monitoring) templates against loopback servers that answer as Google's API
//! references document: OAuth 2.0's token endpoint for service accounts (a JWT bearer grant) and
//! Cloud Monitoring's `projects.timeSeries.query` (a value, no data, an error in Google's words, a
//! refused token, a rate limit). The test checks the JWT the token endpoint receives and the
//! request Cloud Monitoring receives, with a key from the template's Secret and then with the
//! operator's own (`GOOGLE_APPLICATION_CREDENTIALS`).
//!
//! This file holds one test: it changes the process's environment, which no other test may read
//! at the same time.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serin_core::plan::MetricReading;
use serin_metrics::ClientCache;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::support;

/// A query as Cloud Monitoring received it: the path after `projects/`, the Authorization header
/// and the body.
type Query = (String, Option<String>, serde_json::Value);

#[derive(Clone, Default)]
struct Google {
    /// The claims of each JWT the token endpoint received.
    grants: Arc<Mutex<Vec<serde_json::Value>>>,
    queries: Arc<Mutex<Vec<Query>>>,
    limited: Arc<Mutex<u32>>,
}

fn json(status: StatusCode, body: serde_json::Value) -> Response {
    (
        status,
        [("content-type", "application/json; charset=UTF-8")],
        body.to_string(),
    )
        .into_response()
}

async fn token(State(google): State<Google>, body: Bytes) -> Response {
    let form: BTreeMap<String, String> =
        reqwest::Url::parse(&format!("http://token/?{}", String::from_utf8_lossy(&body)))
            .unwrap()
            .query_pairs()
            .into_owned()
            .collect();
    assert_eq!(
        form["grant_type"],
        "urn:ietf:params:oauth:grant-type:jwt-bearer"
    );
    let parts: Vec<&str> = form["assertion"].split('.').collect();
    // JWT segments are base64url; some signers keep the padding.
    let bytes = |part: &str| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(part.trim_end_matches('='))
            .unwrap()
    };
    let decode = |part: &str| serde_json::from_slice::<serde_json::Value>(&bytes(part)).unwrap();
    assert_eq!(decode(parts[0])["alg"], "RS256");
    let signature = bytes(parts[2]);
    assert_eq!(signature.len(), 256, "an RSA-2048 signature");
    let claims = decode(parts[1]);
    google.grants.lock().unwrap().push(claims.clone());
    // A disabled account still gets a token here; Cloud Monitoring refuses it.
    let token = if claims["iss"].as_str().unwrap().starts_with("disabled") {
        "ya29.c.disabled-account"
    } else {
        "ya29.c.l0opback-token"
    };
    json(
        StatusCode::OK,
        serde_json::json!({"access_token": token, "expires_in": 3599, "token_type": "Bearer"}),
    )
}

async fn query(
    State(google): State<Google>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let authorization = headers
        .get("authorization")
        .map(|v| v.to_str().unwrap().to_string());
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    google
        .queries
        .lock()
        .unwrap()
        .push((name.clone(), authorization.clone(), body.clone()));
    if authorization.as_deref() != Some("Bearer ya29.c.l0opback-token") {
        return json(
            StatusCode::UNAUTHORIZED,
            serde_json::json!({"error": {"code": 401, "status": "UNAUTHENTICATED",
                "message": "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential."}}),
        );
    }
    let mql = body["query"].as_str().unwrap_or_default();
    if mql.contains("limited") {
        let mut limited = google.limited.lock().unwrap();
        *limited += 1;
        if *limited == 1 {
            return json(
                StatusCode::TOO_MANY_REQUESTS,
                serde_json::json!({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED",
                    "message": "Quota exceeded for quota metric 'Time series queries'"}}),
            );
        }
    }
    if mql.starts_with("fetc ") {
        return json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"error": {"code": 400, "status": "INVALID_ARGUMENT",
                "message": "Line 1, column 1 to column 4: Unknown table operation 'fetc'."}}),
        );
    }
    let descriptor = serde_json::json!({"labelDescriptors": [{"key": "resource.container_name"}],
        "pointDescriptors": [{"key": "value.errors_rate", "valueType": "DOUBLE", "metricKind": "GAUGE"}]});
    if mql.contains("nodata") {
        return json(
            StatusCode::OK,
            serde_json::json!({"timeSeriesDescriptor": descriptor}),
        );
    }
    json(
        StatusCode::OK,
        serde_json::json!({"timeSeriesDescriptor": descriptor,
            "timeSeriesData": [{"labelValues": [{"stringValue": "podinfo"}],
                "pointData": [
                    {"values": [{"doubleValue": 1.5}],
                     "timeInterval": {"startTime": "2026-11-27T11:59:00Z", "endTime": "2026-11-27T12:00:00Z"}},
                    {"values": [{"doubleValue": 3.0}],
                     "timeInterval": {"startTime": "2026-11-27T11:58:00Z", "endTime": "2026-11-27T11:59:00Z"}}]}]}),
    )
}

async fn serve() -> (String, Google) {
    let google = Google::default();
    let app = axum::Router::new()
        .route("/token", axum::routing::post(token))
        .route("/v3/projects/{*name}", axum::routing::post(query))
        .with_state(google.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, google)
}

fn service_account_key(address: &str, email: &str) -> String {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).unwrap();
    serde_json::json!({
        "type": "service_account", "project_id": "shop-prod-1234",
        "private_key_id": "0123456789abcdef", "private_key": key.serialize_pem(),
        "client_email": email, "client_id": "100000000000000000001",
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": format!("{address}/token"),
    })
    .to_string()
}

fn template(address: &str, query: &str) -> serin_api::MetricTemplate {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "serin.dev/v1beta1", "kind": "MetricTemplate",
        "metadata": {"name": "errors", "namespace": "test"},
        "spec": {"provider": {"type": "stackdriver", "address": address,
                              "secretRef": {"name": "gcp"}},
                 "query": query}
    }))
    .unwrap()
}

const MQL: &str = "fetch k8s_container | metric 'logging.googleapis.com/user/errors' | filter resource.container_name == '{{ target }}' | align rate(1m) | every 1m";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_monitoring_runs_mql_in_the_project_with_a_service_account_token() {
    let (address, google) = serve().await;
    let key = service_account_key(
        &address,
        "serin-reader@shop-prod-1234.iam.gserviceaccount.com",
    );
    let secret = BTreeMap::from([
        ("project".to_string(), "shop-prod-1234".to_string()),
        ("serviceAccountKey".to_string(), key),
    ]);
    let clients = ClientCache::default();
    let read = |query: &'static str, secret: BTreeMap<String, String>| {
        let template = template(&address, query);
        let clients = &clients;
        async move { support::read_template_with(&template, Some(&secret), "1m", clients).await }
    };

    assert_eq!(read(MQL, secret.clone()).await, MetricReading::Value(1.5));
    let (project, authorization, body) = google.queries.lock().unwrap()[0].clone();
    assert_eq!(project, "shop-prod-1234/timeSeries:query");
    assert_eq!(
        authorization.as_deref(),
        Some("Bearer ya29.c.l0opback-token")
    );
    assert_eq!(
        body["query"],
        "fetch k8s_container | metric 'logging.googleapis.com/user/errors' | filter resource.container_name == 'podinfo' | align rate(1m) | every 1m"
    );
    let grant = google.grants.lock().unwrap()[0].clone();
    assert_eq!(
        grant["iss"],
        "serin-reader@shop-prod-1234.iam.gserviceaccount.com"
    );
    assert_eq!(
        grant["scope"],
        "https://www.googleapis.com/auth/monitoring.read"
    );
    assert_eq!(grant["aud"], format!("{address}/token"));

    assert_eq!(
        read("fetch nodata", secret.clone()).await,
        MetricReading::NoData
    );
    assert_eq!(
        google.grants.lock().unwrap().len(),
        1,
        "the token is kept until it expires"
    );
    let MetricReading::Error(invalid) = read("fetc k8s_container", secret.clone()).await else {
        panic!("a rejected query is an error");
    };
    assert!(
        invalid.starts_with(
            "Metric template errors.test (stackdriver) query failed: stackdriver answered HTTP 400: "
        ) && invalid.contains("Unknown table operation 'fetc'"),
        "{invalid}"
    );
    assert_eq!(
        read("fetch limited", secret.clone()).await,
        MetricReading::Value(1.5),
        "a 429 is sent again within the interval"
    );
    let mut disabled = secret.clone();
    disabled.insert(
        "serviceAccountKey".into(),
        service_account_key(&address, "disabled@shop-prod-1234.iam.gserviceaccount.com"),
    );
    let MetricReading::Error(refused) = read(MQL, disabled).await else {
        panic!("a refused token is an error");
    };
    assert!(
        refused.contains("HTTP 401: check serviceAccountKey and project")
            && refused.contains("invalid authentication credentials")
            && !refused.contains("ya29"),
        "{refused}"
    );
    let mut broken = secret.clone();
    broken.insert(
        "serviceAccountKey".into(),
        r#"{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n"}"#.into(),
    );
    let MetricReading::Error(not_a_key) = read(MQL, broken).await else {
        panic!("a broken key is an error");
    };
    assert!(
        not_a_key.contains("serviceAccountKey is not a service account key file")
            && !not_a_key.contains("bm90IGEga2V5"),
        "{not_a_key}"
    );

    // The operator's own identity when the Secret names only the project.
    let files = tempfile::tempdir().unwrap();
    let operator_key = files.path().join("key.json");
    std::fs::write(
        &operator_key,
        service_account_key(&address, "serin@ops-5678.iam.gserviceaccount.com"),
    )
    .unwrap();
    // SAFETY: this test binary holds one test, and nothing reads the environment meanwhile.
    unsafe { std::env::set_var("GOOGLE_APPLICATION_CREDENTIALS", &operator_key) };
    let project_only = BTreeMap::from([("project".to_string(), "shop-prod-1234".to_string())]);
    assert_eq!(read(MQL, project_only).await, MetricReading::Value(1.5));
    assert_eq!(
        google.grants.lock().unwrap().last().unwrap()["iss"],
        "serin@ops-5678.iam.gserviceaccount.com"
    );
    let MetricReading::Error(no_project) =
        support::read_template(&template(&address, MQL), Some(&BTreeMap::new()), "1m").await
    else {
        panic!("a Secret without project is an error");
    };
    assert_eq!(
        no_project,
        "Metric template errors.test (stackdriver) cannot be queried: the Secret gcp has no project key"
    );
}
