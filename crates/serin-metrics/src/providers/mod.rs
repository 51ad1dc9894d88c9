//! The metric providers besides Prometheus, with Flagger's fields, Secret keys, default addresses
//! and query semantics: each builds its request from a MetricTemplate (pure, tested on its own)
//! and reads one value from the answer; [`read_value`] sends it with the guarantees every provider
//! shares ([`http`]).

pub mod aws;
pub mod clients;
pub mod cloudwatch;
pub mod datadog;
pub mod dynatrace;
pub mod graphite;
pub mod http;
pub mod influxdb;
pub mod keptn;
pub mod newrelic;
pub mod splunk;
pub mod stackdriver;

use serin_api::MetricTemplate;
use serin_api::limits::{MAX_PROVIDER_ERROR_BYTES, cut_to};
use std::collections::BTreeMap;
use std::time::Duration;

/// The provider types whose values [`read_value`] reads.
pub const VALUE_PROVIDERS: [&str; 9] = [
    "graphite",
    "datadog",
    "newrelic",
    "dynatrace",
    "influxdb",
    "cloudwatch",
    "keptn",
    "splunk",
    "stackdriver",
];

/// Whether [`read_value`] reads templates of provider `kind`.
pub fn reads(kind: &str) -> bool {
    VALUE_PROVIDERS.contains(&kind)
}

/// Why a provider gave no value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The provider answered, with no value in the window: usually no traffic.
    NoValues,
    /// The template or its Secret cannot make a request; the text says what to fix.
    Setting(String),
    /// The provider answered something that is not a value; the text quotes it.
    Answer(String),
    /// The provider could not be reached, refused the query, or rate-limited it.
    Transport(String),
}

/// The data of a template's Secret, by key, and the Secret's name for messages.
#[derive(Clone, Debug, PartialEq)]
pub struct Credentials {
    secret: String,
    data: BTreeMap<String, String>,
}

impl Credentials {
    /// The Secret `secret` holding `data`.
    pub fn new<'a>(secret: &str, data: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Credentials {
            secret: secret.to_string(),
            data: data
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// The value of `key`, or what to fix when the Secret lacks it (the value is never quoted).
    pub fn required(&self, key: &str) -> Result<&str, Failure> {
        self.data
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| Failure::Setting(format!("the Secret {} has no {key} key", self.secret)))
    }

    /// The value of `key`, if the Secret has it.
    pub fn optional(&self, key: &str) -> Option<&str> {
        self.data.get(key).map(String::as_str)
    }
}

/// The URL of the API at `path` below `address` (a path in `address` is kept).
pub(crate) fn endpoint(address: &str, path: &str) -> Result<reqwest::Url, Failure> {
    let mut url = base_url(address)?;
    let joined = format!("{}{path}", url.path().trim_end_matches('/'));
    url.set_path(&joined);
    url.set_query(None);
    Ok(url)
}

/// The template's Secret, which `kind` cannot be queried without (it holds `keys`).
pub(crate) fn secret_of<'a>(
    credentials: Option<&'a Credentials>,
    kind: &str,
    keys: &str,
) -> Result<&'a Credentials, Failure> {
    credentials.ok_or_else(|| {
        Failure::Setting(format!(
            "provider.secretRef is missing: {kind} needs a Secret with {keys}"
        ))
    })
}

/// A JSON answer, or what it is instead.
pub(crate) fn json_answer(body: &[u8]) -> Result<serde_json::Value, Failure> {
    serde_json::from_slice(body).map_err(|e| {
        Failure::Answer(format!(
            "the answer is not JSON ({e}): {}",
            http::quote(body)
        ))
    })
}

/// `address` as the base of a provider's URL: http or https with a host.
pub(crate) fn base_url(address: &str) -> Result<reqwest::Url, Failure> {
    let bad = || {
        Failure::Setting(format!(
            "provider.address {address:?} is not an http:// or https:// URL"
        ))
    };
    let url = reqwest::Url::parse(address.trim()).map_err(|_| bad())?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(bad());
    }
    Ok(url)
}

/// One query of a template, ready to send.
pub struct ProviderQuery<'a> {
    /// The template's query, rendered.
    pub text: &'a str,
    /// The template's headers, rendered.
    pub headers: Vec<(String, String)>,
    /// The metric's interval.
    pub interval: Duration,
    /// The namespace of the Canary the query is for.
    pub canary_namespace: &'a str,
}

/// Reads one value of `template`'s provider for `query`, with the credentials of its Secret
/// (`secret`, read again at every check).
pub async fn read_value(
    template: &MetricTemplate,
    secret: Option<&BTreeMap<String, String>>,
    query: ProviderQuery<'_>,
    clients: &clients::ProviderClients,
) -> Result<f64, Failure> {
    let ProviderQuery {
        text: query,
        headers,
        interval,
        canary_namespace,
    } = query;
    let provider = &template.spec.provider;
    if provider.type_ == "keptn" {
        let parsed = keptn::parse(query)?;
        let template_namespace = template
            .metadata
            .namespace
            .as_deref()
            .unwrap_or(canary_namespace);
        keptn::within_reach(&parsed, template_namespace, canary_namespace)?;
        let client = clients.kubernetes().ok_or_else(|| {
            Failure::Setting(
                "keptn templates are read only by the operator, through its Kubernetes client"
                    .into(),
            )
        })?;
        return keptn::read(client, &parsed).await;
    }
    let credentials = match (&provider.secret_ref, secret) {
        (Some(reference), Some(data)) => Some(Credentials {
            secret: reference.name.clone(),
            data: data.clone(),
        }),
        (Some(reference), None) => {
            return Err(Failure::Setting(format!(
                "the Secret {} (provider.secretRef) was not found in the template's namespace",
                reference.name
            )));
        }
        (None, _) => None,
    };
    let kind = provider.type_.as_str();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let required_address = || {
        provider
            .address
            .as_deref()
            .ok_or_else(|| Failure::Setting(format!("provider.address is required for {kind}")))
    };
    let credentials = credentials.as_ref();
    let address = provider.address.as_deref();
    let region = match kind {
        "cloudwatch" => cloudwatch::region_of(provider.region.as_deref(), address)?,
        _ => String::new(),
    };
    let mut request = match kind {
        "graphite" => graphite::request(required_address()?, query, credentials)?,
        "datadog" => datadog::request(address, query, interval, now.as_secs() as i64, credentials)?,
        "newrelic" => newrelic::request(address, query, interval, credentials)?,
        "dynatrace" => dynatrace::request(
            address,
            query,
            interval,
            now.as_millis() as i64,
            credentials,
        )?,
        "influxdb" => influxdb::request(required_address()?, query, credentials)?,
        "stackdriver" => stackdriver::request(address, query, credentials)?,
        "splunk" => splunk::request(
            required_address()?,
            query,
            interval,
            now.as_millis() as i64,
            credentials,
        )?,
        "cloudwatch" => {
            cloudwatch::request(address, &region, query, interval, now.as_secs() as i64)?
        }
        other => {
            return Err(Failure::Setting(format!(
                "provider type {other:?} is not read by Serin yet"
            )));
        }
    };
    request.headers.extend(headers);
    if let ("stackdriver", Some(credentials)) = (kind, credentials) {
        let token = clients.google().token(credentials).await?;
        request
            .secret_headers
            .push(("Authorization".into(), format!("Bearer {token}")));
    }
    if kind == "cloudwatch" {
        let aws = match credentials {
            Some(credentials) => aws::from_secret(credentials)?,
            None => clients.operator_aws().for_region(&region).await?,
        };
        aws::sign_request(
            &mut request,
            aws,
            (cloudwatch::SIGNING_NAME, &region),
            std::time::SystemTime::now(),
        )?;
    }
    let client = clients
        .client(provider.insecure_skip_verify == Some(true))
        .map_err(Failure::Transport)?;
    let answer = http::send(&client, &request, kind, interval)
        .await
        .map_err(Failure::Transport)?;
    if !(200..300).contains(&answer.status) {
        let hint = match (answer.status, kind) {
            (401 | 403, "datadog") => {
                ": check datadog_api_key and datadog_application_key in the template's Secret"
            }
            (401 | 403, "newrelic") => {
                ": check newrelic_query_key and newrelic_account_id in the template's Secret"
            }
            (401 | 403, "dynatrace") => {
                ": check dynatrace_token in the template's Secret (it needs the metrics.read scope)"
            }
            (401 | 403, "influxdb") => ": check token and org in the template's Secret",
            (401 | 403, "stackdriver") => {
                ": check serviceAccountKey and project in the template's Secret (the account needs roles/monitoring.viewer in the project)"
            }
            (401 | 403, "splunk") => {
                ": check sf_token_key in the template's Secret (an access token with the API scope)"
            }
            (status, "cloudwatch") => cloudwatch::error_hint(status, &answer.body),
            (401 | 403, _) => ": check the credentials in the template's Secret",
            _ => "",
        };
        return Err(Failure::Transport(format!(
            "{kind} answered HTTP {}{hint}: {}",
            answer.status,
            answer.quoted()
        )));
    }
    match kind {
        "graphite" => graphite::value(&answer.body),
        "newrelic" => newrelic::value(&answer.body),
        "dynatrace" => dynatrace::value(&answer.body),
        "influxdb" => influxdb::value(&answer.body),
        "cloudwatch" => cloudwatch::value(&answer.body),
        "splunk" => splunk::value(&answer.body),
        "stackdriver" => stackdriver::value(&answer.body),
        _ => datadog::value(&answer.body),
    }
}

impl Failure {
    /// The message for a check of the template `label` of provider `kind`; `None` for no data.
    /// The provider's part is cut to [`MAX_PROVIDER_ERROR_BYTES`], since a backend chooses it.
    pub fn message(&self, label: &str, kind: &str) -> Option<String> {
        let said = |text: &str| cut_to(text, MAX_PROVIDER_ERROR_BYTES);
        match self {
            Failure::NoValues => None,
            Failure::Setting(text) => Some(format!(
                "Metric template {label} ({kind}) cannot be queried: {}",
                said(text)
            )),
            Failure::Answer(text) | Failure::Transport(text) => Some(format!(
                "Metric template {label} ({kind}) query failed: {}",
                said(text)
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backends_words_are_cut_in_the_message() {
        let huge = Failure::Answer(format!(
            "point value [{}] is not a number",
            "1,".repeat(100_000)
        ));
        let message = huge.message("errors.test", "datadog").unwrap();
        assert!(
            message.len() < MAX_PROVIDER_ERROR_BYTES + 100,
            "{}",
            message.len()
        );
        assert!(
            message.starts_with(
                "Metric template errors.test (datadog) query failed: point value [1,1,"
            )
        );
        assert!(message.ends_with('…'));
        assert_eq!(Failure::NoValues.message("errors.test", "datadog"), None);
    }
}
