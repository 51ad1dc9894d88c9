//! Google Cloud Monitoring (Stackdriver), read as Flagger reads it: the template's query is MQL,
//! run by `projects.timeSeries.query` in the Secret's `project`, and the value is the first value
//! of the first point of the first time series. Tokens come from the Secret's `serviceAccountKey`
//! or from the operator's own Google identity ([`GoogleTokens`]).

use super::http::ProviderRequest;
use super::{Credentials, Failure};
use gcp_auth::{CustomServiceAccount, TokenProvider};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where the API is when the template names no address.
pub const DEFAULT_ADDRESS: &str = "https://monitoring.googleapis.com";

/// The OAuth scope a token is asked for.
pub const SCOPE: &str = "https://www.googleapis.com/auth/monitoring.read";

/// How long getting a token may take.
pub const TOKEN_TIMEOUT: Duration = Duration::from_secs(5);

/// The most service account keys whose tokens are kept; past it the oldest are forgotten.
pub const MAX_KEYS: usize = 64;

/// The request running the MQL `query` in `project`.
pub fn request(
    address: Option<&str>,
    query: &str,
    credentials: Option<&Credentials>,
) -> Result<ProviderRequest, Failure> {
    let credentials = super::secret_of(
        credentials,
        "stackdriver",
        "project (and serviceAccountKey, unless the operator has a Google identity of its own)",
    )?;
    let project = credentials.required("project")?;
    if project.is_empty()
        || project.len() > 64
        || !project
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b':' || b == b'.')
    {
        return Err(Failure::Setting(
            "the Secret's project is not a Google Cloud project ID".into(),
        ));
    }
    let url = super::endpoint(
        address.unwrap_or(DEFAULT_ADDRESS),
        &format!("/v3/projects/{project}/timeSeries:query"),
    )?;
    let mut request = ProviderRequest::get(url);
    request.method = reqwest::Method::POST;
    request.headers = vec![("Content-Type".into(), "application/json".into())];
    request.body = Some(serde_json::json!({ "query": query }).to_string());
    Ok(request)
}

/// The value of a query answer: the first value of the first point of the first time series, a
/// double or an integer. No series or no point is no data.
pub fn value(body: &[u8]) -> Result<f64, Failure> {
    let answer = super::json_answer(body)?;
    if let Some(message) = answer["error"]["message"].as_str() {
        return Err(Failure::Answer(format!("stackdriver said: {message}")));
    }
    let first = &answer["timeSeriesData"][0]["pointData"][0]["values"][0];
    if first.is_null() {
        return Err(Failure::NoValues);
    }
    if let Some(value) = first["doubleValue"].as_f64() {
        return Ok(value);
    }
    match &first["int64Value"] {
        Value::String(text) => text
            .parse::<i64>()
            .map(|n| n as f64)
            .map_err(|_| Failure::Answer(format!("int64Value {text:?} is not a number"))),
        Value::Number(n) => n.as_f64().ok_or(Failure::NoValues),
        _ => Err(Failure::Answer(format!(
            "the first value is not a number: {}",
            super::http::quote(first.to_string().as_bytes())
        ))),
    }
}

/// The token sources of Cloud Monitoring queries: one per service account key found in templates'
/// Secrets, and the operator's own (workload identity, `GOOGLE_APPLICATION_CREDENTIALS`), each
/// keeping its tokens until they expire.
#[derive(Default)]
pub struct GoogleTokens {
    keys: Mutex<HashMap<String, Arc<CustomServiceAccount>>>,
    operator: tokio::sync::OnceCell<Arc<dyn TokenProvider>>,
}

impl GoogleTokens {
    /// A bearer token for the template's Secret: from its `serviceAccountKey`, else the operator's
    /// identity.
    pub async fn token(&self, credentials: &Credentials) -> Result<String, Failure> {
        let provider: Arc<dyn TokenProvider> = match credentials.optional("serviceAccountKey") {
            Some(key) => self.key_provider(key)?,
            None => self.operator_provider().await?,
        };
        let token = tokio::time::timeout(TOKEN_TIMEOUT, provider.token(&[SCOPE]))
            .await
            .map_err(|_| {
                Failure::Transport(format!("no Google access token within {TOKEN_TIMEOUT:?}"))
            })?
            .map_err(|e| {
                Failure::Transport(format!(
                    "Google refused an access token: {}",
                    crate::transport::causes(&e)
                ))
            })?;
        Ok(token.as_str().to_string())
    }

    fn key_provider(&self, key: &str) -> Result<Arc<dyn TokenProvider>, Failure> {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(account) = keys.get(key) {
            return Ok(account.clone());
        }
        let account = CustomServiceAccount::from_json(key).map_err(|e| {
            Failure::Setting(format!(
                "the Secret's serviceAccountKey is not a service account key file ({}); put the JSON key of a service account with roles/monitoring.viewer there",
                first_words(&e)
            ))
        })?;
        if keys.len() >= MAX_KEYS {
            keys.clear();
        }
        let account = Arc::new(account);
        keys.insert(key.to_string(), account.clone());
        Ok(account)
    }

    async fn operator_provider(&self) -> Result<Arc<dyn TokenProvider>, Failure> {
        self.operator
            .get_or_try_init(|| async {
                tokio::time::timeout(TOKEN_TIMEOUT, gcp_auth::provider())
                    .await
                    .map_err(|_| "the search did not end".to_string())?
                    .map_err(|e| first_words(&e))
            })
            .await
            .cloned()
            .map_err(|reason| {
                Failure::Setting(format!(
                    "the operator has no Google identity ({reason}): put serviceAccountKey in the template's Secret, or give the operator's ServiceAccount Workload Identity"
                ))
            })
    }
}

/// The start of an error's text: a key's parse error may quote the key.
fn first_words(error: &gcp_auth::Error) -> String {
    serin_api::limits::cut_to(&crate::transport::causes(error), 160)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_goes_to_the_projects_time_series() {
        let secret = Credentials::new("gcp", [("project", "shop-prod-1234")]);
        let request = request(None, "fetch k8s_container | within 5m", Some(&secret)).unwrap();
        assert_eq!(
            request.url.as_str(),
            "https://monitoring.googleapis.com/v3/projects/shop-prod-1234/timeSeries:query"
        );
        assert_eq!(
            request.body.as_deref(),
            Some(r#"{"query":"fetch k8s_container | within 5m"}"#)
        );
        let bad = Credentials::new("gcp", [("project", "../../x")]);
        assert!(
            matches!(request_err(&bad), Failure::Setting(m) if m.contains("not a Google Cloud project ID"))
        );
        let none = Credentials::new("gcp", [("serviceAccountKey", "{}")]);
        assert_eq!(
            request_err(&none),
            Failure::Setting("the Secret gcp has no project key".into())
        );
    }

    fn request_err(secret: &Credentials) -> Failure {
        request(None, "q", Some(secret)).unwrap_err()
    }

    #[test]
    fn the_first_value_of_the_first_point_is_read() {
        let answer = br#"{"timeSeriesDescriptor": {"pointDescriptors": [{"key": "value.error_rate", "valueType": "DOUBLE"}]},
            "timeSeriesData": [{"labelValues": [{"stringValue": "podinfo"}],
              "pointData": [{"values": [{"doubleValue": 0.25}], "timeInterval": {"endTime": "2026-11-27T12:00:00Z"}},
                            {"values": [{"doubleValue": 0.5}]}]}]}"#;
        assert_eq!(value(answer), Ok(0.25));
        assert_eq!(
            value(br#"{"timeSeriesData": [{"pointData": [{"values": [{"int64Value": "42"}]}]}]}"#),
            Ok(42.0)
        );
        assert_eq!(
            value(br#"{"timeSeriesDescriptor": {}}"#),
            Err(Failure::NoValues)
        );
        assert_eq!(value(br#"{}"#), Err(Failure::NoValues));
        assert!(matches!(
            value(br#"{"timeSeriesData": [{"pointData": [{"values": [{"stringValue": "x"}]}]}]}"#),
            Err(Failure::Answer(m)) if m.contains("not a number")
        ));
    }
}
