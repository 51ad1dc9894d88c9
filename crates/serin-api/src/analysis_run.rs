//! Argo Rollouts' analysis inside a Canary: the `analysis` step (metrics measured `count` times,
//! assessed with `failureLimit` and the other limits, conditions in Argo's expression syntax, dry
//! run, args) and the measurement history the operator keeps in status.

use crate::object_ref::CrossNamespaceObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// An `analysis` step: the release waits on it until every metric is assessed, goes on when the
/// analysis is Successful and rolls back when it is Failed, Error or Inconclusive.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepAnalysis {
    /// The metrics to measure.
    pub metrics: Vec<AnalysisMetric>,
    /// Values for `{{ args.<name> }}` in the metrics' queries and templates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<AnalysisArg>>,
    /// Metrics that are measured and shown but never fail the release (`metricName`, or `*` for all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<Vec<MetricSelector>>,
    /// How many measurements of a metric the status keeps (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measurement_retention: Option<Vec<MeasurementRetention>>,
    /// Background analysis only: the index of the step from which it runs (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starting_step: Option<i32>,
}

/// One metric of an analysis step, with Argo Rollouts' fields and meanings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisMetric {
    /// Unique name within the step.
    pub name: String,
    /// Time between measurements (`30s`, `1m`); also the query's `{{ interval }}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// Wait before the first measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_delay: Option<String>,
    /// Measurements to take (default 1; more than 1 needs `interval`; with `interval` and no
    /// `count`, a background analysis measures until the release ends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
    /// Failed measurements tolerated before the metric fails (default 0; -1 never fails).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_limit: Option<i32>,
    /// Inconclusive measurements tolerated before the metric is inconclusive (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inconclusive_limit: Option<i32>,
    /// Errors in a row tolerated before the metric errs (default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_error_limit: Option<i32>,
    /// Expression over `result` that a successful measurement makes true, e.g. `result[0] >= 0.95`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_condition: Option<String>,
    /// Expression over `result` that a failed measurement makes true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_condition: Option<String>,
    /// Flagger's inclusive range, instead of conditions: a value inside passes, outside fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold_range: Option<ThresholdRange>,
    /// Inline PromQL for the operator's metrics server; use a MetricTemplate for any other backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// MetricTemplate that holds the query and its provider (Prometheus, `web` or `job`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_ref: Option<CrossNamespaceObjectReference>,
    /// Values for `{{ variables.<key> }}` in the template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_variables: Option<BTreeMap<String, String>>,
}

/// An argument of an analysis: a value, or where to read it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisArg {
    /// Name used as `{{ args.<name> }}`.
    pub name: String,
    /// The value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Where to read the value instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<ArgValueFrom>,
}

/// Where an argument's value comes from; exactly one field is set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArgValueFrom {
    /// A key of a Secret in the Canary's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeyRef>,
    /// `Stable` (the primary's revision) or `Latest` (the canary's revision being analysed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_hash_value: Option<String>,
}

/// A key of a Secret in the Canary's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct SecretKeyRef {
    /// The Secret's name.
    pub name: String,
    /// The key in its data.
    pub key: String,
}

/// Names a metric of the analysis.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricSelector {
    /// The metric's name, or `*` for every metric.
    pub metric_name: String,
}

/// How many measurements of a metric the status keeps.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MeasurementRetention {
    /// The metric's name, or `*` for every metric.
    pub metric_name: String,
    /// Measurements kept (1 to the limit in `serin_api::limits`).
    pub limit: i32,
}

/// The phase of an analysis run, a metric or one measurement, as Argo Rollouts names them.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum AnalysisPhase {
    /// Still measuring.
    #[default]
    Running,
    /// Passed.
    Successful,
    /// Failed: the release rolls back (unless the metric is a dry run).
    Failed,
    /// Neither condition held often enough to decide.
    Inconclusive,
    /// The measurement could not be taken, too often in a row.
    Error,
}

impl AnalysisPhase {
    /// The phase's name.
    pub fn as_str(self) -> &'static str {
        match self {
            AnalysisPhase::Running => "Running",
            AnalysisPhase::Successful => "Successful",
            AnalysisPhase::Failed => "Failed",
            AnalysisPhase::Inconclusive => "Inconclusive",
            AnalysisPhase::Error => "Error",
        }
    }

    /// Whether the phase is final.
    pub fn is_complete(self) -> bool {
        self != AnalysisPhase::Running
    }
}

impl std::fmt::Display for AnalysisPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The measurements of one analysis in one release: an `analysis` step's, the background
/// analysis's (`background`), or the interval checks' of `analysis.metrics` (`interval`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisRunStatus {
    /// `step-<index>` for an analysis step, `background` for the background analysis, `interval`
    /// for the interval checks.
    pub name: String,
    /// Index of the analysis step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<i32>,
    /// The canary revision measured (`status.lastAppliedSpec`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Running, Successful, Failed, Inconclusive or Error.
    pub phase: AnalysisPhase,
    /// Why the run ended as it did, e.g. `metric "errors" assessed Failed due to failed (2) > failureLimit (1)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the run started.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::timestamp::micros"
    )]
    pub started_at: Option<MicroTime>,
    /// When the run ended.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::timestamp::micros"
    )]
    pub finished_at: Option<MicroTime>,
    /// Each metric's counts and measurements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<MetricRunStatus>,
}

/// One metric of an analysis run: its counters, phase and the measurements kept.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricRunStatus {
    /// The metric's name.
    pub name: String,
    /// Running until assessed.
    pub phase: AnalysisPhase,
    /// Measured and shown only; never fails the release.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// Why the metric was assessed as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Measurements taken.
    #[serde(default)]
    pub count: i32,
    /// Successful measurements.
    #[serde(default)]
    pub successful: i32,
    /// Failed measurements.
    #[serde(default)]
    pub failed: i32,
    /// Inconclusive measurements.
    #[serde(default)]
    pub inconclusive: i32,
    /// Measurements that could not be taken.
    #[serde(default)]
    pub error: i32,
    /// Errors in a row, up to the last measurement.
    #[serde(default)]
    pub consecutive_error: i32,
    /// The latest measurements, oldest first (as many as its retention keeps).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measurements: Vec<MeasurementStatus>,
}

/// One measurement of a metric.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MeasurementStatus {
    /// Successful, Failed, Inconclusive or Error.
    pub phase: AnalysisPhase,
    /// The result as the conditions saw it (`[0.97]`, `42`, `{"ok":true}`), cut to a short length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The error, or why the measurement was judged as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When it was taken.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::timestamp::micros"
    )]
    pub finished_at: Option<MicroTime>,
}

impl StepAnalysis {
    /// Whether `metric` is a dry run in this analysis.
    pub fn is_dry_run(&self, metric: &str) -> bool {
        self.dry_run
            .iter()
            .flatten()
            .any(|s| s.metric_name == "*" || s.metric_name == metric)
    }

    /// How many measurements of `metric` the status keeps: its `measurementRetention` (the first
    /// entry naming it, or `*`), or [`crate::limits::DEFAULT_MEASUREMENT_RETENTION`].
    pub fn retention(&self, metric: &str) -> usize {
        self.measurement_retention
            .iter()
            .flatten()
            .find(|r| r.metric_name == "*" || r.metric_name == metric)
            .map_or(crate::limits::DEFAULT_MEASUREMENT_RETENTION, |r| {
                usize::try_from(r.limit)
                    .unwrap_or(1)
                    .clamp(1, crate::limits::MAX_MEASUREMENT_RETENTION)
            })
    }
}

impl AnalysisMetric {
    /// Measurements the metric takes: `count`, or 1; `None` for a metric with an `interval` and no
    /// `count`, which measures until the release ends (a background analysis).
    pub fn effective_count(&self) -> Option<i32> {
        match (self.count, &self.interval) {
            (None, Some(_)) => None,
            (count, _) => Some(count.unwrap_or(1).max(1)),
        }
    }

    /// `failureLimit`, default 0; `None` when -1 (never fails).
    pub fn failure_limit(&self) -> Option<i32> {
        match self.failure_limit {
            Some(-1) => None,
            limit => Some(limit.unwrap_or(0)),
        }
    }

    /// `inconclusiveLimit`, default 0.
    pub fn inconclusive_limit(&self) -> i32 {
        self.inconclusive_limit.unwrap_or(0)
    }

    /// `consecutiveErrorLimit`, default 4 as in Argo Rollouts.
    pub fn consecutive_error_limit(&self) -> i32 {
        self.consecutive_error_limit.unwrap_or(4)
    }
}

/// Inclusive bounds of an accepted metric value.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThresholdRange {
    /// Lowest accepted value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Highest accepted value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}
