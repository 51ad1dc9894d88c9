//! A Prometheus client that reads instant queries the way Flagger does: one value per query, the last
//! series winning, an empty result or NaN meaning "no values", and a 5 s timeout. An address may be
//! chosen by a tenant, so the answer is read with a size limit and redirects are not followed.

use crate::conditions::MetricResult;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use prometheus_http_query::response::{Data, PromqlResult};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serin_api::limits::{MAX_METRIC_ANSWER_BYTES, bytes};
use serin_core::plan::MetricReading;
use std::time::Duration;

pub use crate::transport::QUERY_TIMEOUT;
use crate::transport::{CONNECT_TIMEOUT, causes};

/// Why a query gave no value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QueryError {
    /// The result was empty or NaN: usually the workload receives no traffic.
    #[error("no values found")]
    NoValues,
    /// Prometheus could not be reached, or did not answer in time.
    #[error(
        "Prometheus at {address} is unreachable ({reason}): check the metrics server address (--metrics-server or the MetricTemplate's provider.address) and that Prometheus is running"
    )]
    Unreachable {
        /// The address queried.
        address: String,
        /// What failed.
        reason: String,
    },
    /// The TLS handshake failed because Prometheus' certificate is not trusted.
    #[error(
        "Prometheus at {address} presented a certificate that is not trusted ({reason}): give Prometheus a certificate from a trusted CA, or set the MetricTemplate's provider.insecureSkipVerify: true"
    )]
    Certificate {
        /// The address queried.
        address: String,
        /// What the TLS library said about the certificate.
        reason: String,
    },
    /// Prometheus could not run the query and said why, e.g. `bad_data: parse error ...`.
    #[error("Prometheus could not run the query ({0}): fix the metric's query")]
    Rejected(String),
    /// Prometheus (or a proxy in front of it) answered with an error status and no Prometheus error.
    #[error("Prometheus at {address} answered HTTP {status}: {hint}")]
    Status {
        /// The address queried.
        address: String,
        /// HTTP status.
        status: u16,
        /// What to check for this status.
        hint: &'static str,
    },
    /// The answer was not an instant vector with numeric values.
    #[error("unexpected Prometheus answer: {0}")]
    Unexpected(String),
    /// The answer was longer than [`MAX_METRIC_ANSWER_BYTES`]; reading stopped there.
    #[error(
        "Prometheus at {address} answered with more than {}: Serin reads at most that much; make the query return one series (e.g. wrap it in sum(...))",
        bytes(MAX_METRIC_ANSWER_BYTES)
    )]
    TooLarge {
        /// The address queried.
        address: String,
    },
    /// The address cannot be used.
    #[error(
        "the Prometheus address {0:?} is not supported: use an http:// or https:// URL such as http://prometheus.istio-system:9090"
    )]
    BadAddress(String),
    /// A header or credential cannot be sent in an HTTP request.
    #[error("{0}")]
    BadRequestSetting(String),
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
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
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

/// What a MetricTemplate's provider adds to its address: headers, credentials and TLS trust.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClientOptions {
    /// Headers sent with every query (`provider.headers`); a name may repeat.
    pub headers: Vec<(String, String)>,
    /// Credentials from the template's Secret.
    pub auth: Option<Auth>,
    /// Accept any certificate (`provider.insecureSkipVerify`).
    pub insecure_skip_verify: bool,
    /// How long one query may take.
    pub timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            headers: Vec::new(),
            auth: None,
            insecure_skip_verify: false,
            timeout: QUERY_TIMEOUT,
        }
    }
}

/// Prometheus' answer envelope: `{"status": "success", "data": ...}` or an error.
#[derive(serde::Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
enum Envelope {
    Success { data: PromqlResult },
    Error(prometheus_http_query::error::PrometheusError),
}

/// A Prometheus API endpoint.
#[derive(Clone)]
pub struct PrometheusClient {
    address: String,
    timeout: Duration,
    /// Sent per query: reqwest's default headers keep one value per name, a template may repeat one.
    headers: HeaderMap,
    client: prometheus_http_query::Client,
}

/// How many clients a [`ClientCache`] keeps before starting over: a changed Secret or a deleted
/// template leaves its client behind.
const CACHED_CLIENTS: usize = 256;

/// The Prometheus clients of the metric checks, built once per address and provider settings:
/// building one loads the platform's root certificates (milliseconds), and a kept client reuses its
/// connections from one interval to the next.
#[derive(Default)]
pub struct ClientCache {
    clients: std::sync::Mutex<std::collections::HashMap<(String, ClientOptions), PrometheusClient>>,
    providers: crate::providers::clients::ProviderClients,
}

impl ClientCache {
    /// The client for `address` with `options`, built on first use.
    pub fn client(
        &self,
        address: &str,
        options: ClientOptions,
    ) -> Result<PrometheusClient, QueryError> {
        let key = (address.to_string(), options);
        if let Some(client) = self.clients.lock().expect("never poisoned").get(&key) {
            return Ok(client.clone());
        }
        let client = PrometheusClient::with_options(address, key.1.clone())?;
        let mut clients = self.clients.lock().expect("never poisoned");
        if clients.len() >= CACHED_CLIENTS {
            clients.clear();
        }
        clients.insert(key, client.clone());
        Ok(client)
    }

    /// What the other providers keep between checks.
    pub fn providers(&self) -> &crate::providers::clients::ProviderClients {
        &self.providers
    }

    /// How many clients are kept.
    pub fn len(&self) -> usize {
        self.clients.lock().expect("never poisoned").len()
    }

    /// Whether no client is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Reads an instant-query answer: the last series' value; empty or NaN is [`QueryError::NoValues`].
pub fn value_of(data: &Data) -> Result<f64, QueryError> {
    let series = match data {
        Data::Vector(series) => series,
        Data::Matrix(_) => {
            return Err(QueryError::Unexpected(
                "query returned multiple values (a range vector): query an instant vector".into(),
            ));
        }
        Data::Scalar(_) => {
            return Err(QueryError::Unexpected(
                "query returned a scalar: wrap it in vector(...)".into(),
            ));
        }
    };
    match series.last().map(|last| last.sample().value()) {
        Some(value) if !value.is_nan() => Ok(value),
        _ => Err(QueryError::NoValues),
    }
}

/// Reads an instant-query answer as Argo's conditions see it: a vector's values in series order
/// (NaN kept, an empty vector an empty array), or a scalar's value.
pub fn result_of(data: &Data) -> Result<MetricResult, QueryError> {
    match data {
        Data::Vector(series) => Ok(MetricResult::Vector(
            series.iter().map(|s| s.sample().value()).collect(),
        )),
        Data::Scalar(sample) => Ok(MetricResult::Scalar(sample.value())),
        Data::Matrix(_) => Err(QueryError::Unexpected(
            "query returned a range vector: query an instant vector".into(),
        )),
    }
}

/// The `errorType: error` of an error envelope whose `errorType` Prometheus does not use.
fn other_servers_error(body: &[u8]) -> Option<String> {
    let envelope: serde_json::Value = serde_json::from_slice(body).ok()?;
    if envelope["status"] != "error" {
        return None;
    }
    let error = envelope["error"].as_str()?;
    Some(match envelope["errorType"].as_str() {
        Some(kind) => format!("{kind}: {error}"),
        None => error.to_string(),
    })
}

impl PrometheusClient {
    /// A client for the Prometheus at `address` (e.g. `http://prometheus:9090`; a path prefix is
    /// kept).
    pub fn new(address: &str) -> Result<Self, QueryError> {
        Self::with_options(address, ClientOptions::default())
    }

    /// A client for the Prometheus at `address` with a MetricTemplate's headers, credentials and
    /// TLS trust.
    pub fn with_options(address: &str, options: ClientOptions) -> Result<Self, QueryError> {
        let trimmed = address.trim().trim_end_matches('/');
        let bad_address = || QueryError::BadAddress(address.to_string());
        let mut url = reqwest::Url::parse(trimmed).map_err(|_| bad_address())?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(bad_address());
        }
        let mut headers = HeaderMap::new();
        for (name, value) in &options.headers {
            let invalid = |e: &dyn std::fmt::Display| {
                QueryError::BadRequestSetting(format!(
                    "provider.headers {name}: {e}: use a valid HTTP header name and value"
                ))
            };
            let name = HeaderName::try_from(name.as_str()).map_err(|e| invalid(&e))?;
            let value = HeaderValue::try_from(value.as_str()).map_err(|e| invalid(&e))?;
            headers.append(name, value);
        }
        let mut defaults = HeaderMap::new();
        match &options.auth {
            Some(Auth::Bearer(token)) => {
                let mut value = HeaderValue::try_from(format!("Bearer {token}")).map_err(|_| {
                    QueryError::BadRequestSetting(
                        "the Secret's token is not a valid header value: remove line breaks and control characters".into(),
                    )
                })?;
                value.set_sensitive(true);
                defaults.insert(AUTHORIZATION, value);
            }
            // reqwest sends a URL's user and password as basic authentication and strips them
            // from the URL (and so from its error messages).
            Some(Auth::Basic { username, password }) => {
                url.set_username(username)
                    .and_then(|()| url.set_password(Some(password)))
                    .map_err(|()| bad_address())?;
            }
            None => {}
        }
        let http = reqwest::Client::builder()
            // A redirect could send the template's credentials to another host.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(options.timeout)
            .connect_timeout(CONNECT_TIMEOUT.min(options.timeout))
            .danger_accept_invalid_certs(options.insecure_skip_verify)
            .default_headers(defaults)
            .build()
            .map_err(|e| QueryError::BadRequestSetting(causes(&e)))?;
        let client =
            prometheus_http_query::Client::from(http, url.as_str()).map_err(|_| bad_address())?;
        Ok(PrometheusClient {
            address: trimmed.to_string(),
            timeout: options.timeout,
            headers,
            client,
        })
    }

    /// The address queries go to.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Runs an instant query (white space collapsed first) and returns its value.
    pub async fn query(&self, promql: &str) -> Result<f64, QueryError> {
        value_of(&self.instant(promql).await?)
    }

    /// Runs an instant query and returns its result as an analysis metric's conditions see it
    /// (see [`result_of`]).
    pub async fn query_result(&self, promql: &str) -> Result<MetricResult, QueryError> {
        result_of(&self.instant(promql).await?)
    }

    /// Runs an instant query and returns how many series it answered with a number other than
    /// NaN (a scalar counts as one): what a dashboard panel would draw.
    pub async fn count_series(&self, promql: &str) -> Result<usize, QueryError> {
        Ok(match self.instant(promql).await? {
            Data::Vector(series) => series
                .iter()
                .filter(|s| !s.sample().value().is_nan())
                .count(),
            Data::Matrix(series) => series.len(),
            Data::Scalar(sample) => usize::from(!sample.value().is_nan()),
        })
    }

    async fn instant(&self, promql: &str) -> Result<Data, QueryError> {
        let query = crate::query::collapse_whitespace(promql);
        let request = self
            .headers
            .iter()
            .fold(self.client.query(query), |request, (name, value)| {
                request.header(name.clone(), value.clone())
            });
        // reqwest's timeout covers the body too; this one also bounds reading it here.
        let answer = async {
            let response = request.get_raw().await.map_err(|e| self.query_error(e))?;
            self.read_answer(response).await
        };
        tokio::time::timeout(self.timeout, answer)
            .await
            .unwrap_or_else(|_| Err(self.no_answer_in_time()))
    }

    fn no_answer_in_time(&self) -> QueryError {
        QueryError::Unreachable {
            address: self.address.clone(),
            reason: format!("no answer within {:?}", self.timeout),
        }
    }

    /// Reads an answer of at most [`MAX_METRIC_ANSWER_BYTES`] as Prometheus' JSON envelope.
    async fn read_answer(&self, response: reqwest::Response) -> Result<Data, QueryError> {
        let status = response.status();
        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                let media = v.split(';').next().unwrap_or_default().trim();
                media.eq_ignore_ascii_case("application/json")
            });
        if !is_json {
            return Err(if status.is_success() {
                QueryError::Unexpected(format!(
                    "Prometheus at {} answered {status} with a body that is not JSON: check the address and its path prefix",
                    self.address
                ))
            } else {
                self.status_error(status)
            });
        }
        let body = http::Response::from(response).into_body();
        let collected = Limited::new(body, MAX_METRIC_ANSWER_BYTES).collect().await;
        let body = match collected {
            Ok(collected) => collected.to_bytes(),
            Err(error) if error.is::<LengthLimitError>() => {
                return Err(QueryError::TooLarge {
                    address: self.address.clone(),
                });
            }
            Err(error) => {
                return Err(match error.downcast_ref::<reqwest::Error>() {
                    Some(e) if e.is_timeout() => self.no_answer_in_time(),
                    _ => QueryError::Unreachable {
                        address: self.address.clone(),
                        reason: format!("reading the answer failed: {}", causes(&*error)),
                    },
                });
            }
        };
        match serde_json::from_slice::<Envelope>(&body) {
            Ok(Envelope::Success { data }) => Ok(data.into_inner().0),
            Ok(Envelope::Error(rejection)) => Err(QueryError::Rejected(rejection.to_string())),
            // Servers of the same API name their errors differently (VictoriaMetrics answers 422
            // with errorType "422"); their words are what the user needs.
            Err(error) => Err(match other_servers_error(&body) {
                Some(rejection) => QueryError::Rejected(rejection),
                None if !status.is_success() => self.status_error(status),
                None => QueryError::Unexpected(format!(
                    "Prometheus at {} answered JSON that is not a query result ({error})",
                    self.address
                )),
            }),
        }
    }

    fn status_error(&self, status: reqwest::StatusCode) -> QueryError {
        let hint = match status.as_u16() {
            401 | 403 => {
                "check the credentials (the MetricTemplate's provider.secretRef Secret: token, or username and password)"
            }
            300..=399 => {
                "Serin does not follow redirects for metric queries; write the address Prometheus answers on"
            }
            _ => {
                "check the metrics server address (--metrics-server or the MetricTemplate's provider.address) and its path prefix"
            }
        };
        QueryError::Status {
            address: self.address.clone(),
            status: status.as_u16(),
            hint,
        }
    }

    fn query_error(&self, error: prometheus_http_query::Error) -> QueryError {
        use prometheus_http_query::Error;
        let request = match &error {
            Error::Prometheus(rejection) => return QueryError::Rejected(rejection.to_string()),
            Error::Client(client) => client.inner(),
            _ => None,
        };
        let Some(request) = request else {
            return QueryError::Unexpected(error.to_string());
        };
        if request.is_timeout() {
            return self.no_answer_in_time();
        }
        if let Some(status) = request.status() {
            return self.status_error(status);
        }
        let address = self.address.clone();
        // reqwest's own message repeats the URL with the query; its causes say what went wrong.
        let reason = std::error::Error::source(request)
            .map(causes)
            .unwrap_or_else(|| request.to_string());
        if request.is_connect() && reason.contains("certificate") {
            QueryError::Certificate { address, reason }
        } else if request.is_connect() || request.is_request() {
            QueryError::Unreachable { address, reason }
        } else {
            QueryError::Unexpected(format!("{error}: {reason}"))
        }
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
    fn the_cache_builds_one_client_per_address_and_settings() {
        let cache = ClientCache::default();
        let address = "https://prometheus.test:9090";
        let with_token = ClientOptions {
            auth: Some(Auth::Bearer("t0ken".into())),
            ..ClientOptions::default()
        };
        cache.client(address, ClientOptions::default()).unwrap();
        cache.client(address, ClientOptions::default()).unwrap();
        assert_eq!(cache.len(), 1);
        cache.client(address, with_token.clone()).unwrap();
        cache.client(address, with_token).unwrap();
        assert_eq!(cache.len(), 2, "other credentials are another client");
        assert!(
            cache
                .client("prometheus:9090", ClientOptions::default())
                .is_err()
        );
        assert_eq!(cache.len(), 2, "a refused address is not kept");
    }

    fn data(json: &str) -> Data {
        serde_json::from_str::<prometheus_http_query::response::PromqlResult>(json)
            .unwrap()
            .data()
            .clone()
    }

    #[test]
    fn answers_are_read_as_flagger_reads_them() {
        let vector = |values: &[&str]| {
            let series: Vec<String> = values
                .iter()
                .map(|v| format!(r#"{{"metric":{{}},"value":[1795319775.14,"{v}"]}}"#))
                .collect();
            data(&format!(
                r#"{{"resultType":"vector","result":[{}]}}"#,
                series.join(",")
            ))
        };
        assert_eq!(value_of(&vector(&["95"])), Ok(95.0));
        assert_eq!(
            value_of(&vector(&["1", "2.5"])),
            Ok(2.5),
            "the last series wins"
        );
        assert_eq!(value_of(&vector(&[])), Err(QueryError::NoValues));
        assert_eq!(value_of(&vector(&["NaN"])), Err(QueryError::NoValues));
        assert_eq!(value_of(&vector(&["+Inf"])), Ok(f64::INFINITY));
        let matrix = data(r#"{"resultType":"matrix","result":[{"metric":{},"values":[[1,"1"]]}]}"#);
        assert!(
            matches!(value_of(&matrix), Err(QueryError::Unexpected(m)) if m.contains("multiple values"))
        );
        assert_eq!(QueryError::NoValues.reading(), MetricReading::NoData);
    }

    #[test]
    fn answers_are_read_as_argos_conditions_see_them() {
        let vector = data(
            r#"{"resultType":"vector","result":[{"metric":{"a":"1"},"value":[1,"0.5"]},{"metric":{"a":"2"},"value":[1,"NaN"]}]}"#,
        );
        let MetricResult::Vector(values) = result_of(&vector).unwrap() else {
            panic!("a vector");
        };
        assert_eq!(values[0], 0.5);
        assert!(values[1].is_nan(), "NaN is kept for isNaN()");
        let empty = data(r#"{"resultType":"vector","result":[]}"#);
        assert_eq!(result_of(&empty), Ok(MetricResult::Vector(vec![])));
        let scalar = data(r#"{"resultType":"scalar","result":[1,"42"]}"#);
        assert_eq!(result_of(&scalar), Ok(MetricResult::Scalar(42.0)));
        let matrix = data(r#"{"resultType":"matrix","result":[{"metric":{},"values":[[1,"1"]]}]}"#);
        assert!(matches!(result_of(&matrix), Err(QueryError::Unexpected(_))));
    }

    #[test]
    fn addresses_must_be_http_or_https_urls() {
        assert!(PrometheusClient::new("http://prometheus:9090/").is_ok());
        assert!(PrometheusClient::new("https://prometheus:9090/prefix").is_ok());
        for bad in ["prometheus:9090", "ftp://prometheus", "not a url"] {
            let error = PrometheusClient::new(bad).err().unwrap();
            assert!(error.to_string().contains("https://"), "{error}");
        }
        let options = ClientOptions {
            headers: vec![("X-Scope-OrgID".into(), "line\nbreak".into())],
            ..ClientOptions::default()
        };
        let error = PrometheusClient::with_options("http://prometheus:9090", options)
            .err()
            .unwrap();
        assert!(error.to_string().contains("X-Scope-OrgID"), "{error}");
    }
}
