//! A/B testing: the canary receives the matching requests for a number of iterations, then is promoted.

use super::*;

impl<'a> Tick<'a> {
    pub(super) fn run_ab(&mut self) -> Step {
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
}
