//! The `Promoted` status condition, worded as Flagger words it.

use serin_api::{CanaryCondition, Phase};

/// Type of the one condition a Canary carries.
pub const PROMOTED: &str = "Promoted";

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
pub fn set_promoted(
    conditions: &mut Vec<CanaryCondition>,
    phase: Phase,
    kind: &str,
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) {
    let (status, message) = promoted_condition(phase, kind);
    let reason = phase.as_str();
    match conditions.iter_mut().find(|c| c.type_ == PROMOTED) {
        Some(existing) if existing.status == status && existing.reason == reason => {}
        Some(existing) => {
            if existing.status != status {
                existing.last_transition_time = Some(now.clone());
            }
            existing.status = status.into();
            existing.reason = reason.into();
            existing.message = message;
            existing.last_update_time = Some(now.clone());
        }
        None => conditions.push(CanaryCondition {
            type_: PROMOTED.into(),
            status: status.into(),
            last_update_time: Some(now.clone()),
            last_transition_time: Some(now.clone()),
            reason: reason.into(),
            message,
        }),
    }
}
