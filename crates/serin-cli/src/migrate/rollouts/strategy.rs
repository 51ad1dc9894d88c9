//! A Rollout's strategy as the Canary's analysis: a canary's steps (analysis steps included), or
//! Serin's blue/green, with the strategy fields that map one to one.

use super::metrics::{
    AnalysisRole, Stage, analysis_interval, analysis_metrics, analysis_references,
    analysis_threshold, canary_metrics,
};
use super::routing::{canary_service_name, traffic_routing_warnings};
use super::step_analysis::step_analysis;
use super::{background_is_step_analysis, managed_routes::managed_route_step, router};
use crate::migrate::index::Index;
use crate::migrate::warnings::Report;
use serde_json::{Map, Value, json};

/// Fields of a strategy that map to the Canary's analysis one to one.
const SAME_NAMED: [&str; 3] = [
    "scaleDownDelaySeconds",
    "abortScaleDownDelaySeconds",
    "dynamicStableScale",
];

/// The analysis of a canary Rollout: its steps, managed routes and background analysis. With
/// steps the background analysis is Serin's `backgroundAnalysis`, converted as an analysis step is;
/// without them (Serin's background analysis needs steps) its metrics are interval metrics.
pub(super) fn canary_analysis(rollout: &Value, index: &Index, report: &mut Report) -> Value {
    let canary = &rollout["spec"]["strategy"]["canary"];
    let base = "spec.strategy.canary";
    let mut analysis = Map::new();
    let with_steps = background_is_step_analysis(rollout);
    let references = analysis_references(rollout);
    let background = references
        .iter()
        .find(|r| r.role == AnalysisRole::Background);
    let interval_references: Vec<_> = references
        .iter()
        .filter(|r| !(with_steps && r.role == AnalysisRole::Background))
        .cloned()
        .collect();
    let metrics = analysis_metrics(
        rollout,
        &interval_references,
        index,
        report,
        Stage::BeforePromotion,
    );
    analysis.insert("interval".into(), json!(analysis_interval(&metrics)));
    analysis.insert(
        "threshold".into(),
        json!(analysis_threshold(&metrics, base, report)),
    );
    let by_pods = canary["trafficRouting"].is_null();
    let gateway_api = router(&rollout["spec"]["strategy"]).starts_with("gatewayapi");

    let mut steps = Vec::new();
    // The Serin index of each Argo step (that of the next step kept, for a step left out), for
    // the background analysis's startingStep.
    let mut serin_index = Vec::new();
    for (i, step) in canary["steps"].as_array().into_iter().flatten().enumerate() {
        serin_index.push(steps.len());
        let path = format!("{base}.steps[{i}]");
        let Some((kind, body)) = step.as_object().and_then(|s| s.iter().next()) else {
            continue;
        };
        match kind.as_str() {
            "setCanaryScale" if by_pods => report.field(
                format!("{path}.setCanaryScale"),
                "ignored by Argo Rollouts without trafficRouting (every canary pod takes traffic), and refused by Serin's canary by replica ratio; left out",
            ),
            "setWeight" | "pause" | "setCanaryScale" => steps.push(json!({ kind: body })),
            "analysis" => {
                let reference = references
                    .iter()
                    .find(|r| r.path == format!("{path}.analysis"));
                if let Some(step) =
                    reference.and_then(|r| step_analysis(rollout, body, r, index, report))
                {
                    steps.push(step);
                }
            }
            "experiment" => report.field(
                format!("{path}.experiment"),
                "no equivalent: Serin runs no extra ReplicaSets; left out",
            ),
            "setHeaderRoute" | "setMirrorRoute" => {
                let at = format!("{path}.{kind}");
                let route = managed_route_step(body, gateway_api, &at, report);
                steps.push(json!({ kind: route }));
            }
            other => report.field(
                format!("{path}.{other}"),
                "no equivalent step in Serin; left out",
            ),
        }
    }
    if steps.is_empty() {
        report.field(
            format!("{base}.steps"),
            "none to convert: Argo Rollouts then moves all traffic at once; the Canary does it in one step (setWeight: 100) and promotes on the next tick",
        );
        steps.push(json!({"setWeight": 100}));
    }
    analysis.insert("steps".into(), Value::Array(steps));

    for (field, value) in canary.as_object().into_iter().flatten() {
        let path = format!("{base}.{field}");
        match field.as_str() {
            "steps" | "analysis" | "canaryService" | "stableService" => {}
            // Without workloadRef they went to the Deployment's rolling update (deployment_from).
            "maxSurge" | "maxUnavailable" if rollout["spec"]["workloadRef"].is_null() => {}
            // They pace the canary by replica ratio as they paced Argo's.
            "maxSurge" | "maxUnavailable" if by_pods => {
                analysis.insert(field.clone(), value.clone());
            }
            "maxSurge" | "maxUnavailable" => report.field(
                path,
                "left out: the Deployment the Rollout references keeps its own spec.strategy.rollingUpdate, which paces the primary's rolling update at promotion in Serin",
            ),
            "trafficRouting" => {
                traffic_routing_warnings(value, &path, report);
                let routes: Vec<Value> = value["managedRoutes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|route| json!({"name": route["name"]}))
                    .collect();
                if !routes.is_empty() {
                    analysis.insert("managedRoutes".into(), Value::Array(routes));
                }
            }
            field if SAME_NAMED.contains(&field) && by_pods => report.field(
                path,
                "needs trafficRouting in Argo Rollouts (ignored or refused without it), and Serin's canary by replica ratio refuses it: every canary pod takes traffic; left out",
            ),
            field if SAME_NAMED.contains(&field) => {
                analysis.insert(field.into(), value.clone());
            }
            "canaryMetadata" | "stableMetadata" => report.field(
                path,
                "no equivalent: Serin labels the generated Services (spec.service.canary / spec.service.primary metadata), not the pods; left out",
            ),
            "scaleDownDelayRevisionLimit" => report.field(
                path,
                "no equivalent: Serin keeps only the primary and the canary Deployment; left out",
            ),
            "antiAffinity" => {
                analysis.insert("antiAffinity".into(), value.clone());
            }
            "pingPong" => report.field(
                path,
                "no equivalent: Serin always promotes by copying the canary's template to the primary; left out",
            ),
            _ => report.field(path, "no equivalent in Serin; left out"),
        }
    }
    if canary["trafficRouting"].is_null() {
        report.field(
            format!("{base}.trafficRouting"),
            "absent: Argo Rollouts split traffic by the ratio of canary to stable pods, and so does the Canary (provider: kubernetes: its apex Service selects both sides' pods, within the Deployment's maxSurge/maxUnavailable)",
        );
    }
    match background {
        Some(reference) if with_steps => {
            let written = &canary["analysis"];
            if let Some(Value::Object(mut background)) =
                step_analysis(rollout, written, reference, index, report)
                    .map(|step| step["analysis"].clone())
            {
                if let Some(start) = written["startingStep"].as_u64() {
                    let start = start as usize;
                    let at = serin_index.get(start).copied().unwrap_or(start);
                    if at != start {
                        report.field(
                            format!("{}.startingStep", reference.path),
                            format!("written as {at}: the steps left out before it move step {start} to index {at} of the Canary's steps"),
                        );
                    }
                    background.insert("startingStep".into(), json!(at));
                }
                analysis.insert("backgroundAnalysis".into(), Value::Object(background));
            }
        }
        Some(reference) if !canary["analysis"]["startingStep"].is_null() => report.field(
            format!("{}.startingStep", reference.path),
            "not converted: a canary without steps has no step to start from; Serin checks the Canary's interval metrics from the start of every release",
        ),
        _ => {}
    }
    if !metrics.is_empty() {
        analysis.insert("metrics".into(), canary_metrics(&metrics));
    }
    Value::Object(analysis)
}

/// The analysis of a blue/green Rollout: Serin's blue/green (iterations without match).
pub(super) fn blue_green_analysis(rollout: &Value, index: &Index, report: &mut Report) -> Value {
    let blue_green = &rollout["spec"]["strategy"]["blueGreen"];
    let base = "spec.strategy.blueGreen";
    let references = analysis_references(rollout);
    let metrics = analysis_metrics(rollout, &references, index, report, Stage::BeforePromotion);
    let mut analysis = Map::new();
    analysis.insert("interval".into(), json!(analysis_interval(&metrics)));
    analysis.insert(
        "threshold".into(),
        json!(analysis_threshold(&metrics, base, report)),
    );
    // The pre-promotion analysis runs its metrics `count` times; without one, a single tick checks
    // the preview before the switch.
    let iterations = metrics
        .iter()
        .filter_map(|m| m.metric.count)
        .max()
        .unwrap_or(1);
    analysis.insert("iterations".into(), json!(iterations));
    report.field(
        base,
        "Argo Rollouts switched the activeService's selector, and so does the Canary (provider: kubernetes switches its apex Service's selector)",
    );
    let auto_promotion = blue_green["autoPromotionEnabled"].as_bool();
    for (field, value) in blue_green.as_object().into_iter().flatten() {
        let path = format!("{base}.{field}");
        match field.as_str() {
            "activeService" | "previewService" | "prePromotionAnalysis" | "postPromotionAnalysis" => {}
            "autoPromotionSeconds" if auto_promotion == Some(false) => report.field(
                path,
                "ignored by Argo Rollouts when autoPromotionEnabled is false; left out",
            ),
            "autoPromotionEnabled" | "autoPromotionSeconds" | "previewReplicaCount" => {
                analysis.insert(field.clone(), value.clone());
            }
            field if SAME_NAMED.contains(&field) && field != "dynamicStableScale" => {
                analysis.insert(field.into(), value.clone());
            }
            "activeMetadata" | "previewMetadata" => report.field(
                path,
                "no equivalent: Serin labels the generated Services (spec.service.primary / spec.service.canary metadata), not the pods; left out",
            ),
            "antiAffinity" => {
                analysis.insert("antiAffinity".into(), value.clone());
            }
            "scaleDownDelayRevisionLimit" => report.field(
                path,
                "no equivalent: Serin keeps only the primary and the canary Deployment; left out",
            ),
            "maxUnavailable" => report.field(
                path,
                "no equivalent: it sized Argo's pod restarts; left out",
            ),
            _ => report.field(path, "no equivalent in Serin; left out"),
        }
    }
    if let Some(preview) = blue_green["previewService"].as_str() {
        let service = canary_service_name(rollout, index);
        report.field(
            format!("{base}.previewService"),
            format!("Serin serves the preview at its Service {service}-canary instead of {preview}; point preview clients and checks there"),
        );
    }
    let mut post = analysis_metrics(rollout, &references, index, report, Stage::AfterSwitch);
    if !post.is_empty() {
        // A check is found by its name across the analysis and its promotion analyses.
        for metric in &mut post {
            if metrics.iter().any(|m| m.canary_name == metric.canary_name) {
                metric.canary_name = format!("post-{}", metric.canary_name);
            }
        }
        let iterations = post
            .iter()
            .filter_map(|m| m.metric.count)
            .max()
            .unwrap_or(1);
        analysis.insert(
            "postPromotionAnalysis".into(),
            json!({"iterations": iterations, "metrics": canary_metrics(&post)}),
        );
    }
    if !metrics.is_empty() {
        analysis.insert("metrics".into(), canary_metrics(&metrics));
    }
    Value::Object(analysis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrate::tests::{
        TEMPLATES, documents, find, migrate_files, object_warnings, refusals, shop, warning,
    };

    #[test]
    fn a_canary_rollout_becomes_a_canary_with_steps() {
        let migration = shop();
        let output = documents(&migration);
        let canary = find(&output, "Canary", "shop");
        assert_eq!(canary["apiVersion"], "serin.dev/v1beta1");
        assert_eq!(
            canary["spec"]["targetRef"],
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "shop"})
        );
        assert_eq!(canary["spec"]["provider"], "istio");
        assert_eq!(canary["spec"]["progressDeadlineSeconds"], 300);
        let analysis = &canary["spec"]["analysis"];
        // The success-rate analysis step stays an analysis step, at the same place.
        assert_eq!(
            analysis["steps"],
            json!([
                {"setCanaryScale": {"weight": 20}},
                {"setWeight": 20},
                {"pause": {"duration": "10m"}},
                {"analysis": {
                    "metrics": [{
                        "name": "success-rate",
                        "interval": "1m",
                        "successCondition": "result[0] >= 0.95",
                        "count": 5,
                        "failureLimit": 1,
                        "templateRef": {"name": "success-rate", "namespace": "shop"},
                    }],
                    "args": [
                        {"name": "service-name", "value": "shop"},
                        {"name": "window", "value": "2m"},
                    ],
                }},
                {"setMirrorRoute": {"name": "mirror", "percentage": 10}},
                {"setWeight": 60},
                {"pause": {}},
            ])
        );
        assert_eq!(analysis["dynamicStableScale"], true);
        assert_eq!(analysis["abortScaleDownDelaySeconds"], 10);
        // The fieldRef arg is read from the Rollout's labels, which the warning says.
        assert!(
            warning(
                &migration,
                "spec.strategy.canary.steps[3].analysis.args[0].valueFrom.fieldRef"
            )
            .message
            .contains("written as value \"shop\"")
        );
        assert!(
            !migration
                .warnings
                .iter()
                .any(|w| w.path.as_deref() == Some("spec.strategy.canary.steps[3].analysis")),
            "{:#?}",
            migration.warnings
        );
        assert!(
            warning(&migration, "spec.strategy.canary.steps[4].experiment")
                .message
                .starts_with("no equivalent")
        );
        // The mirror route step converts as Argo wrote it, its route listed in managedRoutes.
        assert_eq!(analysis["managedRoutes"], json!([{"name": "mirror"}]));
        assert!(
            !migration.warnings.iter().any(|w| w
                .path
                .as_deref()
                .is_some_and(|p| p.contains("setMirrorRoute") || p.contains("managedRoutes"))),
            "{:#?}",
            migration.warnings
        );
        // The background analysis runs alongside the steps, its metrics keeping Argo's fields.
        assert_eq!(
            analysis["backgroundAnalysis"],
            json!({"metrics": [
                {"name": "smoke", "templateRef": {"name": "checks-smoke"}},
                {"name": "errors", "interval": "30s", "failureCondition": "result[0] > 5", "failureLimit": 3, "templateRef": {"name": "checks-errors"}},
            ]})
        );
        assert!(analysis.get("metrics").is_none());
        assert_eq!(refusals(&migration), Vec::<&crate::migrate::Warning>::new());
        assert!(
            warning(&migration, "spec.strategy.canary.canaryMetadata")
                .message
                .starts_with("no equivalent")
        );
        assert!(
            warning(&migration, "spec.progressDeadlineAbort")
                .message
                .contains("always rolls back")
        );
    }

    #[test]
    fn a_blue_green_rollout_becomes_serins_blue_green() {
        let rollout = "\
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: web, namespace: shop}
spec:
  paused: true
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: ghcr.io/stefanprodan/podinfo:6.0.0}]}
  strategy:
    blueGreen:
      activeService: web-active
      previewService: web-preview
      autoPromotionEnabled: false
      autoPromotionSeconds: 60
      previewReplicaCount: 1
      scaleDownDelaySeconds: 45
      abortScaleDownDelaySeconds: 0
      previewMetadata: {labels: {role: preview}}
      prePromotionAnalysis:
        templates: [{templateName: success-rate}]
        args: [{name: service-name, value: web-preview}]
      postPromotionAnalysis:
        templates: [{templateName: success-rate}]
        args: [{name: service-name, value: web-active}]
---
apiVersion: v1
kind: Service
metadata: {name: web-active, namespace: shop}
spec: {selector: {app: web}, ports: [{port: 80, targetPort: 9898}]}
";
        let migration = migrate_files(&[("templates.yaml", TEMPLATES), ("web.yaml", rollout)]);
        let output = documents(&migration);
        let canary = find(&output, "Canary", "web");
        assert_eq!(canary["spec"]["suspend"], true);
        assert_eq!(
            canary["spec"]["service"],
            json!({"name": "web-active", "port": 80, "targetPort": 9898})
        );
        let analysis = &canary["spec"]["analysis"];
        assert_eq!(
            analysis["iterations"], 5,
            "the pre-promotion metric's count"
        );
        assert_eq!(analysis["autoPromotionEnabled"], false);
        assert!(analysis.get("autoPromotionSeconds").is_none());
        assert_eq!(analysis["previewReplicaCount"], 1);
        assert_eq!(analysis["scaleDownDelaySeconds"], 45);
        assert_eq!(analysis["abortScaleDownDelaySeconds"], 0);
        assert_eq!(
            analysis["metrics"][0]["templateVariables"]["service_name"],
            "web-preview"
        );
        assert_eq!(analysis["metrics"].as_array().unwrap().len(), 1);
        // The post-promotion analysis keeps its own metric, its name kept apart from the analysis's.
        let post = &analysis["postPromotionAnalysis"];
        assert_eq!(post["iterations"], 5);
        assert_eq!(post["metrics"][0]["name"], "post-success-rate");
        assert_eq!(
            post["metrics"][0]["templateVariables"]["service_name"],
            "web-active"
        );
        assert_eq!(canary["spec"]["provider"], "kubernetes");
        let base = "spec.strategy.blueGreen";
        assert!(
            warning(&migration, base)
                .message
                .contains("provider: kubernetes")
        );
        assert!(
            warning(&migration, &format!("{base}.previewService"))
                .message
                .contains("web-active-canary instead of web-preview")
        );
        assert!(
            warning(&migration, &format!("{base}.autoPromotionSeconds"))
                .message
                .contains("ignored by Argo")
        );
        assert!(
            warning(&migration, &format!("{base}.previewMetadata"))
                .message
                .starts_with("no equivalent")
        );
        assert!(
            object_warnings(&migration, "Service web-active")[0].contains("Canary's apex Service")
        );
        assert_eq!(refusals(&migration), Vec::<&crate::migrate::Warning>::new());
    }
}
