//! Flagger's load tester image in the sandbox: its published Deployment starts and becomes Ready,
//! and the `bash` webhooks of Flagger's docs run through the sandbox's command interpreter in the
//! pod's context (short Service names searched in the pod's namespace, HTTP through the mesh),
//! while Serin's own image keeps refusing shell tasks.

use crate::common;

use serin_sandbox::mesh_proxy::{MeshClient, MeshResponse};
use std::time::Duration;

const PODINFO: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: test}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: podinfo, namespace: test}
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
apiVersion: v1
kind: Service
metadata: {name: podinfo-canary, namespace: test}
spec:
  selector: {app: podinfo}
  ports: [{name: http, port: 9898, targetPort: http}]
"#;

/// Flagger's `kustomize/tester/deployment.yaml` and `service.yaml`, verbatim.
const FLAGGER_LOADTESTER: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: flagger-loadtester
  labels:
    app: flagger-loadtester
spec:
  selector:
    matchLabels:
      app: flagger-loadtester
  template:
    metadata:
      labels:
        app: flagger-loadtester
      annotations:
        prometheus.io/scrape: "true"
        prometheus.io/port: "8080"
        openservicemesh.io/inbound-port-exclusion-list: "80, 8080"
    spec:
      containers:
        - name: loadtester
          image: ghcr.io/fluxcd/flagger-loadtester:0.29.0
          imagePullPolicy: IfNotPresent
          ports:
            - name: http
              containerPort: 8080
          command:
            - ./loadtester
            - -port=8080
            - -log-level=info
            - -timeout=1h
          livenessProbe:
            exec:
              command:
                - wget
                - --quiet
                - --tries=1
                - --timeout=4
                - --spider
                - http://localhost:8080/healthz
            timeoutSeconds: 5
          readinessProbe:
            exec:
              command:
                - wget
                - --quiet
                - --tries=1
                - --timeout=4
                - --spider
                - http://localhost:8080/healthz
            timeoutSeconds: 5
          resources:
            limits:
              memory: "512Mi"
              cpu: "1000m"
            requests:
              memory: "32Mi"
              cpu: "10m"
          securityContext:
            readOnlyRootFilesystem: true
            runAsUser: 10001
---
apiVersion: v1
kind: Service
metadata:
  name: flagger-loadtester
  labels:
    app: flagger-loadtester
spec:
  type: ClusterIP
  selector:
    app: flagger-loadtester
  ports:
    - name: http
      port: 80
      protocol: TCP
      targetPort: http
"#;

/// Serin's load tester image, the same way.
const SERIN_LOADTESTER: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: serin-loadtester, namespace: test}
spec:
  selector: {matchLabels: {app: serin-loadtester}}
  template:
    metadata: {labels: {app: serin-loadtester}}
    spec:
      containers:
      - name: loadtester
        image: ghcr.io/serin-dev/serin-loadtester:0.1.0
        args: [--port=8080, --timeout=1h]
        ports: [{name: http, containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: serin-loadtester, namespace: test}
spec:
  selector: {app: serin-loadtester}
  ports: [{name: http, port: 80, targetPort: http}]
"#;

/// Flagger's webhook payload for a pre-rollout hook with this metadata.
fn payload(metadata: serde_json::Value) -> String {
    serde_json::json!({"name": "podinfo", "namespace": "test", "phase": "Progressing",
        "metadata": metadata})
    .to_string()
}

async fn post(proxy: std::net::SocketAddr, url: &str, body: String) -> MeshResponse {
    let mut client = MeshClient::connect(proxy).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(40),
        client.post(url, &[("content-type", "application/json")], body),
    )
    .await
    .expect("the load tester answers within 40 s")
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flaggers_load_tester_runs_bash_webhooks_in_the_pods_context() {
    let (sandbox, _dir, k) = common::mesh_sandbox().await;
    let proxy = sandbox.mesh.as_ref().expect("a mesh").address;
    k.apply(PODINFO, &[]);
    k.apply(FLAGGER_LOADTESTER, &["-n", "test"]);
    k.apply(SERIN_LOADTESTER, &[]);
    for deployment in ["podinfo", "flagger-loadtester", "serin-loadtester"] {
        k.ok(&[
            "rollout",
            "status",
            &format!("deployment/{deployment}"),
            "-n",
            "test",
            "--timeout=60s",
        ]);
    }
    k.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod",
        "-l",
        "app=flagger-loadtester",
        "-n",
        "test",
        "--timeout=60s",
    ]);

    // Flagger's acceptance test: a bash task whose short Service name resolves in `test`.
    let accepted = post(
        proxy,
        "http://flagger-loadtester.test/",
        payload(serde_json::json!({"type": "bash",
            "cmd": "curl -sd 'test' http://podinfo-canary:9898/token | grep token"})),
    )
    .await;
    assert_eq!(accepted.status, 200, "{}", accepted.body);
    let failed = post(
        proxy,
        "http://flagger-loadtester.test/",
        payload(serde_json::json!({"type": "bash",
            "cmd": "curl -sd 'test' http://podinfo-canary:9898/token | grep nosuchword"})),
    )
    .await;
    assert!(
        !(200..300).contains(&failed.status),
        "{} {}",
        failed.status,
        failed.body
    );
    assert!(
        failed.body.contains("failed") && failed.body.contains("exit status 1"),
        "{}",
        failed.body
    );
    // returnCmdOutput answers with what the command printed.
    let output = post(
        proxy,
        "http://flagger-loadtester.test/",
        payload(
            serde_json::json!({"type": "bash", "returnCmdOutput": "true",
            "cmd": "curl -s -o /dev/null -w '%{http_code}' http://podinfo-canary:9898/status/418"}),
        ),
    )
    .await;
    assert_eq!((output.status, output.body.trim()), (200, "418"));

    // A `cmd` task that is not plain hey starts in the background and is logged as it ends.
    let started = post(
        proxy,
        "http://flagger-loadtester.test/",
        payload(serde_json::json!({"cmd": "curl -s http://podinfo-canary:9898/version | grep -c 6.0.0"})),
    )
    .await;
    assert_eq!(started.status, 202, "{}", started.body);
    let logged = common::eventually(Duration::from_secs(20), || {
        let logs = k.ok(&["logs", "deploy/flagger-loadtester", "-n", "test"]);
        logs.contains("command finished") && logs.contains("grep -c 6.0.0")
    });
    assert!(logged, "the cmd task is logged as finished");

    // kubectl exec runs the same interpreter: the probe's wget reaches the pod's own port 8080.
    let exec = k.ok(&[
        "exec",
        "deploy/flagger-loadtester",
        "-n",
        "test",
        "--",
        "sh",
        "-c",
        "wget --quiet --tries=1 --timeout=4 --spider http://localhost:8080/healthz && curl -s podinfo-canary:9898/version | grep -c 6.0.0",
    ]);
    assert_eq!(exec, "1\n");

    // Serin's image has no shell: the same bash task is refused without --allow-shell.
    let refused = post(
        proxy,
        "http://serin-loadtester.test/",
        payload(serde_json::json!({"type": "bash",
            "cmd": "curl -sd 'test' http://podinfo-canary:9898/token | grep token"})),
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.body.contains("--allow-shell"), "{}", refused.body);

    sandbox.stop().await;
}
