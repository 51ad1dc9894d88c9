//! The release state machine: one call decides one tick of one canary.
//!
//! This module holds the tick (what was observed, the plan being built) and its shared rules;
//! `phases` runs a tick from initialization to the strategy of a release in flight, `gates` the
//! analysis and the approval webhooks, `canary`, `steps`, `ab_testing` and `blue_green` one
//! strategy each, then `promotion` and `rollback` end a release.

mod ab_testing;
mod affinity;
mod analysis_step;
mod blue_green;
mod canary;
mod gates;
mod phases;
mod promotion;
mod replica_ratio;
mod rollback;
mod steps;

use crate::condition::{Health, set_health, set_promoted};
use crate::metrics::judge_routed_by;
use crate::plan::{
    Action, Alert, Check, Decision, Event, EventType, MetricReading, Observation, Outcome, Plan,
    Routes, Severity, reason,
};
use crate::readiness::{Readiness, deployment_readiness};
use crate::replicas::{
    CanaryScale, TrafficRoutedInput, scale_from_zero, traffic_routed_replicas,
    traffic_weight_to_replicas, weighted_split,
};
use crate::revision::pod_template_hash;
use crate::weights::{max_weight, next_step_weight};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serin_api::duration::parse_pause_duration;
use serin_api::{
    ABORT_ANNOTATION, Canary, CanaryAnalysis, CanaryStatus, CanaryWebhook, HookType,
    MetricCheckStatus, PROMOTE_ANNOTATION, PROMOTE_FULL_ANNOTATION, Phase, RESTART_ANNOTATION,
    RETRY_ANNOTATION, Strategy,
};
use std::collections::BTreeMap;
use std::time::Duration;

/// Decides one tick of a canary at time `now`.
///
/// Returns [`Decision::Check`] when a hook or metric must be evaluated first: run it, append the
/// verdict to `observation.verdicts` and call again. Otherwise returns the [`Plan`] for this tick.
/// The function is pure: the same observation and time always give the same decision.
pub fn decide(observation: &Observation, now: Timestamp) -> Decision {
    let mut tick = Tick::new(observation, now);
    match tick.run() {
        Err(Halt::Check(check)) => Decision::Check(check),
        Ok(()) | Err(Halt::Done) => Decision::Plan(Box::new(tick.finish())),
    }
}

/// Why the tick stopped early.
enum Halt {
    /// A check result is needed.
    Check(Check),
    /// The tick is decided.
    Done,
}

type Step = Result<(), Halt>;

/// Manual requests whose token has not been handled yet.
#[derive(Default)]
struct Pending {
    promote: Option<String>,
    promote_full: Option<String>,
    abort: Option<String>,
    retry: Option<String>,
    restart: Option<String>,
}

impl Pending {
    fn any(&self) -> bool {
        self.promote.is_some()
            || self.promote_full.is_some()
            || self.abort.is_some()
            || self.retry.is_some()
            || self.restart.is_some()
    }
}

/// A kind of manual request.
#[derive(Clone, Copy)]
enum Request {
    Promote,
    PromoteFull,
    Abort,
    Retry,
    Restart,
}

/// One side of the traffic split.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// `<target>-primary`, the stable version.
    Primary,
    /// The target Deployment, the version under analysis.
    Canary,
}

/// What caused a rollback, for its event and alert.
enum RollbackCause {
    Threshold(i32),
    Webhook,
    Deadline(String),
    PrimaryStalled(String),
    Aborted,
    /// A check of blue/green's pre-promotion analysis failed, before the switch.
    PrePromotion(String),
    /// A check of blue/green's post-promotion analysis failed, after the switch.
    PostPromotion(String),
    /// The analysis of an `analysis` step (or the background analysis, `None`) failed or erred:
    /// (step index, why).
    StepAnalysis(Option<usize>, String),
    /// A confirm-* gate gave no answer for `seconds` (progressDeadlineSeconds).
    GateUnanswered {
        gate: String,
        seconds: i32,
        error: String,
    },
}

struct Tick<'a> {
    obs: &'a Observation,
    canary: &'a Canary,
    analysis: CanaryAnalysis,
    old: CanaryStatus,
    status: CanaryStatus,
    actions: Vec<Action>,
    events: Vec<Event>,
    alerts: Vec<Alert>,
    requeue: Option<Duration>,
    now: Timestamp,
    canary_id: String,
    target_id: String,
    primary_id: String,
    hash: String,
    configs: BTreeMap<String, String>,
    pending: Pending,
    /// Leave pending requests for a later tick instead of acknowledging them as having nothing to
    /// do (set while traffic is still moving after a rollback or a failed promotion).
    defer_requests: bool,
    /// The reason of what blocks the Canary this tick, for its Stalled condition.
    blocked_by: Option<&'static str>,
    /// The tick came only for a measurement of an analysis step, not for the interval: the
    /// interval checks wait for their own time.
    measurement_only: bool,
}

impl<'a> Tick<'a> {
    fn new(obs: &'a Observation, now: Timestamp) -> Self {
        let canary = &obs.canary;
        let ns = canary.metadata.namespace.clone().unwrap_or_default();
        let name = canary.metadata.name.clone().unwrap_or_default();
        let target = &canary.spec.target_ref.name;
        let old = canary.status.clone().unwrap_or_default();
        let handled = old.handled_requests.clone().unwrap_or_default();
        let annotations = canary.metadata.annotations.clone().unwrap_or_default();
        let fresh = |key: &str, seen: &Option<String>| {
            annotations
                .get(key)
                .filter(|token| !token.is_empty() && Some(*token) != seen.as_ref())
                .cloned()
        };
        let pending = Pending {
            promote: fresh(PROMOTE_ANNOTATION, &handled.promote),
            promote_full: fresh(PROMOTE_FULL_ANNOTATION, &handled.promote_full),
            abort: fresh(ABORT_ANNOTATION, &handled.abort),
            retry: fresh(RETRY_ANNOTATION, &handled.retry),
            restart: fresh(RESTART_ANNOTATION, &handled.restart),
        };
        Tick {
            obs,
            canary,
            analysis: canary.spec.analysis().cloned().unwrap_or_default(),
            status: old.clone(),
            old,
            actions: Vec::new(),
            events: Vec::new(),
            alerts: Vec::new(),
            requeue: None,
            now,
            canary_id: format!("{name}.{ns}"),
            target_id: format!("{target}.{ns}"),
            primary_id: format!("{target}-primary.{ns}"),
            hash: String::new(),
            configs: BTreeMap::new(),
            pending,
            defer_requests: false,
            blocked_by: None,
            measurement_only: false,
        }
    }

    // ----- bookkeeping helpers -------------------------------------------------------------------

    /// Records a Normal event; `reason` is one of [`crate::plan::reason`].
    fn normal(&mut self, reason: &'static str, message: impl Into<String>) {
        self.events.push(Event {
            type_: EventType::Normal,
            reason,
            message: message.into(),
        });
    }

    /// Records a Warning event; `reason` is one of [`crate::plan::reason`].
    fn warning(&mut self, reason: &'static str, message: impl Into<String>) {
        self.events.push(Event {
            type_: EventType::Warning,
            reason,
            message: message.into(),
        });
    }

    fn alert(&mut self, severity: Severity, message: impl Into<String>, with_metadata: bool) {
        self.alerts.push(Alert {
            severity,
            message: message.into(),
            with_metadata,
        });
    }

    fn now_time(&self) -> Time {
        Time(self.now)
    }

    /// Now, kept to the microsecond: the times the next tick or a pause's end is reckoned from.
    fn now_micro(&self) -> MicroTime {
        MicroTime(self.now)
    }

    fn interval(&self) -> Duration {
        Duration::from_secs(self.analysis.interval_seconds())
    }

    fn phase(&self) -> Option<Phase> {
        self.old.phase
    }

    fn kind(&self) -> &str {
        let kind = self.canary.spec.target_ref.kind.as_str();
        if kind.is_empty() { "Deployment" } else { kind }
    }

    fn strategy(&self) -> Strategy {
        self.analysis.strategy()
    }

    fn skips_analysis(&self) -> bool {
        self.canary.spec.skips_analysis()
    }

    fn hooks(&self, hook_type: HookType) -> Vec<CanaryWebhook> {
        self.analysis
            .webhooks()
            .iter()
            .filter(|h| h.hook_type() == Some(hook_type))
            .cloned()
            .collect()
    }

    fn elapsed_since(&self, start: Option<&MicroTime>) -> SignedDuration {
        start.map_or(SignedDuration::ZERO, |t| self.now.duration_since(t.0))
    }

    /// Time left until `seconds` after `start`, or `None` once that moment has passed.
    fn remaining_after(&self, start: Option<&MicroTime>, seconds: i32) -> Option<Duration> {
        let left = SignedDuration::from_secs(i64::from(seconds)) - self.elapsed_since(start);
        (left > SignedDuration::ZERO).then(|| milliseconds_up(left))
    }

    /// When the timed pause the steps strategy is at in `status` ends, if no tick has ended it yet.
    ///
    /// A tick that ran at or after that moment (and after the pause began) has seen it end, even if
    /// that tick stopped early (a workload not ready, a failed check): from then on the pause waits
    /// for the ordinary interval ticks again.
    fn unserved_pause_end(&self, status: &CanaryStatus) -> Option<Timestamp> {
        if status.phase != Some(Phase::Progressing) || self.strategy() != Strategy::Steps {
            return None;
        }
        let index = usize::try_from(status.current_step_index?).ok()?;
        let duration = self
            .analysis
            .steps()
            .get(index)?
            .pause
            .as_ref()?
            .duration
            .as_ref()?;
        let seconds = parse_pause_duration(duration).ok()?;
        let started = status.step_start_time.as_ref()?.0;
        let end = started + SignedDuration::from_secs(i64::try_from(seconds).ok()?);
        let served = status
            .last_tick_time
            .as_ref()
            .is_some_and(|last| last.0 > started && last.0 >= end);
        (!served).then_some(end)
    }

    /// Whether an in-flight tick is due: one interval after the last, when a timed pause ends, or
    /// at once for a manual request.
    fn due(&self) -> bool {
        if self.pending.any() {
            return true;
        }
        if self
            .unserved_pause_end(&self.old)
            .is_some_and(|end| self.now >= end)
        {
            return true;
        }
        let interval = SignedDuration::from_secs(self.analysis.interval_seconds() as i64);
        self.old
            .last_tick_time
            .as_ref()
            .is_none_or(|last| self.now >= last.0 + interval)
    }

    /// Whether a measurement of the analysis step the canary is at is due now.
    fn measurement_due(&self) -> bool {
        self.next_measurement(&self.old)
            .is_some_and(|next| self.now >= next)
    }

    fn wait_until_due(&mut self) -> Step {
        self.requeue_for_interval();
        if let Some(next) = self.next_measurement(&self.old) {
            let wait = milliseconds_up(next.duration_since(self.now));
            self.requeue = self.requeue.map(|r| r.min(wait));
        }
        Err(Halt::Done)
    }

    /// A requeue at the next interval tick.
    fn requeue_for_interval(&mut self) {
        let interval = SignedDuration::from_secs(self.analysis.interval_seconds() as i64);
        let elapsed = self.elapsed_since(self.old.last_tick_time.as_ref());
        self.requeue = Some(milliseconds_up(interval - elapsed));
    }

    /// A requeue no later than the end of the timed pause the canary is at, so the pause ends when
    /// its duration has passed rather than at the next interval tick.
    fn requeue_for_pause_end(&mut self) {
        let (Some(requeue), Some(end)) = (self.requeue, self.unserved_pause_end(&self.status))
        else {
            return;
        };
        self.requeue = Some(requeue.min(milliseconds_up(end.duration_since(self.now))));
    }

    /// Records that an interval tick ran now; the next one is due one interval later.
    fn ticked(&mut self) {
        self.status.last_tick_time = Some(self.now_micro());
        self.requeue = Some(self.interval());
    }

    /// Stops with a problem the user must fix, recorded in status and (once) as an event.
    fn block(&mut self, type_: EventType, reason: &'static str, message: String) -> Step {
        if self.old.message.as_deref() != Some(message.as_str()) {
            self.events.push(Event {
                type_,
                reason,
                message: message.clone(),
            });
        }
        self.status.message = Some(message);
        self.blocked_by = Some(reason);
        self.requeue = None;
        Err(Halt::Done)
    }

    /// Records a request as acted on (or acknowledged), so its token is not acted on again.
    fn handled(&mut self, request: Request) {
        let handled = self
            .status
            .handled_requests
            .get_or_insert_with(Default::default);
        let (field, token) = match request {
            Request::Promote => {
                handled.promoted_at = Some(Time(self.now));
                (&mut handled.promote, self.pending.promote.take())
            }
            Request::PromoteFull => (&mut handled.promote_full, self.pending.promote_full.take()),
            Request::Abort => (&mut handled.abort, self.pending.abort.take()),
            Request::Retry => (&mut handled.retry, self.pending.retry.take()),
            Request::Restart => (&mut handled.restart, self.pending.restart.take()),
        };
        if token.is_some() {
            *field = token;
        }
    }

    /// Flagger's `SyncStatus`: a new run state with counters reset and the current revision recorded.
    fn sync(&mut self, phase: Phase, weight: i32) {
        let s = &mut self.status;
        s.phase = Some(phase);
        s.canary_weight = weight;
        s.failed_checks = 0;
        s.iterations = 0;
        s.last_applied_spec = Some(self.hash.clone());
        s.tracked_configs = Some(self.configs.clone());
        if phase == Phase::Initialized {
            s.last_promoted_spec = Some(self.hash.clone());
        }
        s.current_step_index = None;
        s.pre_promotion_passed = None;
        s.step_start_time = Some(MicroTime(self.now));
        if phase == Phase::Progressing {
            s.release_started_at = Some(MicroTime(self.now));
        }
        s.metric_checks.clear();
        forget_silent_gate(s);
        let why = match phase {
            Phase::Succeeded => "the release ended back on the promoted revision",
            Phase::Failed => "the release was rolled back",
            _ => "the release started over",
        };
        self.close_runs(false, why);
    }

    /// Flagger's `SetStatusPhase`: a phase change that keeps the revision. Unlike Flagger,
    /// WaitingPromotion keeps the real weight and iterations.
    fn set_phase(&mut self, phase: Phase) {
        let s = &mut self.status;
        s.phase = Some(phase);
        if !matches!(
            phase,
            Phase::Progressing | Phase::Waiting | Phase::Promoting | Phase::WaitingPromotion
        ) {
            s.canary_weight = 0;
            s.iterations = 0;
        }
        if matches!(phase, Phase::Initialized | Phase::Succeeded) {
            s.last_promoted_spec = s.last_applied_spec.clone();
        }
        if phase == Phase::Succeeded {
            self.close_runs(true, "the release was promoted");
        }
        let s = &mut self.status;
        if !matches!(
            phase,
            Phase::Progressing | Phase::Waiting | Phase::WaitingPromotion
        ) {
            forget_silent_gate(s);
        }
        if self.old.phase != Some(phase) {
            s.step_start_time = Some(MicroTime(self.now));
        }
    }

    fn hook(&self, hook: &CanaryWebhook, phase: Phase) -> Result<Result<(), String>, Halt> {
        let check = Check::Hook {
            name: hook.name.clone(),
            hook_type: hook.hook_type().unwrap_or(HookType::Rollout),
            phase,
        };
        match self.obs.verdicts.iter().find(|v| v.check == check) {
            Some(verdict) => match &verdict.outcome {
                Outcome::Hook(result) => Ok(result.clone()),
                Outcome::HookUnanswered(message) => Ok(Err(message.clone())),
                Outcome::Metric(_) | Outcome::Measurement(_) => {
                    Ok(Err("a metric result was given for a webhook".into()))
                }
            },
            None => Err(Halt::Check(check)),
        }
    }

    fn metric(&self, name: &str) -> Result<MetricReading, Halt> {
        let check = Check::Metric { name: name.into() };
        match self.obs.verdicts.iter().find(|v| v.check == check) {
            Some(verdict) => match &verdict.outcome {
                Outcome::Metric(reading) => Ok(reading.clone()),
                Outcome::Hook(_) | Outcome::HookUnanswered(_) | Outcome::Measurement(_) => Ok(
                    MetricReading::Error("another kind of result was given for a metric".into()),
                ),
            },
            None => Err(Halt::Check(check)),
        }
    }

    fn target(&self) -> &'a Deployment {
        self.obs.target.as_ref().expect("checked in run")
    }

    fn target_replicas(&self) -> Option<i32> {
        self.target().spec.as_ref().and_then(|s| s.replicas)
    }

    fn primary_replicas(&self) -> Option<i32> {
        self.obs
            .primary
            .as_ref()
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.replicas)
    }

    /// Replicas the release serves with at full traffic (recorded when the run started).
    fn full_replicas(&self) -> i32 {
        self.status.desired_replicas.unwrap_or_else(|| {
            scale_from_zero(
                None,
                self.primary_replicas(),
                self.obs.autoscaler_min_replicas,
            )
        })
    }

    fn dynamic_stable_scale(&self) -> bool {
        self.analysis.dynamic_stable_scale.unwrap_or(false)
    }

    fn side_id(&self, side: Side) -> String {
        match side {
            Side::Primary => self.primary_id.clone(),
            Side::Canary => self.target_id.clone(),
        }
    }

    fn side_deployment(&self, side: Side) -> Option<&'a Deployment> {
        match side {
            Side::Primary => self.obs.primary.as_ref(),
            Side::Canary => self.obs.target.as_ref(),
        }
    }

    /// The side's `spec.replicas` once this tick's actions are carried out.
    fn planned_replicas(&self, side: Side) -> i32 {
        let planned = self.actions.iter().rev().find_map(|a| match (side, a) {
            (Side::Primary, Action::ScalePrimary(n)) | (Side::Canary, Action::ScaleTarget(n)) => {
                Some(*n)
            }
            _ => None,
        });
        planned
            .or_else(|| {
                self.side_deployment(side)
                    .and_then(|d| d.spec.as_ref())
                    .and_then(|s| s.replicas)
            })
            .unwrap_or(0)
    }

    /// The side's available pods, as observed.
    fn available_replicas(&self, side: Side) -> i32 {
        self.side_deployment(side)
            .and_then(|d| d.status.as_ref())
            .and_then(|s| s.available_replicas)
            .unwrap_or(0)
    }

    fn scale(&mut self, side: Side, replicas: i32) {
        self.actions.push(match side {
            Side::Primary => Action::ScalePrimary(replicas),
            Side::Canary => Action::ScaleTarget(replicas),
        });
    }

    /// The traffic rule, holding form: `side` may take more traffic (`share`, for the event) only
    /// once it has `needed` available pods. Scales it up to `needed` when it is smaller, and returns
    /// false (with a Waiting event) until those pods are available.
    fn side_can_take(&mut self, side: Side, needed: i32, share: &str) -> bool {
        let id = self.side_id(side);
        if self.planned_replicas(side) < needed {
            self.scale(side, needed);
            self.normal(
                reason::WAITING,
                format!("Scaling {id} to {needed} replicas before routing {share} to it"),
            );
            return false;
        }
        let available = self.available_replicas(side);
        if available < needed {
            self.normal(
                reason::WAITING,
                format!(
                    "Waiting for {id} to have {needed} available replicas ({available} now) before routing {share} to it"
                ),
            );
            return false;
        }
        true
    }

    /// The traffic rule, draining form: moves the router toward `goal` (the canary's weight, 0 or
    /// 100) no faster than the side receiving the traffic can serve it. That side is scaled to the
    /// release's full size, and until all of those pods are available it gets only the share they
    /// can serve (`available / full`). The primary is checked only with `dynamicStableScale` (it
    /// is never scaled down otherwise); the canary always, as `setCanaryScale` or a preview may have
    /// made it small. Returns true once the caller may route all traffic to `goal`.
    ///
    /// `cause` starts the events; `reason` is the reason of a partial move. A tick that can move
    /// nothing records a Waiting event only when `announce_wait` is set or it scales the side.
    fn shift_toward(
        &mut self,
        goal: i32,
        cause: &str,
        reason: &'static str,
        announce_wait: bool,
    ) -> bool {
        let current = self.obs.routes.map_or(0, |r| r.canary);
        if current == goal {
            return true;
        }
        if self.splits_by_replicas() {
            // The pods follow the status's weight; the apex moves once they are all there.
            self.status.canary_weight = goal;
            return self.wait_for_ratio(goal, announce_wait);
        }
        let side = if goal < current {
            Side::Primary
        } else {
            Side::Canary
        };
        if side == Side::Primary && !self.dynamic_stable_scale() {
            return true;
        }
        let full = self.full_replicas().max(1);
        let scaled = self.planned_replicas(side) < full;
        if scaled {
            self.scale(side, full);
        }
        let available = self.available_replicas(side);
        if !scaled && available >= full {
            return true;
        }
        let servable = (i64::from(available.max(0)) * 100 / i64::from(full)).min(100) as i32;
        let next = match side {
            Side::Primary => (100 - servable).max(goal).min(current),
            Side::Canary => servable.min(goal).max(current),
        };
        let id = self.side_id(side);
        if next != current {
            self.set_routes(100 - next, next, false);
            self.status.canary_weight = next;
            let moved = if next < current { "lowered" } else { "raised" };
            self.normal(
                reason,
                format!(
                    "{cause}: {id} has {available} of {full} replicas available, canary weight {moved} to {next}"
                ),
            );
        } else if announce_wait || scaled {
            self.normal(
                reason::WAITING,
                format!(
                    "{cause}: waiting for {id} to have {full} available replicas ({available} now) before routing all traffic to it"
                ),
            );
        }
        false
    }

    fn spec_changed(&self) -> bool {
        match self.old.last_applied_spec.as_deref() {
            None => true,
            Some(applied) => {
                self.old.last_promoted_spec.as_deref() != Some(self.hash.as_str())
                    && applied != self.hash
            }
        }
    }

    fn configs_changed(&self) -> bool {
        self.old.tracked_configs.clone().unwrap_or_default() != self.configs
    }

    // ----- the tick ------------------------------------------------------------------------------

    fn run(&mut self) -> Step {
        if self.canary.metadata.deletion_timestamp.is_some() {
            return Err(Halt::Done);
        }
        let errors = serin_api::validate(self.canary);
        if !errors.is_empty() {
            let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
            return self.block(
                EventType::Warning,
                reason::INVALID_SPEC,
                format!("invalid spec: {}", list.join("; ")),
            );
        }
        if self.canary.spec.is_suspended() {
            return self.block(
                EventType::Normal,
                reason::SUSPENDED,
                "skipping canary run as object is suspended".into(),
            );
        }
        if let Some(problem) = &self.obs.blocked {
            return self.block(EventType::Warning, reason::BLOCKED, problem.clone());
        }
        if let Some(pending) = &self.obs.routes_pending {
            let grace = SignedDuration::try_from(crate::plan::ROUTES_ACCEPTANCE_GRACE)
                .unwrap_or(SignedDuration::ZERO);
            if pending
                .written
                .is_some_and(|written| self.now < written + grace)
            {
                // A moment's lag after our own write is normal: look again shortly, without a word.
                self.defer_requests = true;
                self.requeue = Some(Duration::from_secs(1));
                return Err(Halt::Done);
            }
            return self.block(EventType::Warning, reason::BLOCKED, pending.message.clone());
        }
        let Some(template) = self
            .obs
            .target
            .as_ref()
            .and_then(|t| t.spec.as_ref())
            .map(|s| &s.template)
        else {
            return self.block(
                EventType::Warning,
                reason::TARGET_NOT_FOUND,
                format!(
                    "{kind} {} not found: create it, or set spec.targetRef.name to an existing {kind}",
                    self.target_id,
                    kind = if self.canary.spec.target_ref.kind == "DaemonSet" {
                        "DaemonSet"
                    } else {
                        "Deployment"
                    },
                ),
            );
        };
        self.configs = match &self.obs.configs {
            Ok(configs) => configs.clone(),
            Err(problem) => {
                return self.block(
                    EventType::Warning,
                    reason::CONFIG_NOT_FOUND,
                    problem.clone(),
                );
            }
        };
        self.hash = match &self.obs.target_hash {
            Some(hash) => hash.clone(),
            None => pod_template_hash(template),
        };
        // A status Flagger left: its hashes stand for the template as it is, so the release goes
        // on where Flagger stopped (it cannot say whether the template changed since).
        if crate::revision::adopt_foreign_revision(&mut self.old, &self.hash) {
            crate::revision::adopt_foreign_revision(&mut self.status, &self.hash);
        }
        // A silent gate's message stays until the gate is asked again: ticks that are not due
        // (a watch event, a status write) must not erase it.
        if self.status.unanswered_gate_since.is_none() {
            self.status.message = None;
        }

        match self.phase() {
            None | Some(Phase::Initializing) => self.initialize(),
            Some(Phase::Initialized | Phase::Succeeded | Phase::Failed) => self.idle(),
            Some(Phase::Terminating | Phase::Terminated) => Err(Halt::Done),
            Some(_) => self.in_flight(),
        }
    }

    fn finish(mut self) -> Plan {
        if !self.defer_requests {
            self.acknowledge_ignored_requests();
        }
        self.requeue_for_pause_end();
        self.track_affinity_cookies();
        self.follow_weight_with_pods();
        self.status.observed_generation = self.canary.metadata.generation;
        if significant(&self.old) != significant(&self.status) {
            self.status.last_transition_time = Some(self.now_time());
        }
        let kind = self.kind().to_string();
        let now = self.now_time();
        if let Some(phase) = self.status.phase {
            set_promoted(&mut self.status.conditions, phase, &kind, &now);
        }
        let message = self.status.message.clone().unwrap_or_default();
        let health = Health {
            phase: self.status.phase,
            blocked: self.blocked_by.map(|reason| (reason, message.as_str())),
            generation: self.canary.metadata.generation,
            kind: &kind,
        };
        set_health(&mut self.status.conditions, &health, &now);
        // The next decision starts with `initialize` or `in_flight`, which both stop at the due
        // check before reading a workload (see `wait_until_due`).
        let workload_status_waits = self.requeue.is_some()
            && !self.splits_by_replicas()
            && !matches!(
                self.status.phase,
                None | Some(
                    Phase::Initialized
                        | Phase::Succeeded
                        | Phase::Failed
                        | Phase::Terminating
                        | Phase::Terminated
                )
            );
        Plan {
            actions: self.actions,
            status: self.status,
            events: self.events,
            alerts: self.alerts,
            requeue_after: self.requeue,
            workload_status_waits,
        }
    }
}

/// `duration` rounded up to whole milliseconds, at least one: a requeue never comes before the
/// moment it waits for (the due tick is on time to the millisecond), and never spins.
fn milliseconds_up(duration: SignedDuration) -> Duration {
    let millis = duration.as_millis() + i128::from(duration.subsec_nanos() % 1_000_000 > 0);
    Duration::from_millis(millis.max(1) as u64)
}

/// The status without its bookkeeping times, to tell whether anything a user sees changed.
/// Clears the record of a gate that gave no answer, and the message that said so.
fn forget_silent_gate(status: &mut CanaryStatus) {
    if status.unanswered_gate_since.take().is_some() {
        status.message = None;
    }
}

fn significant(status: &CanaryStatus) -> CanaryStatus {
    CanaryStatus {
        last_transition_time: None,
        last_tick_time: None,
        metric_checks: Vec::new(),
        analysis_runs: Vec::new(),
        conditions: Vec::new(),
        observed_generation: None,
        ..status.clone()
    }
}
