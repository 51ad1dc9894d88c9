//! One HTTP POST of a JSON body over a fresh HTTP/1.1 connection: direct, through an http proxy
//! (absolute-form request), or over TLS for https:// URLs.

use crate::proxy::ProxyConfig;
use bytes::Bytes;
use http::{HeaderValue, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use std::sync::Arc;
use tower_service::Service;

/// Largest response body read; enough for any error text worth showing a user.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// What the receiver answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The HTTP status.
    pub status: StatusCode,
    /// `Retry-After` in whole seconds, when the receiver sent one.
    pub retry_after_seconds: Option<u64>,
    /// The response body.
    pub body: Bytes,
}

/// Shared connectors; built once because loading the system's root certificates is slow.
#[derive(Clone)]
pub(crate) struct Transport {
    connector: HttpsConnector<HttpConnector>,
    /// Why https:// cannot be verified (no root certificates on this machine), if so.
    tls_problem: Option<Arc<str>>,
}

impl Transport {
    pub(crate) fn new() -> Self {
        match hyper_rustls::HttpsConnectorBuilder::new().with_native_roots() {
            Ok(builder) => Transport {
                connector: builder.https_or_http().enable_http1().build(),
                tls_problem: None,
            },
            Err(error) => {
                // Plain http:// still works; https:// calls fail with this reason rather than
                // the whole client refusing to start on a machine without a CA bundle.
                let config = rustls::ClientConfig::builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth();
                Transport {
                    connector: hyper_rustls::HttpsConnectorBuilder::new()
                        .with_tls_config(config)
                        .https_or_http()
                        .enable_http1()
                        .build(),
                    tls_problem: Some(
                        format!("no trusted root certificates were found ({error})").into(),
                    ),
                }
            }
        }
    }

    /// POSTs `body` to `url` once, with `headers`; the caller bounds the time it may take.
    /// `explicit_proxy` (an AlertProvider's `proxy`) wins over `proxy`'s HTTP_PROXY rules.
    pub(crate) async fn post(
        &self,
        url: &Uri,
        body: Bytes,
        headers: &[(&'static str, String)],
        proxy: &ProxyConfig,
        explicit_proxy: Option<&str>,
    ) -> Result<Response, String> {
        let host = url.host().ok_or("the URL has no host")?;
        let https = url.scheme_str() == Some("https");
        if https && self.tls_problem.is_some() {
            return Err(self.tls_problem.as_deref().unwrap_or_default().to_string());
        }
        let via = match explicit_proxy {
            Some(proxy) => Some(proxy.to_string()),
            // HTTP_PROXY applies to http:// only, as in Go and curl.
            None if !https => proxy.proxy_for(host).map(str::to_string),
            None => None,
        };
        if https && via.is_some() {
            return Err(
                "https through a proxy (CONNECT) is not supported; remove the proxy or use an http:// address"
                    .into(),
            );
        }
        let (connect_to, target) = match &via {
            Some(proxy) => {
                let proxy_uri: Uri = format!("http://{proxy}")
                    .parse()
                    .map_err(|e| format!("proxy {proxy:?} is not a host:port ({e})"))?;
                (proxy_uri, url.clone())
            }
            None => {
                let origin_form: Uri = url
                    .path_and_query()
                    .map(|p| p.as_str())
                    .unwrap_or("/")
                    .parse()
                    .map_err(|e| format!("bad path ({e})"))?;
                (url.clone(), origin_form)
            }
        };
        let where_to = via
            .as_deref()
            .map(|proxy| format!("proxy {proxy}"))
            .unwrap_or_else(|| url.authority().map(|a| a.to_string()).unwrap_or_default());
        let io = self
            .connector
            .clone()
            .call(connect_to)
            .await
            .map_err(|e| format!("cannot connect to {where_to}: {}", chain(&*e)))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| format!("HTTP handshake with {where_to} failed: {e}"))?;
        // The connection task ends when the response is read and the sender dropped.
        tokio::spawn(connection);
        let authority = url.authority().map(|a| a.as_str()).unwrap_or(host);
        let mut request = Request::post(target)
            .header(header::HOST, authority)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(|e| format!("cannot build the request ({e})"))?;
        for (name, value) in headers {
            let value = HeaderValue::from_str(value)
                .map_err(|_| format!("header {name} has characters HTTP does not allow"))?;
            request.headers_mut().insert(*name, value);
        }
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("request to {where_to} failed: {}", chain(&e)))?;
        let status = response.status();
        let retry_after_seconds = response
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.trim().parse().ok());
        let body = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| format!("reading the response from {where_to} failed: {e}"))?
            .to_bytes();
        Ok(Response {
            status,
            retry_after_seconds,
            body,
        })
    }
}

/// An error and its causes on one line, so "connection refused" is not hidden behind a wrapper.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    // Error chains are short; the bound guards against a cycle.
    for _ in 0..8 {
        let Some(cause) = source else { break };
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The body as text for an error message: whitespace-trimmed and cut to `limit` characters.
pub(crate) fn trimmed_body(body: &[u8], limit: usize) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.chars().count() <= limit {
        text.to_string()
    } else {
        let cut: String = text.chars().take(limit).collect();
        format!("{cut}…")
    }
}
