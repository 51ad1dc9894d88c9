//! The measurement history of `serin get`: each analysis run of the current release (and the run
//! before it), one line per metric with a sparkline of its values and a mark per verdict.

use serin_api::{AnalysisPhase, AnalysisRunStatus, CanaryStatus, MetricRunStatus};

/// Runs shown: the latest ones, oldest first.
const RUNS_SHOWN: usize = 2;

const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// The first number in a measurement's value (`[0.97]` → 0.97, `42` → 42), if there is one.
fn number_in(value: &str) -> Option<f64> {
    let trimmed = value.trim_start_matches(['[', ' ']);
    let end = trimmed
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E')))
        .unwrap_or(trimmed.len());
    trimmed[..end].parse().ok().filter(|v: &f64| v.is_finite())
}

/// Bars scaled between the smallest and largest values; a measurement without a number is `·`.
pub(crate) fn sparkline(metric: &MetricRunStatus) -> String {
    let values: Vec<Option<f64>> = metric
        .measurements
        .iter()
        .map(|m| m.value.as_deref().and_then(number_in))
        .collect();
    let known = values.iter().flatten();
    let low = known.clone().copied().fold(f64::INFINITY, f64::min);
    let high = known.copied().fold(f64::NEG_INFINITY, f64::max);
    values
        .iter()
        .map(|value| match value {
            None => '·',
            Some(_) if high <= low => BARS[3],
            Some(v) => {
                let slot = ((v - low) / (high - low) * (BARS.len() - 1) as f64).round() as usize;
                BARS[slot.min(BARS.len() - 1)]
            }
        })
        .collect()
}

/// One mark per measurement: ✔ successful, ✖ failed, ? inconclusive, ! error.
pub(crate) fn verdicts(metric: &MetricRunStatus) -> String {
    metric
        .measurements
        .iter()
        .map(|m| match m.phase {
            AnalysisPhase::Successful => '✔',
            AnalysisPhase::Failed => '✖',
            AnalysisPhase::Inconclusive => '?',
            AnalysisPhase::Error => '!',
            AnalysisPhase::Running => '…',
        })
        .collect()
}

fn run_title(run: &AnalysisRunStatus) -> String {
    let place = match run.step {
        Some(step) => format!("at step {}", step + 1),
        None => "of the interval checks".into(),
    };
    let message = run
        .message
        .as_deref()
        .map(|m| format!(": {m}"))
        .unwrap_or_default();
    format!("Analysis {place} ({}){message}", run.phase)
}

/// The lines `serin get` prints for the latest analysis runs in `status`.
pub(crate) fn history_lines(status: &CanaryStatus) -> Vec<String> {
    let runs = &status.analysis_runs;
    let mut lines = Vec::new();
    for run in &runs[runs.len().saturating_sub(RUNS_SHOWN)..] {
        lines.push(run_title(run));
        for metric in &run.metrics {
            let last = metric
                .measurements
                .last()
                .and_then(|m| m.value.clone().or(m.message.clone()))
                .unwrap_or_else(|| "-".into());
            let dry = if metric.dry_run { " (dry run)" } else { "" };
            lines.push(format!(
                "  {:<22} {:<12} {:<12} {:>3} measured  {:<12} last {}{dry}",
                metric.name,
                sparkline(metric),
                verdicts(metric),
                metric.count,
                metric.phase.as_str(),
                serin_api::limits::quoted(&last),
            ));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use serin_api::MeasurementStatus;

    fn metric(values: &[(&str, AnalysisPhase)]) -> MetricRunStatus {
        MetricRunStatus {
            name: "error-ratio".into(),
            count: values.len() as i32,
            measurements: values
                .iter()
                .map(|(v, phase)| MeasurementStatus {
                    phase: *phase,
                    value: Some(v.to_string()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn values_become_bars_and_verdicts_marks() {
        let m = metric(&[
            ("[0.01]", AnalysisPhase::Successful),
            ("[0.5]", AnalysisPhase::Failed),
            ("[0.2]", AnalysisPhase::Failed),
            ("true", AnalysisPhase::Successful),
        ]);
        assert_eq!(sparkline(&m), "▁█▄·");
        assert_eq!(verdicts(&m), "✔✖✖✔");
    }

    #[test]
    fn the_latest_runs_are_listed_with_each_metric() {
        let status = CanaryStatus {
            analysis_runs: vec![
                AnalysisRunStatus {
                    name: "step-1".into(),
                    step: Some(1),
                    phase: AnalysisPhase::Failed,
                    message: Some("metric \"error-ratio\" assessed Failed".into()),
                    metrics: vec![metric(&[("[0.5]", AnalysisPhase::Failed)])],
                    ..Default::default()
                };
                3
            ],
            ..Default::default()
        };
        let lines = history_lines(&status);
        assert_eq!(lines.len(), 4, "two runs of one metric: {lines:#?}");
        assert_eq!(
            lines[0],
            "Analysis at step 2 (Failed): metric \"error-ratio\" assessed Failed"
        );
        assert!(lines[1].contains("error-ratio") && lines[1].contains("last [0.5]"));
    }
}
