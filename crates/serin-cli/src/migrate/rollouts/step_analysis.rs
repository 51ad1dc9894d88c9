//! An Argo Rollouts analysis step as a Serin `analysis` step at the same place: every metric of the
//! templates it names with Argo's fields as written, and its args, dry-run and retention lists
//! merged with those of the templates.

use super::metrics::{AnalysisReference, field_of};
use crate::migrate::analysis_templates::StepMetric;
use crate::migrate::documents::namespace_of;
use crate::migrate::index::Index;
use crate::migrate::warnings::Report;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// Argo metric fields a Serin analysis metric takes as written.
const VERBATIM: [&str; 4] = [
    "interval",
    "initialDelay",
    "successCondition",
    "failureCondition",
];

/// Argo metric fields that are an int or a string (a number, or an `{{args.NAME}}` placeholder) in
/// Argo and an integer in Serin, with Serin's default when absent.
const COUNTS: [(&str, i64); 4] = [
    ("count", 1),
    ("failureLimit", 0),
    ("inconclusiveLimit", 0),
    ("consecutiveErrorLimit", 4),
];

/// The Serin step for the Argo analysis step `reference` (of `rollout`): `{analysis: {...}}`, or
/// `None` when none of its metrics converts.
pub(super) fn step_analysis(
    rollout: &Value,
    step: &Value,
    reference: &AnalysisReference,
    index: &Index,
    report: &mut Report,
) -> Option<Value> {
    let path = &reference.path;
    let namespace = namespace_of(rollout);
    let mut metrics: Vec<(usize, &str, &StepMetric)> = Vec::new();
    let mut template_args: Vec<(&str, &Value)> = Vec::new();
    let mut dry_run = entries(&step["dryRun"], path, "dryRun", None);
    let mut retention = entries(
        &step["measurementRetention"],
        path,
        "measurementRetention",
        None,
    );
    for (t, template) in reference.templates.iter().enumerate() {
        let Some(position) = index.find_template(template, namespace) else {
            report.field(
                format!("{path}.templates[{t}]"),
                format!(
                    "{} {} is not among the files given, so its metrics are not converted; add its file",
                    if template.cluster_scope {
                        "ClusterAnalysisTemplate"
                    } else {
                        "AnalysisTemplate"
                    },
                    template.name
                ),
            );
            continue;
        };
        let conversion = &index.templates[&position];
        metrics.extend(
            conversion
                .step_metrics
                .iter()
                .map(|m| (t, template.name.as_str(), m)),
        );
        template_args.extend(conversion.args.iter().map(|a| (template.name.as_str(), a)));
        let from = format!("{path}.templates[{t}]");
        let of = Some(template.name.as_str());
        dry_run.extend(entries(&json!(conversion.dry_run), &from, "dryRun", of));
        retention.extend(entries(
            &json!(conversion.measurement_retention),
            &from,
            "measurementRetention",
            of,
        ));
    }
    for field in &reference.unconverted {
        if field != "dryRun" && field != "measurementRetention" {
            report.field(
                format!("{path}.{field}"),
                "no equivalent: Serin creates no AnalysisRun objects (a step's measurements are kept in the Canary's status.analysisRuns); left out",
            );
        }
    }
    if metrics.is_empty() {
        report.field(
            path.clone(),
            "none of the metrics it runs could be converted (see the warnings about its templates), so the step is left out and the release goes on without it",
        );
        return None;
    }

    let (args, literals) = step_args(rollout, reference, &template_args, report);
    let mut names: Vec<String> = Vec::new();
    let mut converted = Vec::new();
    for (t, template, step_metric) in metrics {
        let argo = &step_metric.metric;
        let argo_name = argo["name"].as_str().unwrap_or_default();
        // Argo refuses two metrics of one name; Serin too, so the later one is told apart.
        let name = if names.iter().any(|n| n == argo_name) {
            format!("{template}-{argo_name}")
        } else {
            argo_name.to_string()
        };
        let mut metric = Map::new();
        metric.insert("name".into(), json!(name));
        for field in VERBATIM {
            if let Some(text) = argo[field].as_str() {
                metric.insert(field.into(), json!(text));
            }
        }
        for (field, default) in COUNTS {
            match whole_number(&argo[field], &literals) {
                Ok(Some(number)) => {
                    metric.insert(field.into(), json!(number));
                }
                Ok(None) => {}
                Err(why) => report.field(
                    format!("{path}.templates[{t}]"),
                    format!("metric {argo_name:?} of {template}: {field} {why}; left out, so Serin uses its default, {default}"),
                ),
            }
        }
        let mut template_ref = Map::new();
        template_ref.insert("name".into(), json!(step_metric.template_name));
        if let Some(namespace) = &step_metric.template_namespace {
            template_ref.insert("namespace".into(), json!(namespace));
        }
        metric.insert("templateRef".into(), Value::Object(template_ref));
        names.push(name);
        converted.push(Value::Object(metric));
    }

    let mut analysis = Map::new();
    analysis.insert("metrics".into(), Value::Array(converted));
    if !args.is_empty() {
        analysis.insert("args".into(), Value::Array(args));
    }
    let dry_run = selectors(&dry_run, &names, report);
    if !dry_run.is_empty() {
        analysis.insert("dryRun".into(), Value::Array(dry_run));
    }
    let retention = selectors(&retention, &names, report);
    if !retention.is_empty() {
        analysis.insert("measurementRetention".into(), Value::Array(retention));
    }
    Some(json!({"analysis": analysis}))
}

/// The step's args: the Rollout's, then the templates' defaults for those it does not give; and
/// the literal values among them, by name.
fn step_args(
    rollout: &Value,
    reference: &AnalysisReference,
    template_args: &[(&str, &Value)],
    report: &mut Report,
) -> (Vec<Value>, BTreeMap<String, String>) {
    let mut args = Vec::new();
    let mut literals = BTreeMap::new();
    let mut given = BTreeSet::new();
    for (i, arg) in reference.args.iter().enumerate() {
        let name = arg["name"].as_str().unwrap_or_default();
        let at = format!("{}.args[{i}]", reference.path);
        given.insert(name.to_string());
        let from = &arg["valueFrom"];
        if let Some(value) = literal(&arg["value"]) {
            literals.insert(name.to_string(), value.clone());
            args.push(json!({"name": name, "value": value}));
        } else if let Some(arg) = serin_value_from(name, from) {
            args.push(arg);
        } else if let Some(field) = from["fieldRef"]["fieldPath"].as_str() {
            match field_of(rollout, field) {
                Some(value) => {
                    report.field(
                        format!("{at}.valueFrom.fieldRef"),
                        format!("Serin's args have no fieldRef: written as value {value:?}, read from the Rollout's {field} now; change it when that field changes"),
                    );
                    literals.insert(name.to_string(), value.clone());
                    args.push(json!({"name": name, "value": value}));
                }
                None => report.field(
                    format!("{at}.valueFrom.fieldRef"),
                    format!("Serin's args have no fieldRef, and {field} cannot be read from the Rollout here; the arg is left out: write its value"),
                ),
            }
        } else {
            report.field(
                at,
                "neither a value nor a valueFrom Serin reads (secretKeyRef, podTemplateHashValue); left out",
            );
        }
    }
    // An AnalysisTemplate's own args are defaults: Argo Rollouts takes them for the args the
    // Rollout does not give.
    for (template, arg) in template_args {
        let name = arg["name"].as_str().unwrap_or_default();
        if !given.insert(name.to_string()) {
            continue;
        }
        if let Some(value) = literal(&arg["value"]) {
            literals.insert(name.to_string(), value.clone());
            args.push(json!({"name": name, "value": value}));
        } else if let Some(arg) = serin_value_from(name, &arg["valueFrom"]) {
            args.push(arg);
        } else if arg["valueFrom"].is_null() {
            report.field(
                format!("{}.args", reference.path),
                format!("no value for arg {name} of AnalysisTemplate {template} (Argo Rollouts refuses to start such an analysis); left out of the step's args: give it a value in the Rollout or the Canary's step"),
            );
        }
        // A fieldRef in the template was warned about with the template.
    }
    (args, literals)
}

/// A `valueFrom` Serin reads as Argo does: a Secret's key, or a pod template hash.
fn serin_value_from(name: &str, from: &Value) -> Option<Value> {
    if let Some(hash) = from["podTemplateHashValue"].as_str() {
        return Some(json!({"name": name, "valueFrom": {"podTemplateHashValue": hash}}));
    }
    let secret = &from["secretKeyRef"];
    secret.is_object().then(|| {
        json!({"name": name, "valueFrom": {"secretKeyRef": {"name": secret["name"], "key": secret["key"]}}})
    })
}

/// An arg's value as the string Serin keeps (a number or boolean written unquoted included).
fn literal(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(text) => Some(text.clone()),
        other => Some(other.to_string()),
    }
}

/// An Argo IntOrString: a number, a numeric string, or `{{args.NAME}}` with a literal value.
fn whole_number(value: &Value, literals: &BTreeMap<String, String>) -> Result<Option<i64>, String> {
    match value {
        Value::Null => Ok(None),
        Value::Number(number) => number
            .as_i64()
            .map(Some)
            .ok_or_else(|| format!("{number} is not a whole number")),
        Value::String(text) => {
            let text = text.trim();
            if let Ok(number) = text.parse() {
                return Ok(Some(number));
            }
            let Some(arg) = placeholder_arg(text) else {
                return Err(format!(
                    "{text:?} is neither a whole number nor an {{{{args.NAME}}}} placeholder"
                ));
            };
            match literals.get(arg) {
                Some(given) => given.trim().parse().map(Some).map_err(|_| {
                    format!(
                        "{text:?} is the arg {arg}, whose value {given:?} is not a whole number"
                    )
                }),
                None => Err(format!(
                    "{text:?} is the arg {arg}, which has no literal value among the step's args (Serin's counts and limits are numbers written in the Canary)"
                )),
            }
        }
        other => Err(format!("{other} is not a whole number")),
    }
}

/// `arg` for `{{args.arg}}` or `{{ args.arg }}`.
fn placeholder_arg(text: &str) -> Option<&str> {
    text.strip_prefix("{{")?
        .strip_suffix("}}")?
        .trim()
        .strip_prefix("args.")
        .map(str::trim)
}

/// The entries of a `dryRun` or `measurementRetention` list, each with the path a warning about it
/// names and, for a template's, how the message names the entry.
fn entries(
    list: &Value,
    path: &str,
    field: &str,
    template: Option<&str>,
) -> Vec<(String, String, Value)> {
    list.as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, entry)| match template {
            None => (format!("{path}.{field}[{i}]"), String::new(), entry.clone()),
            Some(name) => (
                path.to_string(),
                format!("AnalysisTemplate {name}'s {field}[{i}]: "),
                entry.clone(),
            ),
        })
        .collect()
}

/// Argo's `metricName` is a regular expression matched anywhere in a metric's name; Serin's is a
/// metric's name or `*`. Each entry becomes `*` (for `.*` and `*`), or one entry per metric of the
/// step it matches, once each; a pattern that is not one of the names is warned about.
fn selectors(
    entries: &[(String, String, Value)],
    names: &[String],
    report: &mut Report,
) -> Vec<Value> {
    let mut selected: Vec<Value> = Vec::new();
    for (path, what, entry) in entries {
        let pattern = entry["metricName"].as_str().unwrap_or_default();
        let mut warn = |message: String| {
            report.field(
                path.clone(),
                format!("{what}metricName {pattern:?}: {message}"),
            );
        };
        let matched: Vec<&str> = match pattern {
            "*" | ".*" | "^.*$" => vec!["*"],
            _ => match regex::Regex::new(pattern) {
                Ok(regex) => {
                    let matched: Vec<&str> = names
                        .iter()
                        .map(String::as_str)
                        .filter(|name| regex.is_match(name))
                        .collect();
                    let exact = matched.len() == 1
                        && (matched[0] == pattern || format!("^{}$", matched[0]) == pattern);
                    if matched.is_empty() {
                        warn("matches none of the step's metrics (Argo Rollouts refuses that); left out".into());
                    } else if !exact {
                        warn(format!(
                            "Argo Rollouts matches it as a regular expression, Serin takes metric names: written as the metrics it matches here, {}",
                            matched.join(", ")
                        ));
                    }
                    matched
                }
                Err(_) => {
                    warn("not a regular expression Argo Rollouts can read; left out".into());
                    Vec::new()
                }
            },
        };
        for name in matched {
            // Serin takes the first entry naming a metric, as the list was merged in that order.
            if selected.iter().any(|s| s["metricName"] == name) {
                continue;
            }
            let mut selector = Map::new();
            selector.insert("metricName".into(), json!(name));
            if !entry["limit"].is_null() {
                selector.insert("limit".into(), entry["limit"].clone());
            }
            selected.push(Value::Object(selector));
        }
    }
    selected
}
