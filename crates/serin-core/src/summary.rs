//! A release as a person reads it: its steps as labels (`20%`, `pause 30s`), the step it is at,
//! and each metric's accepted range. `kubectl serin get` and the web dashboard draw from these.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serin_api::{Canary, CanaryMetric, CanaryStep};

/// The lowest and highest value a metric accepts: its `thresholdRange`, or the legacy
/// `threshold` (a minimum for `request-success-rate`, a maximum for every other metric).
pub fn accepted_bounds(metric: &CanaryMetric) -> (Option<f64>, Option<f64>) {
    match (&metric.threshold_range, metric.threshold) {
        (Some(range), _) => (range.min, range.max),
        (None, Some(threshold)) if metric.name == "request-success-rate" => (Some(threshold), None),
        (None, Some(threshold)) => (None, Some(threshold)),
        (None, None) => (None, None),
    }
}

/// `min 99`, `max 500`, `99..100`: a metric's accepted range; `any` for a range without bounds,
/// `-` for a metric without a threshold.
pub fn accepted_range(metric: &CanaryMetric) -> String {
    if metric.threshold_range.is_none() && metric.threshold.is_none() {
        return "-".into();
    }
    match accepted_bounds(metric) {
        (Some(min), Some(max)) => format!("{min}..{max}"),
        (Some(min), None) => format!("min {min}"),
        (None, Some(max)) => format!("max {max}"),
        (None, None) => "any".into(),
    }
}

/// One step as a person reads it: `20%`, `pause`, `pause 30s`, `scale 2`.
pub fn step_label(step: &CanaryStep) -> String {
    if let Some(weight) = step.set_weight {
        return format!("{weight}%");
    }
    if let Some(pause) = &step.pause {
        return match &pause.duration {
            Some(IntOrString::Int(seconds)) => format!("pause {seconds}s"),
            Some(IntOrString::String(duration)) => format!("pause {duration}"),
            None => "pause".into(),
        };
    }
    if let Some(scale) = &step.set_canary_scale {
        return match (scale.replicas, scale.weight) {
            (Some(replicas), _) => format!("scale {replicas}"),
            (None, Some(weight)) => format!("scale {weight}%"),
            _ => "scale with traffic".into(),
        };
    }
    if let Some(analysis) = &step.analysis {
        let names: Vec<&str> = analysis.metrics.iter().map(|m| m.name.as_str()).collect();
        return format!("analysis {}", names.join(","));
    }
    if let Some(header) = &step.set_header_route {
        return format!("header route {}", header.name);
    }
    if let Some(mirror) = &step.set_mirror_route {
        return format!("mirror route {}", mirror.name);
    }
    "?".into()
}

/// The weights a release walks through: its explicit steps or ladder, else stepWeight up to maxWeight.
pub fn ladder(canary: &Canary) -> Vec<String> {
    let Some(analysis) = canary.spec.analysis.as_ref() else {
        return Vec::new();
    };
    if let Some(steps) = &analysis.steps {
        return steps.iter().map(step_label).collect();
    }
    if let Some(weights) = &analysis.step_weights {
        return weights.iter().map(|w| format!("{w}%")).collect();
    }
    match (analysis.step_weight, analysis.max_weight.unwrap_or(100)) {
        (Some(step), max) if step > 0 => {
            (1..=max / step).map(|i| format!("{}%", i * step)).collect()
        }
        _ => Vec::new(),
    }
}

/// Where on its [`ladder`] the release is: the step being run for explicit steps, else the rung
/// whose weight is the canary's weight now.
pub fn ladder_position(canary: &Canary, ladder: &[String]) -> Option<usize> {
    let status = canary.status.as_ref()?;
    match canary.spec.analysis.as_ref().and_then(|a| a.steps.as_ref()) {
        Some(_) => status.current_step_index.map(|i| i.max(0) as usize),
        None => ladder.iter().rposition(|w| {
            w.trim_end_matches('%').parse::<i32>().ok() == Some(status.canary_weight)
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serin_api::{CanaryAnalysis, CanaryStatus};

    fn canary(analysis: CanaryAnalysis, weight: i32, step: Option<i32>) -> Canary {
        let mut canary = Canary::default();
        canary.spec.analysis = Some(analysis);
        canary.status = Some(CanaryStatus {
            canary_weight: weight,
            current_step_index: step,
            ..CanaryStatus::default()
        });
        canary
    }

    #[test]
    fn a_step_weight_ladder_climbs_to_max_weight_and_the_position_follows_the_weight() {
        let analysis = CanaryAnalysis {
            step_weight: Some(20),
            max_weight: Some(60),
            ..CanaryAnalysis::default()
        };
        let release = canary(analysis, 40, None);
        let rungs = ladder(&release);
        assert_eq!(rungs, ["20%", "40%", "60%"]);
        assert_eq!(ladder_position(&release, &rungs), Some(1));
    }

    #[test]
    fn the_legacy_threshold_is_a_minimum_only_for_the_success_rate() {
        let metric = |name: &str| CanaryMetric {
            name: name.into(),
            threshold: Some(99.0),
            ..CanaryMetric::default()
        };
        assert_eq!(
            accepted_bounds(&metric("request-success-rate")),
            (Some(99.0), None)
        );
        assert_eq!(accepted_bounds(&metric("latency")), (None, Some(99.0)));
        assert_eq!(accepted_range(&metric("latency")), "max 99");
        assert_eq!(accepted_range(&CanaryMetric::default()), "-");
    }
}
