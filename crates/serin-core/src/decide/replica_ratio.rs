//! The canary by replica ratio (provider `kubernetes` with steps or stepWeight): the apex Service
//! selects both sides' pods, so the canary's share of traffic is its share of the ready pods. The
//! canary weight in the status is what the pods follow; the routes only say whether the apex
//! selects both sides (any weight above 0) or the primary alone (0), and they return to the
//! primary alone only once it has all its pods.

use super::*;
use crate::replicas::{RatioMove, SideCounts, next_ratio_counts, resolve_surge_and_unavailable};
use serin_api::PodSplit;

impl<'a> Tick<'a> {
    pub(super) fn splits_by_replicas(&self) -> bool {
        self.canary.spec.splits_by_replicas()
    }

    /// `(maxSurge, maxUnavailable)` resolved against the release's replicas: the analysis's, else
    /// the target's rolling update, else Argo's 25% each.
    fn ratio_window(&self, replicas: i32) -> (i32, i32) {
        let rolling = self
            .obs
            .target
            .as_ref()
            .and_then(|t| t.spec.as_ref())
            .and_then(|s| s.strategy.as_ref())
            .and_then(|s| s.rolling_update.as_ref());
        let surge = self
            .analysis
            .max_surge
            .as_ref()
            .or(rolling.and_then(|r| r.max_surge.as_ref()));
        let unavailable = self
            .analysis
            .max_unavailable
            .as_ref()
            .or(rolling.and_then(|r| r.max_unavailable.as_ref()));
        resolve_surge_and_unavailable(surge, unavailable, replicas)
    }

    fn side_counts(&self, side: Side) -> SideCounts {
        let deployment = self.side_deployment(side);
        SideCounts {
            spec: deployment
                .and_then(|d| d.spec.as_ref())
                .and_then(|s| s.replicas)
                .unwrap_or(0),
            pods: deployment
                .and_then(|d| d.status.as_ref())
                .and_then(|s| s.replicas)
                .unwrap_or(0),
            available: self.available_replicas(side),
        }
    }

    /// The `(canary, primary)` pods `weight` asks for.
    fn ratio_split(&self, weight: i32) -> (i32, i32) {
        let replicas = self.full_replicas();
        let (surge, _) = self.ratio_window(replicas);
        weighted_split(replicas, weight, surge)
    }

    /// Whether both sides run exactly the pods `weight` asks for, all of them available.
    pub(super) fn pods_at_ratio(&self, weight: i32) -> bool {
        let (canary, primary) = self.ratio_split(weight);
        let (c, p) = (
            self.side_counts(Side::Canary),
            self.side_counts(Side::Primary),
        );
        c.spec == canary && c.available >= canary && p.spec == primary && p.available >= primary
    }

    /// Like [`Tick::pods_at_ratio`], recording a Waiting event (with the counts) when they are not.
    pub(super) fn wait_for_ratio(&mut self, weight: i32, announce: bool) -> bool {
        if self.pods_at_ratio(weight) {
            return true;
        }
        if announce {
            let (canary, primary) = self.ratio_split(weight);
            let (c, p) = (
                self.side_counts(Side::Canary),
                self.side_counts(Side::Primary),
            );
            self.normal(
                reason::WAITING,
                format!(
                    "Waiting for the pods of canary weight {weight}: {} has {} of {canary} available, {} has {} of {primary}",
                    self.target_id, c.available, self.primary_id, p.available
                ),
            );
        }
        false
    }

    /// The last step of every tick of a release by replica ratio: the scaling the strategies
    /// planned is replaced by the next safe move toward the pods of the status's canary weight,
    /// and the status shows the ready pods on each side.
    pub(super) fn follow_weight_with_pods(&mut self) {
        if !self.splits_by_replicas()
            || self.blocked_by.is_some()
            || self.obs.target.is_none()
            || self.obs.primary.is_none()
            || matches!(
                self.status.phase,
                None | Some(
                    Phase::Initializing
                        | Phase::Initialized
                        | Phase::Terminating
                        | Phase::Terminated
                )
            )
        {
            return;
        }
        // Once a release has ended and the apex serves the primary alone, the target's replicas
        // are no longer a traffic split: a manifest that scales it is not fought.
        let routed = self
            .actions
            .iter()
            .rev()
            .find_map(|a| match a {
                Action::SetRoutes(routes) => Some(routes.canary),
                _ => None,
            })
            .or(self.obs.routes.map(|r| r.canary))
            .unwrap_or(0);
        if matches!(self.status.phase, Some(Phase::Succeeded | Phase::Failed))
            && routed == 0
            && self.status.canary_weight == 0
        {
            return;
        }
        self.actions
            .retain(|a| !matches!(a, Action::ScaleTarget(_) | Action::ScalePrimary(_)));
        for action in &mut self.actions {
            if let Action::Promote { replicas } = action {
                *replicas = None;
            }
        }
        let replicas = self.full_replicas();
        let (max_surge, max_unavailable) = self.ratio_window(replicas);
        let canary = self.side_counts(Side::Canary);
        let stable = self.side_counts(Side::Primary);
        let (next_canary, next_stable) = next_ratio_counts(RatioMove {
            replicas,
            weight: self.status.canary_weight,
            max_surge,
            max_unavailable,
            canary,
            stable,
        });
        // The stable side first, so pods are added to it before the canary is drained.
        if next_stable != stable.spec {
            self.actions.push(Action::ScalePrimary(next_stable));
        }
        if next_canary != canary.spec {
            self.actions.push(Action::ScaleTarget(next_canary));
        }
        let ready = canary.available + stable.available;
        self.status.pod_split = Some(PodSplit {
            canary: canary.available,
            primary: stable.available,
            canary_percent: if ready > 0 {
                ((canary.available * 200 + ready) / (2 * ready)).min(100)
            } else {
                0
            },
        });
    }
}
