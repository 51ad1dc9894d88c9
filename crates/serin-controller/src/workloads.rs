//! The primary Deployment, as Flagger builds it from the target: `<target>-primary`, selecting
//! `<label>: <value>-primary`, with the target's pod template (relabelled) and a fresh `flagger-id`
//! annotation so every promotion rolls the pods.

use crate::configs::rename_references;
use serde_json::{Value, json};
use serin_core::revision::ConfigKind;
use std::collections::BTreeSet;

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
    let replicas = spec["replicas"].as_i64().filter(|r| *r > 0).unwrap_or(1);
    let mut primary_spec = json!({
        "replicas": replicas,
        "selector": {"matchLabels": {label_key: primary_value}},
        "template": template,
    });
    for field in [
        "progressDeadlineSeconds",
        "minReadySeconds",
        "revisionHistoryLimit",
        "strategy",
    ] {
        if !spec[field].is_null() {
            primary_spec[field] = spec[field].clone();
        }
    }
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": target["metadata"]["namespace"],
                     "labels": labels, "annotations": annotations, "ownerReferences": [owner]},
        "spec": primary_spec,
    })
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
    rename_references(&mut template, tracked);
    template["metadata"]["labels"][label_key] = json!(primary_value);
    template["metadata"]["annotations"]["flagger-id"] = json!(uuid::Uuid::new_v4().to_string());
    template
}

#[cfg(test)]
mod tests {
    use super::*;

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
