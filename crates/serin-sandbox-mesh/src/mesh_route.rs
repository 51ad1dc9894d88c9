//! Istio routing as a pure function: given the VirtualServices and DestinationRules in force and one
//! HTTP request, which destination gets it and with what rewrite, headers, timeout, retries, fault
//! and mirror. The mesh proxy does the I/O; the choices live here so they can be tested one by one.
//!
//! Semantics follow Istio's (`docs/sandbox.md` lists the subset): hosts with short names expanded in
//! the object's namespace, the `mesh` gateway (gateway pods use [`Scope::Gateways`], see
//! [`crate::gateway_route`]), ordered `http[]` routes where the first matching entry wins (OR
//! across match entries, AND inside one), anchored regexes, weights as shares of their sum with
//! zero-weight destinations dropped, subsets from DestinationRules, and one level of delegation
//! ([`effective_routes`]).

use regex::Regex;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::time::Duration;

/// The parts of a request that routing looks at.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The Host header (or absolute-form authority), port included or not.
    pub authority: String,
    /// The path, without the query string.
    pub path: String,
    /// The query string without `?` (may be empty).
    pub query: String,
    /// Request headers with lower-case names, in arrival order.
    pub headers: Vec<(String, String)>,
}

impl Request {
    fn header(&self, name: &str) -> Option<String> {
        let values: Vec<&str> = self
            .headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect();
        (!values.is_empty()).then(|| values.join(","))
    }

    fn query_param(&self, name: &str) -> Option<String> {
        self.query.split('&').find_map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (key == name).then(|| value.to_string())
        })
    }
}

/// The namespace of a routing object, which its short host names are expanded in.
pub(crate) fn namespace_of(object: &Value) -> &str {
    object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
}

/// The routing configuration of the mesh.
#[derive(Clone, Debug, Default)]
pub struct RouteTable {
    /// VirtualServices (`networking.istio.io`, any served version).
    pub virtual_services: Vec<Value>,
    /// DestinationRules.
    pub destination_rules: Vec<Value>,
    /// Gateway API HTTPRoutes (`gateway.networking.k8s.io`), used for hosts no VirtualService
    /// covers and by the Gateway API gateways they attach to.
    pub http_routes: Vec<Value>,
    /// Istio Gateways (`networking.istio.io`), which bind VirtualServices to gateway pods.
    pub istio_gateways: Vec<Value>,
    /// Gateway API Gateways (`gateway.networking.k8s.io`).
    pub gateways: Vec<Value>,
    /// The labels of each namespace, by name (listeners' `allowedRoutes` selectors read them).
    pub namespace_labels: std::collections::HashMap<String, Map<String, Value>>,
}

/// Header operations of a route or destination, applied in order: set, add, remove.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeaderOps {
    /// Headers to overwrite or add.
    pub set: Vec<(String, String)>,
    /// Header values to append.
    pub add: Vec<(String, String)>,
    /// Headers to delete.
    pub remove: Vec<String>,
}

/// The strings of a JSON list, lower-cased (header names).
fn lowercase_names(list: &Value) -> Vec<String> {
    list.as_array()
        .map(|names| {
            names
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_ascii_lowercase)
                .collect()
        })
        .unwrap_or_default()
}

impl HeaderOps {
    fn parse(value: &Value) -> HeaderOps {
        let pairs = |v: &Value| -> Vec<(String, String)> {
            v.as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.to_ascii_lowercase(), v.as_str().unwrap_or("").into()))
                        .collect()
                })
                .unwrap_or_default()
        };
        HeaderOps {
            set: pairs(&value["set"]),
            add: pairs(&value["add"]),
            remove: lowercase_names(&value["remove"]),
        }
    }

    /// Header operations of a Gateway API header modifier filter (`set`/`add` lists of
    /// `{name, value}`, `remove` names).
    fn from_gateway(filter: &Value) -> HeaderOps {
        let pairs = |v: &Value| -> Vec<(String, String)> {
            v.as_array()
                .map(|list| {
                    list.iter()
                        .map(|h| {
                            (
                                h["name"].as_str().unwrap_or_default().to_ascii_lowercase(),
                                h["value"].as_str().unwrap_or_default().to_string(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        HeaderOps {
            set: pairs(&filter["set"]),
            add: pairs(&filter["add"]),
            remove: lowercase_names(&filter["remove"]),
        }
    }

    /// Applies the operations to a header list (lower-case names).
    pub fn apply(&self, headers: &mut Vec<(String, String)>) {
        for (name, value) in &self.set {
            headers.retain(|(n, _)| n != name);
            headers.push((name.clone(), value.clone()));
        }
        for (name, value) in &self.add {
            headers.push((name.clone(), value.clone()));
        }
        headers.retain(|(n, _)| !self.remove.contains(n));
    }
}

/// Where a request goes: a Service host, optionally narrowed to a subset and a port.
#[derive(Clone, Debug, PartialEq)]
pub struct Destination {
    /// Fully qualified Service host, e.g. `podinfo-canary.test.svc.cluster.local`.
    pub host: String,
    /// The port asked for, if any.
    pub port: Option<u16>,
    /// The subset's name, if any.
    pub subset: Option<String>,
    /// Labels the endpoints of the subset carry (empty without a subset).
    pub subset_labels: Map<String, Value>,
}

/// When a failed attempt is tried again.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 disables).
    pub attempts: u32,
    /// Timeout of each attempt, the first included.
    pub per_try_timeout: Option<Duration>,
    /// The `retryOn` conditions.
    pub retry_on: Vec<String>,
}

impl RetryPolicy {
    /// Istio's mesh default: 2 retries on connection failures and refused or reset streams.
    pub fn mesh_default() -> Self {
        RetryPolicy {
            attempts: 2,
            per_try_timeout: None,
            retry_on: "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"
                .split(',')
                .map(String::from)
                .collect(),
        }
    }

    fn parse(value: &Value) -> Self {
        if value.is_null() {
            return Self::mesh_default();
        }
        let default = Self::mesh_default();
        let retry_on: Vec<String> = value["retryOn"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(|s| s.split(',').map(|t| t.trim().to_string()).collect())
            .unwrap_or(default.retry_on);
        RetryPolicy {
            attempts: value["attempts"].as_u64().unwrap_or(2) as u32,
            per_try_timeout: value["perTryTimeout"].as_str().and_then(parse_duration),
            retry_on,
        }
    }

    /// Whether an attempt that ended with `status` (`None`: no response, e.g. connection refused
    /// or a per-try timeout) is retried under these conditions.
    pub fn retries(&self, status: Option<u16>) -> bool {
        let on = |token: &str| self.retry_on.iter().any(|t| t == token);
        match status {
            None => on("5xx") || on("gateway-error") || on("connect-failure") || on("reset"),
            Some(code) => {
                (on("5xx") && code >= 500)
                    || (on("gateway-error") && matches!(code, 502..=504))
                    || (on("retriable-4xx") && code == 409)
                    || self.retry_on.iter().any(|t| t.parse::<u16>() == Ok(code))
            }
        }
    }
}

/// Fault injection of a route.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fault {
    /// A delay and the percentage (0–100) of requests it applies to.
    pub delay: Option<(Duration, f64)>,
    /// An HTTP status answered instead of forwarding, and the percentage of requests.
    pub abort: Option<(u16, f64)>,
}

/// A request to forward, with everything the proxy must do around it.
#[derive(Clone, Debug, PartialEq)]
pub struct Forward {
    /// The picked destination.
    pub destination: Destination,
    /// Path and query to send upstream, after rewrite.
    pub path_and_query: String,
    /// A new Host, from `rewrite.authority` or a `host` header operation.
    pub authority: Option<String>,
    /// Request header operations, route level then destination level.
    pub request_headers: Vec<HeaderOps>,
    /// Response header operations, route level then destination level.
    pub response_headers: Vec<HeaderOps>,
    /// Whole-request timeout (`None`: disabled, Istio's default).
    pub timeout: Option<Duration>,
    /// Retry policy.
    pub retries: RetryPolicy,
    /// Fault injection.
    pub fault: Fault,
    /// A copy to send, fire and forget, and the percentage of requests to copy.
    pub mirror: Option<(Destination, f64)>,
    /// The VirtualService or HTTPRoute that routed, as `namespace/name` (absent: straight to the
    /// Service).
    pub routed_by: Option<String>,
}

/// What to do with a request.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Forward it.
    Forward(Box<Forward>),
    /// Answer locally with this status and body (no route: 404; a bad destination: 503 or 500).
    Respond {
        /// HTTP status.
        status: u16,
        /// Body text.
        body: String,
    },
}

/// Parses an Istio duration (`5s`, `250ms`, `1.5s`, `1m`): a Go duration, as Istio reads it.
pub fn parse_duration(text: &str) -> Option<Duration> {
    serin_api::duration::parse_go_duration(text).ok()
}

/// Expands a host as written in an object of `namespace` (or by a client in `namespace`) to its
/// fully qualified form; the port, if any, is dropped.
pub fn qualify(host: &str, namespace: &str) -> String {
    let host = strip_port(host);
    if host.starts_with('*') || host.contains(".svc.cluster.local") {
        return host.to_string();
    }
    match host.split('.').count() {
        1 => format!("{host}.{namespace}.svc.cluster.local"),
        2 => format!("{host}.svc.cluster.local"),
        _ if host.ends_with(".svc") => format!("{host}.cluster.local"),
        _ => host.to_string(),
    }
}

pub(crate) fn strip_port(authority: &str) -> &str {
    match authority.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => authority,
    }
}

pub(crate) fn port_of(authority: &str) -> Option<u16> {
    authority.rsplit_once(':').and_then(|(_, p)| p.parse().ok())
}

/// Whose view of the VirtualServices routing takes: a sidecar's or a gateway's.
#[derive(Clone, Copy, Debug)]
pub enum Scope<'a> {
    /// A sidecar: VirtualServices bound to the `mesh` gateway (or to no gateway at all).
    Mesh,
    /// A gateway's pods: VirtualServices bound to one of these Istio Gateways (`namespace/name`).
    Gateways(&'a [String]),
}

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
fn applies_to(gateways: &Value, namespace: &str, scope: Scope) -> bool {
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
fn entry_applies(entry: &Value, namespace: &str, scope: Scope) -> bool {
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
fn virtual_service_for<'a>(table: &'a RouteTable, host: &str) -> Option<&'a Value> {
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

fn anchored(pattern: &str) -> Option<Regex> {
    Regex::new(&format!("^(?:{pattern})$")).ok()
}

/// Whether `value` satisfies a StringMatch (`exact`, `prefix`, `regex`; `{}` = present).
fn string_match(matcher: &Value, value: Option<&str>, ignore_case: bool) -> bool {
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
fn entry_matches(entry: &Value, request: &Request) -> bool {
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

fn resolve_destination(
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
fn pick_weighted(route: &[Value], pick: f64) -> Option<&Value> {
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

fn rewrite_path(rewrite: &Value, matched_uri: &Value, request: &Request) -> String {
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

fn percentage(value: &Value, legacy: &Value) -> Option<f64> {
    value["value"].as_f64().or_else(|| legacy.as_f64())
}

fn fault_of(value: &Value) -> Fault {
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
fn match_conflicts(root: &Value, leaf: &Value) -> bool {
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
fn merge_match(root: &Value, leaf: &Value) -> Value {
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

/// Whether an HTTPRoute hostname (wildcards only as the first label, excluding the apex) covers
/// `host`.
pub(crate) fn hostname_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => host.ends_with(&format!(".{suffix}")),
        None => pattern == host,
    }
}

/// Whether an HTTPRoute applies to `host`: by its hostnames, or (GAMMA) by a Service parentRef.
fn http_route_covers(route: &Value, host: &str) -> bool {
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

fn gateway_path_matches(path_match: &Value, path: &str) -> bool {
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

fn gateway_value_matches(matcher: &Value, value: Option<String>) -> bool {
    let Some(value) = value else {
        return false;
    };
    let wanted = matcher["value"].as_str().unwrap_or_default();
    match matcher["type"].as_str().unwrap_or("Exact") {
        "RegularExpression" => anchored(wanted).is_some_and(|re| re.is_match(&value)),
        _ => value == wanted,
    }
}

fn gateway_match_holds(entry: &Value, request: &Request) -> bool {
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
fn specificity(
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

fn backend_destination(backend: &Value, namespace: &str) -> Destination {
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
fn gateway_route(
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

fn destination_value(value: &Value) -> Option<&Value> {
    value.get("host").is_some().then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(authority: &str, path: &str, headers: &[(&str, &str)]) -> Request {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        Request {
            method: "GET".into(),
            authority: authority.into(),
            path: path.into(),
            query: query.into(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn flagger_vs(primary: u64, canary: u64) -> Value {
        json!({"metadata": {"name": "podinfo", "namespace": "test"},
            "spec": {"hosts": ["podinfo"], "gateways": ["mesh"], "http": [
                {"match": [{"headers": {"x-canary": {"exact": "insider"}}},
                           {"headers": {"cookie": {"regex": ".*canary=always.*"}}}],
                 "route": [{"destination": {"host": "podinfo-canary"}}]},
                {"route": [
                    {"destination": {"host": "podinfo-primary"}, "weight": primary},
                    {"destination": {"host": "podinfo-canary"}, "weight": canary,
                     "headers": {"response": {"add": {"Set-Cookie": "flagger-cookie=abc; Max-Age=60"}}}}],
                 "retries": {"attempts": 3, "perTryTimeout": "1s", "retryOn": "gateway-error,connect-failure"},
                 "timeout": "5s"}]}})
    }

    #[test]
    fn istio_durations_are_go_durations() {
        assert_eq!(parse_duration("0.5s"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("5"), None);
        assert_eq!(parse_duration("-1s"), None);
    }

    fn forward(decision: Decision) -> Forward {
        match decision {
            Decision::Forward(f) => *f,
            other => panic!("expected a forward, got {other:?}"),
        }
    }

    fn table(vs: Value) -> RouteTable {
        RouteTable {
            virtual_services: vec![vs],
            ..RouteTable::default()
        }
    }

    #[test]
    fn every_spelling_of_a_service_reaches_its_virtual_service() {
        let table = table(flagger_vs(100, 0));
        for authority in [
            "podinfo",
            "podinfo:9898",
            "podinfo.test",
            "podinfo.test:9898",
            "podinfo.test.svc",
            "podinfo.test.svc.cluster.local:9898",
        ] {
            let f = forward(route(&table, &request(authority, "/", &[]), "test", 0.5));
            assert_eq!(
                f.destination.host, "podinfo-primary.test.svc.cluster.local",
                "{authority}"
            );
            assert_eq!(f.routed_by.as_deref(), Some("test/podinfo"));
        }
        // A client in another namespace saying `podinfo` means its own namespace's service.
        let f = forward(route(&table, &request("podinfo", "/", &[]), "other", 0.5));
        assert_eq!(f.destination.host, "podinfo.other.svc.cluster.local");
        assert_eq!(f.routed_by, None);
        assert_eq!(f.retries, RetryPolicy::mesh_default());
    }

    #[test]
    fn weights_split_by_the_pick_and_zero_weight_gets_nothing() {
        let split = table(flagger_vs(80, 20));
        let host_at = |pick: f64| {
            forward(route(
                &split,
                &request("podinfo.test", "/", &[]),
                "test",
                pick,
            ))
            .destination
            .host
        };
        assert_eq!(host_at(0.0), "podinfo-primary.test.svc.cluster.local");
        assert_eq!(host_at(0.79), "podinfo-primary.test.svc.cluster.local");
        assert_eq!(host_at(0.80), "podinfo-canary.test.svc.cluster.local");
        assert_eq!(host_at(0.999), "podinfo-canary.test.svc.cluster.local");
        let all_primary = table(flagger_vs(100, 0));
        let f = forward(route(
            &all_primary,
            &request("podinfo.test", "/", &[]),
            "test",
            0.999,
        ));
        assert_eq!(f.destination.host, "podinfo-primary.test.svc.cluster.local");
        assert_eq!(f.timeout, Some(Duration::from_secs(5)));
        assert_eq!(f.retries.attempts, 3);
        assert!(f.retries.retries(Some(503)) && f.retries.retries(None));
        assert!(!f.retries.retries(Some(500)), "500 is not a gateway error");
        let none = table(flagger_vs(0, 0));
        assert!(matches!(
            route(&none, &request("podinfo.test", "/", &[]), "test", 0.5),
            Decision::Respond { status: 503, .. }
        ));
    }

    #[test]
    fn match_entries_are_ored_and_regexes_anchored() {
        let table = table(flagger_vs(100, 0));
        let canary = "podinfo-canary.test.svc.cluster.local";
        let to = |headers: &[(&str, &str)]| {
            forward(route(
                &table,
                &request("podinfo.test", "/", headers),
                "test",
                0.0,
            ))
            .destination
            .host
        };
        assert_eq!(to(&[("x-canary", "insider")]), canary);
        assert_eq!(to(&[("cookie", "a=b; canary=always; c=d")]), canary);
        assert_ne!(to(&[("x-canary", "insider2")]), canary, "exact is exact");
        assert_ne!(to(&[]), canary);
    }

    #[test]
    fn uri_query_method_and_without_headers_conditions() {
        let vs = json!({"metadata": {"name": "app", "namespace": "test"},
            "spec": {"hosts": ["app"], "http": [
                {"match": [{"uri": {"prefix": "/api"}, "method": {"exact": "POST"},
                            "queryParams": {"debug": {"exact": "1"}},
                            "withoutHeaders": {"x-skip": {}}}],
                 "rewrite": {"uri": "/v2"},
                 "route": [{"destination": {"host": "app-v2"}}]},
                {"match": [{"uri": {"regex": "/items/[0-9]+"}}],
                 "route": [{"destination": {"host": "items"}}]}]}});
        let table = table(vs);
        let mut post = request("app.test", "/api/users?debug=1", &[]);
        post.method = "POST".into();
        let f = forward(route(&table, &post, "test", 0.0));
        assert_eq!(f.destination.host, "app-v2.test.svc.cluster.local");
        assert_eq!(
            f.path_and_query, "/v2/users?debug=1",
            "the matched prefix is replaced"
        );
        post.headers.push(("x-skip".into(), "yes".into()));
        assert!(matches!(
            route(&table, &post, "test", 0.0),
            Decision::Respond { status: 404, .. }
        ));
        let item = forward(route(
            &table,
            &request("app.test", "/items/42", &[]),
            "test",
            0.0,
        ));
        assert_eq!(item.destination.host, "items.test.svc.cluster.local");
        assert!(
            matches!(
                route(
                    &table,
                    &request("app.test", "/items/42/x", &[]),
                    "test",
                    0.0
                ),
                Decision::Respond { status: 404, .. }
            ),
            "a regex must match the whole path"
        );
    }

    #[test]
    fn subsets_mirrors_faults_and_gateway_only_services() {
        let vs = json!({"metadata": {"name": "app", "namespace": "test"},
            "spec": {"hosts": ["app"], "http": [{
                "route": [{"destination": {"host": "app", "subset": "stable", "port": {"number": 8080}}}],
                "mirror": {"host": "app", "subset": "next"}, "mirrorPercentage": {"value": 50.0},
                "fault": {"abort": {"httpStatus": 503, "percentage": {"value": 10.0}},
                          "delay": {"fixedDelay": "250ms"}}}]}});
        let dr = json!({"metadata": {"name": "app", "namespace": "test"},
            "spec": {"host": "app", "subsets": [{"name": "stable", "labels": {"version": "v1"}},
                                                {"name": "next", "labels": {"version": "v2"}}]}});
        let table = RouteTable {
            virtual_services: vec![vs.clone()],
            destination_rules: vec![dr],
            ..RouteTable::default()
        };
        let f = forward(route(&table, &request("app.test", "/", &[]), "test", 0.0));
        assert_eq!(f.destination.subset_labels["version"], "v1");
        assert_eq!(f.destination.port, Some(8080));
        let (mirror, percent) = f.mirror.unwrap();
        assert_eq!(
            (mirror.subset_labels["version"].as_str(), percent),
            (Some("v2"), 50.0)
        );
        assert_eq!(f.fault.abort, Some((503, 10.0)));
        assert_eq!(
            f.fault.delay, None,
            "a delay without a percentage delays nothing"
        );

        let without_dr = RouteTable {
            virtual_services: vec![vs],
            ..RouteTable::default()
        };
        assert!(matches!(
            route(&without_dr, &request("app.test", "/", &[]), "test", 0.0),
            Decision::Respond { status: 503, .. }
        ));
        let gateway_only = table_with_gateway();
        let f = forward(route(
            &gateway_only,
            &request("app.test", "/", &[]),
            "test",
            0.0,
        ));
        assert_eq!(
            f.routed_by, None,
            "sidecars ignore a VirtualService without mesh"
        );
    }

    fn table_with_gateway() -> RouteTable {
        table(json!({"metadata": {"name": "public", "namespace": "test"},
            "spec": {"hosts": ["app"], "gateways": ["public-gateway"],
                     "http": [{"route": [{"destination": {"host": "elsewhere"}}]}]}}))
    }

    fn http_route(name: &str, created: &str, rules: Value) -> Value {
        json!({"metadata": {"name": name, "namespace": "test", "creationTimestamp": created},
               "spec": {"parentRefs": [{"name": "gateway", "namespace": "istio-ingress"}],
                        "hostnames": ["app.example.com"], "rules": rules}})
    }

    #[test]
    fn http_routes_follow_gateway_api_precedence_and_weights() {
        let general = http_route(
            "general",
            "2026-01-01T00:00:00Z",
            json!([
            {"backendRefs": [{"name": "app-primary", "port": 9898, "weight": 90},
                             {"name": "app-canary", "port": 9898, "weight": 10}],
             "filters": [{"type": "ResponseHeaderModifier",
                          "responseHeaderModifier": {"add": [{"name": "X-Route", "value": "general"}]}}]}]),
        );
        // Newer, later in the list, but more specific: it wins for its requests.
        let insiders = http_route(
            "insiders",
            "2026-02-01T00:00:00Z",
            json!([
            {"matches": [{"path": {"type": "PathPrefix", "value": "/api"},
                          "headers": [{"name": "X-Canary", "value": "insider"}]}],
             "backendRefs": [{"name": "app-canary", "port": 9898}],
             "filters": [{"type": "URLRewrite",
                          "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v2"}}}]}]),
        );
        let table = RouteTable {
            http_routes: vec![general, insiders],
            ..RouteTable::default()
        };
        let to = |path: &str, headers: &[(&str, &str)], pick: f64| {
            forward(route(
                &table,
                &request("app.example.com", path, headers),
                "test",
                pick,
            ))
        };
        let insider = to("/api/users", &[("x-canary", "insider")], 0.0);
        assert_eq!(
            insider.destination.host,
            "app-canary.test.svc.cluster.local"
        );
        assert_eq!(insider.path_and_query, "/v2/users");
        let prefix_is_path_separated = to("/apiary", &[("x-canary", "insider")], 0.0);
        assert_eq!(
            prefix_is_path_separated.destination.host,
            "app-primary.test.svc.cluster.local"
        );
        assert_eq!(
            to("/", &[], 0.95).destination.host,
            "app-canary.test.svc.cluster.local"
        );
        assert_eq!(to("/", &[], 0.5).destination.port, Some(9898));
        assert_eq!(
            to("/", &[], 0.5).response_headers[0].add,
            [("x-route".to_string(), "general".to_string())]
        );

        let all_zero = RouteTable {
            http_routes: vec![http_route(
                "zero",
                "2026-01-01T00:00:00Z",
                json!([
                {"backendRefs": [{"name": "a", "weight": 0}, {"name": "b", "weight": 0}]}]),
            )],
            ..RouteTable::default()
        };
        assert!(matches!(
            route(
                &all_zero,
                &request("app.example.com", "/", &[]),
                "test",
                0.5
            ),
            Decision::Respond { status: 500, .. }
        ));
    }

    #[test]
    fn header_operations_set_add_and_remove() {
        let ops = HeaderOps::parse(
            &json!({"set": {"X-Env": "canary"}, "add": {"Set-Cookie": "a=1"},
                                           "remove": ["X-Debug"]}),
        );
        let mut headers = vec![
            ("x-env".to_string(), "prod".to_string()),
            ("x-debug".to_string(), "1".to_string()),
            ("set-cookie".to_string(), "b=2".to_string()),
        ];
        ops.apply(&mut headers);
        assert_eq!(
            headers,
            [
                ("set-cookie".to_string(), "b=2".to_string()),
                ("x-env".to_string(), "canary".to_string()),
                ("set-cookie".to_string(), "a=1".to_string()),
            ]
        );
    }
}
