//! Whether a Deployment has finished rolling out, and whether it still can.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Rollout state of a Deployment, as the release sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// Every updated replica the threshold asks for is available.
    Ready,
    /// Still rolling out; try again next tick. The text says what is pending.
    Waiting(String),
    /// It will not become ready (progress deadline passed); the release must fail.
    Stalled(String),
}

impl Readiness {
    /// Whether the Deployment is ready.
    pub fn is_ready(&self) -> bool {
        matches!(self, Readiness::Ready)
    }
}

/// Judges a Deployment's rollout like Flagger: generation observed, all replicas updated, no old
/// replicas left, and `ready_threshold` percent of the updated replicas available.
///
/// A rollout becomes [`Readiness::Stalled`] when the Deployment reports `ProgressDeadlineExceeded`,
/// or when its `Available=False/MinimumReplicasUnavailable` condition is older than
/// `progress_deadline_seconds` (the Canary's deadline) at `now`.
pub fn deployment_readiness(
    deployment: &Deployment,
    ready_threshold: i32,
    progress_deadline_seconds: i32,
    now: Timestamp,
) -> Readiness {
    let name = deployment.metadata.name.as_deref().unwrap_or("");
    let generation = deployment.metadata.generation.unwrap_or(0);
    let Some(status) = deployment.status.as_ref() else {
        return Readiness::Waiting(
            "waiting for rollout to finish: observed deployment generation less than desired generation"
                .into(),
        );
    };
    if generation > status.observed_generation.unwrap_or(0) {
        return Readiness::Waiting(
            "waiting for rollout to finish: observed deployment generation less than desired generation"
                .into(),
        );
    }
    let conditions = status.conditions.as_deref().unwrap_or(&[]);
    if conditions.iter().any(|c| {
        c.type_ == "Progressing" && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
    }) {
        return Readiness::Stalled(format!(
            "deployment {name:?} exceeded its progress deadline"
        ));
    }
    let past_deadline = conditions.iter().any(|c| {
        c.type_ == "Available"
            && c.status == "False"
            && c.reason.as_deref() == Some("MinimumReplicasUnavailable")
            && c.last_update_time.as_ref().is_some_and(|t| {
                t.0 + SignedDuration::from_secs(i64::from(progress_deadline_seconds)) < now
            })
    });
    let pending = |message: String| {
        if past_deadline {
            Readiness::Stalled(message)
        } else {
            Readiness::Waiting(message)
        }
    };

    let desired = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let updated = status.updated_replicas.unwrap_or(0);
    let current = status.replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    if updated < desired {
        return pending(format!(
            "waiting for rollout to finish: {updated} out of {desired} new replicas have been updated"
        ));
    }
    if current > updated {
        return pending(format!(
            "waiting for rollout to finish: {} old replicas are pending termination",
            current - updated
        ));
    }
    let needed = (i64::from(updated) * i64::from(ready_threshold) / 100) as i32;
    if available < needed {
        return pending(format!(
            "waiting for rollout to finish: {available} of {updated} (readyThreshold {ready_threshold}%) updated replicas are available"
        ));
    }
    Readiness::Ready
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(v: serde_json::Value) -> Deployment {
        serde_json::from_value(v).unwrap()
    }

    fn now() -> Timestamp {
        "2026-11-22T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn ready_when_every_updated_replica_is_available() {
        let d = deployment(json!({"metadata": {"name": "podinfo", "generation": 2},
            "spec": {"replicas": 2, "selector": {}, "template": {}},
            "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}}));
        assert_eq!(deployment_readiness(&d, 100, 600, now()), Readiness::Ready);
    }

    #[test]
    fn waiting_messages_match_flagger() {
        let cases = [
            (
                json!({"observedGeneration": 1}),
                "observed deployment generation less than desired generation",
            ),
            (
                json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 1}),
                "1 out of 2 new replicas have been updated",
            ),
            (
                json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 2}),
                "1 old replicas are pending termination",
            ),
            (
                json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 1}),
                "1 of 2 (readyThreshold 100%) updated replicas are available",
            ),
        ];
        for (status, expected) in cases {
            let d = deployment(json!({"metadata": {"name": "podinfo", "generation": 2},
                "spec": {"replicas": 2, "selector": {}, "template": {}}, "status": status}));
            assert_eq!(
                deployment_readiness(&d, 100, 600, now()),
                Readiness::Waiting(format!("waiting for rollout to finish: {expected}"))
            );
        }
    }

    #[test]
    fn ready_threshold_lowers_the_bar() {
        let d = deployment(json!({"metadata": {"name": "podinfo", "generation": 1},
            "spec": {"replicas": 4, "selector": {}, "template": {}},
            "status": {"observedGeneration": 1, "replicas": 4, "updatedReplicas": 4, "availableReplicas": 2}}));
        assert_eq!(deployment_readiness(&d, 50, 600, now()), Readiness::Ready);
        assert!(!deployment_readiness(&d, 75, 600, now()).is_ready());
    }

    #[test]
    fn progress_deadline_makes_waiting_final() {
        let exceeded = deployment(json!({"metadata": {"name": "podinfo", "generation": 1},
            "spec": {"replicas": 1, "selector": {}, "template": {}},
            "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "conditions": [
                {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]}}));
        assert_eq!(
            deployment_readiness(&exceeded, 100, 600, now()),
            Readiness::Stalled("deployment \"podinfo\" exceeded its progress deadline".into())
        );

        let unavailable_since = |t: &str| {
            deployment(json!({"metadata": {"name": "podinfo", "generation": 1},
                "spec": {"replicas": 1, "selector": {}, "template": {}},
                "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "conditions": [
                    {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable", "lastUpdateTime": t}]}}))
        };
        assert!(matches!(
            deployment_readiness(&unavailable_since("2026-11-22T11:59:00Z"), 100, 120, now()),
            Readiness::Waiting(_)
        ));
        assert_eq!(
            deployment_readiness(&unavailable_since("2026-11-22T11:57:00Z"), 100, 120, now()),
            Readiness::Stalled(
                "waiting for rollout to finish: 0 of 1 (readyThreshold 100%) updated replicas are available".into()
            )
        );
    }
}
