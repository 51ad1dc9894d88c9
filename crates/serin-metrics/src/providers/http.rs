//! What every provider's HTTP call shares: a bounded answer, a timeout per attempt, no redirects,
//! `insecureSkipVerify`, and rate-limit answers (429) retried after their `Retry-After` while the
//! metric's interval allows, with credentials only ever in headers marked sensitive.

use crate::transport::{QUERY_TIMEOUT, causes};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use serin_api::limits::{MAX_METRIC_ANSWER_BYTES, QUOTED_ANSWER_BYTES, bytes, cut_to};
use std::time::Duration;

/// How many times a rate-limited query is sent in all.
pub const MAX_ATTEMPTS: u32 = 3;

/// The longest wait for a `Retry-After`, however long the interval.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);

/// One request to a provider, as built from a template; credentials go in `secret_headers`.
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderRequest {
    /// `GET` or `POST`.
    pub method: reqwest::Method,
    /// The URL with its query string.
    pub url: reqwest::Url,
    /// Headers that are not secret (the template's `provider.headers`, content types).
    pub headers: Vec<(String, String)>,
    /// Headers carrying credentials: sent marked sensitive, never quoted in a message.
    pub secret_headers: Vec<(String, String)>,
    /// The body, if any.
    pub body: Option<String>,
    /// How long one attempt may take.
    pub timeout: Duration,
    /// For a streamed answer that may stay open: the text after which nothing more is read.
    pub end_marker: Option<&'static str>,
    /// For a provider that throttles with HTTP 400 instead of 429 (CloudWatch's `Throttling`):
    /// the text of such an answer, which is then waited for and sent again as a 429 is.
    pub throttled_400: Option<&'static str>,
}

impl ProviderRequest {
    /// A `GET` of `url` with no headers.
    pub fn get(url: reqwest::Url) -> Self {
        ProviderRequest {
            method: reqwest::Method::GET,
            url,
            headers: Vec::new(),
            secret_headers: Vec::new(),
            body: None,
            timeout: QUERY_TIMEOUT,
            end_marker: None,
            throttled_400: None,
        }
    }

    fn header_map(&self) -> Result<HeaderMap, String> {
        let mut map = HeaderMap::new();
        for (secret, (name, value)) in self
            .headers
            .iter()
            .map(|h| (false, h))
            .chain(self.secret_headers.iter().map(|h| (true, h)))
        {
            let name = HeaderName::try_from(name.as_str())
                .map_err(|e| format!("header {name}: {e}: use a valid HTTP header name"))?;
            let mut value = HeaderValue::try_from(value.as_str()).map_err(|_| {
                if secret {
                    format!("the Secret's value for {name} is not a valid header value: remove line breaks and control characters")
                } else {
                    format!("header {name}: its value is not a valid HTTP header value")
                }
            })?;
            value.set_sensitive(secret);
            map.append(name, value);
        }
        Ok(map)
    }
}

/// How a provider answered: its status and body (at most [`MAX_METRIC_ANSWER_BYTES`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderAnswer {
    /// The HTTP status.
    pub status: u16,
    /// The body.
    pub body: bytes::Bytes,
}

impl ProviderAnswer {
    /// The start of the body, for an error message.
    pub fn quoted(&self) -> String {
        quote(&self.body)
    }
}

/// The first bytes of `body` as text, for a message.
pub fn quote(body: &[u8]) -> String {
    let head = &body[..body.len().min(QUOTED_ANSWER_BYTES + 4)];
    let text = String::from_utf8_lossy(head);
    let cut = cut_to(text.trim(), QUOTED_ANSWER_BYTES);
    if body.len() > head.len() && !cut.ends_with('…') {
        format!("{cut}…")
    } else {
        cut
    }
}

/// The wait a 429 answer asks for (at most a second past [`MAX_RETRY_WAIT`]): `Retry-After` in
/// seconds (or an HTTP date), else `X-RateLimit-Reset` in seconds (Datadog's), else one second.
fn retry_after(headers: &HeaderMap) -> Duration {
    // Capped past the longest wait honoured, so a huge value cannot overflow the sum of waits.
    asked_wait(headers).min(MAX_RETRY_WAIT + Duration::from_secs(1))
}

fn asked_wait(headers: &HeaderMap) -> Duration {
    let Some(value) = headers.get(RETRY_AFTER).and_then(|v| v.to_str().ok()) else {
        return headers
            .get("x-ratelimit-reset")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(Duration::from_secs(1), Duration::from_secs);
    };
    if let Ok(seconds) = value.trim().parse::<u64>() {
        return Duration::from_secs(seconds);
    }
    httpdate_seconds(value).unwrap_or(Duration::from_secs(1))
}

/// Seconds from now until an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
fn httpdate_seconds(value: &str) -> Option<Duration> {
    let parsed = jiff::fmt::rfc2822::parse(value.trim()).ok()?;
    let wait = parsed.timestamp().duration_since(jiff::Timestamp::now());
    Some(Duration::try_from(wait).unwrap_or_default())
}

/// Sends `request` to the provider named `provider` and reads its answer: each attempt within
/// the request's timeout, a 429 sent again after its `Retry-After` if that fits in `budget` (the
/// metric's interval, at most [`MAX_RETRY_WAIT`] in all) and [`MAX_ATTEMPTS`]. `Err` says what
/// failed, naming the provider and the address but no credential.
pub async fn send(
    client: &reqwest::Client,
    request: &ProviderRequest,
    provider: &str,
    budget: Duration,
) -> Result<ProviderAnswer, String> {
    let headers = request.header_map()?;
    let address = format!(
        "{}://{}{}",
        request.url.scheme(),
        request.url.host_str().unwrap_or_default(),
        request
            .url
            .port()
            .map(|p| format!(":{p}"))
            .unwrap_or_default()
    );
    let mut waited = Duration::ZERO;
    let budget = budget.min(MAX_RETRY_WAIT);
    let mut rate_limited = 0;
    loop {
        let mut builder = client
            .request(request.method.clone(), request.url.clone())
            .timeout(request.timeout)
            .headers(headers.clone());
        if let Some(body) = &request.body {
            builder = builder.body(body.clone());
        }
        let attempt = async {
            let response = builder
                .send()
                .await
                .map_err(|e| describe(&e, &address, request.timeout))?;
            let status = response.status().as_u16();
            let answer_headers = response.headers().clone();
            let body = http::Response::from(response).into_body();
            let body = read_body(body, request.end_marker)
                .await
                .map_err(|error| match error {
                    Some(error) => format!(
                        "reading the answer of {address} failed: {}",
                        causes(&*error)
                    ),
                    None => format!(
                        "{address} answered with more than {}: make the query return less",
                        bytes(MAX_METRIC_ANSWER_BYTES)
                    ),
                })?;
            Ok((status, answer_headers, body))
        };
        let (status, answer_headers, body) = tokio::time::timeout(request.timeout, attempt)
            .await
            .unwrap_or_else(|_| {
            Err(format!(
                "{address} did not answer within {:?}",
                request.timeout
            ))
        })?;
        let throttled_400 = status == 400
            && request
                .throttled_400
                .is_some_and(|marker| String::from_utf8_lossy(&body).contains(marker));
        if status != 429 && !throttled_400 {
            if rate_limited > 0 {
                tracing::warn!(
                    provider,
                    address = %address,
                    times = rate_limited,
                    waited_seconds = waited.as_secs(),
                    "the metric provider rate-limited a query; it was answered after waiting as it asked"
                );
            }
            return Ok(ProviderAnswer { status, body });
        }
        rate_limited += 1;
        let wait = retry_after(&answer_headers);
        if rate_limited >= MAX_ATTEMPTS || waited.saturating_add(wait) > budget {
            return Err(format!(
                "{provider} rate-limited the query (HTTP {}, {rate_limited} times; Retry-After {}s{}): {}",
                if throttled_400 {
                    "400 Throttling"
                } else {
                    "429"
                },
                wait.as_secs(),
                if waited.saturating_add(wait) > budget {
                    format!(
                        ", more than the {}s left in this interval",
                        budget.saturating_sub(waited).as_secs()
                    )
                } else {
                    String::new()
                },
                quote(&body)
            ));
        }
        tokio::time::sleep(wait).await;
        waited += wait;
    }
}

/// The body, at most [`MAX_METRIC_ANSWER_BYTES`], read up to the end or up to `end_marker`.
/// `Err(None)` when it is longer than that.
async fn read_body(
    body: reqwest::Body,
    end_marker: Option<&str>,
) -> Result<bytes::Bytes, Option<Box<dyn std::error::Error + Send + Sync>>> {
    let mut limited = Limited::new(body, MAX_METRIC_ANSWER_BYTES);
    let Some(marker) = end_marker else {
        return match limited.collect().await {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(error) if error.is::<LengthLimitError>() => Err(None),
            Err(error) => Err(Some(error)),
        };
    };
    let mut read = bytes::BytesMut::new();
    while let Some(frame) = limited.frame().await {
        let frame = frame.map_err(|error| (!error.is::<LengthLimitError>()).then_some(error))?;
        if let Ok(data) = frame.into_data() {
            let searched_from = read.len().saturating_sub(marker.len());
            read.extend_from_slice(&data);
            if read[searched_from..]
                .windows(marker.len())
                .any(|w| w == marker.as_bytes())
            {
                break;
            }
        }
    }
    Ok(read.freeze())
}

/// What went wrong sending a request, without the URL reqwest repeats (it holds the query).
fn describe(error: &reqwest::Error, address: &str, timeout: Duration) -> String {
    if error.is_timeout() {
        return format!("{address} did not answer within {timeout:?}");
    }
    let reason = std::error::Error::source(error)
        .map(causes)
        .unwrap_or_else(|| error.to_string());
    if error.is_connect() && reason.contains("certificate") {
        format!(
            "{address} presented a certificate that is not trusted ({reason}): give it a certificate from a trusted CA, or set the MetricTemplate's provider.insecureSkipVerify: true"
        )
    } else {
        format!("{address} is unreachable ({reason})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), Duration::from_secs(1));
        headers.insert("x-ratelimit-reset", HeaderValue::from_static("3"));
        assert_eq!(retry_after(&headers), Duration::from_secs(3));
        headers.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(retry_after(&headers), Duration::from_secs(7));
        headers.insert(
            RETRY_AFTER,
            HeaderValue::from_static("18446744073709551615"),
        );
        assert_eq!(
            retry_after(&headers),
            MAX_RETRY_WAIT + Duration::from_secs(1)
        );
        headers.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"),
        );
        assert_eq!(retry_after(&headers), Duration::ZERO, "a date in the past");
    }

    #[test]
    fn secret_headers_are_sensitive_and_never_quoted() {
        let mut request = ProviderRequest::get("http://127.0.0.1:1/q".parse().unwrap());
        request.headers.push(("X-Plain".into(), "a".into()));
        request
            .secret_headers
            .push(("DD-API-KEY".into(), "k3y".into()));
        let map = request.header_map().unwrap();
        assert!(map["dd-api-key"].is_sensitive());
        assert!(!map["x-plain"].is_sensitive());
        request.secret_headers[0].1 = "bad\nkey".into();
        let error = request.header_map().unwrap_err();
        assert!(!error.contains("bad"), "{error}");
        assert!(
            error.contains("DD-API-KEY") || error.contains("dd-api-key"),
            "{error}"
        );
    }

    #[test]
    fn quotes_are_cut() {
        assert_eq!(quote(b" short \n"), "short");
        let long = vec![b'x'; 500];
        assert_eq!(quote(&long).chars().count(), QUOTED_ANSWER_BYTES + 1);
    }
}
