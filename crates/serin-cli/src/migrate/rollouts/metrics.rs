//! The analyses a Rollout runs: which templates each names, and those that run alongside the release
//! (pre- and post-promotion, background without steps) as the Canary's interval metrics, their
//! args as templateVariables, with the interval and threshold the metrics give the analysis.
//! Analysis steps, and the background analysis of a canary with steps, are converted in
//! `step_analysis`.

use crate::migrate::analysis_templates::{ConvertedMetric, TemplateReference};
use crate::migrate::documents::{DEFAULT_INTERVAL, namespace_of};
use crate::migrate::index::Index;
use crate::migrate::warnings::Report;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// A place in a Rollout that runs an analysis.
#[derive(Clone, Debug)]
pub(super) struct AnalysisReference {
    pub(super) path: String,
    pub(super) role: AnalysisRole,
    pub(super) templates: Vec<TemplateReference>,
    pub(super) args: Vec<Value>,
    /// Its fields Serin has no use for (dryRun, measurementRetention, analysisRunMetadata, ...).
    pub(super) unconverted: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum AnalysisRole {
    /// `canary.analysis`, running alongside the steps: Serin's backgroundAnalysis when there are
    /// steps, the Canary's interval metrics otherwise.
    Background,
    /// `canary.steps[i].analysis`.
    Step,
    /// `blueGreen.prePromotionAnalysis`.
    PrePromotion,
    /// `blueGreen.postPromotionAnalysis`.
    PostPromotion,
}

pub(super) fn analysis_references(rollout: &Value) -> Vec<AnalysisReference> {
    let strategy = &rollout["spec"]["strategy"];
    let mut references = Vec::new();
    let mut add = |path: String, role: AnalysisRole, analysis: &Value| {
        if analysis.is_null() {
            return;
        }
        let mut templates: Vec<TemplateReference> = analysis["templates"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| TemplateReference {
                name: t["templateName"].as_str().unwrap_or_default().to_string(),
                cluster_scope: t["clusterScope"].as_bool().unwrap_or(false),
            })
            .collect();
        // Argo Rollouts before 1.0 named one template directly.
        if let Some(name) = analysis["templateName"].as_str() {
            templates.push(TemplateReference {
                name: name.to_string(),
                cluster_scope: analysis["clusterScope"].as_bool().unwrap_or(false),
            });
        }
        let known = [
            "templates",
            "templateName",
            "clusterScope",
            "args",
            "startingStep",
        ];
        let unconverted = analysis
            .as_object()
            .into_iter()
            .flat_map(Map::keys)
            .filter(|key| !known.contains(&key.as_str()))
            .cloned()
            .collect();
        references.push(AnalysisReference {
            path,
            role,
            templates,
            args: analysis["args"].as_array().cloned().unwrap_or_default(),
            unconverted,
        });
    };
    let canary = &strategy["canary"];
    add(
        "spec.strategy.canary.analysis".into(),
        AnalysisRole::Background,
        &canary["analysis"],
    );
    for (i, step) in canary["steps"].as_array().into_iter().flatten().enumerate() {
        add(
            format!("spec.strategy.canary.steps[{i}].analysis"),
            AnalysisRole::Step,
            &step["analysis"],
        );
    }
    let blue_green = &strategy["blueGreen"];
    add(
        "spec.strategy.blueGreen.prePromotionAnalysis".into(),
        AnalysisRole::PrePromotion,
        &blue_green["prePromotionAnalysis"],
    );
    add(
        "spec.strategy.blueGreen.postPromotionAnalysis".into(),
        AnalysisRole::PostPromotion,
        &blue_green["postPromotionAnalysis"],
    );
    references
}

/// Which analyses of a Rollout a list of metrics is made from.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Stage {
    /// Every analysis that runs alongside the release before promotion (background, pre-promotion).
    BeforePromotion,
    /// Blue/green's post-promotion analysis.
    AfterSwitch,
}

/// A metric a Rollout checks at every interval, with the Canary metric name it gets.
pub(super) struct RolloutMetric {
    pub(super) metric: ConvertedMetric,
    pub(super) canary_name: String,
    pub(super) variables: BTreeMap<String, String>,
}

/// The Prometheus metrics of the analyses the Rollout runs at `stage`, once each; analysis steps
/// are steps of their own and never among them.
pub(super) fn analysis_metrics(
    rollout: &Value,
    references: &[AnalysisReference],
    index: &Index,
    report: &mut Report,
    stage: Stage,
) -> Vec<RolloutMetric> {
    let mut metrics: Vec<RolloutMetric> = Vec::new();
    let namespace = namespace_of(rollout);
    for reference in references {
        let after_switch = reference.role == AnalysisRole::PostPromotion;
        if reference.role == AnalysisRole::Step || after_switch != (stage == Stage::AfterSwitch) {
            continue;
        }
        for field in &reference.unconverted {
            let message = match field.as_str() {
                "dryRun" => {
                    "no equivalent: the Canary's interval metrics have no dry run, every one of them counts (an analysis step has dryRun); left out"
                }
                "measurementRetention" => {
                    "no equivalent: Serin keeps only each interval metric's last result, in status.metricChecks; left out"
                }
                _ => "no equivalent: Serin creates no AnalysisRun objects; left out",
            };
            report.field(format!("{}.{field}", reference.path), message);
        }
        for (t, template) in reference.templates.iter().enumerate() {
            let Some(position) = index.find_template(template, namespace) else {
                report.field(
                    format!("{}.templates[{t}]", reference.path),
                    format!("{} {} is not among the files given, so its metrics are not converted; add its file", if template.cluster_scope { "ClusterAnalysisTemplate" } else { "AnalysisTemplate" }, template.name),
                );
                continue;
            };
            for metric in &index.templates[&position].metrics {
                if metrics.iter().any(|m| {
                    m.metric.template_name == metric.template_name
                        && m.metric.template_namespace == metric.template_namespace
                }) {
                    continue;
                }
                let variables = template_variables(rollout, reference, metric, report);
                let taken = metrics.iter().any(|m| m.canary_name == metric.name);
                let canary_name = if taken {
                    format!("{}-{}", template.name, metric.name)
                } else {
                    metric.name.clone()
                };
                metrics.push(RolloutMetric {
                    metric: metric.clone(),
                    canary_name,
                    variables,
                });
            }
        }
    }
    metrics
}

/// The templateVariables of one metric: the Rollout's args, else the template's defaults.
fn template_variables(
    rollout: &Value,
    reference: &AnalysisReference,
    metric: &ConvertedMetric,
    report: &mut Report,
) -> BTreeMap<String, String> {
    let mut variables = BTreeMap::new();
    for (arg, variable) in &metric.variables {
        let given = reference
            .args
            .iter()
            .enumerate()
            .find(|(_, a)| a["name"].as_str() == Some(arg.as_str()));
        let value = match given {
            Some((_, a)) if !a["value"].is_null() => Some(match &a["value"] {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            }),
            Some((i, a)) => {
                let path = format!("{}.args[{i}].valueFrom", reference.path);
                let from = &a["valueFrom"];
                if let Some(field) = from["fieldRef"]["fieldPath"].as_str() {
                    let resolved = field_of(rollout, field);
                    if resolved.is_none() {
                        report.field(
                            path,
                            format!("{field} cannot be read from the Rollout here; templateVariables.{variable} is left out, and Serin will say so when it renders the query. Write the value"),
                        );
                    }
                    resolved
                } else {
                    report.field(
                        path,
                        format!("no equivalent (Serin's pods carry no rollouts-pod-template-hash; select the canary's pods with {{{{ target }}}} and the primary's with {{{{ target }}}}-primary in the query); templateVariables.{variable} is left out, and Serin will say so when it renders the query"),
                    );
                    None
                }
            }
            None => metric.defaults.get(arg).cloned(),
        };
        match value {
            Some(value) => {
                variables.insert(variable.clone(), value);
            }
            None if given.is_none() => report.field(
                format!("{}.args", reference.path),
                format!("no value for arg {arg} of metric {}; write it in the Canary metric's templateVariables.{variable}", metric.name),
            ),
            None => {}
        }
    }
    variables
}

/// `metadata.name`, `metadata.namespace`, `metadata.labels['x']`, `metadata.annotations['x']` of
/// the Rollout.
pub(super) fn field_of(rollout: &Value, field: &str) -> Option<String> {
    let metadata = &rollout["metadata"];
    match field {
        "metadata.name" | "metadata.namespace" => {
            metadata[&field[9..]].as_str().map(str::to_string)
        }
        _ => {
            let (map, key) = field.strip_prefix("metadata.")?.split_once('[')?;
            let key = key
                .strip_suffix(']')?
                .trim_matches(|c| c == '\'' || c == '"');
            metadata[map][key].as_str().map(str::to_string)
        }
    }
}

pub(super) fn canary_metrics(metrics: &[RolloutMetric]) -> Value {
    let list = metrics
        .iter()
        .map(|m| {
            let mut metric = Map::new();
            metric.insert("name".into(), json!(m.canary_name));
            let mut template = Map::new();
            template.insert("name".into(), json!(m.metric.template_name));
            if let Some(namespace) = &m.metric.template_namespace {
                template.insert("namespace".into(), json!(namespace));
            }
            metric.insert("templateRef".into(), Value::Object(template));
            if !m.variables.is_empty() {
                metric.insert("templateVariables".into(), json!(m.variables));
            }
            if let Some(range) = &m.metric.range {
                metric.insert("thresholdRange".into(), range.to_value());
            }
            metric.insert(
                "interval".into(),
                json!(m.metric.interval.as_deref().unwrap_or(DEFAULT_INTERVAL)),
            );
            if m.metric.ignores_no_data {
                metric.insert("noData".into(), json!("ignore"));
            }
            Value::Object(metric)
        })
        .collect();
    Value::Array(list)
}

/// The shortest interval among the metrics: a Serin tick checks every metric.
pub(super) fn analysis_interval(metrics: &[RolloutMetric]) -> String {
    metrics
        .iter()
        .filter_map(|m| m.metric.interval.as_deref())
        .filter_map(|text| {
            serin_api::duration::parse_go_duration(text)
                .ok()
                .map(|d| (d, text))
        })
        .min_by_key(|(duration, _)| *duration)
        .map_or(DEFAULT_INTERVAL.to_string(), |(_, text)| text.to_string())
}

/// Failed checks before a rollback: the strictest failureLimit + 1, since Argo failed a metric
/// once its failures exceeded the limit.
pub(super) fn analysis_threshold(
    metrics: &[RolloutMetric],
    base: &str,
    report: &mut Report,
) -> i64 {
    let limits: BTreeSet<i64> = metrics
        .iter()
        .filter_map(|m| m.metric.failure_limit)
        .collect();
    let strictest = limits.first().copied().unwrap_or(0);
    if limits.len() > 1 {
        report.field(
            base,
            format!("the metrics' failureLimits differ ({}); Serin counts the failed checks of all metrics together, so spec.analysis.threshold is the strictest + 1: {}", limits.iter().map(i64::to_string).collect::<Vec<_>>().join(", "), strictest + 1),
        );
    }
    strictest + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrate::tests::{
        CANARY_ROLLOUT, SERVICES, TEMPLATES, background_success_rate, documents, find,
        migrate_files, object_warnings, refusals, warning, without_steps,
    };

    #[test]
    fn a_rollouts_background_analyses_become_canary_metrics_of_converted_metric_templates() {
        // Without steps: with them, the background analysis is Serin's backgroundAnalysis.
        let rollout = without_steps(&background_success_rate(CANARY_ROLLOUT));
        let migration = migrate_files(&[
            ("templates.yaml", TEMPLATES),
            ("services.yaml", SERVICES),
            ("rollout.yaml", &rollout),
        ]);
        let output = documents(&migration);
        let canary = find(&output, "Canary", "shop");
        let analysis = &canary["spec"]["analysis"];
        assert_eq!(analysis["interval"], "30s", "the shortest metric interval");
        // failureLimits 1 and 3: the strictest decides.
        assert_eq!(analysis["threshold"], 2);
        assert!(
            warning(&migration, "spec.strategy.canary")
                .message
                .contains("failureLimits differ (1, 3)")
        );
        assert_eq!(
            analysis["metrics"],
            json!([
                {"name": "errors", "templateRef": {"name": "checks-errors"}, "thresholdRange": {"max": 5}, "interval": "30s"},
                {
                    "name": "success-rate",
                    "templateRef": {"name": "success-rate", "namespace": "shop"},
                    "templateVariables": {"service_name": "shop", "window": "2m"},
                    "thresholdRange": {"min": 0.95},
                    "interval": "1m",
                },
            ])
        );
        let template = find(&output, "MetricTemplate", "success-rate");
        assert_eq!(template["metadata"]["namespace"], "shop");
        let provider = json!({
            "type": "prometheus",
            "address": "http://prometheus.monitoring:9090",
            "insecureSkipVerify": true,
            "headers": {"X-Scope-OrgID": ["shop"]},
        });
        assert_eq!(template["spec"]["provider"], provider);
        assert_eq!(
            template["spec"]["query"],
            "sum(rate(ok{svc=\"{{ variables.service_name }}\"}[{{ variables.window }}])) / sum(rate(all{svc=\"{{ variables.service_name }}\"}[{{ variables.window }}]))"
        );
        let errors = find(&output, "MetricTemplate", "checks-errors");
        assert!(errors["metadata"].get("namespace").is_none());
        assert!(
            warning(&migration, "spec.metrics[0].provider.prometheus.timeout")
                .message
                .contains("5 seconds")
        );
        assert!(
            warning(&migration, "spec.metrics[0].provider.job")
                .message
                .contains("could measure it through a MetricTemplate of type job")
        );
        assert!(
            object_warnings(&migration, "ClusterAnalysisTemplate checks")
                .iter()
                .any(|m| m.contains("written without one"))
        );
        // Serin's validation finds nothing wrong with the Canary.
        assert_eq!(refusals(&migration), Vec::<&crate::migrate::Warning>::new());
    }

    #[test]
    fn args_without_a_serin_equivalent_and_missing_templates_are_warned_about() {
        let rollout = CANARY_ROLLOUT.replace(
            "valueFrom: {fieldRef: {fieldPath: \"metadata.labels['app']\"}}",
            "valueFrom: {podTemplateHashValue: Latest}",
        );
        let migration = migrate_files(&[("rollout.yaml", &rollout)]);
        assert!(
            warning(
                &migration,
                "spec.strategy.canary.steps[3].analysis.templates[0]"
            )
            .message
            .contains("AnalysisTemplate success-rate is not among the files given")
        );
        // With none of its metrics, the analysis step is left out.
        assert!(
            warning(&migration, "spec.strategy.canary.steps[3].analysis")
                .message
                .contains("the step is left out")
        );
        assert!(
            warning(&migration, "spec.strategy.canary.analysis.templates[0]")
                .message
                .contains("ClusterAnalysisTemplate checks")
        );
        let with_templates =
            migrate_files(&[("templates.yaml", TEMPLATES), ("rollout.yaml", &rollout)]);
        let step_canary = find(&documents(&with_templates), "Canary", "shop").clone();
        assert_eq!(
            step_canary["spec"]["analysis"]["steps"][3]["analysis"]["args"][0],
            json!({"name": "service-name", "valueFrom": {"podTemplateHashValue": "Latest"}})
        );
        // An analysis step reads pod template hashes; the interval metrics cannot.
        let rollout = without_steps(&background_success_rate(&rollout)).replace(
            "args: [{name: service-name, value: shop}]",
            "args: [{name: service-name, valueFrom: {podTemplateHashValue: Stable}}]",
        );
        let migration = migrate_files(&[("templates.yaml", TEMPLATES), ("rollout.yaml", &rollout)]);
        assert!(
            warning(
                &migration,
                "spec.strategy.canary.analysis.args[0].valueFrom"
            )
            .message
            .contains("rollouts-pod-template-hash")
        );
        let canary = find(&documents(&migration), "Canary", "shop").clone();
        assert_eq!(
            canary["spec"]["analysis"]["metrics"][1]["templateVariables"],
            json!({"window": "2m"})
        );
    }
}
