//! The kubelet: starts scheduled pods through the runtime and reports their health, restarts and end.

use super::objects::*;
use super::state::*;
use crate::pod_runtime::{PodHealth, PodStart, Termination};
use serde_json::{Value, json};
use serin_sandbox_apiserver::store::{Part, now_rfc3339};
use std::time::Instant;

/// `status` with the Ready and ContainersReady conditions and the container statuses set from
/// `health`; a condition's lastTransitionTime only moves when its status flips.
pub(crate) fn with_health(status: &Value, health: &PodHealth, now: &str) -> Value {
    let mut status = status.clone();
    let flag = if health.ready { "True" } else { "False" };
    for condition in status["conditions"].as_array_mut().into_iter().flatten() {
        if condition["type"] == "Ready" || condition["type"] == "ContainersReady" {
            if condition["status"] != flag {
                condition["lastTransitionTime"] = json!(now);
            }
            condition["status"] = json!(flag);
            if let Some(c) = condition.as_object_mut() {
                if health.ready {
                    c.remove("reason");
                    c.remove("message");
                } else {
                    c.insert("reason".into(), json!("ContainersNotReady"));
                    c.insert("message".into(), json!("containers with unready status"));
                }
            }
        }
    }
    for container in status["containerStatuses"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        container["ready"] = json!(health.ready);
        container["restartCount"] = json!(health.restarts);
    }
    status
}

/// The status of a pod whose app ended: Succeeded on exit 0, else Failed, with each container
/// terminated as the kubelet reports it.
pub(crate) fn finished_status(pod: &Value, ended: &Termination) -> Value {
    let now = now_rfc3339();
    let mut status = pod["status"].clone();
    status["phase"] = json!(if ended.exit_code == 0 {
        "Succeeded"
    } else {
        "Failed"
    });
    let started = pod["status"]["startTime"].clone();
    for container in status["containerStatuses"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        container["ready"] = json!(false);
        container["started"] = json!(false);
        container["state"] = json!({"terminated": {"exitCode": ended.exit_code, "reason": ended.reason,
            "message": (!ended.message.is_empty()).then_some(&ended.message),
            "startedAt": started, "finishedAt": now}});
    }
    for condition in status["conditions"].as_array_mut().into_iter().flatten() {
        if condition["type"] == "Ready" || condition["type"] == "ContainersReady" {
            condition["status"] = json!("False");
            condition["reason"] = json!("PodCompleted");
            condition["lastTransitionTime"] = json!(now);
        }
    }
    status
}

impl Controllers {
    /// The kubelet: looks at the pods that changed, those waiting to become Ready and, every
    /// [`RUNTIME_POLL`], every pod it started, whose runtime may have news of it.
    pub(crate) fn kubelet(&mut self) -> bool {
        let mut changed = false;
        // A pod deleted without finalizers leaves the store at once; its runtime still has to stop it.
        for gone in std::mem::take(&mut self.pod_index.gone) {
            self.ready_at.remove(&gone);
            if let Some(pod) = self.started.remove(&gone) {
                self.runtime.stop(&pod);
            }
        }
        changed |= self.schedule_pending();
        let mut visit = std::mem::take(&mut self.pod_index.dirty);
        visit.extend(self.ready_at.keys().cloned());
        let now = Instant::now();
        if now >= self.next_runtime_poll && self.runtime.changes_pods_on_its_own() {
            visit.extend(self.started.keys().cloned());
            self.next_runtime_poll = now + RUNTIME_POLL;
        }
        let pods = self.pod_index.sorted(visit.iter());
        for pod in pods {
            let pod_uid = uid(&pod);
            if pod["metadata"]["deletionTimestamp"].is_string() {
                self.started.remove(&pod_uid);
                self.runtime.stop(&pod);
                let mut released = Value::clone(&pod);
                released["metadata"]["finalizers"] = json!([]);
                let _ = self.store.update_shared(
                    &self.pods,
                    &ns(&pod),
                    &name(&pod),
                    released,
                    Part::Main,
                    &controller_writes(),
                );
                changed = true;
                continue;
            }
            if pod["spec"]["nodeName"].is_null() {
                // Bound (or still Pending) by `schedule_pending` above; the kubelet sees it next pass.
                continue;
            }
            if matches!(
                pod["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            ) {
                continue;
            }
            if pod["status"]["phase"] == "Running"
                && let Some(ended) = self.runtime.terminated(&pod)
            {
                changed |= self.write_status(&self.pods, &pod, finished_status(&pod, &ended));
                continue;
            }
            if pod["status"]["phase"] == "Running" {
                self.ready_at.remove(&pod_uid);
                if let Some(health) = self.runtime.health(&pod) {
                    let status = with_health(&pod["status"], &health, &now_rfc3339());
                    changed |= self.write_status(&self.pods, &pod, status);
                }
                continue;
            }
            let containers: Vec<String> = pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| c["name"].as_str().unwrap_or_default().to_string())
                .collect();
            let images: Vec<String> = pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| c["image"].as_str().unwrap_or_default().to_string())
                .collect();
            let start = match self.ready_at.get(&pod_uid) {
                Some(at) => PodStart::ReadyAfter(at.saturating_duration_since(Instant::now())),
                None => {
                    let start = self.runtime.start(&pod);
                    self.started.insert(pod_uid.clone(), pod.clone());
                    if let PodStart::ReadyAfter(delay) = &start {
                        self.ready_at
                            .insert(pod_uid.clone(), Instant::now() + *delay);
                    }
                    start
                }
            };
            let now = now_rfc3339();
            let status = match start {
                PodStart::ReadyAfter(left) if left.is_zero() => {
                    self.next_ip += 1;
                    let ip = format!("10.244.{}.{}", self.next_ip / 250, self.next_ip % 250 + 1);
                    let statuses: Vec<Value> = containers.iter().zip(&images).map(|(c, i)| json!({
                        "name": c, "image": i, "imageID": i, "ready": true, "started": true, "restartCount": 0,
                        "state": {"running": {"startedAt": now}}})).collect();
                    let conditions: Vec<Value> =
                        ["PodScheduled", "Initialized", "ContainersReady", "Ready"]
                            .iter()
                            .map(
                                |t| json!({"type": t, "status": "True", "lastTransitionTime": now}),
                            )
                            .collect();
                    let mut status = json!({
                        "phase": "Running", "hostIP": "127.0.0.1", "podIP": ip, "podIPs": [{"ip": ip}], "startTime": now,
                        "qosClass": "BestEffort",
                        "conditions": conditions,
                        "containerStatuses": statuses
                    });
                    serin_sandbox_apiserver::patch::merge_patch(
                        &mut status,
                        &self.runtime.running_status(&pod),
                    );
                    match self.runtime.health(&pod) {
                        Some(health) => with_health(&status, &health, &now),
                        None => status,
                    }
                }
                PodStart::ReadyAfter(_) => continue,
                PodStart::Waiting { reason, message } => {
                    let statuses: Vec<Value> = containers.iter().zip(&images).map(|(c, i)| json!({
                        "name": c, "image": i, "imageID": "", "ready": false, "started": false, "restartCount": 0,
                        "state": {"waiting": {"reason": reason, "message": message}}})).collect();
                    json!({
                        "phase": "Pending", "hostIP": "127.0.0.1", "qosClass": "BestEffort",
                        "startTime": pod["status"]["startTime"].as_str().unwrap_or(&now),
                        "conditions": [
                            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                            {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": format!("containers with unready status: [{}]", containers.join(" ")), "lastTransitionTime": pod["status"]["conditions"][1]["lastTransitionTime"].as_str().unwrap_or(&now)}
                        ],
                        "containerStatuses": statuses
                    })
                }
            };
            let mut comparable_old = pod["status"].clone();
            let mut comparable_new = status.clone();
            for s in [&mut comparable_old, &mut comparable_new] {
                if let Some(m) = s.as_object_mut() {
                    m.remove("startTime");
                    m.remove("conditions");
                }
            }
            if comparable_old != comparable_new || pod["status"]["phase"] != status["phase"] {
                changed |= self.write_status(&self.pods, &pod, status);
            }
        }
        changed
    }
}
