//! Istio and Gateway API shapes embedded in a Canary, with the same JSON names as upstream.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One Istio string match: exactly one of `exact`, `prefix`, `suffix` or `regex` should be set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StringMatch {
    /// The value must equal this string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    /// The value must start with this string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// The value must end with this string (not supported by every Istio field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suffix: Option<String>,
    /// The value must fully match this RE2 regular expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
}

impl StringMatch {
    /// Number of match kinds set; a valid match has exactly one.
    pub fn kinds_set(&self) -> usize {
        [&self.exact, &self.prefix, &self.suffix, &self.regex]
            .iter()
            .filter(|v| v.is_some())
            .count()
    }
}

/// Istio `HTTPMatchRequest`: conditions on a request; all set fields must hold (AND).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpMatchRequest {
    /// Name of the match, copied into route names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Match on the request path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<StringMatch>,
    /// Match on the URI scheme.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<StringMatch>,
    /// Match on the HTTP method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<StringMatch>,
    /// Match on the Host/authority header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authority: Option<StringMatch>,
    /// Header name (lower case) to string match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, StringMatch>>,
    /// Destination port of the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// Labels the calling workload must carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_labels: Option<BTreeMap<String, String>>,
    /// Gateways the match applies to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateways: Option<Vec<String>>,
    /// Query parameter name to string match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_params: Option<BTreeMap<String, StringMatch>>,
    /// Compare the URI case-insensitively.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_uri_case: Option<bool>,
    /// Headers that must NOT match for this match to hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub without_headers: Option<BTreeMap<String, StringMatch>>,
    /// Namespace of the calling workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_namespace: Option<String>,
}

/// Istio `HTTPRewrite` (and Gateway API rewrite type).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpRewrite {
    /// Replacement path (or prefix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Replacement Host/authority header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authority: Option<String>,
    /// Gateway API only: `ReplacePrefixMatch` or `ReplaceFullPath`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

/// Istio `HTTPRetry` policy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpRetry {
    /// Number of retries for a request (always serialized, as Flagger does).
    #[serde(default)]
    pub attempts: i32,
    /// Timeout per attempt, e.g. `2s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_try_timeout: Option<String>,
    /// Comma-separated Envoy retry conditions, e.g. `gateway-error,connect-failure`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_on: Option<String>,
}

/// Header operations applied to a request or a response.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeaderOperations {
    /// Headers to overwrite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set: Option<BTreeMap<String, String>>,
    /// Headers to append.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add: Option<BTreeMap<String, String>>,
    /// Header names to remove.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remove: Option<Vec<String>>,
}

/// Istio `Headers`: operations on the request and on the response.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Headers {
    /// Operations applied before forwarding the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<HeaderOperations>,
    /// Operations applied before returning the response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<HeaderOperations>,
}

/// Istio `CorsPolicy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CorsPolicy {
    /// Deprecated exact origins; use `allowOrigins`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_origin: Option<Vec<String>>,
    /// Origins allowed to make CORS requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_origins: Option<Vec<StringMatch>>,
    /// Methods allowed for the resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_methods: Option<Vec<String>>,
    /// Headers allowed in requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_headers: Option<Vec<String>>,
    /// Headers browsers may read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expose_headers: Option<Vec<String>>,
    /// How long preflight results may be cached, e.g. `24h`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<String>,
    /// Whether credentials may be sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_credentials: Option<bool>,
}

/// Istio `TrafficPolicy`, copied verbatim into both DestinationRules.
///
/// Its sub-objects (loadBalancer, connectionPool, outlierDetection, tls, portLevelSettings) are kept
/// as free-form JSON so every Istio field passes through unchanged.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrafficPolicy {
    /// Load balancer settings (`simple`, `consistentHash`, `localityLbSetting`, `warmupDurationSecs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::free_form_object")]
    pub load_balancer: Option<serde_json::Value>,
    /// Connection pool limits (`tcp`, `http`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::free_form_object")]
    pub connection_pool: Option<serde_json::Value>,
    /// Outlier detection (circuit breaking) settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::free_form_object")]
    pub outlier_detection: Option<serde_json::Value>,
    /// Client TLS settings for the upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::free_form_object")]
    pub tls: Option<serde_json::Value>,
    /// Per-port overrides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::free_form_list")]
    pub port_level_settings: Option<Vec<serde_json::Value>>,
}

/// Gateway API `ParentReference`: a Gateway the generated HTTPRoute attaches to.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParentReference {
    /// API group of the parent, default `gateway.networking.k8s.io`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind of the parent, default `Gateway`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Namespace of the parent, default the route's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name of the parent.
    pub name: String,
    /// Listener name on the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    /// Listener port on the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// Gateway API `HTTPRequestMirrorFilter` (used only by the Gateway API router).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpRequestMirrorFilter {
    /// Backend that receives the copies: `{group?, kind?, name, namespace?, port?}`.
    #[schemars(schema_with = "crate::schema::free_form_object")]
    pub backend_ref: serde_json::Value,
    /// Percentage of requests mirrored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<i32>,
    /// Fraction of requests mirrored: `{numerator, denominator?}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::free_form_object")]
    pub fraction: Option<serde_json::Value>,
}
