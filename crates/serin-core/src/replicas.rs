//! Replica arithmetic: how many pods the canary and the primary get for a traffic weight.
//!
//! The formulas are Argo Rollouts' (its basic-canary split and its traffic-routed counts), so users
//! moving from Argo see the same pod counts for the same weights.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Splits `replicas` pods between canary and stable so the canary's share is as close as possible to
/// `weight` percent, returning `(canary, stable)`.
///
/// Neither side is rounded down to zero for weights strictly between 0 and 100 (unless there is a
/// single replica and no surge); with `max_surge > 0` the pair may total `replicas + 1`. On equal
/// distance the larger canary wins. The canary by replica ratio sizes both sides with it.
///
/// ```
/// use serin_core::replicas::weighted_split;
/// assert_eq!(weighted_split(10, 41, 1), (4, 6));
/// assert_eq!(weighted_split(10, 25, 1), (3, 8)); // one surge pod above 10
/// assert_eq!(weighted_split(2, 1, 1), (1, 2)); // never rounds the canary to zero
/// ```
pub fn weighted_split(replicas: i32, weight: i32, max_surge: i32) -> (i32, i32) {
    if replicas <= 0 {
        return (0, 0);
    }
    let r = i64::from(replicas);
    let w = i64::from(weight.clamp(0, 100));
    let product = r * w;
    let ceil = (product + 99) / 100;
    let floor = product / 100;
    let tied = |total: i64| (total * w) % 100 == 50;
    let zero_allowed = w == 100 || w == 0 || (replicas == 1 && max_surge == 0);

    let mut options: Vec<(i64, i64)> = Vec::with_capacity(4);
    if ceil < r || zero_allowed {
        options.push((ceil, r));
    }
    if !tied(r) && (floor != 0 || zero_allowed) {
        options.push((floor, r));
    }
    if max_surge > 0 {
        options.push((ceil, r + 1));
        if !tied(r + 1) && (floor != 0 || zero_allowed) {
            options.push((floor, r + 1));
        }
    }

    // Distance of canary/total from w/100, kept as the exact fraction |100·canary − w·total| / total.
    let distance = |(canary, total): (i64, i64)| ((100 * canary - w * total).abs(), total);
    let mut best: Option<(i64, i64)> = None;
    for option in options {
        let better = match best {
            None => true,
            Some(current) => {
                let (num_a, den_a) = distance(option);
                let (num_b, den_b) = distance(current);
                num_a * den_b < num_b * den_a
            }
        };
        if better {
            best = Some(option);
        }
    }
    match best {
        Some((canary, total)) => (canary as i32, (total - canary) as i32),
        None => (0, replicas),
    }
}

/// Pods needed to serve `weight` percent of the traffic of `replicas` pods, rounded up.
///
/// Weights above 100 scale past `replicas`, as Argo's `setCanaryScale.weight` does.
pub fn traffic_weight_to_replicas(replicas: i32, weight: i32) -> i32 {
    let product = i64::from(replicas.max(0)) * i64::from(weight.max(0));
    ((product + 99) / 100) as i32
}

/// Resolves an int-or-percent value against `replicas`, rounding percentages up or down.
///
/// A string with or without a trailing `%` is a percentage, as Kubernetes' legacy parser reads it.
/// Returns `None` for a string that is not a number.
pub fn resolve_int_or_percent(value: &IntOrString, replicas: i32, round_up: bool) -> Option<i32> {
    match value {
        IntOrString::Int(n) => Some(*n),
        IntOrString::String(text) => {
            let percent: i64 = text.trim().trim_end_matches('%').parse().ok()?;
            let product = percent * i64::from(replicas);
            let resolved = if round_up {
                (product + 99).div_euclid(100)
            } else {
                product.div_euclid(100)
            };
            Some(resolved as i32)
        }
    }
}

/// Resolves a rolling update's `(maxSurge, maxUnavailable)` against `replicas` (defaults 25% each):
/// surge rounds up, unavailable rounds down, both zero means one may be unavailable, and
/// unavailable never exceeds `replicas`.
pub fn resolve_surge_and_unavailable(
    max_surge: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    replicas: i32,
) -> (i32, i32) {
    let default = IntOrString::String("25%".into());
    let surge = resolve_int_or_percent(max_surge.unwrap_or(&default), replicas, true)
        .unwrap_or(0)
        .max(0);
    let mut unavailable =
        resolve_int_or_percent(max_unavailable.unwrap_or(&default), replicas, false)
            .unwrap_or(0)
            .max(0);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    (surge, unavailable.min(replicas.max(0)))
}

/// One side of a replica-ratio canary as observed: its `spec.replicas`, the pods it still has
/// (`status.replicas`, which lags behind a scale-down) and its available pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SideCounts {
    /// The Deployment's `spec.replicas`.
    pub spec: i32,
    /// Its pods that are not terminated yet.
    pub pods: i32,
    /// Its available pods.
    pub available: i32,
}

impl SideCounts {
    /// The pods the side may have at once: those asked for, or more while a scale-down is under way.
    fn occupied(&self) -> i32 {
        self.spec.max(self.pods).max(0)
    }
}

/// Where a replica-ratio canary stands and where its weight wants it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RatioMove {
    /// The release's full replica count.
    pub replicas: i32,
    /// The canary weight asked for, in percent.
    pub weight: i32,
    /// Pods allowed above `replicas` (resolved `maxSurge`).
    pub max_surge: i32,
    /// Pods allowed below `replicas` (resolved `maxUnavailable`).
    pub max_unavailable: i32,
    /// The canary (target) Deployment.
    pub canary: SideCounts,
    /// The stable (primary) Deployment.
    pub stable: SideCounts,
}

/// The next safe `(canary, stable)` replica counts on the way to the split [`weighted_split`] gives
/// for the weight, as Argo Rollouts moves a canary without traffic routing.
///
/// Scale-ups come first, the stable side before the canary, and never take the total above
/// `replicas + max_surge` (pods still terminating after a scale-down count); scale-downs keep at least `replicas - max_unavailable` pods available
/// (counting a side's unavailable pods as the first to go). Called again as pods become available,
/// it walks to the split without leaving that window.
///
/// ```
/// use serin_core::replicas::{next_ratio_counts, RatioMove, SideCounts};
/// let start = RatioMove {
///     replicas: 10, weight: 41, max_surge: 3, max_unavailable: 2,
///     canary: SideCounts { spec: 0, pods: 0, available: 0 },
///     stable: SideCounts { spec: 10, pods: 10, available: 10 },
/// };
/// assert_eq!(next_ratio_counts(start), (3, 8)); // 11 pods, 8 of them available
/// ```
pub fn next_ratio_counts(m: RatioMove) -> (i32, i32) {
    let (want_canary, want_stable) = weighted_split(m.replicas, m.weight, m.max_surge);
    let (mut canary, mut stable) = (m.canary.spec.max(0), m.stable.spec.max(0));
    let mut budget = m.replicas + m.max_surge - m.canary.occupied() - m.stable.occupied();
    if stable < want_stable && budget > 0 {
        let added = (want_stable - stable).min(budget);
        stable += added;
        budget -= added;
    }
    if canary < want_canary && budget > 0 {
        canary += (want_canary - canary).min(budget);
    }
    let min_available = m.replicas - m.max_unavailable;
    let available_with =
        |canary: i32, stable: i32| m.canary.available.min(canary) + m.stable.available.min(stable);
    // The fewest pods a shrinking side can keep without the available total dropping below the
    // minimum (or below what it already is, when it is under the minimum).
    let floor_for = |current: i32, wanted: i32, available: &dyn Fn(i32) -> i32| {
        let needed = min_available.min(available(current));
        (wanted..current)
            .find(|n| available(*n) >= needed)
            .unwrap_or(current)
    };
    if canary > want_canary {
        canary = floor_for(canary, want_canary, &|n| available_with(n, stable));
    }
    if stable > want_stable {
        stable = floor_for(stable, want_stable, &|n| available_with(canary, n));
    }
    (canary, stable)
}

/// How the canary is scaled by the latest `setCanaryScale` step in effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CanaryScale {
    /// Follow the traffic weight.
    MatchTrafficWeight,
    /// A fixed number of pods, which may exceed the target's replicas.
    Replicas(i32),
    /// A percentage of the target's replicas, independent of traffic.
    Weight(i32),
}

/// Inputs of the traffic-routed replica computation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrafficRoutedInput {
    /// The target's desired replica count.
    pub replicas: i32,
    /// The canary weight wanted now (already lowered during an abort).
    pub desired_weight: i32,
    /// Canary and stable weights currently in the router, as recorded by the previous tick.
    pub actual_weights: Option<(i32, i32)>,
    /// Whether the release is being aborted.
    pub aborted: bool,
    /// Whether the stable side shrinks as traffic leaves it.
    pub dynamic_stable_scale: bool,
    /// The `setCanaryScale` in effect, if any.
    pub canary_scale: CanaryScale,
}

/// Replica counts `(canary, stable)` of a traffic-routed release.
///
/// Without dynamic stable scale the stable side keeps every replica. With it, the stable side gets
/// the pods its traffic needs, never fewer than the traffic it still receives (so pods are removed
/// only after traffic has moved); during an abort the canary likewise keeps the pods its remaining
/// traffic needs.
pub fn traffic_routed_replicas(input: TrafficRoutedInput) -> (i32, i32) {
    let r = input.replicas.max(0);
    let mut canary = match input.canary_scale {
        CanaryScale::Replicas(n) => n.max(0),
        CanaryScale::Weight(w) => traffic_weight_to_replicas(r, w),
        CanaryScale::MatchTrafficWeight => traffic_weight_to_replicas(r, input.desired_weight),
    };
    if !input.dynamic_stable_scale {
        return (canary, r);
    }
    let mut stable = traffic_weight_to_replicas(r, 100 - input.desired_weight);
    if let Some((actual_canary, actual_stable)) = input.actual_weights {
        stable = stable.max(traffic_weight_to_replicas(r, actual_stable));
        if input.aborted {
            canary = canary.max(traffic_weight_to_replicas(r, actual_canary));
        }
    }
    (canary, stable)
}

/// Replicas to give the target when a new revision is scaled up from zero (Flagger's rule): its own
/// `spec.replicas` if above 0; else the HPA's `minReplicas` when it has one above 1; else the
/// primary's replicas if above 0; else 1.
pub fn scale_from_zero(
    target_replicas: Option<i32>,
    primary_replicas: Option<i32>,
    autoscaler_min: Option<i32>,
) -> i32 {
    if let Some(n) = target_replicas.filter(|n| *n > 0) {
        return n;
    }
    if let Some(min) = autoscaler_min {
        return min.max(1);
    }
    primary_replicas.filter(|n| *n > 0).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_split_matches_argo_vectors() {
        // (replicas, weight, maxSurge) -> (canary, stable), from Argo's approximateWeighted... test table.
        let vectors = [
            (0, 0, 0, 0, 0),
            (0, 0, 1, 0, 0),
            (1, 0, 0, 0, 1),
            (1, 50, 0, 1, 0),
            (1, 0, 1, 0, 1),
            (1, 50, 1, 1, 1),
            (2, 0, 0, 0, 2),
            (2, 99, 0, 1, 1),
            (2, 1, 1, 1, 2),
            (2, 100, 1, 2, 0),
            (3, 33, 0, 1, 2),
            (3, 50, 0, 2, 1),
            (3, 33, 1, 1, 2),
            (3, 50, 1, 2, 2),
            (10, 14, 0, 1, 9),
            (10, 99, 0, 9, 1),
            (10, 1, 1, 1, 10),
            (10, 20, 1, 2, 8),
            (10, 25, 1, 3, 8),
            (10, 41, 1, 4, 6),
            (10, 45, 1, 5, 6),
        ];
        for (r, w, s, canary, stable) in vectors {
            assert_eq!(
                weighted_split(r, w, s),
                (canary, stable),
                "replicas {r}, weight {w}, maxSurge {s}"
            );
        }
    }

    #[test]
    fn traffic_weight_rounds_up() {
        let vectors = [
            (10, 0, 0),
            (10, 20, 2),
            (10, 25, 3),
            (10, 33, 4),
            (10, 99, 10),
            (10, 100, 10),
        ];
        for (r, w, expected) in vectors {
            assert_eq!(traffic_weight_to_replicas(r, w), expected, "({r}, {w})");
        }
    }

    #[test]
    fn surge_and_unavailable_resolution() {
        let pct = |s: &str| IntOrString::String(s.into());
        assert_eq!(
            resolve_surge_and_unavailable(Some(&pct("20%")), None, 10),
            (2, 2)
        );
        assert_eq!(
            resolve_surge_and_unavailable(Some(&pct("0%")), Some(&pct("0%")), 10),
            (0, 1)
        );
        assert_eq!(resolve_surge_and_unavailable(None, None, 1), (1, 0));
        assert_eq!(resolve_surge_and_unavailable(None, None, 4), (1, 1));
        assert_eq!(resolve_surge_and_unavailable(None, None, 8), (2, 2));
        assert_eq!(
            resolve_surge_and_unavailable(
                Some(&IntOrString::Int(3)),
                Some(&IntOrString::Int(20)),
                5
            ),
            (3, 5)
        );
        assert_eq!(
            resolve_surge_and_unavailable(None, Some(&pct("25")), 8),
            (2, 2)
        );
        assert_eq!(
            resolve_surge_and_unavailable(None, Some(&IntOrString::Int(1)), 0),
            (0, 0)
        );
    }

    /// Plays a release of `replicas` pods to `weight` and back to 0, making every pod available one
    /// step after it is asked for, and checks the window at every step.
    fn walk(replicas: i32, surge: i32, unavailable: i32, weights: &[i32]) -> Vec<(i32, i32)> {
        let mut canary = SideCounts::default();
        let mut stable = SideCounts {
            spec: replicas,
            pods: replicas,
            available: replicas,
        };
        let mut visited = vec![(0, replicas)];
        for &weight in weights {
            for _ in 0..100 {
                let (c, s) = next_ratio_counts(RatioMove {
                    replicas,
                    weight,
                    max_surge: surge,
                    max_unavailable: unavailable,
                    canary,
                    stable,
                });
                assert!(
                    c + s <= replicas + surge,
                    "{c}+{s} pods above the surge window"
                );
                let available = canary.available.min(c) + stable.available.min(s);
                assert!(
                    available >= replicas - unavailable,
                    "{available} available below the window at ({c}, {s})"
                );
                if (c, s) == (canary.spec, stable.spec)
                    && canary.available == c
                    && stable.available == s
                {
                    break;
                }
                // Shrinking is immediate; new pods become available on the next call.
                canary = SideCounts {
                    spec: c,
                    pods: c,
                    available: canary.available.min(c).max(canary.spec.min(c)),
                };
                stable = SideCounts {
                    spec: s,
                    pods: s,
                    available: stable.available.min(s).max(stable.spec.min(s)),
                };
                visited.push((c, s));
            }
            assert_eq!(
                (canary.spec, stable.spec),
                weighted_split(replicas, weight, surge),
                "weight {weight} reached"
            );
        }
        visited
    }

    #[test]
    fn a_ratio_release_walks_to_each_split_inside_the_window() {
        let path = walk(10, 3, 2, &[41, 100, 0]);
        assert_eq!(
            path[1],
            (3, 8),
            "canary starts within the surge, stable within unavailable"
        );
        assert!(path.contains(&(4, 6)));
        assert_eq!(*path.last().unwrap(), (0, 10));
        walk(10, 0, 1, &[41, 100, 0]);
        walk(10, 1, 0, &[20, 50, 100, 0]);
        walk(3, 1, 0, &[33, 50, 100]);
        walk(1, 1, 0, &[50, 100, 0]);
    }

    #[test]
    fn an_abort_grows_the_stable_side_before_dropping_the_canary() {
        let at_41 = RatioMove {
            replicas: 10,
            weight: 0,
            max_surge: 3,
            max_unavailable: 2,
            canary: SideCounts {
                spec: 4,
                pods: 4,
                available: 4,
            },
            stable: SideCounts {
                spec: 6,
                pods: 6,
                available: 6,
            },
        };
        assert_eq!(next_ratio_counts(at_41), (2, 9));
        let grown = RatioMove {
            canary: SideCounts {
                spec: 2,
                pods: 2,
                available: 2,
            },
            stable: SideCounts {
                spec: 9,
                pods: 9,
                available: 9,
            },
            ..at_41
        };
        assert_eq!(next_ratio_counts(grown), (0, 10));
    }

    #[test]
    fn pods_still_terminating_count_against_the_surge() {
        let draining = RatioMove {
            replicas: 10,
            weight: 0,
            max_surge: 3,
            max_unavailable: 1,
            canary: SideCounts {
                spec: 5,
                pods: 10,
                available: 10,
            },
            stable: SideCounts {
                spec: 3,
                pods: 3,
                available: 3,
            },
        };
        assert_eq!(
            next_ratio_counts(draining),
            (5, 3),
            "13 pods exist: no room to grow"
        );
    }

    #[test]
    fn nothing_shrinks_while_pods_are_missing() {
        let starved = RatioMove {
            replicas: 10,
            weight: 41,
            max_surge: 0,
            max_unavailable: 1,
            canary: SideCounts {
                spec: 1,
                pods: 1,
                available: 0,
            },
            stable: SideCounts {
                spec: 9,
                pods: 9,
                available: 9,
            },
        };
        assert_eq!(next_ratio_counts(starved), (1, 9));
    }

    fn routed(
        desired_weight: i32,
        actual: Option<(i32, i32)>,
        aborted: bool,
        canary_scale: CanaryScale,
        dynamic: bool,
    ) -> (i32, i32) {
        traffic_routed_replicas(TrafficRoutedInput {
            replicas: 10,
            desired_weight,
            actual_weights: actual,
            aborted,
            dynamic_stable_scale: dynamic,
            canary_scale,
        })
    }

    #[test]
    fn traffic_routed_without_dynamic_scale_keeps_stable_full() {
        let m = CanaryScale::MatchTrafficWeight;
        assert_eq!(routed(10, None, false, m, false), (1, 10));
        assert_eq!(
            routed(20, None, false, CanaryScale::Replicas(15), false),
            (15, 10)
        );
        let four = traffic_routed_replicas(TrafficRoutedInput {
            replicas: 4,
            desired_weight: 10,
            actual_weights: None,
            aborted: false,
            dynamic_stable_scale: false,
            canary_scale: CanaryScale::Weight(200),
        });
        assert_eq!(
            four,
            (8, 4),
            "a scale weight of 200% gives twice the replicas"
        );
    }

    #[test]
    fn dynamic_stable_scale_matches_argo_vectors() {
        let m = CanaryScale::MatchTrafficWeight;
        // Rows 1-4 (aborts): the stable side's size follows the traffic it gets back.
        assert_eq!(routed(20, Some((60, 40)), true, m, true), (6, 8));
        assert_eq!(routed(0, Some((60, 40)), true, m, true), (6, 10));
        // Rows 5-8.
        assert_eq!(routed(10, Some((10, 90)), false, m, true), (1, 9));
        assert_eq!(routed(20, Some((10, 90)), false, m, true), (2, 9));
        assert_eq!(routed(0, Some((20, 80)), true, m, true), (2, 10));
        assert_eq!(routed(0, Some((10, 90)), true, m, true), (1, 10));
    }

    #[test]
    fn scale_from_zero_follows_flagger() {
        assert_eq!(scale_from_zero(Some(3), Some(5), None), 3);
        assert_eq!(scale_from_zero(Some(0), Some(5), None), 5);
        assert_eq!(scale_from_zero(None, None, None), 1);
        assert_eq!(scale_from_zero(Some(0), Some(5), Some(2)), 2);
        assert_eq!(scale_from_zero(Some(0), Some(5), Some(0)), 1);
    }
}
