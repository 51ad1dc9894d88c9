//! Istio's standard request metrics, as the mesh proxy reports them: `istio_requests_total` and
//! `istio_request_duration_milliseconds` with Envoy's default buckets and Istio's label set, so
//! Flagger's builtin queries work unchanged.

use serde_json::Value;
use serin_sandbox_apiserver::store::Store;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// Envoy's default histogram bucket bounds, in milliseconds.
pub const DURATION_BUCKETS_MS: [f64; 19] = [
    0.5, 1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0,
    60000.0, 300000.0, 600000.0, 1800000.0, 3600000.0,
];

/// Which proxy reports a sample: the caller's (`source`) or the serving pod's (`destination`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reporter {
    /// The client side: one sample per request, with the final code.
    Source,
    /// The server side: one sample per attempt reaching a pod, and per mirrored copy.
    Destination,
}

/// A workload as the labels name it (`unknown` when the proxy cannot tell).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Workload {
    /// The Deployment name, e.g. `podinfo` or `podinfo-primary`.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Its `app` label.
    pub app: String,
    /// Its `version` label.
    pub version: String,
}

impl Workload {
    /// A workload the proxy knows nothing about.
    pub fn unknown() -> Self {
        Workload {
            name: "unknown".into(),
            namespace: "unknown".into(),
            app: "unknown".into(),
            version: "unknown".into(),
        }
    }
}

/// One request (or attempt) to count.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Who reports it.
    pub reporter: Reporter,
    /// The caller.
    pub source: Workload,
    /// The workload that served it (`unknown` when none did).
    pub destination: Workload,
    /// The routed Service's FQDN, e.g. `podinfo-canary.test.svc.cluster.local`, or `unknown`.
    pub destination_service: String,
    /// HTTP status; 0 when no response was sent.
    pub response_code: u16,
    /// Envoy response flags (`-`, `NR`, `UF`, `URX`, `UT`, `FI`, `DI`, ...).
    pub response_flags: String,
    /// How long it took, as that proxy saw it.
    pub duration: Duration,
}

#[derive(Default)]
struct Series {
    requests: u64,
    buckets: [u64; DURATION_BUCKETS_MS.len()],
    sum_ms: u64,
}

/// The metrics of the mesh, rendered in Prometheus' text format.
#[derive(Default)]
pub struct Telemetry {
    series: Mutex<BTreeMap<String, Series>>,
}

fn label_set(sample: &Sample) -> String {
    let service = sample.destination_service.as_str();
    let service_name = service.split('.').next().unwrap_or("unknown");
    let service_namespace = service.split('.').nth(1).unwrap_or("unknown");
    let (reporter, security) = match sample.reporter {
        Reporter::Source => ("source", "unknown"),
        Reporter::Destination => ("destination", "none"),
    };
    let canonical = |w: &Workload| {
        if w.app == "unknown" {
            w.name.clone()
        } else {
            w.app.clone()
        }
    };
    let pairs: [(&str, String); 21] = [
        ("reporter", reporter.into()),
        ("source_workload", sample.source.name.clone()),
        ("source_workload_namespace", sample.source.namespace.clone()),
        ("source_canonical_service", canonical(&sample.source)),
        ("source_canonical_revision", "latest".into()),
        ("source_app", sample.source.app.clone()),
        ("source_version", sample.source.version.clone()),
        ("destination_workload", sample.destination.name.clone()),
        (
            "destination_workload_namespace",
            sample.destination.namespace.clone(),
        ),
        (
            "destination_canonical_service",
            canonical(&sample.destination),
        ),
        ("destination_canonical_revision", "latest".into()),
        ("destination_app", sample.destination.app.clone()),
        ("destination_version", sample.destination.version.clone()),
        ("destination_service", service.into()),
        ("destination_service_name", service_name.into()),
        ("destination_service_namespace", service_namespace.into()),
        ("request_protocol", "http".into()),
        ("response_code", sample.response_code.to_string()),
        ("grpc_response_status", String::new()),
        ("response_flags", sample.response_flags.clone()),
        ("connection_security_policy", security.into()),
    ];
    pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect::<Vec<_>>()
        .join(",")
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Telemetry {
    /// Counts one sample.
    pub fn record(&self, sample: &Sample) {
        // Envoy records whole milliseconds.
        let ms = sample.duration.as_millis() as u64;
        let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let entry = series.entry(label_set(sample)).or_default();
        entry.requests += 1;
        entry.sum_ms += ms;
        for (count, bound) in entry.buckets.iter_mut().zip(DURATION_BUCKETS_MS) {
            if ms as f64 <= bound {
                *count += 1;
            }
        }
    }

    /// Total requests recorded with this reporter, destination workload and response code.
    pub fn count(&self, reporter: Reporter, workload: &str, code: u16) -> u64 {
        let reporter = match reporter {
            Reporter::Source => "reporter=\"source\"",
            Reporter::Destination => "reporter=\"destination\"",
        };
        let workload = format!("destination_workload=\"{}\"", escape(workload));
        let code = format!("response_code=\"{code}\"");
        let series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        series
            .iter()
            .filter(|(labels, _)| {
                labels.starts_with(reporter) && labels.contains(&workload) && labels.contains(&code)
            })
            .map(|(_, s)| s.requests)
            .sum()
    }

    /// The Prometheus text exposition (`text/plain; version=0.0.4`).
    pub fn render(&self) -> String {
        let series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::from("# TYPE istio_requests_total counter\n");
        for (labels, s) in series.iter() {
            out.push_str(&format!(
                "istio_requests_total{{{labels}}} {}\n",
                s.requests
            ));
        }
        out.push_str("# TYPE istio_request_duration_milliseconds histogram\n");
        for (labels, s) in series.iter() {
            for (count, bound) in s.buckets.iter().zip(DURATION_BUCKETS_MS) {
                out.push_str(&format!(
                    "istio_request_duration_milliseconds_bucket{{{labels},le=\"{bound}\"}} {count}\n"
                ));
            }
            out.push_str(&format!(
                "istio_request_duration_milliseconds_bucket{{{labels},le=\"+Inf\"}} {}\n",
                s.requests
            ));
            out.push_str(&format!(
                "istio_request_duration_milliseconds_sum{{{labels}}} {}\n",
                s.sum_ms
            ));
            out.push_str(&format!(
                "istio_request_duration_milliseconds_count{{{labels}}} {}\n",
                s.requests
            ));
        }
        out
    }
}

/// Serves `telemetry` at `http://ADDRESS/stats/prometheus` on a free loopback port (for a
/// Prometheus to scrape without a mesh proxy, as in tests).
pub async fn serve(telemetry: std::sync::Arc<Telemetry>) -> std::io::Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let app = axum::Router::new().route(
        "/stats/prometheus",
        axum::routing::get(move || {
            let telemetry = telemetry.clone();
            async move { telemetry.render() }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(address)
}

/// The workload a pod belongs to, as Istio's telemetry names it: its Deployment (through its
/// ReplicaSet), else its direct owner, else the pod itself.
pub fn workload_of(store: &Store, pod: &Value) -> Workload {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let owner = |object: &Value, kind: &str| {
        object["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["kind"] == kind)
            .and_then(|r| r["name"].as_str())
            .map(String::from)
    };
    let replica_sets = store
        .resource("apps", "v1", "replicasets")
        .expect("built in");
    let name = match owner(pod, "ReplicaSet") {
        Some(rs) => store
            .get(&replica_sets, namespace, &rs)
            .ok()
            .and_then(|rs_object| owner(&rs_object, "Deployment"))
            .unwrap_or(rs),
        // A DaemonSet's or a Job's pod is named after its owner, as Istio names workloads.
        None => ["DaemonSet", "Job", "StatefulSet"]
            .iter()
            .find_map(|kind| owner(pod, kind))
            .unwrap_or_else(|| pod["metadata"]["name"].as_str().unwrap_or("unknown").into()),
    };
    let label = |key: &str| {
        pod["metadata"]["labels"][key]
            .as_str()
            .unwrap_or("unknown")
            .to_string()
    };
    Workload {
        name,
        namespace: namespace.into(),
        app: label("app"),
        version: label("version"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn podinfo() -> Workload {
        Workload {
            name: "podinfo".into(),
            namespace: "test".into(),
            app: "podinfo".into(),
            version: "unknown".into(),
        }
    }

    #[test]
    fn buckets_are_cumulative_and_use_envoys_bounds() {
        let telemetry = Telemetry::default();
        for ms in [3, 30, 300] {
            telemetry.record(&Sample {
                reporter: Reporter::Destination,
                source: Workload::unknown(),
                destination: podinfo(),
                destination_service: "podinfo-canary.test.svc.cluster.local".into(),
                response_code: 200,
                response_flags: "-".into(),
                duration: Duration::from_millis(ms),
            });
        }
        let text = telemetry.render();
        let bucket = |le: &str| {
            text.lines()
                .find(|l| {
                    l.starts_with("istio_request_duration_milliseconds_bucket")
                        && l.contains(&format!("le=\"{le}\""))
                })
                .and_then(|l| l.rsplit(' ').next())
                .unwrap()
                .to_string()
        };
        assert_eq!(bucket("0.5"), "0");
        assert_eq!(bucket("5"), "1");
        assert_eq!(bucket("50"), "2");
        assert_eq!(bucket("500"), "3");
        assert_eq!(bucket("3600000"), "3");
        assert_eq!(bucket("+Inf"), "3");
        assert!(text.contains("destination_service_name=\"podinfo-canary\""));
        assert!(text.contains("response_code=\"200\""));
        assert!(text.contains(",response_flags=\"-\","));
        assert!(text.contains("istio_request_duration_milliseconds_sum{"));
        assert_eq!(telemetry.count(Reporter::Destination, "podinfo", 200), 3);
        assert_eq!(telemetry.count(Reporter::Source, "podinfo", 200), 0);
    }
}
