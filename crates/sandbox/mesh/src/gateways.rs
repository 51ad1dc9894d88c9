//! The sandbox's gateways, as an Istio installation brings them: the ingress gateway
//! (`istio-system/istio-ingressgateway`, a Deployment and Service whose pod routes by Istio
//! Gateways and VirtualServices) and a Gateway API controller for the `istio` class that deploys
//! a `<gateway>-istio` Service and pod per Gateway and writes the Gateways' and HTTPRoutes'
//! status, as Istio's automated deployment does. The pods run the serving runtime's gateway app
//! ([`crate::mesh_proxy::GatewayHost`]); the routing itself is [`crate::gateway_route`].

use crate::gateway_route::{self, CONTROLLER_NAME, GATEWAY_CLASS, GATEWAY_NAME_LABEL};
use crate::mesh_route::RouteTable;
use serde_json::{Value, json};
use serin_sandbox_apiserver::selectors::{FieldSelector, LabelSelector};
use serin_sandbox_apiserver::store::{Part, Store, WriteOptions};
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;

/// The image of the sandbox's gateway pods (any image containing `proxyv2` runs the gateway app).
pub const GATEWAY_IMAGE: &str = "docker.io/istio/proxyv2:1.24.0";

/// The namespace of Istio's ingress gateway.
pub const INGRESS_NAMESPACE: &str = "istio-system";

/// The name of the ingress gateway's Deployment and Service.
pub const INGRESS_NAME: &str = "istio-ingressgateway";

/// The field manager of the objects the gateways' controller writes.
const MANAGER: &str = "serin-sandbox-gateways";

fn write_options() -> WriteOptions {
    WriteOptions::by(MANAGER)
}

/// The ingress gateway's Namespace, Deployment and Service, as Istio's default profile installs
/// them (Service ports `http2` 80 → 8080 and `https` 443 → 8443, selector `istio: ingressgateway`).
pub fn ingress_manifests() -> [(&'static str, &'static str, Value); 3] {
    let labels = json!({"app": INGRESS_NAME, "istio": "ingressgateway"});
    [
        (
            "",
            "namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": INGRESS_NAMESPACE}}),
        ),
        (
            "apps",
            "deployments",
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": INGRESS_NAME, "namespace": INGRESS_NAMESPACE, "labels": labels},
                "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": {"containers": [{
                        "name": "istio-proxy", "image": GATEWAY_IMAGE,
                        "args": ["proxy", "router", "--domain", "$(POD_NAMESPACE).svc.cluster.local"],
                        "ports": [
                            {"name": "http2", "containerPort": 8080, "protocol": "TCP"},
                            {"name": "https", "containerPort": 8443, "protocol": "TCP"},
                            {"name": "status-port", "containerPort": 15021, "protocol": "TCP"},
                            {"name": "http-envoy-prom", "containerPort": 15090, "protocol": "TCP"}],
                        "readinessProbe": {"httpGet": {"path": "/healthz/ready", "port": 15021},
                            "initialDelaySeconds": 1, "periodSeconds": 2, "failureThreshold": 30}}]}}}}),
        ),
        (
            "",
            "services",
            json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": INGRESS_NAME, "namespace": INGRESS_NAMESPACE, "labels": labels},
                "spec": {"selector": {"istio": "ingressgateway"}, "ports": [
                    {"name": "http2", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                    {"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP"}]}}),
        ),
    ]
}

/// Creates the ingress gateway's Namespace, Deployment and Service (those present are left alone).
pub fn install_ingress_gateway(store: &Store) {
    for (group, plural, object) in ingress_manifests() {
        let info = store.resource(group, "v1", plural).expect("built in");
        let namespace = object["metadata"]["namespace"].as_str().map(String::from);
        let _ = store.create(&info, namespace.as_deref(), object, &write_options());
    }
}

/// The Service and Deployment serving a Gateway API Gateway: `<gateway>-istio` in its
/// namespace, owned by it, one Service port per listener port plus Istio's `status-port`.
pub fn gateway_deployment(gateway: &Value) -> (Value, Value) {
    let name = gateway_route::deployment_name(gateway);
    let gateway_name = gateway["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = gateway["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default");
    let labels = json!({GATEWAY_NAME_LABEL: gateway_name, "istio.io/gateway-name": gateway_name});
    let selector = json!({GATEWAY_NAME_LABEL: gateway_name});
    let owner = json!([{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "name": gateway_name, "uid": gateway["metadata"]["uid"], "controller": true}]);
    let mut listener_ports: Vec<(u64, String)> = Vec::new();
    for listener in gateway["spec"]["listeners"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(port) = listener["port"].as_u64()
            && !listener_ports.iter().any(|(p, _)| *p == port)
        {
            let protocol = listener["protocol"]
                .as_str()
                .unwrap_or("HTTP")
                .to_ascii_lowercase();
            listener_ports.push((port, format!("{protocol}-{port}")));
        }
    }
    let mut service_ports = vec![json!({"name": "status-port", "port": 15021,
        "targetPort": 15021, "protocol": "TCP"})];
    let mut container_ports = vec![json!({"name": "status-port", "containerPort": 15021,
        "protocol": "TCP"})];
    for (port, port_name) in &listener_ports {
        service_ports.push(json!({"name": port_name, "port": port, "targetPort": port,
            "protocol": "TCP"}));
        container_ports.push(json!({"containerPort": port, "protocol": "TCP"}));
    }
    let service = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels,
            "ownerReferences": owner},
        "spec": {"selector": selector, "ports": service_ports}});
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels,
            "ownerReferences": owner},
        "spec": {"replicas": 1, "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{
                "name": "istio-proxy", "image": GATEWAY_IMAGE,
                "args": ["proxy", "router"], "ports": container_ports}]}}}});
    (service, deployment)
}

/// Runs the Gateway API controller: after every change to Gateways, HTTPRoutes, Services,
/// Deployments or Namespaces, it reconciles every Gateway of the `istio` class.
pub fn spawn(store: Arc<Store>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut changes = store.subscribe();
        loop {
            reconcile(&store);
            let mut relevant = false;
            while !relevant {
                relevant = match changes.recv().await {
                    Ok(change) => feeds_gateways(&change.resource),
                    Err(RecvError::Lagged(_)) => true,
                    Err(RecvError::Closed) => return,
                };
            }
            // Let a burst of writes (kubectl apply of several objects) land before the pass.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            while let Ok(_) | Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) =
                changes.try_recv()
            {}
        }
    })
}

fn feeds_gateways(resource: &str) -> bool {
    matches!(
        resource,
        "gateways.gateway.networking.k8s.io"
            | "httproutes.gateway.networking.k8s.io"
            | "services"
            | "deployments.apps"
            | "namespaces"
    )
}

/// `new` conditions with the `lastTransitionTime` of `old`'s condition of the same type when its
/// status did not change, else `now`.
fn stamp(new: &mut Value, old: &Value, now: &str) {
    for condition in new.as_array_mut().into_iter().flatten() {
        let previous = old
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == condition["type"] && c["status"] == condition["status"]);
        condition["lastTransitionTime"] = previous
            .map(|c| c["lastTransitionTime"].clone())
            .filter(Value::is_string)
            .unwrap_or_else(|| json!(now));
    }
}

/// One pass: every `istio`-class Gateway gets its Service, Deployment and status; every HTTPRoute
/// naming one gets its `status.parents` entries.
pub fn reconcile(store: &Store) {
    let Some(gateways_info) = store.resource("gateway.networking.k8s.io", "v1", "gateways") else {
        return;
    };
    let Some(routes_info) = store.resource("gateway.networking.k8s.io", "v1", "httproutes") else {
        return;
    };
    // The route table reads every routing object of the mesh; with no Gateway and no HTTPRoute
    // there is nothing for it to decide.
    let none = |info| {
        store
            .list(info, None, &Default::default(), &Default::default())
            .0
            .is_empty()
    };
    if none(&gateways_info) && none(&routes_info) {
        return;
    }
    let table: RouteTable = crate::mesh_proxy::route_table(store);
    let now = serin_sandbox_apiserver::store::now_rfc3339();
    for gateway in table
        .gateways
        .iter()
        .filter(|g| g["spec"]["gatewayClassName"] == GATEWAY_CLASS)
        .filter(|g| g["metadata"]["deletionTimestamp"].is_null())
    {
        ensure_deployment(store, gateway);
        let mut status = gateway_route::gateway_status(gateway, &table);
        stamp(
            &mut status["conditions"],
            &gateway["status"]["conditions"],
            &now,
        );
        for (index, listener) in status["listeners"]
            .as_array_mut()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let old = gateway["status"]["listeners"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|l| l["name"] == listener["name"])
                .or_else(|| gateway["status"]["listeners"].get(index))
                .map(|l| l["conditions"].clone())
                .unwrap_or(Value::Null);
            stamp(&mut listener["conditions"], &old, &now);
        }
        if gateway["status"] != status {
            let mut updated = gateway.clone();
            updated["status"] = status;
            write_status(store, &gateways_info, updated);
        }
    }
    let services = service_keys(store);
    for route in &table.http_routes {
        let mut ours = gateway_route::route_parent_statuses(
            route,
            &table.gateways,
            &table.namespace_labels,
            &services,
        );
        let old_parents = route["status"]["parents"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for parent in &mut ours {
            let old = old_parents
                .iter()
                .find(|p| {
                    p["controllerName"] == CONTROLLER_NAME && p["parentRef"] == parent["parentRef"]
                })
                .map(|p| p["conditions"].clone())
                .unwrap_or(Value::Null);
            stamp(&mut parent["conditions"], &old, &now);
        }
        let mut parents: Vec<Value> = old_parents
            .iter()
            .filter(|p| p["controllerName"] != CONTROLLER_NAME)
            .cloned()
            .collect();
        parents.extend(ours);
        if parents != old_parents {
            let mut updated = route.clone();
            updated["status"]["parents"] = Value::Array(parents);
            write_status(store, &routes_info, updated);
        }
    }
}

fn write_status(
    store: &Store,
    info: &serin_sandbox_apiserver::registry::ResourceInfo,
    mut object: Value,
) {
    // The table may hold it as another served version; the write is in `info`'s.
    object["apiVersion"] = json!(info.api_version());
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // A conflict means a newer version exists: the change it made brings another pass.
    let _ = store.update(
        info,
        &namespace,
        &name,
        object,
        Part::Status,
        &write_options(),
    );
}

/// `namespace/name` of every Service.
fn service_keys(store: &Store) -> Vec<String> {
    let services = store.resource("", "v1", "services").expect("built in");
    store
        .list(
            &services,
            None,
            &LabelSelector::default(),
            &FieldSelector::default(),
        )
        .0
        .iter()
        .map(crate::mesh_route::key_of)
        .collect()
}

/// Creates the Gateway's Service and Deployment when missing, and brings the Service's ports and
/// the pod template's container ports in line with the listeners.
fn ensure_deployment(store: &Store, gateway: &Value) {
    let (service, deployment) = gateway_deployment(gateway);
    let namespace = gateway["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default");
    let name = gateway_route::deployment_name(gateway);
    let services = store.resource("", "v1", "services").expect("built in");
    let deployments = store
        .resource("apps", "v1", "deployments")
        .expect("built in");
    // Where each object lists its ports, and the field holding a port's number there.
    for (info, mut wanted, pointer, number) in [
        (services, service, "/spec/ports", "port"),
        (
            deployments,
            deployment,
            "/spec/template/spec/containers/0/ports",
            "containerPort",
        ),
    ] {
        let Ok(mut existing) = store.get(&info, namespace, &name) else {
            let _ = store.create(&info, Some(namespace), wanted, &write_options());
            continue;
        };
        let numbers = |object: &Value| -> Vec<Value> {
            object
                .pointer(pointer)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|p| p[number].clone())
                .collect()
        };
        if numbers(&existing) == numbers(&wanted) {
            continue;
        }
        let Some(ports) = wanted.pointer_mut(pointer).map(Value::take) else {
            continue;
        };
        if let Some(target) = existing.pointer_mut(pointer) {
            *target = ports;
            let _ = store.update(
                &info,
                namespace,
                &name,
                existing,
                Part::Main,
                &write_options(),
            );
        }
    }
}
