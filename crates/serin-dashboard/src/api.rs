//! The JSON endpoints behind the pages: who is signed in, signing in and out, a Canary's Events,
//! images and routes (read as the viewer), and the actions (written as the viewer).

use crate::App;
use crate::access::{Credential, MAX_TOKEN_BYTES, Refusal, SESSION_COOKIE, Viewer};
use crate::guard::text;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode, header};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Service};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use serin_api::{Canary, ManualRequest};
use std::sync::Arc;

/// Events shown on a Canary's page: the latest.
const MAX_EVENTS: usize = 50;
/// Deployments read per namespace for the list's images.
const MAX_DEPLOYMENTS: u32 = 500;

fn json_response(status: StatusCode, value: &Value) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(value.to_string()))
        .unwrap_or_default()
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    json_response(status, &json!({"error": message.into()}))
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::Unauthenticated(reason) => error(StatusCode::UNAUTHORIZED, reason),
            Refusal::Unavailable(reason) => error(StatusCode::SERVICE_UNAVAILABLE, reason),
        }
    }
}

/// `GET /api/me`: the viewer, the dashboard's mode and the CSRF token their pages send.
pub async fn me(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    match app.access.viewer(&headers).await {
        Ok(viewer) => json_response(
            StatusCode::OK,
            &json!({
                "user": viewer.user,
                "mode": format!("{:?}", app.access.mode()).to_lowercase(),
                "csrf": app.access.csrf_token(&viewer.credential),
                "signedIn": matches!(viewer.credential, Credential::Session { .. }),
            }),
        ),
        Err(refusal) => refusal.into_response(),
    }
}

/// `POST /api/login` with `{"token": "..."}`: checks the token with a TokenReview and opens a
/// session in an HttpOnly, SameSite=Strict cookie. The token never appears in a URL or a log.
pub async fn login(State(app): State<Arc<App>>, body: Bytes) -> Response {
    if body.len() > MAX_TOKEN_BYTES + 64 {
        return error(StatusCode::PAYLOAD_TOO_LARGE, "the token is too long");
    }
    let token = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["token"].as_str().map(|t| t.trim().to_string()))
        .filter(|t| !t.is_empty());
    let Some(token) = token else {
        return error(
            StatusCode::BAD_REQUEST,
            "paste a Kubernetes token, e.g. the output of `kubectl create token <serviceaccount>`",
        );
    };
    let viewer = match app
        .access
        .authenticate(Credential::Bearer(token.clone()))
        .await
    {
        Ok(viewer) => viewer,
        Err(refusal) => return refusal.into_response(),
    };
    let Some(id) = app.access.open_session(token) else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many open sessions: try again later",
        );
    };
    tracing::info!(user = %viewer.user, "signed in");
    let secure = if app.secure_cookies { "; Secure" } else { "" };
    let cookie = format!(
        "{SESSION_COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        crate::access::SESSION_LIFETIME.as_secs()
    );
    Response::builder()
        .status(StatusCode::OK)
        .header(header::SET_COOKIE, cookie)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(json!({"user": viewer.user}).to_string()))
        .unwrap_or_default()
}

/// `POST /api/logout`: ends the session.
pub async fn logout(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let viewer = match app.access.viewer(&headers).await {
        Ok(viewer) => viewer,
        Err(refusal) => return refusal.into_response(),
    };
    if !app.access.csrf_matches(&viewer.credential, &headers) {
        return csrf_refusal();
    }
    if let Credential::Session { id, .. } = &viewer.credential {
        app.access.close_session(id);
    }
    Response::builder()
        .status(StatusCode::OK)
        .header(
            header::SET_COOKIE,
            format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
        )
        .body(Body::empty())
        .unwrap_or_default()
}

fn csrf_refusal() -> Response {
    error(
        StatusCode::FORBIDDEN,
        "the request carries no valid CSRF token: act from the dashboard's own page (reload it if it was open before the dashboard restarted)",
    )
}

/// A namespace or name as Kubernetes allows it (a DNS subdomain), so it can go into a URL.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

/// Whether `viewer` may `verb` Canaries of `namespace`; the answer refusing it when not.
async fn authorize(
    app: &App,
    viewer: &Viewer,
    verb: &str,
    namespace: &str,
) -> Result<(), Response> {
    match app.access.may(viewer, verb, namespace).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(error(
            StatusCode::FORBIDDEN,
            format!(
                "{} may not {verb} canaries.{} in namespace {namespace}: ask for a Role there that grants it",
                viewer.user,
                serin_api::api_group().name()
            ),
        )),
        Err(refusal) => Err(refusal.into_response()),
    }
}

/// The viewer of a request that reads Canaries of `namespace` with `verb`, or the answer refusing
/// it.
async fn reader(
    app: &App,
    headers: &HeaderMap,
    verb: &str,
    namespace: &str,
) -> Result<Viewer, Response> {
    let viewer = app
        .access
        .viewer(headers)
        .await
        .map_err(IntoResponse::into_response)?;
    authorize(app, &viewer, verb, namespace).await?;
    Ok(viewer)
}

/// `GET /api/canaries/{namespace}/{name}/details`: the Canary's Events, images and routes, each
/// read with the viewer's own rights (what they may not read is named instead).
pub async fn details(
    State(app): State<Arc<App>>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if !valid_name(&namespace) || !valid_name(&name) {
        return error(StatusCode::NOT_FOUND, "no such Canary");
    }
    let viewer = match reader(&app, &headers, "get", &namespace).await {
        Ok(viewer) => viewer,
        Err(refused) => return refused,
    };
    let key = kube::runtime::reflector::ObjectRef::<Canary>::new(&name).within(&namespace);
    let Some(canary) = app.canaries.get(&key) else {
        return error(
            StatusCode::NOT_FOUND,
            format!("no Canary {namespace}/{name}"),
        );
    };
    let client = match app.access.client_of(&viewer) {
        Ok(client) => client,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let (events, images, routes) = tokio::join!(
        events_of(&client, &namespace, &name),
        images_of(&client, &namespace, &canary),
        routes_of(&client, &namespace, &canary),
    );
    json_response(
        StatusCode::OK,
        &json!({"events": events, "images": images, "routes": routes}),
    )
}

/// What a page shows instead of something the viewer could not read.
fn unreadable(what: &str, error: &kube::Error) -> Value {
    let reason = match error {
        kube::Error::Api(status) if status.code == 403 => {
            "you may not read them in this namespace".to_string()
        }
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    };
    json!({"error": format!("cannot read {what}: {reason}")})
}

async fn events_of(client: &kube::Client, namespace: &str, name: &str) -> Value {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let selector = format!("involvedObject.name={name},involvedObject.kind=Canary");
    let recent = ListParams::default().fields(&selector).limit(1000);
    match api.list(&recent).await {
        Ok(list) => {
            let mut events: Vec<(Option<k8s_openapi::jiff::Timestamp>, u64, Event)> = list
                .items
                .into_iter()
                .map(|e| {
                    let time = e
                        .last_timestamp
                        .as_ref()
                        .map(|t| t.0)
                        .or(e.event_time.as_ref().map(|t| t.0))
                        .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0));
                    let written = e
                        .metadata
                        .resource_version
                        .as_deref()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or_default();
                    (time, written, e)
                })
                .collect();
            // Events of the same second keep the order they were written in.
            events.sort_by_key(|(time, written, _)| (*time, *written));
            let excess = events.len().saturating_sub(MAX_EVENTS);
            let items: Vec<Value> = events[excess..]
                .iter()
                .map(|(time, _, e)| {
                    json!({
                        "time": time.map(|t| t.to_string()),
                        "type": e.type_,
                        "reason": e.reason,
                        "message": e.message,
                        "count": e.count,
                    })
                })
                .collect();
            json!({"items": items})
        }
        Err(e) => unreadable("Events", &e),
    }
}

fn first_image(deployment: &Deployment) -> Option<String> {
    deployment
        .spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .first()?
        .image
        .clone()
}

async fn images_of(client: &kube::Client, namespace: &str, canary: &Canary) -> Value {
    let target = &canary.spec.target_ref;
    if target.kind != "Deployment" {
        return json!({});
    }
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let primary = format!("{}-primary", target.name);
    let read = |name: String| {
        let api = api.clone();
        async move {
            match api.get_opt(&name).await {
                Ok(found) => json!(found.as_ref().and_then(first_image)),
                Err(e) => unreadable("Deployments", &e),
            }
        }
    };
    let (canary_image, primary_image) = tokio::join!(read(target.name.clone()), read(primary));
    json!({"canary": canary_image, "primary": primary_image})
}

/// `GET /api/namespaces/{namespace}/images`: the first image of each Deployment of the
/// namespace, read as the viewer, for the list's image column.
pub async fn namespace_images(
    State(app): State<Arc<App>>,
    Path(namespace): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !valid_name(&namespace) {
        return error(StatusCode::NOT_FOUND, "no such namespace");
    }
    let viewer = match reader(&app, &headers, "list", &namespace).await {
        Ok(viewer) => viewer,
        Err(refused) => return refused,
    };
    let client = match app.access.client_of(&viewer) {
        Ok(client) => client,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let api: Api<Deployment> = Api::namespaced(client, &namespace);
    match api
        .list(&ListParams::default().limit(MAX_DEPLOYMENTS))
        .await
    {
        Ok(list) => {
            let images: serde_json::Map<String, Value> = list
                .items
                .iter()
                .filter_map(|d| Some((d.metadata.name.clone()?, json!(first_image(d)?))))
                .collect();
            json_response(StatusCode::OK, &Value::Object(images))
        }
        Err(e) => json_response(StatusCode::OK, &unreadable("Deployments", &e)),
    }
}

/// The routes now in force for a Canary, read as the viewer: the VirtualService or HTTPRoute's
/// destinations and weights, or the Services' selectors.
async fn routes_of(client: &kube::Client, namespace: &str, canary: &Canary) -> Value {
    let service = canary.spec.service_name().to_string();
    let provider = canary.spec.provider.clone().unwrap_or_default();
    let kind = if provider.starts_with("gatewayapi") {
        Some(("gateway.networking.k8s.io", "v1", "HTTPRoute"))
    } else if provider == "kubernetes" {
        None
    } else {
        Some(("networking.istio.io", "v1beta1", "VirtualService"))
    };
    let Some((group, version, kind)) = kind else {
        return services_of(client, namespace, &service).await;
    };
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    match api.get_opt(&service).await {
        Ok(Some(route)) => {
            let rules = if kind == "HTTPRoute" {
                gateway_rules(&route.data["spec"])
            } else {
                istio_rules(&route.data["spec"])
            };
            json!({"kind": kind, "name": service, "rules": rules})
        }
        Ok(None) => json!({"kind": kind, "name": service, "rules": []}),
        Err(e) => unreadable(&format!("{kind}s"), &e),
    }
}

fn istio_rules(spec: &Value) -> Vec<Value> {
    let http = spec["http"].as_array().cloned().unwrap_or_default();
    http.iter()
        .take(20)
        .map(|rule| {
            let to: Vec<Value> = rule["route"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| json!({"to": r["destination"]["host"], "weight": r["weight"]}))
                .collect();
            json!({"name": rule["name"], "match": !rule["match"].is_null(), "mirror": rule["mirror"]["host"], "to": to})
        })
        .collect()
}

fn gateway_rules(spec: &Value) -> Vec<Value> {
    let rules = spec["rules"].as_array().cloned().unwrap_or_default();
    rules
        .iter()
        .take(20)
        .map(|rule| {
            let to: Vec<Value> = rule["backendRefs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| json!({"to": r["name"], "weight": r["weight"]}))
                .collect();
            let matches = rule["matches"].as_array().is_some_and(|m| {
                m.iter()
                    .any(|m| m.get("headers").is_some() || m.get("queryParams").is_some())
            });
            json!({"name": rule["name"], "match": matches, "to": to})
        })
        .collect()
}

async fn services_of(client: &kube::Client, namespace: &str, service: &str) -> Value {
    let api: Api<Service> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(service).await {
        Ok(found) => {
            let selector = found
                .and_then(|s| s.spec)
                .and_then(|s| s.selector)
                .unwrap_or_default();
            let to: Vec<Value> = selector
                .iter()
                .map(|(k, v)| json!({"to": format!("{k}={v}"), "weight": Value::Null}))
                .collect();
            json!({"kind": "Service", "name": service, "rules": [{"name": "selector", "match": false, "to": to}]})
        }
        Err(e) => unreadable("Services", &e),
    }
}

/// `POST /api/canaries/{namespace}/{name}/actions/{action}`: a manual request, or pause and
/// resume, written with the viewer's own rights after a SubjectAccessReview for `patch`. A
/// request answers its token; the page shows it acknowledged when the operator records it.
pub async fn act(
    State(app): State<Arc<App>>,
    Path((namespace, name, action)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    if !valid_name(&namespace) || !valid_name(&name) {
        return error(StatusCode::NOT_FOUND, "no such Canary");
    }
    let viewer = match app.access.viewer(&headers).await {
        Ok(viewer) => viewer,
        Err(refusal) => return refusal.into_response(),
    };
    if !app.access.csrf_matches(&viewer.credential, &headers) {
        return csrf_refusal();
    }
    let request = match action.as_str() {
        "promote" => Some(ManualRequest::Promote),
        "promote-full" => Some(ManualRequest::PromoteFull),
        "abort" => Some(ManualRequest::Abort),
        "retry" => Some(ManualRequest::Retry),
        "restart" => Some(ManualRequest::Restart),
        "pause" | "resume" => None,
        other => {
            return error(
                StatusCode::NOT_FOUND,
                format!(
                    "unknown action '{other}': promote, promote-full, abort, retry, restart, pause or resume"
                ),
            );
        }
    };
    if let Err(refused) = authorize(&app, &viewer, "patch", &namespace).await {
        return refused;
    }
    let client = match app.access.client_of(&viewer) {
        Ok(client) => client,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let canaries: Api<Canary> = Api::namespaced(client, &namespace);
    let (patch, token) = match request {
        Some(request) => {
            let token = k8s_openapi::jiff::Timestamp::now()
                .as_millisecond()
                .to_string();
            (
                json!({"metadata": {"annotations": {request.annotation(): token}}}),
                Some(token),
            )
        }
        None => (json!({"spec": {"suspend": action == "pause"}}), None),
    };
    match canaries
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            tracing::info!(user = %viewer.user, %namespace, %name, %action, "action requested");
            json_response(
                StatusCode::ACCEPTED,
                &json!({"action": action, "token": token, "kind": request.map(|r| r.verb())}),
            )
        }
        Err(kube::Error::Api(status)) => error(
            StatusCode::from_u16(status.code).unwrap_or(StatusCode::BAD_GATEWAY),
            format!("Kubernetes refused the {action}: {}", status.message),
        ),
        Err(e) => error(StatusCode::BAD_GATEWAY, format!("the {action} failed: {e}")),
    }
}

/// `GET /healthz`.
pub async fn healthz() -> Response {
    text(StatusCode::OK, "ok")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_could_leave_the_path_are_not_valid() {
        assert!(valid_name("team-a"));
        assert!(!valid_name("../secrets"));
        assert!(!valid_name("a/b"));
        assert!(!valid_name(""));
    }

    #[test]
    fn istio_routes_show_each_destination_and_weight() {
        let spec = json!({"http": [{"name": "canary", "route": [
            {"destination": {"host": "podinfo-primary"}, "weight": 80},
            {"destination": {"host": "podinfo-canary"}, "weight": 20}]}]});
        let rules = istio_rules(&spec);
        assert_eq!(
            rules[0]["to"][1],
            json!({"to": "podinfo-canary", "weight": 20})
        );
    }
}
