//! The HTTP front of the sandbox: URL grammar, verbs, subresources and watch streams.

use crate::apiproxy;
use crate::auth::{self, Identity};
use crate::discovery;
use crate::instrument::{FaultPlan, FaultRule, Faults, Metrics};
use crate::kubelet::{Kubelet, LogOptions, Transport};
use crate::openapi;
use crate::registry::{ResourceInfo, Verbs};
use crate::scale;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::store::{ChangeType, DeleteOptions, Part, PatchType, Store, WriteOptions};
use crate::tables;
use axum::body::{Body, Bytes};
use axum::extract::FromRequestParts;
use axum::extract::State;
use axum::extract::ws::WebSocketUpgrade;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures::SinkExt;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

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

/// Builds the router serving the whole API.
pub fn router(state: AppState) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(state)
}

fn json_response(code: u16, body: &Value) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn error_response(error: ApiError) -> Response {
    json_response(error.code, &error.to_status())
}

fn decode(text: &str) -> String {
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
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(uri: &Uri) -> Self {
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

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }

    /// The list, watch and delete options a real API server refuses to decode: a `watch` or
    /// `allowWatchBookmarks` that is not a boolean, a `timeoutSeconds` that is not a number, a
    /// `resourceVersion` that is not one, an unknown `resourceVersionMatch` (or one without a
    /// resourceVersion), an unknown `propagationPolicy`.
    fn check_options(&self) -> Result<(), ApiError> {
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

    fn dry_run(&self) -> Result<bool, ApiError> {
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
struct Target {
    info: ResourceInfo,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
    watch_path: bool,
}

async fn handle(State(state): State<AppState>, request: axum::extract::Request) -> Response {
    let (mut parts, body) = request.into_parts();
    let wants_websocket = parts
        .headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if wants_websocket {
        return match WebSocketUpgrade::from_request_parts(&mut parts, &state).await {
            Ok(upgrade) => streaming_upgrade(
                &state,
                Transport::WebSocket(upgrade),
                &parts.uri,
                &parts.headers,
            )
            .unwrap_or_else(error_response),
            Err(rejection) => rejection.into_response(),
        };
    }
    let wants_spdy = parts
        .headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("SPDY/3.1"));
    if wants_spdy {
        let on_upgrade = parts.extensions.remove::<hyper::upgrade::OnUpgrade>();
        return streaming_upgrade(
            &state,
            Transport::Spdy(on_upgrade),
            &parts.uri,
            &parts.headers,
        )
        .unwrap_or_else(error_response);
    }
    // The API server refuses bodies over 3 MiB; the sandbox allows more, but not without bound.
    let body = match axum::body::to_bytes(body, 8 << 20).await {
        Ok(body) => body,
        Err(_) => {
            let mut error = ApiError::bad_request("the request body is larger than 8 MiB");
            error.code = 413;
            error.reason = "RequestEntityTooLarge";
            return error_response(error);
        }
    };
    let (method, uri, headers) = (parts.method, parts.uri, parts.headers);
    match route(&state, &method, &uri, &headers, body).await {
        Ok(response) => response,
        Err(error) => error_response(error),
    }
}

/// The answer to a streaming subresource the sandbox cannot serve as asked.
fn streaming_unavailable(sub: &str) -> ApiError {
    match sub {
        "exec" => ApiError::bad_request(
            "Upgrade request required: the sandbox serves exec over WebSocket (v5.channel.k8s.io), not SPDY",
        ),
        "portforward" => ApiError::bad_request(
            "Upgrade request required: the sandbox serves port-forward over WebSocket (SPDY/3.1+portforward.k8s.io) or an SPDY/3.1 upgrade",
        ),
        _ => {
            let mut error = ApiError::not_found("pods", "", "pods", "");
            error.message = format!(
                "the sandbox does not serve pods/{sub} yet; reach a pod with kubectl get --raw .../pods/NAME:PORT/proxy/ or kubectl proxy"
            );
            error
        }
    }
}

/// `kubectl exec` and `kubectl port-forward` (upgrades of `pods/NAME/exec` and
/// `pods/NAME/portforward`): checks who asks and for what, then serves the stream.
fn streaming_upgrade(
    state: &AppState,
    transport: Transport,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let identity = state
        .auth
        .authenticate(&state.store, headers, state.unauthenticated)?;
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let ["api", "v1", "namespaces", namespace, "pods", name, sub] = segments.as_slice() else {
        return Err(ApiError::bad_request(
            "only pods/NAME/exec and pods/NAME/portforward accept an upgrade in the sandbox",
        ));
    };
    let request = auth::Request::Resource {
        verb: "create".into(),
        group: String::new(),
        resource: "pods".into(),
        subresource: sub.to_string(),
        namespace: namespace.to_string(),
        name: name.to_string(),
    };
    if !state
        .auth
        .authorize(&state.store, &identity, &request)
        .allowed
    {
        return Err(auth::forbidden(&identity, &request));
    }
    match (*sub, transport) {
        ("exec", Transport::WebSocket(upgrade)) => {
            exec_upgrade(state, upgrade, uri, namespace, name)
        }
        ("portforward", transport) => {
            let pods = state.store.resource("", "v1", "pods").expect("built in");
            let pod = state.store.get(&pods, namespace, name)?;
            if pod["status"]["phase"] != "Running" {
                return Err(ApiError::bad_request(format!(
                    "unable to upgrade connection: pod {name} is not running"
                )));
            }
            state.kubelet.port_forward(pod, transport, headers)
        }
        (sub, _) => Err(streaming_unavailable(sub)),
    }
}

/// `kubectl exec`: runs the command in the pod's context over the channel protocol.
fn exec_upgrade(
    state: &AppState,
    upgrade: WebSocketUpgrade,
    uri: &Uri,
    namespace: &str,
    name: &str,
) -> Result<Response, ApiError> {
    let query = Query::parse(uri);
    let words: Vec<String> = query
        .0
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect();
    let pods = state.store.resource("", "v1", "pods").expect("built in");
    let pod = state.store.get(&pods, namespace, name)?;
    let containers: Vec<Value> = pod["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let container = match query.get("container").filter(|c| !c.is_empty()) {
        Some(wanted) => containers.iter().find(|c| c["name"] == wanted).cloned(),
        None if containers.len() == 1 => containers.first().cloned(),
        None => None,
    };
    let Some(container) = container.filter(|_| pod["status"]["phase"] == "Running") else {
        return Err(ApiError::bad_request(format!(
            "unable to upgrade connection: container not found (\"{}\")",
            query.get("container").unwrap_or_default()
        )));
    };
    Ok(state.kubelet.exec(&pod, &container, words, upgrade))
}

async fn route(
    state: &AppState,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let identity = state
        .auth
        .authenticate(&state.store, headers, state.unauthenticated)?;
    let resource_path = match segments.as_slice() {
        ["api", _, rest @ ..] => !rest.is_empty(),
        ["apis", _, _, rest @ ..] => !rest.is_empty(),
        _ => false,
    };
    if !resource_path {
        let request = auth::Request::NonResource {
            verb: method.as_str().to_ascii_lowercase(),
            path: uri.path().to_string(),
        };
        if !state
            .auth
            .authorize(&state.store, &identity, &request)
            .allowed
        {
            return Err(auth::forbidden(&identity, &request));
        }
    }
    // Copied only for the discovery paths that read it, not for every request.
    let registry = || state.store.registry();
    let reading = *method == Method::GET;
    match segments.as_slice() {
        ["version"] if reading => return Ok(json_response(200, &discovery::version())),
        ["healthz" | "readyz" | "livez"] if reading => {
            return Ok((StatusCode::OK, "ok").into_response());
        }
        ["api"] if reading => {
            if discovery::wants_aggregated(accept) {
                return Ok(aggregated_response(&discovery::aggregated(
                    &registry(),
                    true,
                )));
            }
            return Ok(json_response(200, &discovery::api_versions(&state.address)));
        }
        ["apis"] if reading => {
            if discovery::wants_aggregated(accept) {
                return Ok(aggregated_response(&discovery::aggregated(
                    &registry(),
                    false,
                )));
            }
            return Ok(json_response(200, &discovery::api_group_list(&registry())));
        }
        // What each identity other than the admin was allowed to do, for checking that an
        // installation's RBAC is enough and no more (the sandbox's own path, admin only).
        ["sandbox", "access"] if reading && identity.is_admin() => {
            return Ok(json_response(200, &json!(state.auth.access())));
        }
        ["metrics"] if reading => {
            let mut response =
                Response::new(Body::from(state.metrics.render(state.store.object_count())));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            return Ok(response);
        }
        ["sandbox", "faults"] if reading => {
            return Ok(json_response(200, &json!(state.faults.rules())));
        }
        ["sandbox", "faults"] if *method == Method::PUT => {
            let rules: Vec<FaultRule> = serde_json::from_slice(&body).map_err(|e| {
                ApiError::bad_request(format!("fault rules must be a JSON list of {{verb?, resource?, errorRate, latencyMs, watchDropAfterMs?}}: {e}"))
            })?;
            state.faults.set(rules);
            return Ok(json_response(200, &json!(state.faults.rules())));
        }
        // kubectl asks for v2 in protobuf only (it validates a `kind: List`'s items against v2).
        ["openapi", "v2"] if reading && openapi::wants_v2_protobuf(accept) => {
            let document = openapi::v2_protobuf(&openapi::v2(&state.store));
            let mut response = Response::new(Body::from(document));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(openapi::V2_PROTOBUF),
            );
            return Ok(response);
        }
        ["openapi", "v2"] if reading => {
            return Ok(json_response(200, &openapi::v2(&state.store)));
        }
        ["openapi", "v3"] if reading => {
            return Ok(json_response(200, &openapi::index(&state.store)));
        }
        ["openapi", "v3", "api", version] if reading => {
            return openapi::group_version(&state.store, "", version)
                .map(|d| json_response(200, &d))
                .ok_or_else(ApiError::unknown_path);
        }
        ["openapi", "v3", "apis", group, version] if reading => {
            return openapi::group_version(&state.store, group, version)
                .map(|d| json_response(200, &d))
                .ok_or_else(ApiError::unknown_path);
        }
        ["api", version] if reading => {
            return discovery::api_resource_list(&registry(), "", version)
                .map(|d| json_response(200, &d))
                .ok_or_else(ApiError::unknown_path);
        }
        ["apis", group] if reading => {
            return discovery::api_group(&registry(), group)
                .map(|d| json_response(200, &d))
                .ok_or_else(ApiError::unknown_path);
        }
        ["apis", group, version] if reading => {
            return discovery::api_resource_list(&registry(), group, version)
                .map(|d| json_response(200, &d))
                .ok_or_else(ApiError::unknown_path);
        }
        _ => {}
    }
    if let Some(proxy) = apiproxy::parse(&segments, uri.path()) {
        let verb = match *method {
            Method::POST => "create".to_string(),
            Method::PUT => "update".to_string(),
            ref other => other.as_str().to_ascii_lowercase(),
        };
        let request = auth::Request::Resource {
            verb,
            group: String::new(),
            resource: proxy.resource.clone(),
            subresource: "proxy".into(),
            namespace: proxy.namespace.clone(),
            name: proxy.name.clone(),
        };
        if !state
            .auth
            .authorize(&state.store, &identity, &request)
            .allowed
        {
            return Err(auth::forbidden(&identity, &request));
        }
        let address = apiproxy::address(&state.store, &proxy)?;
        return apiproxy::forward(address, method, &proxy.path, uri, headers, body).await;
    }
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] if !rest.is_empty() => ("", *version, rest),
        ["apis", group, version, rest @ ..] if !rest.is_empty() => (*group, *version, rest),
        _ => return Err(ApiError::unknown_path()),
    };
    let target = resolve(state, group, version, rest)?;
    let query = Query::parse(uri);
    let verb = verb_of(method, &target, &query, headers);
    let request = auth::Request::Resource {
        verb: rbac_verb(verb, method),
        group: target.info.group.clone(),
        resource: target.info.plural.clone(),
        subresource: target.subresource.clone().unwrap_or_default(),
        namespace: target.namespace.clone().unwrap_or_default(),
        name: target.name.clone().unwrap_or_default(),
    };
    if !state
        .auth
        .authorize(&state.store, &identity, &request)
        .allowed
    {
        return Err(auth::forbidden(&identity, &request));
    }
    let resource = target.info.qualified_plural();
    let client = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("unknown");
    let faults = state.faults.plan(verb, &resource, client);
    if !faults.latency.is_zero() {
        tokio::time::sleep(faults.latency).await;
    }
    let response = if faults.fail {
        error_response(ApiError::internal(format!(
            "injected fault: {verb} {resource} failed (sandbox fault injection)"
        )))
    } else if target.info.verbs == Verbs::ReadOnly {
        serve_resource_metrics(state, method, &query, &target).unwrap_or_else(error_response)
    } else if let Some(sub @ ("exec" | "attach" | "portforward")) = target.subresource.as_deref() {
        // Reached only without a WebSocket upgrade (kubectl's SPDY fallback).
        error_response(streaming_unavailable(sub))
    } else if target.subresource.as_deref() == Some("log") {
        serve_log(state, method, &query, &target).unwrap_or_else(error_response)
    } else if let Some(answer) = serve_actions(state, &identity, method, headers, &target, &body) {
        answer.unwrap_or_else(error_response)
    } else {
        match serve(
            state, &identity, method, headers, &query, target, body, &faults,
        )
        .await
        {
            Ok(response) => response,
            Err(error) => error_response(error),
        }
    };
    state
        .metrics
        .record(verb, &resource, response.status().as_u16());
    state.metrics.record_write(client, verb, &resource);
    Ok(response)
}

/// The RBAC verb of a request whose metrics verb is `verb`.
fn rbac_verb(verb: &str, method: &Method) -> String {
    match verb {
        "APPLY" => "patch".into(),
        "OTHER" => method.as_str().to_ascii_lowercase(),
        verb => verb.to_ascii_lowercase(),
    }
}

/// Serves the resources that are actions rather than stored objects: the access and identity
/// reviews, ServiceAccount TokenRequests and pod evictions. `None` for every other request.
fn serve_actions(
    state: &AppState,
    identity: &Identity,
    method: &Method,
    headers: &HeaderMap,
    target: &Target,
    body: &Bytes,
) -> Option<Result<Response, ApiError>> {
    let info = &target.info;
    let token = target.subresource.as_deref() == Some("token");
    let eviction = target.subresource.as_deref() == Some("eviction");
    let create_only = info.verbs == Verbs::CreateOnly;
    if !create_only && !token && !eviction {
        return None;
    }
    if *method != Method::POST || (create_only && target.name.is_some()) {
        return Some(Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )));
    }
    let namespace = target.namespace.as_deref().unwrap_or("");
    Some(parse_body(headers, body).and_then(|request| {
        let name = target.name.as_deref().unwrap_or("");
        if eviction {
            return evict(state, namespace, name, &request);
        }
        let answer = if token {
            let account = state
                .store
                .get(info, namespace, target.name.as_deref().unwrap_or(""))?;
            auth::token_request(&state.auth, &account, &request)?
        } else {
            auth::review(&state.store, identity, &info.kind, namespace, request)?
        };
        Ok(json_response(201, &answer))
    }))
}

/// Serves `pods/NAME/log` (`kubectl logs`) from what the runtime kept of the pod's output.
fn serve_log(
    state: &AppState,
    method: &Method,
    query: &Query,
    target: &Target,
) -> Result<Response, ApiError> {
    if *method != Method::GET {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    let number = |key: &str| -> Result<Option<u64>, ApiError> {
        query
            .get(key)
            .filter(|v| !v.is_empty())
            .map(|v| {
                v.parse::<i64>()
                    .map(|n| u64::try_from(n).ok())
                    .map_err(|_| ApiError::bad_request(format!("{key}: {v:?} is not a number")))
            })
            .transpose()
            .map(Option::flatten)
    };
    let options = LogOptions {
        container: query
            .get("container")
            .filter(|c| !c.is_empty())
            .map(String::from),
        follow: query.flag("follow"),
        previous: query.flag("previous"),
        timestamps: query.flag("timestamps"),
        tail_lines: number("tailLines")?.map(|n| n as usize),
        since_seconds: number("sinceSeconds")?,
        limit_bytes: number("limitBytes")?.map(|n| n as usize),
    };
    let namespace = target.namespace.as_deref().unwrap_or("");
    let pod = state.store.get(
        &target.info,
        namespace,
        target.name.as_deref().unwrap_or(""),
    )?;
    let body = state.kubelet.logs(&pod, &options)?;
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    Ok(response)
}

/// Serves metrics.k8s.io (`kubectl top`) from the runtime's usage estimates.
fn serve_resource_metrics(
    state: &AppState,
    method: &Method,
    query: &Query,
    target: &Target,
) -> Result<Response, ApiError> {
    if *method != Method::GET || target.watch_path || query.flag("watch") {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    let labels = LabelSelector::parse(query.get("labelSelector").unwrap_or(""))?;
    let answer = state.kubelet.resource_metrics(
        &state.store,
        &target.info,
        target.namespace.as_deref(),
        target.name.as_deref(),
        &labels,
    )?;
    Ok(json_response(200, &answer))
}

/// Evicts a pod (`kubectl drain`): the sandbox has no PodDisruptionBudgets, so an eviction is a
/// delete with the Eviction's options, answered as the API server answers one.
fn evict(
    state: &AppState,
    namespace: &str,
    name: &str,
    eviction: &Value,
) -> Result<Response, ApiError> {
    let pods = state.store.resource("", "v1", "pods").expect("built in");
    let options = &eviction["deleteOptions"];
    let delete = DeleteOptions {
        uid: options["preconditions"]["uid"].as_str().map(String::from),
        resource_version: options["preconditions"]["resourceVersion"]
            .as_str()
            .map(String::from),
        propagation: options["propagationPolicy"].as_str().map(String::from),
    };
    let dry_run = options["dryRun"]
        .as_array()
        .is_some_and(|d| d.iter().any(|v| v == "All"));
    state
        .store
        .delete(&pods, namespace, name, &delete, dry_run)?;
    Ok(json_response(
        201,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}

/// The verb of a resource request, as the metrics and fault rules name it.
fn verb_of(method: &Method, target: &Target, query: &Query, headers: &HeaderMap) -> &'static str {
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
fn field_manager(query: &Query, headers: &HeaderMap) -> String {
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
fn table_request(headers: &HeaderMap, query: &Query) -> Option<tables::IncludeObject> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    tables::wanted(accept).then(|| tables::IncludeObject::parse(query.get("includeObject")))
}

fn table_response(table: &Value) -> Response {
    let mut response = json_response(200, table);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(tables::TABLE_CONTENT_TYPE),
    );
    response
}

fn aggregated_response(body: &Value) -> Response {
    let mut response = json_response(200, body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(discovery::AGGREGATED_CONTENT_TYPE),
    );
    response
}

fn resolve(
    state: &AppState,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Result<Target, ApiError> {
    let (watch_path, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        _ => (false, rest),
    };
    let lookup = |plural: &str| {
        state
            .store
            .resource(group, version, plural)
            .ok_or_else(ApiError::unknown_path)
    };
    let namespaced_plural = |segment: &str| {
        state
            .store
            .resource(group, version, segment)
            .is_some_and(|r| r.namespaced)
    };
    let target =
        |info: ResourceInfo, ns: Option<&str>, name: Option<&str>, sub: Option<&str>| Target {
            info,
            namespace: ns.map(String::from),
            name: name.map(String::from),
            subresource: sub.map(String::from),
            watch_path,
        };
    let t = match rest {
        ["namespaces", ns, plural, tail @ ..] if namespaced_plural(plural) => {
            let info = lookup(plural)?;
            match tail {
                [] => target(info, Some(ns), None, None),
                [name] => target(info, Some(ns), Some(name), None),
                [name, sub] => target(info, Some(ns), Some(name), Some(sub)),
                _ => return Err(ApiError::unknown_path()),
            }
        }
        [plural] => target(lookup(plural)?, None, None, None),
        [plural, name] => target(lookup(plural)?, None, Some(name), None),
        [plural, name, sub] => target(lookup(plural)?, None, Some(name), Some(sub)),
        _ => return Err(ApiError::unknown_path()),
    };
    if t.info.namespaced && t.name.is_some() && t.namespace.is_none() {
        return Err(ApiError::unknown_path());
    }
    if !t.info.namespaced && t.namespace.is_some() {
        return Err(ApiError::unknown_path());
    }
    if let Some(sub) = &t.subresource {
        let known = (sub == "status" && t.info.status_subresource)
            || (sub == "scale" && t.info.scale.is_some())
            || (sub == "token" && t.info.kind == "ServiceAccount" && t.info.group.is_empty())
            || (sub == "eviction" && t.info.kind == "Pod" && t.info.group.is_empty())
            || (sub == "ephemeralcontainers" && t.info.kind == "Pod" && t.info.group.is_empty())
            || (sub == "log" && t.info.kind == "Pod" && t.info.group.is_empty())
            || (matches!(sub.as_str(), "exec" | "attach" | "portforward")
                && t.info.kind == "Pod"
                && t.info.group.is_empty())
            || (sub == "finalize" && t.info.kind == "Namespace");
        if !known {
            return Err(ApiError::unknown_path());
        }
    }
    Ok(t)
}

fn content_type(headers: &HeaderMap) -> String {
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

/// The object a POST or PUT sends: in a format the API server reads, and with the string maps of
/// ConfigMaps and Secrets holding strings only, as their Go types require.
fn parse_object_body(
    info: &ResourceInfo,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Value, ApiError> {
    let media = content_type(headers);
    if !matches!(
        media.as_str(),
        "" | "application/json" | "application/yaml" | crate::protobuf::MEDIA_TYPE
    ) {
        return Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format {media:?} - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf"
        )));
    }
    let object = parse_body(headers, body)?;
    let maps: &[&str] = match (info.group.as_str(), info.plural.as_str()) {
        ("", "configmaps") => &["data", "binaryData"],
        ("", "secrets") => &["data", "stringData"],
        _ => &[],
    };
    for field in maps {
        let Some(map) = object.get(*field).and_then(Value::as_object) else {
            continue;
        };
        if let Some(value) = map.values().find(|v| !v.is_string()) {
            let found = match value {
                Value::Number(_) => "number",
                Value::Bool(_) => "bool",
                Value::Array(_) => "array",
                Value::Object(_) => "object",
                _ => "null",
            };
            if found == "null" {
                continue;
            }
            return Err(ApiError::bad_request(format!(
                "{kind} in version \"v1\" cannot be handled as a {kind}: json: cannot unmarshal {found} into Go struct field {kind}.{field} of type string",
                kind = info.kind
            )));
        }
    }
    Ok(object)
}

fn parse_body(headers: &HeaderMap, body: &Bytes) -> Result<Value, ApiError> {
    let media = content_type(headers);
    if media == crate::protobuf::MEDIA_TYPE {
        return crate::protobuf::decode_object(body)
            .map_err(|e| ApiError::bad_request(e.to_string()));
    }
    if body.is_empty() {
        return Ok(Value::Null);
    }
    match serde_json::from_slice(body) {
        Ok(v) => Ok(v),
        Err(json_error) => {
            let text = std::str::from_utf8(body)
                .map_err(|_| ApiError::bad_request("the body is not UTF-8"))?;
            serde_saphyr::from_str(text).map_err(|_| {
                ApiError::bad_request(format!("the body is not valid JSON or YAML: {json_error}"))
            })
        }
    }
}

/// The `ephemeralcontainers` subresource (`kubectl debug`) may change `spec.ephemeralContainers`
/// and nothing else.
fn only_ephemeral_containers(patch: &Value, patch_type: PatchType) -> Result<(), ApiError> {
    let allowed = match patch_type {
        PatchType::Json => patch.as_array().is_some_and(|ops| {
            ops.iter().all(|op| {
                op["path"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("/spec/ephemeralContainers"))
            })
        }),
        _ => patch.as_object().is_some_and(|top| {
            top.iter().all(|(key, value)| match key.as_str() {
                "spec" => value.as_object().is_some_and(|spec| {
                    spec.keys().all(|k| {
                        k == "ephemeralContainers" || k == "$setElementOrder/ephemeralContainers"
                    })
                }),
                "metadata" | "apiVersion" | "kind" => true,
                _ => false,
            })
        }),
    };
    if allowed {
        return Ok(());
    }
    Err(ApiError::invalid(
        "Pod",
        "",
        "spec",
        "FieldValueForbidden",
        "Forbidden: pod updates through the ephemeralcontainers subresource may only change spec.ephemeralContainers",
    ))
}

/// What a body with unknown fields was meant to become, which decides the API server's wording.
enum Decoding<'a> {
    /// A whole object (create, update).
    Object,
    /// A merge or strategic merge patch.
    Patch,
    /// A server-side apply configuration of the object `ns/name`.
    Apply { ns: &'a str, name: &'a str },
}

/// Applies `fieldValidation` to the unknown fields of a built-in kind's body: `Strict` rejects
/// them, `Warn` (the default) and `Ignore` drop them as decoding into typed objects does, `Warn`
/// with one warning each. Server-side apply rejects them whatever the setting, as on a cluster.
fn check_fields(
    info: &ResourceInfo,
    query: &Query,
    body: &mut Value,
    decoding: Decoding,
) -> Result<Vec<String>, ApiError> {
    let mode = query.get("fieldValidation").unwrap_or("");
    if !matches!(mode, "" | "Ignore" | "Warn" | "Strict") {
        return Err(ApiError::bad_request(format!(
            "fieldValidation: Unsupported value: {mode:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
        )));
    }
    // A custom resource is pruned by the store once the write is resolved (a patch's nulls are
    // deletions, not values), so here its unknown fields are only reported.
    let unknown = match (&info.schema, info.builtin) {
        (_, true) => openapi::unknown_fields(info, body),
        (Some(schema), false) => crate::structural::prune(schema, &mut body.clone()),
        (None, false) => return Ok(Vec::new()),
    };
    let strict = mode == "Strict" || matches!(decoding, Decoding::Apply { .. });
    if strict {
        if unknown.is_empty() {
            return Ok(Vec::new());
        }
        let listed: Vec<String> = unknown
            .iter()
            .map(|path| format!("unknown field \"{path}\""))
            .collect();
        let message = match decoding {
            Decoding::Object => format!(
                "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
                listed.join(", "),
                kind = info.kind,
                version = info.version
            ),
            Decoding::Patch => format!("strict decoding error: {}", listed.join(", ")),
            Decoding::Apply { ns, name } => format!(
                "failed to create typed patch object ({ns}{slash}{name}; {api_version}, Kind={kind}): .{path}: field not declared in schema",
                slash = if ns.is_empty() { "" } else { "/" },
                api_version = info.api_version(),
                kind = info.kind,
                path = unknown[0]
            ),
        };
        return Err(ApiError::bad_request(message));
    }
    let dropped = if info.builtin {
        openapi::prune_unknown_fields(info, body)
    } else {
        unknown
    };
    Ok(if mode == "Ignore" {
        Vec::new()
    } else {
        dropped
            .iter()
            .map(|path| format!("unknown field \"{path}\""))
            .collect()
    })
}

/// Adds one `Warning` header per message, which kubectl prints as `Warning: <message>`.
fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let text = format!("299 - {}", Value::String(warning.clone()));
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

#[allow(clippy::too_many_arguments)]
async fn serve(
    state: &AppState,
    identity: &Identity,
    method: &Method,
    headers: &HeaderMap,
    query: &Query,
    target: Target,
    body: Bytes,
    faults: &FaultPlan,
) -> Result<Response, ApiError> {
    let store = &state.store;
    let info = &target.info;
    let ns = target.namespace.as_deref().unwrap_or("");
    query.check_options()?;
    let dry_run = query.dry_run()?;
    let write = WriteOptions {
        dry_run,
        field_manager: field_manager(query, headers),
        force: query.flag("force"),
    };
    let part = match target.subresource.as_deref() {
        Some("status") => Part::Status,
        _ => Part::Main,
    };
    match (method, &target.name, target.subresource.as_deref()) {
        (&Method::GET, None, _) => {
            let labels = LabelSelector::parse(query.get("labelSelector").unwrap_or(""))?;
            let fields = FieldSelector::parse(
                query.get("fieldSelector").unwrap_or(""),
                &info.kind,
                &info.group,
            )?;
            if target.watch_path || query.flag("watch") {
                let table = table_request(headers, query);
                return watch(state, &target, query, (labels, fields), table, faults);
            }
            let page = list_page(store, &target, query, &labels, &fields)?;
            let mut metadata = json!({"resourceVersion": page.rv.to_string()});
            if let Some(token) = &page.continue_token {
                metadata["continue"] = json!(token);
            }
            if let Some(remaining) = page
                .remaining
                .filter(|_| labels.is_empty() && fields.is_empty())
            {
                metadata["remainingItemCount"] = json!(remaining);
            }
            if let Some(include) = table_request(headers, query) {
                let mut table =
                    tables::table(info, &page.items, &page.rv.to_string(), include, true);
                if let Some(token) = &page.continue_token {
                    table["metadata"]["continue"] = json!(token);
                }
                return Ok(table_response(&table));
            }
            Ok(json_response(
                200,
                &json!({
                    "kind": format!("{}List", info.kind), "apiVersion": info.api_version(),
                    "metadata": metadata, "items": page.items
                }),
            ))
        }
        (&Method::GET, Some(name), Some("scale")) => {
            let object = store.get(info, ns, name)?;
            Ok(json_response(200, &scale::scale_of(info, &object)))
        }
        (&Method::GET, Some(name), _) => {
            let object = store.get(info, ns, name)?;
            match table_request(headers, query) {
                Some(include) if part == Part::Main => {
                    let rv = object["metadata"]["resourceVersion"].as_str().unwrap_or("");
                    Ok(table_response(&tables::table(
                        info,
                        std::slice::from_ref(&object),
                        rv,
                        include,
                        true,
                    )))
                }
                _ => Ok(json_response(200, &object)),
            }
        }
        (&Method::POST, None, None) => {
            let mut body = parse_object_body(info, headers, &body)?;
            let warnings = check_fields(info, query, &mut body, Decoding::Object)?;
            state
                .auth
                .admit_owner_references(store, identity, info, ns, &body, None)?;
            let created = store.create(info, target.namespace.as_deref(), body, &write)?;
            Ok(with_warnings(json_response(201, &created), &warnings))
        }
        (&Method::POST, _, _) => Err(ApiError::method_not_allowed(
            "POST is only allowed on a collection",
        )),
        (&Method::PUT, Some(name), Some("scale")) => {
            let scale = parse_body(headers, &body)?;
            let updated = scale::set_scale(store, info, ns, name, &scale, &write)?;
            Ok(json_response(200, &scale::scale_of(info, &updated)))
        }
        (&Method::PUT, Some(name), _) => {
            let mut body = parse_object_body(info, headers, &body)?;
            let warnings = check_fields(info, query, &mut body, Decoding::Object)?;
            if part == Part::Main {
                let old = store.get(info, ns, name).ok();
                state.auth.admit_owner_references(
                    store,
                    identity,
                    info,
                    ns,
                    &body,
                    old.as_ref(),
                )?;
            }
            let updated = store.update(info, ns, name, body, part, &write)?;
            Ok(with_warnings(json_response(200, &updated), &warnings))
        }
        (&Method::PATCH, Some(name), sub) => {
            let patch_type = match content_type(headers).as_str() {
                "application/merge-patch+json" => PatchType::Merge,
                "application/json-patch+json" => PatchType::Json,
                "application/strategic-merge-patch+json" => PatchType::Strategic,
                "application/apply-patch+yaml" | "application/apply-patch+json" => PatchType::Apply,
                other => {
                    return Err(ApiError::unsupported_media_type(format!(
                        "the body of the request was in an unknown format {other:?} - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json"
                    )));
                }
            };
            if patch_type == PatchType::Apply && query.get("fieldManager").is_none_or(str::is_empty)
            {
                return Err(ApiError::bad_request(
                    "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                ));
            }
            // Only an apply patch may be YAML; the others are JSON, as the API server reads them.
            let mut patch = if patch_type == PatchType::Apply {
                parse_body(headers, &body)?
            } else {
                serde_json::from_slice(&body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?
            };
            if sub == Some("ephemeralcontainers") {
                only_ephemeral_containers(&patch, patch_type)?;
            }
            let warnings = match patch_type {
                PatchType::Json => Vec::new(),
                PatchType::Apply => {
                    check_fields(info, query, &mut patch, Decoding::Apply { ns, name })?
                }
                PatchType::Merge | PatchType::Strategic => {
                    check_fields(info, query, &mut patch, Decoding::Patch)?
                }
            };
            if sub == Some("scale") {
                let object = store.get(info, ns, name)?;
                let mut scale = scale::scale_of(info, &object);
                match patch_type {
                    PatchType::Json => crate::patch::json_patch(&mut scale, &patch)
                        .map_err(ApiError::unprocessable_patch)?,
                    _ => crate::patch::merge_patch(&mut scale, &patch),
                }
                let updated = scale::set_scale(store, info, ns, name, &scale, &write)?;
                return Ok(json_response(200, &scale::scale_of(info, &updated)));
            }
            if patch_type == PatchType::Apply
                && !identity.is_admin()
                && store.get(info, ns, name).is_err()
            {
                // An apply that creates the object needs create as well as patch, as on a cluster.
                let create = auth::Request::Resource {
                    verb: "create".into(),
                    group: info.group.clone(),
                    resource: info.plural.clone(),
                    subresource: String::new(),
                    namespace: ns.to_string(),
                    name: name.to_string(),
                };
                if !state.auth.authorize(store, identity, &create).allowed {
                    return Err(auth::forbidden(identity, &create));
                }
            }
            if part == Part::Main && !identity.is_admin() {
                // The admission check needs the patched object: a dry run computes it.
                let preview = WriteOptions {
                    dry_run: true,
                    ..write.clone()
                };
                let old = store.get(info, ns, name).ok();
                let (patched, _) =
                    store.patch(info, ns, name, patch_type, &patch, part, &preview)?;
                state.auth.admit_owner_references(
                    store,
                    identity,
                    info,
                    ns,
                    &patched,
                    old.as_ref(),
                )?;
            }
            let (object, created) =
                store.patch(info, ns, name, patch_type, &patch, part, &write)?;
            let response = json_response(if created { 201 } else { 200 }, &object);
            Ok(with_warnings(response, &warnings))
        }
        (&Method::DELETE, Some(name), None) => {
            let options = delete_options(headers, &body, query)?;
            Ok(json_response(
                200,
                &store.delete(info, ns, name, &options, dry_run)?,
            ))
        }
        (&Method::DELETE, None, None) => {
            let labels = LabelSelector::parse(query.get("labelSelector").unwrap_or(""))?;
            let fields = FieldSelector::parse(
                query.get("fieldSelector").unwrap_or(""),
                &info.kind,
                &info.group,
            )?;
            let options = delete_options(headers, &body, query)?;
            let (items, _) = store.list(info, target.namespace.as_deref(), &labels, &fields);
            let mut deleted = Vec::new();
            for item in items {
                let name = item["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let item_ns = item["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                deleted.push(store.delete(info, &item_ns, &name, &options, dry_run)?);
            }
            let rv = store.resource_version();
            Ok(json_response(
                200,
                &json!({
                    "kind": format!("{}List", info.kind), "apiVersion": info.api_version(),
                    "metadata": {"resourceVersion": rv.to_string()}, "items": deleted
                }),
            ))
        }
        _ => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource: {method}"
        ))),
    }
}

/// A list request, in pages when it sets `limit` or `continue`. As the API server's watch cache
/// does, `resourceVersion=0` without a token answers everything in one page.
fn list_page(
    store: &Store,
    target: &Target,
    query: &Query,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> Result<crate::store::Page, ApiError> {
    let token = query.get("continue").filter(|t| !t.is_empty());
    let limit = match query.get("limit").filter(|l| !l.is_empty()) {
        None => None,
        Some(text) => Some(text.parse::<i64>().map_err(|_| {
            ApiError::bad_request(format!(
                "limit: Invalid value: {text:?}: must be an integer"
            ))
        })?),
    };
    let from_cache = query.get("resourceVersion") == Some("0") && token.is_none();
    let limit = match limit.filter(|l| *l > 0) {
        Some(limit) if !from_cache => limit as usize,
        _ if token.is_some() => usize::MAX,
        _ => {
            let (items, rv) = store.list(&target.info, target.namespace.as_deref(), labels, fields);
            return Ok(crate::store::Page {
                items,
                rv,
                continue_token: None,
                remaining: None,
            });
        }
    };
    store.list_page(
        &target.info,
        target.namespace.as_deref(),
        labels,
        fields,
        limit,
        token,
    )
}

/// A deletion's `propagationPolicy`, if any, is one Kubernetes knows.
fn check_propagation(policy: Option<&str>) -> Result<(), ApiError> {
    match policy {
        None | Some("" | "Orphan" | "Background" | "Foreground") => Ok(()),
        Some(other) => Err(ApiError::bad_request(format!(
            "propagationPolicy: Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
        ))),
    }
}

fn delete_options(
    headers: &HeaderMap,
    body: &Bytes,
    query: &Query,
) -> Result<DeleteOptions, ApiError> {
    let options = parse_body(headers, body)?;
    check_propagation(options["propagationPolicy"].as_str())?;
    Ok(DeleteOptions {
        uid: options["preconditions"]["uid"].as_str().map(String::from),
        resource_version: options["preconditions"]["resourceVersion"]
            .as_str()
            .map(String::from),
        propagation: options["propagationPolicy"]
            .as_str()
            .or(query.get("propagationPolicy"))
            .map(String::from),
    })
}

fn watch(
    state: &AppState,
    target: &Target,
    query: &Query,
    (labels, mut fields): (LabelSelector, FieldSelector),
    table: Option<tables::IncludeObject>,
    faults: &FaultPlan,
) -> Result<Response, ApiError> {
    let drop_after = faults.watch_drop_after;
    if query.flag("sendInitialEvents") {
        return Err(ApiError::invalid(
            "ListOptions",
            "",
            "sendInitialEvents",
            "FieldValueForbidden",
            "Forbidden: streaming lists are not supported by the sandbox; use list then watch",
        ));
    }
    if target.watch_path
        && let Some(name) = &target.name
    {
        fields = FieldSelector::parse(
            &format!("metadata.name={name}"),
            &target.info.kind,
            &target.info.group,
        )?;
    }
    let info = target.info.clone();
    let namespace = target.namespace.clone();
    let bookmarks = query.flag("allowWatchBookmarks");
    let mut timeout = Duration::from_secs(
        query
            .get("timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .unwrap_or(1800),
    );
    if let Some(drop) = drop_after {
        timeout = timeout.min(drop);
    }
    let metrics = state.metrics.clone();
    let resumed = query
        .get("resourceVersion")
        .is_some_and(|rv| !rv.is_empty() && rv != "0");
    let start = if faults.expire_watch && resumed {
        Err(ApiError::expired(
            "too old resource version (sandbox fault injection)",
        ))
    } else {
        state.store.watch(&info, query.get("resourceVersion"))
    };
    let start = match start {
        Ok(start) => Some(start),
        Err(expired) if expired.code == 410 => {
            let line = format!(
                "{}\n",
                json!({"type": "ERROR", "object": expired.to_status()})
            );
            return Ok(stream_response(futures::stream::once(async move {
                Ok::<Bytes, Infallible>(Bytes::from(line))
            })));
        }
        Err(other) => return Err(other),
    };
    let Some(start) = start else { unreachable!() };
    let (mut tx, rx) = futures::channel::mpsc::channel::<Result<Bytes, Infallible>>(256);
    let bookmark_interval = state.bookmark_interval;
    let mut resets = state.store.resets();
    let matches = move |object: &Value| {
        namespace
            .as_deref()
            .is_none_or(|ns| object["metadata"]["namespace"].as_str() == Some(ns))
            && labels.matches(object)
            && fields.matches(object)
    };
    metrics.watch_started();
    tokio::spawn(async move {
        let _ended = WatchEnded(metrics);
        let line = |kind: &str, object: &Value| {
            let mut text =
                serde_json::to_vec(&WatchEvent { kind, object }).expect("a JSON value serialises");
            text.push(b'\n');
            Bytes::from(text)
        };
        // With a Table Accept each event carries a one-row Table; only the first has the columns.
        let mut columns_sent = false;
        let mut event = |kind: &str, object: &Value| match table {
            None => line(kind, object),
            Some(include) => {
                let rv = object["metadata"]["resourceVersion"].as_str().unwrap_or("");
                let row = tables::table(
                    &info,
                    std::slice::from_ref(object),
                    rv,
                    include,
                    !columns_sent,
                );
                columns_sent = true;
                line(kind, &row)
            }
        };
        let mut last_rv = start.start_rv;
        let storage_key = info.storage_key();
        for (change, object) in &start.initial {
            if matches(object) && tx.send(Ok(event(change.as_str(), object))).await.is_err() {
                return;
            }
        }
        let mut receiver = start.receiver;
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut ticker = tokio::time::interval(bookmark_interval);
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = &mut deadline => break,
                _ = resets.recv() => {
                    let expired = ApiError::expired("the history was compacted; list again and re-watch");
                    let _ = tx.send(Ok(line("ERROR", &expired.to_status()))).await;
                    return;
                }
                _ = ticker.tick(), if bookmarks => {
                    let bookmark = json!({"kind": info.kind, "apiVersion": info.api_version(),
                        "metadata": {"resourceVersion": last_rv.to_string()}});
                    if tx.send(Ok(line("BOOKMARK", &bookmark))).await.is_err() {
                        return;
                    }
                }
                received = receiver.recv() => match received {
                    Ok(change) => {
                        if change.rv <= start.start_rv {
                            continue;
                        }
                        last_rv = change.rv;
                        if change.resource != storage_key {
                            continue;
                        }
                        let object = Store::present_shared(&info, &change.object);
                        let now = matches(&object);
                        let before = change
                            .previous
                            .as_ref()
                            .is_some_and(|previous| matches(&Store::present_shared(&info, previous)));
                        let kind = match change.change {
                            ChangeType::Added if now => "ADDED",
                            ChangeType::Modified if now && before => "MODIFIED",
                            ChangeType::Modified if now => "ADDED",
                            ChangeType::Modified if before => "DELETED",
                            ChangeType::Deleted if now || before => "DELETED",
                            _ => continue,
                        };
                        if tx.send(Ok(event(kind, &object))).await.is_err() {
                            return;
                        }
                    }
                    Err(RecvError::Lagged(_)) => {
                        let expired = ApiError::expired("the watch fell behind; list again and re-watch");
                        let _ = tx.send(Ok(line("ERROR", &expired.to_status()))).await;
                        return;
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        }
    });
    let mut response = stream_response(rx);
    if table.is_some() {
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(tables::TABLE_CONTENT_TYPE),
        );
    }
    Ok(response)
}

/// One line of a watch stream, serialised without copying the object into a new JSON tree.
#[derive(serde::Serialize)]
struct WatchEvent<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    object: &'a Value,
}

/// Marks a watch as ended when its task finishes, however it finishes.
struct WatchEnded(Arc<Metrics>);

impl Drop for WatchEnded {
    fn drop(&mut self) {
        self.0.watch_ended();
    }
}

fn stream_response<S>(stream: S) -> Response
where
    S: futures::Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
{
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
