//! The checks of an `analysis` step: its metrics with Argo Rollouts' counts, limits and
//! conditions, its args, dry-run and retention lists.

use super::report::Report;
use crate::analysis_run::{AnalysisArg, AnalysisMetric, StepAnalysis};
use crate::limits::{MAX_ANALYSIS_METRICS, MAX_MEASUREMENT_RETENTION};
use std::collections::HashSet;

/// Longest `successCondition` or `failureCondition`, in bytes.
pub const MAX_CONDITION_BYTES: usize = 4096;

/// Checks the analysis at `base`: an analysis step's (`background` false), whose metrics must
/// end, or the background analysis, whose metrics may measure until the release ends.
pub(super) fn validate_step_analysis(
    a: &StepAnalysis,
    base: &str,
    background: Option<usize>,
    r: &mut Report,
) {
    let base = base.to_string();
    match (background, a.starting_step) {
        (None, Some(_)) => r.add(
            format!("{base}.startingStep"),
            "only the background analysis (analysis.backgroundAnalysis) starts at a step; remove it, an analysis step runs where it stands",
        ),
        (Some(steps), Some(start)) if start < 0 || start as usize >= steps.max(1) => r.add(
            format!("{base}.startingStep"),
            format!("{start} is not the index of a step; write 0 to {}", steps.saturating_sub(1)),
        ),
        _ => {}
    }
    if a.metrics.is_empty() {
        r.add(
            format!("{base}.metrics"),
            "no metrics; list at least one, e.g. [{name: success-rate, templateRef: {name: success-rate}, count: 3, interval: 30s, successCondition: \"result[0] >= 0.95\"}]",
        );
    }
    if a.metrics.len() > MAX_ANALYSIS_METRICS {
        r.add(
            format!("{base}.metrics"),
            format!(
                "{} metrics; an analysis step measures at most {MAX_ANALYSIS_METRICS}: split them over several analysis steps",
                a.metrics.len()
            ),
        );
    }
    let mut names = HashSet::new();
    for (i, m) in a.metrics.iter().enumerate() {
        let mp = format!("{base}.metrics[{i}]");
        r.metric_name(&mp, &m.name, &mut names, "success-rate");
        validate_metric(m, &mp, r);
        if background.is_none() && m.effective_count().is_none() {
            r.add(
                format!("{mp}.count"),
                "missing: with an interval and no count the metric measures until the release ends, so the step would never end; set count (e.g. 3), or move the metric to analysis.backgroundAnalysis",
            );
        }
    }
    let known = |name: &str| name == "*" || names.contains(name);
    for (i, selector) in a.dry_run.iter().flatten().enumerate() {
        if !known(&selector.metric_name) {
            r.add(
                format!("{base}.dryRun[{i}].metricName"),
                format!(
                    "{:?} is not a metric of this analysis; name one of its metrics, or \"*\" for all",
                    selector.metric_name
                ),
            );
        }
    }
    for (i, retention) in a.measurement_retention.iter().flatten().enumerate() {
        let rp = format!("{base}.measurementRetention[{i}]");
        if !known(&retention.metric_name) {
            r.add(
                format!("{rp}.metricName"),
                format!(
                    "{:?} is not a metric of this analysis; name one of its metrics, or \"*\" for all",
                    retention.metric_name
                ),
            );
        }
        r.range(
            &format!("{rp}.limit"),
            Some(retention.limit),
            1,
            MAX_MEASUREMENT_RETENTION as i32,
            "10",
        );
    }
    let mut arg_names = HashSet::new();
    for (i, arg) in a.args.iter().flatten().enumerate() {
        let ap = format!("{base}.args[{i}]");
        if !arg_names.insert(arg.name.as_str()) {
            r.add(
                format!("{ap}.name"),
                format!("duplicate arg {:?}; give each arg once", arg.name),
            );
        }
        validate_arg(arg, &ap, r);
    }
}

fn validate_metric(m: &AnalysisMetric, mp: &str, r: &mut Report) {
    r.metric_interval(&format!("{mp}.interval"), m.interval.as_deref());
    r.metric_interval(&format!("{mp}.initialDelay"), m.initial_delay.as_deref());
    r.range(&format!("{mp}.count"), m.count, 1, 1000, "3");
    if m.count.is_some_and(|c| c > 1) && m.interval.is_none() {
        r.add(
            format!("{mp}.interval"),
            "missing: a metric measured more than once (count > 1) needs the time between measurements, e.g. interval: 30s",
        );
    }
    r.range(
        &format!("{mp}.failureLimit"),
        m.failure_limit,
        -1,
        1000,
        "1",
    );
    r.range(
        &format!("{mp}.inconclusiveLimit"),
        m.inconclusive_limit,
        0,
        1000,
        "1",
    );
    r.range(
        &format!("{mp}.consecutiveErrorLimit"),
        m.consecutive_error_limit,
        0,
        1000,
        "4",
    );
    if r.metric_source(mp, m.template_ref.as_ref(), m.query.as_deref()) {
        r.add(
            format!("{mp}.templateRef"),
            "missing: an analysis metric reads a MetricTemplate (Prometheus, web or job) or an inline PromQL query; set templateRef: {name: <template>} or query",
        );
    }
    let conditions = m.success_condition.is_some() || m.failure_condition.is_some();
    if conditions && m.threshold_range.is_some() {
        r.add(
            format!("{mp}.thresholdRange"),
            "set either thresholdRange or successCondition/failureCondition, not both; keep the conditions and remove thresholdRange",
        );
    }
    for (field, condition) in [
        ("successCondition", &m.success_condition),
        ("failureCondition", &m.failure_condition),
    ] {
        let Some(text) = condition else { continue };
        if text.trim().is_empty() {
            r.add(
                format!("{mp}.{field}"),
                "empty; write an expression over result, e.g. \"result[0] >= 0.95\", or remove the field",
            );
        } else if text.len() > MAX_CONDITION_BYTES {
            r.add(
                format!("{mp}.{field}"),
                format!(
                    "{} bytes long, over the limit of {MAX_CONDITION_BYTES}: shorten the expression",
                    text.len()
                ),
            );
        }
    }
    if let Some(range) = &m.threshold_range
        && range.min.is_none()
        && range.max.is_none()
    {
        r.add(
            format!("{mp}.thresholdRange"),
            "empty range accepts nothing; set min, max or both, e.g. {min: 99}",
        );
    }
}

fn validate_arg(arg: &AnalysisArg, ap: &str, r: &mut Report) {
    let word = !arg.name.is_empty()
        && arg
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !word {
        r.add(
            format!("{ap}.name"),
            format!(
                "{:?} is not an arg name; use letters, digits, - and _, e.g. service-name",
                arg.name
            ),
        );
    }
    match (&arg.value, &arg.value_from) {
        (Some(_), Some(_)) => r.add(
            format!("{ap}.valueFrom"),
            "both value and valueFrom are set; keep one",
        ),
        (None, None) => r.add(
            format!("{ap}.value"),
            "missing; give the arg a value, or valueFrom: {secretKeyRef: {name, key}} or {podTemplateHashValue: Latest}",
        ),
        (None, Some(from)) => match (&from.secret_key_ref, from.pod_template_hash_value.as_deref()) {
            (Some(secret), None) => {
                if secret.name.is_empty() || secret.key.is_empty() {
                    r.add(
                        format!("{ap}.valueFrom.secretKeyRef"),
                        "needs both name (a Secret in the Canary's namespace) and key",
                    );
                }
            }
            (None, Some("Stable" | "Latest")) => {}
            (None, Some(other)) => r.add(
                format!("{ap}.valueFrom.podTemplateHashValue"),
                format!("{other:?} is not a revision; write Stable (the primary's) or Latest (the canary's)"),
            ),
            _ => r.add(
                format!("{ap}.valueFrom"),
                "set exactly one of secretKeyRef or podTemplateHashValue",
            ),
        },
        (Some(_), None) => {}
    }
}
