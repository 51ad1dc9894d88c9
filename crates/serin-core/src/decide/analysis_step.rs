//! Argo Rollouts' `analysis` step and the measurement history: each metric is measured `count`
//! times, `interval` apart after `initialDelay`; its counters are assessed against `failureLimit`,
//! `inconclusiveLimit` and `consecutiveErrorLimit`; the run ends when every metric that is not a
//! dry run is assessed, or at once when one fails. Every measurement lands in
//! `status.analysisRuns`, as do the interval checks' readings.

use super::*;
use crate::plan::Measurement;
use serin_api::duration::parse_go_duration;
use serin_api::limits::{MAX_ANALYSIS_RUNS_KEPT, MAX_MEASUREMENT_TEXT_BYTES};
use serin_api::{
    AnalysisMetric, AnalysisPhase, AnalysisRunStatus, MeasurementStatus, MetricRunStatus,
    StepAnalysis,
};

/// The name of the run that holds the interval checks' readings.
pub(super) const INTERVAL_RUN: &str = "interval";

/// The name of the background analysis's runs.
pub(super) const BACKGROUND_RUN: &str = "background";

/// How events name the analysis at `step` (the background one for `None`).
pub(super) fn analysis_title(step: Option<usize>) -> String {
    match step {
        Some(index) => format!("Analysis at step {}", index + 1),
        None => "Background analysis".into(),
    }
}

/// How an analysis step stands after this tick.
pub(super) struct StepAnalysisState {
    pub(super) phase: AnalysisPhase,
    pub(super) message: Option<String>,
}

fn duration_of(text: Option<&str>) -> SignedDuration {
    text.and_then(|t| parse_go_duration(t).ok())
        .and_then(|d| SignedDuration::try_from(d).ok())
        .unwrap_or(SignedDuration::ZERO)
}

/// Cuts `text` to [`MAX_MEASUREMENT_TEXT_BYTES`] on a character boundary.
fn bounded(text: String) -> String {
    if text.len() <= MAX_MEASUREMENT_TEXT_BYTES {
        return text;
    }
    let mut end = MAX_MEASUREMENT_TEXT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Counts `measurement` into `metric`, keeping at most `retention` measurements.
fn count_measurement(
    metric: &mut MetricRunStatus,
    measurement: MeasurementStatus,
    retention: usize,
) {
    metric.count += 1;
    match measurement.phase {
        AnalysisPhase::Successful => metric.successful += 1,
        AnalysisPhase::Failed => metric.failed += 1,
        AnalysisPhase::Inconclusive => metric.inconclusive += 1,
        AnalysisPhase::Error | AnalysisPhase::Running => metric.error += 1,
    }
    if matches!(measurement.phase, AnalysisPhase::Error) {
        metric.consecutive_error += 1;
    } else {
        metric.consecutive_error = 0;
    }
    metric.measurements.push(measurement);
    let excess = metric.measurements.len().saturating_sub(retention.max(1));
    metric.measurements.drain(..excess);
}

/// Assesses a metric from its counters, as Argo Rollouts does: past the failure limit it failed,
/// past the inconclusive limit it is inconclusive, past the error limit it erred (each later
/// rule overriding an earlier one); with all its measurements taken it succeeded.
pub(crate) fn assess_metric(
    spec: &AnalysisMetric,
    status: &MetricRunStatus,
) -> (AnalysisPhase, Option<String>) {
    let mut verdict = None;
    if let Some(limit) = spec.failure_limit()
        && status.failed > limit
    {
        verdict = Some((
            AnalysisPhase::Failed,
            format!("failed ({}) > failureLimit ({limit})", status.failed),
        ));
    }
    let inconclusive_limit = spec.inconclusive_limit();
    if status.inconclusive > inconclusive_limit {
        verdict = Some((
            AnalysisPhase::Inconclusive,
            format!(
                "inconclusive ({}) > inconclusiveLimit ({inconclusive_limit})",
                status.inconclusive
            ),
        ));
    }
    let error_limit = spec.consecutive_error_limit();
    if status.consecutive_error > error_limit {
        verdict = Some((
            AnalysisPhase::Error,
            format!(
                "consecutiveErrors ({}) > consecutiveErrorLimit ({error_limit})",
                status.consecutive_error
            ),
        ));
    }
    if let Some((phase, why)) = verdict {
        return (phase, Some(why));
    }
    if spec
        .effective_count()
        .is_some_and(|count| status.count >= count)
    {
        return (AnalysisPhase::Successful, None);
    }
    (AnalysisPhase::Running, None)
}

/// The run's phase from its metrics' (dry runs left out): the worst completed one, Running while
/// any is still measuring unless one already failed, erred or is inconclusive.
fn assess_run(run: &AnalysisRunStatus) -> (AnalysisPhase, Option<String>) {
    let rank = |phase: AnalysisPhase| match phase {
        AnalysisPhase::Successful => 0,
        AnalysisPhase::Running => 1,
        AnalysisPhase::Inconclusive => 2,
        AnalysisPhase::Error => 3,
        AnalysisPhase::Failed => 4,
    };
    let counted = run.metrics.iter().filter(|m| !m.dry_run);
    let worst = counted.clone().max_by_key(|m| rank(m.phase));
    match worst {
        None => (AnalysisPhase::Successful, None),
        Some(m) if rank(m.phase) >= 2 => (
            m.phase,
            Some(format!(
                "metric {:?} assessed {} due to {}",
                m.name,
                m.phase,
                m.message.as_deref().unwrap_or("its measurements")
            )),
        ),
        Some(m) => (m.phase, None),
    }
}

impl<'a> Tick<'a> {
    /// The analysis at step `step`, or the background analysis (`None`).
    fn analysis_at(&self, step: Option<usize>) -> Option<StepAnalysis> {
        self.analysis.analysis_at(step).cloned()
    }

    /// Where the run of the analysis at `step` (the background one for `None`) of the release in
    /// `status` is, if it has started.
    fn find_run(status: &CanaryStatus, step: Option<usize>) -> Option<usize> {
        let release_start = status.release_started_at.as_ref().map(|t| t.0);
        status.analysis_runs.iter().rposition(|run| {
            let same_analysis = match step {
                Some(index) => run.step == Some(index as i32),
                None => run.step.is_none() && run.name == BACKGROUND_RUN,
            };
            same_analysis
                && run.revision == status.last_applied_spec
                && run
                    .started_at
                    .as_ref()
                    .is_some_and(|started| release_start.is_none_or(|s| started.0 >= s))
        })
    }

    /// Where this release's run of the analysis at `step` is in the new status, creating it if it
    /// has not started yet.
    pub(super) fn step_run(&mut self, step: Option<usize>, spec: &StepAnalysis) -> usize {
        if let Some(position) = Self::find_run(&self.status, step) {
            return position;
        }
        let run = AnalysisRunStatus {
            name: step.map_or_else(|| BACKGROUND_RUN.to_string(), |i| format!("step-{i}")),
            step: step.map(|i| i as i32),
            revision: self.status.last_applied_spec.clone(),
            phase: AnalysisPhase::Running,
            message: None,
            started_at: Some(self.now_micro()),
            finished_at: None,
            metrics: spec
                .metrics
                .iter()
                .map(|m| MetricRunStatus {
                    name: m.name.clone(),
                    dry_run: spec.is_dry_run(&m.name),
                    ..Default::default()
                })
                .collect(),
        };
        self.push_run(run)
    }

    /// Starts the analysis of step `index` as the step is entered, and comes back for its first
    /// measurement.
    pub(super) fn start_step_analysis(&mut self, index: usize, spec: &StepAnalysis) {
        self.step_run(Some(index), spec);
        let names: Vec<&str> = spec.metrics.iter().map(|m| m.name.as_str()).collect();
        self.normal(
            reason::PROGRESSING,
            format!(
                "Analysis at step {}/{} of {} started: measuring {}",
                index + 1,
                self.analysis.steps().len(),
                self.canary_id,
                names.join(", ")
            ),
        );
        if let Some(delay) = spec
            .metrics
            .iter()
            .map(|m| duration_of(m.initial_delay.as_deref()))
            .min()
        {
            let wait = milliseconds_up(delay);
            self.requeue = Some(self.requeue.map_or(wait, |r| r.min(wait)));
        }
    }

    /// Adds `run`, dropping the oldest finished runs past [`MAX_ANALYSIS_RUNS_KEPT`]; its position.
    fn push_run(&mut self, run: AnalysisRunStatus) -> usize {
        let runs = &mut self.status.analysis_runs;
        runs.push(run);
        while runs.len() > MAX_ANALYSIS_RUNS_KEPT {
            let oldest = runs.iter().position(|r| r.phase.is_complete()).unwrap_or(0);
            runs.remove(oldest);
        }
        runs.len() - 1
    }

    /// The measurement of `name` at step `index` this round, or a request to take it.
    fn measurement(&self, step: Option<usize>, name: &str) -> Result<Measurement, Halt> {
        let check = Check::Measure {
            step,
            name: name.to_string(),
        };
        match self.obs.verdicts.iter().find(|v| v.check == check) {
            Some(verdict) => Ok(match &verdict.outcome {
                Outcome::Measurement(m) => m.clone(),
                _ => Measurement {
                    phase: AnalysisPhase::Error,
                    value: None,
                    message: Some("another kind of result was given for a measurement".into()),
                },
            }),
            None => Err(Halt::Check(check)),
        }
    }

    /// When the next measurement of a running analysis of the release in `status` is due (the
    /// step it is at, or the background analysis), if one is.
    pub(super) fn next_measurement(&self, status: &CanaryStatus) -> Option<Timestamp> {
        if status.phase != Some(Phase::Progressing) || self.strategy() != Strategy::Steps {
            return None;
        }
        let index = usize::try_from(status.current_step_index?).ok()?;
        [Some(index), None]
            .into_iter()
            .filter_map(|step| {
                let spec = self.analysis_at(step)?;
                let run = &status.analysis_runs[Self::find_run(status, step)?];
                if run.phase.is_complete() {
                    return None;
                }
                spec.metrics
                    .iter()
                    .filter_map(|m| {
                        let metric = run.metrics.iter().find(|s| s.name == m.name)?;
                        self.metric_due(m, metric, run)
                    })
                    .min()
            })
            .min()
    }

    /// When `metric` (`spec`) of `run` is next measured; `None` once it is assessed.
    fn metric_due(
        &self,
        spec: &AnalysisMetric,
        metric: &MetricRunStatus,
        run: &AnalysisRunStatus,
    ) -> Option<Timestamp> {
        if metric.phase.is_complete() {
            return None;
        }
        let last = metric
            .measurements
            .last()
            .and_then(|m| m.finished_at.as_ref());
        Some(match (metric.count, last) {
            (0, _) | (_, None) => {
                run.started_at.as_ref()?.0 + duration_of(spec.initial_delay.as_deref())
            }
            (_, Some(last)) => last.0 + duration_of(spec.interval.as_deref()),
        })
    }

    /// Measures what is due of the analysis at step `index` and assesses it; asks for a
    /// measurement (a [`Halt::Check`]) when one is due and not taken yet this round.
    pub(super) fn step_analysis(
        &mut self,
        index: Option<usize>,
        spec: &StepAnalysis,
    ) -> Result<StepAnalysisState, Halt> {
        let position = self.step_run(index, spec);
        let run = self.status.analysis_runs[position].clone();
        if run.phase.is_complete() {
            return Ok(StepAnalysisState {
                phase: run.phase,
                message: run.message,
            });
        }
        let mut run = run;
        for metric_spec in &spec.metrics {
            let Some(slot) = run.metrics.iter().position(|m| m.name == metric_spec.name) else {
                continue;
            };
            let Some(due) = self.metric_due(metric_spec, &run.metrics[slot], &run) else {
                continue;
            };
            if self.now < due {
                continue;
            }
            let taken = self.measurement(index, &metric_spec.name)?;
            let measurement = MeasurementStatus {
                phase: taken.phase,
                value: taken.value.map(bounded),
                message: taken.message.map(bounded),
                finished_at: Some(self.now_micro()),
            };
            let metric = &mut run.metrics[slot];
            if measurement.phase != AnalysisPhase::Successful {
                let what = format!(
                    "{} of {}: metric {} measured {}{}",
                    analysis_title(index),
                    self.canary_id,
                    metric.name,
                    measurement.phase,
                    measurement
                        .message
                        .as_deref()
                        .or(measurement.value.as_deref())
                        .map(|m| format!(": {m}"))
                        .unwrap_or_default()
                );
                self.warning(reason::CHECK_FAILED, what);
            }
            count_measurement(metric, measurement, spec.retention(&metric.name));
            let (phase, message) = assess_metric(metric_spec, metric);
            metric.phase = phase;
            metric.message = message;
        }
        let (phase, message) = assess_run(&run);
        run.phase = phase;
        run.message = message.clone();
        if phase.is_complete() {
            run.finished_at = Some(self.now_micro());
        } else if let Some(next) = spec
            .metrics
            .iter()
            .filter_map(|m| {
                let metric = run.metrics.iter().find(|s| s.name == m.name)?;
                self.metric_due(m, metric, &run)
            })
            .min()
        {
            let wait = milliseconds_up(next.duration_since(self.now));
            self.requeue = Some(self.requeue.map_or(wait, |r| r.min(wait)));
        }
        self.status.analysis_runs[position] = run;
        Ok(StepAnalysisState { phase, message })
    }

    /// Records an interval check's reading in this release's `interval` run.
    pub(super) fn record_interval_reading(
        &mut self,
        metric: &str,
        phase: AnalysisPhase,
        value: Option<f64>,
        message: &str,
    ) {
        let found = self.status.analysis_runs.iter().rposition(|run| {
            run.name == INTERVAL_RUN
                && run.phase == AnalysisPhase::Running
                && run.revision.as_deref() == Some(self.hash.as_str())
        });
        let position = match found {
            Some(position) => position,
            None => self.push_run(AnalysisRunStatus {
                name: INTERVAL_RUN.into(),
                revision: Some(self.hash.clone()),
                started_at: Some(self.now_micro()),
                ..Default::default()
            }),
        };
        let now = self.now_micro();
        let run = &mut self.status.analysis_runs[position];
        let slot = match run.metrics.iter().position(|m| m.name == metric) {
            Some(slot) => slot,
            None => {
                run.metrics.push(MetricRunStatus {
                    name: metric.to_string(),
                    ..Default::default()
                });
                run.metrics.len() - 1
            }
        };
        let measurement = MeasurementStatus {
            phase,
            value: value.map(|v| v.to_string()),
            message: (phase != AnalysisPhase::Successful).then(|| bounded(message.to_string())),
            finished_at: Some(now),
        };
        count_measurement(
            &mut run.metrics[slot],
            measurement,
            serin_api::limits::DEFAULT_MEASUREMENT_RETENTION,
        );
    }

    /// Ends the runs still measuring when the release ends or starts over: Successful when it was
    /// promoted, Failed otherwise, saying why they stopped.
    pub(super) fn close_runs(&mut self, promoted: bool, why: &str) {
        let now = self.now_micro();
        for run in self
            .status
            .analysis_runs
            .iter_mut()
            .filter(|r| !r.phase.is_complete())
        {
            run.phase = if promoted {
                AnalysisPhase::Successful
            } else {
                AnalysisPhase::Failed
            };
            run.finished_at = Some(now.clone());
            run.message.get_or_insert_with(|| why.to_string());
            for metric in run.metrics.iter_mut().filter(|m| !m.phase.is_complete()) {
                metric.phase = run.phase;
            }
        }
    }
}
