//! The primary's HorizontalPodAutoscaler: a copy of the target's that scales `<target>-primary`.

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use serde_json::{Value, json};
use serin_api::Canary;

/// The `<hpa>-primary` autoscaler (JSON, ready to apply) for the target's `hpa`, owned by `owner`:
/// the same spec scaling `<target>-primary`, with `primaryScalerReplicas` overriding the bounds.
pub fn primary_autoscaler(
    canary: &Canary,
    hpa: &HorizontalPodAutoscaler,
    owner: &Value,
) -> Result<Value, serde_json::Error> {
    let mut spec = serde_json::to_value(hpa.spec.clone().unwrap_or_default())?;
    spec["scaleTargetRef"]["name"] = json!(format!("{}-primary", canary.spec.target_ref.name));
    let bounds = canary
        .spec
        .autoscaler_ref
        .as_ref()
        .and_then(|r| r.primary_scaler_replicas.as_ref());
    if let Some(min) = bounds.and_then(|b| b.min_replicas) {
        spec["minReplicas"] = json!(min);
    }
    if let Some(max) = bounds.and_then(|b| b.max_replicas) {
        spec["maxReplicas"] = json!(max);
    }
    let name = hpa.metadata.name.clone().unwrap_or_default();
    Ok(json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": format!("{name}-primary"), "namespace": hpa.metadata.namespace,
                     "labels": hpa.metadata.labels.clone().unwrap_or_default(),
                     "ownerReferences": [owner]},
        "spec": spec,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_primary_autoscaler_scales_the_primary_within_the_override() {
        let canary: Canary = serde_json::from_value(json!({
            "metadata": {"name": "podinfo", "namespace": "test"},
            "spec": {"targetRef": {"kind": "Deployment", "name": "podinfo"},
                     "autoscalerRef": {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                                       "name": "podinfo", "primaryScalerReplicas": {"minReplicas": 3}},
                     "service": {"port": 9898}}}))
        .unwrap();
        let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
            "metadata": {"name": "podinfo", "namespace": "test"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo"},
                     "minReplicas": 2, "maxReplicas": 4}}))
        .unwrap();
        let primary = primary_autoscaler(&canary, &hpa, &json!({"kind": "Canary"})).unwrap();
        assert_eq!(primary["metadata"]["name"], "podinfo-primary");
        assert_eq!(primary["spec"]["scaleTargetRef"]["name"], "podinfo-primary");
        assert_eq!(primary["spec"]["minReplicas"], 3);
        assert_eq!(primary["spec"]["maxReplicas"], 4);
    }
}
