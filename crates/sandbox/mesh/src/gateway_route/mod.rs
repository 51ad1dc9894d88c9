//! Routing at gateways as pure functions, beside [`crate::mesh_route`]'s routing at sidecars.
//!
//! **Istio ingress gateways**: a gateway pod serves the Istio `Gateway` objects whose
//! `spec.selector` matches its labels ([`istio_gateways_for`]); a request is routed by the
//! VirtualService bound to one of them (`gateways: [ns/name]`) whose `hosts` cover its Host and
//! which the Gateway's server `hosts` admit ([`istio_ingress_route`]), through the same route
//! evaluation as at sidecars (matches, weights, rewrite, header operations, delegation).
//!
//! **Gateway API gateways** (class `istio`): which listeners an HTTPRoute's parentRef attaches to
//! ([`attach`]), how a request through the Gateway is routed ([`gateway_api_route`]), and the
//! status conditions Istio writes on the Gateway and its routes ([`gateway_status`],
//! [`route_parent_statuses`]).

use crate::mesh_route::{
    self, Decision, Request, RouteTable, Scope, hostname_matches, key_of, namespace_of, port_of,
    qualify, strip_port,
};
use serde_json::{Map, Value, json};
use serin_sandbox_apiserver::selectors::LabelSelector;
use std::collections::HashMap;

/// The `gatewayClassName` the sandbox's Gateway API controller implements, as Istio's does.
pub const GATEWAY_CLASS: &str = "istio";

/// The controller name in HTTPRoutes' `status.parents[]`, as Istio writes it.
pub const CONTROLLER_NAME: &str = "istio.io/gateway-controller";

/// The pod label naming the Gateway API Gateway a gateway pod serves (in the pod's namespace).
pub const GATEWAY_NAME_LABEL: &str = "gateway.networking.k8s.io/gateway-name";

/// An Istio Gateway a gateway pod serves: its `namespace/name`, namespace and the `hosts` of its
/// plain-HTTP servers.
#[derive(Clone, Debug, PartialEq)]
pub struct BoundGateway {
    /// `namespace/name`, as VirtualServices' `gateways` name it.
    pub key: String,
    /// The Gateway's namespace (`./host` server hosts mean VirtualServices of this namespace).
    pub namespace: String,
    /// The server `hosts` entries (`*`, `app.example.com`, `ns/host`, `./host`, `*/host`).
    pub hosts: Vec<String>,
}

/// Whether a server or listener protocol is plain HTTP, which the sandbox's gateways serve.
fn plain_http(protocol: Option<&str>) -> bool {
    protocol.is_none_or(|p| {
        matches!(
            p.to_ascii_uppercase().as_str(),
            "HTTP" | "HTTP2" | "H2C" | "GRPC"
        )
    })
}

/// The Istio Gateways whose `spec.selector` matches a gateway pod's `labels` (an empty selector
/// matches every gateway pod), with the hosts of their plain-HTTP servers; when `port` (from the
/// request's Host) is the port of one of those servers, only the servers on that port count.
pub fn istio_gateways_for(
    table: &RouteTable,
    labels: &Map<String, Value>,
    port: Option<u16>,
) -> Vec<BoundGateway> {
    let selected: Vec<&Value> = table
        .istio_gateways
        .iter()
        .filter(|gateway| {
            gateway["spec"]["selector"]
                .as_object()
                .into_iter()
                .flatten()
                .all(|(key, value)| labels.get(key) == Some(value))
        })
        .collect();
    let servers = |gateway: &Value| -> Vec<Value> {
        gateway["spec"]["servers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| plain_http(s["port"]["protocol"].as_str()))
            .cloned()
            .collect()
    };
    let on_port =
        |server: &Value| port.is_some() && server["port"]["number"].as_u64() == port.map(u64::from);
    let port_known = selected
        .iter()
        .any(|gateway| servers(gateway).iter().any(on_port));
    selected
        .into_iter()
        .filter_map(|gateway| {
            let hosts: Vec<String> = servers(gateway)
                .iter()
                .filter(|server| !port_known || on_port(server))
                .flat_map(|server| server["hosts"].as_array().cloned().unwrap_or_default())
                .filter_map(|h| h.as_str().map(String::from))
                .collect();
            (!hosts.is_empty()).then(|| BoundGateway {
                key: key_of(gateway),
                namespace: namespace_of(gateway).to_string(),
                hosts,
            })
        })
        .collect()
}

/// Whether a Gateway's server `hosts` admit a VirtualService of `vs_namespace` for `host`
/// (`ns/host` forms: `*` or `.` or a namespace, then a host pattern; a bare host means any
/// namespace).
pub fn server_admits(gateway: &BoundGateway, vs_namespace: &str, host: &str) -> bool {
    gateway.hosts.iter().any(|entry| {
        let (namespace, pattern) = entry.split_once('/').unwrap_or(("*", entry));
        let namespace_ok = match namespace {
            "*" => true,
            "." => vs_namespace == gateway.namespace,
            other => other == vs_namespace,
        };
        namespace_ok && (pattern == "*" || mesh_route::host_matches(pattern, host))
    })
}

/// Routes a request that reached a gateway pod serving `gateways`: the VirtualService bound to
/// one of them (by `gateways`) whose `hosts` cover the request's host and which the Gateway's
/// servers admit governs (an exact host beats `*`), then its http routes as at a sidecar. No such
/// VirtualService: 404, as Envoy's `route_not_found`.
pub fn istio_ingress_route(
    table: &RouteTable,
    gateways: &[BoundGateway],
    request: &Request,
    pick: f64,
) -> Decision {
    let host = strip_port(&request.authority).to_ascii_lowercase();
    let host = host.as_str();
    let keys: Vec<String> = gateways.iter().map(|g| g.key.clone()).collect();
    let vs = mesh_route::governing(
        table
            .virtual_services
            .iter()
            .filter(|vs| {
                let namespace = namespace_of(vs);
                vs["spec"]["gateways"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .filter_map(|g| mesh_route::gateway_key(g, namespace))
                    .filter_map(|key| gateways.iter().find(|g| g.key == key))
                    .any(|gateway| server_admits(gateway, namespace, host))
            })
            .flat_map(|vs| {
                let namespace = namespace_of(vs);
                let local = qualify(host, namespace);
                vs["spec"]["hosts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .filter_map(move |pattern| {
                        let qualified = qualify(pattern, namespace);
                        let covers = mesh_route::host_matches(&qualified, host)
                            || mesh_route::host_matches(&qualified, &local);
                        covers.then(|| (qualified.starts_with('*'), vs))
                    })
            }),
    );
    match vs {
        Some(vs) => mesh_route::route_by_virtual_service(
            table,
            vs,
            request,
            Scope::Gateways(&keys),
            None,
            pick,
        ),
        None => Decision::Respond {
            status: 404,
            body: format!(
                "no route: no VirtualService bound to {} covers host {host:?}",
                if keys.is_empty() {
                    "any Gateway selecting this gateway".to_string()
                } else {
                    keys.join(", ")
                }
            ),
        },
    }
}

/// Whether an HTTPRoute `parentRef` (in a route of `route_namespace`) names `gateway`.
pub fn names_gateway(parent_ref: &Value, route_namespace: &str, gateway: &Value) -> bool {
    parent_ref["group"]
        .as_str()
        .unwrap_or("gateway.networking.k8s.io")
        == "gateway.networking.k8s.io"
        && parent_ref["kind"].as_str().unwrap_or("Gateway") == "Gateway"
        && parent_ref["name"] == gateway["metadata"]["name"]
        && parent_ref["namespace"].as_str().unwrap_or(route_namespace) == namespace_of(gateway)
}

/// Whether two hostnames (either may be a `*.` wildcard) have a host in common.
fn hostnames_intersect(a: &str, b: &str) -> bool {
    a == b
        || hostname_matches(a, b)
        || hostname_matches(b, a)
        || match (a.strip_prefix('*'), b.strip_prefix('*')) {
            (Some(x), Some(y)) => x.ends_with(y) || y.ends_with(x),
            _ => false,
        }
}

/// The route's `spec.hostnames`.
fn route_hostnames(route: &Value) -> Vec<&str> {
    route["spec"]["hostnames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// Whether `listener` of a Gateway in `gateway_namespace` lets HTTPRoutes of `route_namespace`
/// attach (`allowedRoutes.namespaces.from`: `Same`, the default, `All` or `Selector`; and
/// `allowedRoutes.kinds`, when given, must list HTTPRoute).
fn listener_allows(
    listener: &Value,
    gateway_namespace: &str,
    route_namespace: &str,
    namespace_labels: &HashMap<String, Map<String, Value>>,
) -> bool {
    let allowed = &listener["allowedRoutes"];
    let kind_ok = allowed["kinds"]
        .as_array()
        .filter(|kinds| !kinds.is_empty())
        .is_none_or(|kinds| kinds.iter().any(|k| k["kind"] == "HTTPRoute"));
    let namespace_ok = match allowed["namespaces"]["from"].as_str().unwrap_or("Same") {
        "All" => true,
        "Selector" => {
            let labels = namespace_labels
                .get(route_namespace)
                .cloned()
                .unwrap_or_default();
            LabelSelector::from_json(&allowed["namespaces"]["selector"])
                .is_ok_and(|selector| selector.matches(&json!({"metadata": {"labels": labels}})))
        }
        _ => route_namespace == gateway_namespace,
    };
    kind_ok && namespace_ok
}

/// The indices of the listeners of `gateway` that `parent_ref` attaches `route` to, or why it
/// attaches to none, as the Gateway API names the reason: `NoMatchingParent` (no listener has the
/// `sectionName`/`port`), `NotAllowedByListeners` (their `allowedRoutes` refuse the route's
/// namespace or kind) or `NoMatchingListenerHostname` (no hostname in common).
pub fn attach(
    gateway: &Value,
    route: &Value,
    parent_ref: &Value,
    namespace_labels: &HashMap<String, Map<String, Value>>,
) -> Result<Vec<usize>, &'static str> {
    let listeners = gateway["spec"]["listeners"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let named: Vec<usize> = (0..listeners.len())
        .filter(|&i| {
            let listener = &listeners[i];
            parent_ref["sectionName"]
                .as_str()
                .is_none_or(|section| listener["name"] == section)
                && parent_ref["port"]
                    .as_u64()
                    .is_none_or(|port| listener["port"].as_u64() == Some(port))
        })
        .collect();
    if named.is_empty() {
        return Err("NoMatchingParent");
    }
    let allowed: Vec<usize> = named
        .into_iter()
        .filter(|&i| {
            matches!(
                listeners[i]["protocol"].as_str().unwrap_or("HTTP"),
                "HTTP" | "HTTPS"
            ) && listener_allows(
                &listeners[i],
                namespace_of(gateway),
                namespace_of(route),
                namespace_labels,
            )
        })
        .collect();
    if allowed.is_empty() {
        return Err("NotAllowedByListeners");
    }
    let hostnames = route_hostnames(route);
    let matching: Vec<usize> = allowed
        .into_iter()
        .filter(|&i| match listeners[i]["hostname"].as_str() {
            None => true,
            Some(listener_host) => {
                hostnames.is_empty()
                    || hostnames
                        .iter()
                        .any(|h| hostnames_intersect(listener_host, h))
            }
        })
        .collect();
    if matching.is_empty() {
        return Err("NoMatchingListenerHostname");
    }
    Ok(matching)
}

/// Routes a request that reached the pods of Gateway API `gateway`: among its plain-HTTP
/// listeners (those on the Host's port, when one is), the ones whose `hostname` covers the host;
/// the HTTPRoutes attached to them whose `hostnames` (if any) cover it; then their rules by
/// Gateway API precedence as at sidecars. Nothing attached for the host: 404.
pub fn gateway_api_route(
    table: &RouteTable,
    gateway: &Value,
    request: &Request,
    pick: f64,
) -> Decision {
    let host = strip_port(&request.authority).to_ascii_lowercase();
    let listeners = gateway["spec"]["listeners"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let http: Vec<usize> = (0..listeners.len())
        .filter(|&i| listeners[i]["protocol"].as_str().unwrap_or("HTTP") == "HTTP")
        .collect();
    let port = port_of(&request.authority).map(u64::from);
    let on_port: Vec<usize> = http
        .iter()
        .copied()
        .filter(|&i| port.is_some() && listeners[i]["port"].as_u64() == port)
        .collect();
    let serving: Vec<usize> = if on_port.is_empty() { http } else { on_port }
        .into_iter()
        .filter(|&i| {
            listeners[i]["hostname"]
                .as_str()
                .is_none_or(|pattern| hostname_matches(pattern, &host))
        })
        .collect();
    let routes: Vec<&Value> = table
        .http_routes
        .iter()
        .filter(|route| {
            let hostnames = route_hostnames(route);
            let host_ok = hostnames.is_empty()
                || hostnames
                    .iter()
                    .any(|pattern| hostname_matches(pattern, &host));
            host_ok
                && route["spec"]["parentRefs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|r| names_gateway(r, namespace_of(route), gateway))
                    .any(|r| {
                        attach(gateway, route, r, &table.namespace_labels)
                            .is_ok_and(|attached| attached.iter().any(|i| serving.contains(i)))
                    })
        })
        .collect();
    if routes.is_empty() {
        return Decision::Respond {
            status: 404,
            body: format!(
                "no route: no HTTPRoute attached to Gateway {} covers host {host:?}",
                key_of(gateway)
            ),
        };
    }
    mesh_route::route_by_http_routes(&routes, request, &host, None, pick)
}

/// A status condition without its `lastTransitionTime` (the controller keeps that).
fn condition(kind: &str, status: bool, reason: &str, message: &str, generation: &Value) -> Value {
    json!({"type": kind, "status": if status { "True" } else { "False" },
        "reason": reason, "message": message, "observedGeneration": generation})
}

/// Whether every backendRef of `route` names a Service in the table's view (`known_services`
/// holds `namespace/name`), and the reason when not, as `ResolvedRefs` reports it.
fn resolved_refs(route: &Value, known_services: &[String]) -> (bool, &'static str, String) {
    let namespace = namespace_of(route);
    for rule in route["spec"]["rules"].as_array().into_iter().flatten() {
        for backend in rule["backendRefs"].as_array().into_iter().flatten() {
            let kind = backend["kind"].as_str().unwrap_or("Service");
            let group = backend["group"].as_str().unwrap_or("");
            if kind != "Service" || !group.is_empty() {
                return (
                    false,
                    "InvalidKind",
                    format!("backendRef kind {kind:?} is not supported"),
                );
            }
            let key = format!(
                "{}/{}",
                backend["namespace"].as_str().unwrap_or(namespace),
                backend["name"].as_str().unwrap_or_default()
            );
            if !known_services.contains(&key) {
                return (
                    false,
                    "BackendNotFound",
                    format!("backend Service {key} not found"),
                );
            }
        }
    }
    (true, "ResolvedRefs", "All references resolved".into())
}

/// The `status.parents[]` entries the controller writes on `route`, one per parentRef naming a
/// Gateway of the `istio` class in `gateways`: `Accepted` (False with the [`attach`] reason when
/// no listener takes it) and `ResolvedRefs` (False when a backend Service is missing). A parentRef
/// naming a Service (GAMMA: the mesh routes what is sent to that Service) is accepted when the
/// Service exists, as Istio's mesh does.
pub fn route_parent_statuses(
    route: &Value,
    gateways: &[Value],
    namespace_labels: &HashMap<String, Map<String, Value>>,
    known_services: &[String],
) -> Vec<Value> {
    let generation = &route["metadata"]["generation"];
    let (resolved, resolved_reason, resolved_message) = resolved_refs(route, known_services);
    let resolved = condition(
        "ResolvedRefs",
        resolved,
        resolved_reason,
        &resolved_message,
        generation,
    );
    let mut parents = Vec::new();
    for parent_ref in route["spec"]["parentRefs"].as_array().into_iter().flatten() {
        let accepted = if parent_ref["kind"] == "Service" {
            let key = format!(
                "{}/{}",
                parent_ref["namespace"]
                    .as_str()
                    .unwrap_or(namespace_of(route)),
                parent_ref["name"].as_str().unwrap_or_default()
            );
            if known_services.contains(&key) {
                condition("Accepted", true, "Accepted", "Route was valid", generation)
            } else {
                let message = format!("parent Service {key} not found");
                condition("Accepted", false, "NoMatchingParent", &message, generation)
            }
        } else {
            let Some(gateway) = gateways.iter().find(|g| {
                g["spec"]["gatewayClassName"] == GATEWAY_CLASS
                    && names_gateway(parent_ref, namespace_of(route), g)
            }) else {
                continue;
            };
            match attach(gateway, route, parent_ref, namespace_labels) {
                Ok(_) => condition("Accepted", true, "Accepted", "Route was valid", generation),
                Err(reason) => condition(
                    "Accepted",
                    false,
                    reason,
                    &format!(
                        "no listener of Gateway {} accepts this route ({reason})",
                        key_of(gateway)
                    ),
                    generation,
                ),
            }
        };
        parents.push(json!({
            "parentRef": parent_ref,
            "controllerName": CONTROLLER_NAME,
            "conditions": [accepted, resolved.clone()],
        }));
    }
    parents
}

/// The name of the Service and Deployment serving a Gateway API Gateway (Istio's automated
/// deployment: `<gateway>-istio`).
pub fn deployment_name(gateway: &Value) -> String {
    format!(
        "{}-istio",
        gateway["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// The status of a Gateway of the `istio` class: its Service's host name as the address,
/// `Accepted` and `Programmed` True, and per listener the number of attached routes with
/// `Accepted`, `Programmed` and `ResolvedRefs` (False for protocols other than HTTP).
pub fn gateway_status(gateway: &Value, table: &RouteTable) -> Value {
    let generation = &gateway["metadata"]["generation"];
    let listeners = gateway["spec"]["listeners"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let mut attached = vec![0u64; listeners.len()];
    for route in &table.http_routes {
        let mut listeners_of_route = std::collections::BTreeSet::new();
        for parent_ref in route["spec"]["parentRefs"].as_array().into_iter().flatten() {
            if names_gateway(parent_ref, namespace_of(route), gateway)
                && let Ok(indices) = attach(gateway, route, parent_ref, &table.namespace_labels)
            {
                listeners_of_route.extend(indices);
            }
        }
        for index in listeners_of_route {
            attached[index] += 1;
        }
    }
    let listener_statuses: Vec<Value> = listeners
        .iter()
        .zip(attached)
        .map(|(listener, count)| {
            let supported = listener["protocol"].as_str().unwrap_or("HTTP") == "HTTP";
            let (reason, message) = if supported {
                ("Accepted", "No errors found")
            } else {
                (
                    "UnsupportedProtocol",
                    "the sandbox's gateways serve plain HTTP listeners only",
                )
            };
            json!({
                "name": listener["name"],
                "attachedRoutes": count,
                "supportedKinds": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}],
                "conditions": [
                    condition("Accepted", supported, reason, message, generation),
                    condition("Programmed", supported, if supported { "Programmed" } else { "Invalid" }, message, generation),
                    condition("ResolvedRefs", true, "ResolvedRefs", "No errors found", generation),
                ],
            })
        })
        .collect();
    let namespace = namespace_of(gateway);
    json!({
        "addresses": [{
            "type": "Hostname",
            "value": format!("{}.{namespace}.svc.cluster.local", deployment_name(gateway)),
        }],
        "conditions": [
            condition("Accepted", true, "Accepted", "Resource accepted", generation),
            condition(
                "Programmed",
                true,
                "Programmed",
                &format!(
                    "Resource programmed, assigned to service(s) {}.{namespace}.svc.cluster.local:{}",
                    deployment_name(gateway),
                    listeners
                        .first()
                        .and_then(|l| l["port"].as_u64())
                        .unwrap_or(80)
                ),
                generation,
            ),
        ],
        "listeners": listener_statuses,
    })
}

#[cfg(test)]
mod tests;
