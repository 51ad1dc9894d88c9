//! `kubectl logs` with the real kubectl: podinfo's startup and request lines, the load tester's
//! task output, `--tail`, `--timestamps`, `-f`, and the kubelet's errors.

use crate::common;

use serin_sandbox::SandboxOptions;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_shows_what_the_pods_wrote() {
    let (sandbox, dir, k) = common::serving_sandbox(SandboxOptions {
        ..SandboxOptions::default()
    })
    .await;
    k.ok(&[
        "create",
        "deployment",
        "web",
        "--image=ghcr.io/stefanprodan/podinfo:6.0.0",
        "--port=9898",
    ]);
    k.ok(&[
        "run",
        "lt",
        "--image=ghcr.io/fluxcd/flagger-loadtester:0.34.0",
        "--labels=app=lt",
        "--port=8080",
    ]);
    k.ok(&["expose", "pod", "lt", "--port=8080"]);
    k.ok(&["expose", "deployment", "web", "--port=9898"]);
    k.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    k.ok(&["wait", "--for=condition=Ready", "pod/lt", "--timeout=60s"]);

    let started = k.ok(&["logs", "deploy/web"]);
    assert!(
        started.contains("\"msg\":\"Starting podinfo\""),
        "{started}"
    );

    // The load tester runs hey against the podinfo pod; both pods log it.
    let port = k.ok(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={.items[0].status.sandboxPorts[0].hostPort}",
    ]);
    let task = dir.path().join("task.json");
    std::fs::write(
        &task,
        format!(r#"{{"name": "web", "namespace": "default", "metadata": {{"cmd": "hey -n 3 -c 1 http://127.0.0.1:{port}/"}}}}"#),
    )
    .unwrap();
    k.ok(&[
        "create",
        "--raw",
        "/api/v1/namespaces/default/services/lt:8080/proxy/",
        "-f",
        task.to_str().unwrap(),
    ]);
    assert!(
        common::eventually(Duration::from_secs(20), || k
            .ok(&["logs", "lt"])
            .contains("\"msg\":\"command finished\"")),
        "the load tester logged its task: {}",
        k.ok(&["logs", "lt"])
    );
    let tester = k.ok(&["logs", "lt"]);
    assert!(
        tester.contains("\"msg\":\"command starting\"") && tester.contains("hey -n 3 -c 1"),
        "{tester}"
    );
    let served = k.ok(&["logs", "deploy/web"]);
    assert!(served.matches("\"uri\":\"/\"").count() >= 3, "{served}");

    let last = k.ok(&["logs", "deploy/web", "--tail=1", "--timestamps"]);
    assert_eq!(last.lines().count(), 1, "{last}");
    assert!(
        last.starts_with("20") && last.contains("Z {\"level\""),
        "an RFC 3339 prefix: {last}"
    );

    // -f streams new lines as the pod writes them.
    let mut follow = k
        .command(&["logs", "-f", "deploy/web", "--tail=0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = follow.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        lines.next().and_then(Result::ok)
    });
    std::thread::sleep(Duration::from_millis(500));
    k.ok(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/pods/lt/proxy/healthz",
    ]);
    k.ok(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/services/web:9898/proxy/version",
    ]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !reader.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = follow.kill();
    let _ = follow.wait();
    let followed = reader.join().unwrap().unwrap_or_default();
    assert!(
        followed.contains("\"uri\":\"/version\""),
        "followed: {followed}"
    );

    let previous = k.fails(&["logs", "deploy/web", "--previous"], None);
    assert!(
        previous.contains(
            "Error from server (BadRequest): previous terminated container \"podinfo\" in pod"
        ),
        "{previous}"
    );
    k.ok(&["run", "unpullable", "--image=registry.example/unknown:1"]);
    assert!(common::eventually(Duration::from_secs(10), || {
        k.output(&["logs", "unpullable"])
            .1
            .contains("is waiting to start: trying and failing to pull image")
    }));
    sandbox.stop().await;
}
