//! Flagger's objects: `v1beta1` ones keep their text with the apiVersion line rewritten, `v1alpha3`
//! Canaries are converted field by field into today's spelling.

use super::documents::{Document, Emitted, Outcome, SERIN_API_VERSION};
use super::warnings::{Report, validate_serin_object};
use serde_json::{Map, Value, json};

pub(super) fn convert_flagger(
    document: &Document,
    kind: &str,
    version: &str,
    report: &mut Report,
    emitted: &mut Vec<Emitted>,
) -> Outcome {
    let legacy_canary = kind == "Canary" && version != "flagger.app/v1beta1";
    if !["Canary", "MetricTemplate", "AlertProvider"].contains(&kind) {
        report.object_warning(format!(
            "Flagger has no kind {kind:?} that Serin knows; left unchanged"
        ));
        emitted.push(Emitted::Text(document.text.clone()));
        return Outcome::PassedThrough;
    }
    if !legacy_canary && let Some(text) = rewrite_api_version(&document.text) {
        // The rewritten text is what the user applies, so it is what gets validated.
        match serde_saphyr::from_str::<Value>(&text) {
            Ok(value) if value["apiVersion"] == SERIN_API_VERSION => {
                validate_serin_object(&value, report);
                emitted.push(Emitted::Text(text));
                return Outcome::Rewritten;
            }
            _ => {}
        }
    }
    // A legacy Canary, or one whose apiVersion is not on a line of its own (flow style, JSON).
    let mut value = document.value.clone();
    if legacy_canary {
        convert_legacy_canary(&mut value, report);
    }
    value["apiVersion"] = json!(SERIN_API_VERSION);
    if let Some(fields) = value.as_object_mut() {
        fields.remove("status");
    }
    validate_serin_object(&value, report);
    emitted.push(Emitted::Object(value));
    Outcome::Converted
}

/// The document with its top-level `apiVersion: flagger.app/...` line pointing at Serin's group;
/// `None` when there is no such line.
fn rewrite_api_version(text: &str) -> Option<String> {
    let mut rewritten = String::with_capacity(text.len());
    let mut done = false;
    for line in text.split_inclusive('\n') {
        if !done
            && line.starts_with("apiVersion:")
            && let Some(start) = line.find("flagger.app/")
        {
            let length = line[start..]
                .find(|c: char| c == '"' || c == '\'' || c.is_whitespace())
                .unwrap_or(line.len() - start);
            rewritten.push_str(&line[..start]);
            rewritten.push_str(SERIN_API_VERSION);
            rewritten.push_str(&line[start + length..]);
            done = true;
        } else {
            rewritten.push_str(line);
        }
    }
    done.then_some(rewritten)
}

/// Flagger v1alpha3 (2019) to Serin: `canaryAnalysis` becomes `analysis`, `service.appendHeaders`
/// becomes `service.headers.request.add`, and metrics get their current names and a thresholdRange
/// for their single-number threshold.
fn convert_legacy_canary(canary: &mut Value, report: &mut Report) {
    let Some(spec) = canary["spec"].as_object_mut() else {
        return;
    };
    if spec.contains_key("canaryAnalysis") {
        if spec.contains_key("analysis") {
            spec.remove("canaryAnalysis");
            report.field(
                "spec.canaryAnalysis",
                "left out: spec.analysis is set too, and it is the one Flagger used",
            );
        } else {
            rename_key(spec, "canaryAnalysis", "analysis");
        }
    }
    if let Some(service) = spec.get_mut("service").and_then(Value::as_object_mut) {
        move_append_headers(service, report);
    }
    if let Some(scaler) = spec.get_mut("autoscalerRef").and_then(Value::as_object_mut)
        && let Some(version) = scaler.get("apiVersion").and_then(Value::as_str)
        && version.starts_with("autoscaling/v2beta")
    {
        report.field(
            "spec.autoscalerRef.apiVersion",
            format!("{version} is served by no current Kubernetes; written as autoscaling/v2, so convert the HorizontalPodAutoscaler itself to autoscaling/v2 too"),
        );
        scaler.insert("apiVersion".into(), json!("autoscaling/v2"));
    }
    for (field, path) in [
        ("service", "spec.service.match"),
        ("analysis", "spec.analysis.match"),
    ] {
        let matches = spec
            .get_mut(field)
            .and_then(|section| section.get_mut("match"))
            .and_then(Value::as_array_mut);
        for (i, condition) in matches.into_iter().flatten().enumerate() {
            if let Some(fields) = condition.as_object_mut()
                && fields.remove("appendHeaders").is_some()
            {
                report.field(
                    format!("{path}[{i}].appendHeaders"),
                    "not a field of an HTTP match (Flagger ignored it here); left out. Headers to add to routed requests go in spec.service.headers.request.add",
                );
            }
        }
    }
    let metrics = spec
        .get_mut("analysis")
        .and_then(|analysis| analysis.get_mut("metrics"))
        .and_then(Value::as_array_mut);
    for metric in metrics.into_iter().flatten() {
        if let Some(metric) = metric.as_object_mut() {
            convert_legacy_metric(metric);
        }
    }
}

/// `service.appendHeaders` (Flagger, March 2019) is what `service.headers.request.add` replaced.
fn move_append_headers(service: &mut Map<String, Value>, report: &mut Report) {
    let Some(Value::Object(append)) = service.remove("appendHeaders") else {
        return;
    };
    let headers = service
        .entry("headers")
        .or_insert_with(|| json!({}))
        .as_object_mut();
    let Some(headers) = headers else {
        return;
    };
    let request = headers.entry("request").or_insert_with(|| json!({}));
    let Some(request) = request.as_object_mut() else {
        return;
    };
    let add = request.entry("add").or_insert_with(|| json!({}));
    let Some(add) = add.as_object_mut() else {
        return;
    };
    for (name, value) in append {
        if add.contains_key(&name) {
            report.field(
                format!("spec.service.appendHeaders.{name}"),
                "also set in spec.service.headers.request.add, whose value is kept",
            );
        } else {
            // Header values are strings in Istio's API; YAML may have read `10` as a number.
            let text = match value {
                Value::String(text) => text,
                other => other.to_string(),
            };
            add.insert(name, json!(text));
        }
    }
}

/// One v1alpha3 metric in today's spelling. The old Istio names ran the same queries as today's
/// builtins; their `threshold` was the minimum success rate in percent, and the maximum P99 in
/// milliseconds even for the histogram named in seconds (Flagger converted the result to ms).
fn convert_legacy_metric(metric: &mut Map<String, Value>) {
    let name = metric
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let renamed = match name {
        "istio_requests_total" => Some("request-success-rate"),
        "istio_request_duration_seconds_bucket" => Some("request-duration"),
        _ => None,
    };
    if let Some(renamed) = renamed {
        metric.insert("name".into(), json!(renamed));
    }
    let bound = match metric.get("name").and_then(Value::as_str) {
        Some("request-success-rate") => "min",
        // request-duration, and inline queries, which failed when the value was above threshold.
        _ => "max",
    };
    if metric.contains_key("thresholdRange") {
        return;
    }
    if let Some(threshold) = metric.get("threshold").cloned() {
        replace_key(
            metric,
            "threshold",
            "thresholdRange",
            json!({ bound: threshold }),
        );
    }
}

/// Renames a key in place, keeping the order of the map.
fn rename_key(map: &mut Map<String, Value>, from: &str, to: &str) {
    if let Some(value) = map.get(from).cloned() {
        replace_key(map, from, to, value);
    }
}

/// Replaces the entry `from` with `to: value` at the same position.
fn replace_key(map: &mut Map<String, Value>, from: &str, to: &str, value: Value) {
    let entries = std::mem::take(map);
    for (key, old) in entries {
        if key == from {
            map.insert(to.to_string(), value.clone());
        } else if key != to {
            map.insert(key, old);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrate::tests::{FLAGGER_CANARY, documents, migrate_one, object_warnings, warning};

    #[test]
    fn flagger_v1beta1_keeps_everything_but_the_api_group() {
        let migration = migrate_one(FLAGGER_CANARY);
        assert_eq!(
            migration.yaml,
            FLAGGER_CANARY.replace("flagger.app/v1beta1", "serin.dev/v1beta1")
        );
        assert_eq!(migration.warnings, vec![]);
        assert_eq!(migration.converted, 1);
    }

    #[test]
    fn flagger_v1beta1_fields_serin_refuses_are_warned_about_and_kept() {
        let text = FLAGGER_CANARY.replace("spec:\n", "spec:\n  provider: linkerd\n");
        let migration = migrate_one(&text);
        assert!(migration.yaml.contains("provider: linkerd"));
        let refused = warning(&migration, "spec.provider");
        assert_eq!(refused.object, "Canary podinfo");
        assert!(
            refused
                .message
                .starts_with("Serin refuses this: \"linkerd\" is not supported yet"),
            "{refused}"
        );
    }

    #[test]
    fn flagger_metric_templates_and_alert_providers_are_rewritten_and_validated() {
        let migration = migrate_one(
            "\
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {name: errors}
spec:
  provider: {type: externalmetrics, address: http://keda-operator-metrics-apiserver.keda:8080}
  query: s0-prometheus-errors
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {name: graphite-errors}
spec:
  provider: {type: graphite, address: http://graphite.monitoring, secretRef: {name: graphite-auth}}
  query: target=sumSeries(app.{{ target }}.errors)&from=-5min
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {name: datadog-errors}
spec:
  provider: {type: datadog, secretRef: {name: datadog}}
  query: avg:errors{service:{{ target }}}
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {name: splunk-errors}
spec:
  provider: {type: splunk, address: https://api.us1.signalfx.com, secretRef: {name: splunk}}
  query: data('errors', filter=filter('service', '{{ target }}')).sum().publish()
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {name: cloudwatch-errors}
spec:
  provider: {type: cloudwatch, region: ap-northeast-1}
  query: '[{\"Id\": \"e1\", \"Expression\": \"m1\"}]'
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {name: keptn-errors}
spec:
  provider: {type: keptn}
  query: keptnmetric/{{ namespace }}/errors
---
apiVersion: \"flagger.app/v1beta1\"
kind: AlertProvider
metadata: {name: on-call}
spec: {type: slack, secretRef: {name: slack-url}}
",
        );
        assert!(
            migration
                .yaml
                .contains("apiVersion: serin.dev/v1beta1\nkind: MetricTemplate")
        );
        assert!(
            migration
                .yaml
                .contains("apiVersion: \"serin.dev/v1beta1\"\nkind: AlertProvider")
        );
        let provider = warning(&migration, "spec.provider.type");
        assert_eq!(provider.object, "MetricTemplate errors");
        assert!(provider.message.contains("externalmetrics"), "{provider}");
        assert_eq!(migration.warnings.len(), 1, "{:#?}", migration.warnings);
    }

    #[test]
    fn flagger_objects_without_an_apiversion_line_are_converted_structurally() {
        let migration = migrate_one(
            r#"{"apiVersion": "flagger.app/v1beta1", "kind": "AlertProvider", "metadata": {"name": "chat"}, "spec": {"type": "msteams", "address": "https://chat.example.com/hook"}}"#,
        );
        let output = documents(&migration);
        assert_eq!(output[0]["apiVersion"], "serin.dev/v1beta1");
        assert_eq!(output[0]["spec"]["type"], "msteams");
    }

    #[test]
    fn unknown_flagger_kinds_pass_through_with_a_warning() {
        let text = "apiVersion: flagger.app/v1beta1\nkind: Gate\nmetadata: {name: x}\n";
        let migration = migrate_one(text);
        assert_eq!(migration.yaml, text);
        assert_eq!(
            object_warnings(&migration, "Gate x"),
            ["Flagger has no kind \"Gate\" that Serin knows; left unchanged"]
        );
    }

    const LEGACY_CANARY: &str = "\
apiVersion: flagger.app/v1alpha3
kind: Canary
metadata:
  name: podinfo
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: podinfo}
  service:
    port: 9898
    appendHeaders:
      x-envoy-upstream-rq-timeout-ms: 15000
      x-envoy-max-retries: \"10\"
  canaryAnalysis:
    interval: 1m
    threshold: 10
    maxWeight: 50
    stepWeight: 5
    metrics:
    - name: istio_requests_total
      threshold: 99
      interval: 1m
    - name: istio_request_duration_seconds_bucket
      threshold: 500
      interval: 30s
    - name: not-found-percentage
      threshold: 5
      query: sum(rate(istio_requests_total{response_code=\"404\"}[1m]))
  progressDeadlineSeconds: 60
";

    #[test]
    fn flagger_v1alpha3_canary_analysis_becomes_analysis_in_place() {
        let migration = migrate_one(LEGACY_CANARY);
        let canary = &documents(&migration)[0];
        assert_eq!(canary["apiVersion"], "serin.dev/v1beta1");
        let keys: Vec<&String> = canary["spec"].as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "targetRef",
                "service",
                "analysis",
                "progressDeadlineSeconds"
            ]
        );
        assert_eq!(canary["spec"]["analysis"]["stepWeight"], 5);
        assert_eq!(migration.warnings, vec![], "no comments, nothing lost");
    }

    #[test]
    fn flagger_v1alpha3_append_headers_become_request_header_additions() {
        let migration = migrate_one(LEGACY_CANARY);
        let service = &documents(&migration)[0]["spec"]["service"];
        assert!(service.get("appendHeaders").is_none());
        assert_eq!(
            service["headers"],
            json!({"request": {"add": {
                "x-envoy-upstream-rq-timeout-ms": "15000",
                "x-envoy-max-retries": "10",
            }}})
        );
    }

    #[test]
    fn flagger_v1alpha3_append_headers_do_not_override_header_operations() {
        let text = LEGACY_CANARY.replace(
            "    port: 9898\n",
            "    port: 9898\n    headers:\n      request:\n        add: {x-envoy-max-retries: \"3\"}\n",
        );
        let migration = migrate_one(&text);
        let add = &documents(&migration)[0]["spec"]["service"]["headers"]["request"]["add"];
        assert_eq!(add["x-envoy-max-retries"], "3");
        assert_eq!(add["x-envoy-upstream-rq-timeout-ms"], "15000");
        let conflict = warning(&migration, "spec.service.appendHeaders.x-envoy-max-retries");
        assert!(
            conflict
                .message
                .contains("headers.request.add, whose value is kept")
        );
    }

    #[test]
    fn flagger_v1alpha3_metrics_get_todays_names_and_threshold_ranges() {
        let migration = migrate_one(LEGACY_CANARY);
        let metrics = &documents(&migration)[0]["spec"]["analysis"]["metrics"];
        assert_eq!(
            metrics[0],
            json!({"name": "request-success-rate", "thresholdRange": {"min": 99}, "interval": "1m"})
        );
        // The P99 threshold was milliseconds already, though the histogram was in seconds.
        assert_eq!(
            metrics[1],
            json!({"name": "request-duration", "thresholdRange": {"max": 500}, "interval": "30s"})
        );
        // An inline query failed above its threshold.
        assert_eq!(metrics[2]["thresholdRange"], json!({"max": 5}));
        assert!(metrics[2].get("threshold").is_none());
    }

    #[test]
    fn flagger_v1alpha3_comments_are_reported_lost_once() {
        let text = LEGACY_CANARY
            .replace("  service:\n", "  # the ClusterIP services\n  service:\n")
            .replace(
                "interval: 1m\n    threshold",
                "interval: 1m # a tick\n    threshold",
            );
        let migration = migrate_one(&text);
        assert_eq!(
            object_warnings(&migration, "Canary podinfo"),
            ["its comments were not kept: it was converted field by field, not rewritten in place"]
        );
    }

    #[test]
    fn flagger_v1alpha3_append_headers_in_a_match_are_dropped_with_a_warning() {
        let text = LEGACY_CANARY.replace(
            "    stepWeight: 5\n",
            "    stepWeight: 5\n    match:\n    - headers: {x-canary: {exact: insider}}\n      appendHeaders: {x-debug: \"1\"}\n",
        );
        let migration = migrate_one(&text);
        let canary = &documents(&migration)[0];
        assert_eq!(
            canary["spec"]["analysis"]["match"],
            json!([{"headers": {"x-canary": {"exact": "insider"}}}])
        );
        let dropped = warning(&migration, "spec.analysis.match[0].appendHeaders");
        assert!(dropped.message.contains("not a field of an HTTP match"));
    }

    #[test]
    fn flagger_v1alpha3_with_both_spellings_keeps_analysis() {
        let text = LEGACY_CANARY.replace(
            "  progressDeadlineSeconds: 60\n",
            "  analysis: {interval: 30s, iterations: 5}\n",
        );
        let migration = migrate_one(&text);
        let analysis = &documents(&migration)[0]["spec"]["analysis"];
        assert_eq!(analysis["iterations"], 5);
        assert!(
            warning(&migration, "spec.canaryAnalysis")
                .message
                .starts_with("left out")
        );
    }

    #[test]
    fn flagger_v1alpha3_beta_autoscaler_references_become_autoscaling_v2() {
        let text = LEGACY_CANARY.replace(
            "  service:\n",
            "  autoscalerRef: {apiVersion: autoscaling/v2beta1, kind: HorizontalPodAutoscaler, name: podinfo}\n  service:\n",
        );
        let migration = migrate_one(&text);
        let canary = &documents(&migration)[0];
        assert_eq!(
            canary["spec"]["autoscalerRef"]["apiVersion"],
            "autoscaling/v2"
        );
        assert!(
            warning(&migration, "spec.autoscalerRef.apiVersion")
                .message
                .contains("convert the HorizontalPodAutoscaler itself")
        );
    }

    #[test]
    fn flagger_v1alpha3_problems_serin_refuses_are_warnings() {
        let text = LEGACY_CANARY.replace("  service:\n", "  provider: appmesh\n  service:\n");
        let migration = migrate_one(&text);
        assert!(
            warning(&migration, "spec.provider")
                .message
                .starts_with("Serin refuses this")
        );
    }
}
