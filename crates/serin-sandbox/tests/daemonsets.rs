//! DaemonSets with the real kubectl: one pod per node, `rollout status`, a template change
//! replacing the pod, and pods that run on a cordoned node as daemon pods do.

mod common;

use common::Kubectl;
use serin_sandbox::Sandbox;

const AGENT: &str = r#"apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, image: ghcr.io/stefanprodan/podinfo:6.0.0}]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemonset_runs_one_pod_per_node_and_rolls_it() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::start(dir.path()).await.unwrap();
    let k = Kubectl::new(&sandbox);
    k.ok(&["cordon", "sandbox-node"]);
    k.apply(AGENT, &[]);
    let rolled = k.ok(&["rollout", "status", "ds/agent", "--timeout=30s"]);
    assert!(
        rolled.contains("daemon set \"agent\" successfully rolled out"),
        "{rolled}"
    );
    let rows = common::table_rows(&k.ok(&["get", "ds", "agent"]))
        .into_iter()
        .map(|r| r.join(" "))
        .collect::<Vec<_>>();
    assert!(rows[1].starts_with("agent 1 1 1 1 1 <none>"), "{rows:?}");
    let first = k.ok(&[
        "get",
        "pods",
        "-l",
        "app=agent",
        "-o",
        "jsonpath={.items[*].metadata.name} {.items[*].spec.nodeName}",
    ]);
    assert!(
        first.ends_with(" sandbox-node"),
        "daemon pods run on the cordoned node: {first}"
    );

    k.ok(&[
        "set",
        "image",
        "ds/agent",
        "agent=ghcr.io/stefanprodan/podinfo:6.0.1",
    ]);
    k.ok(&["rollout", "status", "ds/agent", "--timeout=30s"]);
    let after = k.ok(&[
        "get",
        "pods",
        "-l",
        "app=agent",
        "-o",
        "jsonpath={.items[*].spec.containers[0].image}",
    ]);
    assert_eq!(after, "ghcr.io/stefanprodan/podinfo:6.0.1");
    assert_eq!(
        k.ok(&[
            "get",
            "ds",
            "agent",
            "-o",
            "jsonpath={.status.observedGeneration}"
        ]),
        "2"
    );
    let events = k.ok(&["events", "--for", "daemonset/agent"]);
    assert!(
        events.contains("SuccessfulDelete") && events.matches("SuccessfulCreate").count() == 2,
        "{events}"
    );
    sandbox.stop().await;
}
