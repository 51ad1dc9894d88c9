//! Routing by Gateway API HTTPRoutes, in Gateway API's precedence.

use super::matching::*;
use super::model::*;
use serde_json::{Map, Value};

/// Whether an HTTPRoute hostname (wildcards only as the first label, excluding the apex) covers
/// `host`.
pub(crate) fn hostname_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => host.ends_with(&format!(".{suffix}")),
        None => pattern == host,
    }
}

/// Whether an HTTPRoute applies to `host`: by its hostnames, or (GAMMA) by a Service parentRef.
pub(crate) fn http_route_covers(route: &Value, host: &str) -> bool {
    let namespace = namespace_of(route);
    let by_hostname = route["spec"]["hostnames"].as_array().is_some_and(|names| {
        names
            .iter()
            .filter_map(Value::as_str)
            .any(|name| hostname_matches(name, host) || qualify(name, namespace) == host)
    });
    let by_service = route["spec"]["parentRefs"].as_array().is_some_and(|refs| {
        refs.iter().any(|r| {
            r["kind"] == "Service"
                && qualify(
                    r["name"].as_str().unwrap_or_default(),
                    r["namespace"].as_str().unwrap_or(namespace),
                ) == host
        })
    });
    by_hostname || by_service
}

pub(crate) fn gateway_path_matches(path_match: &Value, path: &str) -> bool {
    let value = path_match["value"].as_str().unwrap_or("/");
    match path_match["type"].as_str().unwrap_or("PathPrefix") {
        "Exact" => path == value,
        "RegularExpression" => anchored(value).is_some_and(|re| re.is_match(path)),
        _ => {
            // Path-separated prefix: `/abc` matches `/abc` and `/abc/def`, not `/abcd`.
            let prefix = value.trim_end_matches('/');
            prefix.is_empty() || path == prefix || path.starts_with(&format!("{prefix}/"))
        }
    }
}

pub(crate) fn gateway_value_matches(matcher: &Value, value: Option<String>) -> bool {
    let Some(value) = value else {
        return false;
    };
    let wanted = matcher["value"].as_str().unwrap_or_default();
    match matcher["type"].as_str().unwrap_or("Exact") {
        "RegularExpression" => anchored(wanted).is_some_and(|re| re.is_match(&value)),
        _ => value == wanted,
    }
}

pub(crate) fn gateway_match_holds(entry: &Value, request: &Request) -> bool {
    let path_ok = gateway_path_matches(&entry["path"], &request.path);
    let method_ok = entry["method"].as_str().is_none_or(|m| m == request.method);
    let headers_ok = entry["headers"].as_array().is_none_or(|headers| {
        headers.iter().all(|h| {
            let name = h["name"].as_str().unwrap_or_default().to_ascii_lowercase();
            gateway_value_matches(h, request.header(&name))
        })
    });
    let query_ok = entry["queryParams"].as_array().is_none_or(|params| {
        params.iter().all(|q| {
            gateway_value_matches(
                q,
                request.query_param(q["name"].as_str().unwrap_or_default()),
            )
        })
    });
    path_ok && method_ok && headers_ok && query_ok
}

/// Gateway API precedence: exact path, then longest prefix, then method, then most headers, then
/// most query params, then the oldest route and its `namespace/name`, then rule order.
pub(crate) fn specificity(
    route: &Value,
    rule: usize,
    entry: &Value,
) -> (u8, i64, u8, i64, i64, String, String, usize) {
    let path = &entry["path"];
    let exact = if path["type"] == "Exact" { 0 } else { 1 };
    let prefix_length = if path["type"].as_str().unwrap_or("PathPrefix") == "PathPrefix" {
        path["value"].as_str().unwrap_or("/").len() as i64
    } else {
        0
    };
    let count = |field: &str| entry[field].as_array().map_or(0, Vec::len) as i64;
    (
        exact,
        -prefix_length,
        if entry["method"].is_string() { 0 } else { 1 },
        -count("headers"),
        -count("queryParams"),
        route["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        format!(
            "{}/{}",
            namespace_of(route),
            route["metadata"]["name"].as_str().unwrap_or_default()
        ),
        rule,
    )
}

pub(crate) fn backend_destination(backend: &Value, namespace: &str) -> Destination {
    Destination {
        host: qualify(
            backend["name"].as_str().unwrap_or_default(),
            backend["namespace"].as_str().unwrap_or(namespace),
        ),
        port: backend["port"].as_u64().map(|p| p as u16),
        subset: None,
        subset_labels: Map::new(),
    }
}

/// Routes by the Gateway API HTTPRoutes covering `host`, with Istio's gateway semantics; `None`
/// when no HTTPRoute covers it.
pub(crate) fn gateway_route(
    table: &RouteTable,
    request: &Request,
    host: &str,
    port: Option<u16>,
    pick: f64,
) -> Option<Decision> {
    let routes: Vec<&Value> = table
        .http_routes
        .iter()
        .filter(|r| http_route_covers(r, host))
        .collect();
    if routes.is_empty() {
        return None;
    }
    Some(route_by_http_routes(&routes, request, host, port, pick))
}

/// Routes `request` (for `host`) by the rules of `routes`, in Gateway API precedence order.
pub(crate) fn route_by_http_routes(
    routes: &[&Value],
    request: &Request,
    host: &str,
    port: Option<u16>,
    pick: f64,
) -> Decision {
    let default_match = serde_json::json!({"path": {"type": "PathPrefix", "value": "/"}});
    let mut candidates = Vec::new();
    for route in routes {
        let rules = route["spec"]["rules"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        for (index, rule) in rules.iter().enumerate() {
            let matches = rule["matches"]
                .as_array()
                .filter(|m| !m.is_empty())
                .cloned()
                .unwrap_or_else(|| vec![default_match.clone()]);
            for entry in matches {
                candidates.push((specificity(route, index, &entry), *route, rule, entry));
            }
        }
    }
    candidates.sort_by(|a, b| a.0.cmp(&b.0));
    let Some((_, route, rule, _)) = candidates
        .into_iter()
        .find(|(_, _, _, entry)| gateway_match_holds(entry, request))
    else {
        return Decision::Respond {
            status: 404,
            body: format!(
                "no route: no HTTPRoute rule for {host} matches {}",
                request.path
            ),
        };
    };
    let namespace = namespace_of(route);
    let name = format!(
        "{namespace}/{}",
        route["metadata"]["name"].as_str().unwrap_or_default()
    );
    let backends = rule["backendRefs"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let weighted: Vec<Value> = backends
        .iter()
        .map(|b| {
            let mut b = b.clone();
            b["weight"] = serde_json::json!(b["weight"].as_u64().unwrap_or(1));
            b
        })
        .collect();
    let chosen = match weighted.len() {
        0 => None,
        // A single backend with weight above zero takes everything.
        1 => weighted.first().filter(|b| b["weight"].as_u64() > Some(0)),
        _ => pick_weighted(&weighted, pick),
    };
    let Some(chosen) = chosen else {
        return Decision::Respond {
            status: 500,
            body: format!("{name}: every backend of the rule has weight 0"),
        };
    };
    let mut destination = backend_destination(chosen, namespace);
    destination.port = destination.port.or(port);
    let filters = rule["filters"].as_array().map_or(&[][..], Vec::as_slice);
    let of_type = |kind: &str| filters.iter().find(|f| f["type"] == kind);
    let backend_filters = chosen["filters"].as_array().map_or(&[][..], Vec::as_slice);
    let backend_of_type = |kind: &str| backend_filters.iter().find(|f| f["type"] == kind);
    let ops = |filter: Option<&Value>, key: &str| {
        filter.map_or_else(HeaderOps::default, |f| HeaderOps::from_gateway(&f[key]))
    };
    let query = if request.query.is_empty() {
        String::new()
    } else {
        format!("?{}", request.query)
    };
    let rewrite = of_type("URLRewrite");
    let path = match rewrite.map(|r| &r["urlRewrite"]["path"]) {
        Some(p) if p["type"] == "ReplaceFullPath" => {
            p["replaceFullPath"].as_str().unwrap_or("/").to_string()
        }
        Some(p) if p["type"] == "ReplacePrefixMatch" => {
            let matched = rule["matches"][0]["path"]["value"].as_str().unwrap_or("/");
            let rest = request
                .path
                .strip_prefix(matched.trim_end_matches('/'))
                .unwrap_or(&request.path);
            let replacement = p["replacePrefixMatch"].as_str().unwrap_or("/");
            let joined = format!(
                "{}/{}",
                replacement.trim_end_matches('/'),
                rest.trim_start_matches('/')
            );
            if joined.len() > 1 {
                joined.trim_end_matches('/').to_string()
            } else {
                joined
            }
        }
        _ => request.path.clone(),
    };
    let mirror = of_type("RequestMirror").map(|m| {
        let percent = m["requestMirror"]["percent"]
            .as_f64()
            .or_else(|| {
                let fraction = &m["requestMirror"]["fraction"];
                Some(
                    fraction["numerator"].as_f64()? * 100.0
                        / fraction["denominator"].as_f64().unwrap_or(100.0),
                )
            })
            .unwrap_or(100.0);
        (
            backend_destination(&m["requestMirror"]["backendRef"], namespace),
            percent,
        )
    });
    Decision::Forward(Box::new(Forward {
        destination,
        path_and_query: format!("{path}{query}"),
        authority: rewrite
            .and_then(|r| r["urlRewrite"]["hostname"].as_str())
            .map(String::from),
        request_headers: vec![
            ops(of_type("RequestHeaderModifier"), "requestHeaderModifier"),
            ops(
                backend_of_type("RequestHeaderModifier"),
                "requestHeaderModifier",
            ),
        ],
        response_headers: vec![
            ops(of_type("ResponseHeaderModifier"), "responseHeaderModifier"),
            ops(
                backend_of_type("ResponseHeaderModifier"),
                "responseHeaderModifier",
            ),
        ],
        timeout: rule["timeouts"]["request"]
            .as_str()
            .and_then(parse_duration)
            .filter(|t| !t.is_zero()),
        retries: RetryPolicy::mesh_default(),
        fault: Fault::default(),
        mirror: mirror.filter(|(_, percent)| *percent > 0.0),
        routed_by: Some(name),
    }))
}
