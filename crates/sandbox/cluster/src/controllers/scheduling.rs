//! The scheduler: binds pending pods to nodes by selectors, taints, affinity and spreading.

use super::objects::*;
use super::state::*;
use serde_json::{Value, json};
use serin_sandbox_apiserver::store::{Part, now_rfc3339};
use std::collections::HashMap;
use std::sync::Arc;

impl Controllers {
    /// The scheduler: binds each pod without a node to the best node for it, one pod after the
    /// other so each decision sees the pods bound before it (by priority, then age). A pod no node
    /// takes stays Pending with `PodScheduled=False` and one `FailedScheduling` event per distinct
    /// reason; it is tried again on every pass, so a removed taint or a deleted pod lets it run.
    pub(crate) fn schedule_pending(&self) -> bool {
        let index = &self.pod_index;
        let pending_pods = index.sorted(index.unscheduled.iter());
        let mut pending: Vec<&Value> = pending_pods.iter().map(|p| &**p).collect();
        if pending.is_empty() {
            return false;
        }
        pending.sort_by_key(|p| {
            (
                std::cmp::Reverse(p["spec"]["priority"].as_i64().unwrap_or(0)),
                p["metadata"]["creationTimestamp"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                name(p),
            )
        });
        let copies = |objects: Vec<Arc<Value>>| -> Vec<Value> {
            objects.iter().map(|o| Value::clone(o)).collect()
        };
        let nodes = copies(self.all(&self.nodes));
        let namespaces = copies(self.all(&self.namespaces));
        // What the decisions read, copied from the index and kept current as this pass binds
        // pods: the pods per node, and the occupying pods with anti-affinity (all a pod without
        // affinity terms needs); every pod only when a pending pod has terms of its own (a bound
        // pod is copied, the others shared).
        let mut per_node = index.per_node.clone();
        let mut repelling = index.sorted(index.repelling.iter());
        let with_terms = pending
            .iter()
            .any(|p| crate::scheduler::has_pod_affinity(p));
        let mut placed: Vec<Arc<Value>> = if with_terms {
            index.sorted(index.pods.keys())
        } else {
            Vec::new()
        };
        let position: HashMap<String, usize> = placed
            .iter()
            .enumerate()
            .map(|(i, p)| (uid(p), i))
            .collect();
        let mut changed = false;
        for pod in pending {
            let own_terms = crate::scheduler::has_pod_affinity(pod);
            let cluster = crate::scheduler::Cluster {
                nodes: &nodes,
                pods: if own_terms { &placed } else { &repelling },
                namespaces: &namespaces,
                pods_per_node: (!own_terms).then_some(&per_node),
            };
            match crate::scheduler::schedule(pod, cluster) {
                Ok(node) => {
                    if self.bind(pod, &node) {
                        let mut bound = Value::clone(pod);
                        bound["spec"]["nodeName"] = json!(node);
                        if let Some(at) = position.get(&uid(pod)) {
                            placed[*at] = Arc::new(bound.clone());
                        }
                        if crate::scheduler::has_pod_anti_affinity(pod) {
                            repelling.push(Arc::new(bound));
                        }
                        *per_node.entry(node).or_default() += 1;
                    }
                    changed = true;
                }
                Err(message) => changed |= self.leave_unschedulable(pod, &message),
            }
        }
        changed
    }

    /// Binds `pod` to `node` with the scheduler's `Scheduled` event; whether it was bound.
    pub(crate) fn bind(&self, pod: &Value, node: &str) -> bool {
        let mut scheduled = pod.clone();
        scheduled["spec"]["nodeName"] = json!(node);
        let Ok(bound) = self.store.update_shared(
            &self.pods,
            &ns(pod),
            &name(pod),
            scheduled,
            Part::Main,
            &controller_writes(),
        ) else {
            return false;
        };
        record_event(
            &self.store,
            &self.events,
            &bound,
            "Pod",
            "default-scheduler",
            "Scheduled",
            format!(
                "Successfully assigned {}/{} to {node}",
                ns(&bound),
                name(&bound)
            ),
        );
        let mut status = bound["status"].clone();
        status["conditions"] = json!([{"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()}]);
        self.write_status(&self.pods, &bound, status);
        true
    }

    /// Keeps `pod` Pending because no node takes it: `PodScheduled=False` (reason Unschedulable)
    /// and a `FailedScheduling` warning, both only when `message` is news.
    pub(crate) fn leave_unschedulable(&self, pod: &Value, message: &str) -> bool {
        let known = pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["reason"] == "Unschedulable" && c["message"] == message);
        if known {
            return false;
        }
        record_warning(
            &self.store,
            &self.events,
            pod,
            "Pod",
            "default-scheduler",
            "FailedScheduling",
            message.to_string(),
        );
        let mut status = pod["status"].clone();
        status["phase"] = json!("Pending");
        status["conditions"] = json!([{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": message, "lastTransitionTime": now_rfc3339()}]);
        self.write_status(&self.pods, pod, status)
    }
}
