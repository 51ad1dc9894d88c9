//! What every request passes before it reaches a page: its `Host` must be one of the dashboard's
//! own names (a rebound DNS name is refused), a request that changes something must come from the
//! dashboard's own pages, and every answer carries a strict Content-Security-Policy.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Scripts, styles and images from the dashboard itself only; no inline script, no frames.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The host names a dashboard answers to.
#[derive(Clone, Debug)]
pub struct Hosts {
    names: BTreeSet<String>,
}

impl Hosts {
    /// The loopback names (a browser on this machine, or `kubectl port-forward`) and `extra`.
    pub fn new(extra: impl IntoIterator<Item = String>) -> Self {
        let mut names: BTreeSet<String> = ["localhost", "127.0.0.1", "::1"]
            .into_iter()
            .map(String::from)
            .collect();
        names.extend(extra.into_iter().map(|n| n.to_ascii_lowercase()));
        Hosts { names }
    }

    /// Whether a `Host` header (with or without a port) names this dashboard.
    pub fn admits(&self, host: &str) -> bool {
        self.names.contains(&host_name(host))
    }
}

/// `example.com` of `example.com:8080`, `::1` of `[::1]:8080`, lowercased.
pub fn host_name(host: &str) -> String {
    let host = host.trim().to_ascii_lowercase();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default().to_string();
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name.to_string(),
        _ => host,
    }
}

/// Why a request is refused before it reaches a page, if it is.
pub fn refusal(hosts: &Hosts, method: &Method, headers: &HeaderMap) -> Option<String> {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !hosts.admits(host) {
        return Some(format!(
            "this dashboard does not answer to the host name '{}': a page of another site may not reach it through a rebound DNS name; an operator adds a name it is served under with --allowed-host (Helm value dashboard.allowedHosts)",
            host_name(host)
        ));
    }
    if matches!(*method, Method::GET | Method::HEAD) {
        return None;
    }
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if let Some(site) = site.filter(|s| !matches!(*s, "same-origin" | "none")) {
        return Some(format!(
            "a {site} request may not act on releases: use the dashboard's own page"
        ));
    }
    let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
    if let Some(origin) = origin {
        let same = origin
            .split_once("://")
            .is_some_and(|(_, authority)| authority.eq_ignore_ascii_case(host));
        if !same {
            return Some(format!(
                "a request from {origin} may not act on releases: use the dashboard's own page"
            ));
        }
    }
    None
}

/// The middleware: refuses a foreign host or a cross-site change, and adds the security headers.
pub async fn guard(State(hosts): State<Arc<Hosts>>, request: Request, next: Next) -> Response {
    let mut response = match refusal(&hosts, request.method(), request.headers()) {
        Some(reason) => {
            tracing::info!(path = request.uri().path(), "refused: {reason}");
            (StatusCode::FORBIDDEN, reason).into_response()
        }
        None => next.run(request).await,
    };
    secure(response.headers_mut());
    response
}

fn secure(headers: &mut HeaderMap) {
    let set = |headers: &mut HeaderMap, name, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(
        headers,
        header::CONTENT_SECURITY_POLICY,
        CONTENT_SECURITY_POLICY,
    );
    set(headers, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(headers, header::REFERRER_POLICY, "no-referrer");
    set(headers, header::X_FRAME_OPTIONS, "DENY");
    if !headers.contains_key(header::CACHE_CONTROL) {
        set(headers, header::CACHE_CONTROL, "no-store");
    }
}

/// A plain-text answer with `status`.
pub fn text(status: StatusCode, body: impl Into<String>) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Body::from(body.into()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn host_names_lose_their_port_and_case() {
        assert_eq!(host_name("LocalHost:9797"), "localhost");
        assert_eq!(host_name("[::1]:9797"), "::1");
        assert_eq!(host_name("serin.example.com"), "serin.example.com");
    }

    #[test]
    fn a_rebound_host_name_is_refused_and_an_allowed_one_passes() {
        let hosts = Hosts::new(["serin.example.com".to_string()]);
        let get = Method::GET;
        assert!(refusal(&hosts, &get, &headers(&[("host", "127.0.0.1:9797")])).is_none());
        assert!(refusal(&hosts, &get, &headers(&[("host", "serin.example.com")])).is_none());
        let refused = refusal(&hosts, &get, &headers(&[("host", "attacker.example:9797")]));
        assert!(refused.unwrap().contains("'attacker.example'"));
    }

    #[test]
    fn a_change_from_another_origin_or_site_is_refused() {
        let hosts = Hosts::new([]);
        let post = Method::POST;
        let own = [
            ("host", "localhost:9797"),
            ("origin", "http://localhost:9797"),
        ];
        assert!(refusal(&hosts, &post, &headers(&own)).is_none());
        let foreign = [
            ("host", "localhost:9797"),
            ("origin", "http://evil.example"),
        ];
        assert!(refusal(&hosts, &post, &headers(&foreign)).is_some());
        let cross = [("host", "localhost:9797"), ("sec-fetch-site", "cross-site")];
        assert!(refusal(&hosts, &post, &headers(&cross)).is_some());
    }
}
