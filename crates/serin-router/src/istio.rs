//! Istio objects of a Canary: the two DestinationRules and the VirtualService, weights written into
//! its routes and read back (the VirtualService is where the current step lives).

use crate::{Names, RouterError, custom_metadata, owner_reference};
use serde_json::{Map, Value, json};
pub use serin_core::plan::Routes;

/// The API version Flagger writes Istio objects with (served by every supported Istio).
pub const ISTIO_API_VERSION: &str = "networking.istio.io/v1beta1";

/// `[<svc>-canary, <svc>-primary]` DestinationRules with the service's `trafficPolicy`.
pub fn destination_rules(canary: &Value) -> [Value; 2] {
    let names = Names::of(canary);
    let policy = &canary["spec"]["service"]["trafficPolicy"];
    let rule = |host: &str| {
        let mut spec = json!({"host": host});
        if !policy.is_null() {
            spec["trafficPolicy"] = policy.clone();
        }
        json!({
            "apiVersion": ISTIO_API_VERSION, "kind": "DestinationRule",
            "metadata": {"name": host, "namespace": names.namespace,
                         "ownerReferences": [owner_reference(canary)]},
            "spec": spec,
        })
    };
    [rule(&names.canary), rule(&names.primary)]
}

fn destination(host: &str, weight: i64, port: Option<i64>) -> Value {
    let mut destination = json!({"host": host});
    if let Some(port) = port {
        destination["port"] = json!({"number": port});
    }
    json!({"destination": destination, "weight": weight})
}

/// Flagger's merge of the analysis match into the service match: the analysis conditions alone
/// when the service has none; otherwise each service condition with its `headers` and
/// `sourceLabels` replaced by those of each analysis condition that has them.
pub fn merge_matches(analysis: &[Value], service: &[Value]) -> Vec<Value> {
    if service.is_empty() {
        return analysis.to_vec();
    }
    let mut merged = Vec::new();
    for condition in analysis {
        for base in service {
            let mut copy = base.clone();
            for key in ["headers", "sourceLabels"] {
                if let Some(value) = condition.get(key) {
                    copy[key] = value.clone();
                }
            }
            merged.push(copy);
        }
    }
    merged
}

/// The VirtualService spec with the primary at `primary` and the canary at `canary` percent,
/// mirroring to the canary when `mirrored`.
fn spec(
    canary_object: &Value,
    primary: i64,
    canary: i64,
    mirrored: bool,
) -> Result<Value, RouterError> {
    let names = Names::of(canary_object);
    let service = &canary_object["spec"]["service"];
    let analysis = &canary_object["spec"]["analysis"];
    let delegation = service["delegation"].as_bool() == Some(true);
    let mut hosts: Vec<Value> = service["hosts"].as_array().cloned().unwrap_or_default();
    let gateways: Vec<Value> = service["gateways"]
        .as_array()
        .filter(|g| !g.is_empty())
        .cloned()
        .unwrap_or_else(|| vec![json!("mesh")]);
    if delegation
        && (!hosts.is_empty()
            || service["gateways"]
                .as_array()
                .is_some_and(|g| !g.is_empty()))
    {
        return Err(RouterError::DelegationWithHosts {
            service: names.apex,
            namespace: names.namespace,
        });
    }
    if !hosts.iter().any(|h| h == names.apex.as_str() || h == "*") {
        hosts.push(json!(names.apex));
    }
    let port = (service["portDiscovery"].as_bool() == Some(true)
        && (gateways.first().is_some_and(|g| g != "mesh") || delegation))
        .then(|| service["port"].as_i64())
        .flatten();
    let weighted = vec![
        destination(&names.primary, primary, port),
        destination(&names.canary, canary, port),
    ];
    let service_match: Vec<Value> = service["match"].as_array().cloned().unwrap_or_default();
    let route = |matches: &[Value], destinations: Vec<Value>| {
        let mut http = Map::new();
        if !matches.is_empty() {
            http.insert("match".into(), json!(matches));
        }
        for key in ["rewrite", "timeout", "retries", "corsPolicy", "headers"] {
            if let Some(value) = service.get(key).filter(|v| !v.is_null()) {
                http.insert(key.into(), value.clone());
            }
        }
        http.insert("route".into(), json!(destinations));
        Value::Object(http)
    };
    let analysis_match: Vec<Value> = analysis["match"].as_array().cloned().unwrap_or_default();
    let mut http = if analysis_match.is_empty() {
        vec![route(&service_match, weighted)]
    } else {
        vec![
            route(&merge_matches(&analysis_match, &service_match), weighted),
            route(
                &service_match,
                vec![destination(&names.primary, primary, port)],
            ),
        ]
    };
    if mirrored {
        http[0]["mirror"] = json!({"host": names.canary});
        if let Some(weight) = analysis["mirrorWeight"].as_i64().filter(|w| *w > 0) {
            http[0]["mirrorPercentage"] = json!({"value": weight});
        }
    }
    let (hosts, gateways) = if delegation {
        (Vec::new(), Vec::new())
    } else {
        (hosts, gateways)
    };
    Ok(json!({"hosts": hosts, "gateways": gateways, "http": http}))
}

/// The VirtualService `<svc>` routing everything to the primary (weights 100/0).
pub fn virtual_service(canary: &Value) -> Result<Value, RouterError> {
    let names = Names::of(canary);
    let (labels, annotations) = custom_metadata(&canary["spec"]["service"]["apex"]);
    Ok(json!({
        "apiVersion": ISTIO_API_VERSION, "kind": "VirtualService",
        "metadata": {"name": names.apex, "namespace": names.namespace, "labels": labels,
                     "annotations": annotations, "ownerReferences": [owner_reference(canary)]},
        "spec": spec(canary, 100, 0, false)?,
    }))
}

/// The VirtualService spec for a step: the decision core's weights and mirroring.
pub fn set_routes(canary: &Value, routes: Routes) -> Result<Value, RouterError> {
    spec(
        canary,
        routes.primary.into(),
        routes.canary.into(),
        routes.mirrored,
    )
}

/// Reads the weights back from a live VirtualService (its JSON form): the last http route that
/// sends to the canary.
pub fn get_routes(canary: &Value, virtual_service: &Value) -> Result<Routes, RouterError> {
    let names = Names::of(canary);
    let qualified = |host: &str, short: &str| {
        host == short || host.starts_with(&format!("{short}.{}", names.namespace))
    };
    let mut found = None;
    for http in virtual_service["spec"]["http"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let destinations = http["route"].as_array().map_or(&[][..], Vec::as_slice);
        let weight_of = |short: &str| {
            destinations
                .iter()
                .find(|d| {
                    d["destination"]["host"]
                        .as_str()
                        .is_some_and(|h| qualified(h, short))
                })
                .map(|d| d["weight"].as_i64().unwrap_or(0) as i32)
        };
        if let Some(canary_weight) = weight_of(&names.canary) {
            found = Some(Routes {
                primary: weight_of(&names.primary).unwrap_or(0),
                canary: canary_weight,
                mirrored: http["mirror"]["host"]
                    .as_str()
                    .is_some_and(|h| !h.is_empty()),
            });
        }
    }
    match found {
        Some(routes) if routes.primary != 0 || routes.canary != 0 => Ok(routes),
        _ => Err(RouterError::NoRoutes {
            service: names.apex,
            namespace: names.namespace,
        }),
    }
}
