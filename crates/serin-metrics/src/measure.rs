//! One measurement of an analysis step's metric, as Argo Rollouts takes it: the query (inline on
//! the operator's metrics server, or a MetricTemplate's Prometheus query or `web` request) is
//! rendered with the step's args, run, and its result judged by the metric's conditions — or by
//! Flagger's `thresholdRange`, or passed when neither is set.

use crate::conditions::{MetricResult, cut, evaluate_result};
use crate::query::render;
use crate::read::{MetricInputs, template_auth, template_client_with, template_headers};
use crate::web::{DEFAULT_TIMEOUT, WebRequest, fetch};
use serin_api::limits::MAX_WEB_METRIC_TIMEOUT;
use serin_api::{AnalysisMetric, AnalysisPhase, MetricTemplate, ThresholdRange};
use serin_core::plan::Measurement;
use std::collections::BTreeMap;
use std::time::Duration;

/// Measures `metric` once: renders its query with `args` (the step's `analysis.args`, resolved),
/// runs it, and judges the result. A query that cannot be rendered or run is an Error measurement
/// whose message says why.
pub async fn measure(
    metric: &AnalysisMetric,
    inputs: MetricInputs<'_>,
    args: &BTreeMap<String, String>,
) -> Measurement {
    let result = match result(metric, inputs, args).await {
        Ok(result) => result,
        Err(message) => {
            return Measurement {
                phase: AnalysisPhase::Error,
                value: None,
                message: Some(cut(message)),
            };
        }
    };
    let success = metric.success_condition.as_deref();
    let failure = metric.failure_condition.as_deref();
    let has_condition = [success, failure]
        .iter()
        .flatten()
        .any(|c| !c.trim().is_empty());
    match &metric.threshold_range {
        Some(range) if !has_condition => in_range(&result, range),
        _ => evaluate_result(&result, success, failure),
    }
}

/// Runs the metric's query and returns its result, or the error message.
async fn result(
    metric: &AnalysisMetric,
    inputs: MetricInputs<'_>,
    args: &BTreeMap<String, String>,
) -> Result<MetricResult, String> {
    let mut context = inputs.context;
    context.interval = metric.interval.clone().unwrap_or_else(|| "1m".into());
    context.variables = metric.template_variables.clone().unwrap_or_default();
    context.args = args.clone();
    if let Some(reference) = &metric.template_ref {
        let label = format!(
            "{}.{}",
            reference.name,
            reference.namespace_or(&context.namespace)
        );
        let template = inputs.template.ok_or_else(|| {
            format!(
                "Metric template {label} error: not found; create the MetricTemplate or fix templateRef"
            )
        })?;
        if template.spec.provider.type_ == "web" {
            let request = web_request(template, inputs.secret, &context, &label)?;
            return fetch(&request)
                .await
                .map(MetricResult::Json)
                .map_err(|e| format!("Metric template {label} error: {e}"));
        }
        // Argo's templates put args in headers too (`Bearer {{args.token}}`).
        let headers = template_headers(template)
            .into_iter()
            .map(|(name, value)| {
                render(&value, &context)
                    .map(|value| (name, value))
                    .map_err(|e| {
                        format!("Metric template {label} provider.headers render error: {e}")
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let kind = template.spec.provider.type_.as_str();
        if crate::providers::reads(kind) {
            let query = render(&template.spec.query, &context)
                .map_err(|e| format!("Metric template {label} query render error: {e}"))?;
            let interval = serin_api::duration::parse_go_duration(&context.interval)
                .unwrap_or(Duration::from_secs(60));
            return crate::providers::read_value(
                template,
                inputs.secret,
                crate::providers::ProviderQuery {
                    text: &query,
                    headers,
                    interval,
                    canary_namespace: &context.namespace,
                },
                inputs.clients.providers(),
            )
            .await
            .map(MetricResult::Scalar)
            .map_err(|failure| {
                failure
                    .message(&label, kind)
                    .unwrap_or_else(|| format!("Metric template {label} ({kind}): no values found"))
            });
        }
        let client =
            template_client_with(template, headers, inputs.secret, inputs.clients, &label)?;
        if template.spec.query.trim().is_empty() {
            return Err(format!(
                "Metric template {label} error: spec.query is empty; a prometheus template needs its query"
            ));
        }
        let query = render(&template.spec.query, &context)
            .map_err(|e| format!("Metric template {label} query render error: {e}"))?;
        return client.query_result(&query).await.map_err(|e| e.to_string());
    }
    if let Some(query) = &metric.query {
        let query = render(query, &context).map_err(|e| format!("query render error: {e}"))?;
        return inputs
            .metrics_server
            .query_result(&query)
            .await
            .map_err(|e| e.to_string());
    }
    Err(format!(
        "metric {:?} has neither query nor templateRef: set query (PromQL for the metrics server) or templateRef (a MetricTemplate)",
        metric.name
    ))
}

/// The request of a `web` template for `context`: address, body and header values rendered.
fn web_request(
    template: &MetricTemplate,
    secret: Option<&BTreeMap<String, String>>,
    context: &crate::QueryContext,
    label: &str,
) -> Result<WebRequest, String> {
    let provider = &template.spec.provider;
    let rendered = |field: &str, text: &str| {
        render(text, context)
            .map_err(|e| format!("Metric template {label} {field} render error: {e}"))
    };
    let address = provider.address.as_deref().ok_or_else(|| {
        format!(
            "Metric template {label} error: provider.address is required for web; write the URL to call"
        )
    })?;
    let headers = template_headers(template)
        .into_iter()
        .map(|(name, value)| Ok((name, rendered("provider.headers", &value)?)))
        .collect::<Result<_, String>>()?;
    let timeout = provider
        .timeout_seconds
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
        .map_or(DEFAULT_TIMEOUT, Duration::from_secs)
        .min(MAX_WEB_METRIC_TIMEOUT);
    let url = rendered("provider.address", address)?;
    // An address made of args (a URL kept in a Secret) is checked once they are filled in; the
    // value itself is not quoted, since it may be the Secret's.
    if !serin_api::validate::is_absolute_http_url(&url) {
        return Err(format!(
            "Metric template {label} error: provider.address, with its args filled in, is not an absolute http:// or https:// URL; fix the address or the args it uses"
        ));
    }
    Ok(WebRequest {
        url,
        method: provider.method.clone().unwrap_or_else(|| "GET".into()),
        headers,
        body: provider
            .body
            .as_deref()
            .map(|body| rendered("provider.body", body))
            .transpose()?,
        json_path: provider.json_path.clone(),
        auth: template_auth(template, secret, label)?,
        insecure_skip_verify: provider.insecure_skip_verify == Some(true),
        timeout,
    })
}

/// Judges `result` by Flagger's inclusive range: one number inside passes, outside fails, and no
/// data fails as in Flagger.
fn in_range(result: &MetricResult, range: &ThresholdRange) -> Measurement {
    let value = Some(cut(result.render()));
    let measured = |phase, message: Option<String>| Measurement {
        phase,
        value: value.clone(),
        message: message.map(cut),
    };
    let number = match result {
        MetricResult::Scalar(v) => Some(*v),
        MetricResult::Vector(values) if values.len() <= 1 => values.first().copied(),
        MetricResult::Vector(values) => {
            return measured(
                AnalysisPhase::Error,
                Some(format!(
                    "thresholdRange needs one value and the query returned {}: aggregate it, e.g. sum(...)",
                    values.len()
                )),
            );
        }
        MetricResult::Json(json) => {
            let json = match json {
                serde_json::Value::Array(items) if items.len() <= 1 => items.first(),
                other => Some(other),
            };
            match json {
                None | Some(serde_json::Value::Null) => None,
                Some(serde_json::Value::Number(n)) => n.as_f64(),
                Some(serde_json::Value::String(s)) if s.trim().parse::<f64>().is_ok() => {
                    s.trim().parse().ok()
                }
                Some(_) => {
                    return measured(
                        AnalysisPhase::Error,
                        Some(
                            "thresholdRange needs one number and the result is not one: select it with jsonPath, or use successCondition".into(),
                        ),
                    );
                }
            }
        }
    };
    let Some(number) = number.filter(|n| !n.is_nan()) else {
        return measured(
            AnalysisPhase::Failed,
            Some(
                "no values found: the query returned no data (is the workload receiving traffic?)"
                    .into(),
            ),
        );
    };
    if let Some(min) = range.min
        && number < min
    {
        return measured(
            AnalysisPhase::Failed,
            Some(format!("{number} is below thresholdRange.min {min}")),
        );
    }
    if let Some(max) = range.max
        && number > max
    {
        return measured(
            AnalysisPhase::Failed,
            Some(format!("{number} is above thresholdRange.max {max}")),
        );
    }
    measured(AnalysisPhase::Successful, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use AnalysisPhase::{Error, Failed, Successful};

    fn range(min: Option<f64>, max: Option<f64>) -> ThresholdRange {
        ThresholdRange { min, max }
    }

    #[test]
    fn threshold_ranges_judge_one_number() {
        let r = range(Some(99.0), None);
        assert_eq!(in_range(&MetricResult::Scalar(99.5), &r).phase, Successful);
        assert_eq!(
            in_range(&MetricResult::Vector(vec![99.0]), &r).phase,
            Successful
        );
        let low = in_range(&MetricResult::Vector(vec![80.0]), &r);
        assert_eq!(low.phase, Failed);
        assert_eq!(
            low.message.as_deref(),
            Some("80 is below thresholdRange.min 99")
        );
        let high = in_range(&MetricResult::Scalar(600.0), &range(None, Some(500.0)));
        assert_eq!(high.phase, Failed);
        for empty in [
            MetricResult::Vector(vec![]),
            MetricResult::Scalar(f64::NAN),
            MetricResult::Json(serde_json::json!(null)),
            MetricResult::Json(serde_json::json!([])),
        ] {
            let measured = in_range(&empty, &r);
            assert_eq!(measured.phase, Failed);
            assert!(measured.message.unwrap().starts_with("no values found"));
        }
        assert_eq!(
            in_range(&MetricResult::Json(serde_json::json!([99.9])), &r).phase,
            Successful
        );
        assert_eq!(
            in_range(&MetricResult::Json(serde_json::json!("99.9")), &r).phase,
            Successful
        );
        assert_eq!(
            in_range(&MetricResult::Vector(vec![1.0, 2.0]), &r).phase,
            Error
        );
        assert_eq!(
            in_range(&MetricResult::Json(serde_json::json!({"a": 1})), &r).phase,
            Error
        );
    }
}
