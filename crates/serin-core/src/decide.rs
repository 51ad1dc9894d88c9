//! The release state machine: one call decides one tick of one canary.

use crate::condition::set_promoted;
use crate::metrics::judge;
use crate::plan::{
    Action, Alert, Check, Decision, Event, EventType, MetricReading, Observation, Outcome, Plan,
    Routes, Severity, reason,
};
use crate::readiness::{Readiness, deployment_readiness};
use crate::replicas::{
    CanaryScale, TrafficRoutedInput, scale_from_zero, traffic_routed_replicas,
    traffic_weight_to_replicas,
};
use crate::revision::pod_template_hash;
use crate::weights::{max_weight, next_step_weight};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serin_api::duration::parse_pause_duration;
use serin_api::{
    ABORT_ANNOTATION, Canary, CanaryAnalysis, CanaryStatus, CanaryWebhook, HookType,
    MetricCheckStatus, PROMOTE_ANNOTATION, PROMOTE_FULL_ANNOTATION, Phase, RETRY_ANNOTATION,
    Strategy,
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
}

impl Pending {
    fn any(&self) -> bool {
        self.promote.is_some()
            || self.promote_full.is_some()
            || self.abort.is_some()
            || self.retry.is_some()
    }
}

/// A kind of manual request.
#[derive(Clone, Copy)]
enum Request {
    Promote,
    PromoteFull,
    Abort,
    Retry,
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

    fn elapsed_since(&self, start: Option<&Time>) -> SignedDuration {
        start.map_or(SignedDuration::ZERO, |t| self.now.duration_since(t.0))
    }

    /// Time left until `seconds` after `start`, or `None` once that moment has passed.
    fn remaining_after(&self, start: Option<&Time>, seconds: i32) -> Option<Duration> {
        let left = SignedDuration::from_secs(i64::from(seconds)) - self.elapsed_since(start);
        (left > SignedDuration::ZERO).then(|| whole_seconds_up(left))
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

    fn wait_until_due(&mut self) -> Step {
        let interval = SignedDuration::from_secs(self.analysis.interval_seconds() as i64);
        let elapsed = self.elapsed_since(self.old.last_tick_time.as_ref());
        self.requeue = Some(whole_seconds_up(interval - elapsed));
        Err(Halt::Done)
    }

    /// A requeue no later than the end of the timed pause the canary is at, so the pause ends when
    /// its duration has passed rather than at the next interval tick.
    fn requeue_for_pause_end(&mut self) {
        let (Some(requeue), Some(end)) = (self.requeue, self.unserved_pause_end(&self.status))
        else {
            return;
        };
        self.requeue = Some(requeue.min(whole_seconds_up(end.duration_since(self.now))));
    }

    /// Records that an interval tick ran now; the next one is due one interval later.
    fn ticked(&mut self) {
        self.status.last_tick_time = Some(self.now_time());
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
        s.step_start_time = Some(Time(self.now));
        s.metric_checks.clear();
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
        if self.old.phase != Some(phase) {
            s.step_start_time = Some(Time(self.now));
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
                Outcome::Metric(_) => Ok(Err("a metric result was given for a webhook".into())),
            },
            None => Err(Halt::Check(check)),
        }
    }

    fn metric(&self, name: &str) -> Result<MetricReading, Halt> {
        let check = Check::Metric { name: name.into() };
        match self.obs.verdicts.iter().find(|v| v.check == check) {
            Some(verdict) => match &verdict.outcome {
                Outcome::Metric(reading) => Ok(reading.clone()),
                Outcome::Hook(_) => Ok(MetricReading::Error(
                    "a webhook result was given for a metric".into(),
                )),
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
                    "Deployment {} not found: create it, or set spec.targetRef.name to an existing Deployment",
                    self.target_id
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
        self.hash = pod_template_hash(template);
        self.status.message = None;

        match self.phase() {
            None | Some(Phase::Initializing) => self.initialize(),
            Some(Phase::Initialized | Phase::Succeeded | Phase::Failed) => self.idle(),
            Some(Phase::Terminating | Phase::Terminated) => Err(Halt::Done),
            Some(_) => self.in_flight(),
        }
    }

    fn initialize(&mut self) -> Step {
        if self.phase() == Some(Phase::Initializing) && !self.due() {
            return self.wait_until_due();
        }
        self.status.phase = Some(Phase::Initializing);
        self.ticked();
        self.actions.push(Action::EnsurePrimary {
            sync_template: true,
        });
        if !self.skips_analysis() {
            let threshold = self.analysis.primary_ready_threshold();
            match self.primary_readiness(threshold) {
                Readiness::Ready => {}
                Readiness::Waiting(reason) | Readiness::Stalled(reason) => {
                    self.warning(
                        reason::INITIALIZING,
                        format!("{} not ready: {reason}", self.primary_id),
                    );
                    return Err(Halt::Done);
                }
            }
        }
        self.actions.push(Action::EnsureRouting);
        self.actions.push(Action::ScaleTarget(0));
        self.sync(Phase::Initialized, 0);
        self.requeue = None;
        self.normal(
            reason::INITIALIZED,
            format!("Initialization done! {}", self.canary_id),
        );
        let kind = self.kind().to_string();
        self.alert(
            Severity::Info,
            format!("New {kind} detected, initialization completed."),
            true,
        );
        Err(Halt::Done)
    }

    fn primary_readiness(&self, threshold: i32) -> Readiness {
        match &self.obs.primary {
            None => Readiness::Waiting("the primary Deployment does not exist yet".into()),
            Some(primary) => deployment_readiness(
                primary,
                threshold,
                self.canary.spec.progress_deadline_seconds(),
                self.now,
            ),
        }
    }

    /// Initialized, Succeeded or Failed: react to a new revision or a manual request at once.
    fn idle(&mut self) -> Step {
        let failed = self.phase() == Some(Phase::Failed);
        if failed {
            self.finish_traffic_move()?;
        }
        let mut retry = false;
        if failed && self.pending.retry.is_some() {
            self.handled(Request::Retry);
            retry = true;
            self.normal(
                reason::REQUEST_HANDLED,
                format!("Retrying the release of {}", self.target_id),
            );
        }
        let changed = self.spec_changed() || self.configs_changed();
        if self.pending.promote_full.is_some() {
            self.handled(Request::PromoteFull);
            if changed || failed {
                self.ticked();
                self.status.last_applied_spec = Some(self.hash.clone());
                self.status.tracked_configs = Some(self.configs.clone());
                self.status.desired_replicas = Some(scale_from_zero(
                    self.target_replicas(),
                    self.primary_replicas(),
                    self.obs.autoscaler_min_replicas,
                ));
                return self.promote_now();
            }
            self.normal(
                reason::REQUEST_HANDLED,
                format!(
                    "Nothing to promote: {} already runs the target's revision",
                    self.primary_id
                ),
            );
        }
        if !(changed || retry) {
            let back_on_promoted = self.old.last_promoted_spec.as_deref() == Some(&self.hash)
                && self.old.last_applied_spec.as_deref() != Some(&self.hash);
            if back_on_promoted {
                self.status.last_applied_spec = Some(self.hash.clone());
                self.status.tracked_configs = Some(self.configs.clone());
            }
            if failed {
                self.delayed_scale_down();
            }
            return Err(Halt::Done);
        }
        self.start_revision()
    }

    /// After a rollback with `abortScaleDownDelaySeconds`, scales the canary down once the delay ends.
    fn delayed_scale_down(&mut self) {
        let Some(delay) = self
            .analysis
            .abort_scale_down_delay_seconds
            .filter(|d| *d > 0)
        else {
            return;
        };
        if self.target_replicas().unwrap_or(0) == 0 {
            return;
        }
        match self.remaining_after(self.old.step_start_time.as_ref(), delay) {
            Some(left) => self.requeue = Some(left),
            None => {
                self.actions.push(Action::ScaleTarget(0));
                self.normal(
                    reason::ROLLED_BACK,
                    format!(
                        "Scaling down {} after the abort scale-down delay of {delay}s",
                        self.target_id
                    ),
                );
            }
        }
    }

    /// A new revision: pass the confirm-rollout gates, scale the target up, start Progressing.
    fn start_revision(&mut self) -> Step {
        self.ticked();
        let phase = self.phase().unwrap_or(Phase::Initialized);
        for hook in self.hooks(HookType::ConfirmRollout) {
            match self.hook(&hook, phase)? {
                Ok(()) => self.normal(
                    reason::PROGRESSING,
                    format!("Confirm-rollout check {} passed", hook.name),
                ),
                Err(_) => {
                    if phase != Phase::Waiting {
                        self.set_phase(Phase::Waiting);
                        self.warning(
                            reason::WAITING,
                            format!(
                                "Halt {} advancement waiting for approval {}",
                                self.canary_id, hook.name
                            ),
                        );
                        if !hook.mute_alert.unwrap_or(false) {
                            self.alert(Severity::Warn, "Canary is waiting for approval.", false);
                        }
                    }
                    return Err(Halt::Done);
                }
            }
        }
        self.normal(
            reason::NEW_REVISION,
            format!("New revision detected! Scaling up {}", self.target_id),
        );
        self.alert(
            Severity::Info,
            "New revision detected, progressing canary analysis.",
            true,
        );
        let full = scale_from_zero(
            self.target_replicas(),
            self.primary_replicas(),
            self.obs.autoscaler_min_replicas,
        );
        self.status.desired_replicas = Some(full);
        let first_size = match self.strategy() {
            Strategy::BlueGreen => self.analysis.preview_replica_count.unwrap_or(full),
            Strategy::Steps => self.first_steps_size(),
            _ => full,
        };
        self.actions.push(Action::ScaleTarget(first_size));
        self.sync(Phase::Progressing, 0);
        Err(Halt::Done)
    }

    fn in_flight(&mut self) -> Step {
        let phase = self.phase().expect("in-flight phases are set");
        if !self.due() {
            return self.wait_until_due();
        }
        self.ticked();

        if self.pending.abort.is_some() {
            if matches!(phase, Phase::Promoting | Phase::Finalising) {
                self.handled(Request::Abort);
                self.warning(reason::REQUEST_HANDLED, format!(
                    "Abort refused: the promotion of {} has started; roll the target back to the previous version instead",
                    self.target_id
                ));
            } else {
                return self.rollback(RollbackCause::Aborted);
            }
        }
        if self.pending.promote_full.is_some() {
            self.handled(Request::PromoteFull);
            if matches!(phase, Phase::Promoting | Phase::Finalising) {
                self.normal(
                    reason::REQUEST_HANDLED,
                    format!("{} is already being promoted", self.canary_id),
                );
            } else {
                self.status.last_applied_spec = Some(self.hash.clone());
                self.status.tracked_configs = Some(self.configs.clone());
                self.normal(
                    reason::REQUEST_HANDLED,
                    format!(
                        "Full promotion requested: skipping the remaining analysis of {}",
                        self.target_id
                    ),
                );
                return self.promote_now();
            }
        }
        if phase == Phase::Waiting {
            return self.start_revision();
        }
        if matches!(phase, Phase::Progressing | Phase::WaitingPromotion) {
            let back_on_promoted = self.old.last_promoted_spec.as_deref() == Some(&self.hash)
                && self.old.last_applied_spec.as_deref() != Some(&self.hash);
            if back_on_promoted && !self.configs_changed() {
                return self.abandon_for_promoted();
            }
            if self.old.last_applied_spec.as_deref() != Some(&self.hash) || self.configs_changed() {
                return self.restart();
            }
        }

        self.actions.push(Action::EnsurePrimary {
            sync_template: false,
        });
        self.actions.push(Action::EnsureRouting);
        if !self.skips_analysis() {
            match self.primary_readiness(self.analysis.primary_ready_threshold()) {
                Readiness::Ready => {}
                Readiness::Waiting(reason) => {
                    self.warning(
                        reason::WAITING,
                        format!("{} not ready: {reason}", self.primary_id),
                    );
                    return Err(Halt::Done);
                }
                Readiness::Stalled(reason) => {
                    return if matches!(phase, Phase::Promoting | Phase::Finalising) {
                        self.failed_promotion(reason)
                    } else {
                        self.rollback(RollbackCause::PrimaryStalled(reason))
                    };
                }
            }
        }
        let Some(routes) = self.obs.routes else {
            self.warning(
                reason::WAITING,
                format!(
                    "Routing objects of {} not found; they are re-created this tick",
                    self.canary_id
                ),
            );
            return Err(Halt::Done);
        };
        match deployment_readiness(
            self.target(),
            self.analysis.canary_ready_threshold(),
            self.canary.spec.progress_deadline_seconds(),
            self.now,
        ) {
            Readiness::Ready => {}
            Readiness::Waiting(reason) => {
                self.warning(
                    reason::WAITING,
                    format!("canary deployment {} not ready: {reason}", self.target_id),
                );
                return Err(Halt::Done);
            }
            Readiness::Stalled(reason) => return self.rollback(RollbackCause::Deadline(reason)),
        }
        if self.skips_analysis() {
            return self.promote_without_analysis();
        }
        if matches!(phase, Phase::Progressing | Phase::WaitingPromotion) {
            for hook in self.hooks(HookType::Rollback) {
                match self.hook(&hook, phase)? {
                    Ok(()) => {
                        self.warning(
                            reason::ROLLED_BACK,
                            format!("Rollback check {} passed", hook.name),
                        );
                        return self.rollback(RollbackCause::Webhook);
                    }
                    Err(_) => self.normal(
                        reason::PROGRESSING,
                        format!("Rollback hook {} not signaling a rollback", hook.name),
                    ),
                }
            }
        }
        match phase {
            Phase::Promoting => {
                if self.canary.spec.autoscaler_ref.is_some() {
                    self.actions.push(Action::SyncPrimaryAutoscaler);
                }
                return self.shift_traffic_to_primary(routes);
            }
            Phase::Finalising => return self.finalise(),
            _ => {}
        }
        let threshold = self.analysis.threshold();
        if self.old.failed_checks >= threshold {
            return self.rollback(RollbackCause::Threshold(self.old.failed_checks));
        }

        let first_tick = match self.strategy() {
            Strategy::Steps => self.old.current_step_index.is_none(),
            _ => {
                routes.canary == 0
                    && self.old.iterations == 0
                    && !(self.analysis.mirror() && routes.mirrored)
            }
        };
        if first_tick {
            self.normal(
                reason::PROGRESSING,
                format!("Starting canary analysis for {}", self.target_id),
            );
            for hook in self.hooks(HookType::PreRollout) {
                match self.hook(&hook, Phase::Progressing)? {
                    Ok(()) => self.normal(
                        reason::PROGRESSING,
                        format!("Pre-rollout check {} passed", hook.name),
                    ),
                    Err(err) => {
                        self.warning(
                            reason::CHECK_FAILED,
                            format!(
                                "Halt {} advancement pre-rollout check {} failed {err}",
                                self.canary_id, hook.name
                            ),
                        );
                        self.status.failed_checks += 1;
                        return Err(Halt::Done);
                    }
                }
            }
        } else {
            self.analyse()?;
        }

        match self.strategy() {
            Strategy::Canary => self.run_canary(routes),
            Strategy::Steps => self.run_steps(routes, first_tick),
            Strategy::AbTesting => self.run_ab(),
            Strategy::BlueGreen => self.run_blue_green(routes),
        }
    }

    /// Rollout hooks, then metrics (builtins and inline queries first, then templates); the first
    /// failure adds one failed check and ends the tick.
    fn analyse(&mut self) -> Step {
        for hook in self.hooks(HookType::Rollout) {
            if let Err(err) = self.hook(&hook, Phase::Progressing)? {
                self.warning(
                    reason::CHECK_FAILED,
                    format!(
                        "Halt {} advancement external check {} failed {err}",
                        self.canary_id, hook.name
                    ),
                );
                self.status.failed_checks += 1;
                return Err(Halt::Done);
            }
        }
        let metrics = self.analysis.metrics().to_vec();
        let ordered = metrics
            .iter()
            .filter(|m| m.template_ref.is_none())
            .chain(metrics.iter().filter(|m| m.template_ref.is_some()));
        for metric in ordered {
            let reading = self.metric(&metric.name)?;
            let judgement = judge(metric, &reading, &self.canary_id, &self.target_id);
            let record = MetricCheckStatus {
                name: metric.name.clone(),
                value: judgement.value,
                passed: judgement.passed,
                message: judgement.message.clone(),
                time: Some(self.now_time()),
            };
            self.status.record_metric_check(record);
            if !judgement.passed {
                self.warning(reason::CHECK_FAILED, judgement.message);
                self.status.failed_checks += 1;
                return Err(Halt::Done);
            }
        }
        Ok(())
    }

    /// confirm-traffic-increase gates; `Ok(false)` when one holds the traffic where it is.
    fn traffic_increase_approved(&mut self) -> Result<bool, Halt> {
        for hook in self.hooks(HookType::ConfirmTrafficIncrease) {
            match self.hook(&hook, Phase::Progressing)? {
                Ok(()) => self.normal(
                    reason::PROGRESSING,
                    format!("Confirm-traffic-increase check {} passed", hook.name),
                ),
                Err(_) => {
                    self.warning(
                        reason::WAITING,
                        format!(
                            "Halt {} advancement waiting for traffic increase approval {}",
                            self.canary_id, hook.name
                        ),
                    );
                    if !hook.mute_alert.unwrap_or(false) {
                        self.alert(
                            Severity::Warn,
                            "Canary traffic increase is waiting for approval.",
                            false,
                        );
                    }
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// confirm-promotion gates; on the first refusal the canary enters WaitingPromotion.
    fn promotion_approved(&mut self) -> Result<bool, Halt> {
        for hook in self.hooks(HookType::ConfirmPromotion) {
            match self.hook(&hook, Phase::Progressing)? {
                Ok(()) => self.normal(
                    reason::PROGRESSING,
                    format!("Confirm-promotion check {} passed", hook.name),
                ),
                Err(_) => {
                    if self.phase() != Some(Phase::WaitingPromotion) {
                        self.set_phase(Phase::WaitingPromotion);
                        self.warning(
                            reason::WAITING,
                            format!(
                                "Halt {} advancement waiting for promotion approval {}",
                                self.canary_id, hook.name
                            ),
                        );
                        if !hook.mute_alert.unwrap_or(false) {
                            self.alert(
                                Severity::Warn,
                                "Canary promotion is waiting for approval.",
                                false,
                            );
                        }
                    }
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    fn promote_when_approved(&mut self) -> Step {
        if self.promotion_approved()? {
            self.promote_now()
        } else {
            Err(Halt::Done)
        }
    }

    /// `Copying ... template spec`: the primary takes the target's template (and, without an
    /// autoscaler, the release's full replica count).
    fn copy_template_to_primary(&mut self) {
        self.normal(
            reason::PROMOTING,
            format!(
                "Copying {} template spec to {}",
                self.target_id, self.primary_id
            ),
        );
        let replicas = if self.canary.spec.autoscaler_ref.is_some() {
            None
        } else {
            Some(self.full_replicas())
        };
        self.actions.push(Action::Promote { replicas });
    }

    fn promote_now(&mut self) -> Step {
        self.copy_template_to_primary();
        self.set_phase(Phase::Promoting);
        Err(Halt::Done)
    }

    fn set_routes(&mut self, primary: i32, canary: i32, mirrored: bool) {
        self.actions.push(Action::SetRoutes(Routes {
            primary,
            canary,
            mirrored,
        }));
    }

    /// With `dynamicStableScale`, sizes the primary to the traffic it keeps, never below what it
    /// served before this tick's change.
    fn scale_primary_with_traffic(&mut self, before: Routes, canary_weight: i32) {
        if !self.analysis.dynamic_stable_scale.unwrap_or(false) {
            return;
        }
        let (_, stable) = traffic_routed_replicas(TrafficRoutedInput {
            replicas: self.full_replicas(),
            desired_weight: canary_weight,
            actual_weights: Some((before.canary, before.primary)),
            aborted: false,
            dynamic_stable_scale: true,
            canary_scale: CanaryScale::MatchTrafficWeight,
        });
        if self.primary_replicas() != Some(stable) {
            self.actions.push(Action::ScalePrimary(stable));
        }
    }

    fn run_canary(&mut self, routes: Routes) -> Step {
        let phase = self.phase().expect("in flight");
        let current = routes.canary;
        let step = next_step_weight(&self.analysis, current);
        if step > 0
            && !routes.mirrored
            && phase == Phase::Progressing
            && !self.traffic_increase_approved()?
        {
            return Err(Halt::Done);
        }
        if current >= max_weight(&self.analysis) {
            return self.promote_when_approved();
        }
        if self.analysis.mirror() && current == 0 && !routes.mirrored {
            self.set_routes(100, 0, true);
            self.status.canary_weight = 0;
            self.normal(
                reason::PROGRESSING,
                format!("Advance {} canary weight 0", self.canary_id),
            );
            return Err(Halt::Done);
        }
        let canary = (current + step).min(100);
        let primary = (routes.primary - step).max(0);
        self.set_routes(primary, canary, false);
        self.status.canary_weight = canary;
        self.normal(
            reason::PROGRESSING,
            format!("Advance {} canary weight {canary}", self.canary_id),
        );
        self.scale_primary_with_traffic(routes, canary);
        Err(Halt::Done)
    }

    /// The canary's size when a release with steps starts: what the `setCanaryScale` steps before
    /// the first other step give it (at the first `setWeight`'s weight for `matchTrafficWeight`),
    /// so it never runs larger than they say.
    fn first_steps_size(&self) -> i32 {
        let steps = self.analysis.steps();
        let leading = steps
            .iter()
            .take_while(|s| s.set_canary_scale.is_some())
            .count();
        let first_weight = steps.iter().find_map(|s| s.set_weight).unwrap_or(0);
        self.canary_size(leading, first_weight)
    }

    /// The `setCanaryScale` in effect before step `index`, if any.
    fn canary_scale_before(&self, index: usize) -> Option<CanaryScale> {
        self.analysis.steps()[..index]
            .iter()
            .rev()
            .find_map(|s| s.set_canary_scale.as_ref())
            .map(|scale| match (scale.replicas, scale.weight) {
                (Some(n), _) => CanaryScale::Replicas(n),
                (None, Some(w)) => CanaryScale::Weight(w),
                (None, None) => CanaryScale::MatchTrafficWeight,
            })
    }

    /// Scales the canary as the latest setCanaryScale says (full size when there is none).
    fn scale_canary_for(&mut self, index: usize, weight: i32) {
        let wanted = self.canary_size(index, weight);
        if self.planned_replicas(Side::Canary) != wanted {
            self.actions.push(Action::ScaleTarget(wanted));
        }
    }

    /// Replicas of the canary at `weight` under the setCanaryScale in effect before step `index`
    /// (full size when there is none).
    fn canary_size(&self, index: usize, weight: i32) -> i32 {
        let full = self.full_replicas();
        match self.canary_scale_before(index) {
            None => full,
            Some(CanaryScale::Replicas(n)) => n,
            Some(CanaryScale::Weight(w)) => traffic_weight_to_replicas(full, w),
            Some(CanaryScale::MatchTrafficWeight) => traffic_weight_to_replicas(full, weight),
        }
    }

    /// Before a `setWeight` moves traffic, the side that gains it must have the pods for its new
    /// share: the canary as many as the setCanaryScale in effect gives it at that weight, the
    /// primary (with `dynamicStableScale`) the pods for what it gets back. False while waiting.
    fn sides_ready_for_weight(&mut self, index: usize, from: i32, to: i32) -> bool {
        if to > from {
            let needed = self.canary_size(index, to);
            return self.side_can_take(Side::Canary, needed, &format!("{to}% of traffic"));
        }
        if to < from && self.dynamic_stable_scale() {
            let needed = traffic_weight_to_replicas(self.full_replicas(), 100 - to);
            let share = format!("{}% of traffic", 100 - to);
            return self.side_can_take(Side::Primary, needed, &share);
        }
        true
    }

    fn describe_step(&self, index: usize) -> String {
        let step = &self.analysis.steps()[index];
        if let Some(w) = step.set_weight {
            format!("setWeight: {w}")
        } else if let Some(pause) = &step.pause {
            match pause
                .duration
                .as_ref()
                .and_then(|d| parse_pause_duration(d).ok())
            {
                Some(seconds) => format!("pause: {seconds}s"),
                None => "pause".into(),
            }
        } else if let Some(scale) = &step.set_canary_scale {
            match (scale.replicas, scale.weight) {
                (Some(n), _) => format!("setCanaryScale{{replicas: {n}}}"),
                (None, Some(w)) => format!("setCanaryScale{{weight: {w}}}"),
                _ => "setCanaryScale{matchTrafficWeight: true}".into(),
            }
        } else {
            "invalid".into()
        }
    }

    fn step_entered(&mut self, index: usize) {
        let steps = self.analysis.steps();
        let total = steps.len();
        self.status.current_step_index = Some(index as i32);
        self.status.step_start_time = Some(self.now_time());
        if let Some(pause) = steps.get(index).and_then(|s| s.pause.as_ref()) {
            let message = match pause
                .duration
                .as_ref()
                .and_then(|d| parse_pause_duration(d).ok())
            {
                Some(seconds) => format!(
                    "Paused {} at step {}/{total} for {seconds}s",
                    self.canary_id,
                    index + 1
                ),
                None => format!(
                    "Paused {} at step {}/{total} until promoted: annotate the Canary with {PROMOTE_ANNOTATION}=<new value>",
                    self.canary_id,
                    index + 1
                ),
            };
            self.normal(reason::WAITING, message);
        }
    }

    fn step_completed(&mut self, index: usize) {
        let total = self.analysis.steps().len();
        let description = self.describe_step(index);
        self.normal(
            reason::PROGRESSING,
            format!("Step {}/{total} completed ({description})", index + 1),
        );
    }

    fn run_steps(&mut self, routes: Routes, first_tick: bool) -> Step {
        let steps = self.analysis.steps().to_vec();
        let total = steps.len();
        let mut index = if first_tick {
            self.step_entered(0);
            0
        } else {
            self.old.current_step_index.unwrap_or(0).max(0) as usize
        };
        let mut weight = routes.canary;
        loop {
            if index >= total {
                self.status.current_step_index = Some(total as i32);
                return self.promote_when_approved();
            }
            let step = &steps[index];
            if let Some(target_weight) = step.set_weight {
                if target_weight > weight
                    && self.phase() == Some(Phase::Progressing)
                    && !self.traffic_increase_approved()?
                {
                    return Err(Halt::Done);
                }
                if !self.sides_ready_for_weight(index, weight, target_weight) {
                    return Err(Halt::Done);
                }
                self.set_routes(100 - target_weight, target_weight, false);
                self.status.canary_weight = target_weight;
                self.normal(
                    reason::PROGRESSING,
                    format!("Advance {} canary weight {target_weight}", self.canary_id),
                );
                self.scale_primary_with_traffic(routes, target_weight);
                weight = target_weight;
                self.step_completed(index);
                index += 1;
                while index < total && steps[index].set_canary_scale.is_some() {
                    self.scale_canary_for(index + 1, weight);
                    self.step_completed(index);
                    index += 1;
                }
                self.scale_canary_for(index, weight);
                self.step_entered(index);
                return Err(Halt::Done);
            }
            if let Some(pause) = &step.pause {
                let promoted = self.pending.promote.is_some();
                let expired = pause
                    .duration
                    .as_ref()
                    .and_then(|d| parse_pause_duration(d).ok())
                    .is_some_and(|seconds| {
                        self.elapsed_since(self.status.step_start_time.as_ref())
                            >= SignedDuration::from_secs(seconds as i64)
                    });
                if !(promoted || expired) {
                    self.status.current_step_index = Some(index as i32);
                    return Err(Halt::Done);
                }
                if promoted {
                    self.handled(Request::Promote);
                    self.normal(
                        reason::REQUEST_HANDLED,
                        format!(
                            "Promoted: {} leaves the pause at step {}/{total}",
                            self.canary_id,
                            index + 1
                        ),
                    );
                }
                self.step_completed(index);
                index += 1;
                self.step_entered(index);
                continue;
            }
            // setCanaryScale
            self.scale_canary_for(index + 1, weight);
            self.step_completed(index);
            index += 1;
            self.step_entered(index);
        }
    }

    fn run_ab(&mut self) -> Step {
        let total = self.analysis.iterations();
        if self.old.iterations < total {
            self.set_routes(0, 100, false);
            self.status.iterations = self.old.iterations + 1;
            self.normal(
                reason::PROGRESSING,
                format!(
                    "Advance {} canary iteration {}/{total}",
                    self.canary_id, self.status.iterations
                ),
            );
            return Err(Halt::Done);
        }
        self.promote_when_approved()
    }

    fn run_blue_green(&mut self, routes: Routes) -> Step {
        let total = self.analysis.iterations();
        let done = self.old.iterations;
        if done < total {
            if self.analysis.mirror() && !routes.mirrored {
                self.set_routes(100, 0, true);
            }
            self.status.iterations = done + 1;
            self.normal(
                reason::PROGRESSING,
                format!(
                    "Advance {} canary iteration {}/{total}",
                    self.canary_id,
                    done + 1
                ),
            );
            if done + 1 == total {
                self.status.step_start_time = Some(self.now_time());
            }
            return Err(Halt::Done);
        }
        if done > total {
            return self.promote_when_approved();
        }
        if !self.promotion_approved()? {
            return Err(Halt::Done);
        }
        if !self.manual_promotion_released() {
            return Err(Halt::Done);
        }
        // The preview may be smaller than the release: all of its pods first, then all traffic.
        let full = self.full_replicas();
        if !self.side_can_take(Side::Canary, full, "all traffic") {
            return Err(Halt::Done);
        }
        if routes.mirrored {
            self.normal(
                reason::PROMOTING,
                "Stop traffic mirroring and route all traffic to canary",
            );
        } else {
            self.normal(reason::PROMOTING, "Routing all traffic to canary");
        }
        self.set_routes(0, 100, false);
        self.status.iterations = total + 1;
        Err(Halt::Done)
    }

    /// Blue/green's wait before switching traffic: none by default, a manual promote when
    /// `autoPromotionEnabled: false`, or `autoPromotionSeconds` after the analysis finished.
    fn manual_promotion_released(&mut self) -> bool {
        let wait_started = self.old.step_start_time.clone();
        let promoted_since_wait = self
            .old
            .handled_requests
            .as_ref()
            .and_then(|h| h.promoted_at.as_ref())
            .zip(wait_started.as_ref())
            .is_some_and(|(promoted, started)| promoted.0 >= started.0);
        if promoted_since_wait {
            return true;
        }
        if self.pending.promote.is_some() {
            self.handled(Request::Promote);
            self.normal(
                reason::REQUEST_HANDLED,
                format!("Promotion of {} approved manually", self.canary_id),
            );
            return true;
        }
        if !self.analysis.auto_promotion_enabled() {
            if self.phase() != Some(Phase::WaitingPromotion) {
                self.set_phase(Phase::WaitingPromotion);
                self.status.step_start_time = wait_started;
                self.normal(reason::WAITING, format!(
                    "Halt {} advancement waiting for a manual promote: annotate the Canary with {PROMOTE_ANNOTATION}=<new value>",
                    self.canary_id
                ));
            }
            return false;
        }
        if let Some(seconds) = self.analysis.auto_promotion_seconds
            && let Some(left) = self.remaining_after(wait_started.as_ref(), seconds)
        {
            self.requeue = Some(self.interval().min(left));
            return false;
        }
        true
    }

    /// Promoting: traffic goes back to the (now updated) primary, at once or by `stepWeightPromotion`.
    fn shift_traffic_to_primary(&mut self, routes: Routes) -> Step {
        if self.dynamic_stable_scale()
            && routes.canary > 0
            && !self.side_can_take(Side::Primary, self.full_replicas(), "all traffic")
        {
            return Err(Halt::Done);
        }
        let step = self.analysis.step_weight_promotion.unwrap_or(0);
        if step <= 0 || routes.canary <= 0 {
            self.normal(reason::PROMOTING, "Routing all traffic to primary");
            self.set_routes(100, 0, false);
            self.set_phase(Phase::Finalising);
            return Err(Halt::Done);
        }
        let primary = (routes.primary + step).min(100);
        let canary = (routes.canary - step).max(0);
        self.set_routes(primary, canary, false);
        self.normal(
            reason::PROMOTING,
            format!("Advance {} primary weight {primary}", self.canary_id),
        );
        if primary >= 100 {
            self.set_phase(Phase::Finalising);
        } else {
            self.status.canary_weight = canary;
        }
        Err(Halt::Done)
    }

    /// Finalising: after `scaleDownDelaySeconds` (default: one tick), scale the canary down.
    fn finalise(&mut self) -> Step {
        if let Some(delay) = self.analysis.scale_down_delay_seconds
            && let Some(left) = self.remaining_after(self.old.step_start_time.as_ref(), delay)
        {
            self.requeue = Some(self.interval().min(left));
            return Err(Halt::Done);
        }
        self.actions.push(Action::ScaleTarget(0));
        self.set_phase(Phase::Succeeded);
        self.actions.push(Action::NotifyHooks {
            hook_type: HookType::PostRollout,
            phase: Phase::Succeeded,
        });
        self.normal(
            reason::PROMOTED,
            format!("Promotion completed! Scaling down {}", self.target_id),
        );
        self.alert(
            Severity::Info,
            "Canary analysis completed successfully, promotion finished.",
            false,
        );
        self.requeue = None;
        Err(Halt::Done)
    }

    fn promote_without_analysis(&mut self) -> Step {
        let cause = format!("Skipping the analysis of {}", self.target_id);
        if !self.shift_toward(0, &cause, reason::SKIPPED, true) {
            return Err(Halt::Done);
        }
        self.set_routes(100, 0, false);
        self.copy_template_to_primary();
        if self.canary.spec.autoscaler_ref.is_some() {
            self.actions.push(Action::SyncPrimaryAutoscaler);
        }
        self.actions.push(Action::ScaleTarget(0));
        self.set_phase(Phase::Succeeded);
        self.actions.push(Action::NotifyHooks {
            hook_type: HookType::PostRollout,
            phase: Phase::Succeeded,
        });
        self.normal(
            reason::SKIPPED,
            format!(
                "Promotion completed! Canary analysis was skipped for {}",
                self.target_id
            ),
        );
        self.alert(
            Severity::Info,
            "Canary analysis was skipped, promotion finished.",
            false,
        );
        self.requeue = None;
        Err(Halt::Done)
    }

    /// A new revision arrived mid-analysis: start over with all traffic on the primary, once the
    /// primary (with `dynamicStableScale`, scaled back to full size first) can serve it. Until then
    /// the status keeps the old revision, so the next tick comes back here.
    fn restart(&mut self) -> Step {
        let cause = format!("New revision of {} detected", self.target_id);
        if !self.shift_toward(0, &cause, reason::NEW_REVISION, true) {
            return Err(Halt::Done);
        }
        self.normal(
            reason::NEW_REVISION,
            format!(
                "New revision detected! Restarting analysis for {}",
                self.target_id
            ),
        );
        self.set_routes(100, 0, false);
        self.sync(Phase::Progressing, 0);
        Err(Halt::Done)
    }

    /// The target went back to the promoted revision mid-analysis: nothing is left to release. All
    /// traffic returns to the primary once it can serve it, and only then is the canary scaled down.
    fn abandon_for_promoted(&mut self) -> Step {
        let cause = format!("Target {} is back on the promoted revision", self.target_id);
        if !self.shift_toward(0, &cause, reason::NEW_REVISION, true) {
            return Err(Halt::Done);
        }
        self.normal(reason::NEW_REVISION, format!(
            "Target {} is back on the promoted revision: stopping the analysis and routing all traffic to primary",
            self.target_id
        ));
        self.set_routes(100, 0, false);
        self.actions.push(Action::ScaleTarget(0));
        self.sync(Phase::Succeeded, 0);
        self.status.last_promoted_spec = Some(self.hash.clone());
        self.requeue = None;
        Err(Halt::Done)
    }

    /// Rolls the release back: the canary fails at once (events, alert, post-rollout hooks, phase
    /// Failed with weight 0), and traffic returns to the primary as fast as the primary can serve
    /// it. With `dynamicStableScale` that can take several reconciles, which the Failed phase
    /// finishes (see [`Tick::finish_traffic_move`]); the canary is scaled down only after all
    /// traffic has left it.
    fn rollback(&mut self, cause: RollbackCause) -> Step {
        match &cause {
            RollbackCause::Threshold(n) => {
                self.warning(
                    reason::ROLLED_BACK,
                    format!(
                        "Rolling back {} failed checks threshold reached {n}",
                        self.canary_id
                    ),
                );
                self.alert(
                    Severity::Error,
                    format!("Failed checks threshold reached {n}"),
                    false,
                );
            }
            RollbackCause::Webhook => {
                self.warning(
                    reason::ROLLED_BACK,
                    format!("Rolling back {} manual webhook invoked", self.canary_id),
                );
                self.alert(Severity::Warn, "Rolling back manual webhook invoked", false);
            }
            RollbackCause::Deadline(err) => {
                self.warning(
                    reason::ROLLED_BACK,
                    format!(
                        "Rolling back {} progress deadline exceeded {err}",
                        self.canary_id
                    ),
                );
                self.alert(
                    Severity::Error,
                    format!("Progress deadline exceeded {err}"),
                    false,
                );
            }
            RollbackCause::PrimaryStalled(err) => {
                self.warning(
                    reason::ROLLED_BACK,
                    format!(
                        "Rolling back {}: {} not ready: {err}",
                        self.canary_id, self.primary_id
                    ),
                );
                self.alert(Severity::Error, format!("Primary not ready: {err}"), false);
            }
            RollbackCause::Aborted => {
                self.warning(
                    reason::ROLLED_BACK,
                    format!("Rolling back {} aborted by user", self.canary_id),
                );
                self.alert(Severity::Error, "Canary aborted by user", false);
            }
        }
        let cause = format!("Rolling back {}", self.canary_id);
        let drained = self.shift_toward(0, &cause, reason::ROLLED_BACK, true);
        if drained {
            self.set_routes(100, 0, false);
            self.scale_down_failed_canary();
        }
        self.sync(Phase::Failed, 0);
        if self.pending.abort.is_some() {
            self.handled(Request::Abort);
        }
        self.actions.push(Action::NotifyHooks {
            hook_type: HookType::PostRollout,
            phase: Phase::Failed,
        });
        self.requeue = if drained {
            self.abort_scale_down_requeue()
        } else {
            Some(self.interval())
        };
        Err(Halt::Done)
    }

    /// `Canary failed! Scaling down`: once no traffic is left on a failed canary, scale it to zero,
    /// at once or (with `abortScaleDownDelaySeconds`) later.
    fn scale_down_failed_canary(&mut self) {
        self.warning(
            reason::ROLLED_BACK,
            format!("Canary failed! Scaling down {}", self.canary_id),
        );
        if self.analysis.abort_scale_down_delay_seconds.is_none() {
            self.actions.push(Action::ScaleTarget(0));
        }
    }

    /// When to come back for a delayed scale-down of a failed canary, if there is one.
    fn abort_scale_down_requeue(&self) -> Option<Duration> {
        self.analysis
            .abort_scale_down_delay_seconds
            .filter(|d| *d > 0)
            .map(|d| Duration::from_secs(d as u64))
    }

    /// Failed, with the router not yet where the failure put it: a rollback waiting for the primary
    /// (`status.canaryWeight` 0) or a failed promotion waiting for the canary (100). Moves traffic
    /// on as the receiving side's pods become available; once it is all there, a rolled-back
    /// canary is scaled down. Requests wait until then. Returns `Ok(())` when nothing is moving.
    fn finish_traffic_move(&mut self) -> Step {
        let goal = self.old.canary_weight;
        let Some(routes) = self.obs.routes else {
            return Ok(());
        };
        if routes.canary == goal {
            return Ok(());
        }
        self.defer_requests = true;
        let (cause, why) = if goal < routes.canary {
            (
                format!("Rolling back {}", self.canary_id),
                reason::ROLLED_BACK,
            )
        } else {
            (
                format!("Promotion of {} failed", self.target_id),
                reason::PROMOTION_FAILED,
            )
        };
        let arrived = self.shift_toward(goal, &cause, why, false);
        self.status.canary_weight = goal;
        if !arrived {
            self.requeue = Some(self.interval());
            return Err(Halt::Done);
        }
        self.set_routes(100 - goal, goal, false);
        if goal == 0 {
            self.scale_down_failed_canary();
            self.status.step_start_time = Some(self.now_time());
            self.requeue = self.abort_scale_down_requeue();
        } else {
            self.normal(
                reason::PROMOTION_FAILED,
                format!("Routing all traffic to {}", self.target_id),
            );
            self.requeue = None;
        }
        // What waited (a request, a new revision) is taken up on the next reconcile.
        if self.pending.any() || self.spec_changed() || self.configs_changed() {
            self.requeue = Some(Duration::from_secs(1));
        }
        Err(Halt::Done)
    }

    /// The primary did not roll out the promoted version: traffic stays on (or moves to) the
    /// canary, as fast as the canary's available pods can serve it.
    fn failed_promotion(&mut self, err: String) -> Step {
        self.warning(
            reason::PROMOTION_FAILED,
            format!(
                "Promotion of {} failed, primary not ready: {err}",
                self.target_id
            ),
        );
        self.alert(
            Severity::Error,
            format!("Promotion failed, primary not ready: {err}"),
            false,
        );
        let cause = format!("Promotion of {} failed", self.target_id);
        let moved = self.shift_toward(100, &cause, reason::PROMOTION_FAILED, true);
        if moved {
            self.set_routes(0, 100, false);
        }
        self.sync(Phase::Failed, 100);
        self.actions.push(Action::NotifyHooks {
            hook_type: HookType::PostRollout,
            phase: Phase::Failed,
        });
        self.requeue = (!moved).then(|| self.interval());
        Err(Halt::Done)
    }

    /// Acknowledges the requests this tick did not act on, saying why, so they are not retried.
    fn acknowledge_ignored_requests(&mut self) {
        let state = self.status.phase.map_or("not initialized", Phase::as_str);
        let (canary, target) = (&self.canary_id, &self.target_id);
        let ignored = [
            (
                Request::Promote,
                self.pending.promote.is_some(),
                format!("Nothing to promote: {canary} is not paused ({state})"),
            ),
            (
                Request::PromoteFull,
                self.pending.promote_full.is_some(),
                format!("Nothing to promote: {canary} has no release to promote ({state})"),
            ),
            (
                Request::Abort,
                self.pending.abort.is_some(),
                format!("Nothing to abort: no release of {target} is in progress ({state})"),
            ),
            (
                Request::Retry,
                self.pending.retry.is_some(),
                format!(
                    "Nothing to retry: only a Failed canary can be retried, {canary} is {state}"
                ),
            ),
        ];
        for (request, pending, message) in ignored {
            if pending {
                self.handled(request);
                self.normal(reason::REQUEST_HANDLED, message);
            }
        }
    }

    fn finish(mut self) -> Plan {
        if !self.defer_requests {
            self.acknowledge_ignored_requests();
        }
        self.requeue_for_pause_end();
        self.status.observed_generation = self.canary.metadata.generation;
        if significant(&self.old) != significant(&self.status) {
            self.status.last_transition_time = Some(self.now_time());
        }
        if let Some(phase) = self.status.phase {
            let kind = self.kind().to_string();
            let now = self.now_time();
            set_promoted(&mut self.status.conditions, phase, &kind, &now);
        }
        Plan {
            actions: self.actions,
            status: self.status,
            events: self.events,
            alerts: self.alerts,
            requeue_after: self.requeue,
        }
    }
}

/// `duration` rounded up to whole seconds, at least one: a requeue never comes before the moment
/// it waits for, and never spins.
fn whole_seconds_up(duration: SignedDuration) -> Duration {
    let seconds = duration.as_secs() + i64::from(duration.subsec_nanos() > 0);
    Duration::from_secs(seconds.max(1) as u64)
}

/// The status without its bookkeeping times, to tell whether anything a user sees changed.
fn significant(status: &CanaryStatus) -> CanaryStatus {
    CanaryStatus {
        last_transition_time: None,
        last_tick_time: None,
        metric_checks: Vec::new(),
        conditions: Vec::new(),
        observed_generation: None,
        ..status.clone()
    }
}
