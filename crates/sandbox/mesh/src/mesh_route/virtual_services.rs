//! Routing by VirtualServices and DestinationRules, with one level of delegation; a host no
//! VirtualService governs falls to the HTTPRoutes covering it.

use super::http_routes::*;
use super::matching::*;
use super::model::*;
use serde_json::{Map, Value};
use std::borrow::Cow;

/// Decides what happens to `request`, sent by a client in `client_namespace`. `pick` (in [0, 1))
/// chooses among weighted destinations, so callers supply the randomness.
pub fn route(table: &RouteTable, request: &Request, client_namespace: &str, pick: f64) -> Decision {
    let host = qualify(&request.authority, client_namespace);
    let port = port_of(&request.authority);
    let path_and_query = if request.query.is_empty() {
        request.path.clone()
    } else {
        format!("{}?{}", request.path, request.query)
    };
    let Some(vs) = virtual_service_for(table, &host) else {
        if let Some(decision) = gateway_route(table, request, &host, port, pick) {
            return decision;
        }
        return Decision::Forward(Box::new(Forward {
            destination: Destination {
                host,
                port,
                subset: None,
                subset_labels: Map::new(),
            },
            path_and_query,
            authority: None,
            request_headers: Vec::new(),
            response_headers: Vec::new(),
            timeout: None,
            retries: RetryPolicy::mesh_default(),
            fault: Fault::default(),
            mirror: None,
            routed_by: None,
        }));
    };
    route_by_virtual_service(table, vs, request, Scope::Mesh, port, pick)
}

/// The http routes of `vs` as they take effect: each route that delegates is replaced by the
/// routes of its delegate VirtualService merged with it ([`merge_delegate`]); each comes with the
/// namespace its destinations are expanded in. A missing delegate contributes nothing.
pub fn effective_routes<'a>(
    table: &'a RouteTable,
    vs: &'a Value,
) -> Vec<(Cow<'a, Value>, &'a str)> {
    let namespace = namespace_of(vs);
    let mut routes = Vec::new();
    for http in vs["spec"]["http"].as_array().into_iter().flatten() {
        let Some(delegate) = http["delegate"].as_object() else {
            routes.push((Cow::Borrowed(http), namespace));
            continue;
        };
        let name = delegate
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let delegate_namespace = delegate
            .get("namespace")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .unwrap_or(namespace);
        let Some(target) = table.virtual_services.iter().find(|candidate| {
            candidate["metadata"]["name"] == name && namespace_of(candidate) == delegate_namespace
        }) else {
            continue;
        };
        // One level only, as in Istio: a delegate's own delegating routes are ignored.
        for leaf in target["spec"]["http"].as_array().into_iter().flatten() {
            if leaf["delegate"].is_object() {
                continue;
            }
            if let Some(merged) = merge_delegate(http, leaf) {
                routes.push((Cow::Owned(merged), delegate_namespace));
            }
        }
    }
    routes
}

/// Whether a delegate's match entry conflicts with a root's (Istio's `hasConflict`): the
/// delegate must narrow the root, never contradict it.
pub(crate) fn match_conflicts(root: &Value, leaf: &Value) -> bool {
    let (root_uri, leaf_uri) = (&root["uri"], &leaf["uri"]);
    if root_uri.is_object() && leaf_uri.is_object() {
        let leaf_text = leaf_uri["prefix"]
            .as_str()
            .or_else(|| leaf_uri["exact"].as_str());
        if let Some(prefix) = root_uri["prefix"].as_str() {
            if !leaf_text.is_some_and(|text| text.starts_with(prefix)) {
                return true;
            }
        } else if let Some(exact) = root_uri["exact"].as_str() {
            if leaf_uri["exact"].as_str() != Some(exact) {
                return true;
            }
        } else {
            return true;
        }
    }
    for field in ["scheme", "method", "authority"] {
        if root[field].is_object() && leaf[field].is_object() && root[field] != leaf[field] {
            return true;
        }
    }
    for field in ["headers", "queryParams", "withoutHeaders"] {
        if let (Some(root_map), Some(leaf_map)) = (root[field].as_object(), leaf[field].as_object())
            && root_map
                .iter()
                .any(|(key, value)| leaf_map.get(key).is_some_and(|other| other != value))
        {
            return true;
        }
    }
    false
}

/// A delegate's match entry with the root's conditions filled in (Istio's
/// `mergeHTTPMatchRequest`): the delegate's fields win, the root's complete them.
pub(crate) fn merge_match(root: &Value, leaf: &Value) -> Value {
    let mut merged = leaf.clone();
    let Some(out) = merged.as_object_mut() else {
        return root.clone();
    };
    for field in [
        "uri",
        "scheme",
        "method",
        "authority",
        "port",
        "gateways",
        "ignoreUriCase",
        "sourceLabels",
        "sourceNamespace",
    ] {
        if !out.contains_key(field)
            && let Some(value) = root.get(field)
        {
            out.insert(field.into(), value.clone());
        }
    }
    for field in ["headers", "queryParams", "withoutHeaders"] {
        if let Some(root_map) = root[field].as_object() {
            let target = out
                .entry(field)
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(target) = target.as_object_mut() {
                for (key, value) in root_map {
                    target.entry(key).or_insert_with(|| value.clone());
                }
            }
        }
    }
    merged
}

/// One route of a delegate VirtualService merged with the root route that delegates to it, as
/// Istio merges them: every match entry of the delegate must narrow one of the root's (`None`
/// when one cannot: the route does not take effect), and the root's `rewrite`, `timeout`,
/// `retries`, `fault`, `mirror`, `headers`, ... apply where the delegate route has none.
pub fn merge_delegate(root: &Value, leaf: &Value) -> Option<Value> {
    let mut merged = leaf.clone();
    let root_matches = root["match"].as_array().cloned().unwrap_or_default();
    let leaf_matches = leaf["match"].as_array().cloned().unwrap_or_default();
    let matches = if leaf_matches.is_empty() {
        root_matches
    } else if root_matches.is_empty() {
        leaf_matches
    } else {
        let mut out = Vec::new();
        for leaf_entry in &leaf_matches {
            let narrowed: Vec<Value> = root_matches
                .iter()
                .filter(|root_entry| !match_conflicts(root_entry, leaf_entry))
                .map(|root_entry| merge_match(root_entry, leaf_entry))
                .collect();
            if narrowed.is_empty() {
                return None;
            }
            out.extend(narrowed);
        }
        out
    };
    let out = merged.as_object_mut()?;
    if matches.is_empty() {
        out.remove("match");
    } else {
        out.insert("match".into(), Value::Array(matches));
    }
    for field in [
        "rewrite",
        "directResponse",
        "timeout",
        "retries",
        "fault",
        "mirror",
        "mirrorPercent",
        "mirrorPercentage",
        "corsPolicy",
        "headers",
    ] {
        if !out.contains_key(field)
            && let Some(value) = root.get(field)
        {
            out.insert(field.into(), value.clone());
        }
    }
    Some(merged)
}

/// Routes `request` by the http routes of `vs` (delegation applied), as seen in `scope`; `port`
/// is the one the client asked for, which destinations without a port of their own inherit.
pub(crate) fn route_by_virtual_service(
    table: &RouteTable,
    vs: &Value,
    request: &Request,
    scope: Scope,
    port: Option<u16>,
    pick: f64,
) -> Decision {
    let vs_name = key_of(vs);
    let path_and_query = if request.query.is_empty() {
        request.path.clone()
    } else {
        format!("{}?{}", request.path, request.query)
    };
    for (http, namespace) in effective_routes(table, vs) {
        let http: &Value = &http;
        let entries = http["match"].as_array().filter(|m| !m.is_empty());
        let matched_uri = match entries {
            None => Value::Null,
            Some(entries) => match entries
                .iter()
                .find(|e| entry_applies(e, namespace_of(vs), scope) && entry_matches(e, request))
            {
                Some(entry) => entry["uri"].clone(),
                None => continue,
            },
        };
        if let Some(status) = http["directResponse"]["status"].as_u64() {
            return Decision::Respond {
                status: status as u16,
                body: http["directResponse"]["body"]["string"]
                    .as_str()
                    .unwrap_or_default()
                    .into(),
            };
        }
        let route = http["route"].as_array().map_or(&[][..], Vec::as_slice);
        let Some(chosen) = pick_weighted(route, pick) else {
            return Decision::Respond {
                status: 503,
                body: format!("no healthy upstream: every destination of {vs_name} has weight 0"),
            };
        };
        // Without a port of its own, a destination is reached on the port the client asked for,
        // as Envoy routes by the listener port.
        let destination = match resolve_destination(table, &chosen["destination"], namespace) {
            Ok(d) => Destination {
                port: d.port.or(port),
                ..d
            },
            Err((status, body)) => return Decision::Respond { status, body },
        };
        let mirror = match destination_value(&http["mirror"]) {
            None => None,
            Some(value) => {
                let percent =
                    percentage(&http["mirrorPercentage"], &http["mirrorPercent"]).unwrap_or(100.0);
                match resolve_destination(table, value, namespace) {
                    Ok(d) if percent > 0.0 => Some((
                        Destination {
                            port: d.port.or(port),
                            ..d
                        },
                        percent,
                    )),
                    _ => None,
                }
            }
        };
        let route_request = HeaderOps::parse(&http["headers"]["request"]);
        let destination_request = HeaderOps::parse(&chosen["headers"]["request"]);
        let authority = http["rewrite"]["authority"]
            .as_str()
            .map(String::from)
            .or_else(|| {
                [&route_request, &destination_request]
                    .iter()
                    .flat_map(|ops| ops.set.iter())
                    .find(|(name, _)| name == "host" || name == ":authority")
                    .map(|(_, v)| v.clone())
            });
        return Decision::Forward(Box::new(Forward {
            destination,
            path_and_query: rewrite_path(&http["rewrite"], &matched_uri, request),
            authority,
            request_headers: vec![route_request, destination_request],
            response_headers: vec![
                HeaderOps::parse(&http["headers"]["response"]),
                HeaderOps::parse(&chosen["headers"]["response"]),
            ],
            timeout: http["timeout"]
                .as_str()
                .and_then(parse_duration)
                .filter(|t| !t.is_zero()),
            retries: RetryPolicy::parse(&http["retries"]),
            fault: fault_of(&http["fault"]),
            mirror,
            routed_by: Some(vs_name),
        }));
    }
    Decision::Respond {
        status: 404,
        body: format!("no route: no http route of {vs_name} matches {path_and_query}"),
    }
}
