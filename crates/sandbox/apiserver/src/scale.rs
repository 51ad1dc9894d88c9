//! The scale subresource (`kubectl scale`, the HorizontalPodAutoscaler): an object's replicas read
//! and written through the paths its kind declares.

use crate::registry::ResourceInfo;
use crate::status::ApiError;
use crate::store::{Part, PatchType, Store, WriteOptions};
use serde_json::{Value, json};

/// The value at a simple JSON path such as `.spec.replicas`.
pub fn path_value<'a>(object: &'a Value, path: &str) -> &'a Value {
    path.trim_start_matches('.')
        .split('.')
        .fold(object, |node, part| &node[part])
}

/// The `autoscaling/v1` Scale of an object whose kind has a scale subresource.
pub fn scale_of(info: &ResourceInfo, object: &Value) -> Value {
    let paths = info.scale.as_ref().expect("scale subresource");
    let selector = match &paths.label_selector {
        Some(path) => path_value(object, path).as_str().unwrap_or("").to_string(),
        None => object["spec"]["selector"]["matchLabels"]
            .as_object()
            .map(|labels| {
                labels
                    .iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default(),
    };
    let metadata = &object["metadata"];
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {"name": metadata["name"], "namespace": metadata["namespace"], "uid": metadata["uid"],
            "resourceVersion": metadata["resourceVersion"], "creationTimestamp": metadata["creationTimestamp"]},
        "spec": {"replicas": path_value(object, &paths.spec_replicas).as_i64().unwrap_or(0)},
        "status": {"replicas": path_value(object, &paths.status_replicas).as_i64().unwrap_or(0), "selector": selector}
    })
}

/// Sets the replicas of `info`'s object from a `Scale` (`spec.replicas`, and its
/// `metadata.resourceVersion` as a precondition when given).
pub fn set_scale(
    store: &Store,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
    scale: &Value,
    write: &WriteOptions,
) -> Result<Value, ApiError> {
    let replicas = scale["spec"]["replicas"]
        .as_i64()
        .ok_or_else(|| ApiError::bad_request("spec.replicas of the Scale must be a number"))?;
    let path = info
        .scale
        .as_ref()
        .expect("scale subresource")
        .spec_replicas
        .clone();
    let mut patch = json!(replicas);
    for part in path.trim_start_matches('.').rsplit('.') {
        patch = json!({ part: patch });
    }
    if let Some(rv) = scale["metadata"]["resourceVersion"]
        .as_str()
        .filter(|v| !v.is_empty())
    {
        patch["metadata"] = json!({"resourceVersion": rv});
    }
    store
        .patch(info, ns, name, PatchType::Merge, &patch, Part::Main, write)
        .map(|(object, _)| object)
}
