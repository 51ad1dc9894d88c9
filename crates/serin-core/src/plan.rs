//! The data that goes into a decision (an [`Observation`]) and what comes out (a [`Decision`]).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::jiff::Timestamp;
use serin_api::{Canary, CanaryStatus, HookType, Phase};
use std::collections::BTreeMap;
use std::time::Duration;

/// Traffic split currently configured in the router.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Routes {
    /// Percent of traffic to the primary.
    pub primary: i32,
    /// Percent of traffic to the canary.
    pub canary: i32,
    /// Whether requests are copied to the canary.
    pub mirrored: bool,
}

impl Routes {
    /// All traffic on the primary, no mirroring.
    pub const PRIMARY_ONLY: Routes = Routes {
        primary: 100,
        canary: 0,
        mirrored: false,
    };
}

/// Everything the engine looks at for one canary: the resource, the workloads, the router, and the
/// results of checks run so far in this tick.
#[derive(Clone, Debug)]
pub struct Observation {
    /// The Canary, with its current status and annotations.
    pub canary: Canary,
    /// The target Deployment (`spec.targetRef`), if it exists.
    pub target: Option<Deployment>,
    /// The `<target>-primary` Deployment, if it exists.
    pub primary: Option<Deployment>,
    /// The pod-template hash of `target` ([`crate::revision::pod_template_hash`]), when the caller
    /// kept it from an earlier look at the same version of the target; computed when `None`.
    pub target_hash: Option<String>,
    /// Checksums of the ConfigMaps and Secrets the target uses (see [`crate::revision::tracked_configs`]),
    /// or why they cannot be read.
    pub configs: Result<BTreeMap<String, String>, String>,
    /// The weights in the router, if the routing objects exist.
    pub routes: Option<Routes>,
    /// `minReplicas` of the target's HorizontalPodAutoscaler, when `autoscalerRef` is set.
    pub autoscaler_min_replicas: Option<i32>,
    /// A problem the controller met while observing (for example an unusable selector), shown to
    /// the user instead of acting.
    pub blocked: Option<String>,
    /// The router has not taken the routes Serin last wrote yet (a Gateway API parent that has not
    /// accepted the HTTPRoute's generation).
    pub routes_pending: Option<RoutesPending>,
    /// Results of the checks already run in this tick, in the order they were requested.
    pub verdicts: Vec<Verdict>,
}

impl Observation {
    /// An observation of `canary` alone: no workloads, no routes, no configs, no verdicts.
    pub fn new(canary: Canary) -> Self {
        Observation {
            canary,
            target: None,
            primary: None,
            target_hash: None,
            configs: Ok(BTreeMap::new()),
            routes: None,
            autoscaler_min_replicas: None,
            blocked: None,
            routes_pending: None,
            verdicts: Vec::new(),
        }
    }
}

/// Routes written but not yet taken by the router.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutesPending {
    /// When Serin wrote them, if known.
    pub written: Option<Timestamp>,
    /// What to tell the user if the wait lasts (which Gateway, what it says).
    pub message: String,
}

/// How long a router may take to take written routes before the Canary says it waits on it.
pub const ROUTES_ACCEPTANCE_GRACE: Duration = Duration::from_secs(30);

/// A hook call or metric query the engine needs answered before it can finish the tick.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Check {
    /// Call webhook `name` with `phase` in the payload.
    Hook {
        /// Name of the webhook in `analysis.webhooks`.
        name: String,
        /// Its type.
        hook_type: HookType,
        /// Phase sent in the payload.
        phase: Phase,
    },
    /// Run the query of metric `name` and report its value.
    Metric {
        /// Name of the metric in `analysis.metrics`.
        name: String,
    },
    /// Take one measurement of metric `name` of the analysis step at `step`, or of the
    /// background analysis.
    Measure {
        /// Index of the analysis step in `analysis.steps`; `None` for `analysis.backgroundAnalysis`.
        step: Option<usize>,
        /// Name of the metric in that step's `analysis.metrics`.
        name: String,
    },
}

/// One measurement of an analysis metric, judged by its conditions (or thresholdRange).
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    /// Successful, Failed, Inconclusive, or Error when it could not be taken or judged.
    pub phase: serin_api::AnalysisPhase,
    /// The result as the conditions saw it, shortened for the status.
    pub value: Option<String>,
    /// The error, or why it was judged as it was.
    pub message: Option<String>,
}

/// What a metric query returned.
#[derive(Clone, Debug, PartialEq)]
pub enum MetricReading {
    /// A single value.
    Value(f64),
    /// An empty result (or NaN): typically no traffic.
    NoData,
    /// The query could not run (provider unreachable, template missing, render error, ...).
    Error(String),
}

/// The result of a check.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// A webhook answered with success (status ≤ 202), or failed with this message.
    Hook(Result<(), String>),
    /// A webhook gave no answer after its retries (timeouts, refused or closed connections,
    /// retryable statuses), with this message; a gate that stays unanswered ends the release at
    /// `progressDeadlineSeconds`, a gate that answers "closed" holds it as long as it says so.
    HookUnanswered(String),
    /// A metric query's result; the engine judges it against the metric's range.
    Metric(MetricReading),
    /// A measurement of an analysis step's metric, already judged.
    Measurement(Measurement),
}

/// A check and its result, fed back into the next call of [`crate::decide()`].
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// The check that was run.
    pub check: Check,
    /// What it returned.
    pub outcome: Outcome,
}

/// What the engine needs next.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Run this check, append its [`Verdict`] to the observation, and decide again.
    Check(Check),
    /// The tick is decided: carry out the plan.
    Plan(Box<Plan>),
}

/// Kind of a Kubernetes event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Progress.
    Normal,
    /// A problem or a halt.
    Warning,
}

/// The reasons of the events Serin records, one per kind of thing that happened, so that for
/// example `kubectl get events --field-selector reason=RolledBack` lists every rollback. The
/// messages keep Flagger's texts; only the reason (Flagger's is always `Synced`) says more.
pub mod reason {
    /// The Canary's spec failed validation; the message lists every problem and its fix.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// The target Deployment does not exist.
    pub const TARGET_NOT_FOUND: &str = "TargetNotFound";
    /// A ConfigMap or Secret the target uses could not be read.
    pub const CONFIG_NOT_FOUND: &str = "ConfigNotFound";
    /// The controller met a problem while observing the canary (for example an unusable selector).
    pub const BLOCKED: &str = "Blocked";
    /// The canary is suspended (`spec.suspend`), so nothing is done until it is resumed.
    pub const SUSPENDED: &str = "Suspended";
    /// Initialization is under way: the primary is being created or is not ready yet.
    pub const INITIALIZING: &str = "Initializing";
    /// Initialization finished: the primary serves all traffic and the target is scaled to zero.
    pub const INITIALIZED: &str = "Initialized";
    /// The target changed: a new revision starts or restarts a release, or a revert to the promoted
    /// revision stops one.
    pub const NEW_REVISION: &str = "NewRevision";
    /// The analysis moved forward: it started, a check or gate passed, the canary weight advanced,
    /// or a step or iteration completed.
    pub const PROGRESSING: &str = "Progressing";
    /// The release waits: a workload is not ready, a pause or gate holds it, or a side needs more
    /// available pods before it may take traffic.
    pub const WAITING: &str = "Waiting";
    /// A metric or webhook check failed, which counts one failed check.
    pub const CHECK_FAILED: &str = "CheckFailed";
    /// The new version is being promoted: its template is copied to the primary and traffic is
    /// switched (blue/green) or returned to the primary.
    pub const PROMOTING: &str = "Promoting";
    /// The promotion completed: the primary runs the new version and the canary is scaled down.
    pub const PROMOTED: &str = "Promoted";
    /// The primary failed to roll out the promoted version, so traffic stays on the canary.
    pub const PROMOTION_FAILED: &str = "PromotionFailed";
    /// The release is rolled back (failed checks, a rollback webhook, a deadline or an abort):
    /// traffic returns to the primary and the canary is scaled down.
    pub const ROLLED_BACK: &str = "RolledBack";
    /// A manual request (promote, promote-full, abort, retry) was acted on or acknowledged.
    pub const REQUEST_HANDLED: &str = "RequestHandled";
    /// The analysis was skipped (`skipAnalysis`) and the new version promoted at once.
    pub const SKIPPED: &str = "Skipped";
    /// Recorded by the controller: the Canary is being deleted and its objects restored.
    pub const TERMINATING: &str = "Terminating";
    /// Recorded by the controller: the Canary's deletion finished.
    pub const TERMINATED: &str = "Terminated";
    /// Recorded by the controller: a reconcile failed (for example an API error) and is retried.
    pub const RECONCILE_FAILED: &str = "ReconcileFailed";

    /// Every reason above, the engine's and the controller's.
    pub const ALL: &[&str] = &[
        INVALID_SPEC,
        TARGET_NOT_FOUND,
        CONFIG_NOT_FOUND,
        BLOCKED,
        SUSPENDED,
        INITIALIZING,
        INITIALIZED,
        NEW_REVISION,
        PROGRESSING,
        WAITING,
        CHECK_FAILED,
        PROMOTING,
        PROMOTED,
        PROMOTION_FAILED,
        ROLLED_BACK,
        REQUEST_HANDLED,
        SKIPPED,
        TERMINATING,
        TERMINATED,
        RECONCILE_FAILED,
    ];
}

/// An event to record on the Canary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Normal or Warning.
    pub type_: EventType,
    /// What happened, in one CamelCase word: one of the constants in [`reason`].
    pub reason: &'static str,
    /// The human-readable text.
    pub message: String,
}

/// Severity of an alert sent to AlertProviders.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Progress.
    Info,
    /// Attention needed (a gate is waiting).
    Warn,
    /// A release failed.
    Error,
}

/// A notification for the canary's AlertProviders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alert {
    /// How serious it is.
    pub severity: Severity,
    /// The text.
    pub message: String,
    /// Whether to attach the canary's target, threshold, deadline and routing fields.
    pub with_metadata: bool,
}

/// A change to make in the cluster. Every action is idempotent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create `<target>-primary` (and `-primary` copies of tracked configs) if missing; with
    /// `sync_template`, also bring an existing primary's template in line with the target (used
    /// only while initializing, when the target is the stable version).
    EnsurePrimary {
        /// Update the primary's pod template to the target's.
        sync_template: bool,
    },
    /// Create or update the Services and routing objects (VirtualService, DestinationRules),
    /// keeping the weights currently set.
    EnsureRouting,
    /// Set the target Deployment's `spec.replicas`.
    ScaleTarget(i32),
    /// Set the primary Deployment's `spec.replicas` (dynamic stable scale).
    ScalePrimary(i32),
    /// Write the router's weights.
    SetRoutes(Routes),
    /// Copy the target's template (and tracked configs) to the primary, starting its rolling update;
    /// `replicas` is set when no autoscaler owns the primary's replica count.
    Promote {
        /// Replica count for the primary.
        replicas: Option<i32>,
    },
    /// Copy autoscaler changes from the target's HPA to the primary's.
    SyncPrimaryAutoscaler,
    /// Call every webhook of this type with `phase`, without waiting on the outcome (post-rollout).
    NotifyHooks {
        /// Which hooks.
        hook_type: HookType,
        /// Phase sent in the payload.
        phase: Phase,
    },
}

/// The outcome of one tick: what to change, the new status, what to tell the user, when to come back.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Plan {
    /// Changes to make, in order.
    pub actions: Vec<Action>,
    /// The status to write (only if it differs from the current one).
    pub status: CanaryStatus,
    /// Events to record.
    pub events: Vec<Event>,
    /// Alerts to send.
    pub alerts: Vec<Alert>,
    /// When to reconcile again even without a change; `None` waits for the next change.
    pub requeue_after: Option<Duration>,
    /// Whether, until `requeue_after` has passed, the next decision ignores the target's and the
    /// primary's status and metadata: a release in flight (or initializing) reads them only when
    /// its tick is due, unless it splits traffic by ready pods. Their spec changes still count.
    pub workload_status_waits: bool,
}
