//! Argo Rollouts' `web` metric: one HTTP request whose JSON answer (or the part of it a `jsonPath`
//! selects) becomes the conditions' `result`. The address is chosen by a tenant, so the answer is
//! read with a size limit ([`MAX_WEB_METRIC_ANSWER_BYTES`]) and a time limit, and redirects are not
//! followed (they could carry the template's credentials to another host). Proxies are taken from
//! the environment, as for Prometheus queries.

use crate::prometheus::Auth;
use crate::transport::causes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serin_api::limits::{MAX_WEB_METRIC_ANSWER_BYTES, MAX_WEB_METRIC_TIMEOUT, bytes, quoted};
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

/// A `web` metric's timeout when `timeoutSeconds` is unset, as in Argo Rollouts.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// One rendered request of a `web` metric.
#[derive(Clone, Debug, PartialEq)]
pub struct WebRequest {
    /// The URL, placeholders filled in.
    pub url: String,
    /// `GET`, `POST` or `PUT`.
    pub method: String,
    /// Headers sent with the request; a name may repeat.
    pub headers: Vec<(String, String)>,
    /// The request body, if any.
    pub body: Option<String>,
    /// The JSONPath of the value judged (`{$.data.ok}` or `$.data.ok`); the whole answer if unset.
    pub json_path: Option<String>,
    /// Credentials from the template's Secret.
    pub auth: Option<Auth>,
    /// Accept any certificate.
    pub insecure_skip_verify: bool,
    /// How long the request, the answer included, may take.
    pub timeout: Duration,
}

/// Why a `web` metric gave no result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WebError {
    /// The URL, method, a header or a credential cannot be sent.
    #[error("{0}")]
    BadRequest(String),
    /// The endpoint could not be reached.
    #[error(
        "web metric {url} is unreachable ({reason}): check the MetricTemplate's provider.address"
    )]
    Unreachable {
        /// The URL called.
        url: String,
        /// What failed.
        reason: String,
    },
    /// No complete answer within the timeout.
    #[error(
        "web metric {url} did not answer within {seconds} s: raise provider.timeoutSeconds (at most {max}) or make the endpoint faster",
        max = MAX_WEB_METRIC_TIMEOUT.as_secs()
    )]
    Timeout {
        /// The URL called.
        url: String,
        /// The timeout, in seconds.
        seconds: u64,
    },
    /// The endpoint answered with a status other than 2xx.
    #[error("web metric {url} answered HTTP {status}: {hint}")]
    Status {
        /// The URL called.
        url: String,
        /// The HTTP status.
        status: u16,
        /// What to check for this status.
        hint: &'static str,
    },
    /// The answer was longer than [`MAX_WEB_METRIC_ANSWER_BYTES`]; reading stopped there.
    #[error(
        "web metric {url} answered with more than {}: Serin reads at most that much; return a smaller document",
        bytes(MAX_WEB_METRIC_ANSWER_BYTES)
    )]
    TooLarge {
        /// The URL called.
        url: String,
    },
    /// The answer is not JSON.
    #[error("web metric {url} answered with a body that is not JSON ({reason}): {body:?}")]
    NotJson {
        /// The URL called.
        url: String,
        /// The JSON parser's complaint.
        reason: String,
        /// The start of the body.
        body: String,
    },
    /// `jsonPath` is not a JSONPath.
    #[error("jsonPath {path:?} is invalid ({reason}): write it as {{$.data.ok}} or $.data.ok")]
    BadJsonPath {
        /// The path as written.
        path: String,
        /// The parser's complaint.
        reason: String,
    },
    /// `jsonPath` selected nothing in the answer.
    #[error("jsonPath {path} matched nothing in the answer: {answer}")]
    NoMatch {
        /// The path as written.
        path: String,
        /// The start of the answer, to compare with the path.
        answer: String,
    },
}

/// Parses a `jsonPath` as Argo writes it (`{$.data.ok}`, Kubernetes' braces) or plainly (`$.data.ok`).
pub fn parse_json_path(path: &str) -> Result<serde_json_path::JsonPath, WebError> {
    let trimmed = path.trim();
    let inner = trimmed
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(trimmed)
        .trim();
    serde_json_path::JsonPath::parse(inner).map_err(|e| WebError::BadJsonPath {
        path: quoted(path),
        reason: e.to_string(),
    })
}

/// The value `path` selects in `answer`: the one match, or an array of several.
pub fn select(answer: serde_json::Value, path: &str) -> Result<serde_json::Value, WebError> {
    let parsed = parse_json_path(path)?;
    let mut matches: Vec<serde_json::Value> =
        parsed.query(&answer).all().into_iter().cloned().collect();
    match matches.len() {
        0 => Err(WebError::NoMatch {
            path: quoted(path),
            answer: quoted(&answer.to_string()),
        }),
        1 => Ok(matches.remove(0)),
        _ => Ok(serde_json::Value::Array(matches)),
    }
}

/// The HTTP clients of web metrics, one per TLS setting and timeout (at most 2 × 60): building one
/// loads the platform's root certificates, and a kept client reuses its connections.
static CLIENTS: LazyLock<Mutex<HashMap<(bool, Duration), reqwest::Client>>> =
    LazyLock::new(Mutex::default);

fn client(insecure_skip_verify: bool, timeout: Duration) -> Result<reqwest::Client, WebError> {
    let key = (insecure_skip_verify, timeout);
    if let Some(client) = CLIENTS.lock().expect("never poisoned").get(&key) {
        return Ok(client.clone());
    }
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .connect_timeout(timeout)
        .danger_accept_invalid_certs(insecure_skip_verify)
        .build()
        .map_err(|e| WebError::BadRequest(format!("cannot build the HTTP client: {e}")))?;
    CLIENTS
        .lock()
        .expect("never poisoned")
        .insert(key, client.clone());
    Ok(client)
}

/// Sends `request` and returns its JSON answer, or the part `json_path` selects.
pub async fn fetch(request: &WebRequest) -> Result<serde_json::Value, WebError> {
    let timeout = request.timeout.min(MAX_WEB_METRIC_TIMEOUT);
    // A bad path fails before the endpoint is called.
    if let Some(path) = &request.json_path {
        parse_json_path(path)?;
    }
    let url = reqwest::Url::parse(&request.url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
        .ok_or_else(|| {
            WebError::BadRequest(format!(
                "web metric address {:?} is not an http:// or https:// URL: fix provider.address (and the args it uses)",
                quoted(&request.url)
            ))
        })?;
    // Error messages show the URL without credentials a tenant may have written into it.
    let shown = {
        let mut shown = url.clone();
        let _ = shown.set_password(None);
        let _ = shown.set_username("");
        shown.to_string()
    };
    let method = match request.method.as_str() {
        "GET" | "" => reqwest::Method::GET,
        "POST" => reqwest::Method::POST,
        "PUT" => reqwest::Method::PUT,
        other => {
            return Err(WebError::BadRequest(format!(
                "web metric method {other:?} is not supported: write GET, POST or PUT"
            )));
        }
    };
    let mut builder = client(request.insecure_skip_verify, timeout)?.request(method, url);
    for (name, value) in &request.headers {
        let invalid = |e: &dyn std::fmt::Display| {
            WebError::BadRequest(format!(
                "provider.headers {name}: {e}: use a valid HTTP header name and value"
            ))
        };
        let name = reqwest::header::HeaderName::try_from(name.as_str()).map_err(|e| invalid(&e))?;
        let value =
            reqwest::header::HeaderValue::try_from(value.as_str()).map_err(|e| invalid(&e))?;
        builder = builder.header(name, value);
    }
    builder = match &request.auth {
        Some(Auth::Bearer(token)) => builder.bearer_auth(token),
        Some(Auth::Basic { username, password }) => builder.basic_auth(username, Some(password)),
        None => builder,
    };
    if let Some(body) = &request.body {
        builder = builder.body(body.clone());
    }
    let timed_out = || WebError::Timeout {
        url: shown.clone(),
        seconds: timeout.as_secs(),
    };
    let exchange = async {
        let response = builder.send().await.map_err(|e| {
            if e.is_timeout() {
                timed_out()
            } else {
                WebError::Unreachable {
                    url: shown.clone(),
                    reason: std::error::Error::source(&e).map_or_else(|| e.to_string(), causes),
                }
            }
        })?;
        let status = response.status();
        if !status.is_success() {
            return Err(WebError::Status {
                url: shown.clone(),
                status: status.as_u16(),
                hint: match status.as_u16() {
                    401 | 403 => {
                        "check the credentials (the MetricTemplate's provider.secretRef Secret: token, or username and password)"
                    }
                    300..=399 => {
                        "Serin does not follow redirects for web metrics; write the address that answers"
                    }
                    _ => "check provider.address, its method and body, and the endpoint's logs",
                },
            });
        }
        let body = http::Response::from(response).into_body();
        match Limited::new(body, MAX_WEB_METRIC_ANSWER_BYTES)
            .collect()
            .await
        {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(error) if error.is::<LengthLimitError>() => {
                Err(WebError::TooLarge { url: shown.clone() })
            }
            Err(error) => Err(match error.downcast_ref::<reqwest::Error>() {
                Some(e) if e.is_timeout() => timed_out(),
                _ => WebError::Unreachable {
                    url: shown.clone(),
                    reason: format!("reading the answer failed: {}", causes(&*error)),
                },
            }),
        }
    };
    // reqwest's timeout covers the body too; this one also bounds reading it here.
    let body = tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or_else(|_| Err(timed_out()))?;
    let answer: serde_json::Value =
        serde_json::from_slice(&body).map_err(|e| WebError::NotJson {
            url: shown.clone(),
            reason: e.to_string(),
            body: quoted(&String::from_utf8_lossy(&body)),
        })?;
    match &request.json_path {
        Some(path) => select(answer, path),
        None => Ok(answer),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_paths_are_read_with_or_without_kubernetes_braces() {
        let answer = json!({"data": {"ok": true, "items": [{"v": 1}, {"v": 2}]}});
        assert_eq!(select(answer.clone(), "{$.data.ok}"), Ok(json!(true)));
        assert_eq!(select(answer.clone(), "$.data.ok"), Ok(json!(true)));
        assert_eq!(
            select(answer.clone(), "$.data.items[*].v"),
            Ok(json!([1, 2]))
        );
        assert_eq!(select(answer.clone(), "$"), Ok(answer.clone()));
        let none = select(answer.clone(), "$.data.missing").unwrap_err();
        assert!(
            none.to_string()
                .starts_with("jsonPath $.data.missing matched nothing in the answer"),
            "{none}"
        );
        let bad = select(answer, "$.data[").unwrap_err();
        assert!(matches!(bad, WebError::BadJsonPath { .. }), "{bad}");
        assert!(parse_json_path("data.ok").is_err());
    }
}
