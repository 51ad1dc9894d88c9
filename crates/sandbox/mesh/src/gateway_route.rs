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
    let mut parents = Vec::new();
    for parent_ref in route["spec"]["parentRefs"].as_array().into_iter().flatten() {
        if parent_ref["kind"] == "Service" {
            let key = format!(
                "{}/{}",
                parent_ref["namespace"]
                    .as_str()
                    .unwrap_or(namespace_of(route)),
                parent_ref["name"].as_str().unwrap_or_default()
            );
            let accepted = if known_services.contains(&key) {
                condition("Accepted", true, "Accepted", "Route was valid", generation)
            } else {
                let message = format!("parent Service {key} not found");
                condition("Accepted", false, "NoMatchingParent", &message, generation)
            };
            parents.push(json!({
                "parentRef": parent_ref,
                "controllerName": CONTROLLER_NAME,
                "conditions": [
                    accepted,
                    condition("ResolvedRefs", resolved, resolved_reason, &resolved_message, generation),
                ],
            }));
            continue;
        }
        let Some(gateway) = gateways.iter().find(|g| {
            g["spec"]["gatewayClassName"] == GATEWAY_CLASS
                && names_gateway(parent_ref, namespace_of(route), g)
        }) else {
            continue;
        };
        let accepted = match attach(gateway, route, parent_ref, namespace_labels) {
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
        };
        parents.push(json!({
            "parentRef": parent_ref,
            "controllerName": CONTROLLER_NAME,
            "conditions": [
                accepted,
                condition("ResolvedRefs", resolved, resolved_reason, &resolved_message, generation),
            ],
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
mod tests {
    use super::*;
    use crate::mesh_route::Forward;

    fn request(authority: &str, path: &str, headers: &[(&str, &str)]) -> Request {
        Request {
            method: "GET".into(),
            authority: authority.into(),
            path: path.into(),
            query: String::new(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn forward(decision: Decision) -> Forward {
        match decision {
            Decision::Forward(f) => *f,
            other => panic!("expected a forward, got {other:?}"),
        }
    }

    fn ingress_labels() -> Map<String, Value> {
        json!({"app": "istio-ingressgateway", "istio": "ingressgateway"})
            .as_object()
            .cloned()
            .unwrap()
    }

    fn public_gateway() -> Value {
        json!({"metadata": {"name": "public-gateway", "namespace": "istio-system"},
            "spec": {"selector": {"istio": "ingressgateway"}, "servers": [
                {"port": {"number": 80, "name": "http", "protocol": "HTTP"}, "hosts": ["*"]},
                {"port": {"number": 443, "name": "https", "protocol": "HTTPS"}, "hosts": ["*"],
                 "tls": {"mode": "SIMPLE"}}]}})
    }

    fn ingress_table(virtual_services: Vec<Value>) -> RouteTable {
        RouteTable {
            virtual_services,
            istio_gateways: vec![
                public_gateway(),
                json!({"metadata": {"name": "internal", "namespace": "test"},
                    "spec": {"selector": {"istio": "internal-gateway"}, "servers": [
                        {"port": {"number": 80, "protocol": "HTTP"}, "hosts": ["*"]}]}}),
            ],
            ..RouteTable::default()
        }
    }

    fn podinfo_vs() -> Value {
        json!({"metadata": {"name": "podinfo", "namespace": "test"},
            "spec": {"hosts": ["*"], "gateways": ["istio-system/public-gateway"], "http": [
                {"match": [{"headers": {"cookie": {"regex": ".*canary=always.*"}}}],
                 "route": [{"destination": {"host": "podinfo-canary"}}]},
                {"route": [
                    {"destination": {"host": "podinfo-primary"}, "weight": 100},
                    {"destination": {"host": "podinfo-canary"}, "weight": 0,
                     "headers": {"response": {"add": {"Set-Cookie": "canary=always; Max-Age=60"}}}}]}]}})
    }

    #[test]
    fn a_gateway_pod_serves_the_gateways_selecting_it_and_their_http_servers() {
        let table = ingress_table(vec![]);
        let bound = istio_gateways_for(&table, &ingress_labels(), None);
        assert_eq!(
            bound,
            [BoundGateway {
                key: "istio-system/public-gateway".into(),
                namespace: "istio-system".into(),
                hosts: vec!["*".into()],
            }],
            "the HTTPS server is not served; the internal gateway selects other pods"
        );
        let scoped = BoundGateway {
            key: "istio-system/scoped".into(),
            namespace: "istio-system".into(),
            hosts: vec!["test/*.example.com".into(), "./admin.local".into()],
        };
        assert!(server_admits(&scoped, "test", "app.example.com"));
        assert!(!server_admits(&scoped, "other", "app.example.com"));
        assert!(!server_admits(&scoped, "test", "example.org"));
        assert!(server_admits(&scoped, "istio-system", "admin.local"));
        assert!(!server_admits(&scoped, "test", "admin.local"));
    }

    #[test]
    fn ingress_routing_takes_the_virtual_services_bound_to_the_gateway() {
        let mesh_only = json!({"metadata": {"name": "podinfo-mesh", "namespace": "test"},
            "spec": {"hosts": ["*"], "http": [{"route": [{"destination": {"host": "elsewhere"}}]}]}});
        let exact = json!({"metadata": {"name": "app", "namespace": "test"},
            "spec": {"hosts": ["app.example.com"], "gateways": ["istio-system/public-gateway", "mesh"],
                     "http": [{"route": [{"destination": {"host": "app"}}]}]}});
        let table = ingress_table(vec![mesh_only, podinfo_vs(), exact]);
        let gateways = istio_gateways_for(&table, &ingress_labels(), Some(8080));
        let to = |authority: &str, headers: &[(&str, &str)]| {
            forward(istio_ingress_route(
                &table,
                &gateways,
                &request(authority, "/", headers),
                0.5,
            ))
        };
        let f = to("localhost:8080", &[]);
        assert_eq!(f.destination.host, "podinfo-primary.test.svc.cluster.local");
        assert_eq!(
            f.destination.port, None,
            "the gateway's port is not passed on"
        );
        assert_eq!(f.routed_by.as_deref(), Some("test/podinfo"));
        assert_eq!(
            to("app.example.com", &[]).destination.host,
            "app.test.svc.cluster.local",
            "an exact host beats *"
        );
        let sticky = to("localhost", &[("cookie", "a=1; canary=always")]);
        assert_eq!(
            sticky.destination.host,
            "podinfo-canary.test.svc.cluster.local"
        );

        // Gateways of other pods, and bindings by the short name in another namespace, do not count.
        let internal = istio_gateways_for(
            &table,
            &json!({"istio": "internal-gateway"})
                .as_object()
                .cloned()
                .unwrap(),
            None,
        );
        assert!(matches!(
            istio_ingress_route(&table, &internal, &request("localhost", "/", &[]), 0.5),
            Decision::Respond { status: 404, .. }
        ));
    }

    #[test]
    fn a_destinations_response_headers_apply_at_the_gateway() {
        let mut vs = podinfo_vs();
        vs["spec"]["http"][1]["route"][0]["weight"] = json!(0);
        vs["spec"]["http"][1]["route"][1]["weight"] = json!(100);
        let table = ingress_table(vec![vs]);
        let gateways = istio_gateways_for(&table, &ingress_labels(), None);
        let f = forward(istio_ingress_route(
            &table,
            &gateways,
            &request("localhost", "/", &[]),
            0.5,
        ));
        assert_eq!(f.destination.host, "podinfo-canary.test.svc.cluster.local");
        assert_eq!(
            f.response_headers[1].add,
            [(
                "set-cookie".to_string(),
                "canary=always; Max-Age=60".to_string()
            )]
        );
    }

    fn root_vs() -> Value {
        json!({"metadata": {"name": "root", "namespace": "istio-system"},
            "spec": {"hosts": ["*"], "gateways": ["public-gateway"], "http": [
                {"match": [{"uri": {"prefix": "/podinfo/"}}],
                 "rewrite": {"uri": "/"},
                 "headers": {"request": {"set": {"x-root": "yes"}}},
                 "delegate": {"name": "podinfo-delegate", "namespace": "test"}},
                {"route": [{"destination": {"host": "fallback.test.svc.cluster.local"}}]}]}})
    }

    fn delegate_vs() -> Value {
        json!({"metadata": {"name": "podinfo-delegate", "namespace": "test"},
            "spec": {"http": [
                {"match": [{"headers": {"x-canary": {"exact": "insider"}}}],
                 "route": [{"destination": {"host": "podinfo-canary"}}]},
                {"match": [{"uri": {"prefix": "/podinfo/api/"}}],
                 "rewrite": {"uri": "/api/"},
                 "route": [{"destination": {"host": "podinfo-primary"}}]},
                {"match": [{"uri": {"prefix": "/other"}}],
                 "route": [{"destination": {"host": "never"}}]},
                {"route": [{"destination": {"host": "podinfo-primary"}}]}]}})
    }

    #[test]
    fn delegation_merges_the_root_match_and_rewrite_into_the_delegates_routes() {
        let root = &root_vs()["spec"]["http"][0];
        let delegate = delegate_vs();
        let leaf = |i: usize| &delegate["spec"]["http"][i];
        let merged = merge_delegate_checked(root, leaf(0));
        assert_eq!(
            merged["match"],
            json!([{"uri": {"prefix": "/podinfo/"}, "headers": {"x-canary": {"exact": "insider"}}}])
        );
        assert_eq!(merged["rewrite"], json!({"uri": "/"}), "the root's rewrite");
        assert_eq!(merged["headers"], root["headers"]);
        assert!(merged.get("delegate").is_none());
        let own = merge_delegate_checked(root, leaf(1));
        assert_eq!(
            own["rewrite"],
            json!({"uri": "/api/"}),
            "the delegate's own rewrite wins"
        );
        assert_eq!(own["match"], json!([{"uri": {"prefix": "/podinfo/api/"}}]));
        assert_eq!(
            mesh_route::merge_delegate(root, leaf(2)),
            None,
            "/other does not narrow /podinfo/"
        );
        assert_eq!(
            merge_delegate_checked(root, leaf(3))["match"],
            json!([{"uri": {"prefix": "/podinfo/"}}])
        );
    }

    fn merge_delegate_checked(root: &Value, leaf: &Value) -> Value {
        mesh_route::merge_delegate(root, leaf).expect("no conflict")
    }

    #[test]
    fn a_root_virtual_service_routes_through_its_delegate() {
        let table = ingress_table(vec![root_vs(), delegate_vs()]);
        let gateways = istio_gateways_for(&table, &ingress_labels(), None);
        let to = |path: &str, headers: &[(&str, &str)]| {
            forward(istio_ingress_route(
                &table,
                &gateways,
                &request("podinfo.example.com", path, headers),
                0.5,
            ))
        };
        let insider = to("/podinfo/version", &[("x-canary", "insider")]);
        assert_eq!(
            insider.destination.host, "podinfo-canary.test.svc.cluster.local",
            "delegate destinations are expanded in the delegate's namespace"
        );
        assert_eq!(
            insider.path_and_query, "/version",
            "the root's rewrite applied"
        );
        assert_eq!(
            insider.request_headers[0].set,
            [("x-root".into(), "yes".into())]
        );
        assert_eq!(insider.routed_by.as_deref(), Some("istio-system/root"));
        let api = to("/podinfo/api/info", &[]);
        assert_eq!(
            api.destination.host,
            "podinfo-primary.test.svc.cluster.local"
        );
        assert_eq!(api.path_and_query, "/api/info");
        assert_eq!(to("/podinfo/", &[]).path_and_query, "/");
        assert_eq!(
            to("/elsewhere", &[]).destination.host,
            "fallback.test.svc.cluster.local",
            "a request outside the root's match skips the delegate"
        );
        // Without the delegate, the delegating route takes nothing.
        let orphan = ingress_table(vec![root_vs()]);
        let f = forward(istio_ingress_route(
            &orphan,
            &gateways,
            &request("localhost", "/podinfo/x", &[]),
            0.5,
        ));
        assert_eq!(f.destination.host, "fallback.test.svc.cluster.local");
    }

    #[test]
    fn delegation_applies_at_sidecars_too() {
        let root = json!({"metadata": {"name": "podinfo", "namespace": "test"},
            "spec": {"hosts": ["podinfo"], "http": [
                {"delegate": {"name": "podinfo-delegate"}}]}});
        let table = RouteTable {
            virtual_services: vec![root, delegate_vs()],
            ..RouteTable::default()
        };
        let f = forward(mesh_route::route(
            &table,
            &request("podinfo.test", "/", &[("x-canary", "insider")]),
            "test",
            0.5,
        ));
        assert_eq!(f.destination.host, "podinfo-canary.test.svc.cluster.local");
    }

    fn gateway(listeners: Value) -> Value {
        json!({"metadata": {"name": "gateway", "namespace": "istio-ingress", "generation": 2},
            "spec": {"gatewayClassName": "istio", "listeners": listeners}})
    }

    fn route_in(namespace: &str, hostnames: Value, parent: Value) -> Value {
        json!({"metadata": {"name": "podinfo", "namespace": namespace, "generation": 1},
            "spec": {"parentRefs": [parent], "hostnames": hostnames, "rules": [
                {"backendRefs": [{"name": "podinfo-primary", "port": 9898, "weight": 0},
                                 {"name": "podinfo-canary", "port": 9898, "weight": 100}]}]}})
    }

    #[test]
    fn http_routes_attach_to_listeners_by_section_namespace_and_hostname() {
        let gw = gateway(json!([
            {"name": "same", "port": 80, "protocol": "HTTP"},
            {"name": "all", "port": 80, "protocol": "HTTP", "hostname": "*.example.com",
             "allowedRoutes": {"namespaces": {"from": "All"}}},
            {"name": "selected", "port": 8080, "protocol": "HTTP",
             "allowedRoutes": {"namespaces": {"from": "Selector",
                "selector": {"matchLabels": {"shared-gateway-access": "true"}}}}}]));
        let parent = json!({"name": "gateway", "namespace": "istio-ingress"});
        let mut labels = HashMap::new();
        labels.insert(
            "team".to_string(),
            json!({"shared-gateway-access": "true"})
                .as_object()
                .cloned()
                .unwrap(),
        );
        let attach_in = |namespace: &str, hostnames: Value, parent: Value| {
            let route = route_in(namespace, hostnames, parent.clone());
            attach(&gw, &route, &parent, &labels)
        };
        assert_eq!(
            attach_in("istio-ingress", json!([]), parent.clone()),
            Ok(vec![0, 1]),
            "not the Selector listener: istio-ingress lacks the label"
        );
        assert_eq!(
            attach_in("test", json!(["app.example.com"]), parent.clone()),
            Ok(vec![1])
        );
        assert_eq!(attach_in("team", json!([]), parent.clone()), Ok(vec![1, 2]));
        assert_eq!(
            attach_in("test", json!(["app.example.org"]), parent.clone()),
            Err("NoMatchingListenerHostname")
        );
        assert_eq!(
            attach_in(
                "test",
                json!([]),
                json!({"name": "gateway", "namespace": "istio-ingress", "sectionName": "same"})
            ),
            Err("NotAllowedByListeners")
        );
        assert_eq!(
            attach_in(
                "istio-ingress",
                json!([]),
                json!({"name": "gateway", "sectionName": "nope"})
            ),
            Err("NoMatchingParent")
        );
        assert_eq!(
            attach_in(
                "team",
                json!([]),
                json!({"name": "gateway", "namespace": "istio-ingress", "port": 8080})
            ),
            Ok(vec![2])
        );
        assert!(!names_gateway(
            &json!({"name": "gateway", "kind": "Service"}),
            "istio-ingress",
            &gw
        ));
    }

    #[test]
    fn a_gateway_api_gateway_routes_its_attached_routes_and_reports_status() {
        let gw = gateway(json!([{"name": "http", "port": 80, "protocol": "HTTP",
            "allowedRoutes": {"namespaces": {"from": "All"}}}]));
        let attached = route_in(
            "test",
            json!(["app.example.com"]),
            json!({"name": "gateway", "namespace": "istio-ingress"}),
        );
        let mut elsewhere = route_in("test", json!([]), json!({"name": "other-gateway"}));
        elsewhere["metadata"]["name"] = json!("elsewhere");
        let table = RouteTable {
            http_routes: vec![attached.clone(), elsewhere.clone()],
            gateways: vec![gw.clone()],
            ..RouteTable::default()
        };
        let f = forward(gateway_api_route(
            &table,
            &gw,
            &request("app.example.com:80", "/", &[]),
            0.1,
        ));
        assert_eq!(f.destination.host, "podinfo-canary.test.svc.cluster.local");
        assert_eq!(f.destination.port, Some(9898));
        assert!(matches!(
            gateway_api_route(&table, &gw, &request("other.example.com", "/", &[]), 0.1),
            Decision::Respond { status: 404, .. }
        ));

        let status = gateway_status(&gw, &table);
        assert_eq!(
            status["addresses"],
            json!([{"type": "Hostname", "value": "gateway-istio.istio-ingress.svc.cluster.local"}])
        );
        assert_eq!(status["conditions"][1]["type"], "Programmed");
        assert_eq!(status["conditions"][1]["observedGeneration"], 2);
        assert_eq!(status["listeners"][0]["attachedRoutes"], 1);

        let services = vec![
            "test/podinfo-primary".to_string(),
            "test/podinfo-canary".to_string(),
        ];
        let parents = route_parent_statuses(
            &attached,
            &table.gateways,
            &table.namespace_labels,
            &services,
        );
        assert_eq!(parents.len(), 1);
        assert_eq!(parents[0]["controllerName"], CONTROLLER_NAME);
        assert_eq!(parents[0]["conditions"][0]["status"], "True");
        assert_eq!(parents[0]["conditions"][1]["status"], "True");
        assert!(
            route_parent_statuses(
                &elsewhere,
                &table.gateways,
                &table.namespace_labels,
                &services
            )
            .is_empty(),
            "a parent that is not an istio Gateway gets no entry"
        );
        let missing =
            route_parent_statuses(&attached, &table.gateways, &table.namespace_labels, &[]);
        assert_eq!(missing[0]["conditions"][1]["reason"], "BackendNotFound");

        let mut mesh_route = attached.clone();
        mesh_route["spec"]["parentRefs"] =
            json!([{"group": "core", "kind": "Service", "name": "podinfo", "port": 9898}]);
        let with_apex = [services.clone(), vec!["test/podinfo".to_string()]].concat();
        let mesh = route_parent_statuses(&mesh_route, &[], &table.namespace_labels, &with_apex);
        assert_eq!(mesh.len(), 1);
        assert_eq!(mesh[0]["parentRef"]["kind"], "Service");
        assert_eq!(mesh[0]["conditions"][0]["status"], "True");
        let orphan = route_parent_statuses(&mesh_route, &[], &table.namespace_labels, &services);
        assert_eq!(orphan[0]["conditions"][0]["reason"], "NoMatchingParent");

        let same_only = gateway(json!([{"name": "http", "port": 80, "protocol": "HTTP"}]));
        let refused =
            route_parent_statuses(&attached, &[same_only], &table.namespace_labels, &services);
        assert_eq!(refused[0]["conditions"][0]["status"], "False");
        assert_eq!(
            refused[0]["conditions"][0]["reason"],
            "NotAllowedByListeners"
        );
    }
}
