//! What a handler works from: the shared state, the query, the resolved target, and the shapes of
//! answers (JSON, tables, aggregated discovery, errors).

use crate::auth;
use crate::discovery;
use crate::instrument::{Faults, Metrics};
use crate::kubelet::Kubelet;
use crate::registry::ResourceInfo;
use crate::status::ApiError;
use crate::store::Store;
use crate::tables;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::Response;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// Shared state of the handlers.
#[derive(Clone)]
pub struct AppState {
    /// The object store.
    pub store: Arc<Store>,
    /// `host:port` the server listens on, for discovery documents.
    pub address: String,
    /// How often watches with bookmarks get one.
    pub bookmark_interval: Duration,
    /// Request counters served at `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Fault rules, also settable at `PUT /sandbox/faults`.
    pub faults: Arc<Faults>,
    /// Issued ServiceAccount tokens and the access each identity was granted.
    pub auth: Arc<auth::Auth>,
    /// Who requests without credentials are on this address: the admin on the plain-HTTP loopback
    /// address, `system:anonymous` on the HTTPS one.
    pub unauthenticated: auth::Unauthenticated,
    /// The nodes' side of pod exec, port-forward, logs and resource metrics.
    pub kubelet: Arc<dyn Kubelet>,
}

pub(crate) fn json_response(code: u16, body: &Value) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

pub(crate) fn error_response(error: ApiError) -> Response {
    json_response(error.code, &error.to_status())
}

pub(crate) fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match u8::from_str_radix(&text[i + 1..i + 3], 16) {
                Ok(b) => {
                    out.push(b);
                    i += 2;
                }
                Err(_) => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Query parameters, tolerant of empty pairs (`?&watch=true`) and repeated keys (last wins).
pub(crate) struct Query(pub(crate) Vec<(String, String)>);

impl Query {
    pub(crate) fn parse(uri: &Uri) -> Self {
        Query(
            uri.query()
                .unwrap_or("")
                .split('&')
                .filter(|pair| !pair.is_empty())
                .map(|pair| match pair.split_once('=') {
                    Some((k, v)) => (decode(k), decode(v)),
                    None => (decode(pair), String::new()),
                })
                .collect(),
        )
    }

    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }

    /// The list, watch and delete options a real API server refuses to decode: a `watch` or
    /// `allowWatchBookmarks` that is not a boolean, a `timeoutSeconds` that is not a number, a
    /// `resourceVersion` that is not one, an unknown `resourceVersionMatch` (or one without a
    /// resourceVersion), an unknown `propagationPolicy`.
    pub(crate) fn check_options(&self) -> Result<(), ApiError> {
        const BOOLEANS: [&str; 12] = [
            "1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False",
        ];
        for key in ["watch", "allowWatchBookmarks"] {
            if let Some(value) = self
                .get(key)
                .filter(|v| !v.is_empty() && !BOOLEANS.contains(v))
            {
                return Err(ApiError::bad_request(format!(
                    "{key}: Invalid value: {value:?}: must be true or false"
                )));
            }
        }
        if let Some(value) = self
            .get("timeoutSeconds")
            .filter(|v| !v.is_empty() && v.parse::<i64>().is_err())
        {
            return Err(ApiError::bad_request(format!(
                "timeoutSeconds: Invalid value: {value:?}: must be a whole number of seconds"
            )));
        }
        let version = self.get("resourceVersion").unwrap_or("");
        if !version.is_empty() && version.parse::<u64>().is_err() {
            return Err(ApiError::bad_request(format!(
                "resourceVersion: Invalid value: {version:?}: must be a resourceVersion the server returned (a number)"
            )));
        }
        match self.get("resourceVersionMatch").unwrap_or("") {
            "" => {}
            "NotOlderThan" | "Exact" if !version.is_empty() => {}
            "NotOlderThan" | "Exact" => {
                return Err(ApiError::bad_request(
                    "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "resourceVersionMatch: Unsupported value: {other:?}: supported values: \"Exact\", \"NotOlderThan\", \"\""
                )));
            }
        }
        check_propagation(self.get("propagationPolicy"))
    }

    pub(crate) fn dry_run(&self) -> Result<bool, ApiError> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "Invalid dry run value {other:?}: the only supported value is All"
            ))),
        }
    }
}

/// A request for objects of one resource.
pub(crate) struct Target {
    pub(crate) info: ResourceInfo,
    pub(crate) namespace: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) subresource: Option<String>,
    pub(crate) watch_path: bool,
}

/// The RBAC verb of a request whose metrics verb is `verb`.
pub(crate) fn rbac_verb(verb: &str, method: &Method) -> String {
    match verb {
        "APPLY" => "patch".into(),
        "OTHER" => method.as_str().to_ascii_lowercase(),
        verb => verb.to_ascii_lowercase(),
    }
}

/// The verb of a resource request, as the metrics and fault rules name it.
pub(crate) fn verb_of(
    method: &Method,
    target: &Target,
    query: &Query,
    headers: &HeaderMap,
) -> &'static str {
    match (method, target.name.is_some()) {
        (&Method::GET, true) if !target.watch_path => "GET",
        (&Method::GET, _) if target.watch_path || query.flag("watch") => "WATCH",
        (&Method::GET, _) => "LIST",
        (&Method::POST, _) => "CREATE",
        (&Method::PUT, _) => "UPDATE",
        (&Method::PATCH, _) if content_type(headers).starts_with("application/apply-patch") => {
            "APPLY"
        }
        (&Method::PATCH, _) => "PATCH",
        (&Method::DELETE, true) => "DELETE",
        (&Method::DELETE, false) => "DELETECOLLECTION",
        _ => "OTHER",
    }
}

/// The field manager of a write: `fieldManager`, else the User-Agent's product (`kubectl`), as the
/// real server derives it.
pub(crate) fn field_manager(query: &Query, headers: &HeaderMap) -> String {
    if let Some(manager) = query.get("fieldManager").filter(|m| !m.is_empty()) {
        return manager.to_string();
    }
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.split('/').next())
        .filter(|product| !product.is_empty())
        .unwrap_or("unknown")
        .to_string()
}

/// The row contents a Table request wants, or `None` when the client asked for plain objects.
pub(crate) fn table_request(headers: &HeaderMap, query: &Query) -> Option<tables::IncludeObject> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    tables::wanted(accept).then(|| tables::IncludeObject::parse(query.get("includeObject")))
}

pub(crate) fn table_response(table: &Value) -> Response {
    let mut response = json_response(200, table);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(tables::TABLE_CONTENT_TYPE),
    );
    response
}

pub(crate) fn aggregated_response(body: &Value) -> Response {
    let mut response = json_response(200, body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(discovery::AGGREGATED_CONTENT_TYPE),
    );
    response
}

pub(crate) fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// A deletion's `propagationPolicy`, if any, is one Kubernetes knows.
pub(crate) fn check_propagation(policy: Option<&str>) -> Result<(), ApiError> {
    match policy {
        None | Some("" | "Orphan" | "Background" | "Foreground") => Ok(()),
        Some(other) => Err(ApiError::bad_request(format!(
            "propagationPolicy: Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
        ))),
    }
}
