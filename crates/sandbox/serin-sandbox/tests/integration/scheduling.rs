//! Scheduling over the sandbox's three nodes with the real kubectl: `kubectl taint`, `kubectl
//! label node` and required pod anti-affinity decide where pods run (`kubectl get pods -o wide`),
//! a pod no node takes waits with kube-scheduler's FailedScheduling message, and removing the
//! taint lets it run.

use crate::common;

use crate::common::{Kubectl, eventually};
use serin_sandbox::Sandbox;
use std::time::Duration;

const SPREAD: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchLabels: {app: web}}
            topologyKey: kubernetes.io/hostname
      containers: [{name: web, image: ghcr.io/stefanprodan/podinfo:6.0.0}]
"#;

const ON_SSD: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: fast}
spec:
  nodeSelector: {disk: ssd}
  containers: [{name: fast, image: ghcr.io/stefanprodan/podinfo:6.0.0}]
"#;

/// (pod name, status, node) of the `app=web` pods, from `kubectl get pods -o wide`.
fn web_pods(k: &Kubectl) -> Vec<(String, String, String)> {
    let table = k.ok(&["get", "pods", "-l", "app=web", "-o", "wide"]);
    let mut rows = common::table_rows(&table).into_iter();
    let header = rows.next().unwrap_or_default();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (status, node) = (column("STATUS"), column("NODE"));
    rows.map(|r| (r[0].to_string(), r[status].to_string(), r[node].to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taints_labels_and_anti_affinity_decide_where_pods_run() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::start(dir.path()).await.unwrap();
    let k = Kubectl::new(&sandbox);
    let nodes = k.ok(&["get", "nodes", "-L", "topology.kubernetes.io/zone"]);
    for (node, zone) in [
        ("sandbox-node ", "zone-1"),
        ("sandbox-node-2", "zone-2"),
        ("sandbox-node-3", "zone-3"),
    ] {
        assert!(
            nodes
                .lines()
                .any(|l| l.starts_with(node) && l.contains("Ready") && l.ends_with(zone)),
            "{nodes}"
        );
    }

    // A taint on one node and anti-affinity between the replicas: two run, one waits.
    assert_eq!(
        k.ok(&[
            "taint",
            "node",
            "sandbox-node-3",
            "dedicated=infra:NoSchedule"
        ]),
        "node/sandbox-node-3 tainted\n"
    );
    k.apply(SPREAD, &[]);
    let two_running = || {
        let pods = web_pods(&k);
        pods.len() == 3 && pods.iter().filter(|p| p.1 == "Running").count() == 2
    };
    assert!(
        eventually(Duration::from_secs(30), two_running),
        "{:?}",
        web_pods(&k)
    );
    let pods = web_pods(&k);
    let mut nodes: Vec<&str> = pods.iter().map(|p| p.2.as_str()).collect();
    nodes.sort();
    assert_eq!(
        nodes,
        ["<none>", "sandbox-node", "sandbox-node-2"],
        "{pods:?}"
    );
    let pending = &pods.iter().find(|p| p.1 == "Pending").unwrap().0;
    let message = "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: infra}, \
        2 node(s) didn't match pod anti-affinity rules. preemption: 0/3 nodes are available: \
        1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod..";
    let described = k.ok(&["describe", "pod", pending]);
    assert!(
        described.contains("FailedScheduling") && described.contains(message),
        "{described}"
    );
    assert_eq!(
        k.ok(&[
            "get",
            "pod",
            pending,
            "-o",
            "jsonpath={.status.conditions[0].reason}"
        ]),
        "Unschedulable"
    );

    // Removing the taint lets the waiting replica run on the third node.
    assert_eq!(
        k.ok(&["taint", "node", "sandbox-node-3", "dedicated-"]),
        "node/sandbox-node-3 untainted\n"
    );
    k.ok(&["rollout", "status", "deployment/web", "--timeout=30s"]);
    let mut nodes: Vec<String> = web_pods(&k).into_iter().map(|p| p.2).collect();
    nodes.sort();
    assert_eq!(nodes, ["sandbox-node", "sandbox-node-2", "sandbox-node-3"]);
    let events = k.ok(&["events", "--for", &format!("pod/{pending}")]);
    assert!(
        events.contains(&format!(
            "Successfully assigned default/{pending} to sandbox-node-3"
        )),
        "{events}"
    );

    // A label added with kubectl steers a pod's nodeSelector.
    k.ok(&["label", "node", "sandbox-node-2", "disk=ssd"]);
    k.apply(ON_SSD, &[]);
    k.ok(&["wait", "--for=condition=Ready", "pod/fast", "--timeout=30s"]);
    assert_eq!(
        k.ok(&["get", "pod", "fast", "-o", "jsonpath={.spec.nodeName}"]),
        "sandbox-node-2"
    );
    sandbox.stop().await;
}
