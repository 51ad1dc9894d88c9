//! The analysis of an interval (metric checks and rollout webhooks) and the gates that hold traffic or promotion (confirm-traffic-increase, confirm-promotion webhooks).

use super::*;

impl<'a> Tick<'a> {
    /// Rollout hooks, then metrics (builtins and inline queries first, then templates); the first
    /// failure adds one failed check and ends the tick.
    pub(super) fn analyse(&mut self) -> Step {
        let hooks = self.hooks(HookType::Rollout);
        let metrics = self.analysis.metrics().to_vec();
        if let Some(failure) = self.first_failed_check(&hooks, &metrics, Phase::Progressing)? {
            self.warning(reason::CHECK_FAILED, failure);
            self.status.failed_checks += 1;
            return Err(Halt::Done);
        }
        Ok(())
    }

    /// Runs `hooks` with `phase` in the payload, then `metrics` (builtins and inline queries
    /// first, then templates), recording each metric's result in the status; the message of the
    /// first that fails, if one does.
    pub(super) fn first_failed_check(
        &mut self,
        hooks: &[CanaryWebhook],
        metrics: &[serin_api::CanaryMetric],
        phase: Phase,
    ) -> Result<Option<String>, Halt> {
        for hook in hooks {
            if let Err(err) = self.hook(hook, phase)? {
                return Ok(Some(format!(
                    "Halt {} advancement external check {} failed {err}",
                    self.canary_id, hook.name
                )));
            }
        }
        let ordered = metrics
            .iter()
            .filter(|m| m.template_ref.is_none())
            .chain(metrics.iter().filter(|m| m.template_ref.is_some()));
        for metric in ordered {
            let reading = self.metric(&metric.name)?;
            let provider = self
                .canary
                .spec
                .provider
                .as_deref()
                .filter(|p| !p.is_empty())
                .unwrap_or("istio");
            let judgement =
                judge_routed_by(provider, metric, &reading, &self.canary_id, &self.target_id);
            let record = MetricCheckStatus {
                name: metric.name.clone(),
                value: judgement.value,
                passed: judgement.passed,
                message: judgement.message.clone(),
                time: Some(self.now_time()),
            };
            self.status.record_metric_check(record);
            let phase = match (&reading, judgement.passed) {
                (_, true) => serin_api::AnalysisPhase::Successful,
                (MetricReading::Error(_), false) => serin_api::AnalysisPhase::Error,
                (_, false) => serin_api::AnalysisPhase::Failed,
            };
            self.record_interval_reading(&metric.name, phase, judgement.value, &judgement.message);
            if !judgement.passed {
                return Ok(Some(judgement.message));
            }
        }
        Ok(None)
    }

    /// Asks a confirm-* gate whether the release may go on. A gate that answers "closed" holds the
    /// release for as long as it says so (someone is deciding); a gate that gives no answer at all
    /// holds it too, saying so each tick, until `progressDeadlineSeconds` have passed without an
    /// answer, when the release is rolled back.
    pub(super) fn gate_open(&mut self, hook: &CanaryWebhook, phase: Phase) -> Result<bool, Halt> {
        let hook_type = hook.hook_type().unwrap_or(HookType::Rollout);
        let check = Check::Hook {
            name: hook.name.clone(),
            hook_type,
            phase,
        };
        let unanswered = self.obs.verdicts.iter().find_map(|v| match &v.outcome {
            Outcome::HookUnanswered(error) if v.check == check => Some(error.clone()),
            _ => None,
        });
        let Some(error) = unanswered else {
            let open = self.hook(hook, phase)?.is_ok();
            forget_silent_gate(&mut self.status);
            return Ok(open);
        };
        let since = self
            .old
            .unanswered_gate_since
            .as_ref()
            .map_or(self.now, |t| t.0);
        self.status.unanswered_gate_since = Some(Time(since));
        let deadline = self.canary.spec.progress_deadline_seconds();
        let silent_for = self.now.duration_since(since).as_secs();
        let gate = format!("{hook_type} gate {}", hook.name);
        if silent_for >= i64::from(deadline) {
            return self
                .rollback(RollbackCause::GateUnanswered {
                    gate,
                    seconds: deadline,
                    error,
                })
                .map(|()| false);
        }
        let message = format!(
            "{gate} gave no answer: {error}; the release holds, and is rolled back if the gate stays silent for {deadline}s (spec.progressDeadlineSeconds), {}s from now",
            i64::from(deadline) - silent_for
        );
        self.warning(reason::WAITING, message.clone());
        self.status.message = Some(message);
        Ok(false)
    }

    /// confirm-traffic-increase gates; `Ok(false)` when one holds the traffic where it is.
    pub(super) fn traffic_increase_approved(&mut self) -> Result<bool, Halt> {
        for hook in self.hooks(HookType::ConfirmTrafficIncrease) {
            match self.gate_open(&hook, Phase::Progressing)? {
                true => self.normal(
                    reason::PROGRESSING,
                    format!("Confirm-traffic-increase check {} passed", hook.name),
                ),
                false => {
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
    pub(super) fn promotion_approved(&mut self) -> Result<bool, Halt> {
        for hook in self.hooks(HookType::ConfirmPromotion) {
            match self.gate_open(&hook, Phase::Progressing)? {
                true => self.normal(
                    reason::PROGRESSING,
                    format!("Confirm-promotion check {} passed", hook.name),
                ),
                false => {
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
}
