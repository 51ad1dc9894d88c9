//! Istio's matching rules: which hosts and gateways an object applies to, match entries, weighted
//! picks, rewrites and faults.

use super::model::*;
use regex::Regex;
use serde_json::{Map, Value};

/// A `gateways` entry of a VirtualService in `namespace` as `namespace/name` (`name`,
/// `ns/name` or `name.ns.svc.cluster.local`); `None` for `mesh`.
pub fn gateway_key(entry: &str, namespace: &str) -> Option<String> {
    if entry == "mesh" {
        return None;
    }
    if entry.contains('/') {
        return Some(entry.to_string());
    }
    match entry.split_once('.') {
        Some((name, rest)) => Some(format!("{}/{name}", rest.split('.').next().unwrap_or(rest))),
        None => Some(format!("{namespace}/{entry}")),
    }
}

/// Whether a `gateways` list (of a VirtualService or a match entry, in `namespace`) applies in
/// `scope`; absent or empty means `mesh` only.
pub(crate) fn applies_to(gateways: &Value, namespace: &str, scope: Scope) -> bool {
    let list = gateways.as_array().filter(|l| !l.is_empty());
    match (scope, list) {
        (Scope::Mesh, None) => true,
        (Scope::Mesh, Some(list)) => list.iter().any(|g| g == "mesh"),
        (Scope::Gateways(_), None) => false,
        (Scope::Gateways(keys), Some(list)) => list
            .iter()
            .filter_map(Value::as_str)
            .filter_map(|g| gateway_key(g, namespace))
            .any(|key| keys.contains(&key)),
    }
}

/// Whether a match entry's own `gateways` (absent: those of its VirtualService) let it apply in
/// `scope`.
pub(crate) fn entry_applies(entry: &Value, namespace: &str, scope: Scope) -> bool {
    entry["gateways"].as_array().is_none_or(Vec::is_empty)
        || applies_to(&entry["gateways"], namespace, scope)
}

pub(crate) fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix('*') {
        Some(suffix) => host.ends_with(suffix),
        None => pattern == host,
    }
}

/// The `namespace/name` of an object.
pub(crate) fn key_of(object: &Value) -> String {
    format!(
        "{}/{}",
        namespace_of(object),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// Among VirtualServices whose hosts cover a request (each with whether it was by a wildcard), the
/// one that governs: an exact host beats a wildcard; among equals the oldest, then
/// `namespace/name`, wins (Istio does not merge them).
pub(crate) fn governing<'a>(
    candidates: impl Iterator<Item = (bool, &'a Value)>,
) -> Option<&'a Value> {
    candidates
        .map(|(wildcard, vs)| {
            let created = vs["metadata"]["creationTimestamp"].as_str().unwrap_or("");
            ((wildcard, created, key_of(vs)), vs)
        })
        .min_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, vs)| vs)
}

/// The VirtualService governing `host` for sidecars.
pub(crate) fn virtual_service_for<'a>(table: &'a RouteTable, host: &str) -> Option<&'a Value> {
    governing(
        table
            .virtual_services
            .iter()
            .filter(|vs| applies_to(&vs["spec"]["gateways"], namespace_of(vs), Scope::Mesh))
            .flat_map(|vs| {
                vs["spec"]["hosts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(move |pattern| (qualify(pattern, namespace_of(vs)), vs))
            })
            .filter(|(qualified, _)| host_matches(qualified, host))
            .map(|(qualified, vs)| (qualified.starts_with('*'), vs)),
    )
}

pub(crate) fn anchored(pattern: &str) -> Option<Regex> {
    Regex::new(&format!("^(?:{pattern})$")).ok()
}

/// Whether `value` satisfies a StringMatch (`exact`, `prefix`, `regex`; `{}` = present).
pub(crate) fn string_match(matcher: &Value, value: Option<&str>, ignore_case: bool) -> bool {
    let Some(value) = value else {
        return false;
    };
    let fold = |s: &str| {
        if ignore_case {
            s.to_ascii_lowercase()
        } else {
            s.to_string()
        }
    };
    if let Some(exact) = matcher["exact"].as_str() {
        return fold(value) == fold(exact);
    }
    if let Some(prefix) = matcher["prefix"].as_str() {
        return fold(value).starts_with(&fold(prefix));
    }
    if let Some(pattern) = matcher["regex"].as_str() {
        return pattern == "*" || anchored(pattern).is_some_and(|re| re.is_match(value));
    }
    true
}

/// Whether one HTTPMatchRequest entry holds for the request (all its conditions).
pub(crate) fn entry_matches(entry: &Value, request: &Request) -> bool {
    let ignore_case = entry["ignoreUriCase"].as_bool().unwrap_or(false);
    if !entry["uri"].is_null() && !string_match(&entry["uri"], Some(&request.path), ignore_case) {
        return false;
    }
    if !entry["method"].is_null() && !string_match(&entry["method"], Some(&request.method), false) {
        return false;
    }
    if !entry["authority"].is_null()
        && !string_match(&entry["authority"], Some(&request.authority), false)
    {
        return false;
    }
    if let Some(headers) = entry["headers"].as_object() {
        for (name, matcher) in headers {
            let value = request.header(&name.to_ascii_lowercase());
            if !string_match(matcher, value.as_deref(), false) {
                return false;
            }
        }
    }
    if let Some(headers) = entry["withoutHeaders"].as_object() {
        for (name, matcher) in headers {
            let value = request.header(&name.to_ascii_lowercase());
            let presence_only =
                matcher.as_object().is_none_or(|m| m.is_empty()) || matcher["regex"] == "*";
            let matched = if presence_only {
                value.is_some()
            } else {
                // A missing header counts as an empty value for value matchers.
                string_match(matcher, Some(value.as_deref().unwrap_or("")), false)
            };
            if matched {
                return false;
            }
        }
    }
    if let Some(params) = entry["queryParams"].as_object() {
        for (name, matcher) in params {
            if !string_match(matcher, request.query_param(name).as_deref(), false) {
                return false;
            }
        }
    }
    true
}

pub(crate) fn resolve_destination(
    table: &RouteTable,
    value: &Value,
    namespace: &str,
) -> Result<Destination, (u16, String)> {
    let host = qualify(value["host"].as_str().unwrap_or_default(), namespace);
    let port = value["port"]["number"].as_u64().map(|p| p as u16);
    let subset = value["subset"].as_str().map(String::from);
    let mut subset_labels = Map::new();
    if let Some(name) = &subset {
        let defined = table
            .destination_rules
            .iter()
            .filter(|dr| {
                qualify(
                    dr["spec"]["host"].as_str().unwrap_or_default(),
                    namespace_of(dr),
                ) == host
            })
            .flat_map(|dr| {
                dr["spec"]["subsets"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .find(|s| s["name"] == name.as_str());
        let Some(defined) = defined else {
            return Err((
                503,
                format!(
                    "no healthy upstream: subset {name:?} of {host} is not defined by any DestinationRule"
                ),
            ));
        };
        subset_labels = defined["labels"].as_object().cloned().unwrap_or_default();
    }
    Ok(Destination {
        host,
        port,
        subset,
        subset_labels,
    })
}

/// Picks one destination of `route[]` by weight with `pick` in [0, 1): a single destination takes
/// everything; otherwise each gets weight / sum and zero weights get nothing.
pub(crate) fn pick_weighted(route: &[Value], pick: f64) -> Option<&Value> {
    if route.len() == 1 {
        return route.first();
    }
    let weights: Vec<u64> = route
        .iter()
        .map(|d| d["weight"].as_u64().unwrap_or(0))
        .collect();
    let total: u64 = weights.iter().sum();
    if total == 0 {
        return None;
    }
    let mut target = (pick.clamp(0.0, 0.999_999_999) * total as f64) as u64;
    for (destination, weight) in route.iter().zip(weights) {
        if target < weight {
            return Some(destination);
        }
        target -= weight;
    }
    route.last()
}

pub(crate) fn rewrite_path(rewrite: &Value, matched_uri: &Value, request: &Request) -> String {
    let query = if request.query.is_empty() {
        String::new()
    } else {
        format!("?{}", request.query)
    };
    let Some(replacement) = rewrite["uri"].as_str() else {
        return format!("{}{query}", request.path);
    };
    let path = if let Some(prefix) = matched_uri["prefix"].as_str() {
        format!(
            "{replacement}{}",
            &request.path[prefix.len().min(request.path.len())..]
        )
    } else if matched_uri["exact"].is_string() || matched_uri["regex"].is_string() {
        replacement.to_string()
    } else {
        // No uri match is an implicit prefix `/`.
        format!("{replacement}{}", request.path.trim_start_matches('/'))
    };
    format!("{path}{query}")
}

pub(crate) fn percentage(value: &Value, legacy: &Value) -> Option<f64> {
    value["value"].as_f64().or_else(|| legacy.as_f64())
}

pub(crate) fn fault_of(value: &Value) -> Fault {
    let delay = value["delay"]["fixedDelay"]
        .as_str()
        .and_then(parse_duration)
        .zip(percentage(
            &value["delay"]["percentage"],
            &value["delay"]["percent"],
        ));
    let abort = value["abort"]["httpStatus"]
        .as_u64()
        .map(|s| s as u16)
        .zip(percentage(&value["abort"]["percentage"], &Value::Null));
    Fault { delay, abort }
}

pub(crate) fn destination_value(value: &Value) -> Option<&Value> {
    value.get("host").is_some().then_some(value)
}
