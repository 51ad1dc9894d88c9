//! What the provider tests share: reading one templated metric as the controller reads it.

pub mod cloudwatch;

use serin_core::plan::MetricReading;
use serin_metrics::{ClientCache, MetricInputs, PrometheusClient, QueryContext};
use std::collections::BTreeMap;

/// Reads the metric `check` (interval `interval`) through `template`, with `secret` as the
/// template's Secret, for the Canary podinfo.test whose target is podinfo.
pub async fn read_template(
    template: &serin_api::MetricTemplate,
    secret: Option<&BTreeMap<String, String>>,
    interval: &str,
) -> MetricReading {
    read_template_with(template, secret, interval, &ClientCache::default()).await
}

/// As [`read_template`], with the operator's `clients`.
pub async fn read_template_with(
    template: &serin_api::MetricTemplate,
    secret: Option<&BTreeMap<String, String>>,
    interval: &str,
    clients: &ClientCache,
) -> MetricReading {
    let unused_server = PrometheusClient::new("http://127.0.0.1:9").unwrap();
    let metric: serin_api::CanaryMetric = serde_json::from_value(serde_json::json!({
        "name": "check", "interval": interval,
        "templateRef": {"name": template.metadata.name.clone().unwrap_or_default()}}))
    .unwrap();
    let inputs = MetricInputs {
        context: QueryContext {
            name: "podinfo".into(),
            namespace: "test".into(),
            target: "podinfo".into(),
            ..QueryContext::default()
        },
        template: Some(template),
        secret,
        metrics_server: &unused_server,
        clients,
        provider: "istio",
    };
    serin_metrics::read(&metric, inputs).await
}
