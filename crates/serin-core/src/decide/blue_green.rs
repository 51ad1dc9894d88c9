//! Blue/green: the canary takes no traffic while it is analysed (a preview), then all of it at once; manual promotion releases it.
//! Argo Rollouts' pre- and post-promotion analyses run just before and just after the switch.

use super::*;
use serin_api::PromotionAnalysis;

/// Which side of the switch a promotion analysis runs on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Pre,
    Post,
}

impl<'a> Tick<'a> {
    pub(super) fn run_blue_green(&mut self, routes: Routes) -> Step {
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
                self.status.step_start_time = Some(self.now_micro());
            }
            return Err(Halt::Done);
        }
        if done > total {
            // Traffic is on the new version and the primary still runs the previous one.
            if let Some(post) = self.analysis.post_promotion_analysis.clone() {
                let passed = done - total - 1;
                if passed < post.iterations() {
                    return self.promotion_stage(&post, Stage::Post, passed);
                }
            }
            return self.promote_when_approved();
        }
        if !self.promotion_approved()? {
            return Err(Halt::Done);
        }
        if !self.manual_promotion_released() {
            return Err(Halt::Done);
        }
        if let Some(pre) = self.analysis.pre_promotion_analysis.clone() {
            let passed = self.status.pre_promotion_passed.unwrap_or(0);
            if passed < pre.iterations() {
                return self.promotion_stage(&pre, Stage::Pre, passed);
            }
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
    pub(super) fn manual_promotion_released(&mut self) -> bool {
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

    /// One interval of a pre- or post-promotion analysis that has `passed` intervals behind it:
    /// its checks pass (counted; the next interval goes on) or the release is rolled back at once,
    /// before the switch (the primary never left) or after it (traffic returns to the primary,
    /// which still runs the previous version).
    fn promotion_stage(
        &mut self,
        stage_analysis: &PromotionAnalysis,
        stage: Stage,
        passed: i32,
    ) -> Step {
        let phase = match stage {
            Stage::Pre => Phase::Progressing,
            Stage::Post => Phase::Promoting,
        };
        let failure =
            self.first_failed_check(stage_analysis.webhooks(), stage_analysis.metrics(), phase)?;
        if let Some(failure) = failure {
            return self.rollback(match stage {
                Stage::Pre => RollbackCause::PrePromotion(failure),
                Stage::Post => RollbackCause::PostPromotion(failure),
            });
        }
        let total = stage_analysis.iterations();
        let name = match stage {
            Stage::Pre => "Pre-promotion",
            Stage::Post => "Post-promotion",
        };
        self.normal(
            reason::PROGRESSING,
            format!(
                "{name} analysis of {} passed {}/{total}",
                self.canary_id,
                passed + 1
            ),
        );
        match stage {
            Stage::Pre => self.status.pre_promotion_passed = Some(passed + 1),
            Stage::Post => self.status.iterations += 1,
        }
        Err(Halt::Done)
    }
}
