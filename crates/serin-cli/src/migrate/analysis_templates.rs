//! Argo Rollouts' AnalysisTemplates: each Prometheus metric becomes a MetricTemplate, and each web
//! or job metric one of type `web` or `job` (unless only the Canary's interval metrics, which query
//! Prometheus, would use it). A metric an analysis step runs keeps Argo's fields as they are (the
//! step's metric carries them); one the Canary checks at every interval gets the thresholdRange its
//! success and failure conditions describe.

use super::documents::{DEFAULT_INTERVAL, SERIN_API_VERSION, name_of, namespace_of};
use serde_json::{Map, Number, Value, json};
use std::collections::BTreeMap;

/// An AnalysisTemplate named by a Rollout.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct TemplateReference {
    pub(super) name: String,
    pub(super) cluster_scope: bool,
}

/// How the Rollouts given use an AnalysisTemplate, which decides the MetricTemplates it becomes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Usage {
    /// An analysis step (or the background analysis of a canary with steps) runs it: its metrics
    /// keep Argo's fields and its queries `{{args.NAME}}`.
    pub(super) steps: bool,
    /// A pre- or post-promotion analysis, or the background analysis of a canary without steps,
    /// runs it: its metrics become the Canary's interval metrics, their queries reading
    /// `{{ variables.NAME }}`.
    pub(super) intervals: bool,
}

/// The MetricTemplates made from one AnalysisTemplate, and what a Canary metric using each needs.
pub(super) struct TemplateConversion {
    pub(super) metric_templates: Vec<Value>,
    /// Its Prometheus metrics as interval metrics.
    pub(super) metrics: Vec<ConvertedMetric>,
    /// Its Prometheus, web and job metrics as an analysis step's metrics.
    pub(super) step_metrics: Vec<StepMetric>,
    /// The template's `args` as written: defaults for the args an analysis step does not give.
    pub(super) args: Vec<Value>,
    /// The template's `dryRun` as written, which an analysis step appends to its own.
    pub(super) dry_run: Vec<Value>,
    /// The template's `measurementRetention` as written, which an analysis step appends to its own.
    pub(super) measurement_retention: Vec<Value>,
    pub(super) warnings: Vec<(Option<String>, String)>,
}

/// One metric of an AnalysisTemplate as an analysis step runs it.
#[derive(Clone, Debug)]
pub(super) struct StepMetric {
    /// The Argo metric as written; the step's metric takes its fields verbatim.
    pub(super) metric: Value,
    /// The MetricTemplate holding its provider and query (with `{{args.NAME}}` kept).
    pub(super) template_name: String,
    /// The template's namespace; none for a ClusterAnalysisTemplate's.
    pub(super) template_namespace: Option<String>,
}

/// One Prometheus metric of an AnalysisTemplate, as a Canary metric will reference it.
#[derive(Clone, Debug)]
pub(super) struct ConvertedMetric {
    /// The Argo metric name, which the Canary metric keeps.
    pub(super) name: String,
    /// The MetricTemplate holding its query.
    pub(super) template_name: String,
    pub(super) template_namespace: Option<String>,
    /// Accepted range from successCondition/failureCondition; `None` when they cannot be read.
    pub(super) range: Option<Range>,
    /// Whether no data (NaN, empty) passes, as an `isNaN(result[0]) || ...` condition says.
    pub(super) ignores_no_data: bool,
    pub(super) interval: Option<String>,
    /// Measurements before the metric completes; blue/green's iterations.
    pub(super) count: Option<u64>,
    /// `failureLimit` (default 0); `None` when it is -1 (never fail).
    pub(super) failure_limit: Option<i64>,
    /// The `{{args.X}}` the query uses: (Argo arg name, Serin templateVariables key).
    pub(super) variables: Vec<(String, String)>,
    /// Default values the template gives its args.
    pub(super) defaults: BTreeMap<String, String>,
}

/// An inclusive range of accepted values, as Serin's `thresholdRange`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Range {
    min: Option<Number>,
    max: Option<Number>,
}

impl Range {
    pub(super) fn to_value(&self) -> Value {
        let mut range = Map::new();
        if let Some(min) = &self.min {
            range.insert("min".into(), Value::Number(min.clone()));
        }
        if let Some(max) = &self.max {
            range.insert("max".into(), Value::Number(max.clone()));
        }
        Value::Object(range)
    }

    /// Narrows this range to the part `other` accepts too.
    fn intersect(&mut self, other: &Range) {
        let value = |n: &Number| n.as_f64().unwrap_or(f64::NAN);
        if let Some(min) = &other.min
            && self.min.as_ref().is_none_or(|m| value(min) > value(m))
        {
            self.min = Some(min.clone());
        }
        if let Some(max) = &other.max
            && self.max.as_ref().is_none_or(|m| value(max) < value(m))
        {
            self.max = Some(max.clone());
        }
    }
}

/// Converts one AnalysisTemplate (or ClusterAnalysisTemplate) for the way the Rollouts use it.
pub(super) fn convert_analysis_template(template: &Value, usage: Usage) -> TemplateConversion {
    let spec = &template["spec"];
    let list = |field: &str| spec[field].as_array().cloned().unwrap_or_default();
    let mut conversion = TemplateConversion {
        metric_templates: Vec::new(),
        metrics: Vec::new(),
        step_metrics: Vec::new(),
        args: list("args"),
        dry_run: list("dryRun"),
        measurement_retention: list("measurementRetention"),
        warnings: Vec::new(),
    };
    let mut warn =
        |path: Option<String>, message: String| conversion.warnings.push((path, message));
    let cluster = template["kind"] == "ClusterAnalysisTemplate";
    let referenced = usage.steps || usage.intervals;
    // A template no Rollout uses converts as it always did, for the Canary's interval metrics.
    let for_intervals = usage.intervals || !referenced;
    // What a field the interval metrics cannot hold still does in an analysis step.
    let kept_by_steps = if usage.steps {
        " of the Canary's interval metrics (the analysis steps running this template keep it)"
    } else {
        ""
    };
    let mut defaults = BTreeMap::new();
    for (i, arg) in spec["args"].as_array().into_iter().flatten().enumerate() {
        let name = arg["name"].as_str().unwrap_or_default();
        if let Some(value) = arg["value"].as_str() {
            defaults.insert(name.to_string(), value.to_string());
            continue;
        }
        if arg["valueFrom"].is_null() {
            continue;
        }
        let from_secret = arg["valueFrom"]["secretKeyRef"].is_object();
        let mut reasons = Vec::new();
        if for_intervals {
            reasons.push("a MetricTemplate's variables are plain strings from the Canary's templateVariables, not read from Secrets; put the value in the Canary metric's templateVariables, or credentials in the MetricTemplate's secretRef");
        }
        if usage.steps && !from_secret {
            reasons.push("an analysis step's args read Secrets and pod template hashes, not fields; a Rollout running this template in a step must give the arg's value");
        }
        if !reasons.is_empty() {
            warn(
                Some(format!("spec.args[{i}].valueFrom")),
                format!("no equivalent: {}", reasons.join("; ")),
            );
        }
    }
    if !spec["templates"].is_null() {
        warn(
            Some("spec.templates".into()),
            "no equivalent (templates are not composed in Serin; migrate the included templates as well); left out".into(),
        );
    }
    for (field, why) in [
        (
            "dryRun",
            "the Canary's interval metrics have no dry run: every one of them counts",
        ),
        (
            "measurementRetention",
            "Serin keeps only each interval metric's last result, in status.metricChecks",
        ),
    ] {
        if for_intervals && !spec[field].is_null() {
            warn(
                Some(format!("spec.{field}")),
                format!("no equivalent ({why}); left out{kept_by_steps}"),
            );
        }
    }
    let metrics = spec["metrics"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let template_namespace = if cluster {
        None
    } else {
        namespace_of(template).map(str::to_string)
    };
    let metadata = |name: &str| {
        let mut metadata = Map::new();
        metadata.insert("name".into(), json!(name));
        if let Some(namespace) = namespace_of(template) {
            metadata.insert("namespace".into(), json!(namespace));
        }
        Value::Object(metadata)
    };
    let mut converted_any = false;
    for (i, metric) in metrics.iter().enumerate() {
        let path = format!("spec.metrics[{i}]");
        let metric_name = metric["name"].as_str().unwrap_or_default();
        let provider = &metric["provider"];
        let kind = provider
            .as_object()
            .and_then(|p| p.keys().next().cloned())
            .unwrap_or_else(|| "none".into());
        let template_name = metric_template_name(name_of(template), metric_name, metrics.len());
        if !metric["consecutiveSuccessLimit"].is_null() {
            warn(
                Some(format!("{path}.consecutiveSuccessLimit")),
                "no equivalent (Serin has no success streaks: an interval metric counts failed checks, and an analysis step's metric is assessed after its count measurements); left out".into(),
            );
        }
        match kind.as_str() {
            "prometheus" => {}
            "web" | "job" if usage.intervals && !usage.steps => {
                warn(
                    Some(format!("{path}.provider.{kind}")),
                    format!(
                        "the Canary's interval metrics (spec.analysis.metrics) query Prometheus only, so metric {metric_name:?} is left out (no MetricTemplate, no Canary metric); an analysis step could measure it through a MetricTemplate of type {kind}"
                    ),
                );
                continue;
            }
            "web" | "job" => {
                converted_any = true;
                let provider = if kind == "web" {
                    web_provider(&provider["web"], &path, &mut warn)
                } else {
                    job_provider(&provider["job"])
                };
                conversion.metric_templates.push(json!({
                    "apiVersion": SERIN_API_VERSION,
                    "kind": "MetricTemplate",
                    "metadata": metadata(&template_name),
                    "spec": {"provider": provider},
                }));
                if usage.intervals {
                    warn(
                        Some(format!("{path}.provider.{kind}")),
                        format!(
                            "the Canary's interval metrics (spec.analysis.metrics) query Prometheus only, so metric {metric_name:?} is left out of the pre- and post-promotion analyses and the background analyses without steps that run it; its {kind} MetricTemplate {template_name} serves the analysis steps"
                        ),
                    );
                }
                conversion.step_metrics.push(StepMetric {
                    metric: metric.clone(),
                    template_name,
                    template_namespace: template_namespace.clone(),
                });
                continue;
            }
            _ => {
                warn(
                    Some(format!("{path}.provider.{kind}")),
                    format!(
                        "no equivalent: Serin measures with Prometheus, web endpoints and Jobs only, so metric {metric_name:?} is left out (no MetricTemplate, no Canary metric). A webhook (spec.analysis.webhooks) can run such a check"
                    ),
                );
                continue;
            }
        }
        let prometheus = &provider["prometheus"];
        converted_any = true;
        let written = prometheus["query"].as_str().unwrap_or_default();
        let (query, used, unknown) = convert_placeholders(written);
        for placeholder in unknown {
            warn(
                Some(format!("{path}.provider.prometheus.query")),
                format!(
                    "placeholder {{{{{placeholder}}}}} has no equivalent (Serin's are name, namespace, target, service, interval, variables.KEY and, in an analysis step, args.NAME); left in the query, where Serin will refuse to render it"
                ),
            );
        }
        let provider = prometheus_provider(prometheus, &path, &mut warn);
        let mut template_for = |name: &str, query: &str| {
            conversion.metric_templates.push(json!({
                "apiVersion": SERIN_API_VERSION,
                "kind": "MetricTemplate",
                "metadata": metadata(name),
                "spec": {"provider": provider, "query": query},
            }));
        };
        if for_intervals {
            template_for(&template_name, &query);
        }
        if usage.steps {
            // An analysis step fills `{{args.NAME}}` itself, so its MetricTemplate keeps the query
            // as written; only when the interval metrics need it rewritten are there two.
            let step_template = if for_intervals && query != written {
                format!("{template_name}-args")
            } else {
                template_name.clone()
            };
            if !for_intervals || step_template != template_name {
                template_for(&step_template, written);
            }
            conversion.step_metrics.push(StepMetric {
                metric: metric.clone(),
                template_name: step_template,
                template_namespace: template_namespace.clone(),
            });
        }
        if !for_intervals {
            continue;
        }

        let (range, ignores_no_data) = read_conditions(metric, &path, &mut warn);
        let failure_limit = match metric["failureLimit"].as_i64() {
            Some(-1) => {
                warn(
                    Some(format!("{path}.failureLimit")),
                    format!(
                        "-1 (never fail) has no equivalent: Serin rolls back after spec.analysis.threshold failed checks of any interval metric{}",
                        if usage.steps {
                            " (an analysis step keeps -1)"
                        } else {
                            ""
                        }
                    ),
                );
                None
            }
            Some(limit) => Some(limit),
            None => Some(0),
        };
        for (field, why) in [
            (
                "initialDelay",
                "Serin checks interval metrics from the first analysis tick of a release",
            ),
            (
                "consecutiveErrorLimit",
                "a query error is a failed check of an interval metric, counted towards spec.analysis.threshold",
            ),
            (
                "inconclusiveLimit",
                "an interval metric has no inconclusive results",
            ),
        ] {
            if !metric[field].is_null() {
                warn(
                    Some(format!("{path}.{field}")),
                    format!("no equivalent ({why}); left out{kept_by_steps}"),
                );
            }
        }
        let interval = metric["interval"].as_str().map(str::to_string);
        if let Some(text) = &interval
            && !is_prometheus_duration(text)
        {
            warn(
                Some(format!("{path}.interval")),
                format!(
                    "{text:?} is not a whole number of h, m or s, which Serin's analysis interval needs; the Canary uses {DEFAULT_INTERVAL}"
                ),
            );
        }
        conversion.metrics.push(ConvertedMetric {
            name: metric_name.to_string(),
            template_name,
            template_namespace: template_namespace.clone(),
            range,
            ignores_no_data,
            interval: interval.filter(|text| is_prometheus_duration(text)),
            count: metric["count"]
                .as_u64()
                .or_else(|| metric["count"].as_str().and_then(|c| c.parse().ok())),
            failure_limit,
            variables: used
                .iter()
                .map(|arg| (arg.clone(), variable_name(arg)))
                .collect(),
            defaults: defaults.clone(),
        });
    }
    if cluster && converted_any {
        warn(
            None,
            "a ClusterAnalysisTemplate is cluster-wide but a MetricTemplate lives in a namespace: written without one, so it lands in the namespace you apply it to; Canaries elsewhere reference it with templateRef.namespace".into(),
        );
    }
    if !referenced && converted_any {
        warn(
            None,
            "no Rollout among the files given uses it, so its successCondition, failureCondition and failureLimit have no Canary metric to go to; reference the MetricTemplate from an analysis step's metric (which takes them as Argo wrote them) or from a Canary metric with a thresholdRange".into(),
        );
    }
    conversion
}

/// A Prometheus provider as a MetricTemplate's: address, `insecure` and headers carried over.
fn prometheus_provider(
    prometheus: &Value,
    path: &str,
    warn: &mut impl FnMut(Option<String>, String),
) -> Value {
    let mut provider = Map::new();
    provider.insert("type".into(), json!("prometheus"));
    match prometheus["address"].as_str() {
        Some(address) => {
            provider.insert("address".into(), json!(address));
        }
        None => warn(
            Some(format!("{path}.provider.prometheus.address")),
            "missing: Argo Rollouts used its controller's default Prometheus, Serin needs the address in the MetricTemplate; add spec.provider.address".into(),
        ),
    }
    if prometheus["insecure"].as_bool() == Some(true) {
        provider.insert("insecureSkipVerify".into(), json!(true));
    }
    if let Some(headers) = prometheus["headers"].as_array() {
        provider.insert("headers".into(), header_map(headers));
    }
    for (field, why) in [
        (
            "timeout",
            "Serin waits 5 seconds for every Prometheus query",
        ),
        (
            "authentication",
            "Serin authenticates with a bearer token or basic auth from the MetricTemplate's secretRef (keys token, or username and password); create that Secret and set spec.provider.secretRef",
        ),
        ("rangeQuery", "Serin runs instant queries only"),
    ] {
        if !prometheus[field].is_null() {
            warn(
                Some(format!("{path}.provider.prometheus.{field}")),
                format!("no equivalent ({why}); left out"),
            );
        }
    }
    Value::Object(provider)
}

/// A web provider as a MetricTemplate's of type `web`: `url` is its address, `jsonBody` its body
/// written as JSON; placeholders stay for the analysis step's args.
fn web_provider(web: &Value, path: &str, warn: &mut impl FnMut(Option<String>, String)) -> Value {
    let mut provider = Map::new();
    provider.insert("type".into(), json!("web"));
    for (from, to) in [
        ("url", "address"),
        ("method", "method"),
        ("body", "body"),
        ("jsonPath", "jsonPath"),
        ("timeoutSeconds", "timeoutSeconds"),
    ] {
        if !web[from].is_null() {
            provider.insert(to.into(), web[from].clone());
        }
    }
    if let Some(headers) = web["headers"].as_array() {
        provider.insert("headers".into(), header_map(headers));
    }
    if !web["jsonBody"].is_null() && web["body"].is_null() {
        provider.insert("body".into(), json!(web["jsonBody"].to_string()));
    }
    if web["insecure"].as_bool() == Some(true) {
        provider.insert("insecureSkipVerify".into(), json!(true));
    }
    let known = [
        "url",
        "method",
        "headers",
        "body",
        "jsonBody",
        "jsonPath",
        "timeoutSeconds",
        "insecure",
    ];
    for field in web.as_object().into_iter().flat_map(Map::keys) {
        if known.contains(&field.as_str()) {
            continue;
        }
        let why = if field == "authentication" {
            "Serin's web provider sends the headers written and nothing else; an Authorization header with an arg read from a Secret can carry a token"
        } else {
            "not a field of Serin's web provider"
        };
        warn(
            Some(format!("{path}.provider.web.{field}")),
            format!("no equivalent ({why}); left out"),
        );
    }
    Value::Object(provider)
}

/// A job provider as a MetricTemplate's of type `job`: the Job's labels, annotations and
/// `batch/v1` spec as written (placeholders stay for the analysis step's args).
fn job_provider(job: &Value) -> Value {
    let mut provider = Map::new();
    provider.insert("type".into(), json!("job"));
    let mut metadata = Map::new();
    for field in ["labels", "annotations"] {
        if let Some(map) = job["metadata"][field].as_object() {
            metadata.insert(field.into(), Value::Object(map.clone()));
        }
    }
    let mut body = Map::new();
    if !metadata.is_empty() {
        body.insert("metadata".into(), Value::Object(metadata));
    }
    body.insert("spec".into(), job["spec"].clone());
    provider.insert("job".into(), Value::Object(body));
    Value::Object(provider)
}

/// Argo's `[{key, value}]` headers as a MetricTemplate's `{Name: [value, ...]}`.
fn header_map(headers: &[Value]) -> Value {
    let mut map = Map::new();
    for header in headers {
        if let (Some(key), Some(value)) = (header["key"].as_str(), header["value"].as_str()) {
            let values = map.entry(key).or_insert_with(|| json!([]));
            if let Some(values) = values.as_array_mut() {
                values.push(json!(value));
            }
        }
    }
    Value::Object(map)
}

/// A MetricTemplate holds one query: a one-metric template keeps its name, the metrics of a larger
/// one are named `<template>-<metric>`.
fn metric_template_name(template: &str, metric: &str, metrics: usize) -> String {
    let name = if metrics == 1 {
        template.to_string()
    } else {
        format!("{template}-{metric}")
    };
    let name: String = name
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    name.trim_matches('-').to_string()
}

/// `{{args.service-name}}` becomes `{{ variables.service_name }}` (a template variable must be an
/// identifier). Returns the query, the args used (in order, once each) and other placeholders.
fn convert_placeholders(query: &str) -> (String, Vec<String>, Vec<String>) {
    let mut converted = String::with_capacity(query.len());
    let mut used = Vec::new();
    let mut unknown = Vec::new();
    let mut rest = query;
    while let Some(start) = rest.find("{{") {
        let Some(length) = rest[start..].find("}}") else {
            break;
        };
        converted.push_str(&rest[..start]);
        let inner = rest[start + 2..start + length].trim();
        match inner.strip_prefix("args.") {
            Some(arg) => {
                converted.push_str(&format!("{{{{ variables.{} }}}}", variable_name(arg)));
                if !used.iter().any(|u| u == arg) {
                    used.push(arg.to_string());
                }
            }
            None => {
                converted.push_str(&rest[start..start + length + 2]);
                unknown.push(inner.to_string());
            }
        }
        rest = &rest[start + length + 2..];
    }
    converted.push_str(rest);
    (converted, used, unknown)
}

/// A templateVariables key for an Argo arg: letters, digits and `_` (the template language reads
/// `variables.service-name` as a subtraction).
fn variable_name(arg: &str) -> String {
    let mut name: String = arg
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

/// Whether Serin accepts the text as an interval: whole numbers of h, m and s.
fn is_prometheus_duration(text: &str) -> bool {
    serin_api::duration::parse_go_duration(text).is_ok()
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || b"hms".contains(&b))
}

/// The accepted range an Argo metric's conditions describe, and whether no data passes.
fn read_conditions(
    metric: &Value,
    path: &str,
    warn: &mut impl FnMut(Option<String>, String),
) -> (Option<Range>, bool) {
    let success = metric["successCondition"].as_str();
    let failure = metric["failureCondition"].as_str();
    if success.is_none() && failure.is_none() {
        warn(
            Some(path.to_string()),
            "has neither successCondition nor failureCondition, so Argo accepted any value; Serin needs a thresholdRange, which the Canary metric lacks until you add one".into(),
        );
        return (None, false);
    }
    let mut range = Range::default();
    let mut ignores_no_data = false;
    for (field, text, succeeds) in [
        ("successCondition", success, true),
        ("failureCondition", failure, false),
    ] {
        let Some(text) = text else { continue };
        match read_condition(text, succeeds) {
            Some(reading) => {
                range.intersect(&reading.range);
                ignores_no_data |= reading.ignores_no_data;
                for note in reading.inexact {
                    warn(Some(format!("{path}.{field}")), note);
                }
            }
            None => {
                warn(
                    Some(format!("{path}.{field}")),
                    format!(
                        "{text:?} cannot be written as a thresholdRange (a min and/or max on one value); the Canary metric has none until you add it"
                    ),
                );
                return (None, false);
            }
        }
    }
    if success.is_some() && failure.is_some() {
        warn(
            Some(path.to_string()),
            "with both conditions Argo called values that meet neither Inconclusive; Serin has no inconclusive result, so they fail the check".into(),
        );
    }
    (Some(range), ignores_no_data)
}

/// What one condition expression says about accepted values.
#[derive(Debug, Default, PartialEq)]
struct ConditionReading {
    range: Range,
    ignores_no_data: bool,
    /// What the inclusive bounds of a thresholdRange change.
    inexact: Vec<String>,
}

/// Reads a successCondition (`succeeds`) or failureCondition made of comparisons of the result
/// with numbers joined by `&&`, optionally behind a no-data guard (`isNaN(result[0]) || ...`).
/// `None` for anything else.
fn read_condition(text: &str, succeeds: bool) -> Option<ConditionReading> {
    let mut reading = ConditionReading::default();
    let mut comparisons = Vec::new();
    for part in text.split("||") {
        let part = strip_parentheses(part.trim());
        if is_no_data_guard(part) {
            // A guard in a successCondition lets no data pass; in a failureCondition it fails,
            // which is Serin's default.
            reading.ignores_no_data |= succeeds;
        } else {
            comparisons.push(part);
        }
    }
    let [comparison] = comparisons.as_slice() else {
        return None;
    };
    for clause in comparison.split("&&") {
        let (operator, number) = read_comparison(strip_parentheses(clause.trim()))?;
        let exact_text = number_text(&number);
        let (bound_is_min, inclusive_in_argo) = match (succeeds, operator) {
            (true, ">=") => (true, true),
            (true, ">") => (true, false),
            (true, "<=") => (false, true),
            (true, "<") => (false, false),
            (false, "<") => (true, true),
            (false, "<=") => (true, false),
            (false, ">") => (false, true),
            (false, ">=") => (false, false),
            (true, "==") => {
                reading.range.intersect(&Range {
                    min: Some(number.clone()),
                    max: Some(number),
                });
                continue;
            }
            _ => return None,
        };
        let bound = if bound_is_min {
            Range {
                min: Some(number),
                max: None,
            }
        } else {
            Range {
                min: None,
                max: Some(number),
            }
        };
        reading.range.intersect(&bound);
        if !inclusive_in_argo {
            reading.inexact.push(format!(
                "{text:?}: a thresholdRange includes its bounds, so a value of exactly {exact_text} passes in Serin where Argo failed it"
            ));
        }
    }
    Some(reading)
}

fn strip_parentheses(text: &str) -> &str {
    let mut text = text.trim();
    while text.starts_with('(') && text.ends_with(')') {
        text = text[1..text.len() - 1].trim();
    }
    text
}

fn is_no_data_guard(text: &str) -> bool {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    [
        "isNaN(result[0])",
        "isNaN(result)",
        "len(result)==0",
        "isNil(result)",
        "result==nil",
    ]
    .contains(&compact.as_str())
}

/// `result[0] >= 0.95` (or with the number first, or through asFloat/asInt) as the operator seen
/// from the result's side and the number.
fn read_comparison(text: &str) -> Option<(&'static str, Number)> {
    for (operator, flipped) in [
        (">=", "<="),
        ("<=", ">="),
        ("==", "=="),
        (">", "<"),
        ("<", ">"),
    ] {
        let Some((left, right)) = text.split_once(operator) else {
            continue;
        };
        let (left, right) = (left.trim(), right.trim());
        if is_result(left) {
            return parse_number(right).map(|n| (operator, n));
        }
        if is_result(right) {
            return parse_number(left).map(|n| (flipped, n));
        }
        return None;
    }
    None
}

fn is_result(text: &str) -> bool {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let inner = ["asFloat(", "asInt(", "float(", "int("]
        .iter()
        .find_map(|f| {
            compact
                .strip_prefix(f)
                .and_then(|rest| rest.strip_suffix(')'))
        })
        .unwrap_or(&compact);
    inner == "result" || inner == "result[0]"
}

/// A number as written: whole numbers stay integers, so `500` is not printed as `500.0`.
fn parse_number(text: &str) -> Option<Number> {
    if let Ok(whole) = text.parse::<i64>() {
        return Some(Number::from(whole));
    }
    text.parse::<f64>().ok().and_then(Number::from_f64)
}

fn number_text(number: &Number) -> String {
    number.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrate::tests::{
        CANARY_ROLLOUT, SERVICES, TEMPLATES, background_success_rate, documents, migrate_files,
        migrate_one, object_warnings, warning, without_steps,
    };

    #[test]
    fn success_conditions_become_threshold_ranges() {
        let read = |text| {
            read_condition(text, true)
                .map(|r| (r.range.to_value(), r.ignores_no_data, r.inexact.len()))
        };
        assert_eq!(
            read("result[0] >= 0.95"),
            Some((json!({"min": 0.95}), false, 0))
        );
        assert_eq!(read("result <= 500"), Some((json!({"max": 500}), false, 0)));
        assert_eq!(
            read("asFloat(result[0]) > 0.9"),
            Some((json!({"min": 0.9}), false, 1))
        );
        assert_eq!(
            read("0.9 <= result[0]"),
            Some((json!({"min": 0.9}), false, 0))
        );
        assert_eq!(
            read("result[0] >= 0.9 && result[0] <= 1.1"),
            Some((json!({"min": 0.9, "max": 1.1}), false, 0))
        );
        assert_eq!(
            read("isNaN(result[0]) || result[0] < 500"),
            Some((json!({"max": 500}), true, 1))
        );
        assert_eq!(
            read("len(result) == 0 || (result[0] >= 99)"),
            Some((json!({"min": 99}), true, 0))
        );
        assert_eq!(read("result.ok == true"), None);
        assert_eq!(read("result[0] >= 1 || result[1] >= 1"), None);
    }

    #[test]
    fn failure_conditions_become_the_complementary_range() {
        let read = |text| {
            read_condition(text, false)
                .map(|r| (r.range.to_value(), r.ignores_no_data, r.inexact.len()))
        };
        assert_eq!(
            read("result[0] < 0.95"),
            Some((json!({"min": 0.95}), false, 0))
        );
        assert_eq!(
            read("result[0] > 500"),
            Some((json!({"max": 500}), false, 0))
        );
        assert_eq!(
            read("result[0] >= 500"),
            Some((json!({"max": 500}), false, 1))
        );
        // A guard in a failureCondition fails on no data, as Serin does by default.
        assert_eq!(
            read("isNaN(result[0]) || result[0] < 0.9"),
            Some((json!({"min": 0.9}), false, 0))
        );
        assert_eq!(read("result[0] == 0"), None);
    }

    #[test]
    fn query_args_become_template_variables() {
        let (query, used, unknown) = convert_placeholders(
            "rate(x{svc=~\"{{args.service-name}}\",q=\"{{ args.quantile }}\"}[1m]) * {{args.service-name}} {{templates.a.podTemplateHash}}",
        );
        assert_eq!(
            query,
            "rate(x{svc=~\"{{ variables.service_name }}\",q=\"{{ variables.quantile }}\"}[1m]) * {{ variables.service_name }} {{templates.a.podTemplateHash}}"
        );
        assert_eq!(used, ["service-name", "quantile"]);
        assert_eq!(unknown, ["templates.a.podTemplateHash"]);
        assert_eq!(variable_name("9-lives.x"), "_9_lives_x");
    }

    #[test]
    fn metric_templates_are_named_after_the_template_and_metric() {
        assert_eq!(
            metric_template_name("success-rate", "success-rate", 1),
            "success-rate"
        );
        assert_eq!(
            metric_template_name("http", "Error Rate", 2),
            "http-error-rate"
        );
    }

    #[test]
    fn conditions_that_cannot_be_a_threshold_range_leave_the_metric_without_one() {
        let templates = TEMPLATES.replace(
            "successCondition: result[0] >= 0.95",
            "successCondition: result[0] >= 0.95 || result[1] >= 0.95",
        );
        // Only the interval metrics need a thresholdRange: success-rate runs in the background too.
        let migration = migrate_files(&[
            ("templates.yaml", &templates),
            ("services.yaml", SERVICES),
            (
                "rollout.yaml",
                &without_steps(&background_success_rate(CANARY_ROLLOUT)),
            ),
        ]);
        assert!(
            warning(&migration, "spec.metrics[0].successCondition")
                .message
                .contains("cannot be written as a thresholdRange")
        );
        // Serin's validation then says what the Canary lacks.
        let refused = warning(&migration, "spec.analysis.metrics[1].thresholdRange");
        assert_eq!(refused.object, "Rollout shop (as Canary shop)");
        assert!(refused.message.starts_with("Serin refuses this: missing"));
    }

    #[test]
    fn unreferenced_analysis_templates_say_where_their_conditions_go() {
        let migration = migrate_one(TEMPLATES.split("---").next().unwrap());
        let said = object_warnings(&migration, "AnalysisTemplate success-rate");
        assert!(
            said.iter()
                .any(|m| m.contains("no Rollout among the files given uses it")),
            "{said:?}"
        );
        assert_eq!(documents(&migration).len(), 1);
    }
}
