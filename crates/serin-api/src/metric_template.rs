//! The `MetricTemplate` resource: a reusable query against a metrics provider.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A query template and the provider it runs against.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "serin.dev",
    root = "MetricTemplateDefinition",
    version = "v1beta1",
    kind = "MetricTemplate",
    plural = "metrictemplates",
    namespaced,
    status = "MetricTemplateStatus",
    category = "all",
    doc = "MetricTemplate holds a metric query, rendered with the canary's name, namespace, target, service and interval.",
    printcolumn = r#"{"name":"Provider","type":"string","jsonPath":".spec.provider.type"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MetricTemplateSpec {
    /// Where the query runs.
    pub provider: MetricProvider,
    /// The query, with `{{ name }}`, `{{ namespace }}`, `{{ target }}`, `{{ service }}`, `{{ ingress }}`,
    /// `{{ route }}`, `{{ interval }}`, `{{ variables.<key> }}` and `{{ args.<name> }}` placeholders;
    /// required for Prometheus, unused by `web` (empty when absent).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub query: String,
}

/// A metrics backend.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricProvider {
    /// `prometheus`, `web`, `job`, `influxdb`, `datadog`, `externalmetrics`, `stackdriver`, `cloudwatch`,
    /// `newrelic`, `graphite`, `dynatrace`, `keptn` or `splunk`.
    #[serde(rename = "type")]
    pub type_: String,
    /// API URL (required for Prometheus); for `web`, the URL called, with the query's placeholders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// HTTP headers sent with each query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, Vec<String>>>,
    /// Secret in the template's namespace with the provider's credentials: for Prometheus `token`,
    /// or `username` and `password` (docs/metrics.md lists every provider's keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
    /// Cloud region (CloudWatch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Skip TLS verification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_skip_verify: Option<bool>,
    /// HTTP method of a `web` metric: `GET` (the default), `POST` or `PUT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Request body of a `web` metric, with the query's placeholders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// JSONPath of the value a `web` metric's conditions judge, e.g. `{$.data.ok}` or `$.data.ok`
    /// (the whole answer when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_path: Option<String>,
    /// Seconds a `web` metric's request may take, 1 to 60 (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i64>,
    /// The Job a `job` metric runs in the Canary's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobMetric>,
}

/// The Job a `job` metric runs for each measurement: it passes when the Job completes and fails
/// when the Job fails; the Job is deleted once it has ended.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct JobMetric {
    /// Labels and annotations for the Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<crate::CustomMetadata>,
    /// The Job's spec, as `batch/v1` Job's `spec`.
    #[schemars(schema_with = "crate::schema::free_form_object")]
    pub spec: serde_json::Value,
}

/// Reference to a Secret in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct SecretReference {
    /// Name of the Secret.
    pub name: String,
}

/// Observed state of a MetricTemplate (kept for Flagger compatibility).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MetricTemplateStatus {
    /// Conditions, currently not written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<crate::CanaryCondition>,
}

/// Whether `region` is shaped as AWS region names are (`us-east-1`, `ap-southeast-2`,
/// `us-gov-west-1`).
pub fn is_aws_region(region: &str) -> bool {
    let parts: Vec<&str> = region.split('-').collect();
    (3..=5).contains(&parts.len())
        && region.len() <= 32
        && parts[..parts.len() - 1]
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase()))
        && parts[parts.len() - 1]
            .parse::<u8>()
            .is_ok_and(|n| (1..100).contains(&n))
}

/// Metric provider types a MetricTemplate may name.
pub const METRIC_PROVIDER_TYPES: [&str; 13] = [
    "prometheus",
    "web",
    "job",
    "influxdb",
    "datadog",
    "externalmetrics",
    "stackdriver",
    "cloudwatch",
    "newrelic",
    "graphite",
    "dynatrace",
    "keptn",
    "splunk",
];

crate::group::served_kind!(
    /// A reusable metric query and the provider it runs against.
    MetricTemplate,
    MetricTemplateSpec,
    MetricTemplateStatus,
    "MetricTemplate",
    "metrictemplates"
);
