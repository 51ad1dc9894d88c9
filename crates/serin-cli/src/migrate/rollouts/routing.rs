//! Where a Rollout's traffic goes: the Services, VirtualService and DestinationRule it names become
//! the Canary's `service`, and what Serin's router cannot carry over is warned about.

use crate::migrate::documents::{ISTIO_GROUP, name_of, namespace_of};
use crate::migrate::index::Index;
use crate::migrate::warnings::Report;
use serde_json::{Map, Value, json};

/// The Services, VirtualServices and DestinationRules a Rollout names: (role, kind, name).
pub(super) fn routing_references(rollout: &Value) -> Vec<(String, &'static str, String)> {
    let strategy = &rollout["spec"]["strategy"];
    let mut references = Vec::new();
    let mut add = |role: &str, kind: &'static str, name: &Value| {
        if let Some(name) = name.as_str().filter(|n| !n.is_empty()) {
            references.push((role.to_string(), kind, name.to_string()));
        }
    };
    let canary = &strategy["canary"];
    add("canaryService", "Service", &canary["canaryService"]);
    add("stableService", "Service", &canary["stableService"]);
    let istio = &canary["trafficRouting"]["istio"];
    add(
        "VirtualService",
        "VirtualService",
        &istio["virtualService"]["name"],
    );
    for service in istio["virtualServices"].as_array().into_iter().flatten() {
        add("VirtualService", "VirtualService", &service["name"]);
    }
    add(
        "DestinationRule",
        "DestinationRule",
        &istio["destinationRule"]["name"],
    );
    let blue_green = &strategy["blueGreen"];
    add("activeService", "Service", &blue_green["activeService"]);
    add("previewService", "Service", &blue_green["previewService"]);
    references
}

/// The VirtualServices a Rollout routes through, as `name` or `name.namespace`.
fn virtual_service_names(rollout: &Value) -> Vec<(String, Vec<String>)> {
    let istio = &rollout["spec"]["strategy"]["canary"]["trafficRouting"]["istio"];
    let routes = |reference: &Value| -> Vec<String> {
        reference["routes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r.as_str().map(str::to_string))
            .collect()
    };
    let mut names = Vec::new();
    if let Some(name) = istio["virtualService"]["name"].as_str() {
        names.push((name.to_string(), routes(&istio["virtualService"])));
    }
    for reference in istio["virtualServices"].as_array().into_iter().flatten() {
        if let Some(name) = reference["name"].as_str() {
            names.push((name.to_string(), routes(reference)));
        }
    }
    names
}

/// The apex Service name of the Canary made from a Rollout. Blue/green keeps the activeService's
/// name, which its users call; a canary takes the first VirtualService host that is a plain
/// Service name, else the Rollout's name (Flagger's default, the Deployment's name).
pub(super) fn canary_service_name(rollout: &Value, index: &Index) -> String {
    let strategy = &rollout["spec"]["strategy"];
    if let Some(active) = strategy["blueGreen"]["activeService"].as_str() {
        return active.to_string();
    }
    if let Some(virtual_service) = find_virtual_service(rollout, index) {
        let hosts = index.value(virtual_service)["spec"]["hosts"].as_array();
        if let Some(host) = hosts
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .find(|h| !h.contains('.') && !h.contains('*'))
        {
            return host.to_string();
        }
    }
    name_of(rollout).to_string()
}

fn find_virtual_service(rollout: &Value, index: &Index) -> Option<usize> {
    let (name, _) = virtual_service_names(rollout).into_iter().next()?;
    let (name, namespace) = match name.split_once('.') {
        Some((name, namespace)) => (name.to_string(), Some(namespace.to_string())),
        None => (name, namespace_of(rollout).map(str::to_string)),
    };
    index.find(ISTIO_GROUP, "VirtualService", &name, namespace.as_deref())
}

/// The Canary's `service`: port from the Services the Rollout names, hosts, gateways and route
/// settings from its VirtualService, traffic policy from its DestinationRule.
pub(super) fn canary_service(rollout: &Value, index: &Index, report: &mut Report) -> Value {
    let strategy = &rollout["spec"]["strategy"];
    let namespace = namespace_of(rollout);
    let service_name = canary_service_name(rollout, index);
    let mut service = Map::new();
    if service_name != name_of(rollout) {
        service.insert("name".into(), json!(service_name));
    }
    let mut route_port = None;
    let mut settings = Map::new();
    let virtual_service = find_virtual_service(rollout, index);
    let named = virtual_service_names(rollout);
    for (i, (name, _)) in named.iter().enumerate().skip(1) {
        report.field(
            format!("spec.strategy.canary.trafficRouting.istio.virtualServices[{i}]"),
            format!("Serin routes through one VirtualService per Canary; {name} is not converted"),
        );
    }
    if let Some(position) = virtual_service {
        let routes = named
            .first()
            .map(|(_, routes)| routes.clone())
            .unwrap_or_default();
        route_port = virtual_service_settings(
            index.value(position),
            &service_name,
            &routes,
            &mut settings,
            report,
        );
    } else if let Some((name, _)) = named.first() {
        report.field(
            "spec.strategy.canary.trafficRouting.istio.virtualService",
            format!("VirtualService {name} is not among the files given, so the Canary's hosts and gateways are Serin's defaults (the apex Service, mesh); add its file to carry them over"),
        );
    }
    let candidates: Vec<&str> = [
        &strategy["canary"]["stableService"],
        &strategy["canary"]["canaryService"],
        &strategy["blueGreen"]["activeService"],
        &strategy["blueGreen"]["previewService"],
    ]
    .iter()
    .filter_map(|v| v.as_str())
    .collect();
    let port = candidates.iter().find_map(|name| {
        let position = index.find("", "Service", name, namespace)?;
        let ports = index.value(position)["spec"]["ports"].as_array()?;
        ports
            .iter()
            .find(|p| route_port.is_some() && p["port"].as_i64() == route_port)
            .or_else(|| ports.first())
            .cloned()
    });
    match port {
        Some(port) => {
            service.insert("port".into(), port["port"].clone());
            if !port["targetPort"].is_null() {
                service.insert("targetPort".into(), port["targetPort"].clone());
            }
            if let Some(port_name) = port["name"].as_str().filter(|n| *n != "http") {
                service.insert("portName".into(), json!(port_name));
            }
            if !port["appProtocol"].is_null() {
                service.insert("appProtocol".into(), port["appProtocol"].clone());
            }
        }
        None => {
            let container_port = pod_template(rollout, index)["spec"]["containers"][0]["ports"][0]
                ["containerPort"]
                .as_i64();
            let (port, how) = match container_port {
                Some(port) => (port, "the first container port"),
                None => (80, "80"),
            };
            let looked_for = if candidates.is_empty() {
                "the Rollout names no Service".to_string()
            } else {
                format!(
                    "no Service {} among the files given",
                    candidates.join(" or ")
                )
            };
            report.field(
                "spec.strategy",
                format!(
                    "{looked_for}, so the Canary's spec.service.port is {how} ({port}); check it"
                ),
            );
            service.insert("port".into(), json!(port));
        }
    }
    if let Some(rule) =
        rollout["spec"]["strategy"]["canary"]["trafficRouting"]["istio"]["destinationRule"]["name"]
            .as_str()
        && let Some(position) = index.find(ISTIO_GROUP, "DestinationRule", rule, namespace)
        && let Some(policy) = index.value(position)["spec"].get("trafficPolicy")
    {
        service.insert("trafficPolicy".into(), policy.clone());
    }
    service.extend(settings);
    Value::Object(service)
}

/// The Rollout's pod template, or with workloadRef the referenced Deployment's (when given).
fn pod_template<'a>(rollout: &'a Value, index: &Index<'a>) -> &'a Value {
    let workload = &rollout["spec"]["workloadRef"];
    let referenced = workload["name"]
        .as_str()
        .and_then(|name| index.find("apps", "Deployment", name, namespace_of(rollout)));
    match referenced {
        Some(position) => &index.value(position)["spec"]["template"],
        None => &rollout["spec"]["template"],
    }
}

/// Copies a VirtualService's hosts, gateways and the managed route's settings into `settings`;
/// returns the destination port the route names, if any.
fn virtual_service_settings(
    virtual_service: &Value,
    service_name: &str,
    routes: &[String],
    settings: &mut Map<String, Value>,
    report: &mut Report,
) -> Option<i64> {
    let vs_name = name_of(virtual_service);
    let spec = &virtual_service["spec"];
    let hosts: Vec<Value> = spec["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|h| h.as_str() != Some(service_name))
        .cloned()
        .collect();
    if !hosts.is_empty() {
        settings.insert("hosts".into(), Value::Array(hosts));
    }
    if let Some(gateways) = spec.get("gateways") {
        settings.insert("gateways".into(), gateways.clone());
    }
    let path = format!(
        "spec.strategy.canary.trafficRouting.istio.virtualService (VirtualService {vs_name})"
    );
    for field in spec.as_object().into_iter().flat_map(Map::keys) {
        if !["hosts", "gateways", "http"].contains(&field.as_str()) {
            report.field(
                format!("{path}.spec.{field}"),
                "no equivalent in a Canary's service; left out of the VirtualService Serin writes",
            );
        }
    }
    let http = spec["http"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let managed = match routes.first() {
        Some(route) => http.iter().position(|r| r["name"].as_str() == Some(route)),
        None => (!http.is_empty()).then_some(0),
    };
    for (i, route) in http.iter().enumerate() {
        if Some(i) != managed {
            report.field(
                format!("{path}.spec.http[{i}]"),
                format!("route {:?} is not the one the Rollout shifts; Serin's VirtualService has only its own routes, so it is left out", route["name"].as_str().unwrap_or_default()),
            );
        }
    }
    let route = &http.get(managed?)?;
    for (field, value) in route.as_object().into_iter().flatten() {
        match field.as_str() {
            "timeout" | "retries" | "corsPolicy" | "headers" | "rewrite" | "match" => {
                settings.insert(field.clone(), value.clone());
            }
            "name" | "route" => {}
            other => report.field(
                format!("{path}.spec.http[{}].{other}", managed.unwrap_or_default()),
                "no equivalent in a Canary's service; left out of the VirtualService Serin writes",
            ),
        }
    }
    route["route"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|destination| destination["destination"]["port"]["number"].as_i64())
}

pub(super) fn traffic_routing_warnings(routing: &Value, path: &str, report: &mut Report) {
    for (field, value) in routing.as_object().into_iter().flatten() {
        match field.as_str() {
            "istio" => {
                for (key, _) in value.as_object().into_iter().flatten() {
                    if !["virtualService", "virtualServices", "destinationRule"].contains(&key.as_str()) {
                        report.field(format!("{path}.istio.{key}"), "no equivalent in Serin; left out");
                    }
                }
                let references = std::iter::once((
                    format!("{path}.istio.virtualService"),
                    &value["virtualService"],
                ))
                .chain(value["virtualServices"].as_array().into_iter().flatten().enumerate().map(
                    |(i, reference)| (format!("{path}.istio.virtualServices[{i}]"), reference),
                ));
                for (reference_path, reference) in references {
                    for key in reference.as_object().into_iter().flat_map(Map::keys) {
                        if !["name", "routes"].contains(&key.as_str()) {
                            report.field(
                                format!("{reference_path}.{key}"),
                                "no equivalent: Serin's VirtualService routes HTTP only; left out",
                            );
                        }
                    }
                }
                if !value["destinationRule"].is_null() {
                    report.field(
                        format!("{path}.istio.destinationRule"),
                        "subset-level splitting has no equivalent: Serin splits by host, between its Services <service>-primary and <service>-canary, each with its own DestinationRule (the trafficPolicy is carried over)",
                    );
                }
            }
            // The Canary's analysis.managedRoutes (canary_analysis).
            "managedRoutes" => {}
            "maxTrafficWeight" => report.field(
                format!("{path}.maxTrafficWeight"),
                "no equivalent: Serin's weights are percentages; left out",
            ),
            other => report.field(
                format!("{path}.{other}"),
                "not converted: the migration converts Istio routing only, so the Canary shifts traffic with an Istio VirtualService (the pods must be in the mesh); for the Gateway API or plain Services set spec.provider to gatewayapi:v1 or kubernetes by hand",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrate::documents::describe;
    use crate::migrate::tests::{documents, find, object_warnings, shop, warning};

    #[test]
    fn a_canary_rollouts_routing_comes_from_its_services_virtual_service_and_destination_rule() {
        let migration = shop();
        let output = documents(&migration);
        let service = &find(&output, "Canary", "shop")["spec"]["service"];
        // `shop` is both the Rollout's name and the VirtualService's plain Service host.
        assert_eq!(
            *service,
            json!({
                "port": 8080,
                "targetPort": 9898,
                "portName": "web",
                "trafficPolicy": {"loadBalancer": {"simple": "LEAST_REQUEST"}},
                "hosts": ["shop.example.com"],
                "gateways": ["mesh", "shop-gateway"],
                "timeout": "5s",
            })
        );
        let vs =
            "spec.strategy.canary.trafficRouting.istio.virtualService (VirtualService shop-vsvc)";
        assert!(
            warning(&migration, &format!("{vs}.spec.exportTo"))
                .message
                .starts_with("no equivalent")
        );
        assert!(
            warning(&migration, &format!("{vs}.spec.http[0]"))
                .message
                .contains("\"debug\"")
        );
        assert!(
            warning(&migration, &format!("{vs}.spec.http[1].fault"))
                .message
                .starts_with("no equivalent")
        );
        assert!(
            warning(
                &migration,
                "spec.strategy.canary.trafficRouting.istio.destinationRule"
            )
            .message
            .contains("subset-level")
        );
        for (object, fragment) in [
            (
                "Service shop-stable",
                "the stableService of Rollout shop: left out; Serin routes through its own Services shop,",
            ),
            (
                "Service shop-canary",
                "the canaryService of Rollout shop: left out, since Serin writes this Service itself as the Canary's canary Service",
            ),
            (
                "VirtualService shop-vsvc",
                "Serin writes its own VirtualService shop",
            ),
            (
                "DestinationRule shop-destrule",
                "DestinationRules shop-primary and shop-canary",
            ),
        ] {
            let said = object_warnings(&migration, object);
            assert!(
                said.iter().any(|m| m.contains(fragment)),
                "{object}: {said:?}"
            );
            assert!(
                !output.iter().any(|d| describe(d) == object),
                "{object} is left out"
            );
        }
        assert_eq!(
            object_warnings(&migration, "Service shop-stable")[0],
            "the stableService of Rollout shop: left out; Serin routes through its own Services shop, shop-primary and shop-canary. Delete it from the cluster once nothing calls it"
        );
    }
}
