//! Argo Rollouts' Rollouts: each becomes a Deployment (or keeps its workloadRef Deployment) and a
//! Canary, whose service, strategy and metrics the submodules build.

mod managed_routes;
mod metrics;
mod routing;
mod step_analysis;
mod strategy;

use super::analysis_templates::{Usage, convert_analysis_template};
use super::documents::{
    ARGO_GROUP, DEFAULT_INTERVAL, Document, Emitted, ISTIO_GROUP, SERIN_API_VERSION, is_kind,
    name_of, namespace_of, same_namespace,
};
use super::index::{Index, Replacement};
use super::warnings::{Report, validate_serin_object};
use metrics::{AnalysisRole, analysis_references};
use routing::{canary_service, canary_service_name, routing_references};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use strategy::{blue_green_analysis, canary_analysis};

/// Serin's operator finds a target's pods by the first of these labels in its selector (Flagger's
/// default `-selector-labels`).
const SELECTOR_LABELS: [&str; 3] = ["app", "name", "app.kubernetes.io/name"];

/// The index of `documents`: what each Rollout among them routes through and is scaled by, and
/// every AnalysisTemplate, converted ahead of the Rollouts that use it.
pub(super) fn index(documents: &[Document]) -> Index<'_> {
    let mut index = Index {
        documents,
        replaced: BTreeMap::new(),
        rollout_autoscalers: BTreeSet::new(),
        templates: BTreeMap::new(),
    };
    let mut usages: BTreeMap<usize, Usage> = BTreeMap::new();
    for document in documents {
        if !is_kind(&document.value, ARGO_GROUP, "Rollout") {
            continue;
        }
        let rollout = &document.value;
        let namespace = namespace_of(rollout);
        let service_name = canary_service_name(rollout, &index);
        for (role, kind, name) in routing_references(rollout) {
            let group = if kind == "Service" { "" } else { ISTIO_GROUP };
            let (name, namespace) = match name.split_once('.') {
                Some((name, namespace)) if kind == "VirtualService" => {
                    (name.to_string(), Some(namespace))
                }
                _ => (name, namespace),
            };
            if let Some(found) = index.find(group, kind, &name, namespace) {
                index.replaced.insert(
                    found,
                    Replacement {
                        rollout: name_of(rollout).to_string(),
                        role,
                        service_name: service_name.clone(),
                    },
                );
            }
        }
        for reference in analysis_references(rollout) {
            for template in &reference.templates {
                if let Some(found) = index.find_template(template, namespace) {
                    let usage = usages.entry(found).or_default();
                    let as_step = reference.role == AnalysisRole::Step
                        || (reference.role == AnalysisRole::Background
                            && background_is_step_analysis(rollout));
                    if as_step {
                        usage.steps = true;
                    } else {
                        usage.intervals = true;
                    }
                }
            }
        }
        for (position, candidate) in documents.iter().enumerate() {
            let target = &candidate.value["spec"]["scaleTargetRef"];
            if candidate.value["kind"] == "HorizontalPodAutoscaler"
                && target["kind"] == "Rollout"
                && target["name"].as_str() == Some(name_of(rollout))
                && same_namespace(namespace_of(&candidate.value), namespace)
            {
                index.rollout_autoscalers.insert(position);
            }
        }
    }
    for (position, document) in documents.iter().enumerate() {
        let value = &document.value;
        if is_kind(value, ARGO_GROUP, "AnalysisTemplate")
            || is_kind(value, ARGO_GROUP, "ClusterAnalysisTemplate")
        {
            let usage = usages.get(&position).copied().unwrap_or_default();
            let conversion = convert_analysis_template(value, usage);
            index.templates.insert(position, conversion);
        }
    }
    index
}

/// The Canary's provider for a Rollout's strategy. Without trafficRouting Argo Rollouts routes
/// with Services alone: a blue/green switches the activeService's selector, a canary splits
/// traffic by its pods, and Serin's kubernetes provider does both. Any trafficRouting becomes
/// Istio, the one router the conversion writes the routing of.
pub(super) fn router(strategy: &Value) -> &'static str {
    if !strategy["blueGreen"].is_null() || strategy["canary"]["trafficRouting"].is_null() {
        "kubernetes"
    } else {
        "istio"
    }
}

/// Whether a canary Rollout's background analysis becomes Serin's `backgroundAnalysis` (it has
/// steps, which Serin's background analysis runs alongside) rather than interval metrics.
pub(super) fn background_is_step_analysis(rollout: &Value) -> bool {
    rollout["spec"]["strategy"]["canary"]["steps"]
        .as_array()
        .is_some_and(|steps| !steps.is_empty())
}

/// A Rollout as a Deployment (unless it references one with workloadRef) and a Canary.
pub(super) fn convert_rollout(rollout: &Value, index: &Index, report: &mut Report) -> Vec<Emitted> {
    let spec = &rollout["spec"];
    let name = name_of(rollout);
    let namespace = namespace_of(rollout);
    let strategy = &spec["strategy"];
    let is_blue_green = !strategy["blueGreen"].is_null();
    let mut emitted = Vec::new();

    let mut canary_spec = Map::new();
    canary_spec.insert("provider".into(), json!(router(strategy)));
    let target = match spec["workloadRef"].as_object() {
        Some(workload) => workload_target(rollout, workload, index, report),
        None => {
            let deployment = deployment_from(rollout, report);
            check_selector(&deployment["spec"]["selector"], "spec.selector", report);
            emitted.push(Emitted::Object(deployment));
            name.to_string()
        }
    };
    canary_spec.insert(
        "targetRef".into(),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": target}),
    );
    if let Some(&autoscaler) = index.rollout_autoscalers.iter().find(|&&position| {
        let value = index.value(position);
        value["spec"]["scaleTargetRef"]["name"].as_str() == Some(name)
            && same_namespace(namespace_of(value), namespace)
    }) {
        let value = index.value(autoscaler);
        canary_spec.insert(
            "autoscalerRef".into(),
            json!({
                "apiVersion": value["apiVersion"],
                "kind": "HorizontalPodAutoscaler",
                "name": name_of(value),
            }),
        );
    }
    if let Some(deadline) = spec["progressDeadlineSeconds"].as_i64() {
        canary_spec.insert("progressDeadlineSeconds".into(), json!(deadline));
    }
    if spec["paused"].as_bool() == Some(true) {
        canary_spec.insert("suspend".into(), json!(true));
    }
    rollout_level_warnings(spec, report);

    canary_spec.insert("service".into(), canary_service(rollout, index, report));
    let analysis = if is_blue_green {
        blue_green_analysis(rollout, index, report)
    } else if strategy["canary"].is_object() {
        canary_analysis(rollout, index, report)
    } else {
        report.field(
            "spec.strategy",
            "neither canary nor blueGreen: the Canary gets one step to 100% of the traffic; write its steps",
        );
        json!({"interval": DEFAULT_INTERVAL, "threshold": 1, "steps": [{"setWeight": 100}]})
    };
    canary_spec.insert("analysis".into(), analysis);

    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(name));
    if let Some(namespace) = namespace {
        metadata.insert("namespace".into(), json!(namespace));
    }
    let canary = json!({
        "apiVersion": SERIN_API_VERSION,
        "kind": "Canary",
        "metadata": metadata,
        "spec": canary_spec,
    });
    let before = report.object.clone();
    report.object = format!("{before} (as Canary {name})");
    validate_serin_object(&canary, report);
    report.object = before;
    emitted.push(Emitted::Object(canary));
    emitted
}

/// Rollout fields that neither the Deployment nor the Canary can hold.
fn rollout_level_warnings(spec: &Value, report: &mut Report) {
    if spec["progressDeadlineAbort"].as_bool() == Some(false) {
        report.field(
            "spec.progressDeadlineAbort",
            "false has no equivalent: Serin always rolls back when progressDeadlineSeconds passes; left out",
        );
    }
    for (field, why) in [
        (
            "rollbackWindow",
            "Serin re-analyses every revision that is not the promoted one; going back to the promoted revision ends a release at once",
        ),
        (
            "restartAt",
            "restart the Deployment's pods with kubectl rollout restart",
        ),
        (
            "analysis",
            "Serin creates no AnalysisRuns, so there is no history to limit",
        ),
    ] {
        if !spec[field].is_null() {
            report.field(
                format!("spec.{field}"),
                format!("no equivalent ({why}); left out"),
            );
        }
    }
    // The fields the Deployment and the Canary take, and those reported above.
    let handled = [
        "replicas",
        "selector",
        "template",
        "workloadRef",
        "strategy",
        "minReadySeconds",
        "revisionHistoryLimit",
        "progressDeadlineSeconds",
        "progressDeadlineAbort",
        "paused",
        "rollbackWindow",
        "restartAt",
        "analysis",
    ];
    for field in spec.as_object().into_iter().flat_map(Map::keys) {
        if !handled.contains(&field.as_str()) {
            report.field(format!("spec.{field}"), "no equivalent in Serin; left out");
        }
    }
}

/// The Deployment a Rollout without workloadRef becomes: the same pod template, selector,
/// replicas and labels.
fn deployment_from(rollout: &Value, report: &mut Report) -> Value {
    let spec = &rollout["spec"];
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(name_of(rollout)));
    if let Some(namespace) = namespace_of(rollout) {
        metadata.insert("namespace".into(), json!(namespace));
    }
    if let Some(labels) = rollout["metadata"]["labels"].as_object() {
        metadata.insert("labels".into(), Value::Object(labels.clone()));
    }
    if let Some(annotations) = rollout["metadata"]["annotations"].as_object() {
        let mut kept = Map::new();
        for (key, value) in annotations {
            if key == "kubectl.kubernetes.io/last-applied-configuration" {
                continue;
            }
            if key.contains("argoproj.io") {
                report.field(
                    format!("metadata.annotations.{key}"),
                    "an Argo annotation, meaningless to Serin; left out (alerts go in the Canary's spec.analysis.alerts through an AlertProvider)",
                );
                continue;
            }
            kept.insert(key.clone(), value.clone());
        }
        if !kept.is_empty() {
            metadata.insert("annotations".into(), Value::Object(kept));
        }
    }
    let mut deployment_spec = Map::new();
    for field in [
        "replicas",
        "selector",
        "template",
        "minReadySeconds",
        "revisionHistoryLimit",
        "progressDeadlineSeconds",
    ] {
        if !spec[field].is_null() {
            deployment_spec.insert(field.into(), spec[field].clone());
        }
    }
    let canary = &spec["strategy"]["canary"];
    let mut rolling = Map::new();
    for field in ["maxSurge", "maxUnavailable"] {
        if !canary[field].is_null() {
            rolling.insert(field.into(), canary[field].clone());
            report.field(
                format!("spec.strategy.canary.{field}"),
                "moved to the Deployment's spec.strategy.rollingUpdate: in Serin it paces the primary's rolling update at promotion, not the canary's scaling between steps",
            );
        }
    }
    if !rolling.is_empty() {
        deployment_spec.insert(
            "strategy".into(),
            json!({"type": "RollingUpdate", "rollingUpdate": rolling}),
        );
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": deployment_spec,
    })
}

/// A workloadRef Rollout keeps its Deployment: the Canary targets it.
fn workload_target(
    rollout: &Value,
    workload: &Map<String, Value>,
    index: &Index,
    report: &mut Report,
) -> String {
    let name = workload
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let kind = workload
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("Deployment");
    if kind != "Deployment" {
        report.field(
            "spec.workloadRef.kind",
            format!("{kind} cannot be a Serin target (Deployments only); the Canary targets a Deployment named {name:?}, which you need to create"),
        );
        return name;
    }
    let replicas = rollout["spec"]["replicas"].as_i64().unwrap_or(1);
    let deployment = index
        .find("apps", "Deployment", &name, namespace_of(rollout))
        .map(|position| index.value(position));
    if let Some(deployment) = deployment {
        check_selector(&deployment["spec"]["selector"], "spec.workloadRef", report);
    } else {
        check_selector(&rollout["spec"]["selector"], "spec.selector", report);
    }
    let scaled_down = deployment.is_some_and(|d| d["spec"]["replicas"].as_i64() == Some(0));
    let scale_down = workload.get("scaleDown").and_then(Value::as_str);
    if scaled_down || matches!(scale_down, Some("onsuccess" | "progressively")) {
        report.field(
            "spec.workloadRef.scaleDown",
            format!("no equivalent: Serin releases Deployment {name}'s own pods, which Argo Rollouts scaled to zero; scale it back up before removing the Rollout (kubectl scale deployment {name} --replicas={replicas}) and set replicas: {replicas} in its manifest"),
        );
    }
    name
}

fn check_selector(selector: &Value, path: &str, report: &mut Report) {
    let labels = &selector["matchLabels"];
    if !SELECTOR_LABELS.iter().any(|key| labels[*key].is_string()) {
        report.field(
            path,
            format!("the selector's matchLabels have none of {}, by which Serin tells the target's pods from the primary's; add one (e.g. app: <name>) to the selector and the pod template", SELECTOR_LABELS.join(", ")),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrate::tests::{
        CANARY_ROLLOUT, documents, find, migrate_files, migrate_one, shop, warning,
    };

    #[test]
    fn a_rollout_becomes_a_deployment_with_its_template_selector_replicas_and_labels() {
        let migration = shop();
        let output = documents(&migration);
        let deployment = find(&output, "Deployment", "shop");
        assert_eq!(deployment["apiVersion"], "apps/v1");
        assert_eq!(deployment["metadata"]["namespace"], "shop");
        assert_eq!(
            deployment["metadata"]["labels"],
            json!({"app": "shop", "team": "web"})
        );
        assert_eq!(
            deployment["metadata"]["annotations"],
            json!({"owner": "web-team"})
        );
        assert_eq!(deployment["spec"]["replicas"], 5);
        assert_eq!(deployment["spec"]["revisionHistoryLimit"], 4);
        assert_eq!(
            deployment["spec"]["selector"],
            json!({"matchLabels": {"app": "shop"}})
        );
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"][0]["image"],
            "ghcr.io/stefanprodan/podinfo:6.0.0"
        );
        assert_eq!(
            deployment["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}})
        );
        assert!(
            warning(&migration, "spec.strategy.canary.maxSurge")
                .message
                .contains("rollingUpdate")
        );
        assert!(
            warning(
                &migration,
                "metadata.annotations.notifications.argoproj.io/subscribe.on-rollout-aborted.slack"
            )
            .message
            .contains("AlertProvider")
        );
    }

    const WORKLOAD: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata: {name: api}
spec:
  replicas: 0
  selector: {matchLabels: {component: api}}
  template:
    metadata: {labels: {component: api}}
    spec: {containers: [{name: api, image: ghcr.io/stefanprodan/podinfo:6.0.0, ports: [{containerPort: 9898}]}]}
---
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: api}
spec:
  replicas: 3
  selector: {matchLabels: {component: api}}
  workloadRef: {apiVersion: apps/v1, kind: Deployment, name: api}
  strategy:
    canary:
      maxUnavailable: 0
      trafficRouting:
        nginx: {stableIngress: api}
      steps: [{setWeight: 50}, {pause: {duration: 1h}}]
";

    #[test]
    fn a_workload_ref_rollout_targets_its_deployment() {
        let migration = migrate_one(WORKLOAD);
        let output = documents(&migration);
        assert_eq!(
            output.iter().filter(|d| d["kind"] == "Deployment").count(),
            1,
            "only the referenced Deployment, as written"
        );
        assert!(
            migration
                .yaml
                .starts_with(WORKLOAD.split("---").next().unwrap())
        );
        let canary = find(&output, "Canary", "api");
        assert_eq!(canary["spec"]["targetRef"]["name"], "api");
        assert_eq!(
            canary["spec"]["analysis"]["steps"],
            json!([{"setWeight": 50}, {"pause": {"duration": "1h"}}])
        );
        assert!(
            warning(&migration, "spec.workloadRef.scaleDown")
                .message
                .contains("kubectl scale deployment api --replicas=3")
        );
        assert!(
            warning(&migration, "spec.strategy.canary.maxUnavailable")
                .message
                .starts_with("left out")
        );
        assert!(
            warning(&migration, "spec.strategy.canary.trafficRouting.nginx")
                .message
                .contains("converts Istio routing only")
        );
        // No label Serin's operator selects pods by.
        assert!(
            warning(&migration, "spec.workloadRef")
                .message
                .contains("app, name, app.kubernetes.io/name")
        );
        // No Service named: the container port, said so.
        assert_eq!(canary["spec"]["service"], json!({"port": 9898}));
        assert!(
            warning(&migration, "spec.strategy")
                .message
                .contains("first container port (9898)")
        );
    }

    #[test]
    fn a_rollouts_autoscaler_scales_the_deployment_and_the_canary_names_it() {
        let hpa = "\
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: shop}
spec:
  scaleTargetRef: {apiVersion: argoproj.io/v1alpha1, kind: Rollout, name: shop}
  minReplicas: 2
  maxReplicas: 6
";
        let migration = migrate_files(&[("rollout.yaml", CANARY_ROLLOUT), ("hpa.yaml", hpa)]);
        let output = documents(&migration);
        let autoscaler = find(&output, "HorizontalPodAutoscaler", "shop");
        assert_eq!(
            autoscaler["spec"]["scaleTargetRef"],
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "shop"})
        );
        assert_eq!(autoscaler["spec"]["maxReplicas"], 6);
        assert_eq!(
            find(&output, "Canary", "shop")["spec"]["autoscalerRef"],
            json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": "shop"})
        );
    }
}
