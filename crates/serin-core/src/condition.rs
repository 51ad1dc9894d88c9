//! A Canary's status conditions: `Promoted`, worded as Flagger words it, and the `Ready`,
//! `Reconciling` and `Stalled` conditions that kstatus (Flux's health checks), `kubectl wait` and
//! Argo CD read.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serin_api::{CanaryCondition, Phase};

/// Type of Flagger's condition: whether the last release was promoted.
pub const PROMOTED: &str = "Promoted";
/// Type of the condition that is `True` when no release is running and nothing blocks the Canary.
pub const READY: &str = "Ready";
/// Type of the condition that is `True` while the operator is initializing or running a release.
pub const RECONCILING: &str = "Reconciling";
/// Type of the condition that is `True` when the Canary needs a person: an invalid spec, a missing
/// object, or a release that failed and was rolled back.
pub const STALLED: &str = "Stalled";

/// Status (`True`/`False`/`Unknown`) and message of the Promoted condition in `phase`, for a target
/// of kind `kind`.
pub fn promoted_condition(phase: Phase, kind: &str) -> (&'static str, String) {
    match phase {
        Phase::Initialized => ("True", format!("{kind} initialization completed.")),
        Phase::Waiting | Phase::WaitingPromotion => ("Unknown", "Waiting for approval.".into()),
        Phase::Progressing => (
            "Unknown",
            "New revision detected, progressing canary analysis.".into(),
        ),
        Phase::Promoting => (
            "Unknown",
            "Canary analysis completed, starting primary rolling update.".into(),
        ),
        Phase::Finalising => (
            "Unknown",
            "Canary analysis completed, routing all traffic to primary.".into(),
        ),
        Phase::Succeeded => (
            "True",
            "Canary analysis completed successfully, promotion finished.".into(),
        ),
        Phase::Failed => (
            "False",
            format!("Canary analysis failed, {kind} scaled to zero."),
        ),
        Phase::Initializing | Phase::Terminating | Phase::Terminated => (
            "Unknown",
            format!("New {kind} detected, starting initialization."),
        ),
    }
}

/// Updates `conditions` for `phase`: the Promoted condition is rewritten only when its status or
/// reason changes, and its transition time moves only when the status changes.
pub fn set_promoted(conditions: &mut Vec<CanaryCondition>, phase: Phase, kind: &str, now: &Time) {
    let (status, message) = promoted_condition(phase, kind);
    let condition = Condition {
        type_: PROMOTED,
        status,
        reason: phase.as_str().to_string(),
        message,
        observed_generation: None,
    };
    upsert(conditions, condition, now);
}

/// What the operator knows about a Canary at the end of a tick, from which its kstatus
/// conditions follow.
#[derive(Clone, Debug)]
pub struct Health<'a> {
    /// The release phase, when the Canary has one.
    pub phase: Option<Phase>,
    /// The reason and message of what blocks the Canary (an invalid spec, a missing target,
    /// suspension), when something does.
    pub blocked: Option<(&'a str, &'a str)>,
    /// The `metadata.generation` these conditions describe.
    pub generation: Option<i64>,
    /// The kind of the target, for the messages.
    pub kind: &'a str,
}

/// Sets `Ready`, `Reconciling` and `Stalled` from `health`, following kstatus: exactly one of
/// them is `True` at a time (none while suspended), each carries the generation it describes,
/// and a condition's transition time moves only when its status changes.
pub fn set_health(conditions: &mut Vec<CanaryCondition>, health: &Health, now: &Time) {
    let condition = |type_, status, reason: &str, message: &str| Condition {
        type_,
        status,
        reason: reason.to_string(),
        message: message.to_string(),
        observed_generation: health.generation,
    };
    let (ready, reconciling, stalled) = match (health.blocked, health.phase) {
        // The user's suspension is not a problem to fix: nothing is stalled.
        (Some((reason, message)), _) if reason == crate::plan::reason::SUSPENDED => (
            condition(READY, "False", reason, message),
            condition(RECONCILING, "False", reason, message),
            condition(STALLED, "False", reason, message),
        ),
        (Some((reason, message)), _) => (
            condition(READY, "False", reason, message),
            condition(RECONCILING, "False", reason, message),
            condition(STALLED, "True", reason, message),
        ),
        (None, Some(Phase::Failed)) => {
            let (_, message) = promoted_condition(Phase::Failed, health.kind);
            let reason = Phase::Failed.as_str();
            (
                condition(READY, "False", reason, &message),
                condition(RECONCILING, "False", reason, &message),
                condition(STALLED, "True", reason, &message),
            )
        }
        (None, Some(phase @ (Phase::Initialized | Phase::Succeeded))) => {
            let (_, message) = promoted_condition(phase, health.kind);
            let reason = phase.as_str();
            (
                condition(READY, "True", reason, &message),
                condition(RECONCILING, "False", reason, &message),
                condition(STALLED, "False", reason, &message),
            )
        }
        (None, phase) => {
            let phase = phase.unwrap_or(Phase::Initializing);
            let (_, message) = promoted_condition(phase, health.kind);
            let reason = phase.as_str();
            (
                condition(READY, "False", reason, &message),
                condition(RECONCILING, "True", reason, &message),
                condition(STALLED, "False", reason, &message),
            )
        }
    };
    for condition in [ready, reconciling, stalled] {
        upsert(conditions, condition, now);
    }
}

/// One condition as computed, before it is merged into the status.
struct Condition {
    type_: &'static str,
    status: &'static str,
    reason: String,
    message: String,
    observed_generation: Option<i64>,
}

/// Writes `condition` into `conditions`, leaving an identical one untouched so that an unchanged
/// Canary causes no status write.
fn upsert(conditions: &mut Vec<CanaryCondition>, condition: Condition, now: &Time) {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(existing)
            if existing.status == condition.status
                && existing.reason == condition.reason
                && existing.message == condition.message
                && existing.observed_generation == condition.observed_generation => {}
        Some(existing) => {
            if existing.status != condition.status {
                existing.last_transition_time = Some(now.clone());
            }
            existing.status = condition.status.into();
            existing.reason = condition.reason;
            existing.message = condition.message;
            existing.observed_generation = condition.observed_generation;
            existing.last_update_time = Some(now.clone());
        }
        None => conditions.push(CanaryCondition {
            type_: condition.type_.into(),
            status: condition.status.into(),
            observed_generation: condition.observed_generation,
            last_update_time: Some(now.clone()),
            last_transition_time: Some(now.clone()),
            reason: condition.reason,
            message: condition.message,
        }),
    }
}
