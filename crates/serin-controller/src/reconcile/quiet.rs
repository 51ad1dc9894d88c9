//! Canaries between two ticks of a release, whose next decision reads nothing but the Canary and
//! the clock until its tick is due (the plan's `workload_status_waits`). The status changes the
//! Deployment controller writes during each rollout, and the watch events of the tick's own writes,
//! would otherwise each reconcile the Canary only to observe its world in full and find nothing
//! due: at 10,000 Canaries most reconciles of a release.
//!
//! A tick that ends with such a plan leaves the Canary quiet until its requeue: a change of its
//! target or primary that leaves their spec (`metadata.generation`) as the tick saw or wrote it
//! triggers nothing, and a reconcile of the Canary as the tick left it (the watch event of its own
//! status write, say) returns at once. Any other trigger (a config, template, provider, route or
//! autoscaler, a finished check, a spec change, a change of the Canary) wakes it, and so does
//! anything that arrives while its tick runs and was not seen by it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A Canary's namespace and name.
type CanaryKey = (String, String);

/// A workload's kind and name (in the Canary's namespace).
pub(super) type Workload = (&'static str, String);

/// What the operator knows about each Canary between ticks.
#[derive(Default)]
pub(super) struct QuietCanaries {
    canaries: Mutex<HashMap<CanaryKey, State>>,
}

enum State {
    /// A tick is running: the generations of its workloads' changes that arrived meanwhile, and
    /// whether anything else did.
    Ticking {
        generations: Vec<(Workload, Option<i64>)>,
        disturbed: bool,
    },
    /// The last tick let the workloads wait until `until`, having left the Canary at `version`
    /// and its workloads at `generations`.
    Quiet {
        until: Instant,
        version: String,
        generations: Vec<(Workload, Option<i64>)>,
    },
}

/// How a quiet tick left its Canary: its resourceVersion after the tick's writes, and the
/// generation of each workload it read or wrote.
pub(super) struct LeftAt {
    /// The Canary's resourceVersion after the tick's status write.
    pub version: String,
    /// The target's and the primary's generations after the tick's writes.
    pub generations: Vec<(Workload, Option<i64>)>,
}

impl QuietCanaries {
    /// When `canary` is quiet and still at the `version` its last tick left it, how long until
    /// that tick's requeue: the reconcile has nothing to do.
    pub(super) fn asleep(&self, canary: &CanaryKey, version: Option<&str>) -> Option<Duration> {
        let canaries = self.canaries.lock().expect("never poisoned");
        match canaries.get(canary)? {
            State::Quiet {
                until,
                version: left,
                ..
            } if Some(left.as_str()) == version => until
                .checked_duration_since(Instant::now())
                .filter(|left| !left.is_zero()),
            _ => None,
        }
    }

    /// A tick of `canary` starts: changes from now on are either seen by it or remembered.
    pub(super) fn ticking(&self, canary: &CanaryKey) {
        self.canaries.lock().expect("never poisoned").insert(
            canary.clone(),
            State::Ticking {
                generations: Vec::new(),
                disturbed: false,
            },
        );
    }

    /// The tick of `canary` ended: quiet for `wait` when its plan let the workloads wait (and
    /// nothing arrived meanwhile that it did not see), awake otherwise.
    pub(super) fn ticked(&self, canary: &CanaryKey, wait: Option<(Duration, LeftAt)>) {
        let mut canaries = self.canaries.lock().expect("never poisoned");
        let quiet = match (canaries.remove(canary), wait) {
            (
                Some(State::Ticking {
                    generations: arrived,
                    disturbed: false,
                }),
                Some((wait, left)),
            ) if arrived
                .iter()
                .all(|(workload, generation)| seen(&left.generations, workload, *generation)) =>
            {
                State::Quiet {
                    until: Instant::now() + wait,
                    version: left.version,
                    generations: left.generations,
                }
            }
            _ => return,
        };
        canaries.insert(canary.clone(), quiet);
    }

    /// Whether a change of `workload` at `generation` concerns `canary` now, remembering it
    /// for a tick under way.
    pub(super) fn workload_changed(
        &self,
        canary: &CanaryKey,
        workload: Workload,
        generation: Option<i64>,
    ) -> bool {
        let mut canaries = self.canaries.lock().expect("never poisoned");
        match canaries.get_mut(canary) {
            None => true,
            Some(State::Ticking { generations, .. }) => {
                // Bounded: one entry per workload, the latest generation kept.
                match generations.iter_mut().find(|(w, _)| *w == workload) {
                    Some((_, seen)) => *seen = (*seen).max(generation),
                    None => generations.push((workload, generation)),
                }
                true
            }
            Some(State::Quiet {
                until, generations, ..
            }) => {
                if *until > Instant::now() && seen(generations, &workload, generation) {
                    return false;
                }
                canaries.remove(canary);
                true
            }
        }
    }

    /// Something other than its workloads changed for `canary`: its next reconcile runs in full.
    pub(super) fn disturb(&self, canary: &CanaryKey) {
        let mut canaries = self.canaries.lock().expect("never poisoned");
        match canaries.get_mut(canary) {
            Some(State::Ticking { disturbed, .. }) => *disturbed = true,
            Some(State::Quiet { .. }) => {
                canaries.remove(canary);
            }
            None => {}
        }
    }

    /// [`disturb`](Self::disturb) for each of `canaries`, which it returns.
    pub(super) fn disturbing(
        &self,
        canaries: Vec<kube::runtime::reflector::ObjectRef<serin_api::Canary>>,
    ) -> Vec<kube::runtime::reflector::ObjectRef<serin_api::Canary>> {
        for canary in &canaries {
            self.disturb(&key_of(canary));
        }
        canaries
    }

    /// Forgets the Canaries for which `keep` is false (they are gone).
    pub(super) fn forget_unless(&self, keep: impl Fn(&CanaryKey) -> bool) {
        self.canaries
            .lock()
            .expect("never poisoned")
            .retain(|key, _| keep(key));
    }
}

/// The key of the Canary `canary` refers to.
pub(super) fn key_of(canary: &kube::runtime::reflector::ObjectRef<serin_api::Canary>) -> CanaryKey {
    (
        canary.namespace.clone().unwrap_or_default(),
        canary.name.clone(),
    )
}

/// Whether `generation` of `workload` is one the tick saw or wrote.
fn seen(
    generations: &[(Workload, Option<i64>)],
    workload: &Workload,
    generation: Option<i64>,
) -> bool {
    generations
        .iter()
        .any(|(w, g)| w == workload && generation <= *g)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn podinfo() -> CanaryKey {
        ("test".into(), "podinfo".into())
    }

    fn target() -> Workload {
        ("Deployment", "podinfo".into())
    }

    fn left(version: &str, generation: i64) -> LeftAt {
        LeftAt {
            version: version.into(),
            generations: vec![
                (target(), Some(generation)),
                (("Deployment", "podinfo-primary".into()), Some(1)),
            ],
        }
    }

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn a_quiet_canary_ignores_status_changes_and_its_own_echo_until_due() {
        let quiet = QuietCanaries::default();
        quiet.ticking(&podinfo());
        quiet.ticked(&podinfo(), Some((MINUTE, left("12", 3))));
        assert!(!quiet.workload_changed(&podinfo(), target(), Some(3)));
        assert!(!quiet.workload_changed(
            &podinfo(),
            ("Deployment", "podinfo-primary".into()),
            Some(1)
        ));
        assert!(
            quiet
                .asleep(&podinfo(), Some("12"))
                .is_some_and(|left| left <= MINUTE)
        );
        assert_eq!(
            quiet.asleep(&podinfo(), Some("13")),
            None,
            "the Canary changed"
        );
        assert_eq!(
            quiet.asleep(&("test".into(), "other".into()), Some("12")),
            None
        );
    }

    #[test]
    fn a_spec_change_or_another_trigger_wakes_it() {
        let quiet = QuietCanaries::default();
        quiet.ticking(&podinfo());
        quiet.ticked(&podinfo(), Some((MINUTE, left("12", 3))));
        assert!(quiet.workload_changed(&podinfo(), target(), Some(4)));
        assert!(
            quiet.workload_changed(&podinfo(), target(), Some(3)),
            "awake until the next tick"
        );
        assert_eq!(quiet.asleep(&podinfo(), Some("12")), None);

        quiet.ticking(&podinfo());
        quiet.ticked(&podinfo(), Some((MINUTE, left("14", 4))));
        quiet.disturb(&podinfo());
        assert_eq!(quiet.asleep(&podinfo(), Some("14")), None);
        assert!(quiet.workload_changed(&podinfo(), target(), Some(4)));
    }

    #[test]
    fn what_arrives_during_a_tick_keeps_it_awake_unless_the_tick_saw_it() {
        let quiet = QuietCanaries::default();
        quiet.ticking(&podinfo());
        assert!(quiet.workload_changed(&podinfo(), target(), Some(3)));
        quiet.ticked(&podinfo(), Some((MINUTE, left("12", 3))));
        assert!(
            quiet.asleep(&podinfo(), Some("12")).is_some(),
            "generation 3 was seen"
        );

        quiet.ticking(&podinfo());
        assert!(quiet.workload_changed(&podinfo(), target(), Some(5)));
        quiet.ticked(&podinfo(), Some((MINUTE, left("13", 4))));
        assert_eq!(
            quiet.asleep(&podinfo(), Some("13")),
            None,
            "generation 5 came after"
        );

        quiet.ticking(&podinfo());
        quiet.disturb(&podinfo());
        quiet.ticked(&podinfo(), Some((MINUTE, left("14", 5))));
        assert_eq!(
            quiet.asleep(&podinfo(), Some("14")),
            None,
            "a config changed meanwhile"
        );

        quiet.ticking(&podinfo());
        quiet.ticked(&podinfo(), None);
        assert!(
            quiet.workload_changed(&podinfo(), target(), Some(5)),
            "a plan that waits for a change"
        );
    }

    #[test]
    fn quiet_ends_with_the_requeue() {
        let quiet = QuietCanaries::default();
        quiet.ticking(&podinfo());
        quiet.ticked(&podinfo(), Some((Duration::ZERO, left("12", 3))));
        assert_eq!(quiet.asleep(&podinfo(), Some("12")), None);
        assert!(quiet.workload_changed(&podinfo(), target(), Some(3)));
    }

    #[test]
    fn gone_canaries_are_forgotten() {
        let quiet = QuietCanaries::default();
        quiet.ticking(&podinfo());
        quiet.ticked(&podinfo(), Some((MINUTE, left("12", 3))));
        quiet.forget_unless(|_| false);
        assert_eq!(quiet.asleep(&podinfo(), Some("12")), None);
    }
}
