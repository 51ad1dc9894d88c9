//! The analysis of an interval (metric checks and rollout webhooks) and the gates that hold traffic or promotion (confirm-traffic-increase, confirm-promotion webhooks).

use super::*;

impl<'a> Tick<'a> {
    /// Rollout hooks, then metrics (builtins and inline queries first, then templates); the first
    /// failure adds one failed check and ends the tick.
    pub(super) fn analyse(&mut self) -> Step {
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
    pub(super) fn traffic_increase_approved(&mut self) -> Result<bool, Halt> {
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
    pub(super) fn promotion_approved(&mut self) -> Result<bool, Halt> {
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
}
