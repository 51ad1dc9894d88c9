//! Initialization, the idle wait for a new revision, starting one, and the dispatch of a release in flight to its strategy.

use super::*;

impl<'a> Tick<'a> {
    pub(super) fn initialize(&mut self) -> Step {
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

    pub(super) fn primary_readiness(&self, threshold: i32) -> Readiness {
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
    pub(super) fn idle(&mut self) -> Step {
        let failed = self.phase() == Some(Phase::Failed);
        if failed {
            self.finish_traffic_move()?;
        }
        let run_wanted = (failed && self.pending.retry.is_some())
            || (self.pending.restart.is_some() && self.pending.promote_full.is_none())
            || self.spec_changed()
            || self.configs_changed();
        if run_wanted && self.pending.promote_full.is_none() {
            self.reclaim_traffic_for_a_new_run()?;
        }
        // A retry or a restart releases the current revision again, changed or not.
        let mut rerun = false;
        if failed && self.pending.retry.is_some() {
            self.handled(Request::Retry);
            rerun = true;
            self.normal(
                reason::REQUEST_HANDLED,
                format!("Retrying the release of {}", self.target_id),
            );
        }
        if self.pending.restart.is_some() && self.pending.promote_full.is_none() {
            self.handled(Request::Restart);
            rerun = true;
            self.normal(
                reason::REQUEST_HANDLED,
                format!(
                    "Restart requested: running the analysis of {}'s current revision again",
                    self.target_id
                ),
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
        if !(changed || rerun) {
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

    /// A failed promotion leaves all traffic on the canary. A new run (a new revision, a retry, a
    /// restart) must start from the primary, or it would begin at the canary's weight and skip its
    /// analysis: the traffic goes back to the primary once the primary is ready, and until then the
    /// run waits, saying why.
    fn reclaim_traffic_for_a_new_run(&mut self) -> Step {
        let Some(routes) = self.obs.routes else {
            return Ok(());
        };
        if routes.canary == 0 && !routes.mirrored {
            return Ok(());
        }
        match self.primary_readiness(self.analysis.primary_ready_threshold()) {
            Readiness::Ready => {
                self.set_routes(100, 0, false);
                self.status.canary_weight = 0;
                self.normal(
                    reason::PROGRESSING,
                    format!(
                        "Routing all traffic of {} back to {} before a new run",
                        self.canary_id, self.primary_id
                    ),
                );
                Ok(())
            }
            Readiness::Waiting(why) | Readiness::Stalled(why) => {
                self.defer_requests = true;
                self.block(
                    EventType::Warning,
                    reason::WAITING,
                    format!(
                        "A new run of {} waits: all traffic is on the canary since a failed promotion, and {} is not ready to take it back ({why}); fix the primary's rollout (kubectl rollout status deployment/{}) and the run starts from it",
                        self.target_id,
                        self.primary_id,
                        self.primary_id.split('.').next().unwrap_or_default()
                    ),
                )
            }
        }
    }

    /// After a rollback with `abortScaleDownDelaySeconds`, scales the canary down once the delay ends.
    pub(super) fn delayed_scale_down(&mut self) {
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
    pub(super) fn start_revision(&mut self) -> Step {
        self.ticked();
        let phase = self.phase().unwrap_or(Phase::Initialized);
        for hook in self.hooks(HookType::ConfirmRollout) {
            match self.gate_open(&hook, phase)? {
                true => self.normal(
                    reason::PROGRESSING,
                    format!("Confirm-rollout check {} passed", hook.name),
                ),
                false => {
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

    pub(super) fn in_flight(&mut self) -> Step {
        let phase = self.phase().expect("in-flight phases are set");
        if self.due() {
            self.ticked();
        } else if self.measurement_due() {
            self.measurement_only = true;
            self.requeue_for_interval();
        } else {
            return self.wait_until_due();
        }

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
        if self.pending.restart.is_some() {
            if matches!(phase, Phase::Promoting | Phase::Finalising) {
                self.handled(Request::Restart);
                self.warning(
                    reason::REQUEST_HANDLED,
                    format!(
                        "Restart refused: the promotion of {} has started",
                        self.target_id
                    ),
                );
            } else {
                return self.restart(
                    format!("Restart of {} requested", self.target_id),
                    format!(
                        "Restart requested! Restarting analysis for {}",
                        self.target_id
                    ),
                );
            }
        }
        if matches!(phase, Phase::Progressing | Phase::WaitingPromotion) {
            let back_on_promoted = self.old.last_promoted_spec.as_deref() == Some(&self.hash)
                && self.old.last_applied_spec.as_deref() != Some(&self.hash);
            if back_on_promoted && !self.configs_changed() {
                return self.abandon_for_promoted();
            }
            if self.old.last_applied_spec.as_deref() != Some(&self.hash) || self.configs_changed() {
                return self.restart(
                    format!("New revision of {} detected", self.target_id),
                    format!(
                        "New revision detected! Restarting analysis for {}",
                        self.target_id
                    ),
                );
            }
        }

        self.actions.push(Action::EnsurePrimary {
            sync_template: false,
        });
        self.actions.push(Action::EnsureRouting);
        if !self.skips_analysis() {
            match self.primary_readiness(self.analysis.primary_ready_threshold()) {
                Readiness::Ready => {}
                // A release by replica ratio scales the primary at every step; the strategy waits
                // for its pods, saying how many. A promoted template must still roll out.
                Readiness::Waiting(_)
                    if self.splits_by_replicas()
                        && matches!(phase, Phase::Progressing | Phase::WaitingPromotion) => {}
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
            Readiness::Waiting(_) if self.splits_by_replicas() => {}
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
        } else if !self.measurement_only {
            self.analyse()?;
        }

        match self.strategy() {
            Strategy::Canary => self.run_canary(routes),
            Strategy::Steps => self.run_steps(routes, first_tick),
            Strategy::AbTesting => self.run_ab(),
            Strategy::BlueGreen => self.run_blue_green(routes),
        }
    }
}
