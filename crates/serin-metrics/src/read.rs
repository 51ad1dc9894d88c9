//! One metric of a canary's analysis, read into the decision core's [`MetricReading`]: the builtin
//! Istio queries and inline queries go to the operator's metrics server; MetricTemplates bring their
//! own Prometheus, headers and credentials.

use crate::prometheus::{Auth, ClientCache, ClientOptions, PrometheusClient};
use crate::query::{QueryContext, builtin_query_for, render};
use serin_api::{CanaryMetric, MetricTemplate};
use serin_core::plan::MetricReading;
use std::collections::BTreeMap;

/// What reading one metric needs besides the metric itself.
pub struct MetricInputs<'a> {
    /// The placeholders' values (the Canary's names; `interval` is taken from the metric).
    pub context: QueryContext,
    /// The MetricTemplate `templateRef` points at, if it exists.
    pub template: Option<&'a MetricTemplate>,
    /// The decoded data of the template's `provider.secretRef` Secret, if any.
    pub secret: Option<&'a BTreeMap<String, String>>,
    /// The operator's metrics server (`--metrics-server`), for builtin and inline queries.
    pub metrics_server: &'a PrometheusClient,
    /// The Canary's routing provider, which picks the builtin queries (Istio's telemetry, or the
    /// app's own histogram for `kubernetes`).
    pub provider: &'a str,
    /// Where the clients of templates' Prometheus servers are kept between checks.
    pub clients: &'a ClientCache,
}

/// The headers of a template's `provider.headers`, a name repeated for each of its values.
pub(crate) fn template_headers(template: &MetricTemplate) -> Vec<(String, String)> {
    template
        .spec
        .provider
        .headers
        .iter()
        .flatten()
        .flat_map(|(name, values)| values.iter().map(move |v| (name.clone(), v.clone())))
        .collect()
}

/// The credentials of a template's `provider.secretRef`: a `token`, or `username` and `password`.
pub(crate) fn template_auth(
    template: &MetricTemplate,
    secret: Option<&BTreeMap<String, String>>,
    label: &str,
) -> Result<Option<Auth>, String> {
    let Some(reference) = &template.spec.provider.secret_ref else {
        return Ok(None);
    };
    let data = secret.ok_or_else(|| {
        format!(
            "Metric template {label} secret {} error: the Secret was not found in the template's namespace",
            reference.name
        )
    })?;
    match (
        data.get("token"),
        data.get("username"),
        data.get("password"),
    ) {
        (Some(token), _, _) => Ok(Some(Auth::Bearer(token.clone()))),
        (None, Some(username), Some(password)) => Ok(Some(Auth::Basic {
            username: username.clone(),
            password: password.clone(),
        })),
        _ => Err(format!(
            "Metric template {label} secret {} error: it needs a token key, or both username and password",
            reference.name
        )),
    }
}

/// The client of a Prometheus template, from the cache.
pub(crate) fn template_client(
    template: &MetricTemplate,
    secret: Option<&BTreeMap<String, String>>,
    clients: &ClientCache,
    label: &str,
) -> Result<PrometheusClient, String> {
    template_client_with(template, template_headers(template), secret, clients, label)
}

/// The client of a Prometheus template sending `headers` (the template's, with an analysis's
/// args filled in), from the cache.
pub(crate) fn template_client_with(
    template: &MetricTemplate,
    headers: Vec<(String, String)>,
    secret: Option<&BTreeMap<String, String>>,
    clients: &ClientCache,
    label: &str,
) -> Result<PrometheusClient, String> {
    let provider = &template.spec.provider;
    if provider.type_ != "prometheus" {
        return Err(format!(
            "Metric template {label} error: provider type {:?} is not supported here; use provider.type: prometheus (web templates are for analysis steps)",
            provider.type_
        ));
    }
    let address = provider.address.as_deref().ok_or_else(|| {
        format!("Metric template {label} error: provider.address is required for prometheus")
    })?;
    let options = ClientOptions {
        headers,
        insecure_skip_verify: provider.insecure_skip_verify == Some(true),
        auth: template_auth(template, secret, label)?,
        ..ClientOptions::default()
    };
    clients
        .client(address, options)
        .map_err(|e| format!("Metric template {label} error: {e}"))
}

/// Runs the query of `metric` and returns what the decision core judges.
pub async fn read(metric: &CanaryMetric, inputs: MetricInputs<'_>) -> MetricReading {
    let mut context = inputs.context;
    context.interval = metric.interval.clone().unwrap_or_else(|| "1m".into());
    context.variables = metric.template_variables.clone().unwrap_or_default();
    if let Some(reference) = &metric.template_ref {
        let label = format!(
            "{}.{}",
            reference.name,
            reference.namespace_or(&context.namespace)
        );
        let Some(template) = inputs.template else {
            return MetricReading::Error(format!(
                "Metric template {label} error: not found; create the MetricTemplate or fix templateRef"
            ));
        };
        let kind = template.spec.provider.type_.as_str();
        if crate::providers::reads(kind) {
            let query = match render(&template.spec.query, &context) {
                Ok(query) => query,
                Err(e) => {
                    return MetricReading::Error(format!(
                        "Metric template {label} query render error: {e}"
                    ));
                }
            };
            let interval = serin_api::duration::parse_go_duration(&context.interval)
                .unwrap_or(std::time::Duration::from_secs(60));
            let read = crate::providers::read_value(
                template,
                inputs.secret,
                crate::providers::ProviderQuery {
                    text: &query,
                    headers: template_headers(template),
                    interval,
                    canary_namespace: &context.namespace,
                },
                inputs.clients.providers(),
            )
            .await;
            return match read {
                Ok(value) => MetricReading::Value(value),
                Err(failure) => match failure.message(&label, kind) {
                    None => MetricReading::NoData,
                    Some(message) => MetricReading::Error(message),
                },
            };
        }
        let client = match template_client(template, inputs.secret, inputs.clients, &label) {
            Ok(client) => client,
            Err(message) => return MetricReading::Error(message),
        };
        if template.spec.query.trim().is_empty() {
            return MetricReading::Error(format!(
                "Metric template {label} error: spec.query is empty; a prometheus template needs its query"
            ));
        }
        let query = match render(&template.spec.query, &context) {
            Ok(query) => query,
            Err(e) => {
                return MetricReading::Error(format!(
                    "Metric template {label} query render error: {e}"
                ));
            }
        };
        return reading(client.query(&query).await);
    }
    if let Some(query) = &metric.query {
        return match render(query, &context) {
            Ok(query) => reading(inputs.metrics_server.query(&query).await),
            Err(e) => MetricReading::Error(format!("query render error: {e}")),
        };
    }
    match builtin_query_for(inputs.provider, &metric.name, &context) {
        Some(builtin) => reading(
            inputs
                .metrics_server
                .query(&builtin.query)
                .await
                .map(|value| value * builtin.scale),
        ),
        None => MetricReading::Error(
            "no usable metrics template and query were configured: set templateRef, or use request-success-rate or request-duration"
                .into(),
        ),
    }
}

fn reading(result: Result<f64, crate::QueryError>) -> MetricReading {
    match result {
        Ok(value) => MetricReading::Value(value),
        Err(e) => e.reading(),
    }
}
