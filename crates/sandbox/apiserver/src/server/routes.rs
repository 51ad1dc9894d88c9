//! The entry point: every request's path to discovery, OpenAPI, the sandbox's own endpoints, or a
//! resource's verb.

use super::pods::*;
use super::request::*;
use super::target::*;
use super::verbs::*;
use crate::apiproxy;
use crate::auth;
use crate::discovery;
use crate::instrument::FaultRule;
use crate::kubelet::Transport;
use crate::openapi;
use crate::registry::Verbs;
use crate::status::ApiError;
use axum::body::{Body, Bytes};
use axum::extract::FromRequestParts;
use axum::extract::State;
use axum::extract::ws::WebSocketUpgrade;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Builds the router serving the whole API.
pub fn router(state: AppState) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(state)
}

pub(crate) async fn handle(
    State(state): State<AppState>,
    request: axum::extract::Request,
) -> Response {
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

pub(crate) async fn route(
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
