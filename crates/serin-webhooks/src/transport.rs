//! One POST of a JSON body through reqwest: direct or through the configured proxy, over TLS for
//! https:// URLs (rustls on aws-lc-rs, verified against the platform's roots).

use crate::ProxySetting;
use reqwest::{Client, StatusCode, header};
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;

/// Largest response body read; enough for any error text worth showing a user.
const MAX_RESPONSE_BYTES: usize = serin_api::limits::MAX_WEBHOOK_ANSWER_BYTES;

/// `url` as messages and logs show it: without a user and password, with `?…` for a query (where
/// tokens travel) and no fragment.
pub fn shown_url(url: &reqwest::Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_fragment(None);
    let had_query = shown.query().is_some_and(|q| !q.is_empty());
    shown.set_query(None);
    let mut text = shown.to_string();
    if had_query {
        text.push_str("?…");
    }
    text
}

/// Only the scheme, host and port of `url`, then `/…` when it has more: for URLs that are
/// themselves credentials (chat webhooks, the operator's event webhook). Text that is not a URL
/// shows as `(hidden)`.
pub fn host_only(url: &str) -> String {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return "(hidden)".into();
    };
    let Some(host) = parsed.host_str() else {
        return "(hidden)".into();
    };
    let port = parsed.port().map(|p| format!(":{p}")).unwrap_or_default();
    let more = parsed.path() != "/" || parsed.query().is_some();
    format!(
        "{}://{host}{port}/{}",
        parsed.scheme(),
        if more { "…" } else { "" }
    )
}

/// A proxy address without its user and password.
pub(crate) fn without_credentials(proxy: &str) -> String {
    match reqwest::Url::parse(proxy) {
        Ok(mut url) if !url.username().is_empty() || url.password().is_some() => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.to_string()
        }
        Ok(_) => proxy.to_string(),
        // Not a URL: whatever comes before an `@` may still be a user and password.
        Err(_) => match (proxy.find("://"), proxy.rfind('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                format!("{}…{}", &proxy[..scheme + 3], &proxy[at..])
            }
            (None, Some(at)) => format!("…{}", &proxy[at..]),
            _ => proxy.to_string(),
        },
    }
}

/// What the receiver answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Response {
    /// The HTTP status.
    pub status: StatusCode,
    /// `Retry-After` in whole seconds, when the receiver sent one.
    pub retry_after_seconds: Option<u64>,
    /// The response body.
    pub body: Vec<u8>,
}

/// Why one POST did not get an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PostError {
    /// No complete answer within the time allowed.
    Timeout,
    /// The connection, the TLS handshake or the exchange failed.
    Transport(String),
}

/// The two clients every call goes through; built once because loading the platform's root
/// certificates is slow and reqwest keeps connections alive per client.
#[derive(Clone)]
pub(crate) struct Transport {
    /// Verifies https:// certificates.
    verified: Client,
    /// Accepts any certificate, for webhooks with `disableTLS: true`.
    unverified: Client,
    /// Why https:// cannot be verified (no root certificates on this machine), if so.
    tls_problem: Option<Arc<str>>,
}

impl Transport {
    pub(crate) fn new(proxy: &ProxySetting) -> Self {
        let unverified = builder(proxy)
            .tls_danger_accept_invalid_certs(true)
            .build()
            .expect("a client that verifies nothing needs no root certificates");
        match builder(proxy).build() {
            Ok(verified) => Transport {
                verified,
                unverified,
                tls_problem: None,
            },
            // Plain http:// still works; https:// calls fail with this reason rather than the
            // whole client refusing to start on a machine without a CA bundle.
            Err(error) => Transport {
                verified: builder(proxy)
                    .tls_certs_only(std::iter::empty())
                    .build()
                    .expect("a client with an empty root store loads nothing"),
                unverified,
                tls_problem: Some(
                    format!(
                        "no trusted root certificates were found ({})",
                        chain(&error)
                    )
                    .into(),
                ),
            },
        }
    }

    /// POSTs `body` as JSON to `url` once, within `timeout`. `verify_tls: false` accepts any
    /// certificate. `explicit_proxy` (an AlertProvider's `proxy`) wins over the client's proxies.
    pub(crate) async fn post(
        &self,
        url: &reqwest::Url,
        body: &impl Serialize,
        bearer_token: Option<&str>,
        timeout: Duration,
        verify_tls: bool,
        explicit_proxy: Option<&str>,
    ) -> Result<Response, PostError> {
        if verify_tls
            && url.scheme() == "https"
            && let Some(problem) = &self.tls_problem
        {
            return Err(PostError::Transport(problem.to_string()));
        }
        let with_proxy;
        let client = match explicit_proxy {
            // A provider's proxy needs a client of its own; alerts are rare enough to build it per post.
            Some(proxy) => {
                let proxy = reqwest::Proxy::all(proxy).map_err(|e| {
                    PostError::Transport(format!(
                        "proxy {:?}: {}",
                        without_credentials(proxy),
                        chain(&e)
                    ))
                })?;
                with_proxy = builder(&ProxySetting::Direct)
                    .proxy(proxy)
                    .build()
                    .map_err(|e| PostError::Transport(chain(&e)))?;
                &with_proxy
            }
            None if verify_tls => &self.verified,
            None => &self.unverified,
        };
        let mut request = client.post(url.clone()).json(body).timeout(timeout);
        if let Some(token) = bearer_token {
            request = request.bearer_auth(token);
        }
        let where_to = match explicit_proxy {
            Some(proxy) => format!("proxy {}", without_credentials(proxy)),
            None => match url.port() {
                Some(port) => format!("{}:{port}", url.host_str().unwrap_or_default()),
                None => url.host_str().unwrap_or_default().to_string(),
            },
        };
        let failed = |error: reqwest::Error| {
            // reqwest names the whole URL in its message; `where_to` says enough.
            let error = error.without_url();
            if error.is_timeout() {
                PostError::Timeout
            } else if error.is_connect()
                && url.scheme() == "https"
                && let Some(problem) = certificate_problem(&error)
            {
                PostError::Transport(format!(
                    "the certificate of {where_to} is not trusted: {problem}"
                ))
            } else if error.is_connect() {
                PostError::Transport(format!("cannot connect to {where_to}: {}", chain(&error)))
            } else {
                PostError::Transport(format!("request to {where_to} failed: {}", chain(&error)))
            }
        };
        let mut response = request.send().await.map_err(failed)?;
        let status = response.status();
        let retry_after_seconds = response
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.trim().parse().ok());
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(PostError::Transport(format!(
                    "reading the response from {where_to} failed: longer than {MAX_RESPONSE_BYTES} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Response {
            status,
            retry_after_seconds,
            body,
        })
    }
}

/// The settings both clients share: the proxy, no redirects (a 3xx answer is a failed call, as
/// before), HTTP/1.1.
fn builder(proxy: &ProxySetting) -> reqwest::ClientBuilder {
    let builder = Client::builder().redirect(reqwest::redirect::Policy::none());
    match proxy {
        ProxySetting::Direct => builder.no_proxy(),
        // reqwest reads HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and NO_PROXY when no proxy is set.
        ProxySetting::FromEnv => builder,
        ProxySetting::Through(proxy) => builder.proxy(proxy.as_ref().clone()),
    }
}

/// An error and its causes on one line, so "connection refused" or the certificate problem is not
/// hidden behind reqwest's "error sending request".
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

/// The innermost cause of a failed TLS handshake when it is about the server's certificate, e.g.
/// rustls' "invalid peer certificate: UnknownIssuer".
fn certificate_problem(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    // Error chains are short; the bound guards against a cycle.
    let innermost = std::iter::successors(Some(error), |e| e.source())
        .take(9)
        .last()?;
    let text = innermost.to_string();
    text.contains("certificate").then_some(text)
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
