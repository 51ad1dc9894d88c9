//! Debian's Prometheus scrapes the operator's OpenMetrics text and reads back Flagger's names.

use serin_api::Phase;
use serin_controller::metrics::OperatorMetrics;
use serin_metrics::PrometheusClient;
use serin_sandbox::prometheus::Prometheus;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_reads_every_family_from_the_openmetrics_text() {
    let metrics = Arc::new(OperatorMetrics::default());
    metrics.set_info("1.2.3", "istio");
    metrics.set_totals(&BTreeMap::from([("test".to_string(), 2)]));
    metrics.record_tick("podinfo", "test", Some(Phase::Failed), 30, 2);
    metrics.record_metric("podinfo", "test", "request-duration", 412.5);
    metrics.record_release("podinfo", "test", true, "canary", "completed");
    metrics.record_release("podinfo", "test", false, "blue-green", "skipped");
    metrics.observe_duration("podinfo", "test", 0.2);
    metrics.count_reconcile();
    drop(metrics.start_reconcile());

    let served = metrics.clone();
    let app =
        axum::Router::new().route("/metrics", serin_controller::metrics::metrics_route(served));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let prometheus = tokio::task::spawn_blocking(move || {
        Prometheus::start("prometheus", &[address], "/metrics")
            .expect("Debian's prometheus (apt-get install prometheus)")
    })
    .await
    .unwrap();
    let client = PrometheusClient::new(&prometheus.url).unwrap();

    // A scrape whose text Prometheus cannot parse stores nothing, not even `up`'s 1.
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.query("up").await.ok() != Some(1.0) {
        assert!(
            Instant::now() < deadline,
            "Prometheus never scraped the text successfully:\n{}",
            metrics.render()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (query, expected) in [
        (r#"serin_info{version="1.2.3",mesh_provider="istio"}"#, 1.0),
        (r#"serin_canary_total{namespace="test"}"#, 2.0),
        (
            r#"serin_canary_status{name="podinfo",namespace="test"}"#,
            2.0,
        ),
        (
            r#"serin_canary_weight{workload="podinfo-primary",namespace="test"}"#,
            70.0,
        ),
        (
            r#"serin_canary_weight{workload="podinfo",namespace="test"}"#,
            30.0,
        ),
        (
            r#"serin_canary_failed_checks{name="podinfo",namespace="test"}"#,
            2.0,
        ),
        (
            r#"serin_canary_metric_analysis{name="podinfo",metric="request-duration"}"#,
            412.5,
        ),
        (
            r#"serin_canary_successes_total{deployment_strategy="canary",analysis_status="completed"}"#,
            1.0,
        ),
        (
            r#"serin_canary_failures_total{deployment_strategy="blue-green",analysis_status="skipped"}"#,
            1.0,
        ),
        ("serin_reconcile_total", 2.0),
        ("serin_reconcile_duration_seconds_count", 1.0),
        (r#"serin_reconcile_duration_seconds_bucket{le="+Inf"}"#, 1.0),
        ("process_resident_memory_bytes > bool 1e6", 1.0),
        (
            r#"serin_canary_duration_seconds_bucket{name="podinfo",le="0.1"}"#,
            0.0,
        ),
        (
            r#"serin_canary_duration_seconds_bucket{name="podinfo",le="0.25"}"#,
            1.0,
        ),
        (r#"serin_canary_duration_seconds_sum{name="podinfo"}"#, 0.2),
        (
            r#"serin_canary_duration_seconds_count{name="podinfo"}"#,
            1.0,
        ),
    ] {
        assert_eq!(client.query(query).await, Ok(expected), "{query}");
    }
}
