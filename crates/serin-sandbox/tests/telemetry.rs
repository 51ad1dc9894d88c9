//! Istio telemetry scraped by a real Prometheus (Debian's package): Flagger's builtin queries, sent
//! unchanged, read back the error rate and latency of the traffic recorded.

use serin_sandbox::prometheus::Prometheus;
use serin_sandbox::telemetry::{Reporter, Sample, Telemetry, Workload};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn workload(name: &str) -> Workload {
    Workload {
        name: name.into(),
        namespace: "test".into(),
        app: "podinfo".into(),
        version: "unknown".into(),
    }
}

/// Flagger's `request-success-rate`, rendered for namespace `test`, target `podinfo`.
fn success_rate(interval: &str) -> String {
    format!(
        r#" sum( rate( istio_requests_total{{ reporter="destination", destination_workload_namespace="test", destination_workload=~"podinfo", response_code!~"5.*" }}[{interval}] ) ) / sum( rate( istio_requests_total{{ reporter="destination", destination_workload_namespace="test", destination_workload=~"podinfo" }}[{interval}] ) ) * 100"#
    )
}

/// Flagger's `request-duration`, rendered the same way.
fn request_duration(interval: &str) -> String {
    format!(
        r#" histogram_quantile( 0.99, sum( rate( istio_request_duration_milliseconds_bucket{{ reporter="destination", destination_workload_namespace="test", destination_workload=~"podinfo" }}[{interval}] ) ) by (le) )"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flaggers_builtin_queries_read_the_recorded_error_rate_and_latency() {
    let telemetry = Arc::new(Telemetry::default());
    let address = serin_sandbox::telemetry::serve(telemetry.clone())
        .await
        .unwrap();

    // Sustained traffic: 20 requests a second to the canary, one in five failing, all taking
    // 30 ms; the primary's successes must not dilute the canary's rate.
    let recorder = telemetry.clone();
    let traffic = tokio::spawn(async move {
        let started = Instant::now();
        let mut sent = 0u64;
        while started.elapsed() < Duration::from_secs(40) {
            sent += 1;
            for (name, code) in [
                ("podinfo", if sent.is_multiple_of(5) { 500 } else { 200 }),
                ("podinfo-primary", 200),
            ] {
                recorder.record(&Sample {
                    reporter: Reporter::Destination,
                    source: workload("loadtester"),
                    destination: workload(name),
                    destination_service: format!("{name}.test.svc.cluster.local"),
                    response_code: code,
                    response_flags: "-".into(),
                    duration: Duration::from_millis(30),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });

    let prometheus = tokio::task::spawn_blocking(move || {
        Prometheus::start("prometheus", &[address], "/stats/prometheus")
            .expect("Debian's prometheus (apt-get install prometheus)")
    })
    .await
    .unwrap();
    let prometheus = Arc::new(prometheus);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !prometheus.targets_up() {
        assert!(Instant::now() < deadline, "the mesh was never scraped");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // One full 5 s window of samples, plus scrape lag.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let asker = prometheus.clone();
    let (rate, p99) = tokio::task::spawn_blocking(move || {
        (
            asker.query(&success_rate("5s")),
            asker.query(&request_duration("5s")),
        )
    })
    .await
    .unwrap();
    let rate = rate.expect("the success-rate query returns a value");
    assert!(
        (rate - 80.0).abs() <= 2.0,
        "success rate {rate}, expected 80 ± 2"
    );
    // All requests took 30 ms, in the (25, 50] bucket: Prometheus interpolates to 49.75.
    let p99 = p99.expect("the duration query returns a value");
    assert!(p99 > 25.0 && p99 <= 50.0, "p99 {p99} ms");
    let nothing = prometheus.query(&success_rate("5s").replace("podinfo\"", "absent\""));
    assert_eq!(
        nothing, None,
        "no series is an empty result, as Flagger sees it"
    );
    traffic.abort();
}
