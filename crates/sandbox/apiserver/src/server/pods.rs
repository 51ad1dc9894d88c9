//! The pod subresources that stream or measure: exec and port-forward upgrades, logs, resource
//! metrics and evictions, handed to the [`crate::kubelet::Kubelet`].

use super::request::*;
use crate::auth;
use crate::kubelet::{LogOptions, Transport};
use crate::selectors::LabelSelector;
use crate::status::ApiError;
use crate::store::DeleteOptions;
use axum::extract::ws::WebSocketUpgrade;
use axum::http::{HeaderMap, HeaderValue, Method, Uri, header};
use axum::response::Response;
use serde_json::{Value, json};

/// The answer to a streaming subresource the sandbox cannot serve as asked.
pub(crate) fn streaming_unavailable(sub: &str) -> ApiError {
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
pub(crate) fn streaming_upgrade(
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
pub(crate) fn exec_upgrade(
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

/// Serves `pods/NAME/log` (`kubectl logs`) from what the runtime kept of the pod's output.
pub(crate) fn serve_log(
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
pub(crate) fn serve_resource_metrics(
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
pub(crate) fn evict(
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
