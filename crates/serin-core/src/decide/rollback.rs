//! Rollback, restarts and aborts: routing traffic back to the primary, scaling the canary down, and failed promotions.

use super::*;

impl<'a> Tick<'a> {
    /// A new revision arrived mid-analysis, or a restart was requested: start over with all
    /// traffic on the primary, once the primary (with `dynamicStableScale`, scaled back to full
    /// size first) can serve it. Until then the status keeps the old revision and the restart
    /// request stays pending, so the next tick comes back here.
    pub(super) fn restart(&mut self, cause: String, announcement: String) -> Step {
        if !self.shift_toward(0, &cause, reason::NEW_REVISION, true) {
            self.defer_requests = true;
            return Err(Halt::Done);
        }
        if self.pending.restart.is_some() {
            self.handled(Request::Restart);
        }
        self.normal(reason::NEW_REVISION, announcement);
        self.set_routes(100, 0, false);
        self.sync(Phase::Progressing, 0);
        Err(Halt::Done)
    }

    /// The target went back to the promoted revision mid-analysis: nothing is left to release. All
    /// traffic returns to the primary once it can serve it, and only then is the canary scaled down.
    pub(super) fn abandon_for_promoted(&mut self) -> Step {
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
    pub(super) fn rollback(&mut self, cause: RollbackCause) -> Step {
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
            RollbackCause::PrePromotion(failure) | RollbackCause::PostPromotion(failure) => {
                let (stage, side) = match &cause {
                    RollbackCause::PrePromotion(_) => ("pre-promotion", "before the switch"),
                    _ => ("post-promotion", "after the switch"),
                };
                self.warning(reason::CHECK_FAILED, failure.clone());
                self.warning(
                    reason::ROLLED_BACK,
                    format!(
                        "Rolling back {}: the {stage} analysis failed {side}; all traffic returns to {}",
                        self.canary_id, self.primary_id
                    ),
                );
                self.alert(
                    Severity::Error,
                    format!("Blue/green {stage} analysis failed: {failure}"),
                    false,
                );
            }
            RollbackCause::StepAnalysis(index, why) => {
                let total = self.analysis.steps().len();
                let (which, kind) = match index {
                    Some(index) => (
                        format!("the analysis at step {}/{total}", index + 1),
                        "Step-based",
                    ),
                    None => ("the background analysis".to_string(), "Background"),
                };
                self.warning(
                    reason::ROLLED_BACK,
                    format!("Rolling back {}: {which} failed: {why}", self.canary_id),
                );
                self.alert(
                    Severity::Error,
                    format!("{kind} analysis failed: {why}"),
                    false,
                );
            }
            RollbackCause::GateUnanswered {
                gate,
                seconds,
                error,
            } => {
                self.warning(
                    reason::ROLLED_BACK,
                    format!(
                        "Rolling back {}: {gate} gave no answer for {seconds}s (spec.progressDeadlineSeconds): {error}",
                        self.canary_id
                    ),
                );
                self.alert(
                    Severity::Error,
                    format!("{gate} gave no answer for {seconds}s"),
                    false,
                );
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
    pub(super) fn scale_down_failed_canary(&mut self) {
        self.warning(
            reason::ROLLED_BACK,
            format!("Canary failed! Scaling down {}", self.canary_id),
        );
        if self.analysis.abort_scale_down_delay_seconds.is_none() {
            self.actions.push(Action::ScaleTarget(0));
        }
    }

    /// When to come back for a delayed scale-down of a failed canary, if there is one.
    pub(super) fn abort_scale_down_requeue(&self) -> Option<Duration> {
        self.analysis
            .abort_scale_down_delay_seconds
            .filter(|d| *d > 0)
            .map(|d| Duration::from_secs(d as u64))
    }

    /// Failed, with the router not yet where the failure put it: a rollback waiting for the primary
    /// (`status.canaryWeight` 0) or a failed promotion waiting for the canary (100). Moves traffic
    /// on as the receiving side's pods become available; once it is all there, a rolled-back
    /// canary is scaled down. Requests wait until then. Returns `Ok(())` when nothing is moving.
    pub(super) fn finish_traffic_move(&mut self) -> Step {
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
            self.status.step_start_time = Some(self.now_micro());
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
    pub(super) fn failed_promotion(&mut self, err: String) -> Step {
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
    pub(super) fn acknowledge_ignored_requests(&mut self) {
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
            (
                Request::Restart,
                self.pending.restart.is_some(),
                format!("Nothing to restart: {canary} has no analysis to run ({state})"),
            ),
        ];
        for (request, pending, message) in ignored {
            if pending {
                self.handled(request);
                self.normal(reason::REQUEST_HANDLED, message);
            }
        }
    }
}
