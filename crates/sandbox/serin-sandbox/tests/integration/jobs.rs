//! Jobs with the real kubectl: `kubectl create job` runs the load tester's hey to completion,
//! `kubectl wait --for=condition=complete`, the Job's pods, logs and events; a command the image
//! does not have fails the Job at its backoff limit, and so does a script that exits non-zero.

use crate::common;

use crate::common::Kubectl;
use serin_sandbox::{Sandbox, SandboxOptions};

const FAILING: &str = r#"apiVersion: batch/v1
kind: Job
metadata: {name: jq}
spec:
  backoffLimit: 1
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: jq
        image: ghcr.io/fluxcd/flagger-loadtester:0.34.0
        command: [jq, .status]
"#;

const EXITING: &str = r#"apiVersion: batch/v1
kind: Job
metadata: {name: smoke}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: smoke
        image: ghcr.io/fluxcd/flagger-loadtester:0.34.0
        command: [sh, -c, "curl -sf TARGET/healthz && echo healthy && exit 3"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_to_completion_or_fail_at_their_backoff_limit() {
    let (sandbox, _dir, k) = common::serving_sandbox(SandboxOptions {
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
    k.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    let port = k.ok(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={.items[0].status.sandboxPorts[0].hostPort}",
    ]);

    let target = format!("http://127.0.0.1:{port}/");
    assert_eq!(
        k.ok(&[
            "create",
            "job",
            "load",
            "--image=ghcr.io/fluxcd/flagger-loadtester:0.34.0",
            "--",
            "hey",
            "-n",
            "5",
            "-c",
            "1",
            &target
        ]),
        "job.batch/load created\n"
    );
    k.ok(&[
        "wait",
        "--for=condition=complete",
        "job/load",
        "--timeout=60s",
    ]);
    let jobs = common::table_rows(&k.ok(&["get", "jobs"]))
        .into_iter()
        .map(|r| r.join(" "))
        .collect::<Vec<_>>();
    assert!(jobs[1].starts_with("load Complete 1/1"), "{jobs:?}");
    let pods = k.ok(&[
        "get",
        "pods",
        "-l",
        "job-name=load",
        "-o",
        "jsonpath={.items[*].status.phase}",
    ]);
    assert_eq!(pods, "Succeeded");
    let summary = k.ok(&["logs", "job/load"]);
    assert!(
        summary.contains("Summary:") && summary.contains("[200]\t5 responses"),
        "{summary}"
    );
    let events = k.ok(&["events", "--for", "job/load"]);
    assert!(
        events.contains("SuccessfulCreate") && events.contains("Job completed"),
        "{events}"
    );

    // The image has no jq: the pod cannot start, and after backoffLimit retries the Job fails.
    k.apply(FAILING, &[]);
    k.ok(&["wait", "--for=condition=failed", "job/jq", "--timeout=60s"]);
    let reason = k.ok(&[
        "get",
        "job",
        "jq",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Failed\")].reason}",
    ]);
    assert_eq!(reason, "BackoffLimitExceeded");
    assert_eq!(
        k.ok(&["get", "job", "jq", "-o", "jsonpath={.status.failed}"]),
        "2"
    );
    let failed = k.ok(&["get", "pods", "-l", "job-name=jq"]);
    assert!(failed.contains("StartError"), "{failed}");
    let log = k.ok(&["logs", "-l", "job-name=jq", "--tail=1"]);
    assert!(
        log.contains("exec: \"jq\": executable file not found in $PATH"),
        "{log}"
    );

    // The image's shell runs a script (curl included); its exit code ends the pod.
    k.apply(
        &EXITING.replace("TARGET", target.trim_end_matches('/')),
        &[],
    );
    k.ok(&[
        "wait",
        "--for=condition=failed",
        "job/smoke",
        "--timeout=60s",
    ]);
    let pod = k.ok(&[
        "get",
        "pods",
        "-l",
        "job-name=smoke",
        "-o",
        "jsonpath={.items[0].status.containerStatuses[0].state.terminated.exitCode}",
    ]);
    assert_eq!(pod, "3");
    let log = k.ok(&["logs", "-l", "job-name=smoke"]);
    assert!(log.contains("healthy"), "{log}");
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delay_runtime_completes_job_pods() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::start(dir.path()).await.unwrap();
    let k = Kubectl::new(&sandbox);
    k.ok(&[
        "create",
        "job",
        "echo",
        "--image=busybox",
        "--",
        "echo",
        "hi",
    ]);
    k.ok(&[
        "wait",
        "--for=condition=complete",
        "job/echo",
        "--timeout=30s",
    ]);
    assert_eq!(
        k.ok(&["get", "job", "echo", "-o", "jsonpath={.status.succeeded}"]),
        "1"
    );
    // Deleting the Job takes its pods with it (background propagation by default).
    k.ok(&["delete", "job", "echo", "--cascade=foreground"]);
    assert_eq!(k.ok(&["get", "pods", "-o", "name"]), "");
    sandbox.stop().await;
}
