//! Blue/green: the canary takes no traffic while it is analysed (a preview), then all of it at once; manual promotion releases it.

use super::*;

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
}
