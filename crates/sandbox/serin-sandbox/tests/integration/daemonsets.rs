//! DaemonSets with the real kubectl: one pod per node, `rollout status`, a template change
//! replacing the pods, and pods that run on a cordoned node as daemon pods do.

use crate::common;

use crate::common::Kubectl;
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
    let nodes = k.ok(&["get", "nodes", "-o", "name"]).lines().count();
    assert_eq!(nodes, 3, "the sandbox's default");
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
    assert!(rows[1].starts_with("agent 3 3 3 3 3 <none>"), "{rows:?}");
    let placed = k.ok(&[
        "get",
        "pods",
        "-l",
        "app=agent",
        "-o",
        "jsonpath={range .items[*]}{.spec.nodeName}{\"\\n\"}{end}",
    ]);
    let mut placed: Vec<&str> = placed.lines().collect();
    placed.sort();
    assert_eq!(
        placed,
        ["sandbox-node", "sandbox-node-2", "sandbox-node-3"],
        "one pod per node, the cordoned one included"
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
    assert_eq!(after, ["ghcr.io/stefanprodan/podinfo:6.0.1"; 3].join(" "));
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
        events.matches("SuccessfulDelete").count() == nodes
            && events.matches("SuccessfulCreate").count() == 2 * nodes,
        "{events}"
    );
    sandbox.stop().await;
}

/// Flagger scales a DaemonSet to zero with a nodeSelector no node has: its pod goes, the desired
/// count is 0, and removing the selector brings the pod back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_selector_no_node_matches_leaves_the_daemonset_without_pods() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::start(dir.path()).await.unwrap();
    let k = Kubectl::new(&sandbox);
    k.apply(AGENT, &[]);
    k.ok(&["rollout", "status", "ds/agent", "--timeout=30s"]);
    let pods = || {
        k.ok(&[
            "get",
            "pods",
            "-l",
            "app=agent",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ])
    };
    assert!(!pods().is_empty());
    k.ok(&[
        "patch",
        "ds",
        "agent",
        "--type=merge",
        "-p",
        r#"{"spec":{"template":{"spec":{"nodeSelector":{"flagger.app/scale-to-zero":"true"}}}}}"#,
    ]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !pods().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(pods(), "", "no node has the label, so no pod runs");
    assert_eq!(
        k.ok(&[
            "get",
            "ds",
            "agent",
            "-o",
            "jsonpath={.status.desiredNumberScheduled}"
        ]),
        "0"
    );
    k.ok(&[
        "patch",
        "ds",
        "agent",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/template/spec/nodeSelector"}]"#,
    ]);
    k.ok(&["rollout", "status", "ds/agent", "--timeout=30s"]);
    assert!(!pods().is_empty());
    sandbox.stop().await;
}
