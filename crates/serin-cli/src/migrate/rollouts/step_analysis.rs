//! An Argo Rollouts analysis step as a Serin `analysis` step at the same place (and a canary's
//! background analysis as `backgroundAnalysis`, converted the same way): every metric of the
//! templates it names with Argo's fields as written, and its args, dry-run and retention lists
//! merged with those of the templates.

use super::metrics::{AnalysisReference, AnalysisRole, field_of};
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
/// `None` when none of its metrics converts. A background analysis converts the same way.
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
                "no equivalent: Serin creates no AnalysisRun objects (the measurements are kept in the Canary's status.analysisRuns); left out",
            );
        }
    }
    if metrics.is_empty() {
        let what = if reference.role == AnalysisRole::Background {
            "background analysis"
        } else {
            "step"
        };
        report.field(
            path.clone(),
            format!("none of the metrics it runs could be converted (see the warnings about its templates), so the {what} is left out and the release goes on without it"),
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

#[cfg(test)]
mod tests {
    use crate::migrate::tests::{documents, find, migrate_files, migrate_one, refusals, warning};
    use serde_json::{Value, json};

    const EXAMPLE: &str =
        include_str!("../../../../../artifacts/examples/migrate/argo/analysis-step-rollout.yaml");

    /// The problems Serin's own validation finds in a converted Canary.
    fn refused(canary: &Value) -> Vec<serin_api::FieldError> {
        let canary: serin_api::Canary = serde_json::from_value(canary.clone()).unwrap();
        serin_api::validate::validate(&canary)
    }

    /// Warnings about the analysis fields an analysis step now carries over.
    fn analysis_field_warnings(migration: &crate::migrate::Migration) -> Vec<String> {
        let fields = [
            "analysis",
            "dryRun",
            "measurementRetention",
            "count",
            "failureLimit",
            "inconclusiveLimit",
            "consecutiveErrorLimit",
            "successCondition",
            "failureCondition",
            "initialDelay",
            "args",
        ];
        migration
            .warnings
            .iter()
            .filter(|w| {
                let path = w.path.as_deref().unwrap_or_default();
                fields
                    .iter()
                    .any(|f| path.contains(f) || w.message.contains(f))
            })
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn the_example_analysis_step_becomes_a_serin_analysis_step() {
        let migration = migrate_files(&[("analysis-step-rollout.yaml", EXAMPLE)]);
        let output = documents(&migration);
        let canary = find(&output, "Canary", "checkout");
        assert_eq!(
            canary["spec"]["analysis"]["steps"],
            json!([
                {"setWeight": 25},
                {"analysis": {
                    "metrics": [
                        {
                            "name": "order-success",
                            "interval": "45s",
                            "successCondition": "result[0] >= 0.95",
                            "count": 4,
                            "failureLimit": 1,
                            "templateRef": {"name": "order-success", "namespace": "rollouts"},
                        },
                        {
                            "name": "payments-status",
                            "interval": "1m",
                            "successCondition": "result == \"operational\"",
                            "count": 2,
                            "templateRef": {"name": "payments-status", "namespace": "rollouts"},
                        },
                    ],
                    "args": [
                        {"name": "service-name", "value": "checkout.rollouts.svc.cluster.local"},
                        {"name": "tenant-token", "valueFrom": {"secretKeyRef": {"name": "metrics-tenant", "key": "token"}}},
                        {"name": "region", "value": "eu-west"},
                    ],
                    "dryRun": [{"metricName": "payments-status"}],
                    "measurementRetention": [{"metricName": "*", "limit": 20}],
                }},
                {"setWeight": 75},
                {"pause": {"duration": "2m"}},
            ])
        );
        assert!(
            canary["spec"]["analysis"].get("metrics").is_none(),
            "no interval metrics"
        );
        assert_eq!(refused(canary), []);

        // The step's Prometheus metric keeps Argo's query and headers, args placeholders included.
        let success = find(&output, "MetricTemplate", "order-success");
        assert_eq!(
            success["spec"]["provider"],
            json!({
                "type": "prometheus",
                "address": "http://thanos-query.monitoring:9090",
                "headers": {"Authorization": ["Bearer {{args.tenant-token}}"]},
            })
        );
        assert!(
            success["spec"]["query"]
                .as_str()
                .unwrap()
                .contains("service=\"{{args.service-name}}\",code!~\"5..\"")
        );
        let template: serin_api::MetricTemplate = serde_json::from_value(success.clone()).unwrap();
        assert_eq!(serin_api::validate::validate_metric_template(&template), []);
        // The web metric's MetricTemplate, of type web, without a query.
        let status = find(&output, "MetricTemplate", "payments-status");
        assert_eq!(
            status["spec"],
            json!({"provider": {
                "type": "web",
                "address": "http://status.payments.svc.cluster.local/api/v2/components",
                "method": "POST",
                "headers": {"Content-Type": ["application/json"]},
                "body": "{\"component\":\"checkout\",\"region\":\"{{args.region}}\"}",
                "jsonPath": "{$.status}",
                "timeoutSeconds": 10,
            }})
        );
        // The web MetricTemplate is valid as converted.
        assert!(
            !migration
                .warnings
                .iter()
                .any(|w| w.object.contains("payments-status")),
            "{:#?}",
            migration.warnings
        );
        assert_eq!(analysis_field_warnings(&migration), Vec::<String>::new());
    }

    /// The Argo Rollouts documentation's examples of an analysis step and of template args
    /// (docs/features/analysis.md), with values of our own.
    const DOCS_EXAMPLES: &str = "\
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata: {name: success-rate}
spec:
  args: [{name: service-name}]
  metrics:
  - name: success-rate
    successCondition: result >= 0.95
    interval: 60s
    count: 5
    provider:
      prometheus:
        address: http://prometheus.example.com:9090
        query: sum(rate(requests{svc=~\"{{args.service-name}}\",code!~\"5.*\"}[5m])) / sum(rate(requests{svc=~\"{{args.service-name}}\"}[5m]))
---
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata: {name: args-example}
spec:
  args:
  - name: service-name
  - name: stable-hash
  - name: latest-hash
  - name: api-url
    value: http://example/measure
  - name: api-token
    valueFrom: {secretKeyRef: {name: token-secret, key: apiToken}}
  metrics:
  - name: webmetric
    successCondition: result == 'true'
    provider:
      web:
        url: \"{{ args.api-url }}?service={{ args.service-name }}\"
        headers: [{key: Authorization, value: \"Bearer {{ args.api-token }}\"}]
        jsonPath: \"{$.results.ok}\"
---
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: guestbook}
spec:
  replicas: 3
  selector: {matchLabels: {app: guestbook}}
  template:
    metadata: {labels: {app: guestbook}}
    spec: {containers: [{name: guestbook, image: ghcr.io/stefanprodan/podinfo:6.0.0}]}
  strategy:
    canary:
      steps:
      - setWeight: 20
      - pause: {duration: 5m}
      - analysis:
          templates: [{templateName: success-rate}]
          args: [{name: service-name, value: guestbook-svc.default.svc.cluster.local}]
      - analysis:
          templates: [{templateName: args-example}]
          args:
          - name: service-name
            value: guestbook-svc.default.svc.cluster.local
          - name: api-url
            value: http://other-api
          - name: stable-hash
            valueFrom: {podTemplateHashValue: Stable}
          - name: latest-hash
            valueFrom: {podTemplateHashValue: Latest}
";

    #[test]
    fn the_argo_docs_analysis_steps_and_args_carry_over() {
        let migration = migrate_one(DOCS_EXAMPLES);
        let output = documents(&migration);
        let canary = find(&output, "Canary", "guestbook");
        let steps = &canary["spec"]["analysis"]["steps"];
        assert_eq!(
            steps[2],
            json!({"analysis": {
                "metrics": [{
                    "name": "success-rate",
                    "interval": "60s",
                    "successCondition": "result >= 0.95",
                    "count": 5,
                    "templateRef": {"name": "success-rate"},
                }],
                "args": [{"name": "service-name", "value": "guestbook-svc.default.svc.cluster.local"}],
            }})
        );
        // The Rollout's args, overriding the template's default, then the template's own.
        assert_eq!(
            steps[3],
            json!({"analysis": {
                "metrics": [{
                    "name": "webmetric",
                    "successCondition": "result == 'true'",
                    "templateRef": {"name": "args-example"},
                }],
                "args": [
                    {"name": "service-name", "value": "guestbook-svc.default.svc.cluster.local"},
                    {"name": "api-url", "value": "http://other-api"},
                    {"name": "stable-hash", "valueFrom": {"podTemplateHashValue": "Stable"}},
                    {"name": "latest-hash", "valueFrom": {"podTemplateHashValue": "Latest"}},
                    {"name": "api-token", "valueFrom": {"secretKeyRef": {"name": "token-secret", "key": "apiToken"}}},
                ],
            }})
        );
        assert_eq!(refused(canary), []);
        assert_eq!(
            find(&output, "MetricTemplate", "success-rate")["spec"]["query"],
            "sum(rate(requests{svc=~\"{{args.service-name}}\",code!~\"5.*\"}[5m])) / sum(rate(requests{svc=~\"{{args.service-name}}\"}[5m]))"
        );
        assert_eq!(
            find(&output, "MetricTemplate", "args-example")["spec"]["provider"],
            json!({
                "type": "web",
                "address": "{{ args.api-url }}?service={{ args.service-name }}",
                "headers": {"Authorization": ["Bearer {{ args.api-token }}"]},
                "jsonPath": "{$.results.ok}",
            })
        );
        // Argo's example builds the whole URL from an arg; Serin checks such an address once the
        // arg is filled in, so the template converts without a warning.
        assert_eq!(analysis_field_warnings(&migration), Vec::<String>::new());
    }

    const LIMITS: &str = "\
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata: {name: http}
spec:
  args:
  - {name: samples, value: \"3\"}
  - {name: tolerated}
  - {name: region}
  dryRun: [{metricName: latency}]
  measurementRetention: [{metricName: error-rate, limit: 5}]
  metrics:
  - name: error-rate
    interval: 30s
    initialDelay: 1m
    count: \"{{args.samples}}\"
    failureLimit: \"{{ args.tolerated }}\"
    inconclusiveLimit: \"1\"
    consecutiveErrorLimit: 2
    failureCondition: result[0] > 0.01
    provider: {prometheus: {address: http://prometheus:9090, query: \"errors{region='{{args.region}}'}\"}}
  - name: error-count
    provider: {prometheus: {address: http://prometheus:9090, query: sum(errors)}}
  - name: latency
    provider: {prometheus: {address: http://prometheus:9090, query: p99}}
---
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: api, labels: {app: api, region: eu}}
spec:
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec: {containers: [{name: api, image: ghcr.io/stefanprodan/podinfo:6.0.0}]}
  strategy:
    canary:
      steps:
      - setWeight: 10
      - analysis:
          templates: [{templateName: http}]
          args:
          - name: tolerated
            valueFrom: {podTemplateHashValue: Latest}
          - name: region
            valueFrom: {fieldRef: {fieldPath: \"metadata.labels['region']\"}}
          dryRun: [{metricName: error}, {metricName: \"^latency$\"}, {metricName: \"[\"}]
          measurementRetention: [{metricName: \".*\", limit: 15}]
";

    #[test]
    fn counts_read_args_and_metric_name_patterns_become_names() {
        let migration = migrate_one(LIMITS);
        let output = documents(&migration);
        let canary = find(&output, "Canary", "api");
        let analysis = &canary["spec"]["analysis"]["steps"][1]["analysis"];
        let path = "spec.strategy.canary.steps[1].analysis";
        // count from the arg's literal value; failureLimit's arg has none, so it is left out.
        assert_eq!(
            analysis["metrics"][0],
            json!({
                "name": "error-rate",
                "interval": "30s",
                "initialDelay": "1m",
                "failureCondition": "result[0] > 0.01",
                "count": 3,
                "inconclusiveLimit": 1,
                "consecutiveErrorLimit": 2,
                "templateRef": {"name": "http-error-rate"},
            })
        );
        assert!(
            warning(&migration, &format!("{path}.templates[0]"))
                .message
                .contains("failureLimit \"{{ args.tolerated }}\" is the arg tolerated, which has no literal value")
        );
        assert!(
            find(&output, "MetricTemplate", "http-error-rate")["spec"]["query"]
                == "errors{region='{{args.region}}'}"
        );
        // A fieldRef is read from the Rollout now, and said so.
        assert_eq!(
            analysis["args"][1],
            json!({"name": "region", "value": "eu"})
        );
        assert!(
            warning(&migration, &format!("{path}.args[1].valueFrom.fieldRef"))
                .message
                .contains("written as value \"eu\"")
        );
        // `error` matches two metrics in Argo; `^latency$` is one name; `[` is no pattern. The
        // template's own entries come after the step's.
        assert_eq!(
            analysis["dryRun"],
            json!([{"metricName": "error-rate"}, {"metricName": "error-count"}, {"metricName": "latency"}])
        );
        assert!(
            warning(&migration, &format!("{path}.dryRun[0]"))
                .message
                .contains("written as the metrics it matches here, error-rate, error-count")
        );
        assert!(
            !migration
                .warnings
                .iter()
                .any(|w| w.path.as_deref() == Some(&format!("{path}.dryRun[1]")))
        );
        assert!(
            warning(&migration, &format!("{path}.dryRun[2]"))
                .message
                .contains("not a regular expression")
        );
        assert_eq!(
            analysis["measurementRetention"],
            json!([{"metricName": "*", "limit": 15}, {"metricName": "error-rate", "limit": 5}])
        );
        assert_eq!(refused(canary), []);
    }

    #[test]
    fn header_routes_job_metrics_and_the_background_analysis_convert() {
        let rollout = "\
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: api}
spec:
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec: {containers: [{name: api, image: ghcr.io/stefanprodan/podinfo:6.0.0}]}
  strategy:
    canary:
      trafficRouting:
        managedRoutes: [{name: testers}]
        istio: {virtualService: {name: api}}
      analysis:
        templates: [{templateName: smoke}]
        startingStep: 3
        args: [{name: target, value: api}]
        dryRun: [{metricName: smoke}]
        measurementRetention: [{metricName: smoke, limit: 3}]
      steps:
      - setWeight: 10
      - experiment: {templates: [{name: baseline, specRef: stable}]}
      - setHeaderRoute: {name: testers, match: [{headerName: x-tester, headerValue: {prefix: \"qa-\"}}]}
      - analysis: {templates: [{templateName: smoke}], args: [{name: target, value: api}]}
      - setHeaderRoute: {name: testers}
---
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata: {name: smoke}
spec:
  args: [{name: target}]
  metrics:
  - name: smoke
    provider:
      job:
        metadata: {labels: {team: api}, annotations: {purpose: smoke}}
        spec:
          backoffLimit: 1
          template:
            spec:
              restartPolicy: Never
              containers: [{name: t, image: busybox, command: [wget, \"http://{{args.target}}/healthz\"]}]
";
        let migration = migrate_one(rollout);
        let output = documents(&migration);
        let analysis = &find(&output, "Canary", "api")["spec"]["analysis"];
        let smoke = json!({"metrics": [{"name": "smoke", "templateRef": {"name": "smoke"}}], "args": [{"name": "target", "value": "api"}]});
        assert_eq!(
            analysis["steps"],
            json!([
                {"setWeight": 10},
                {"setHeaderRoute": {"name": "testers", "match": [{"headerName": "x-tester", "headerValue": {"prefix": "qa-"}}]}},
                {"analysis": smoke},
                {"setHeaderRoute": {"name": "testers"}},
            ])
        );
        assert_eq!(analysis["managedRoutes"], json!([{"name": "testers"}]));
        let mut background = smoke.clone();
        background["dryRun"] = json!([{"metricName": "smoke"}]);
        background["measurementRetention"] = json!([{"metricName": "smoke", "limit": 3}]);
        // The experiment left out moves Argo's step 3 to index 2, which the warning says.
        background["startingStep"] = json!(2);
        assert_eq!(analysis["backgroundAnalysis"], background);
        assert!(
            warning(&migration, "spec.strategy.canary.analysis.startingStep")
                .message
                .starts_with("written as 2")
        );
        assert_eq!(
            find(&output, "MetricTemplate", "smoke")["spec"],
            json!({"provider": {"type": "job", "job": {
                "metadata": {"labels": {"team": "api"}, "annotations": {"purpose": "smoke"}},
                "spec": {"backoffLimit": 1, "template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "t", "image": "busybox", "command": ["wget", "http://{{args.target}}/healthz"]}],
                }}},
            }}})
        );
        // No warning about the routes, the job metric or the background analysis's fields; the
        // job provider's type only until serin-api has it.
        assert_eq!(refusals(&migration), Vec::<&crate::migrate::Warning>::new());
        let paths: Vec<&str> = migration
            .warnings
            .iter()
            .filter_map(|w| w.path.as_deref())
            .filter(|path| *path != "spec.provider.type")
            .collect();
        assert_eq!(
            paths,
            [
                "spec.strategy.canary.trafficRouting.istio.virtualService",
                "spec.strategy",
                "spec.strategy.canary.steps[1].experiment",
                "spec.strategy.canary.analysis.startingStep",
            ],
            "{:#?}",
            migration.warnings
        );
    }
}
