//! A Canary as the dashboard's pages draw it: its phase, weight, place on its ladder, each
//! metric's measurements against its accepted range, and which gate holds. Pure: made from the
//! Canary alone.

use serde::Serialize;
use serin_api::{AnalysisPhase, Canary, Phase, Strategy};
use serin_core::summary;

/// Measurements kept per metric for its chart: the latest ones.
pub const MAX_POINTS: usize = 120;
/// Metrics drawn per Canary.
pub const MAX_METRICS: usize = 20;

/// One Canary, as the list and the Canary page draw it.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CanaryView {
    /// The Canary's namespace.
    pub namespace: String,
    /// The Canary's name.
    pub name: String,
    /// Its phase (`Progressing`, ...), or empty before the operator first wrote it.
    pub phase: String,
    /// The traffic percentage on the canary.
    pub weight: i32,
    /// `canary`, `steps`, `ab-testing` or `blue-green`.
    pub strategy: &'static str,
    /// The steps or weights the release walks through.
    pub ladder: Vec<String>,
    /// Where on the ladder it is.
    pub position: Option<usize>,
    /// Failed checks in the current run.
    pub failed_checks: i32,
    /// Failed checks that roll the release back.
    pub threshold: i32,
    /// When the Canary was created (RFC 3339).
    pub created: Option<String>,
    /// When its status last changed (RFC 3339).
    pub last_transition: Option<String>,
    /// Why it cannot proceed, with the fix.
    pub message: Option<String>,
    /// Whether `spec.suspend` holds it.
    pub suspended: bool,
    /// The target workload, `Deployment/podinfo`.
    pub target: String,
    /// The routing provider.
    pub provider: String,
    /// The apex Service's name.
    pub service: String,
    /// The canary revision being released (pod template hash).
    pub revision: Option<String>,
    /// Each metric's latest check and measurements.
    pub metrics: Vec<MetricView>,
    /// The confirm gates and whether each holds the release now.
    pub gates: Vec<GateView>,
    /// Tokens of the manual requests the operator acted on, by kind (`promote`, `abort`, ...).
    pub handled: serde_json::Value,
    /// The status conditions.
    pub conditions: Vec<ConditionView>,
}

/// A metric, its accepted range and its measurements.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MetricView {
    /// The metric's name.
    pub name: String,
    /// `min 99`, `max 500`, `99..100`.
    pub range: String,
    /// The lowest accepted value.
    pub min: Option<f64>,
    /// The highest accepted value.
    pub max: Option<f64>,
    /// The latest value.
    pub value: Option<f64>,
    /// Whether the latest check passed; `None` before the first one.
    pub passed: Option<bool>,
    /// What the latest check said.
    pub message: String,
    /// The measurements of the current release, oldest first.
    pub points: Vec<Point>,
}

/// One measurement.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Point {
    /// When it was taken (RFC 3339).
    pub t: String,
    /// The value.
    pub v: f64,
    /// Whether it was accepted.
    pub ok: bool,
}

/// A confirm gate.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GateView {
    /// The webhook's name.
    pub name: String,
    /// `confirm-rollout`, `confirm-promotion`, `confirm-traffic-increase`.
    pub kind: String,
    /// Whether it holds the release now.
    pub holding: bool,
}

/// A status condition.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    /// `Promoted`, `Ready`, ...
    pub kind: String,
    /// `True`, `False`, `Unknown`.
    pub status: String,
    /// Why.
    pub reason: String,
    /// The explanation.
    pub message: String,
}

/// The view of `canary` (under Flagger's CRDs, with its stored status already joined in).
pub fn canary_view(canary: &Canary) -> CanaryView {
    let status = canary.status.clone().unwrap_or_default();
    let analysis = canary.spec.analysis.clone().unwrap_or_default();
    let ladder = summary::ladder(canary);
    let position = summary::ladder_position(canary, &ladder);
    let time = |t: &k8s_openapi::jiff::Timestamp| t.to_string();
    let release_start = status.release_started_at.as_ref().map(|t| t.0);
    let metrics = analysis
        .metrics()
        .iter()
        .take(MAX_METRICS)
        .map(|metric| {
            let check = status.metric_checks.iter().find(|c| c.name == metric.name);
            let (min, max) = summary::accepted_bounds(metric);
            let mut measured: Vec<(k8s_openapi::jiff::Timestamp, f64, bool)> = status
                .analysis_runs
                .iter()
                .filter(|run| match (release_start, &run.started_at) {
                    (Some(start), Some(started)) => started.0 >= start,
                    _ => true,
                })
                .flat_map(|run| run.metrics.iter().filter(|m| m.name == metric.name))
                .flat_map(|m| m.measurements.iter())
                .filter_map(|m| {
                    Some((
                        m.finished_at.as_ref()?.0,
                        m.value.as_deref()?.trim().parse().ok()?,
                        m.phase == AnalysisPhase::Successful,
                    ))
                })
                .collect();
            measured.sort_by_key(|(at, _, _)| *at);
            let excess = measured.len().saturating_sub(MAX_POINTS);
            let points = measured[excess..]
                .iter()
                .map(|(at, v, ok)| Point {
                    t: time(at),
                    v: *v,
                    ok: *ok,
                })
                .collect();
            MetricView {
                name: metric.name.clone(),
                range: summary::accepted_range(metric),
                min,
                max,
                value: check.and_then(|c| c.value),
                passed: check.map(|c| c.passed),
                message: check.map(|c| c.message.clone()).unwrap_or_default(),
                points,
            }
        })
        .collect();
    let gates = analysis
        .webhooks()
        .iter()
        .filter_map(|hook| {
            let kind = hook.type_.clone()?;
            kind.starts_with("confirm-").then(|| GateView {
                holding: gate_holds(&kind, status.phase, status.message.as_deref(), &hook.name),
                name: hook.name.clone(),
                kind,
            })
        })
        .collect();
    CanaryView {
        namespace: canary.metadata.namespace.clone().unwrap_or_default(),
        name: canary.metadata.name.clone().unwrap_or_default(),
        phase: status.phase.map(|p| p.to_string()).unwrap_or_default(),
        weight: status.canary_weight,
        strategy: match analysis.strategy() {
            Strategy::Canary => "canary",
            Strategy::Steps => "steps",
            Strategy::AbTesting => "ab-testing",
            Strategy::BlueGreen => "blue-green",
        },
        ladder,
        position,
        failed_checks: status.failed_checks,
        threshold: analysis.threshold(),
        created: canary
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| time(&t.0)),
        last_transition: status.last_transition_time.as_ref().map(|t| time(&t.0)),
        message: status.message.clone(),
        suspended: canary.spec.is_suspended(),
        target: format!(
            "{}/{}",
            canary.spec.target_ref.kind, canary.spec.target_ref.name
        ),
        provider: canary.spec.provider.clone().unwrap_or_default(),
        service: canary.spec.service_name().to_string(),
        revision: status.last_applied_spec.clone(),
        metrics,
        gates,
        handled: serde_json::to_value(status.handled_requests.clone().unwrap_or_default())
            .unwrap_or_default(),
        conditions: status
            .conditions
            .iter()
            .map(|c| ConditionView {
                kind: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
            .collect(),
    }
}

/// Whether the confirm gate `kind` holds a release in `phase`: confirm-rollout while it waits to
/// start, confirm-promotion while it waits to promote, confirm-traffic-increase while the
/// operator's message names it.
fn gate_holds(kind: &str, phase: Option<Phase>, message: Option<&str>, name: &str) -> bool {
    match kind {
        "confirm-rollout" => phase == Some(Phase::Waiting),
        "confirm-promotion" => phase == Some(Phase::WaitingPromotion),
        _ => phase == Some(Phase::Progressing) && message.is_some_and(|m| m.contains(name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use serin_api::{
        AnalysisRunStatus, CanaryAnalysis, CanaryMetric, CanaryStatus, CanaryWebhook,
        MeasurementStatus, MetricCheckStatus, MetricRunStatus, ThresholdRange,
    };

    fn at(second: i64) -> MicroTime {
        MicroTime(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + second).unwrap())
    }

    fn measurement(second: i64, value: &str, phase: AnalysisPhase) -> MeasurementStatus {
        MeasurementStatus {
            phase,
            value: Some(value.into()),
            finished_at: Some(at(second)),
            ..MeasurementStatus::default()
        }
    }

    fn release() -> Canary {
        let mut canary = Canary::default();
        canary.metadata.name = Some("podinfo".into());
        canary.metadata.namespace = Some("team-a".into());
        canary.spec.target_ref.kind = "Deployment".into();
        canary.spec.target_ref.name = "podinfo".into();
        canary.spec.analysis = Some(CanaryAnalysis {
            step_weight: Some(25),
            max_weight: Some(50),
            threshold: Some(2),
            metrics: Some(vec![CanaryMetric {
                name: "error-rate".into(),
                threshold_range: Some(ThresholdRange {
                    min: None,
                    max: Some(1.0),
                }),
                ..CanaryMetric::default()
            }]),
            webhooks: Some(vec![CanaryWebhook {
                name: "approve".into(),
                type_: Some("confirm-promotion".into()),
                ..CanaryWebhook::default()
            }]),
            ..CanaryAnalysis::default()
        });
        let run = |started: i64, points: Vec<MeasurementStatus>| AnalysisRunStatus {
            name: "interval".into(),
            started_at: Some(at(started)),
            metrics: vec![MetricRunStatus {
                name: "error-rate".into(),
                measurements: points,
                ..MetricRunStatus::default()
            }],
            ..AnalysisRunStatus::default()
        };
        canary.status = Some(CanaryStatus {
            phase: Some(Phase::WaitingPromotion),
            canary_weight: 50,
            failed_checks: 1,
            release_started_at: Some(at(100)),
            metric_checks: vec![MetricCheckStatus {
                name: "error-rate".into(),
                value: Some(0.4),
                passed: true,
                ..MetricCheckStatus::default()
            }],
            analysis_runs: vec![
                run(10, vec![measurement(20, "9", AnalysisPhase::Failed)]),
                run(
                    100,
                    vec![
                        measurement(160, "0.4", AnalysisPhase::Successful),
                        measurement(110, "3", AnalysisPhase::Failed),
                    ],
                ),
            ],
            ..CanaryStatus::default()
        });
        canary
    }

    #[test]
    fn the_view_draws_the_current_release_only_in_time_order() {
        let view = canary_view(&release());
        assert_eq!((view.phase.as_str(), view.weight), ("WaitingPromotion", 50));
        assert_eq!(view.ladder, ["25%", "50%"]);
        assert_eq!(view.position, Some(1));
        assert_eq!((view.failed_checks, view.threshold), (1, 2));
        let metric = &view.metrics[0];
        assert_eq!((metric.min, metric.max), (None, Some(1.0)));
        assert_eq!(metric.range, "max 1");
        let values: Vec<(f64, bool)> = metric.points.iter().map(|p| (p.v, p.ok)).collect();
        assert_eq!(values, [(3.0, false), (0.4, true)]);
        assert_eq!(view.gates.len(), 1);
        assert!(
            view.gates[0].holding,
            "confirm-promotion holds in WaitingPromotion"
        );
    }

    #[test]
    fn a_chart_keeps_only_the_latest_measurements() {
        let mut canary = release();
        let status = canary.status.as_mut().unwrap();
        status.analysis_runs[1].metrics[0].measurements = (0..500)
            .map(|i| measurement(200 + i, "0.1", AnalysisPhase::Successful))
            .collect();
        let view = canary_view(&canary);
        assert_eq!(view.metrics[0].points.len(), MAX_POINTS);
        assert_eq!(
            view.metrics[0].points.last().unwrap().t,
            at(699).0.to_string()
        );
    }
}
