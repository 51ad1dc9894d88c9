//! The sandbox's Prometheus scrapes targets registered after it started, through a file in its
//! targets directory, and stops when the file is removed.

use serin_metrics::{PrometheusClient, QueryError};
use serin_sandbox::prometheus::{Prometheus, write_target_file};
use std::time::{Duration, Instant};

/// Queries until `expected` comes back, for at most 30 s.
async fn eventually(client: &PrometheusClient, query: &str, expected: Result<f64, QueryError>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = client.query(query).await;
        if got == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{query}: expected {expected:?}, still {got:?} after 30s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_file_written_after_the_start_is_scraped_until_removed() {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(|| async { "# TYPE registered_later gauge\nregistered_later 42\n" }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = tempfile::tempdir().unwrap();
    let targets = dir.path().to_path_buf();
    let prometheus = tokio::task::spawn_blocking(move || {
        Prometheus::start_with_file_targets("prometheus", &[], "/metrics", &targets)
            .expect("Debian's prometheus (apt-get install prometheus)")
    })
    .await
    .unwrap();
    let client = PrometheusClient::new(&prometheus.url).unwrap();
    assert_eq!(
        client.query("registered_later").await,
        Err(QueryError::NoValues)
    );

    let file = write_target_file(dir.path(), "late", "late-job", &[address]).unwrap();
    eventually(&client, r#"registered_later{job="late-job"}"#, Ok(42.0)).await;
    eventually(&client, r#"up{job="late-job"}"#, Ok(1.0)).await;

    std::fs::remove_file(file).unwrap();
    // A target that is gone is no longer scraped: its `up` series ends (marked stale).
    eventually(&client, r#"up{job="late-job"}"#, Err(QueryError::NoValues)).await;
}
