//! Running the controllers: a pass when a change can give them work, and on a timer.

use super::state::*;
use crate::pod_runtime::PodRuntime;
use serin_sandbox_apiserver::selectors::{FieldSelector, LabelSelector};
use serin_sandbox_apiserver::store::Store;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Whether a change to objects stored under `resource` (a storage key) can give the built-in
/// controllers work.
pub(crate) fn feeds_controllers(resource: &str) -> bool {
    matches!(
        resource,
        "pods"
            | "replicasets.apps"
            | "deployments.apps"
            | "jobs.batch"
            | "daemonsets.apps"
            | "services"
            | "endpoints"
            | "nodes"
    )
}

/// Runs the controllers over `nodes` nodes in the background until the returned handle is
/// aborted: a pass after every relevant change, and every `period` for time-based progress
/// (readiness delays, deadlines, Pending pods).
pub fn spawn(
    store: Arc<Store>,
    runtime: Arc<dyn PodRuntime>,
    period: Duration,
    nodes: usize,
    metrics: Arc<serin_sandbox_apiserver::instrument::Metrics>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut controllers = Controllers::new(store.clone(), runtime, nodes);
        let mut changes = store.subscribe();
        loop {
            // Settle: run passes until nothing changes (bounded, so a flapping object cannot spin),
            // on a blocking thread, so the API server's requests and watches keep the runtime's.
            let pass_metrics = metrics.clone();
            let settled = tokio::task::spawn_blocking(move || {
                for _ in 0..20 {
                    let started = Instant::now();
                    let changed = controllers.reconcile();
                    pass_metrics.controller_pass(started.elapsed());
                    if !changed {
                        break;
                    }
                }
                controllers
            });
            controllers = match settled.await {
                Ok(controllers) => controllers,
                Err(_) => return,
            };
            // A pass reads every workload object, so it runs once for all the changes that queued
            // meanwhile, and not at all for objects no controller reads (Canaries, Events, ...):
            // otherwise a busy client makes the passes O(changes × objects).
            let deadline = tokio::time::Instant::now() + period;
            loop {
                let received = tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => break,
                    received = changes.recv() => received,
                };
                let mut relevant = match received {
                    Ok(change) => feeds_controllers(&change.resource),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => true,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                loop {
                    match changes.try_recv() {
                        Ok(change) => relevant |= feeds_controllers(&change.resource),
                        Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => {
                            relevant = true
                        }
                        Err(tokio::sync::broadcast::error::TryRecvError::Closed) => return,
                        Err(tokio::sync::broadcast::error::TryRecvError::Empty) => break,
                    }
                }
                if relevant {
                    break;
                }
            }
        }
    })
}

/// Counts of pods by phase, for tests and the CLI.
pub fn pod_phases(store: &Store) -> BTreeMap<String, usize> {
    let pods = store.resource("", "v1", "pods").expect("built in");
    let mut counts = BTreeMap::new();
    for pod in store
        .list(
            &pods,
            None,
            &LabelSelector::default(),
            &FieldSelector::default(),
        )
        .0
    {
        *counts
            .entry(pod["status"]["phase"].as_str().unwrap_or("").to_string())
            .or_insert(0) += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::super::objects::*;
    use super::*;
    use crate::pod_runtime::DelayRuntime;
    use serde_json::{Value, json};
    use serin_sandbox_apiserver::store::{DeleteOptions, Part, PatchType};

    /// Controllers over a fresh store with three nodes, whose pods are Ready at once.
    fn three_node_cluster() -> (Arc<Store>, Controllers) {
        let store = Store::new();
        let runtime = Arc::new(DelayRuntime {
            delay: Duration::ZERO,
        });
        let controllers = Controllers::new(store.clone(), runtime, 3);
        (store, controllers)
    }

    fn settle(controllers: &mut Controllers) {
        for _ in 0..20 {
            if !controllers.reconcile() {
                return;
            }
        }
    }

    fn create(store: &Store, plural: &str, group: &str, object: Value) {
        let info = store.resource(group, "v1", plural).unwrap();
        store
            .create(&info, Some("default"), object, &controller_writes())
            .unwrap();
    }

    /// Every object of a core/v1 `plural`.
    fn list(store: &Store, plural: &str) -> Vec<Value> {
        let info = store.resource("", "v1", plural).unwrap();
        store
            .list(
                &info,
                None,
                &LabelSelector::default(),
                &FieldSelector::default(),
            )
            .0
    }

    fn pods(store: &Store) -> Vec<Value> {
        list(store, "pods")
    }

    fn set_taints(store: &Store, node: &str, taints: Value) {
        let nodes = store.resource("", "v1", "nodes").unwrap();
        store
            .patch(
                &nodes,
                "",
                node,
                PatchType::Merge,
                &json!({"spec": {"taints": taints}}),
                Part::Main,
                &controller_writes(),
            )
            .unwrap();
    }

    fn warnings(store: &Store) -> Vec<String> {
        list(store, "events")
            .iter()
            .filter(|e| e["reason"] == "FailedScheduling")
            .map(|e| e["message"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    fn web_pod(name: &str) -> Value {
        json!({"metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "podinfo"}],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}}})
    }

    /// The addresses (ready and not) of the Endpoints `name`, by pod name.
    fn endpoint_pods(store: &Store, name: &str) -> Vec<String> {
        let endpoints = list(store, "endpoints");
        let Some(endpoints) = endpoints.iter().find(|e| e["metadata"]["name"] == name) else {
            return Vec::new();
        };
        let mut pods: Vec<String> = endpoints["subsets"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| {
                s["addresses"]
                    .as_array()
                    .into_iter()
                    .chain(s["notReadyAddresses"].as_array())
                    .flatten()
            })
            .map(|a| {
                a["targetRef"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        pods.sort();
        pods
    }

    #[test]
    fn endpoints_follow_pods_that_come_are_relabelled_and_go() {
        let (store, mut controllers) = three_node_cluster();
        create(
            &store,
            "services",
            "",
            json!({"metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 9898}]}}),
        );
        let pod = |name: &str| {
            json!({"metadata": {"name": name, "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "podinfo",
                    "ports": [{"containerPort": 9898}]}]}})
        };
        for name in ["web-a", "web-b", "web-c"] {
            create(&store, "pods", "", pod(name));
        }
        settle(&mut controllers);
        assert_eq!(endpoint_pods(&store, "web"), ["web-a", "web-b", "web-c"]);

        let pods = store.resource("", "v1", "pods").unwrap();
        store
            .patch(
                &pods,
                "default",
                "web-b",
                PatchType::Merge,
                &json!({"metadata": {"labels": {"app": "other"}}}),
                Part::Main,
                &controller_writes(),
            )
            .unwrap();
        store
            .delete(&pods, "default", "web-c", &DeleteOptions::default(), false)
            .unwrap();
        create(&store, "pods", "", pod("web-d"));
        settle(&mut controllers);
        assert_eq!(endpoint_pods(&store, "web"), ["web-a", "web-d"]);
        // What the controller skipped as unchanged, a controller without memory agrees with.
        assert!(
            !crate::endpoints::EndpointsController::default().sync(&store, &controller_writes()),
            "a pass from scratch would change the Endpoints"
        );
    }

    #[test]
    fn the_sandbox_has_the_asked_number_of_labelled_nodes() {
        let (store, _controllers) = three_node_cluster();
        let info = store.resource("", "v1", "nodes").unwrap();
        let nodes = store
            .list(
                &info,
                None,
                &LabelSelector::default(),
                &FieldSelector::default(),
            )
            .0;
        let names: Vec<String> = nodes.iter().map(name).collect();
        assert_eq!(names, ["sandbox-node", "sandbox-node-2", "sandbox-node-3"]);
        assert_eq!(
            nodes[1]["metadata"]["labels"],
            json!({"kubernetes.io/hostname": "sandbox-node-2", "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": "zone-2"})
        );
        assert_eq!(nodes[2]["status"]["conditions"][0]["type"], "Ready");
    }

    #[test]
    fn pods_created_together_with_anti_affinity_land_on_different_nodes() {
        let (store, mut controllers) = three_node_cluster();
        for n in 1..=4 {
            create(&store, "pods", "", web_pod(&format!("web-{n}")));
        }
        // One pass binds the first three (each decision sees the ones bound before it).
        controllers.reconcile();
        let mut nodes: Vec<String> = pods(&store)
            .iter()
            .filter_map(|p| p["spec"]["nodeName"].as_str().map(String::from))
            .collect();
        nodes.sort();
        assert_eq!(nodes, ["sandbox-node", "sandbox-node-2", "sandbox-node-3"]);
        settle(&mut controllers);
        settle(&mut controllers);
        let pending: Vec<Value> = pods(&store)
            .into_iter()
            .filter(|p| p["spec"]["nodeName"].is_null())
            .collect();
        assert_eq!(pending.len(), 1);
        let message = "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. \
            preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod..";
        assert_eq!(pending[0]["status"]["phase"], "Pending");
        assert_eq!(
            pending[0]["status"]["conditions"][0],
            json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": message, "lastTransitionTime": pending[0]["status"]["conditions"][0]["lastTransitionTime"]})
        );
        assert_eq!(
            warnings(&store),
            [message],
            "one event, however many passes"
        );
        // Deleting a pod that blocks it lets it schedule.
        let info = store.resource("", "v1", "pods").unwrap();
        store
            .delete(&info, "default", "web-1", &DeleteOptions::default(), false)
            .unwrap();
        settle(&mut controllers);
        assert!(
            pods(&store)
                .iter()
                .all(|p| p["status"]["phase"] == "Running")
        );
    }

    #[test]
    fn a_pending_pod_runs_once_the_taint_keeping_it_out_is_removed() {
        let (store, mut controllers) = three_node_cluster();
        for node in ["sandbox-node", "sandbox-node-2", "sandbox-node-3"] {
            set_taints(
                &store,
                node,
                json!([{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]),
            );
        }
        create(&store, "pods", "", web_pod("web"));
        settle(&mut controllers);
        assert_eq!(
            warnings(&store),
            [
                "0/3 nodes are available: 3 node(s) had untolerated taint {dedicated: infra}. \
              preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
            ]
        );
        set_taints(&store, "sandbox-node-2", json!(null));
        settle(&mut controllers);
        let pod = &pods(&store)[0];
        assert_eq!(pod["spec"]["nodeName"], "sandbox-node-2");
        assert_eq!(pod["status"]["phase"], "Running");
    }

    #[test]
    fn a_daemonset_runs_on_every_node_whose_taints_it_tolerates() {
        let (store, mut controllers) = three_node_cluster();
        set_taints(
            &store,
            "sandbox-node-3",
            json!([{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]),
        );
        let nodes = store.resource("", "v1", "nodes").unwrap();
        store
            .patch(
                &nodes,
                "",
                "sandbox-node",
                PatchType::Merge,
                &json!({"spec": {"unschedulable": true}}),
                Part::Main,
                &controller_writes(),
            )
            .unwrap();
        create(
            &store,
            "daemonsets",
            "apps",
            json!({"metadata": {"name": "agent"}, "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {"metadata": {"labels": {"app": "agent"}},
                    "spec": {"containers": [{"name": "agent", "image": "podinfo"}]}}}}),
        );
        settle(&mut controllers);
        let placed = |store: &Store| {
            let mut nodes: Vec<String> = pods(store)
                .iter()
                .filter_map(|p| p["spec"]["nodeName"].as_str().map(String::from))
                .collect();
            nodes.sort();
            nodes
        };
        assert_eq!(
            placed(&store),
            ["sandbox-node", "sandbox-node-2"],
            "the cordoned node runs one, the tainted one none"
        );
        let daemonsets = store.resource("apps", "v1", "daemonsets").unwrap();
        let status =
            |store: &Store| store.get(&daemonsets, "default", "agent").unwrap()["status"].clone();
        for field in [
            "desiredNumberScheduled",
            "currentNumberScheduled",
            "numberReady",
            "numberAvailable",
            "updatedNumberScheduled",
        ] {
            assert_eq!(status(&store)[field], 2, "{field}");
        }
        assert!(
            pods(&store)[0]["spec"]["tolerations"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["key"] == "node.kubernetes.io/unschedulable"),
            "daemon pods tolerate a cordon, as the DaemonSet controller's do"
        );
        store
            .patch(
                &daemonsets,
                "default",
                "agent",
                PatchType::Merge,
                &json!({"spec": {"template": {"spec": {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}}}}),
                Part::Main,
                &controller_writes(),
            )
            .unwrap();
        settle(&mut controllers);
        settle(&mut controllers);
        assert_eq!(
            placed(&store),
            ["sandbox-node", "sandbox-node-2", "sandbox-node-3"]
        );
        assert_eq!(status(&store)["numberReady"], 3);
        assert_eq!(status(&store)["desiredNumberScheduled"], 3);
        // A NoExecute taint the pods do not tolerate takes the pod off that node.
        set_taints(
            &store,
            "sandbox-node-2",
            json!([{"key": "maintenance", "effect": "NoExecute"}]),
        );
        settle(&mut controllers);
        assert_eq!(placed(&store), ["sandbox-node", "sandbox-node-3"]);
        assert_eq!(status(&store)["desiredNumberScheduled"], 2);
    }
}
