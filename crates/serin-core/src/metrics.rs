//! Judging a metric's value against its accepted range.

use crate::plan::MetricReading;
use serin_api::CanaryMetric;

/// The judgement of one metric reading.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricJudgement {
    /// Whether the check passed.
    pub passed: bool,
    /// The value, when there was one.
    pub value: Option<f64>,
    /// What was found; for a failure, the text of the `Halt ...` event.
    pub message: String,
}

/// Whether `name` is a builtin metric computed from Istio telemetry.
pub fn is_builtin(metric: &CanaryMetric) -> bool {
    metric.template_ref.is_none()
        && metric.query.is_none()
        && serin_api::validate::BUILTIN_METRICS.contains(&metric.name.as_str())
}

/// Formats milliseconds the way Go prints durations: `500ms`, `1.2s`.
fn format_millis(ms: f64) -> String {
    if ms >= 1000.0 {
        let seconds = format!("{:.3}", ms / 1000.0);
        format!("{}s", seconds.trim_end_matches('0').trim_end_matches('.'))
    } else {
        format!("{}ms", trim_float(ms))
    }
}

fn trim_float(v: f64) -> String {
    let text = format!("{v:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Judges `reading` for `metric` of canary `canary` (`name.namespace`) whose target is `target`
/// (`name.namespace`).
///
/// `thresholdRange` bounds are inclusive. Without a range, the deprecated `threshold` is a minimum
/// for `request-success-rate` and a maximum otherwise. An empty result fails unless the metric says
/// `noData: ignore`.
pub fn judge(
    metric: &CanaryMetric,
    reading: &MetricReading,
    canary: &str,
    target: &str,
) -> MetricJudgement {
    judge_routed_by("istio", metric, reading, canary, target)
}

/// [`judge`] for a canary routed by `provider`, which Flagger names when a builtin metric has no
/// data (its queries differ by provider).
pub fn judge_routed_by(
    provider: &str,
    metric: &CanaryMetric,
    reading: &MetricReading,
    canary: &str,
    target: &str,
) -> MetricJudgement {
    let value = match reading {
        MetricReading::Value(v) if !v.is_nan() => *v,
        MetricReading::Value(_) | MetricReading::NoData => {
            if metric.ignores_no_data() {
                return MetricJudgement {
                    passed: true,
                    value: None,
                    message: format!(
                        "no values found for metric {}; passed because noData is ignore",
                        metric.name
                    ),
                };
            }
            let message = if is_builtin(metric) {
                format!(
                    "Halt advancement no values found for {provider} metric {} probably {target} is not receiving traffic",
                    metric.name
                )
            } else if metric.template_ref.is_some() {
                format!(
                    "Halt advancement no values found for custom metric: {}",
                    metric.name
                )
            } else {
                format!(
                    "Halt advancement no values found for metric: {}",
                    metric.name
                )
            };
            return MetricJudgement {
                passed: false,
                value: None,
                message,
            };
        }
        MetricReading::Error(err) => {
            return MetricJudgement {
                passed: false,
                value: None,
                message: format!("Metric query failed for {}: {err}", metric.name),
            };
        }
    };

    let success_rate = is_builtin(metric) && metric.name == "request-success-rate";
    let duration = is_builtin(metric) && metric.name == "request-duration";
    let describe = |bound: f64| -> (String, String) {
        if success_rate {
            (
                format!("success rate {value:.2}%"),
                format!("{}%", trim_float(bound)),
            )
        } else if duration {
            (
                format!("request duration {}", format_millis(value)),
                format_millis(bound),
            )
        } else {
            (format!("{} {value:.2}", metric.name), trim_float(bound))
        }
    };
    let halt = |op: &str, bound: f64| {
        let (what, limit) = describe(bound);
        MetricJudgement {
            passed: false,
            value: Some(value),
            message: format!("Halt {canary} advancement {what} {op} {limit}"),
        }
    };

    if let Some(range) = &metric.threshold_range {
        if let Some(min) = range.min
            && value < min
        {
            return halt("<", min);
        }
        if let Some(max) = range.max
            && value > max
        {
            return halt(">", max);
        }
    } else {
        let threshold = metric.threshold.unwrap_or(0.0);
        if success_rate && value < threshold {
            return halt("<", threshold);
        }
        if !success_rate && value > threshold {
            return halt(">", threshold);
        }
    }
    let (what, _) = describe(0.0);
    MetricJudgement {
        passed: true,
        value: Some(value),
        message: format!("{what} within range"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serin_api::ThresholdRange;

    fn metric(name: &str, min: Option<f64>, max: Option<f64>) -> CanaryMetric {
        CanaryMetric {
            name: name.into(),
            threshold_range: Some(ThresholdRange { min, max }),
            ..Default::default()
        }
    }

    #[test]
    fn builtin_messages_match_flagger() {
        let sr = metric("request-success-rate", Some(99.0), None);
        let j = judge(
            &sr,
            &MetricReading::Value(98.5),
            "podinfo.test",
            "podinfo.test",
        );
        assert!(!j.passed);
        assert_eq!(
            j.message,
            "Halt podinfo.test advancement success rate 98.50% < 99%"
        );
        assert!(
            judge(&sr, &MetricReading::Value(99.0), "c", "t").passed,
            "bounds are inclusive"
        );

        let rd = metric("request-duration", None, Some(500.0));
        let j = judge(
            &rd,
            &MetricReading::Value(1200.0),
            "podinfo.test",
            "podinfo.test",
        );
        assert_eq!(
            j.message,
            "Halt podinfo.test advancement request duration 1.2s > 500ms"
        );
    }

    #[test]
    fn custom_metric_range_and_no_data() {
        let mut m = metric("errors", Some(1.0), Some(10.0));
        m.template_ref = Some(Default::default());
        assert_eq!(
            judge(&m, &MetricReading::Value(12.345), "c.ns", "t.ns").message,
            "Halt c.ns advancement errors 12.35 > 10"
        );
        assert_eq!(
            judge(&m, &MetricReading::Value(0.5), "c.ns", "t.ns").message,
            "Halt c.ns advancement errors 0.50 < 1"
        );
        let nodata = judge(&m, &MetricReading::NoData, "c.ns", "t.ns");
        assert!(!nodata.passed);
        assert_eq!(
            nodata.message,
            "Halt advancement no values found for custom metric: errors"
        );
        assert!(!judge(&m, &MetricReading::Value(f64::NAN), "c", "t").passed);
        m.no_data = Some("ignore".into());
        assert!(judge(&m, &MetricReading::NoData, "c.ns", "t.ns").passed);
        assert!(!judge(&m, &MetricReading::Error("timeout".into()), "c", "t").passed);
    }

    #[test]
    fn legacy_threshold_is_a_minimum_only_for_success_rate() {
        let sr = CanaryMetric {
            name: "request-success-rate".into(),
            threshold: Some(99.0),
            ..Default::default()
        };
        assert!(!judge(&sr, &MetricReading::Value(98.0), "c", "t").passed);
        assert!(judge(&sr, &MetricReading::Value(99.5), "c", "t").passed);
        let rd = CanaryMetric {
            name: "request-duration".into(),
            threshold: Some(500.0),
            ..Default::default()
        };
        assert!(!judge(&rd, &MetricReading::Value(501.0), "c", "t").passed);
        assert!(judge(&rd, &MetricReading::Value(499.0), "c", "t").passed);
    }
}
