//! Promotion: copying the canary template to the primary, moving traffic back to it, and finalising the release.

use super::*;

impl<'a> Tick<'a> {
    pub(super) fn promote_when_approved(&mut self) -> Step {
        if self.promotion_approved()? {
            self.promote_now()
        } else {
            Err(Halt::Done)
        }
    }

    /// `Copying ... template spec`: the primary takes the target's template (and, without an
    /// autoscaler, the release's full replica count).
    pub(super) fn copy_template_to_primary(&mut self) {
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

    pub(super) fn promote_now(&mut self) -> Step {
        self.copy_template_to_primary();
        self.set_phase(Phase::Promoting);
        Err(Halt::Done)
    }

    /// Promoting: traffic goes back to the (now updated) primary, at once or by `stepWeightPromotion`.
    pub(super) fn shift_traffic_to_primary(&mut self, routes: Routes) -> Step {
        if self.splits_by_replicas() {
            // The primary (now on the new version) takes the pods back; the apex Service leaves
            // the canary only once the primary has them all.
            self.status.canary_weight = 0;
            if !self.wait_for_ratio(0, true) {
                return Err(Halt::Done);
            }
            self.normal(reason::PROMOTING, "Routing all traffic to primary");
            self.set_routes(100, 0, false);
            self.set_phase(Phase::Finalising);
            return Err(Halt::Done);
        }
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
    pub(super) fn finalise(&mut self) -> Step {
        if let Some(delay) = self.analysis.scale_down_delay_seconds
            && let Some(left) = self.remaining_after(self.old.step_start_time.as_ref(), delay)
        {
            self.requeue = Some(self.interval().min(left));
            return Err(Halt::Done);
        }
        self.complete_promotion();
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

    pub(super) fn promote_without_analysis(&mut self) -> Step {
        let cause = format!("Skipping the analysis of {}", self.target_id);
        if !self.shift_toward(0, &cause, reason::SKIPPED, true) {
            return Err(Halt::Done);
        }
        self.set_routes(100, 0, false);
        self.copy_template_to_primary();
        if self.canary.spec.autoscaler_ref.is_some() {
            self.actions.push(Action::SyncPrimaryAutoscaler);
        }
        self.complete_promotion();
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

    /// The end of every promotion: the canary workload scaled to zero, Succeeded, and the
    /// post-rollout hooks called.
    fn complete_promotion(&mut self) {
        self.actions.push(Action::ScaleTarget(0));
        self.set_phase(Phase::Succeeded);
        self.actions.push(Action::NotifyHooks {
            hook_type: HookType::PostRollout,
            phase: Phase::Succeeded,
        });
    }
}
