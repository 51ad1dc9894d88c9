//! A `prometheus` MetricTemplate against a second server of Prometheus' query API: Debian's
//! VictoriaMetrics, fed samples through its Prometheus-text import. The value, "no values" and a
//! query it rejects end as they do against Prometheus.

use serin_core::plan::MetricReading;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support;

/// A VictoriaMetrics of its own on a loopback port, its data in a temporary directory; stopped
/// when dropped.
struct VictoriaMetrics {
    child: Child,
    url: String,
    _data: tempfile::TempDir,
}

impl Drop for VictoriaMetrics {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start() -> VictoriaMetrics {
    let data = tempfile::tempdir().unwrap();
    for _ in 0..5 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // latencyOffset 1s (its floor): points are searchable a second after they are written.
        let mut child = Command::new("victoria-metrics")
            .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
            .arg(format!("-storageDataPath={}", data.path().display()))
            .args([
                "-retentionPeriod=1d",
                "-search.latencyOffset=1s",
                "-loggerLevel=ERROR",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("Debian's victoria-metrics (apt-get install victoria-metrics)");
        let url = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = child.try_wait() {
                break; // the port was taken meanwhile: try another
            }
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return VictoriaMetrics {
                    child,
                    url,
                    _data: data,
                };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("victoria-metrics did not start");
}

fn template(address: &str, query: &str) -> serin_api::MetricTemplate {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "serin.dev/v1beta1", "kind": "MetricTemplate",
        "metadata": {"name": "errors", "namespace": "test"},
        "spec": {"provider": {"type": "prometheus", "address": address}, "query": query}
    }))
    .unwrap()
}

async fn read(template: &serin_api::MetricTemplate) -> MetricReading {
    support::read_template(template, None, "1m").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prometheus_template_reads_victoria_metrics_as_it_reads_prometheus() {
    let vm = tokio::task::spawn_blocking(start).await.unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let samples = format!(
        "podinfo_errors_total{{namespace=\"test\",pod=\"podinfo-a\"}} 3 {}\npodinfo_errors_total{{namespace=\"test\",pod=\"podinfo-b\"}} 4.5 {}\n",
        now - 2000,
        now
    );
    let imported = reqwest::Client::new()
        .post(format!("{}/api/v1/import/prometheus", vm.url))
        .body(samples)
        .send()
        .await
        .unwrap();
    assert!(imported.status().is_success(), "{}", imported.status());

    // A new series is searchable about a second after it is written; an earlier empty answer is
    // cached for seconds, so the first query waits two.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let summed = template(
        &vm.url,
        "sum(podinfo_errors_total{namespace=\"{{ namespace }}\"})",
    );
    let started = Instant::now();
    let mut reading = read(&summed).await;
    while reading == MetricReading::NoData && started.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        reading = read(&summed).await;
    }
    assert_eq!(reading, MetricReading::Value(7.5));
    assert_eq!(
        read(&template(&vm.url, "sum(podinfo_never_written_total)")).await,
        MetricReading::NoData
    );
    let MetricReading::Error(rejected) = read(&template(&vm.url, "sum(rate(x[1m]) by")).await
    else {
        panic!("a query VictoriaMetrics cannot parse is an error");
    };
    assert!(
        rejected.starts_with("Prometheus could not run the query ("),
        "{rejected}"
    );
}
