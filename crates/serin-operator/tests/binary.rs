//! The `serin-operator` binary as a user starts it, against the sandbox: its flags
//! (`--log-format json`, `--log-level`, `--include-label-prefix`, `--namespace`) take effect, and its admin server
//! answers `/healthz`, `/readyz` and `/metrics` while it initializes a Canary.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../../serin-controller/tests/common/mod.rs"]
mod common;
use common::{kubectl, sandbox_with_crds};

const MANIFESTS: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: test}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
  namespace: test
  labels: {app: podinfo, team: payments, app.kubernetes.io/part-of: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: podinfo}}
  template:
    metadata: {labels: {app: podinfo}}
    spec:
      containers:
      - name: podinfod
        image: ghcr.io/stefanprodan/podinfo:6.0.0
        ports: [{name: http, containerPort: 9898}]
---
apiVersion: serin.dev/v1beta1
kind: Canary
metadata: {name: podinfo, namespace: test}
spec:
  provider: istio
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: podinfo}
  service: {port: 9898}
  analysis: {interval: 10s, threshold: 2, stepWeight: 50, maxWeight: 50}
"#;

/// `GET path` on the admin server: the whole HTTP/1.1 response.
fn admin_response(port: u16, path: &str) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    Some(response)
}

/// `GET path` on the admin server: the status code and the body.
fn admin_get(port: u16, path: &str) -> Option<(u16, String)> {
    let response = admin_response(port, path)?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((code, body))
}

fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_take_effect_and_the_admin_server_answers() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox_with_crds(dir.path(), false).await;
    kubectl(&sandbox, &["apply", "-f", "-"], Some(MANIFESTS));

    let admin = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let log_path = dir.path().join("operator.log");
    let mut operator = Command::new(env!("CARGO_BIN_EXE_serin-operator"))
        .args([
            "--namespace",
            "test",
            "--metrics-server",
            "http://127.0.0.1:9",
            "--admin-address",
            &format!("127.0.0.1:{admin}"),
            "--log-format",
            "json",
            "--log-level",
            "info,kube=debug",
            "--include-label-prefix",
            "app.kubernetes.io",
        ])
        .env("KUBECONFIG", &sandbox.kubeconfig)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();

    let blocking = tokio::task::spawn_blocking({
        let kubeconfig = sandbox.kubeconfig.clone();
        move || {
            let get = |args: &[&str]| {
                let out = Command::new("kubectl")
                    .arg("--kubeconfig")
                    .arg(&kubeconfig)
                    .args(["-n", "test", "get"])
                    .args(args)
                    .output()
                    .expect("kubectl is installed");
                String::from_utf8_lossy(&out.stdout).into_owned()
            };
            eventually(Duration::from_secs(90), "the Canary is Initialized", || {
                get(&["canary", "podinfo", "-o", "jsonpath={.status.phase}"]) == "Initialized"
            });
            let labels = get(&[
                "deploy",
                "podinfo-primary",
                "-o",
                "jsonpath={.metadata.labels}",
            ]);
            assert!(
                labels.contains(r#""app.kubernetes.io/part-of":"shop""#),
                "labels with the included prefix are copied: {labels}"
            );
            assert!(
                !labels.contains("team"),
                "labels without it are not: {labels}"
            );
            assert_eq!(admin_get(admin, "/healthz").map(|r| r.0), Some(200));
            assert_eq!(admin_get(admin, "/readyz").map(|r| r.0), Some(200));
            eventually(
                Duration::from_secs(30),
                "/metrics counts the Canary",
                || {
                    admin_get(admin, "/metrics").is_some_and(|(code, body)| {
                        code == 200
                            && body.contains(r#"serin_canary_total{namespace="test"} 1"#)
                            && body.contains(
                                r#"serin_canary_status{name="podinfo",namespace="test"} 1"#,
                            )
                            && body.contains(r#"mesh_provider="istio"} 1"#)
                            && body.ends_with("# EOF\n")
                    })
                },
            );
            let response = admin_response(admin, "/metrics").unwrap_or_default();
            // The kube client counts what it sent, reconciles are timed, memory is read at scrape.
            for line in [
                r#"serin_kubernetes_api_requests_total{verb="list",code="200"} "#,
                r#"serin_kubernetes_api_requests_total{verb="watch",code="200"} "#,
                r#"serin_kubernetes_api_requests_total{verb="patch",code="200"} "#,
                "serin_reconcile_duration_seconds_count ",
                "process_resident_memory_bytes ",
            ] {
                assert!(response.contains(line), "/metrics lacks {line}: {response}");
            }
            assert!(
                !response.contains("serin_reconcile_duration_seconds_count 0\n"),
                "reconciles are timed: {response}"
            );
            assert!(
                response.to_ascii_lowercase().contains(
                    "content-type: application/openmetrics-text; version=1.0.0; charset=utf-8"
                ),
                "/metrics is served as OpenMetrics: {response}"
            );
        }
    });
    let outcome = blocking.await;
    let _ = operator.kill();
    let _ = operator.wait();
    sandbox.stop().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic.into_panic());
    }

    let log = std::fs::read_to_string(&log_path).unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| {
                panic!("--log-format json wrote a line that is not JSON ({e}): {line}")
            })
        })
        .collect();
    for line in &lines {
        assert!(
            line["level"].is_string()
                && line["timestamp"].is_string()
                && line["message"].is_string(),
            "every line has level, timestamp and message: {line}"
        );
    }
    let messages: Vec<&str> = lines.iter().filter_map(|l| l["message"].as_str()).collect();
    assert!(
        messages.contains(&"watching Canaries of serin.dev/v1beta1 in test"),
        "{messages:?}"
    );
    // A tick's lines carry the Canary in the reconcile span, so `jq 'select(.span.canary == "podinfo")'`
    // finds them; kube's own lines inside a reconcile carry it in their span list.
    let of_podinfo = |line: &serde_json::Value| {
        line["spans"].as_array().is_some_and(|spans| {
            spans.iter().any(|span| {
                span["name"] == "reconcile"
                    && span["canary"] == "podinfo"
                    && span["namespace"] == "test"
            })
        })
    };
    assert!(
        lines
            .iter()
            .any(|l| l["message"] == "Initialization done! podinfo.test"
                && l["span"]["canary"] == "podinfo"
                && l["span"]["namespace"] == "test"
                && l["reason"] == "Initialized"
                && of_podinfo(l)),
        "{log}"
    );
    let kube_lines_of_a_tick = lines
        .iter()
        .filter(|l| l["target"].as_str().is_some_and(|t| t.starts_with("kube")) && of_podinfo(l))
        .count();
    assert!(
        kube_lines_of_a_tick > 0,
        "kube's debug lines inside a reconcile carry the Canary: {log}"
    );
}
