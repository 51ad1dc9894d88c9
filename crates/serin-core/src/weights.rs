//! Traffic weight arithmetic of a progressive canary (stepWeight/maxWeight or stepWeights).

use serin_api::CanaryAnalysis;

/// Highest canary weight before promotion: the last of `stepWeights` (capped at 100), else
/// `maxWeight`, else 100.
pub fn max_weight(analysis: &CanaryAnalysis) -> i32 {
    match analysis.step_weights.as_deref() {
        Some([.., last]) => (*last).min(100),
        _ => analysis.max_weight.filter(|w| *w > 0).unwrap_or(100),
    }
}

/// How much canary weight the next step adds when the canary has `current` percent.
///
/// With `stepWeight` it is always that step (so linear steps may overshoot `maxWeight`). With
/// `stepWeights` it is the distance to the next rung of the ladder, capped so the total stays ≤ 100.
pub fn next_step_weight(analysis: &CanaryAnalysis, current: i32) -> i32 {
    let step = analysis.step_weight.unwrap_or(0);
    let ladder = analysis.step_weights.as_deref().unwrap_or(&[]);
    if step > 0 || ladder.is_empty() {
        return step;
    }
    let room = 100 - current;
    if room <= 0 {
        return 1;
    }
    if current == 0 {
        return room.min(ladder[0]);
    }
    match ladder.iter().position(|w| *w == current) {
        Some(i) if i + 1 < ladder.len() => room.min(ladder[i + 1] - current),
        _ => room,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn analysis(step: Option<i32>, max: Option<i32>, ladder: Option<Vec<i32>>) -> CanaryAnalysis {
        CanaryAnalysis {
            step_weight: step,
            max_weight: max,
            step_weights: ladder,
            ..Default::default()
        }
    }

    /// The canary weights a progressive canary passes through, in order.
    fn weight_ladder(analysis: &CanaryAnalysis) -> Vec<i32> {
        if let Some(steps) = analysis.steps.as_deref() {
            return steps.iter().filter_map(|s| s.set_weight).collect();
        }
        let max = max_weight(analysis);
        let mut ladder = Vec::new();
        let mut current = 0;
        while current < max {
            let step = next_step_weight(analysis, current);
            if step <= 0 {
                break;
            }
            current = (current + step).min(100);
            ladder.push(current);
        }
        ladder
    }

    #[test]
    fn ladders_match_flagger() {
        assert_eq!(
            weight_ladder(&analysis(Some(20), Some(50), None)),
            vec![20, 40, 60]
        );
        assert_eq!(
            weight_ladder(&analysis(Some(50), Some(100), None)),
            vec![50, 100]
        );
        assert_eq!(
            weight_ladder(&analysis(Some(10), Some(30), None)),
            vec![10, 20, 30]
        );
        assert_eq!(
            weight_ladder(&analysis(None, None, Some(vec![1, 2, 10, 80]))),
            vec![1, 2, 10, 80]
        );
        assert_eq!(
            weight_ladder(&analysis(None, None, Some(vec![1, 2, 10, 110]))),
            vec![1, 2, 10, 100]
        );
    }

    #[test]
    fn max_weight_defaults() {
        assert_eq!(max_weight(&analysis(Some(10), None, None)), 100);
        assert_eq!(max_weight(&analysis(None, Some(40), Some(vec![5, 70]))), 70);
        assert_eq!(max_weight(&analysis(None, None, Some(vec![5, 170]))), 100);
    }
}
