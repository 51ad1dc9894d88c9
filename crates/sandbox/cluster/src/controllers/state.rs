//! What the controllers keep between passes (the workloads by owner, the pods by node) and one
//! pass over everything that changed.

use super::nodes::*;
use super::objects::*;
use crate::pod_runtime::PodRuntime;
use serde_json::{Value, json};
use serin_sandbox_apiserver::registry::ResourceInfo;
use serin_sandbox_apiserver::store::{Part, Store};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The ReplicaSets, Deployments and pods, kept current from the store's changes: each by uid,
/// the children of each controlling owner, and which ReplicaSets and Deployments the next pass
/// syncs, so a pass looks only at what changed instead of at every workload.
#[derive(Default)]
pub(crate) struct Workloads {
    pub(crate) replica_sets: HashMap<String, Arc<Value>>,
    pub(crate) deployments: HashMap<String, Arc<Value>>,
    /// Pods and ReplicaSets by the uid of their controlling owner, then by name (a list's order).
    pub(crate) children: HashMap<String, BTreeMap<String, Arc<Value>>>,
    /// Each child's owner uid as last noted, to move it when its owner changes or it goes.
    pub(crate) owner_of: HashMap<String, String>,
    pub(crate) dirty_rs: std::collections::HashSet<String>,
    pub(crate) dirty_deployments: std::collections::HashSet<String>,
    /// Settled Deployments that time alone can change ([`deadline_check`]), and when.
    pub(crate) deadlines: HashMap<String, Instant>,
}

impl Workloads {
    /// Takes a committed object of `storage` (a storage key) in, or its removal when `gone`.
    pub(crate) fn note(&mut self, storage: &str, object: &Arc<Value>, gone: bool) {
        let (is_pod, own) = match storage {
            "pods" => (true, None),
            "replicasets.apps" => (false, Some(&mut self.replica_sets)),
            "deployments.apps" => (false, Some(&mut self.deployments)),
            _ => return,
        };
        let object_uid = uid(object);
        if let Some(own) = own {
            if gone {
                own.remove(&object_uid);
            } else {
                own.insert(object_uid.clone(), object.clone());
            }
        }
        if storage == "deployments.apps" {
            self.dirty_deployments.insert(object_uid);
            return;
        }
        if !is_pod {
            self.dirty_rs.insert(object_uid.clone());
        }
        // A child's change concerns its controller before and after it.
        let owners = [
            self.owner_of.remove(&object_uid),
            controller_uid(object).map(str::to_string),
        ];
        for owner in owners.iter().flatten() {
            if let Some(children) = self.children.get_mut(owner) {
                children.remove(&name(object));
                if children.is_empty() {
                    self.children.remove(owner);
                }
            }
            if is_pod {
                self.dirty_rs.insert(owner.clone());
            } else {
                self.dirty_deployments.insert(owner.clone());
            }
        }
        if !gone && let Some(owner) = controller_uid(object) {
            self.children
                .entry(owner.to_string())
                .or_default()
                .insert(name(object), object.clone());
            self.owner_of.insert(object_uid, owner.to_string());
        }
    }

    /// The pods or ReplicaSets `owner_uid` controls, in name order.
    pub(crate) fn children(&self, owner_uid: &str) -> Vec<Arc<Value>> {
        self.children
            .get(owner_uid)
            .map(|children| children.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Empties `dirty` into the objects it names that still exist, in namespace/name order.
    pub(crate) fn take(
        dirty: &mut std::collections::HashSet<String>,
        objects: &HashMap<String, Arc<Value>>,
    ) -> Vec<Arc<Value>> {
        let mut work: Vec<Arc<Value>> = dirty
            .drain()
            .filter_map(|object_uid| objects.get(&object_uid).cloned())
            .collect();
        work.sort_by_key(|a| (ns(a), name(a)));
        work
    }
}

/// How often the kubelet asks the runtime about every pod it started (probes, exits), as the
/// kubelet's own relist does every second; pods that changed are looked at on every pass.
pub(crate) const RUNTIME_POLL: Duration = Duration::from_secs(1);

/// The kubelet's and the scheduler's view of the pods, kept from the store's changes so a pass
/// looks at the pods that changed instead of at every pod.
#[derive(Default)]
pub(crate) struct PodIndex {
    pub(crate) pods: HashMap<String, Arc<Value>>,
    /// Pods changed since the kubelet last looked at them.
    pub(crate) dirty: HashSet<String>,
    /// Pods that left the store since the last pass, for the runtime to stop.
    pub(crate) gone: Vec<String>,
    /// Pods waiting for a node: none yet, not being deleted, not finished.
    pub(crate) unscheduled: HashSet<String>,
    /// How many pods occupy each node.
    pub(crate) per_node: HashMap<String, usize>,
    /// The occupying pods with anti-affinity terms, which can keep pods off their node.
    pub(crate) repelling: HashSet<String>,
}

impl PodIndex {
    pub(crate) fn note(&mut self, pod: &Arc<Value>, gone: bool) {
        let pod_uid = uid(pod);
        let previous = if gone {
            self.pods.remove(&pod_uid)
        } else {
            self.pods.insert(pod_uid.clone(), pod.clone())
        };
        if let Some(previous) = previous {
            self.count(&pod_uid, &previous, false);
        }
        if gone {
            self.dirty.remove(&pod_uid);
            self.gone.push(pod_uid);
        } else {
            self.count(&pod_uid, pod, true);
            self.dirty.insert(pod_uid);
        }
    }

    /// Adds `pod` to the scheduler's counts, or takes it out of them.
    pub(crate) fn count(&mut self, pod_uid: &str, pod: &Value, add: bool) {
        if crate::scheduler::occupies_node(pod) {
            let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
            if add {
                *self.per_node.entry(node.to_string()).or_default() += 1;
            } else if let Some(count) = self.per_node.get_mut(node) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    self.per_node.remove(node);
                }
            }
            if crate::scheduler::has_pod_anti_affinity(pod) {
                if add {
                    self.repelling.insert(pod_uid.to_string());
                } else {
                    self.repelling.remove(pod_uid);
                }
            }
        }
        let unscheduled = pod["spec"]["nodeName"].is_null()
            && !pod["metadata"]["deletionTimestamp"].is_string()
            && !matches!(
                pod["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            );
        if unscheduled {
            if add {
                self.unscheduled.insert(pod_uid.to_string());
            } else {
                self.unscheduled.remove(pod_uid);
            }
        }
    }

    /// The pods with these uids, by namespace and name.
    pub(crate) fn sorted<'a>(&self, uids: impl Iterator<Item = &'a String>) -> Vec<Arc<Value>> {
        let mut pods: Vec<(&str, &str, &Arc<Value>)> = uids
            .filter_map(|u| self.pods.get(u))
            .map(|pod| {
                let meta = &pod["metadata"];
                (
                    meta["namespace"].as_str().unwrap_or_default(),
                    meta["name"].as_str().unwrap_or_default(),
                    pod,
                )
            })
            .collect();
        pods.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        pods.into_iter().map(|(_, _, pod)| pod.clone()).collect()
    }
}

/// The controllers' state between passes.
pub struct Controllers {
    pub(crate) store: Arc<Store>,
    pub(crate) runtime: Arc<dyn PodRuntime>,
    pub(crate) ready_at: HashMap<String, Instant>,
    /// Pods the runtime was asked to start, by uid, so it can stop the ones that vanish.
    pub(crate) started: HashMap<String, Arc<Value>>,
    pub(crate) pod_index: PodIndex,
    /// When the kubelet next asks the runtime about every started pod.
    pub(crate) next_runtime_poll: Instant,
    pub(crate) templates: ComparableTemplates,
    /// Every change committed to the store since the last pass: it tells which memos below no
    /// longer hold, so a pass looks again only at what changed instead of at every object.
    pub(crate) changes:
        tokio::sync::mpsc::UnboundedReceiver<Arc<serin_sandbox_apiserver::store::Change>>,
    /// The ReplicaSets, Deployments and pods by owner, and which of them the next pass syncs.
    pub(crate) workloads: Workloads,
    pub(crate) endpoints: crate::endpoints::EndpointsController,
    pub(crate) next_ip: u32,
    pub(crate) pods: ResourceInfo,
    pub(crate) replicasets: ResourceInfo,
    pub(crate) deployments: ResourceInfo,
    pub(crate) jobs: ResourceInfo,
    pub(crate) daemonsets: ResourceInfo,
    pub(crate) events: ResourceInfo,
    pub(crate) nodes: ResourceInfo,
    pub(crate) namespaces: ResourceInfo,
}

impl Controllers {
    /// Controllers over `store`, running pods with `runtime` on `node_count` nodes (at least one),
    /// which are created now.
    pub fn new(store: Arc<Store>, runtime: Arc<dyn PodRuntime>, node_count: usize) -> Self {
        let pods = store.resource("", "v1", "pods").expect("built in");
        let replicasets = store
            .resource("apps", "v1", "replicasets")
            .expect("built in");
        let deployments = store
            .resource("apps", "v1", "deployments")
            .expect("built in");
        let nodes = store.resource("", "v1", "nodes").expect("built in");
        let namespaces = store.resource("", "v1", "namespaces").expect("built in");
        let events = store.resource("", "v1", "events").expect("built in");
        let jobs = store.resource("batch", "v1", "jobs").expect("built in");
        let daemonsets = store
            .resource("apps", "v1", "daemonsets")
            .expect("built in");
        let (listed, changes) = store.list_and_follow(&[&pods, &replicasets, &deployments]);
        let mut workloads = Workloads::default();
        let mut pod_index = PodIndex::default();
        for (info, objects) in [&pods, &replicasets, &deployments].iter().zip(&listed) {
            for object in objects {
                workloads.note(&info.storage_key(), object, false);
                if info.storage_key() == "pods" {
                    pod_index.note(object, false);
                }
            }
        }
        for index in 1..=node_count.max(1) {
            let node = sandbox_node(index);
            let _ = store.create(&nodes, None, node.clone(), &controller_writes());
            let _ = store.update(
                &nodes,
                "",
                &node_name(index),
                node,
                Part::Status,
                &controller_writes(),
            );
        }
        Controllers {
            store,
            runtime,
            ready_at: HashMap::new(),
            started: HashMap::new(),
            pod_index,
            next_runtime_poll: Instant::now(),
            templates: ComparableTemplates::default(),
            changes,
            workloads,
            endpoints: Default::default(),
            next_ip: 10,
            pods,
            replicasets,
            deployments,
            jobs,
            daemonsets,
            events,
            nodes,
            namespaces,
        }
    }

    pub(crate) fn all(&self, info: &ResourceInfo) -> Vec<Arc<Value>> {
        self.store.list_shared(info)
    }

    /// One pass of every controller; returns whether anything changed.
    pub fn reconcile(&mut self) -> bool {
        self.take_changes();
        let mut changed = false;
        changed |= self.kubelet();
        changed |= self.replicasets();
        changed |= self.deployments();
        changed |= self.sync_jobs();
        changed |= self.sync_daemonsets();
        changed |= self.endpoints.sync(&self.store, &controller_writes());
        changed |= self.sync_quotas();
        changed
    }

    /// The ResourceQuota controller, for the one resource the sandbox counts: `status.hard` is the
    /// quota's `spec.hard`, `status.used.pods` the namespace's pods that have not ended.
    pub(crate) fn sync_quotas(&self) -> bool {
        let Some(quotas) = self.store.resource("", "v1", "resourcequotas") else {
            return false;
        };
        let quotas_now = self.all(&quotas);
        if quotas_now.is_empty() {
            return false;
        }
        let pods = self.all(&self.pods);
        let mut changed = false;
        for quota in quotas_now {
            let used = pods
                .iter()
                .filter(|p| ns(p) == ns(&quota))
                .filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
                .count();
            let hard = quota["spec"]["hard"].clone();
            let mut status = json!({"hard": hard});
            if hard.get("pods").is_some() {
                status["used"] = json!({"pods": used.to_string()});
            }
            changed |= self.write_status(&quotas, &quota, status);
        }
        changed
    }

    /// Takes the changes committed since the last pass into the indexes, marking what they
    /// concern for this pass: a pod's change its controller, a ReplicaSet's itself and its
    /// Deployment, a Service's or an Endpoints' the Service.
    pub(crate) fn take_changes(&mut self) {
        while let Ok(change) = self.changes.try_recv() {
            let gone = change.change == serin_sandbox_apiserver::store::ChangeType::Deleted;
            if gone {
                self.templates.forget(uid_of(&change.object));
            }
            self.workloads.note(&change.resource, &change.object, gone);
            if change.resource == "pods" {
                self.pod_index.note(&change.object, gone);
            }
            self.endpoints.note(&change);
        }
    }

    pub(crate) fn write_status(&self, info: &ResourceInfo, object: &Value, status: Value) -> bool {
        if object["status"] == status {
            return false;
        }
        let mut updated = object.clone();
        updated["status"] = status;
        self.store
            .update_shared(
                info,
                &ns(object),
                &name(object),
                updated,
                Part::Status,
                &controller_writes(),
            )
            .is_ok()
    }
}
