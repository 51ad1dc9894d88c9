//! Flagger's `kubernetes`-provider style queries work in the sandbox: podinfo, deployed with its
//! published manifest, serves its request metrics, and the sandbox's Prometheus scrapes it through
//! its `prometheus.io/*` annotations with the `kubernetes_namespace` and `kubernetes_pod_name`
//! labels those queries select on.

use crate::common::Kubectl;
use serin_metrics::{PrometheusClient, QueryError};
use serin_sandbox::runtime::{PORTS_FIELD, http_get};
use serin_sandbox::{Sandbox, SandboxOptions};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// podinfo's `kustomize/deployment.yaml` (image 6.0.1), in namespace `test`.
const PODINFO: &str = r##"
apiVersion: v1
kind: Namespace
metadata: {name: test}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
  namespace: test
spec:
  minReadySeconds: 3
  revisionHistoryLimit: 5
  progressDeadlineSeconds: 60
  strategy:
    rollingUpdate:
      maxUnavailable: 0
    type: RollingUpdate
  selector:
    matchLabels:
      app: podinfo
  template:
    metadata:
      annotations:
        prometheus.io/scrape: "true"
        prometheus.io/port: "9797"
      labels:
        app: podinfo
    spec:
      containers:
      - name: podinfod
        image: ghcr.io/stefanprodan/podinfo:6.0.1
        imagePullPolicy: IfNotPresent
        ports:
        - name: http
          containerPort: 9898
          protocol: TCP
        - name: http-metrics
          containerPort: 9797
          protocol: TCP
        - name: grpc
          containerPort: 9999
          protocol: TCP
        command:
        - ./podinfo
        - --port=9898
        - --port-metrics=9797
        - --grpc-port=9999
        - --grpc-service-name=podinfo
        - --level=info
        - --random-delay=false
        - --random-error=false
        env:
        - name: PODINFO_UI_COLOR
          value: "#34577c"
        livenessProbe:
          exec:
            command:
            - podcli
            - check
            - http
            - localhost:9898/healthz
          initialDelaySeconds: 5
          timeoutSeconds: 5
        readinessProbe:
          exec:
            command:
            - podcli
            - check
            - http
            - localhost:9898/readyz
          initialDelaySeconds: 5
          timeoutSeconds: 5
        resources:
          limits:
            cpu: 2000m
            memory: 512Mi
          requests:
            cpu: 100m
            memory: 64Mi
"##;

/// Flagger's query shape for the kubernetes provider's request rate of `podinfo` in `test`.
const FLAGGER_QUERY: &str = r#"sum(rate(http_request_duration_seconds_count{kubernetes_namespace="test",kubernetes_pod_name=~"podinfo-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)"}[30s]))"#;

/// The podinfo pod's name and the loopback address of its container port `port`.
fn podinfo_pod(sandbox: &Sandbox, port: u64) -> (String, SocketAddr) {
    let pods = sandbox.store.resource("", "v1", "pods").unwrap();
    let (items, _) = sandbox.store.list(
        &pods,
        Some("test"),
        &Default::default(),
        &Default::default(),
    );
    assert_eq!(items.len(), 1, "one podinfo pod: {items:?}");
    let pod = &items[0];
    let entry = pod["status"][PORTS_FIELD]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["containerPort"] == port)
        .unwrap_or_else(|| panic!("port {port} in {}", pod["status"]));
    let address = SocketAddr::from(([127, 0, 0, 1], entry["hostPort"].as_u64().unwrap() as u16));
    (
        pod["metadata"]["name"].as_str().unwrap().to_string(),
        address,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flaggers_kubernetes_queries_read_podinfos_own_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::start_with(dir.path(), SandboxOptions::with_data_plane())
        .await
        .expect("the sandbox with its mesh and Debian's prometheus (apt-get install prometheus)");
    let kubectl = Kubectl::new(&sandbox);
    tokio::task::spawn_blocking(move || {
        kubectl.apply(PODINFO, &[]);
        kubectl.ok(&[
            "-n",
            "test",
            "rollout",
            "status",
            "deploy/podinfo",
            "--timeout=60s",
        ]);
    })
    .await
    .unwrap();

    let (pod, app) = podinfo_pod(&sandbox, 9898);
    let (_, metrics_port) = podinfo_pod(&sandbox, 9797);
    assert_eq!(app, metrics_port, "one server behind every port");
    let targets = sandbox.prometheus_targets.clone().unwrap();
    let file = targets.join(format!("kubernetes-pods_test_{pod}.json"));
    assert!(file.exists(), "{} is written", file.display());

    // Users' requests, straight to the pod's port, for as long as the test needs them.
    let stop = Instant::now() + Duration::from_secs(70);
    let load = tokio::spawn(async move {
        let mut served = 0;
        while Instant::now() < stop {
            if let Ok((200, _)) = http_get(app, "/", Duration::from_secs(2)).await {
                served += 1;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        served
    });

    let prometheus = PrometheusClient::new(&sandbox.prometheus.as_ref().unwrap().url).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let rate = loop {
        let got = prometheus.query(FLAGGER_QUERY).await;
        match got {
            Ok(rate) if rate > 0.0 => break rate,
            _ => {
                assert!(
                    Instant::now() < deadline,
                    "{FLAGGER_QUERY}: still {got:?} after 60 s"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    assert!(rate > 0.0, "{rate} requests/s");
    // The pod's labels come along, and the target is up under the job's name.
    let up = prometheus
        .query(&format!(
            r#"up{{job="kubernetes-pods",namespace="test",pod="{pod}",app="podinfo"}}"#
        ))
        .await;
    assert_eq!(up, Ok(1.0));
    let served = prometheus
        .query(&format!(
            r#"sum(http_requests_total{{kubernetes_pod_name="{pod}",status="200"}})"#
        ))
        .await
        .expect("podinfo's request counter");
    assert!(served >= 1.0, "{served}");
    load.abort();

    // Once the pod is gone, so is its target file, and Prometheus stops scraping it.
    let kubectl = Kubectl::new(&sandbox);
    tokio::task::spawn_blocking(move || {
        kubectl.ok(&["-n", "test", "delete", "deployment", "podinfo", "--wait"]);
    })
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while file.exists() {
        assert!(Instant::now() < deadline, "{} remains", file.display());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let up = prometheus.query(r#"up{job="kubernetes-pods"}"#).await;
        if up == Err(QueryError::NoValues) {
            break;
        }
        assert!(Instant::now() < deadline, "still scraped: {up:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    sandbox.stop().await;
}
