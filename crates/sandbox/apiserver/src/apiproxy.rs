//! The API server's proxy subresources: `services/NAME[:PORT]/proxy/PATH` and
//! `pods/NAME[:PORT]/proxy/PATH` forward a request to a pod, as `kubectl get --raw` and
//! `kubectl proxy` use them (`http://127.0.0.1:8001/api/v1/namespaces/test/services/podinfo:9898/proxy/`).

use crate::services;
use crate::status::ApiError;
use crate::store::Store;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Request, Uri, header};
use axum::response::{IntoResponse, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::sync::LazyLock;
use std::time::Duration;

static CLIENT: LazyLock<Client<HttpConnector, Body>> = LazyLock::new(|| {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(Duration::from_secs(2)));
    Client::builder(TokioExecutor::new()).build(connector)
});

/// A proxy request: which pod or Service, which port, and the path to ask it for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyRequest {
    /// `services` or `pods`.
    pub resource: String,
    /// Namespace of the object.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The port (number or name), when the URL names one.
    pub port: Option<String>,
    /// The path after `/proxy`, starting with `/`.
    pub path: String,
}

/// Reads `/api/v1/namespaces/NS/{services|pods}/[SCHEME:]NAME[:PORT]/proxy[/PATH]`.
pub fn parse(segments: &[&str], raw_path: &str) -> Option<ProxyRequest> {
    let [
        "api",
        "v1",
        "namespaces",
        namespace,
        resource,
        target,
        "proxy",
        ..,
    ] = segments
    else {
        return None;
    };
    if *resource != "services" && *resource != "pods" {
        return None;
    }
    let parts: Vec<&str> = target.split(':').collect();
    let (name, port) = match parts.as_slice() {
        [name] => (*name, None),
        [name, port] => (*name, Some(*port)),
        [_scheme, name, port] => (*name, Some(*port)),
        _ => return None,
    };
    let marker = format!("/{target}/proxy");
    let path = raw_path
        .split_once(&marker)
        .map(|(_, rest)| rest)
        .filter(|rest| !rest.is_empty())
        .unwrap_or("/");
    Some(ProxyRequest {
        resource: resource.to_string(),
        namespace: namespace.to_string(),
        name: name.to_string(),
        port: port.filter(|p| !p.is_empty()).map(String::from),
        path: path.to_string(),
    })
}

fn unavailable(message: String) -> ApiError {
    let mut error = ApiError::internal(message);
    error.code = 503;
    error.reason = "ServiceUnavailable";
    error
}

/// Where the request goes: the first ready pod behind the Service, or the pod itself.
pub fn address(store: &Store, request: &ProxyRequest) -> Result<SocketAddr, ApiError> {
    if request.resource == "services" {
        let backends = services::service_backends(
            store,
            &request.namespace,
            &request.name,
            request.port.as_deref(),
        )
        .map_err(|e| match e {
            services::ResolveError::NoService(_) => {
                ApiError::not_found("services", "", "services", &request.name)
            }
            other => unavailable(other.to_string()),
        })?;
        return backends
            .first()
            .map(|(address, _)| *address)
            .ok_or_else(|| {
                unavailable(format!(
                    "no endpoints available for service \"{}\"",
                    request.name
                ))
            });
    }
    let pods = store.resource("", "v1", "pods").expect("built in");
    let pod = store.get(&pods, &request.namespace, &request.name)?;
    services::pod_address(&pod, request.port.as_deref()).ok_or_else(|| {
        unavailable(format!(
            "error trying to reach service: pod {} does not serve port {}",
            request.name,
            request.port.as_deref().unwrap_or("(first)")
        ))
    })
}

/// Forwards the request to `address` and relays the answer.
pub async fn forward(
    address: SocketAddr,
    method: &Method,
    path: &str,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let target = match uri.query() {
        Some(query) => format!("http://{address}{path}?{query}"),
        None => format!("http://{address}{path}"),
    };
    let mut request = Request::builder().method(method.clone()).uri(target);
    for (name, value) in headers {
        // The API server's own credentials and hop-by-hop headers stay behind.
        if name == header::AUTHORIZATION || name == header::HOST || name == header::CONNECTION {
            continue;
        }
        request = request.header(name, value);
    }
    let request = request
        .body(Body::from(body))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let response = tokio::time::timeout(Duration::from_secs(30), CLIENT.request(request))
        .await
        .map_err(|_| {
            unavailable(format!(
                "error trying to reach service: {address} timed out"
            ))
        })?
        .map_err(|e| unavailable(format!("error trying to reach service: {e}")))?;
    let (parts, body) = response.into_parts();
    Ok((parts.status, parts.headers, Body::new(body)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_paths_name_the_object_port_and_path() {
        let path = "/api/v1/namespaces/test/services/http:podinfo:9898/proxy/version";
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        assert_eq!(
            parse(&segments, path),
            Some(ProxyRequest {
                resource: "services".into(),
                namespace: "test".into(),
                name: "podinfo".into(),
                port: Some("9898".into()),
                path: "/version".into(),
            })
        );
        let path = "/api/v1/namespaces/test/pods/web-1/proxy";
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let pod = parse(&segments, path).unwrap();
        assert_eq!(
            (pod.name.as_str(), pod.port, pod.path.as_str()),
            ("web-1", None, "/")
        );
    }
}
