//! The primary Deployment, as Flagger builds it from the target: `<target>-primary`, selecting
//! `<label>: <value>-primary`, with the target's pod template (relabelled) and a fresh `flagger-id`
//! annotation so every promotion rolls the pods.

use crate::configs::rename_references;
use serde_json::{Value, json};
use serin_core::revision::ConfigKind;
use std::collections::BTreeSet;

/// The nodeSelector key Flagger scales a DaemonSet to zero with: no node has it, so no pod runs.
pub const SCALE_TO_ZERO: &str = "flagger.app/scale-to-zero";

/// Removes the scale-to-zero key from a pod template's nodeSelector (and the nodeSelector when
/// nothing else is left in it), so a DaemonSet's revision and its primary's template ignore it.
pub fn without_scale_to_zero(template: &mut Value) {
    // `get_mut`, not indexing: indexing a missing key mutably would add `nodeSelector: null`.
    let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(selector) = spec.get_mut("nodeSelector").and_then(Value::as_object_mut) {
        selector.remove(SCALE_TO_ZERO);
        // Removing the key with a merge patch leaves `nodeSelector: {}`, which is no selector.
        if selector.is_empty() {
            spec.remove("nodeSelector");
        }
    }
}

/// The merge patch that scales the DaemonSet `daemon_set` (JSON form) to zero (`to_zero`) or back
/// up, or `None` when it already is: the scale-to-zero key added to its template's nodeSelector, or
/// removed (with the nodeSelector when nothing else is in it, since a merge patch that deletes a key
/// of an absent object would add an empty one and roll the pods).
pub fn daemon_set_scale_patch(daemon_set: &Value, to_zero: bool) -> Option<Value> {
    let selector = &daemon_set["spec"]["template"]["spec"]["nodeSelector"];
    let scaled_to_zero = selector[SCALE_TO_ZERO].is_string();
    if scaled_to_zero == to_zero {
        return None;
    }
    let node_selector = if to_zero {
        json!({ SCALE_TO_ZERO: "true" })
    } else if selector.as_object().is_some_and(|s| s.len() == 1) {
        Value::Null
    } else {
        json!({ SCALE_TO_ZERO: null })
    };
    Some(json!({"spec": {"template": {"spec": {"nodeSelector": node_selector}}}}))
}

/// A DaemonSet as the decision core reads a Deployment: its template without the scale-to-zero
/// key, `replicas` 0 while scaled to zero (else the nodes it should run on, at least 1), and its
/// status counts as a Deployment's (scheduled, updated, ready, available).
pub fn daemon_set_as_deployment(
    daemon_set: &k8s_openapi::api::apps::v1::DaemonSet,
) -> Option<k8s_openapi::api::apps::v1::Deployment> {
    let mut object = serde_json::to_value(daemon_set).ok()?;
    let scaled_to_zero = object["spec"]["template"]["spec"]["nodeSelector"][SCALE_TO_ZERO]
        .as_str()
        .is_some();
    without_scale_to_zero(&mut object["spec"]["template"]);
    let status = object["status"].clone();
    let count = |field: &str| status[field].as_i64().unwrap_or(0);
    let replicas = if scaled_to_zero {
        0
    } else {
        count("desiredNumberScheduled").max(1)
    };
    let mut deployment_status = json!({
        "replicas": count("currentNumberScheduled"),
        "updatedReplicas": count("updatedNumberScheduled"),
        "readyReplicas": count("numberReady"),
        "availableReplicas": count("numberAvailable"),
    });
    if let Some(observed) = status["observedGeneration"].as_i64() {
        deployment_status["observedGeneration"] = json!(observed);
    }
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": object["metadata"],
        "spec": {"replicas": replicas, "selector": object["spec"]["selector"],
                 "template": object["spec"]["template"]},
        "status": deployment_status,
    });
    serde_json::from_value(deployment).ok()
}

/// Whether a target label is copied to the primary: `--include-label-prefix` empty, `*` or a
/// prefix of the key; labels of Flux's toolkit never are.
pub fn label_included(key: &str, prefixes: &[String]) -> bool {
    !key.contains("toolkit.fluxcd.io")
        && (prefixes.is_empty()
            || prefixes
                .iter()
                .any(|p| p == "*" || key.starts_with(p.as_str())))
}

/// The primary Deployment for `target` (JSON form), owned by `owner` (an owner reference), running
/// `template` (see [`template_for`]) and carrying the target labels `label_prefixes` admit.
pub fn primary_from(
    target: &Value,
    label_key: &str,
    label_value: &str,
    owner: &Value,
    template: Value,
    label_prefixes: &[String],
) -> Value {
    let name = format!(
        "{}-primary",
        target["metadata"]["name"].as_str().unwrap_or_default()
    );
    let primary_value = format!("{label_value}-primary");
    let mut labels = target["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.retain(|k, _| label_included(k, label_prefixes));
    labels.insert(label_key.into(), json!(primary_value));
    let mut annotations = target["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    annotations.retain(|k, _| {
        !k.contains("toolkit.fluxcd.io")
            && k != "kubectl.kubernetes.io/last-applied-configuration"
            && !k.starts_with("deployment.kubernetes.io/")
    });
    let spec = &target["spec"];
    let daemon_set = target["kind"] == "DaemonSet";
    let mut primary_spec = json!({
        "selector": {"matchLabels": {label_key: primary_value}},
        "template": template,
    });
    if !daemon_set {
        primary_spec["replicas"] = json!(spec["replicas"].as_i64().filter(|r| *r > 0).unwrap_or(1));
    }
    for field in promoted_fields(target) {
        if !spec[field].is_null() {
            primary_spec[field] = spec[field].clone();
        }
    }
    json!({
        "apiVersion": "apps/v1", "kind": if daemon_set { "DaemonSet" } else { "Deployment" },
        "metadata": {"name": name, "namespace": target["metadata"]["namespace"],
                     "labels": labels, "annotations": annotations, "ownerReferences": [owner]},
        "spec": primary_spec,
    })
}

/// The spec fields besides the template that the primary takes from the target: a Deployment's
/// rollout settings, or a DaemonSet's.
pub fn promoted_fields(target: &Value) -> &'static [&'static str] {
    if target["kind"] == "DaemonSet" {
        &["minReadySeconds", "revisionHistoryLimit", "updateStrategy"]
    } else {
        &[
            "progressDeadlineSeconds",
            "minReadySeconds",
            "revisionHistoryLimit",
            "strategy",
        ]
    }
}

/// The target's pod template with the selector label pointing at the primary, tracked configs
/// renamed to their `-primary` copies, and a new `flagger-id`, which forces a rolling update of the
/// primary on every promotion.
pub fn template_for(
    target_spec: &Value,
    label_key: &str,
    primary_value: &str,
    tracked: &BTreeSet<(ConfigKind, String)>,
) -> Value {
    let mut template = target_spec["template"].clone();
    without_scale_to_zero(&mut template);
    rename_references(&mut template, tracked);
    template["metadata"]["labels"][label_key] = json!(primary_value);
    template["metadata"]["annotations"]["flagger-id"] = json!(uuid::Uuid::new_v4().to_string());
    template
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_daemon_set_scales_to_zero_by_node_selector_and_back_without_a_trace() {
        let plain = json!({"spec": {"template": {"spec": {}}}});
        let down = daemon_set_scale_patch(&plain, true).unwrap();
        assert_eq!(
            down,
            json!({"spec": {"template": {"spec": {"nodeSelector": {SCALE_TO_ZERO: "true"}}}}})
        );
        assert_eq!(daemon_set_scale_patch(&plain, false), None);
        let scaled =
            json!({"spec": {"template": {"spec": {"nodeSelector": {SCALE_TO_ZERO: "true"}}}}});
        assert_eq!(daemon_set_scale_patch(&scaled, true), None);
        assert_eq!(
            daemon_set_scale_patch(&scaled, false).unwrap(),
            json!({"spec": {"template": {"spec": {"nodeSelector": null}}}})
        );
        let pinned = json!({"spec": {"template": {"spec": {"nodeSelector": {
            SCALE_TO_ZERO: "true", "disk": "ssd"}}}}});
        assert_eq!(
            daemon_set_scale_patch(&pinned, false).unwrap(),
            json!({"spec": {"template": {"spec": {"nodeSelector": {SCALE_TO_ZERO: null}}}}})
        );
        let mut template = pinned["spec"]["template"].clone();
        without_scale_to_zero(&mut template);
        assert_eq!(template, json!({"spec": {"nodeSelector": {"disk": "ssd"}}}));
        let mut untouched = json!({"spec": {"containers": []}});
        without_scale_to_zero(&mut untouched);
        assert_eq!(untouched, json!({"spec": {"containers": []}}));
    }

    #[test]
    fn the_primary_selects_its_own_pods_and_keeps_the_targets_template() {
        let target = json!({
            "metadata": {"name": "podinfo", "namespace": "test",
                         "labels": {"app": "podinfo", "kustomize.toolkit.fluxcd.io/name": "x"},
                         "annotations": {"team": "web"}},
            "spec": {"replicas": 0, "minReadySeconds": 3,
                     "selector": {"matchLabels": {"app": "podinfo"}},
                     "template": {"metadata": {"labels": {"app": "podinfo"}},
                                  "spec": {"containers": [{"name": "podinfod", "image": "podinfo:6.0.1"}]}}}
        });
        let template = template_for(&target["spec"], "app", "podinfo-primary", &BTreeSet::new());
        let primary = primary_from(
            &target,
            "app",
            "podinfo",
            &json!({"kind": "Canary"}),
            template,
            &[],
        );
        assert_eq!(primary["metadata"]["name"], "podinfo-primary");
        assert_eq!(
            primary["metadata"]["labels"],
            json!({"app": "podinfo-primary"})
        );
        assert_eq!(primary["metadata"]["annotations"], json!({"team": "web"}));
        assert_eq!(
            primary["spec"]["replicas"], 1,
            "a target scaled to zero still gives one primary pod"
        );
        assert_eq!(primary["spec"]["minReadySeconds"], 3);
        assert_eq!(
            primary["spec"]["selector"]["matchLabels"],
            json!({"app": "podinfo-primary"})
        );
        let template = &primary["spec"]["template"];
        assert_eq!(template["metadata"]["labels"]["app"], "podinfo-primary");
        assert_eq!(template["spec"]["containers"][0]["image"], "podinfo:6.0.1");
        assert!(template["metadata"]["annotations"]["flagger-id"].is_string());
    }
}
