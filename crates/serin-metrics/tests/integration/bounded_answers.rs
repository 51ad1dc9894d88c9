//! A metrics address can be chosen by a tenant: what it answers is read with a size limit and a
//! time limit, and a redirect is not followed (it could carry the template's credentials away).
//! Loopback servers stand in for Prometheus.

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use serin_api::limits::MAX_METRIC_ANSWER_BYTES;
use serin_metrics::{ClientOptions, PrometheusClient, QueryError};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const ANSWER: &str = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1795319775.1,"42"]}]}}"#;

/// Serves `app` on a loopback port and returns its address.
async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}")
}

/// A Prometheus answer of exactly `size` bytes: the value 42, padded with white space.
fn padded_answer(size: usize) -> String {
    format!("{ANSWER}{}", " ".repeat(size - ANSWER.len()))
}

fn answering(body: String) -> axum::Router {
    let body = Arc::new(body);
    axum::Router::new().route(
        "/api/v1/query",
        axum::routing::get(move || {
            let body = body.clone();
            async move {
                (
                    [(header::CONTENT_TYPE, "application/json")],
                    (*body).clone(),
                )
            }
        }),
    )
}

#[tokio::test]
async fn an_answer_of_4_mib_is_read_and_one_byte_more_is_refused() {
    let at_limit = serve(answering(padded_answer(MAX_METRIC_ANSWER_BYTES))).await;
    let client = PrometheusClient::new(&at_limit).unwrap();
    assert_eq!(client.query("up").await, Ok(42.0));

    let over = serve(answering(padded_answer(MAX_METRIC_ANSWER_BYTES + 1))).await;
    let client = PrometheusClient::new(&over).unwrap();
    let error = client.query("up").await.unwrap_err();
    assert_eq!(
        error,
        QueryError::TooLarge {
            address: over.clone()
        }
    );
    let message = error.to_string();
    assert!(
        message.contains(&over) && message.contains("4194304 bytes (4 MiB)"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_answer_stops_at_the_limit_without_being_held_in_memory() {
    // 300 MB in 64 KiB chunks, streamed: the reader stops after 4 MiB and drops the connection.
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = sent.clone();
    let app = axum::Router::new().route(
        "/api/v1/query",
        axum::routing::get(move || {
            let counter = counter.clone();
            async move {
                let chunk = bytes::Bytes::from(vec![b' '; 64 * 1024]);
                let chunks = futures::stream::iter(0..300 * 16).map(move |_| {
                    counter.fetch_add(chunk.len(), Ordering::Relaxed);
                    Ok::<_, std::io::Error>(chunk.clone())
                });
                (
                    [(header::CONTENT_TYPE, "application/json")],
                    axum::body::Body::from_stream(chunks),
                )
            }
        }),
    );
    let address = serve(app).await;
    let client = PrometheusClient::new(&address).unwrap();
    let started = Instant::now();
    let error = client.query("up").await.unwrap_err();
    assert!(matches!(error, QueryError::TooLarge { .. }), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopped reading at the limit"
    );
    // Let the server notice the closed connection; it must not have sent the whole 300 MB.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent = sent.load(Ordering::Relaxed);
    assert!(sent < 64 * 1024 * 1024, "the server sent {sent} bytes");
}

use futures::StreamExt;

#[tokio::test]
async fn a_redirect_is_not_followed() {
    let followed = Arc::new(AtomicUsize::new(0));
    let count = followed.clone();
    let elsewhere = serve(axum::Router::new().route(
        "/api/v1/query",
        axum::routing::get(move |headers: HeaderMap| {
            count.fetch_add(1, Ordering::Relaxed);
            assert!(headers.get(header::AUTHORIZATION).is_none());
            async { ([(header::CONTENT_TYPE, "application/json")], ANSWER) }
        }),
    ))
    .await;
    let target = format!("{elsewhere}/api/v1/query");
    let redirecting = serve(axum::Router::new().route(
        "/api/v1/query",
        axum::routing::get(move || {
            let target = target.clone();
            async move { (StatusCode::FOUND, [(header::LOCATION, target)]).into_response() }
        }),
    ))
    .await;
    let client = PrometheusClient::with_options(
        &redirecting,
        ClientOptions {
            auth: Some(serin_metrics::Auth::Bearer("t0ken".into())),
            ..ClientOptions::default()
        },
    )
    .unwrap();
    let error = client.query("up").await.unwrap_err();
    match &error {
        QueryError::Status { status, .. } => assert_eq!(*status, 302),
        other => panic!("expected the 302 itself, got {other:?}"),
    }
    assert!(
        error.to_string().contains("does not follow redirects"),
        "{error}"
    );
    assert_eq!(
        followed.load(Ordering::Relaxed),
        0,
        "the redirect was followed"
    );
}

#[tokio::test]
async fn an_answer_that_trickles_past_the_timeout_is_cut_at_the_timeout() {
    // Headers at once, then one byte a second: only a limit on the whole exchange stops it.
    let app = axum::Router::new().route(
        "/api/v1/query",
        axum::routing::get(|| async {
            let trickle = futures::stream::unfold(0, |n| async move {
                tokio::time::sleep(Duration::from_millis(500)).await;
                Some((
                    Ok::<_, std::io::Error>(bytes::Bytes::from_static(b" ")),
                    n + 1,
                ))
            });
            (
                [(header::CONTENT_TYPE, "application/json")],
                axum::body::Body::from_stream(trickle),
            )
        }),
    );
    let address = serve(app).await;
    let client = PrometheusClient::with_options(
        &address,
        ClientOptions {
            timeout: Duration::from_secs(1),
            ..ClientOptions::default()
        },
    )
    .unwrap();
    let started = Instant::now();
    let error = client.query("up").await.unwrap_err();
    assert!(
        matches!(&error, QueryError::Unreachable { reason, .. } if reason.contains("no answer within")),
        "{error:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}
