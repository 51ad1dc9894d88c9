//! The primary Deployment, as Flagger builds it from the target: `<target>-primary`, selecting
//! `<label>: <value>-primary`, with the target's pod template (relabelled) and a fresh `flagger-id`
//! annotation so every promotion rolls the pods.

use crate::configs::rename_references;
use serde_json::{Value, json};
use serin_core::revision::ConfigKind;
use serin_router::kubernetes::APEX_LABEL;
use std::collections::BTreeSet;

// Re-exported so callers that reach the DaemonSet helpers through `workloads` keep compiling.
pub use crate::daemon_sets::{
    SCALE_TO_ZERO, daemon_set_as_deployment, daemon_set_scale_patch, without_scale_to_zero,
};

/// The node topology the canary's anti-affinity to the primary's pods is kept over.
const HOSTNAME: &str = "kubernetes.io/hostname";
const REQUIRED: &str = "requiredDuringSchedulingIgnoredDuringExecution";
const PREFERRED: &str = "preferredDuringSchedulingIgnoredDuringExecution";

/// Whether `term` (a PodAffinityTerm) is the one Serin adds: the primary's pods, per node.
fn is_stable_term(term: &Value, key: &str, primary_value: &str) -> bool {
    term["topologyKey"] == HOSTNAME
        && term["labelSelector"] == json!({"matchLabels": { key: primary_value }})
}

/// Takes the anti-affinity to the primary's pods that Serin adds out of a pod spec (JSON), with the
/// lists and objects it leaves empty: the primary never gets it, and it is not part of a revision.
pub fn without_stable_anti_affinity(pod_spec: &mut Value, key: &str, primary_value: &str) {
    let Some(affinity) = pod_spec.get_mut("affinity").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(anti) = affinity
        .get_mut("podAntiAffinity")
        .and_then(Value::as_object_mut)
    {
        if let Some(terms) = anti.get_mut(REQUIRED).and_then(Value::as_array_mut) {
            terms.retain(|t| !is_stable_term(t, key, primary_value));
        }
        if let Some(terms) = anti.get_mut(PREFERRED).and_then(Value::as_array_mut) {
            terms.retain(|t| !is_stable_term(&t["podAffinityTerm"], key, primary_value));
        }
        anti.retain(|_, v| v.as_array().is_none_or(|a| !a.is_empty()));
        if anti.is_empty() {
            affinity.remove("podAntiAffinity");
        }
    }
    if affinity.is_empty()
        && let Some(spec) = pod_spec.as_object_mut()
    {
        spec.remove("affinity");
    }
}

/// Adds the anti-affinity to the primary's pods that `anti` asks for to a pod spec (JSON).
pub fn with_stable_anti_affinity(
    pod_spec: &mut Value,
    anti: &serin_api::AntiAffinity,
    key: &str,
    primary_value: &str,
) {
    let term =
        json!({"labelSelector": {"matchLabels": { key: primary_value }}, "topologyKey": HOSTNAME});
    let (list, entry) = match &anti.preferred_during_scheduling_ignored_during_execution {
        Some(preferred) => (
            PREFERRED,
            json!({"weight": preferred.weight, "podAffinityTerm": term}),
        ),
        None => (REQUIRED, term),
    };
    let terms = &mut pod_spec["affinity"]["podAntiAffinity"][list];
    match terms.as_array_mut() {
        Some(terms) => terms.push(entry),
        None => *terms = json!([entry]),
    }
}

/// The JSON merge patch (RFC 7386) that turns `old` into `new`: removed keys become `null`.
pub fn merge_patch(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            let mut patch = serde_json::Map::new();
            for key in old.keys().filter(|k| !new.contains_key(*k)) {
                patch.insert(key.clone(), Value::Null);
            }
            for (key, value) in new {
                match old.get(key) {
                    Some(current) if current == value => {}
                    Some(current) => {
                        patch.insert(key.clone(), merge_patch(current, value));
                    }
                    None => {
                        patch.insert(key.clone(), value.clone());
                    }
                }
            }
            Value::Object(patch)
        }
        _ => new.clone(),
    }
}

/// The merge patch that brings `workload`'s pod template to what Serin adds to it: [`APEX_LABEL`]
/// for a canary by replica ratio (`apex`), and the anti-affinity to the primary's pods when `anti`
/// asks for one (and none otherwise; the primary is never given one). `None` when the template
/// already is so.
pub fn template_patch(
    target: &Value,
    apex: Option<&str>,
    anti: Option<&serin_api::AntiAffinity>,
    key: &str,
    primary_value: &str,
) -> Option<Value> {
    let current = &target["spec"]["template"];
    let mut wanted = current.clone();
    if let Some(apex) = apex {
        wanted["metadata"]["labels"][APEX_LABEL] = json!(apex);
    }
    if wanted["spec"].is_object() {
        without_stable_anti_affinity(&mut wanted["spec"], key, primary_value);
        if let Some(anti) = anti {
            with_stable_anti_affinity(&mut wanted["spec"], anti, key, primary_value);
        }
    }
    (wanted != *current).then(|| json!({"spec": {"template": merge_patch(current, &wanted)}}))
}

/// The target Deployment as the decision core reads it: without what Serin adds to its pod
/// template ([`APEX_LABEL`], the anti-affinity to the primary's pods), which is not a revision.
pub fn as_released(
    deployment: k8s_openapi::api::apps::v1::Deployment,
    key: &str,
    primary_value: &str,
) -> k8s_openapi::api::apps::v1::Deployment {
    let template = deployment.spec.as_ref().map(|s| &s.template);
    let labelled = template
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.as_ref())
        .is_some_and(|labels| labels.contains_key(APEX_LABEL));
    let anti_affinity = template
        .and_then(|t| t.spec.as_ref())
        .and_then(|s| s.affinity.as_ref())
        .is_some_and(|a| a.pod_anti_affinity.is_some());
    if !labelled && !anti_affinity {
        return deployment;
    }
    let Ok(mut object) = serde_json::to_value(&deployment) else {
        return deployment;
    };
    let template = &mut object["spec"]["template"];
    if let Some(labels) = template
        .get_mut("metadata")
        .and_then(|m| m.get_mut("labels"))
        .and_then(Value::as_object_mut)
    {
        labels.remove(APEX_LABEL);
    }
    if let Some(spec) = template.get_mut("spec") {
        without_stable_anti_affinity(spec, key, primary_value);
    }
    serde_json::from_value(object).unwrap_or(deployment)
}

/// The revision of a target Deployment as the operator records it in `lastAppliedSpec`: the hash of
/// its pod template without what Serin adds to it, reading its selector label among
/// `selector_labels`.
pub fn released_revision(
    deployment: k8s_openapi::api::apps::v1::Deployment,
    selector_labels: &[&str],
) -> Option<String> {
    let object = serde_json::to_value(&deployment).ok()?;
    let deployment = match serin_router::services::selector_label(&object, selector_labels) {
        Ok((key, value)) => as_released(deployment, &key, &format!("{value}-primary")),
        Err(_) => deployment,
    };
    let template = &deployment.spec.as_ref()?.template;
    Some(serin_core::revision::pod_template_hash(template))
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
/// renamed to their `-primary` copies, no anti-affinity to the primary's own pods, and a new `flagger-id`, which forces a rolling update of the
/// primary on every promotion.
pub fn template_for(
    target_spec: &Value,
    label_key: &str,
    primary_value: &str,
    tracked: &BTreeSet<(ConfigKind, String)>,
) -> Value {
    let mut template = target_spec["template"].clone();
    without_scale_to_zero(&mut template);
    if let Some(spec) = template.get_mut("spec") {
        without_stable_anti_affinity(spec, label_key, primary_value);
    }
    rename_references(&mut template, tracked);
    template["metadata"]["labels"][label_key] = json!(primary_value);
    template["metadata"]["annotations"]["flagger-id"] = json!(uuid::Uuid::new_v4().to_string());
    template
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the API server does with a JSON merge patch (RFC 7386).
    fn apply_merge_patch(target: &mut Value, patch: &Value) {
        match patch.as_object() {
            Some(fields) => {
                if !target.is_object() {
                    *target = json!({});
                }
                for (key, value) in fields {
                    if value.is_null() {
                        target.as_object_mut().unwrap().remove(key);
                    } else {
                        apply_merge_patch(&mut target[key], value);
                    }
                }
            }
            None => *target = patch.clone(),
        }
    }

    fn podinfo(affinity: Value) -> Value {
        let mut target = json!({"spec": {"template": {"metadata": {"labels": {"app": "podinfo"}},
            "spec": {"containers": [{"name": "podinfod"}]}}}});
        if !affinity.is_null() {
            target["spec"]["template"]["spec"]["affinity"] = affinity;
        }
        target
    }

    #[test]
    fn the_target_avoids_the_primarys_nodes_and_the_primary_never_avoids_itself() {
        let required: serin_api::AntiAffinity =
            serde_json::from_value(json!({"requiredDuringSchedulingIgnoredDuringExecution": {}}))
                .unwrap();
        let zone = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}});
        let target = podinfo(zone.clone());
        let patch = template_patch(
            &target,
            Some("podinfo"),
            Some(&required),
            "app",
            "podinfo-primary",
        )
        .expect("a patch");
        assert_eq!(
            patch,
            json!({"spec": {"template": {
                "metadata": {"labels": {APEX_LABEL: "podinfo"}},
                "spec": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "podinfo-primary"}}, "topologyKey": HOSTNAME}]}}}}}})
        );
        let mut patched = target.clone();
        apply_merge_patch(&mut patched, &patch);
        assert_eq!(
            template_patch(
                &patched,
                Some("podinfo"),
                Some(&required),
                "app",
                "podinfo-primary"
            ),
            None,
            "nothing left to patch"
        );
        // The user's node affinity stays; ours never reaches the primary.
        let primary = template_for(&patched["spec"], "app", "podinfo-primary", &BTreeSet::new());
        assert_eq!(primary["spec"]["affinity"], zone);
        // Removing antiAffinity from the Canary removes the term, and the emptied object.
        let removal =
            template_patch(&patched, Some("podinfo"), None, "app", "podinfo-primary").unwrap();
        assert_eq!(
            removal,
            json!({"spec": {"template": {"spec": {"affinity": {"podAntiAffinity": null}}}}})
        );
    }

    #[test]
    fn what_serin_adds_to_the_target_is_not_a_new_revision() {
        let mut target = podinfo(json!(null));
        target["spec"]["selector"] = json!({"matchLabels": {"app": "podinfo"}});
        let revision = |object: &Value| {
            released_revision(
                serde_json::from_value(object.clone()).unwrap(),
                &["app", "name"],
            )
            .unwrap()
        };
        let anti: serin_api::AntiAffinity =
            serde_json::from_value(json!({"requiredDuringSchedulingIgnoredDuringExecution": {}}))
                .unwrap();
        let patch = template_patch(
            &target,
            Some("podinfo"),
            Some(&anti),
            "app",
            "podinfo-primary",
        )
        .expect("a patch");
        let mut patched = target.clone();
        apply_merge_patch(&mut patched, &patch);
        assert_eq!(revision(&patched), revision(&target));
        patched["spec"]["template"]["spec"]["containers"][0]["image"] = json!("podinfo:6.0.1");
        assert_ne!(revision(&patched), revision(&target), "a new image is");
    }

    #[test]
    fn a_preferred_anti_affinity_joins_the_users_own_preferences() {
        let preferred: serin_api::AntiAffinity = serde_json::from_value(
            json!({"preferredDuringSchedulingIgnoredDuringExecution": {"weight": 80}}),
        )
        .unwrap();
        let own = json!({"weight": 10, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": HOSTNAME}});
        let target = podinfo(json!({"podAntiAffinity": {PREFERRED: [own.clone()]}}));
        let patch =
            template_patch(&target, None, Some(&preferred), "app", "podinfo-primary").unwrap();
        let terms = &patch["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][PREFERRED];
        assert_eq!(terms[0], own);
        assert_eq!(terms[1]["weight"], 80);
        assert_eq!(
            terms[1]["podAffinityTerm"]["labelSelector"]["matchLabels"]["app"],
            "podinfo-primary"
        );
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
