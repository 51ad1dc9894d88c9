//! The observed state of a release that the operator writes into a Canary's status: its phase,
//! conditions, the last metric checks, the manual requests acted on and the analysis history.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Phase of a canary release, as Flagger names them.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Phase {
    /// First seen; the primary is being created.
    Initializing,
    /// The primary serves all traffic; waiting for a new revision.
    Initialized,
    /// A confirm-rollout gate holds the new revision.
    Waiting,
    /// The new revision is being analysed.
    Progressing,
    /// Analysis done; a confirm-promotion gate or a manual promote is awaited.
    WaitingPromotion,
    /// The primary is being updated to the new revision.
    Promoting,
    /// Traffic is back on the primary; the canary is drained next.
    Finalising,
    /// The new revision was promoted.
    Succeeded,
    /// The new revision was rolled back.
    Failed,
    /// The Canary is being deleted and its objects reverted.
    Terminating,
    /// Reverting after deletion finished.
    Terminated,
}

impl Phase {
    /// Whether a release is in flight in this phase (ticks run at every interval).
    pub fn is_in_flight(self) -> bool {
        matches!(
            self,
            Phase::Waiting
                | Phase::Progressing
                | Phase::WaitingPromotion
                | Phase::Promoting
                | Phase::Finalising
        )
    }

    /// The phase name as written in status.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Initializing => "Initializing",
            Phase::Initialized => "Initialized",
            Phase::Waiting => "Waiting",
            Phase::Progressing => "Progressing",
            Phase::WaitingPromotion => "WaitingPromotion",
            Phase::Promoting => "Promoting",
            Phase::Finalising => "Finalising",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
            Phase::Terminating => "Terminating",
            Phase::Terminated => "Terminated",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Observed state of a release, written only by the operator.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryStatus {
    /// Current phase of the release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Generation of the spec this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Traffic percentage on the canary, as last set by the operator.
    #[serde(default)]
    pub canary_weight: i32,
    /// Failed checks in the current run.
    #[serde(default)]
    pub failed_checks: i32,
    /// Iterations done in the current run (A/B and blue/green).
    #[serde(default)]
    pub iterations: i32,
    /// Revision (pod template hash) of the target when last synced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_spec: Option<String>,
    /// Revision last promoted to the primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_promoted_spec: Option<String>,
    /// Checksums of tracked ConfigMaps and Secrets, keyed `configmap/<name>` or `secret/<name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracked_configs: Option<BTreeMap<String, String>>,
    /// When a status field other than the bookkeeping times last changed.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::timestamp::seconds"
    )]
    pub last_transition_time: Option<Time>,
    /// `name=value` cookie pinning users to the canary in the current run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity_cookie: Option<String>,
    /// `name=value` cookie pinning users to the primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_session_affinity_cookie: Option<String>,
    /// Canary cookie of the previous run, expired by the router.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_session_affinity_cookie: Option<String>,
    /// Conditions: Flagger's `Promoted`, and `Ready`, `Reconciling` and `Stalled` as kstatus reads them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<CanaryCondition>,
    /// Index of the step being executed (steps strategy); equal to the step count when all are done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step_index: Option<i32>,
    /// When the current step, pause or timed wait started (to the microsecond, so a pause ends on
    /// time rather than up to a second late).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::timestamp::micros"
    )]
    pub step_start_time: Option<MicroTime>,
    /// Replicas the release serves with at full traffic, fixed when the run starts; the canary and
    /// (with dynamicStableScale) the primary are sized from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,
    /// When the last analysis tick ran (to the microsecond); the next one is due one interval
    /// later.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::timestamp::micros"
    )]
    pub last_tick_time: Option<MicroTime>,
    /// Since when a confirm-* gate has given no answer at all (timeouts, refused connections,
    /// retryable errors); past `progressDeadlineSeconds` the release is rolled back.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::timestamp::seconds"
    )]
    pub unanswered_gate_since: Option<Time>,
    /// The last result of each metric check in the current run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metric_checks: Vec<MetricCheckStatus>,
    /// When the current release (or its latest restart) started; its analyses are the runs
    /// started since.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::timestamp::micros"
    )]
    pub release_started_at: Option<MicroTime>,
    /// Every measurement of the current release's analyses and of the latest earlier ones, run by
    /// run (bounded by `measurementRetention` and `serin_api::limits`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub analysis_runs: Vec<crate::analysis_run::AnalysisRunStatus>,
    /// Manual requests (promote, abort, retry) already acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handled_requests: Option<HandledRequests>,
    /// Why the release cannot proceed (invalid spec, missing object), with the fix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Blue/green: intervals of the pre-promotion analysis passed in the current run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_promotion_passed: Option<i32>,
    /// Replica-ratio canary: the ready pods on each side, whose ratio is the traffic split the apex
    /// Service gives (`canaryWeight` is the weight asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_split: Option<PodSplit>,
}

/// Ready pods behind the apex Service of a replica-ratio canary, and the canary's share of them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSplit {
    /// Ready (available) pods of the canary, the target Deployment.
    pub canary: i32,
    /// Ready (available) pods of the primary.
    pub primary: i32,
    /// The canary's percentage of the ready pods, rounded to the nearest whole percent.
    pub canary_percent: i32,
}

/// A status condition, shaped like Flagger's.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryCondition {
    /// Condition type: `Promoted`, `Ready`, `Reconciling` or `Stalled`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// The `metadata.generation` the condition describes (`Ready`, `Reconciling`, `Stalled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the condition was last written.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::timestamp::seconds"
    )]
    pub last_update_time: Option<Time>,
    /// When `status` last changed.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::timestamp::seconds"
    )]
    pub last_transition_time: Option<Time>,
    /// The phase name, or what blocks the Canary (`InvalidSpec`, `TargetNotFound`, ...).
    pub reason: String,
    /// A human-readable explanation.
    #[serde(default)]
    pub message: String,
}

/// The last evaluation of one metric check.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricCheckStatus {
    /// Name of the metric in `analysis.metrics`.
    pub name: String,
    /// Value returned by the query; absent when there was no data or an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// Whether the value was accepted.
    pub passed: bool,
    /// What was checked, and why it failed.
    #[serde(default)]
    pub message: String,
    /// When it was evaluated.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::timestamp::seconds"
    )]
    pub time: Option<Time>,
}

/// Tokens of the manual requests already acted on; a request with a new token is acted on once.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HandledRequests {
    /// Token of the last handled `promote`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promote: Option<String>,
    /// When the last `promote` was acted on.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::timestamp::seconds"
    )]
    pub promoted_at: Option<Time>,
    /// Token of the last handled `promote --full`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promote_full: Option<String>,
    /// Token of the last handled `abort`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort: Option<String>,
    /// Token of the last handled `retry`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<String>,
    /// Token of the last handled `restart`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<String>,
}

impl CanaryStatus {
    /// Stores the latest result of a metric check, replacing the previous one of the same name.
    pub fn record_metric_check(&mut self, check: MetricCheckStatus) {
        match self.metric_checks.iter_mut().find(|c| c.name == check.name) {
            Some(existing) => *existing = check,
            None => self.metric_checks.push(check),
        }
    }
}
