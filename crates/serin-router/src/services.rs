//! The three ClusterIP Services of a Deployment target: `<svc>-canary` selecting the target's pods,
//! `<svc>-primary` and the apex `<svc>` selecting the primary's.

use crate::{Names, RouterError, custom_metadata, owner_reference};
use serde_json::{Map, Value, json};

/// Flagger's default `-selector-labels`.
pub const DEFAULT_SELECTOR_LABELS: [&str; 3] = ["app", "name", "app.kubernetes.io/name"];

/// The selector label of a target: the first of `selector_labels` in its `spec.selector.matchLabels`,
/// with its value.
pub fn selector_label(
    target: &Value,
    selector_labels: &[&str],
) -> Result<(String, String), RouterError> {
    let match_labels = &target["spec"]["selector"]["matchLabels"];
    selector_labels
        .iter()
        .find_map(|key| {
            match_labels[*key]
                .as_str()
                .map(|value| (key.to_string(), value.to_string()))
        })
        .ok_or_else(|| RouterError::NoSelectorLabel {
            target: target["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .into(),
            namespace: target["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .into(),
            labels: selector_labels.join(" "),
        })
}

/// The Service ports: the main port, then (with `portDiscovery`) one TCP port per other container
/// port of the target's pod template.
pub fn ports(canary: &Value, target: &Value) -> Vec<Value> {
    let service = &canary["spec"]["service"];
    let port = service["port"].as_i64().unwrap_or(80);
    let target_port = service.get("targetPort").filter(|t| !t.is_null()).cloned();
    let mut main = json!({
        "name": service["portName"].as_str().unwrap_or("http"),
        "protocol": "TCP",
        "port": port,
        "targetPort": target_port.clone().unwrap_or(json!(port)),
    });
    if let Some(app_protocol) = service["appProtocol"].as_str() {
        main["appProtocol"] = json!(app_protocol);
    }
    let mut ports = vec![main];
    if service["portDiscovery"].as_bool() != Some(true) {
        return ports;
    }
    let containers = target["spec"]["template"]["spec"]["containers"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    for container in containers {
        let name = container["name"].as_str().unwrap_or_default();
        if matches!(name, "istio-proxy" | "envoy") {
            continue;
        }
        let declared = container["ports"].as_array().map_or(&[][..], Vec::as_slice);
        for (index, container_port) in declared.iter().enumerate() {
            let number = container_port["containerPort"].as_i64().unwrap_or(0);
            let port_name = container_port["name"].as_str();
            let is_main = match &target_port {
                None => number == port,
                Some(Value::Number(n)) => n.as_i64() == Some(number),
                Some(Value::String(named)) => port_name == Some(named.as_str()),
                Some(_) => false,
            };
            if is_main {
                continue;
            }
            ports.push(json!({
                "name": port_name.map_or_else(|| format!("tcp-{name}-{index}"), String::from),
                "protocol": "TCP",
                "port": number,
                "targetPort": number,
            }));
        }
    }
    ports
}

fn service_object(
    canary: &Value,
    name: &str,
    label_key: &str,
    selector_value: &str,
    metadata_block: &Value,
    ports: &[Value],
) -> Value {
    let names = Names::of(canary);
    let (mut labels, mut annotations) = custom_metadata(metadata_block);
    labels.insert(label_key.to_string(), json!(name));
    // Keys someone else manages (`service.unmanagedMetadata`) are never set, so server-side
    // apply leaves whatever value they have.
    let unmanaged = &canary["spec"]["service"]["unmanagedMetadata"];
    for (keys, map) in [("labels", &mut labels), ("annotations", &mut annotations)] {
        for key in unmanaged[keys].as_array().into_iter().flatten() {
            if let Some(key) = key.as_str() {
                map.remove(key);
            }
        }
    }
    let mut selector = Map::new();
    selector.insert(label_key.to_string(), json!(selector_value));
    let service = &canary["spec"]["service"];
    let mut spec = json!({"type": "ClusterIP", "selector": selector, "ports": ports});
    if service["headless"].as_bool() == Some(true) {
        spec["clusterIP"] = json!("None");
    }
    if let Some(distribution) = service["trafficDistribution"].as_str() {
        spec["trafficDistribution"] = json!(distribution);
    }
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": names.namespace, "labels": labels,
                     "annotations": annotations, "ownerReferences": [owner_reference(canary)]},
        "spec": spec,
    })
}

/// `[<svc>-canary, <svc>-primary, <svc>]` for `canary` (JSON form) and its target Deployment.
pub fn services(
    canary: &Value,
    target: &Value,
    selector_labels: &[&str],
) -> Result<[Value; 3], RouterError> {
    let names = Names::of(canary);
    let (key, value) = selector_label(target, selector_labels)?;
    let ports = ports(canary, target);
    let service = &canary["spec"]["service"];
    let primary_value = format!("{value}-primary");
    Ok([
        service_object(
            canary,
            &names.canary,
            &key,
            &value,
            &service["canary"],
            &ports,
        ),
        service_object(
            canary,
            &names.primary,
            &key,
            &primary_value,
            &service["primary"],
            &ports,
        ),
        service_object(
            canary,
            &names.apex,
            &key,
            &primary_value,
            &service["apex"],
            &ports,
        ),
    ])
}
