//! What routing reads and decides: the request, the route table, destinations, header operations,
//! retries, faults and the forward it returns.

use serde_json::{Map, Value};
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
    pub(crate) fn header(&self, name: &str) -> Option<String> {
        let values: Vec<&str> = self
            .headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect();
        (!values.is_empty()).then(|| values.join(","))
    }

    pub(crate) fn query_param(&self, name: &str) -> Option<String> {
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
pub(crate) fn lowercase_names(list: &Value) -> Vec<String> {
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
    pub(crate) fn parse(value: &Value) -> HeaderOps {
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
    pub(crate) fn from_gateway(filter: &Value) -> HeaderOps {
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

    pub(crate) fn parse(value: &Value) -> Self {
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
