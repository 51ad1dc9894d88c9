//! The primary's autoscaler: a copy of the target's HorizontalPodAutoscaler or KEDA ScaledObject
//! that scales `<target>-primary`; and the annotation that pauses the target's ScaledObject while
//! the target is scaled to zero.

use crate::cache::Caches;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
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

/// KEDA's annotation that holds a ScaledObject's workload at the given replica count.
pub const PAUSED_REPLICAS: &str = "autoscaling.keda.sh/paused-replicas";

/// The Canary's `autoscalerRef` KEDA ScaledObject in `namespace` (JSON, from the cache), when it
/// has one.
pub fn target_scaled_object(canary: &Canary, caches: &Caches, namespace: &str) -> Option<Value> {
    let reference = canary.spec.autoscaler_ref.as_ref()?;
    if reference.kind != "ScaledObject" {
        return None;
    }
    caches.scaled_object(namespace, &reference.name)
}

/// Holds the target's KEDA ScaledObject at zero replicas while the target is scaled to zero
/// (`paused`), or lets it scale the target again, as Flagger does; nothing when the Canary has no
/// ScaledObject or it already is so.
pub async fn pause_target_scaler(
    client: &Client,
    caches: &Caches,
    namespace: &str,
    canary: &Canary,
    paused: bool,
) -> Result<(), kube::Error> {
    let Some(so) = target_scaled_object(canary, caches, namespace) else {
        return Ok(());
    };
    let wanted = if paused { json!("0") } else { Value::Null };
    if so["metadata"]["annotations"][PAUSED_REPLICAS] == wanted {
        return Ok(());
    }
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &crate::cache::scaled_objects());
    api.patch(
        so["metadata"]["name"].as_str().unwrap_or_default(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {PAUSED_REPLICAS: wanted}}})),
    )
    .await?;
    Ok(())
}

/// The `<so>-primary` ScaledObject (JSON, ready to apply) for the target's ScaledObject `so`,
/// owned by `owner`, as Flagger makes it: the same spec scaling `<target>-primary`, each trigger's
/// `query` taken from `primaryScalerQueries` (by trigger name) or else rewritten to name the
/// primary instead of the target, `primaryScalerReplicas` overriding the bounds, and a named HPA
/// renamed `<name>-primary`.
pub fn primary_scaled_object(canary: &Canary, so: &Value, owner: &Value) -> Value {
    let target = &canary.spec.target_ref.name;
    let primary = format!("{target}-primary");
    let reference = canary.spec.autoscaler_ref.as_ref();
    let mut spec = so["spec"].clone();
    if !spec.is_object() {
        spec = json!({});
    }
    spec["scaleTargetRef"]["name"] = json!(primary);
    let queries = reference.and_then(|r| r.primary_scaler_queries.as_ref());
    for trigger in spec["triggers"].as_array_mut().into_iter().flatten() {
        let name = trigger["name"].as_str().unwrap_or_default().to_string();
        let query = match queries {
            Some(queries) => queries.get(&name).cloned(),
            None => trigger["metadata"]["query"].as_str().map(|query| {
                // `<target>-canary` must not become `<target>-primary-canary`.
                let placeholder = "\u{0}canary\u{0}";
                query
                    .replace(&format!("{target}-canary"), placeholder)
                    .replace(target.as_str(), &primary)
                    .replace(placeholder, &primary)
            }),
        };
        if let Some(query) = query
            && trigger["metadata"].is_object()
        {
            trigger["metadata"]["query"] = json!(query);
        }
    }
    let bounds = reference.and_then(|r| r.primary_scaler_replicas.as_ref());
    if let Some(min) = bounds.and_then(|b| b.min_replicas) {
        spec["minReplicaCount"] = json!(min);
    }
    if let Some(max) = bounds.and_then(|b| b.max_replicas) {
        spec["maxReplicaCount"] = json!(max);
    }
    if let Some(hpa) = spec["advanced"]["horizontalPodAutoscalerConfig"]["name"]
        .as_str()
        .filter(|name| !name.is_empty())
        .map(|name| format!("{name}-primary"))
    {
        spec["advanced"]["horizontalPodAutoscalerConfig"]["name"] = json!(hpa);
    }
    let mut annotations = so["metadata"]["annotations"].clone();
    if let Some(map) = annotations.as_object_mut() {
        map.remove("kubectl.kubernetes.io/last-applied-configuration");
        map.remove(PAUSED_REPLICAS);
    }
    let name = so["metadata"]["name"].as_str().unwrap_or_default();
    json!({
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": format!("{name}-primary"), "namespace": so["metadata"]["namespace"],
                     "labels": so["metadata"]["labels"].as_object().cloned().unwrap_or_default(),
                     "annotations": annotations.as_object().cloned().unwrap_or_default(),
                     "ownerReferences": [owner]},
        "spec": spec,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_primary_scaled_object_scales_the_primary_on_the_primarys_queries() {
        let canary = |queries: Value| -> Canary {
            serde_json::from_value(json!({
                "metadata": {"name": "podinfo", "namespace": "test"},
                "spec": {"targetRef": {"kind": "Deployment", "name": "podinfo"},
                         "autoscalerRef": {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
                                           "name": "podinfo-so", "primaryScalerQueries": queries,
                                           "primaryScalerReplicas": {"maxReplicas": 5}},
                         "service": {"port": 9898}}}))
            .unwrap()
        };
        let so = json!({
            "metadata": {"name": "podinfo-so", "namespace": "test", "labels": {"team": "a"},
                         "annotations": {"autoscaling.keda.sh/paused-replicas": "0"}},
            "spec": {"scaleTargetRef": {"name": "podinfo"}, "minReplicaCount": 1, "maxReplicaCount": 3,
                     "advanced": {"horizontalPodAutoscalerConfig": {"name": "podinfo-hpa"}},
                     "triggers": [{"type": "prometheus", "name": "requests", "metadata": {
                         "serverAddress": "http://prometheus:9090", "threshold": "5",
                         "query": "sum(rate(http_requests_total{app=\"podinfo\"}[1m])) + sum(up{app=\"podinfo-canary\"})"}}]}
        });
        let rewritten =
            primary_scaled_object(&canary(Value::Null), &so, &json!({"kind": "Canary"}));
        assert_eq!(rewritten["metadata"]["name"], "podinfo-so-primary");
        assert_eq!(rewritten["metadata"]["labels"]["team"], "a");
        assert!(
            rewritten["metadata"]["annotations"]
                .get(PAUSED_REPLICAS)
                .is_none()
        );
        assert_eq!(
            rewritten["spec"]["scaleTargetRef"]["name"],
            "podinfo-primary"
        );
        assert_eq!(rewritten["spec"]["maxReplicaCount"], 5);
        assert_eq!(rewritten["spec"]["minReplicaCount"], 1);
        assert_eq!(
            rewritten["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["name"],
            "podinfo-hpa-primary"
        );
        assert_eq!(
            rewritten["spec"]["triggers"][0]["metadata"]["query"],
            "sum(rate(http_requests_total{app=\"podinfo-primary\"}[1m])) + sum(up{app=\"podinfo-primary\"})"
        );
        let given = primary_scaled_object(
            &canary(
                json!({"requests": "sum(rate(http_requests_total{app=\"podinfo-primary\"}[2m]))"}),
            ),
            &so,
            &json!({"kind": "Canary"}),
        );
        assert_eq!(
            given["spec"]["triggers"][0]["metadata"]["query"],
            "sum(rate(http_requests_total{app=\"podinfo-primary\"}[2m]))"
        );
        assert_eq!(given["spec"]["triggers"][0]["metadata"]["threshold"], "5");
    }

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
