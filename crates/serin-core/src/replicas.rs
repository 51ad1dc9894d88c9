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
/// distance the larger canary wins. No strategy uses it yet (it is for a canary without a mesh,
/// sized by replica ratio).
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
/// unavailable never exceeds `replicas`. No strategy uses it yet.
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
