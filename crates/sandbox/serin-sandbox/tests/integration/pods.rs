//! The data plane as a user sees it: `kubectl apply` a podinfo Deployment and a Service, then reach
//! the pods over HTTP through the Service's cluster host names.

use crate::common::Kubectl;
use serde_json::Value;
use serin_sandbox::runtime::{ServingRuntime, http_get};
use serin_sandbox::services::resolve;
use serin_sandbox::{Sandbox, SandboxOptions};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TIMEOUT: Duration = Duration::from_secs(3);

async fn start() -> (Sandbox, tempfile::TempDir, Kubectl) {
    let dir = tempfile::tempdir().unwrap();
    let options = SandboxOptions {
        runtime: Some(Arc::new(ServingRuntime::default())),
        ..SandboxOptions::default()
    };
    let sandbox = Sandbox::start_with(dir.path(), options).await.unwrap();
    let kubectl = Kubectl::new(&sandbox);
    (sandbox, dir, kubectl)
}

/// A Deployment `name` (label `app: name`) of podinfo-like containers, with extra container YAML.
fn deployment(name: &str, replicas: u32, image: &str, container_extra: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app: {name}
  template:
    metadata:
      labels:
        app: {name}
    spec:
      containers:
      - name: podinfod
        image: {image}
        command: ["./podinfo", "--port=9898", "--random-delay=false", "--random-error=false"]
        ports:
        - name: http
          containerPort: 9898
{container_extra}"#
    )
}

fn service(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Service
metadata:
  name: {name}
spec:
  selector:
    app: {name}
  ports:
  - name: http
    port: 9898
    targetPort: http
"#
    )
}

/// Applies `yaml` and waits (at most 20 s) for the Deployment `name` to roll out.
fn apply_and_roll_out(kubectl: &Kubectl, yaml: &str, name: &str) {
    kubectl.apply(yaml, &[]);
    kubectl.ok(&[
        "rollout",
        "status",
        &format!("deployment/{name}"),
        "--timeout=20s",
    ]);
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The pods of Deployment `app` as kubectl shows them.
fn pods(kubectl: &Kubectl, app: &str) -> Vec<Value> {
    let list = json_of(&kubectl.ok(&["get", "pods", "-l", &format!("app={app}"), "-o", "json"]));
    list["items"].as_array().cloned().unwrap_or_default()
}

/// The loopback address a pod records for container port 9898.
fn pod_address(pod: &Value) -> SocketAddr {
    let port = pod["status"]["sandboxPorts"]
        .as_array()
        .and_then(|ports| ports.iter().find(|p| p["containerPort"] == 9898))
        .and_then(|p| p["hostPort"].as_u64())
        .unwrap_or_else(|| panic!("no sandboxPorts entry for 9898: {}", pod["status"]));
    assert_eq!(pod["status"]["podIP"], "127.0.0.1");
    SocketAddr::from(([127, 0, 0, 1], port as u16))
}

/// One HTTP/1.1 request with a body, returning the status and the body.
async fn post(address: SocketAddr, path: &str, body: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(TIMEOUT, stream.read_to_string(&mut response))
        .await
        .unwrap()
        .unwrap();
    let status = response.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = response.split_once("\r\n\r\n").unwrap().1.to_string();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podinfo_pods_answer_through_every_form_of_their_service_name() {
    let (sandbox, _dir, kubectl) = start().await;
    let probes = "        readinessProbe:\n          httpGet: {path: /readyz, port: http}\n        livenessProbe:\n          httpGet: {path: /healthz, port: 9898}\n";
    let yaml = deployment("podinfo", 2, "ghcr.io/stefanprodan/podinfo:6.0.1", probes)
        + "---\n"
        + &service("podinfo");
    apply_and_roll_out(&kubectl, &yaml, "podinfo");

    let pod_names: Vec<String> = pods(&kubectl, "podinfo")
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(pod_names.len(), 2);
    let full = resolve(
        &sandbox.store,
        "podinfo.default.svc.cluster.local:9898",
        "x",
    )
    .unwrap();
    assert_eq!(full.len(), 2, "{full:?}");
    assert_ne!(full[0], full[1]);
    for host in [
        "podinfo.default.svc.cluster.local",
        "podinfo.default.svc:9898",
        "podinfo.default.svc",
        "podinfo.default:9898",
        "podinfo.default",
    ] {
        assert_eq!(resolve(&sandbox.store, host, "x").unwrap(), full, "{host}");
    }
    assert_eq!(resolve(&sandbox.store, "podinfo", "default").unwrap(), full);
    assert!(resolve(&sandbox.store, "podinfo.default:80", "x").is_err());
    assert!(resolve(&sandbox.store, "nothing.default", "x").is_err());

    let mut hostnames = Vec::new();
    for address in &full {
        assert!(address.ip().is_loopback());
        let (status, body) = http_get(*address, "/", TIMEOUT).await.unwrap();
        assert_eq!(status, 200, "{body}");
        let info = json_of(&body);
        assert_eq!(info["version"], "6.0.1");
        assert_eq!(info["message"], "greetings from podinfo v6.0.1");
        hostnames.push(info["hostname"].as_str().unwrap().to_string());
        let (status, body) = http_get(*address, "/version", TIMEOUT).await.unwrap();
        assert_eq!(
            (status, json_of(&body)["version"].clone()),
            (200, "6.0.1".into())
        );
        assert_eq!(
            http_get(*address, "/healthz", TIMEOUT).await.unwrap().0,
            200
        );
        assert_eq!(
            http_get(*address, "/status/418", TIMEOUT).await.unwrap().0,
            418
        );
        let started = Instant::now();
        assert_eq!(
            http_get(*address, "/delay/1", TIMEOUT).await.unwrap().0,
            200
        );
        assert!(started.elapsed() >= Duration::from_secs(1));
    }
    hostnames.sort();
    let mut expected = pod_names.clone();
    expected.sort();
    assert_eq!(hostnames, expected, "each endpoint is a different pod");

    let (status, body) = post(full[0], "/token", "test").await;
    assert_eq!(status, 200);
    assert!(json_of(&body)["token"].is_string(), "{body}");
    assert_eq!(
        post(full[0], "/echo", "hello").await,
        (202, "hello".to_string())
    );

    // kubectl users see the same endpoints.
    let endpoints = json_of(&kubectl.ok(&["get", "endpoints", "podinfo", "-o", "json"]));
    let mut listed: Vec<SocketAddr> = endpoints["subsets"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| {
            let port = s["ports"][0]["port"].as_u64().unwrap() as u16;
            s["addresses"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |a| SocketAddr::new(a["ip"].as_str().unwrap().parse().unwrap(), port))
        })
        .collect();
    listed.sort();
    let mut resolved = full.clone();
    resolved.sort();
    assert_eq!(listed, resolved);
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_rate_and_latency_come_from_the_container_env() {
    let (sandbox, _dir, kubectl) = start().await;
    let faulty = "        env:\n        - {name: ERROR_RATE, value: \"0.5\"}\n";
    let slow = "        env:\n        - {name: LATENCY, value: 200ms}\n";
    let yaml = deployment("faulty", 1, "ghcr.io/stefanprodan/podinfo:6.0.2", faulty)
        + "---\n"
        + &service("faulty")
        + "---\n"
        + &deployment("slow", 1, "ghcr.io/stefanprodan/podinfo:6.0.2", slow)
        + "---\n"
        + &service("slow");
    apply_and_roll_out(&kubectl, &yaml, "faulty");
    kubectl.ok(&["rollout", "status", "deployment/slow", "--timeout=20s"]);

    let faulty = resolve(&sandbox.store, "faulty.default.svc.cluster.local:9898", "x").unwrap();
    assert_eq!(faulty.len(), 1);
    let mut errors = 0;
    for _ in 0..200 {
        let (status, _) = http_get(faulty[0], "/", TIMEOUT).await.unwrap();
        assert!(status == 200 || status == 500, "{status}");
        errors += usize::from(status == 500);
    }
    let share = errors as f64 / 200.0;
    assert!((0.4..=0.6).contains(&share), "500 share {share}");
    // Probes are not faulted, so the pod stays Ready.
    assert_eq!(
        http_get(faulty[0], "/healthz", TIMEOUT).await.unwrap().0,
        200
    );

    let slow = resolve(&sandbox.store, "slow.default:9898", "x").unwrap();
    for _ in 0..3 {
        let started = Instant::now();
        let (status, _) = http_get(slow[0], "/", TIMEOUT).await.unwrap();
        assert_eq!(status, 200);
        assert!(
            started.elapsed() >= Duration::from_millis(200),
            "{:?}",
            started.elapsed()
        );
    }
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_the_sandbox_cannot_run_is_err_image_pull() {
    let (sandbox, _dir, kubectl) = start().await;
    kubectl.apply(&deployment("web", 1, "nginx:1.25", ""), &[]);
    let mut reason = String::new();
    for _ in 0..50 {
        reason = kubectl
            .ok(&[
                "get",
                "pods",
                "-l",
                "app=web",
                "-o",
                "jsonpath={.items[0].status.containerStatuses[0].state.waiting.reason}",
            ])
            .trim()
            .to_string();
        if !reason.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(reason, "ErrImagePull");
    let table = kubectl.ok(&["get", "pods", "-l", "app=web"]);
    assert!(
        table.contains("0/1") && table.contains("ErrImagePull"),
        "{table}"
    );
    let (ok, out) = kubectl.output(&["rollout", "status", "deployment/web", "--timeout=2s"]);
    assert!(!ok, "{out}");
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_probes_keep_a_pod_unready_or_restart_it() {
    let (sandbox, _dir, kubectl) = start().await;
    let unready = "        readinessProbe:\n          httpGet: {path: /status/500, port: http}\n          periodSeconds: 1\n";
    let dying = "        livenessProbe:\n          httpGet: {path: /status/500, port: http}\n          periodSeconds: 1\n          failureThreshold: 1\n";
    let yaml = deployment("unready", 1, "podinfo:6.0.1", unready)
        + "---\n"
        + &service("unready")
        + "---\n"
        + &deployment("dying", 1, "podinfo:6.0.1", dying);
    kubectl.apply(&yaml, &[]);

    let mut restarts = 0;
    for _ in 0..60 {
        let pods = pods(&kubectl, "dying");
        restarts = pods
            .first()
            .and_then(|p| p["status"]["containerStatuses"][0]["restartCount"].as_u64())
            .unwrap_or(0);
        if restarts >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        restarts >= 1,
        "the liveness failure restarted the container"
    );
    // The restarted server serves on the same recorded port again.
    let dying = pod_address(&pods(&kubectl, "dying")[0]);
    let mut served = false;
    for _ in 0..30 {
        if http_get(dying, "/version", TIMEOUT).await.is_ok() {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served);

    // By now the readiness probe has failed more than once.
    let pod = &pods(&kubectl, "unready")[0];
    assert_eq!(pod["status"]["phase"], "Running");
    assert_eq!(pod["status"]["containerStatuses"][0]["ready"], false);
    let address = pod_address(pod);
    assert_eq!(
        http_get(address, "/readyz", TIMEOUT).await.unwrap().0,
        200,
        "it serves"
    );
    assert_eq!(
        resolve(&sandbox.store, "unready.default", "x").unwrap(),
        vec![]
    );
    let endpoints = json_of(&kubectl.ok(&["get", "endpoints", "unready", "-o", "json"]));
    assert!(
        endpoints["subsets"][0]["addresses"].is_null(),
        "{endpoints}"
    );
    assert_eq!(
        endpoints["subsets"][0]["notReadyAddresses"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    let (ok, out) = kubectl.output(&["rollout", "status", "deployment/unready", "--timeout=1s"]);
    assert!(!ok, "{out}");
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_pod_stops_its_server() {
    let (sandbox, _dir, kubectl) = start().await;
    apply_and_roll_out(
        &kubectl,
        &deployment("podinfo", 1, "podinfo:6.0.1", ""),
        "podinfo",
    );
    let pod = &pods(&kubectl, "podinfo")[0];
    let address = pod_address(pod);
    assert_eq!(http_get(address, "/", TIMEOUT).await.unwrap().0, 200);
    kubectl.ok(&["delete", "pod", pod["metadata"]["name"].as_str().unwrap()]);
    let mut refused = false;
    for _ in 0..40 {
        match http_get(address, "/", TIMEOUT).await {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                refused = true;
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    assert!(refused, "the deleted pod's port still answers");
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_tester_image_runs_the_load_tester() {
    let (sandbox, _dir, kubectl) = start().await;
    let yaml = deployment("tester", 1, "ghcr.io/fluxcd/flagger-loadtester:0.34.0", "");
    apply_and_roll_out(&kubectl, &yaml, "tester");
    let pod = &pods(&kubectl, "tester")[0];
    let (status, body) = http_get(pod_address(pod), "/gate/approve", TIMEOUT)
        .await
        .unwrap();
    assert_eq!((status, body.trim()), (200, "OK"));
    sandbox.stop().await;
}
