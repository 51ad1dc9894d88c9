//! Argo Rollouts' explicit steps: setWeight, pause (timed or until promoted), setCanaryScale and analysis steps.

use super::*;
use serin_api::AnalysisPhase;

impl<'a> Tick<'a> {
    /// The canary's size when a release with steps starts: what the `setCanaryScale` steps before
    /// the first other step give it (at the first `setWeight`'s weight for `matchTrafficWeight`),
    /// so it never runs larger than they say.
    pub(super) fn first_steps_size(&self) -> i32 {
        let steps = self.analysis.steps();
        let leading = steps
            .iter()
            .take_while(|s| s.set_canary_scale.is_some())
            .count();
        let first_weight = steps.iter().find_map(|s| s.set_weight).unwrap_or(0);
        self.canary_size(leading, first_weight)
    }

    /// The `setCanaryScale` in effect before step `index`, if any.
    pub(super) fn canary_scale_before(&self, index: usize) -> Option<CanaryScale> {
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
    pub(super) fn scale_canary_for(&mut self, index: usize, weight: i32) {
        let wanted = self.canary_size(index, weight);
        if self.planned_replicas(Side::Canary) != wanted {
            self.actions.push(Action::ScaleTarget(wanted));
        }
    }

    /// Replicas of the canary at `weight` under the setCanaryScale in effect before step `index`
    /// (full size when there is none).
    pub(super) fn canary_size(&self, index: usize, weight: i32) -> i32 {
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
    pub(super) fn sides_ready_for_weight(&mut self, index: usize, from: i32, to: i32) -> bool {
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

    pub(super) fn describe_step(&self, index: usize) -> String {
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
        } else if let Some(header) = &step.set_header_route {
            let verb = if header.r#match.as_ref().is_some_and(|m| !m.is_empty()) {
                "set"
            } else {
                "removed"
            };
            format!("setHeaderRoute: {} {verb}", header.name)
        } else if let Some(mirror) = &step.set_mirror_route {
            let verb = if mirror.r#match.as_ref().is_some_and(|m| !m.is_empty()) {
                "set"
            } else {
                "removed"
            };
            format!("setMirrorRoute: {} {verb}", mirror.name)
        } else if let Some(analysis) = &step.analysis {
            let names: Vec<&str> = analysis.metrics.iter().map(|m| m.name.as_str()).collect();
            format!("analysis: {}", names.join(", "))
        } else {
            "invalid".into()
        }
    }

    pub(super) fn step_entered(&mut self, index: usize) {
        let steps = self.analysis.steps();
        let total = steps.len();
        self.status.current_step_index = Some(index as i32);
        self.status.step_start_time = Some(self.now_micro());
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
        if let Some(spec) = self
            .analysis
            .steps()
            .get(index)
            .and_then(|s| s.analysis.clone())
        {
            self.start_step_analysis(index, &spec);
        }
    }

    pub(super) fn step_completed(&mut self, index: usize) {
        let total = self.analysis.steps().len();
        let description = self.describe_step(index);
        self.normal(
            reason::PROGRESSING,
            format!("Step {}/{total} completed ({description})", index + 1),
        );
    }

    pub(super) fn run_steps(&mut self, routes: Routes, first_tick: bool) -> Step {
        let steps = self.analysis.steps().to_vec();
        let total = steps.len();
        let mut index = if first_tick {
            self.step_entered(0);
            0
        } else {
            self.old.current_step_index.unwrap_or(0).max(0) as usize
        };
        if let Some(spec) = self.analysis.background_analysis.clone()
            && index as i32 >= spec.starting_step.unwrap_or(0)
        {
            let state = self.step_analysis(None, &spec)?;
            match state.phase {
                AnalysisPhase::Failed | AnalysisPhase::Error => {
                    let why = state
                        .message
                        .unwrap_or_else(|| format!("the analysis ended {}", state.phase));
                    return self.rollback(RollbackCause::StepAnalysis(None, why));
                }
                AnalysisPhase::Inconclusive if self.pending.promote.is_none() => {
                    let message = format!(
                        "Background analysis is Inconclusive: {}; promote to go on, or abort",
                        state.message.unwrap_or_default()
                    );
                    if self.old.message.as_deref() != Some(message.as_str()) {
                        self.warning(reason::WAITING, message.clone());
                    }
                    self.status.message = Some(message);
                    return Err(Halt::Done);
                }
                _ => {}
            }
        }
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
                if self.splits_by_replicas() {
                    // The step is done when the pods are: its weight is set first, and the pods
                    // follow it over the next reconciles.
                    if weight != target_weight {
                        self.set_routes(100 - target_weight, target_weight, false);
                        self.status.canary_weight = target_weight;
                        self.normal(
                            reason::PROGRESSING,
                            format!("Advance {} canary weight {target_weight}", self.canary_id),
                        );
                        return Err(Halt::Done);
                    }
                    if !self.wait_for_ratio(target_weight, true) {
                        return Err(Halt::Done);
                    }
                    self.step_completed(index);
                    index += 1;
                    self.step_entered(index);
                    continue;
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
            if step.set_header_route.is_some() || step.set_mirror_route.is_some() {
                // The router builds the route from the steps passed; the step is done at once.
                self.step_completed(index);
                index += 1;
                self.step_entered(index);
                continue;
            }
            if let Some(spec) = &step.analysis {
                let state = self.step_analysis(Some(index), spec)?;
                match state.phase {
                    AnalysisPhase::Running => {
                        self.status.current_step_index = Some(index as i32);
                        return Err(Halt::Done);
                    }
                    AnalysisPhase::Successful => {}
                    AnalysisPhase::Inconclusive if self.pending.promote.is_some() => {
                        self.handled(Request::Promote);
                        self.normal(
                            reason::REQUEST_HANDLED,
                            format!(
                                "Promoted: {} goes on past the inconclusive analysis at step {}/{total}",
                                self.canary_id,
                                index + 1
                            ),
                        );
                    }
                    AnalysisPhase::Inconclusive => {
                        let message = format!(
                            "Analysis at step {}/{total} is Inconclusive: {}; promote to go on, or abort",
                            index + 1,
                            state.message.unwrap_or_default()
                        );
                        if self.old.message.as_deref() != Some(message.as_str()) {
                            self.warning(reason::WAITING, message.clone());
                        }
                        self.status.message = Some(message);
                        self.status.current_step_index = Some(index as i32);
                        return Err(Halt::Done);
                    }
                    AnalysisPhase::Failed | AnalysisPhase::Error => {
                        let why = state
                            .message
                            .unwrap_or_else(|| format!("the analysis ended {}", state.phase));
                        return self.rollback(RollbackCause::StepAnalysis(Some(index), why));
                    }
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
}
