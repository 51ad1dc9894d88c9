//! The DaemonSet controller: one pod on each node the DaemonSet's pods tolerate, rolled on change.

use super::nodes::*;
use super::objects::*;
use super::state::*;
use serde_json::{Value, json};
use serin_sandbox_apiserver::store::DeleteOptions;

impl Controllers {
    /// Deletes a DaemonSet's pod with the controller's `SuccessfulDelete` event; whether it went.
    pub(crate) fn delete_daemon_pod(&self, ds: &Value, pod: &Value) -> bool {
        let deleted = self.store.delete(
            &self.pods,
            &ns(pod),
            &name(pod),
            &DeleteOptions::default(),
            false,
        );
        if deleted.is_ok() {
            record_event(
                &self.store,
                &self.events,
                ds,
                "DaemonSet",
                "daemonset-controller",
                "SuccessfulDelete",
                format!("Deleted pod: {}", name(pod)),
            );
        }
        deleted.is_ok()
    }

    /// The DaemonSet controller: one pod on every node the template's node selector, required node
    /// affinity and tolerations admit, bound to it directly (daemon pods run on cordoned nodes
    /// too), replaced `maxUnavailable` at a time when the template changes.
    pub(crate) fn sync_daemonsets(&mut self) -> bool {
        let mut changed = false;
        let daemonsets = self.all(&self.daemonsets);
        if daemonsets.is_empty() {
            return false;
        }
        let pods = self.all(&self.pods);
        let pods_by_owner = by_controller(&pods);
        let all_nodes = self.all(&self.nodes);
        for ds in daemonsets {
            if ds["metadata"]["deletionTimestamp"].is_string() {
                continue;
            }
            let template = &ds["spec"]["template"];
            let mut spec = template["spec"].clone();
            spec["tolerations"] = json!(daemon_tolerations(&spec));
            // As the DaemonSet controller: a node runs a pod only if the pod would fit there (Flagger
            // scales a DaemonSet to zero with a nodeSelector no node has); a pod may stay on a node
            // it no longer fits only behind a NoSchedule taint.
            let fits: Vec<(String, crate::scheduler::DaemonFit)> = all_nodes
                .iter()
                .map(|node| (name(node), crate::scheduler::daemon_fit(&spec, node)))
                .collect();
            let nodes: Vec<&str> = fits
                .iter()
                .filter(|(_, fit)| fit.should_run)
                .map(|(node, _)| node.as_str())
                .collect();
            let on = |pod: &Value, node: &str| pod["spec"]["nodeName"] == node;
            let may_stay =
                |pod: &Value| fits.iter().any(|(node, fit)| fit.may_stay && on(pod, node));
            let ds_uid = uid(&ds);
            let generation = ds["metadata"]["generation"].as_i64().unwrap_or(1);
            let owned: Vec<&Value> = pods_by_owner
                .get(ds_uid.as_str())
                .into_iter()
                .flatten()
                .copied()
                .filter(|p| !p["metadata"]["deletionTimestamp"].is_string())
                .collect();
            let current_template = |pod: &Value| {
                pod["metadata"]["labels"]["pod-template-generation"]
                    == generation.to_string().as_str()
            };
            let max_unavailable = ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"]
                .as_i64()
                .unwrap_or(1)
                .max(1);
            let rolling = ds["spec"]["updateStrategy"]["type"] != "OnDelete";
            let mut replaced = 0;
            for stray in owned.iter().filter(|p| !may_stay(p)) {
                changed |= self.delete_daemon_pod(&ds, stray);
            }
            let owned: Vec<&Value> = owned.into_iter().filter(|p| may_stay(p)).collect();
            for node in &nodes {
                let on_node: Vec<&&Value> = owned.iter().filter(|p| on(p, node)).collect();
                if on_node.is_empty() {
                    let mut labels = template["metadata"]["labels"].clone();
                    if !labels.is_object() {
                        labels = json!({});
                    }
                    labels["pod-template-generation"] = json!(generation.to_string());
                    let mut spec = spec.clone();
                    spec["nodeName"] = json!(node);
                    changed |= self
                        .create_owned_pod(&ds, "daemonset-controller", labels, spec)
                        .is_ok();
                } else if rolling
                    && replaced < max_unavailable
                    && let Some(old) = on_node.iter().find(|p| !current_template(p))
                    && self.delete_daemon_pod(&ds, old)
                {
                    replaced += 1;
                    changed = true;
                }
            }
            // The counts are over the nodes that should run a pod; pods kept elsewhere (behind a
            // NoSchedule taint added later) are misscheduled.
            let (scheduled, misplaced): (Vec<&Value>, Vec<&Value>) = owned
                .iter()
                .partition(|p| nodes.iter().any(|node| on(p, node)));
            let node_count = |pods: &[&Value]| {
                let mut names: Vec<&str> = pods
                    .iter()
                    .filter_map(|p| p["spec"]["nodeName"].as_str())
                    .collect();
                names.sort_unstable();
                names.dedup();
                names.len()
            };
            let number_ready = scheduled.iter().filter(|p| is_ready(p)).count();
            let updated = scheduled.iter().filter(|p| current_template(p)).count();
            let available = scheduled
                .iter()
                .filter(|p| is_ready(p) && current_template(p))
                .count();
            let mut status = json!({
                "currentNumberScheduled": node_count(&scheduled), "desiredNumberScheduled": nodes.len(),
                "numberMisscheduled": node_count(&misplaced), "numberReady": number_ready,
                "numberAvailable": available, "updatedNumberScheduled": updated,
                "observedGeneration": generation,
            });
            let unavailable = nodes.len().saturating_sub(available);
            if unavailable > 0 {
                status["numberUnavailable"] = json!(unavailable);
            }
            if let Some(m) = status.as_object_mut() {
                m.retain(|k, v| {
                    !(matches!(k.as_str(), "numberAvailable" | "updatedNumberScheduled")
                        && v == &json!(0))
                });
            }
            changed |= self.write_status(&self.daemonsets, &ds, status);
        }
        changed
    }
}
