//! The Deployment controller: rolling updates with maxSurge, maxUnavailable, minReadySeconds and
//! progressDeadlineSeconds, scaling, and the status and conditions a cluster reports.

use super::objects::*;
use super::state::*;
use serde_json::{Value, json};
use serin_sandbox_apiserver::registry::ResourceInfo;
use serin_sandbox_apiserver::store::{DeleteOptions, Part, PatchType, Store, now_rfc3339};
use std::sync::Arc;
use std::time::Instant;

impl Controllers {
    pub(crate) fn deployments(&mut self) -> bool {
        let mut changed = false;
        let now = Instant::now();
        let workloads = &mut self.workloads;
        workloads.deadlines.retain(|d_uid, at| {
            let due = *at <= now;
            if due {
                workloads.dirty_deployments.insert(d_uid.clone());
            }
            !due
        });
        let work = Workloads::take(
            &mut self.workloads.dirty_deployments,
            &self.workloads.deployments,
        );
        for deploy in work {
            if deploy["metadata"]["deletionTimestamp"].is_string() {
                continue;
            }
            let d_uid = uid(&deploy);
            let owned_rs = self.workloads.children(&d_uid);
            let owned = owned_rs.iter().map(|rs| &**rs).collect();
            let acted = self.sync_deployment(&deploy, owned);
            if acted {
                self.workloads.dirty_deployments.insert(d_uid);
            } else if let Some(at) = deadline_check(&deploy) {
                self.workloads.deadlines.insert(d_uid, at);
            }
            changed |= acted;
        }
        changed
    }

    /// Syncs one Deployment whose ReplicaSets are `owned`.
    pub(crate) fn sync_deployment(&mut self, deploy: &Value, owned: Vec<&Value>) -> bool {
        let d_uid = uid(deploy);
        let namespace = ns(deploy);
        let spec = &deploy["spec"];
        let replicas = spec["replicas"].as_i64().unwrap_or(1);
        let template = &spec["template"];
        let wanted = self.templates.of(deploy);
        let new_rs = owned.iter().find(|rs| self.templates.of(rs) == wanted);
        let revision = |rs: &Value| -> i64 {
            rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                .as_str()
                .and_then(|r| r.parse().ok())
                .unwrap_or(0)
        };
        let max_revision = owned.iter().map(|rs| revision(rs)).max().unwrap_or(0);
        let strategy = &spec["strategy"];
        let recreate = strategy["type"] == "Recreate";
        let surge = if recreate {
            0
        } else {
            resolve(&strategy["rollingUpdate"]["maxSurge"], replicas, true)
        };
        let mut unavailable = if recreate {
            0
        } else {
            resolve(
                &strategy["rollingUpdate"]["maxUnavailable"],
                replicas,
                false,
            )
        };
        if surge == 0 && unavailable == 0 && !recreate {
            unavailable = 1;
        }
        let mut created_new = None;
        let mut bumped = false;
        // Holds a ReplicaSet written in this sync, which `new_rs` then borrows.
        let written: Arc<Value>;
        let new_rs: &Value = match new_rs {
            // Rolled back to an older template: its ReplicaSet becomes the newest revision again.
            Some(rs) if revision(rs) < max_revision => {
                let revision_patch = json!({"metadata": {"annotations": {
                    "deployment.kubernetes.io/revision": (max_revision + 1).to_string()}}});
                match self.store.patch_shared(
                    &self.replicasets,
                    &namespace,
                    &name(rs),
                    PatchType::Merge,
                    &revision_patch,
                    Part::Main,
                    &controller_writes(),
                ) {
                    Ok((rs, _)) => {
                        bumped = true;
                        written = rs;
                        &written
                    }
                    Err(_) => return false,
                }
            }
            Some(rs) => rs,
            None => {
                let hash = alphabet_hash(&wanted.to_string());
                let rs_name = format!("{}-{hash}", name(deploy));
                let mut labels = template["metadata"]["labels"].clone();
                labels["pod-template-hash"] = json!(hash);
                let mut selector = spec["selector"].clone();
                selector["matchLabels"]["pod-template-hash"] = json!(hash);
                let mut rs_template = template.clone();
                rs_template["metadata"]["labels"] = labels.clone();
                let mut annotations = deploy["metadata"]["annotations"].clone();
                if let Some(a) = annotations.as_object_mut() {
                    a.remove("kubectl.kubernetes.io/last-applied-configuration");
                    a.remove("deployment.kubernetes.io/revision");
                }
                if !annotations.is_object() {
                    annotations = json!({});
                }
                annotations["deployment.kubernetes.io/revision"] =
                    json!((max_revision + 1).to_string());
                annotations["deployment.kubernetes.io/desired-replicas"] =
                    json!(replicas.to_string());
                annotations["deployment.kubernetes.io/max-replicas"] =
                    json!((replicas + surge).to_string());
                let rs = json!({
                    "metadata": {"name": rs_name, "labels": labels, "annotations": annotations,
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name(deploy), "uid": d_uid, "controller": true, "blockOwnerDeletion": true}]},
                    "spec": {"replicas": 0, "minReadySeconds": spec["minReadySeconds"].as_i64().unwrap_or(0), "selector": selector, "template": rs_template}
                });
                match self.store.create_shared(
                    &self.replicasets,
                    Some(&namespace),
                    rs,
                    &controller_writes(),
                ) {
                    Ok(rs) => {
                        created_new = Some(name(&rs));
                        written = rs;
                        &written
                    }
                    Err(_) => return false,
                }
            }
        };
        let new_name = name(new_rs);
        let old: Vec<&Value> = owned
            .iter()
            .copied()
            .filter(|rs| name(rs) != new_name)
            .collect();
        let rs_replicas = |rs: &Value| int(&rs["spec"]["replicas"]);
        let available_of = |rs: &Value| int(&rs["status"]["availableReplicas"]);
        let old_total: i64 = old.iter().map(|rs| rs_replicas(rs)).sum();
        let mut changed = created_new.is_some() || bumped;
        let events = &self.events;
        let scale = |store: &Store, info: &ResourceInfo, rs: &Value, to: i64| -> bool {
            let from = rs_replicas(rs);
            if from == to {
                return false;
            }
            let scaled = store
                .patch_shared(
                    info,
                    &ns(rs),
                    &name(rs),
                    PatchType::Merge,
                    &json!({"spec": {"replicas": to}}),
                    Part::Main,
                    &controller_writes(),
                )
                .is_ok();
            if scaled {
                let direction = if to > from { "up" } else { "down" };
                record_event(
                    store,
                    events,
                    deploy,
                    "Deployment",
                    "deployment-controller",
                    "ScalingReplicaSet",
                    format!(
                        "Scaled {direction} replica set {} from {from} to {to}",
                        name(rs)
                    ),
                );
            }
            scaled
        };
        let paused = spec["paused"].as_bool() == Some(true);
        if recreate {
            if old_total > 0 {
                for rs in &old {
                    changed |= scale(&self.store, &self.replicasets, rs, 0);
                }
            } else {
                let old_pods_left = old.iter().any(|rs| int(&rs["status"]["replicas"]) > 0);
                if !old_pods_left {
                    changed |= scale(&self.store, &self.replicasets, new_rs, replicas);
                }
            }
        } else if !paused || old.is_empty() {
            // Scale the new ReplicaSet up within replicas + maxSurge pods in total.
            let new_current = rs_replicas(new_rs);
            let max_total = replicas + surge;
            let new_target = if new_current > replicas {
                replicas
            } else if old_total + new_current < max_total {
                new_current + (max_total - old_total - new_current).min(replicas - new_current)
            } else {
                new_current
            };
            changed |= scale(&self.store, &self.replicasets, new_rs, new_target.max(0));
            // Scale old ones down only as far as replicas - maxUnavailable stay available, counting
            // the new ReplicaSet's pods that are not available yet.
            let new_unavailable = (new_target - available_of(new_rs)).max(0);
            let mut budget = old_total + new_target - (replicas - unavailable) - new_unavailable;
            let mut oldest_first = old.clone();
            oldest_first.sort_by_key(|rs| revision(rs));
            for rs in oldest_first {
                if budget <= 0 {
                    break;
                }
                let current = rs_replicas(rs);
                let down = current.min(budget);
                if down > 0 {
                    changed |= scale(&self.store, &self.replicasets, rs, current - down);
                    budget -= down;
                }
            }
        }
        // Old ReplicaSets beyond the history limit go away once scaled down.
        let limit = spec["revisionHistoryLimit"].as_i64().unwrap_or(10);
        let mut idle: Vec<&&Value> = old
            .iter()
            .filter(|rs| rs_replicas(rs) == 0 && int(&rs["status"]["replicas"]) == 0)
            .collect();
        idle.sort_by_key(|rs| revision(rs));
        let excess = idle.len() as i64 - limit;
        for rs in idle.iter().take(excess.max(0) as usize) {
            let _ = self.store.delete(
                &self.replicasets,
                &ns(rs),
                &name(rs),
                &DeleteOptions::default(),
                false,
            );
            changed = true;
        }

        // Status from the ReplicaSets as they are now.
        let Some(deploy_now) = self
            .store
            .get_shared(&self.deployments, &namespace, &name(deploy))
        else {
            return changed;
        };
        let mut names: Vec<String> = owned.iter().map(|rs| name(rs)).collect();
        names.push(new_name.clone());
        names.sort();
        names.dedup();
        let current_rs: Vec<Arc<Value>> = names
            .iter()
            .filter_map(|rs_name| {
                self.store
                    .get_shared(&self.replicasets, &namespace, rs_name)
            })
            .filter(|rs| controller_uid(rs) == Some(d_uid.as_str()))
            .collect();
        let sum =
            |field: &str| -> i64 { current_rs.iter().map(|rs| int(&rs["status"][field])).sum() };
        let new_now: &Value = current_rs
            .iter()
            .find(|rs| name(rs) == new_name)
            .map_or(new_rs, |rs| &**rs);
        let total_replicas = sum("replicas");
        let updated = int(&new_now["status"]["replicas"]);
        let ready = sum("readyReplicas");
        let available = sum("availableReplicas");
        let spec_total: i64 = current_rs
            .iter()
            .map(|rs| int(&rs["spec"]["replicas"]))
            .sum();
        // The generation this sync acted on: a newer one stored meanwhile (a template patched
        // after the work was taken) is not observed yet, and its change syncs it again.
        let mut status = json!({"observedGeneration": deploy["metadata"]["generation"]});
        for (key, value) in [
            ("replicas", total_replicas),
            ("updatedReplicas", updated),
            ("readyReplicas", ready),
            ("availableReplicas", available),
            ("unavailableReplicas", (spec_total - available).max(0)),
        ] {
            if value != 0 {
                status[key] = json!(value);
            }
        }
        let old_conditions = deploy_now["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let find = |t: &str| old_conditions.iter().find(|c| c["type"] == t).cloned();
        let now = now_rfc3339();
        let condition = |t: &str, s: &str, reason: &str, message: String| -> Value {
            match find(t) {
                Some(c) if c["status"] == s && c["reason"] == reason => c,
                Some(c) if c["status"] == s => {
                    json!({"type": t, "status": s, "reason": reason, "message": message,
                    "lastUpdateTime": now, "lastTransitionTime": c["lastTransitionTime"]})
                }
                _ => {
                    json!({"type": t, "status": s, "reason": reason, "message": message, "lastUpdateTime": now, "lastTransitionTime": now})
                }
            }
        };
        let available_condition = if available >= replicas - unavailable {
            condition(
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.".into(),
            )
        } else {
            condition(
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.".into(),
            )
        };
        let complete = updated == replicas
            && total_replicas == replicas
            && int(&new_now["status"]["availableReplicas"]) == replicas
            && int(&new_now["spec"]["replicas"]) == replicas;
        let previous = find("Progressing");
        let deadline = spec["progressDeadlineSeconds"].as_i64().unwrap_or(600);
        let progressing = if paused {
            condition(
                "Progressing",
                "Unknown",
                "DeploymentPaused",
                "Deployment is paused".into(),
            )
        } else if complete {
            condition(
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                format!("ReplicaSet \"{new_name}\" has successfully progressed."),
            )
        } else if created_new.is_some() {
            condition(
                "Progressing",
                "True",
                "NewReplicaSetCreated",
                format!("Created new replica set \"{new_name}\""),
            )
        } else {
            let stalled = previous.as_ref().is_some_and(|c| {
                c["reason"] == "ProgressDeadlineExceeded"
                    || c["lastUpdateTime"]
                        .as_str()
                        .and_then(seconds_since)
                        .is_some_and(|s| s > deadline)
            });
            let counts_changed = deploy_now["status"]["updatedReplicas"]
                != status["updatedReplicas"]
                || deploy_now["status"]["availableReplicas"] != status["availableReplicas"]
                || deploy_now["status"]["readyReplicas"] != status["readyReplicas"]
                || deploy_now["status"]["replicas"] != status["replicas"];
            if stalled && !counts_changed {
                condition(
                    "Progressing",
                    "False",
                    "ProgressDeadlineExceeded",
                    format!("ReplicaSet \"{new_name}\" has timed out progressing."),
                )
            } else if counts_changed
                || previous
                    .as_ref()
                    .is_none_or(|c| c["reason"] == "NewReplicaSetAvailable")
            {
                json!({"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
                    "message": format!("ReplicaSet \"{new_name}\" is progressing."), "lastUpdateTime": now,
                    "lastTransitionTime": previous.as_ref().filter(|c| c["status"] == "True").map_or(json!(now), |c| c["lastTransitionTime"].clone())})
            } else {
                previous.clone().unwrap_or_else(|| {
                    condition(
                        "Progressing",
                        "True",
                        "ReplicaSetUpdated",
                        format!("ReplicaSet \"{new_name}\" is progressing."),
                    )
                })
            }
        };
        status["conditions"] = json!([available_condition, progressing]);
        let new_revision =
            new_now["metadata"]["annotations"]["deployment.kubernetes.io/revision"].clone();
        let revision_moved = new_revision.is_string()
            && deploy_now["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                != new_revision;
        if !revision_moved && deploy_now["status"] == status {
            return changed;
        }
        let mut updated = Value::clone(&deploy_now);
        if revision_moved {
            if !updated["metadata"]["annotations"].is_object() {
                updated["metadata"]["annotations"] = json!({});
            }
            updated["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = new_revision;
        }
        updated["status"] = status;
        let written = self
            .store
            .update_shared(
                &self.deployments,
                &namespace,
                &name(deploy),
                updated,
                Part::Status,
                &controller_writes(),
            )
            .is_ok();
        changed | written
    }
}
