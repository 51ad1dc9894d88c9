//! The `job` metric of an analysis: each measurement runs the template's Job in the Canary's
//! namespace, owned by the Canary, and waits for it to end: Complete passes, Failed fails. The
//! Job is deleted once it has ended, so only the measurement stays (in the Canary's status).

use k8s_openapi::api::batch::v1::Job;
use kube::api::{DeleteParams, PostParams, PropagationPolicy};
use kube::runtime::wait::await_condition;
use kube::{Api, Client};
use serde_json::{Value, json};
use serin_api::AnalysisPhase;
use serin_core::Measurement;
use sha2::{Digest, Sha256};
use std::time::Duration;

/// Longest a job metric's Job may run before its measurement is an error (and the Job is deleted).
pub const MAX_JOB_METRIC_DURATION: Duration = Duration::from_secs(10 * 60);

/// A Job to run for one measurement.
pub struct JobRun {
    /// The Job, ready to create.
    pub job: Value,
    /// How long to wait for it to end.
    pub limit: Duration,
}

/// The name of the Job of measurement `number` of `metric` in the release started at
/// `release` of the Canary `canary` (name and uid): readable, unique, and the same after an
/// operator restart, so the measurement finds the Job it had started.
pub fn job_name(
    canary: (&str, &str),
    release: &str,
    step: Option<usize>,
    metric: &str,
    number: i32,
) -> String {
    let digest = Sha256::digest(format!("{}/{release}/{step:?}/{metric}/{number}", canary.1));
    let suffix: String = digest.iter().take(5).map(|b| format!("{b:02x}")).collect();
    let mut prefix = format!("{}-{metric}", canary.0);
    prefix.truncate(52);
    let prefix = prefix.trim_end_matches(['-', '.']);
    format!("{prefix}-{suffix}")
}

/// The Job object for `spec` (the template's Job spec with its placeholders filled in).
pub fn job_object(
    name: &str,
    namespace: &str,
    owner: Value,
    metadata: Option<&serin_api::CustomMetadata>,
    canary: &str,
    metric: &str,
    spec: Value,
) -> Value {
    let mut labels = json!({});
    let mut annotations = json!({});
    if let Some(metadata) = metadata {
        for (k, v) in metadata.labels.iter().flatten() {
            labels[k] = json!(v);
        }
        for (k, v) in metadata.annotations.iter().flatten() {
            annotations[k] = json!(v);
        }
    }
    labels["serin.dev/canary"] = json!(canary);
    labels["serin.dev/metric"] = json!(metric);
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name, "namespace": namespace, "labels": labels,
            "annotations": annotations, "ownerReferences": [owner],
        },
        "spec": spec,
    })
}

/// How a Job ended, if it has: `Complete` or `Failed`, and the condition's message.
fn ended(job: &Job) -> Option<(bool, String)> {
    job.status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .map(|c| {
            (
                c.type_ == "Complete",
                c.message
                    .clone()
                    .unwrap_or_else(|| c.reason.clone().unwrap_or_default()),
            )
        })
}

fn error(message: String) -> Measurement {
    Measurement {
        phase: AnalysisPhase::Error,
        value: None,
        message: Some(message),
    }
}

/// Runs `run` and measures its outcome; the Job is deleted afterwards whatever happened.
pub async fn measure_with_job(client: Client, run: JobRun) -> Measurement {
    let namespace = run.job["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let name = run.job["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let jobs: Api<Job> = Api::namespaced(client, &namespace);
    let job: Job = match serde_json::from_value(run.job) {
        Ok(job) => job,
        Err(e) => return error(format!("the Job is not a batch/v1 Job: {e}")),
    };
    match jobs.create(&PostParams::default(), &job).await {
        Ok(_) => {}
        // Started by this measurement before the operator restarted: wait for that one.
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => return error(format!("could not create Job {name}: {e}")),
    }
    let finished = |job: Option<&Job>| job.is_some_and(|j| ended(j).is_some());
    let waited =
        tokio::time::timeout(run.limit, await_condition(jobs.clone(), &name, finished)).await;
    let measurement = match waited {
        Ok(Ok(Some(job))) => match ended(&job) {
            Some((true, _)) => Measurement {
                phase: AnalysisPhase::Successful,
                value: Some("Complete".into()),
                message: None,
            },
            Some((false, why)) => Measurement {
                phase: AnalysisPhase::Failed,
                value: Some("Failed".into()),
                message: Some(format!("Job {name} failed: {why}")),
            },
            None => error(format!("Job {name} has not ended")),
        },
        Ok(Ok(None)) => error(format!("Job {name} was deleted before it ended")),
        Ok(Err(e)) => error(format!("watching Job {name}: {e}")),
        Err(_) => error(format!(
            "Job {name} did not end within {}s; it is deleted (set its spec.activeDeadlineSeconds lower, or make it end sooner)",
            run.limit.as_secs()
        )),
    };
    let delete = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    if let Err(e) = jobs.delete(&name, &delete).await {
        tracing::warn!(job = %name, namespace = %namespace, "could not delete a job metric's Job: {e}");
    }
    measurement
}

/// How long to wait for a Job with `spec`: its `activeDeadlineSeconds` (plus a little for the
/// Job controller to report it), at most [`MAX_JOB_METRIC_DURATION`].
pub fn wait_limit(spec: &Value) -> Duration {
    spec["activeDeadlineSeconds"]
        .as_u64()
        .map(|s| Duration::from_secs(s + 30))
        .unwrap_or(MAX_JOB_METRIC_DURATION)
        .min(MAX_JOB_METRIC_DURATION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_names_are_short_distinct_and_stable() {
        let a = job_name(("podinfo", "uid-1"), "t1", Some(1), "smoke", 1);
        assert_eq!(a, job_name(("podinfo", "uid-1"), "t1", Some(1), "smoke", 1));
        assert_ne!(a, job_name(("podinfo", "uid-1"), "t1", Some(1), "smoke", 2));
        assert_ne!(a, job_name(("podinfo", "uid-1"), "t2", Some(1), "smoke", 1));
        assert!(a.starts_with("podinfo-smoke-"));
        let long = job_name((&"c".repeat(63), "u"), "t", None, &"m".repeat(63), 1);
        assert!(long.len() <= 63, "{long}");
    }

    #[test]
    fn the_wait_follows_the_jobs_deadline_within_the_limit() {
        assert_eq!(
            wait_limit(&json!({"activeDeadlineSeconds": 30})),
            Duration::from_secs(60)
        );
        assert_eq!(wait_limit(&json!({})), MAX_JOB_METRIC_DURATION);
        assert_eq!(
            wait_limit(&json!({"activeDeadlineSeconds": 99999})),
            MAX_JOB_METRIC_DURATION
        );
    }
}
