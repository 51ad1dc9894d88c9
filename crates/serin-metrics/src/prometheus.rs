//! A Prometheus client that reads instant queries the way Flagger does: one value per query, the last
//! series winning, an empty result or NaN meaning "no values", and a 5 s timeout.

use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serin_core::plan::MetricReading;
use std::time::Duration;

/// Flagger's timeout for one query.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a query gave no value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QueryError {
    /// The result was empty or NaN: usually the workload receives no traffic.
    #[error("no values found")]
    NoValues,
    /// Prometheus could not be reached.
    #[error(
        "Prometheus at {address} is unreachable ({reason}): check the metrics server address (--metrics-server or the MetricTemplate's provider.address) and that Prometheus is running"
    )]
    Unreachable {
        /// The address queried.
        address: String,
        /// What failed.
        reason: String,
    },
    /// Prometheus answered with an error status.
    #[error("error response: Status {status}: {body}")]
    Status {
        /// HTTP status.
        status: u16,
        /// The (trimmed) response body, which carries Prometheus' own message.
        body: String,
    },
    /// The answer was not an instant vector with numeric values.
    #[error("unexpected Prometheus answer: {0}")]
    Unexpected(String),
    /// The address cannot be used.
    #[error(
        "the Prometheus address {0:?} is not supported: use an http:// URL such as http://prometheus.istio-system:9090"
    )]
    BadAddress(String),
}

impl QueryError {
    /// The decision core's reading for this outcome: "no values" is [`MetricReading::NoData`],
    /// anything else an error with this message.
    pub fn reading(&self) -> MetricReading {
        match self {
            QueryError::NoValues => MetricReading::NoData,
            other => MetricReading::Error(other.to_string()),
        }
    }
}

/// How queries authenticate.
#[derive(Clone, Debug, PartialEq)]
pub enum Auth {
    /// `Authorization: Bearer <token>` (a Secret's `token` key).
    Bearer(String),
    /// Basic authentication (a Secret's `username` and `password` keys).
    Basic {
        /// User name.
        username: String,
        /// Password.
        password: String,
    },
}

/// A Prometheus API endpoint.
#[derive(Clone)]
pub struct PrometheusClient {
    address: String,
    headers: Vec<(String, String)>,
    auth: Option<Auth>,
    timeout: Duration,
    client: Client<HttpConnector, Empty<bytes::Bytes>>,
}

fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// The `Authorization: Basic` value for a user and password.
fn basic_credentials(username: &str, password: &str) -> String {
    use base64::Engine;
    let encoded =
        base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
    format!("Basic {encoded}")
}

/// Reads an instant-query answer: the last series' value; empty or NaN is [`QueryError::NoValues`].
pub fn parse_answer(body: &str) -> Result<f64, QueryError> {
    let json: serde_json::Value =
        serde_json::from_str(body).map_err(|e| QueryError::Unexpected(e.to_string()))?;
    if json["status"] != "success" {
        return Err(QueryError::Unexpected(body.chars().take(300).collect()));
    }
    let result = &json["data"]["result"];
    let series = result.as_array().ok_or_else(|| {
        QueryError::Unexpected(format!("result type {}", json["data"]["resultType"]))
    })?;
    if series.iter().any(|s| s.get("values").is_some()) {
        return Err(QueryError::Unexpected(
            "query returned multiple values".into(),
        ));
    }
    let Some(last) = series.last() else {
        return Err(QueryError::NoValues);
    };
    let value: f64 = last["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| QueryError::Unexpected(format!("sample {}", last["value"])))?;
    if value.is_nan() {
        return Err(QueryError::NoValues);
    }
    Ok(value)
}

impl PrometheusClient {
    /// A client for the Prometheus at `address` (e.g. `http://prometheus:9090`; a path prefix is
    /// kept).
    pub fn new(address: &str) -> Result<Self, QueryError> {
        let trimmed = address.trim().trim_end_matches('/');
        if !trimmed.starts_with("http://") {
            return Err(QueryError::BadAddress(address.to_string()));
        }
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        Ok(PrometheusClient {
            address: trimmed.to_string(),
            headers: Vec::new(),
            auth: None,
            timeout: QUERY_TIMEOUT,
            client: Client::builder(TokioExecutor::new()).build(connector),
        })
    }

    /// Adds the headers a MetricTemplate's `provider.headers` lists.
    pub fn with_headers(mut self, headers: Vec<(String, String)>) -> Self {
        self.headers = headers;
        self
    }

    /// Authenticates every query.
    pub fn with_auth(mut self, auth: Auth) -> Self {
        self.auth = Some(auth);
        self
    }

    /// Replaces the 5 s query timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The address queries go to.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Runs an instant query (white space collapsed first) and returns its value.
    pub async fn query(&self, promql: &str) -> Result<f64, QueryError> {
        let query = crate::query::collapse_whitespace(promql);
        let url = format!(
            "{}/api/v1/query?query={}",
            self.address,
            percent_encode(&query)
        );
        let mut request = http::Request::get(&url);
        for (name, value) in &self.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        match &self.auth {
            Some(Auth::Bearer(token)) => {
                request = request.header("authorization", format!("Bearer {token}"));
            }
            Some(Auth::Basic { username, password }) => {
                request = request.header("authorization", basic_credentials(username, password));
            }
            None => {}
        }
        let request = request
            .body(Empty::new())
            .map_err(|e| QueryError::BadAddress(format!("{}: {e}", self.address)))?;
        let unreachable = |reason: String| QueryError::Unreachable {
            address: self.address.clone(),
            reason,
        };
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| unreachable(e.to_string()))?;
            let status = response.status().as_u16();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| unreachable(e.to_string()))?
                .to_bytes();
            Ok::<_, QueryError>((status, String::from_utf8_lossy(&body).into_owned()))
        };
        let (status, body) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| unreachable(format!("no answer within {:?}", self.timeout)))??;
        if status >= 400 {
            return Err(QueryError::Status {
                status,
                body: body.trim().chars().take(500).collect(),
            });
        }
        parse_answer(&body)
    }

    /// Whether Prometheus answers `vector(1)` with 1, as Flagger checks before an analysis.
    pub async fn is_online(&self) -> Result<(), QueryError> {
        match self.query("vector(1)").await? {
            1.0 => Ok(()),
            other => Err(QueryError::Unexpected(format!(
                "vector(1) returned {other}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_as_flagger_reads_them() {
        let vector = |values: &[&str]| {
            let series: Vec<String> = values
                .iter()
                .map(|v| format!(r#"{{"metric":{{}},"value":[1795319775.14,"{v}"]}}"#))
                .collect();
            format!(
                r#"{{"status":"success","data":{{"resultType":"vector","result":[{}]}}}}"#,
                series.join(",")
            )
        };
        assert_eq!(parse_answer(&vector(&["95"])), Ok(95.0));
        assert_eq!(
            parse_answer(&vector(&["1", "2.5"])),
            Ok(2.5),
            "the last series wins"
        );
        assert_eq!(parse_answer(&vector(&[])), Err(QueryError::NoValues));
        assert_eq!(parse_answer(&vector(&["NaN"])), Err(QueryError::NoValues));
        assert_eq!(parse_answer(&vector(&["+Inf"])), Ok(f64::INFINITY));
        let matrix = r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"1"]]}]}}"#;
        assert!(
            matches!(parse_answer(matrix), Err(QueryError::Unexpected(m)) if m.contains("multiple values"))
        );
        assert_eq!(QueryError::NoValues.reading(), MetricReading::NoData);
    }

    #[test]
    fn basic_auth_is_base64_and_addresses_must_be_http() {
        assert_eq!(
            basic_credentials("admin", "s3cret"),
            "Basic YWRtaW46czNjcmV0"
        );
        assert!(PrometheusClient::new("http://prometheus:9090/").is_ok());
        let error = PrometheusClient::new("prometheus:9090").err().unwrap();
        assert!(error.to_string().contains("http://"), "{error}");
    }
}
