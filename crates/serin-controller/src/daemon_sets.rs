//! DaemonSets as Flagger runs them: scaled to zero by a nodeSelector key no node has, and read as a
//! Deployment by the decision core, which knows only Deployments.

use serde_json::{Value, json};

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
}
