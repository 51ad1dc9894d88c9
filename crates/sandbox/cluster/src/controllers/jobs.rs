//! The Job controller: runs pods to completion, retries up to backoffLimit, and reports the Job's end.

use super::objects::*;
use super::state::*;
use serde_json::{Value, json};
use serin_sandbox_apiserver::store::{DeleteOptions, now_rfc3339};

impl Controllers {
    /// The Job controller: runs pods until `completions` succeed (at most `parallelism` at a
    /// time), or until more than `backoffLimit` failed.
    pub(crate) fn sync_jobs(&mut self) -> bool {
        let mut changed = false;
        let jobs = self.all(&self.jobs);
        if jobs.is_empty() {
            return false;
        }
        let pods = self.all(&self.pods);
        let pods_by_owner = by_controller(&pods);
        for job in jobs {
            if job["metadata"]["deletionTimestamp"].is_string() {
                continue;
            }
            let finished = job["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| {
                    (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True"
                });
            if finished {
                continue;
            }
            let job_uid = uid(&job);
            let owned: Vec<&Value> = pods_by_owner
                .get(job_uid.as_str())
                .into_iter()
                .flatten()
                .copied()
                .collect();
            let phase_count = |phase: &str| {
                owned
                    .iter()
                    .filter(|p| p["status"]["phase"] == phase)
                    .count() as i64
            };
            let (succeeded, failed) = (phase_count("Succeeded"), phase_count("Failed"));
            let active: Vec<&&Value> = owned
                .iter()
                .filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
                .filter(|p| !p["metadata"]["deletionTimestamp"].is_string())
                .collect();
            let spec = &job["spec"];
            let completions = spec["completions"].as_i64().unwrap_or(1);
            let parallelism = spec["parallelism"].as_i64().unwrap_or(1);
            let backoff_limit = spec["backoffLimit"].as_i64().unwrap_or(6);
            let now = now_rfc3339();
            let mut status = json!({
                "startTime": job["status"]["startTime"].as_str().unwrap_or(&now),
                "active": active.len(), "succeeded": succeeded, "failed": failed,
                "ready": active.iter().filter(|p| is_ready(p)).count(),
                "terminating": 0, "uncountedTerminatedPods": {},
            });
            let condition = |kind: &str, reason: &str, message: &str| {
                json!({"type": kind, "status": "True", "reason": reason, "message": message,
                    "lastProbeTime": now, "lastTransitionTime": now})
            };
            if succeeded >= completions {
                status["completionTime"] = json!(now);
                status["conditions"] = json!([
                    condition(
                        "SuccessCriteriaMet",
                        "CompletionsReached",
                        "Reached expected number of succeeded pods"
                    ),
                    condition(
                        "Complete",
                        "CompletionsReached",
                        "Reached expected number of succeeded pods"
                    ),
                ]);
                record_event(
                    &self.store,
                    &self.events,
                    &job,
                    "Job",
                    "job-controller",
                    "Completed",
                    "Job completed".into(),
                );
            } else if failed > backoff_limit {
                status["conditions"] = json!([
                    condition(
                        "FailureTarget",
                        "BackoffLimitExceeded",
                        "Job has reached the specified backoff limit"
                    ),
                    condition(
                        "Failed",
                        "BackoffLimitExceeded",
                        "Job has reached the specified backoff limit"
                    ),
                ]);
                for pod in &active {
                    let _ = self.store.delete(
                        &self.pods,
                        &ns(pod),
                        &name(pod),
                        &DeleteOptions::default(),
                        false,
                    );
                }
                status["active"] = json!(0);
                record_warning(
                    &self.store,
                    &self.events,
                    &job,
                    "Job",
                    "job-controller",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit".into(),
                );
            } else {
                let wanted = parallelism.min(completions - succeeded) - active.len() as i64;
                for _ in 0..wanted.max(0) {
                    let template = &spec["template"];
                    let labels = template["metadata"]["labels"].clone();
                    if self
                        .create_owned_pod(&job, "job-controller", labels, template["spec"].clone())
                        .is_ok()
                    {
                        status["active"] = json!(int(&status["active"]) + 1);
                    }
                }
            }
            if let Some(m) = status.as_object_mut() {
                m.retain(|k, v| {
                    !(matches!(k.as_str(), "active" | "succeeded" | "failed") && v == &json!(0))
                });
            }
            changed |= self.write_status(&self.jobs, &job, status);
        }
        changed
    }
}
