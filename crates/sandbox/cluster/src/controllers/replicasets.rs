//! The ReplicaSet controller: creates and deletes pods to match replicas and reports their status.

use super::objects::*;
use super::state::*;
use serde_json::{Value, json};
use serin_sandbox_apiserver::store::{DeleteOptions, now_rfc3339};

impl Controllers {
    pub(crate) fn replicasets(&mut self) -> bool {
        let mut changed = false;
        let work = Workloads::take(&mut self.workloads.dirty_rs, &self.workloads.replica_sets);
        for rs in work.iter() {
            let rs = &**rs;
            if rs["metadata"]["deletionTimestamp"].is_string() {
                continue;
            }
            let rs_uid = uid(rs);
            let owned_all = self.workloads.children(&rs_uid);
            let mut acted = false;
            let owned: Vec<&Value> = owned_all
                .iter()
                .map(|p| &**p)
                .filter(|p| !p["metadata"]["deletionTimestamp"].is_string())
                .collect();
            let desired = int(&rs["spec"]["replicas"]);
            let current = owned.len() as i64;
            let mut refused = None;
            if current < desired {
                for _ in current..desired {
                    let template = &rs["spec"]["template"];
                    let labels = template["metadata"]["labels"].clone();
                    match self.create_owned_pod(
                        rs,
                        "replicaset-controller",
                        labels,
                        template["spec"].clone(),
                    ) {
                        Ok(()) => acted = true,
                        Err(message) => {
                            refused = Some(message);
                            break;
                        }
                    }
                }
            } else if current > desired {
                let mut victims = owned.clone();
                // Not-ready pods go first, then the newest.
                victims.sort_by_key(|p| {
                    (
                        p["status"]["phase"] == "Running",
                        std::cmp::Reverse(
                            p["metadata"]["creationTimestamp"]
                                .as_str()
                                .unwrap_or("")
                                .to_string(),
                        ),
                    )
                });
                for pod in victims.iter().take((current - desired) as usize) {
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
                            rs,
                            "ReplicaSet",
                            "replicaset-controller",
                            "SuccessfulDelete",
                            format!("Deleted pod: {}", name(pod)),
                        );
                    }
                }
                acted = true;
            }
            let min_ready = int(&rs["spec"]["minReadySeconds"]);
            let ready: Vec<&&Value> = owned.iter().filter(|p| is_ready(p)).collect();
            let available = ready
                .iter()
                .filter(|p| {
                    min_ready == 0
                        || p["status"]["conditions"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .find(|c| c["type"] == "Ready")
                            .and_then(|c| c["lastTransitionTime"].as_str())
                            .and_then(seconds_since)
                            .is_some_and(|s| s >= min_ready)
                })
                .count() as i64;
            let mut status = json!({"replicas": current.min(desired.max(current)), "observedGeneration": rs["metadata"]["generation"]});
            status["replicas"] = json!(owned.len());
            status["fullyLabeledReplicas"] = json!(owned.len());
            status["readyReplicas"] = json!(ready.len());
            status["availableReplicas"] = json!(available);
            if let Some(m) = status.as_object_mut() {
                m.retain(|k, v| k == "replicas" || k == "observedGeneration" || v != &json!(0));
            }
            // A refused creation is retried, and pods waiting out minReadySeconds become
            // available, with no change to what was read.
            let waits = refused.is_some() || available < ready.len() as i64;
            if let Some(message) = refused {
                // Reported once per refusal, as the ReplicaSet controller's condition and event.
                let known = rs["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["type"] == "ReplicaFailure");
                let condition = match known {
                    Some(c) if c["message"] == message.as_str() => c.clone(),
                    _ => {
                        record_warning(
                            &self.store,
                            &self.events,
                            rs,
                            "ReplicaSet",
                            "replicaset-controller",
                            "FailedCreate",
                            message.clone(),
                        );
                        json!({"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                            "message": message, "lastTransitionTime": now_rfc3339()})
                    }
                };
                status["conditions"] = json!([condition]);
            }
            acted |= self.write_status(&self.replicasets, rs, status);
            if acted || waits {
                self.workloads.dirty_rs.insert(rs_uid);
            }
            changed |= acted;
        }
        changed
    }

    /// Creates a pod of `owner` (a ReplicaSet, DaemonSet or Job) with its template's annotations
    /// and the given labels and spec, and records the controller's `SuccessfulCreate` event; the
    /// API server's refusal (an exceeded quota) is returned as the controller would report it.
    pub(crate) fn create_owned_pod(
        &self,
        owner: &Value,
        component: &str,
        labels: Value,
        spec: Value,
    ) -> Result<(), String> {
        let kind = owner["kind"].as_str().unwrap_or_default();
        let pod = json!({
            "metadata": {"generateName": format!("{}-", name(owner)), "labels": labels,
                "annotations": owner["spec"]["template"]["metadata"]["annotations"],
                "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": kind, "name": name(owner),
                    "uid": uid(owner), "controller": true, "blockOwnerDeletion": true}]},
            "spec": spec,
        });
        let pod = self
            .store
            .create_shared(&self.pods, Some(&ns(owner)), pod, &controller_writes())
            .map_err(|refused| format!("Error creating: {}", refused.message))?;
        record_event(
            &self.store,
            &self.events,
            owner,
            kind,
            component,
            "SuccessfulCreate",
            format!("Created pod: {}", name(&pod)),
        );
        Ok(())
    }
}
