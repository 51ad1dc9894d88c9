//! Flagger's canary strategy: the weight ladder (stepWeight, stepWeights, maxWeight), with the primary scaled with its traffic share.

use super::*;

impl<'a> Tick<'a> {
    pub(super) fn set_routes(&mut self, primary: i32, canary: i32, mirrored: bool) {
        self.actions.push(Action::SetRoutes(Routes {
            primary,
            canary,
            mirrored,
        }));
    }

    /// With `dynamicStableScale`, sizes the primary to the traffic it keeps, never below what it
    /// served before this tick's change.
    pub(super) fn scale_primary_with_traffic(&mut self, before: Routes, canary_weight: i32) {
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

    pub(super) fn run_canary(&mut self, routes: Routes) -> Step {
        let phase = self.phase().expect("in flight");
        let current = routes.canary;
        if phase == Phase::Progressing && current != self.old.canary_weight {
            // A tick moved the traffic but its status write (and so its events) was lost: the
            // operator crashed or the API server failed the write. Record that step now and give
            // it its full interval, rather than stepping again from the routes at once.
            self.status.canary_weight = current;
            self.normal(
                reason::PROGRESSING,
                format!("Advance {} canary weight {current}", self.canary_id),
            );
            return Err(Halt::Done);
        }
        if self.splits_by_replicas() && !self.wait_for_ratio(current, true) {
            return Err(Halt::Done);
        }
        let mut step = next_step_weight(&self.analysis, current);
        if step <= 0 && self.splits_by_replicas() {
            // No steps: the pods roll to the new version at once, within maxSurge/maxUnavailable.
            step = 100 - current;
        }
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
}
