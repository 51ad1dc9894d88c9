//! The `Canary` custom resource: Flagger's v1beta1 fields plus Argo Rollouts-style extensions.

use crate::analysis_run::ThresholdRange;
use crate::mesh::{
    CorsPolicy, Headers, HttpMatchRequest, HttpRequestMirrorFilter, HttpRetry, HttpRewrite,
    ParentReference, TrafficPolicy,
};
use crate::object_ref::CrossNamespaceObjectReference;
use crate::status::CanaryStatus;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Desired state of a progressive delivery: which workload to release and how to analyse it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
// The derived (de)serializers are wrapped below so that `canaryAnalysis` is folded into `analysis`
// as the object is read: no code after that can see the deprecated spelling.
#[serde(remote = "Self")]
#[schemars(transform = crate::schema::with_canary_analysis_alias)]
#[kube(
    group = "serin.dev",
    root = "CanaryDefinition",
    version = "v1beta1",
    kind = "Canary",
    plural = "canaries",
    namespaced,
    status = "CanaryStatus",
    category = "all",
    doc = "Canary releases a Deployment progressively: traffic moves to the new version step by step while metrics and webhooks are checked.",
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Weight","type":"integer","jsonPath":".status.canaryWeight"}"#,
    printcolumn = r#"{"name":"Suspended","type":"boolean","jsonPath":".spec.suspend","priority":1}"#,
    printcolumn = r#"{"name":"FailedChecks","type":"integer","jsonPath":".status.failedChecks","priority":1}"#,
    printcolumn = r#"{"name":"Interval","type":"string","jsonPath":".spec.analysis.interval","priority":1}"#,
    printcolumn = r#"{"name":"Mirror","type":"boolean","jsonPath":".spec.analysis.mirror","priority":1}"#,
    printcolumn = r#"{"name":"StepWeight","type":"string","jsonPath":".spec.analysis.stepWeight","priority":1}"#,
    printcolumn = r#"{"name":"StepWeights","type":"string","jsonPath":".spec.analysis.stepWeights","priority":1}"#,
    printcolumn = r#"{"name":"MaxWeight","type":"string","jsonPath":".spec.analysis.maxWeight","priority":1}"#,
    printcolumn = r#"{"name":"LastTransitionTime","type":"string","jsonPath":".status.lastTransitionTime"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct CanarySpec {
    /// Routing provider for this canary (default: the operator's `--mesh-provider`, `istio`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Prometheus URL for builtin and inline-query metrics (default: the operator's `--metrics-server`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_server: Option<String>,
    /// The workload under release.
    pub target_ref: LocalObjectReference,
    /// HorizontalPodAutoscaler (autoscaling/v2) of the target; cloned as `<name>-primary`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaler_ref: Option<Box<AutoscalerReference>>,
    /// Ingress reference (NGINX provider only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_ref: Option<LocalObjectReference>,
    /// ApisixRoute reference (APISIX provider only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_ref: Option<LocalObjectReference>,
    /// Gloo Upstream reference (Gloo provider only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_ref: Option<CrossNamespaceObjectReference>,
    /// The Services and routing rules generated for the target.
    pub service: CanaryService,
    /// How the new version is analysed and promoted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<CanaryAnalysis>,
    /// Which spelling the analysis was read from, for validation messages.
    #[serde(skip)]
    #[schemars(skip)]
    analysis_spelling: AnalysisSpelling,
    /// The deprecated `canaryAnalysis` as read, before it is folded into `analysis`; always
    /// `None` after reading.
    #[serde(default, rename = "canaryAnalysis", skip_serializing)]
    #[schemars(skip)]
    canary_analysis: Option<serde_json::Value>,
    /// Seconds the canary or primary may take to make progress before the release fails (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline_seconds: Option<i32>,
    /// Promote new revisions without analysis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_analysis: Option<bool>,
    /// Restore the target and the routing objects when the Canary is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revert_on_deletion: Option<bool>,
    /// Skip every tick; an in-flight release freezes where it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
}

/// Which of Flagger's two spellings a Canary's analysis was written with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AnalysisSpelling {
    /// `spec.analysis` (or no analysis at all).
    #[default]
    Analysis,
    /// Only the deprecated `spec.canaryAnalysis`.
    CanaryAnalysis,
    /// Both; `analysis` is used, as Flagger does, and validation reports the conflict.
    Both,
}

impl Serialize for CanarySpec {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        CanarySpec::serialize(self, serializer)
    }
}

impl<'de> Deserialize<'de> for CanarySpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut spec = CanarySpec::deserialize(deserializer)?;
        let alias = spec.canary_analysis.take().filter(|alias| !alias.is_null());
        spec.analysis_spelling = match (spec.analysis.is_some(), alias) {
            (true, Some(_)) => AnalysisSpelling::Both,
            (false, Some(alias)) => {
                spec.analysis =
                    Some(serde_json::from_value(alias).map_err(serde::de::Error::custom)?);
                AnalysisSpelling::CanaryAnalysis
            }
            (_, None) => AnalysisSpelling::Analysis,
        };
        Ok(spec)
    }
}

/// Reference to an object in the Canary's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalObjectReference {
    /// API version of the referent, e.g. `apps/v1`.
    #[serde(default)]
    pub api_version: String,
    /// Kind of the referent, e.g. `Deployment`.
    #[serde(default)]
    pub kind: String,
    /// Name of the referent.
    #[serde(default)]
    pub name: String,
}

/// Reference to the target's autoscaler.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalerReference {
    /// API version, e.g. `autoscaling/v2`.
    #[serde(default)]
    pub api_version: String,
    /// `HorizontalPodAutoscaler` (or `ScaledObject` for KEDA).
    #[serde(default)]
    pub kind: String,
    /// Name of the autoscaler.
    #[serde(default)]
    pub name: String,
    /// KEDA only: replacement queries for the primary's ScaledObject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_scaler_queries: Option<BTreeMap<String, String>>,
    /// Replica bounds for the primary's autoscaler, overriding the target's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_scaler_replicas: Option<ScalerReplicas>,
}

/// Replica bounds for an autoscaler.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalerReplicas {
    /// Lower bound, at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i32>,
    /// Upper bound, at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i32>,
}

/// Labels and annotations put on a generated object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustomMetadata {
    /// Labels to set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations to set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// Label and annotation keys the operator must leave alone on generated Services.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnmanagedMetadata {
    /// Annotation keys owned by someone else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Vec<String>>,
    /// Label keys owned by someone else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
}

/// The apex, `-primary` and `-canary` Services and the routing rules generated for them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryService {
    /// Apex Service name (default: `targetRef.name`); also the VirtualService name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// ClusterIP port of the Services.
    pub port: i32,
    /// Name of the Service port (default `http`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_name: Option<String>,
    /// Container port number or name (default: `port`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_port: Option<IntOrString>,
    /// appProtocol of the main port; `tcp` makes Istio route at L4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
    /// `PreferClose`, `PreferSameZone` or `PreferSameNode`, copied to the Services.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_distribution: Option<String>,
    /// Also expose every other container port of the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_discovery: Option<bool>,
    /// Make the generated Services headless (`clusterIP: None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headless: Option<bool>,
    /// Istio route timeout, e.g. `30s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Gateway API backend request timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_timeout: Option<String>,
    /// Istio gateways of the VirtualService (default `["mesh"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateways: Option<Vec<String>>,
    /// Gateway API parents of the HTTPRoute (at most 32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_refs: Option<Vec<ParentReference>>,
    /// Hosts of the VirtualService; the apex name is always added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
    /// Generate an Istio delegate VirtualService (no hosts or gateways).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation: Option<bool>,
    /// Istio traffic policy for both DestinationRules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_policy: Option<Box<TrafficPolicy>>,
    /// Conditions on the generated HTTP routes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#match: Option<Vec<HttpMatchRequest>>,
    /// URI and authority rewrite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<Box<HttpRewrite>>,
    /// Retry policy of the routes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<HttpRetry>,
    /// Request and response header operations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<Box<Headers>>,
    /// Gateway API request mirroring filters (Istio mirroring is `analysis.mirror`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<Vec<HttpRequestMirrorFilter>>,
    /// CORS policy of the routes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cors_policy: Option<Box<CorsPolicy>>,
    /// App Mesh mesh name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mesh_name: Option<String>,
    /// App Mesh backends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backends: Option<Vec<String>>,
    /// Metadata for the apex Service (and the VirtualService).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apex: Option<CustomMetadata>,
    /// Metadata for the `-primary` Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<CustomMetadata>,
    /// Metadata for the `-canary` Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CustomMetadata>,
    /// Keys on generated Services that the operator must not touch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmanaged_metadata: Option<UnmanagedMetadata>,
}

/// How a new revision is analysed: the interval, the failure threshold, the strategy and its checks.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryAnalysis {
    /// Period of one analysis tick, e.g. `1m` or `30s` (default 60s, at least 10s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// Failed checks that trigger a rollback (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<i32>,
    /// Analysis iterations for A/B testing and blue/green.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<i32>,
    /// Highest canary weight before promotion (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub max_weight: Option<i32>,
    /// Canary weight added each tick.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub step_weight: Option<i32>,
    /// Explicit ascending ladder of canary weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_weights: Option<Vec<i32>>,
    /// Canary weight removed each tick while promoting (default: all at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_weight_promotion: Option<i32>,
    /// Shadow traffic to the canary before shifting weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<bool>,
    /// Percentage of requests mirrored (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_weight: Option<i32>,
    /// Percent of primary replicas that must be available (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_ready_threshold: Option<i32>,
    /// Percent of canary replicas that must be available (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_ready_threshold: Option<i32>,
    /// A/B routing conditions: only matching requests reach the canary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#match: Option<Vec<HttpMatchRequest>>,
    /// Metric checks run at every tick.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Vec<CanaryMetric>>,
    /// Webhooks: gates, load tests, notifications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhooks: Option<Vec<CanaryWebhook>>,
    /// Alerts sent through AlertProviders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alerts: Option<Vec<CanaryAlert>>,
    /// Cookie-based session affinity to the canary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<Box<SessionAffinity>>,
    /// Explicit steps (setWeight, pause, setCanaryScale, analysis, setHeaderRoute, setMirrorRoute),
    /// instead of stepWeight/stepWeights/iterations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<CanaryStep>>,
    /// An analysis that runs beside the steps from `startingStep` until the release ends; a
    /// failure rolls the release back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background_analysis: Option<Box<crate::analysis_run::StepAnalysis>>,
    /// The routes setHeaderRoute and setMirrorRoute steps may add, in order of precedence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_routes: Option<Vec<crate::managed_routes::ManagedRoute>>,
    /// Scale the primary down as traffic moves to the canary, to save replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic_stable_scale: Option<bool>,
    /// Seconds to keep the canary running after a rollback (0 = keep it running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_scale_down_delay_seconds: Option<i32>,
    /// Blue/green: promote without a manual promote (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_promotion_enabled: Option<bool>,
    /// Blue/green: promote automatically this many seconds after the analysis finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_promotion_seconds: Option<i32>,
    /// Blue/green: run the preview (canary) with this many replicas until promotion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_replica_count: Option<i32>,
    /// Seconds to keep the canary running after traffic is back on the promoted primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_delay_seconds: Option<i32>,
    /// Replica-ratio canary (provider `kubernetes`): pods allowed above the target's replicas while
    /// moving between steps, a number or a percentage (default: the target's rolling update, else 25%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
    /// Replica-ratio canary: pods that may be unavailable while moving between steps, a number or a
    /// percentage (default: the target's rolling update, else 25%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// Keeps the canary's pods off the nodes that run the primary's, as Argo Rollouts'
    /// `antiAffinity` does; exactly one of its fields is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anti_affinity: Option<AntiAffinity>,
    /// Blue/green: checks the preview must pass after the iterations, before traffic switches to
    /// it; a failure rolls back with the primary untouched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_promotion_analysis: Option<PromotionAnalysis>,
    /// Blue/green: checks run once traffic has switched to the new version, while the primary still
    /// runs the previous one; a failure sends traffic back to it at once and the release fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_promotion_analysis: Option<PromotionAnalysis>,
}

/// Checks around a blue/green switch, written with the same metric and webhook blocks as the
/// analysis; each interval runs them all once.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromotionAnalysis {
    /// Intervals whose checks must all pass (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<i32>,
    /// Metric checks, as in `analysis.metrics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Vec<CanaryMetric>>,
    /// Webhook checks (type `rollout`), as in `analysis.webhooks`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhooks: Option<Vec<CanaryWebhook>>,
}

impl PromotionAnalysis {
    /// Intervals whose checks must all pass: `iterations`, at least 1.
    pub fn iterations(&self) -> i32 {
        self.iterations.unwrap_or(1).max(1)
    }

    /// The metric checks (empty when unset).
    pub fn metrics(&self) -> &[CanaryMetric] {
        self.metrics.as_deref().unwrap_or(&[])
    }

    /// The webhook checks (empty when unset).
    pub fn webhooks(&self) -> &[CanaryWebhook] {
        self.webhooks.as_deref().unwrap_or(&[])
    }
}

/// Pod anti-affinity of the canary's pods to the primary's, per node (`kubernetes.io/hostname`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AntiAffinity {
    /// Prefer other nodes, with this weight among the pod's scheduling preferences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_during_scheduling_ignored_during_execution: Option<PreferredAntiAffinity>,
    /// Never schedule a canary pod on a node that runs a primary pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_during_scheduling_ignored_during_execution: Option<RequiredAntiAffinity>,
}

/// A preferred anti-affinity: its weight, 1 to 100.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreferredAntiAffinity {
    /// Weight of the preference, 1 to 100.
    pub weight: i32,
}

/// A required anti-affinity: written `{}`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct RequiredAntiAffinity {}

/// One explicit step; exactly one of its fields is set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryStep {
    /// Route this percentage of traffic to the canary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_weight: Option<i32>,
    /// Wait: for `duration`, or until promoted when `duration` is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseStep>,
    /// Scale the canary independently of its traffic weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_canary_scale: Option<SetCanaryScale>,
    /// Measure metrics and wait here until they are assessed; a failed analysis rolls back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<crate::analysis_run::StepAnalysis>,
    /// Send requests with a header to the canary from this step on (a managed route).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_header_route: Option<crate::managed_routes::SetHeaderRoute>,
    /// Copy matching requests to the canary from this step on (a managed route).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_mirror_route: Option<crate::managed_routes::SetMirrorRoute>,
}

/// A pause step: `{}` waits for a promote, `{duration: 30s}` waits that long.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PauseStep {
    /// Seconds as an integer, or a string with s/m/h units such as `90s`, `5m`, `1h30m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<IntOrString>,
}

/// Canary replica count for the following steps; exactly one field is set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetCanaryScale {
    /// An absolute replica count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// A percentage of the target's replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    /// Go back to scaling with the traffic weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_traffic_weight: Option<bool>,
}

/// A metric check: a builtin, an inline query or a MetricTemplate, with its accepted range.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryMetric {
    /// Unique name; `request-success-rate` and `request-duration` are builtins.
    pub name: String,
    /// Query window, e.g. `1m` (builtins default to `1m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// Deprecated single bound; use `thresholdRange`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// Inclusive range of accepted values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold_range: Option<ThresholdRange>,
    /// Deprecated inline PromQL; use a MetricTemplate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// MetricTemplate that holds the query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_ref: Option<CrossNamespaceObjectReference>,
    /// Values for `{{ variables.<key> }}` in the template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_variables: Option<BTreeMap<String, String>>,
    /// What an empty or NaN result means: `fail` (default) or `ignore` for idle services.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_data: Option<String>,
}

/// A webhook called during the release.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryWebhook {
    /// Unique name.
    pub name: String,
    /// When it is called: `confirm-rollout`, `pre-rollout`, `rollout` (default), `confirm-traffic-increase`,
    /// `confirm-promotion`, `post-rollout`, `rollback` or `event`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Absolute http(s) URL.
    pub url: String,
    /// Request timeout, e.g. `30s` (default 10s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Extra key/values forwarded in the payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
    /// Do not send "waiting for approval" alerts for this gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mute_alert: Option<bool>,
    /// Extra attempts on retryable errors (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<i32>,
    /// Skip TLS verification.
    #[serde(
        default,
        rename = "disableTLS",
        skip_serializing_if = "Option::is_none"
    )]
    pub disable_tls: Option<bool>,
}

/// An alert sent through an AlertProvider.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryAlert {
    /// Name of the alert.
    pub name: String,
    /// Lowest severity sent: `info`, `warn` or `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<String>,
    /// The AlertProvider to use.
    pub provider_ref: CrossNamespaceObjectReference,
}

/// Cookie-based session affinity: a user who reached the canary keeps reaching it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionAffinity {
    /// Cookie that pins a user to the canary.
    pub cookie_name: String,
    /// Cookie that pins a user to the primary; must differ from `cookieName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_cookie_name: Option<String>,
    /// Cookie domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Cookie HttpOnly flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_only: Option<bool>,
    /// Cookie lifetime in seconds (default 86400).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<i32>,
    /// Cookie Partitioned flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitioned: Option<bool>,
    /// Cookie path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `Strict`, `Lax` or `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_site: Option<String>,
    /// Cookie Secure flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure: Option<bool>,
}

/// Annotation holding the token of the latest `promote` request (e.g. a timestamp).
pub const PROMOTE_ANNOTATION: &str = "serin.dev/promote";
/// Annotation holding the token of the latest `promote --full` request.
pub const PROMOTE_FULL_ANNOTATION: &str = "serin.dev/promote-full";
/// Annotation holding the token of the latest `abort` request.
pub const ABORT_ANNOTATION: &str = "serin.dev/abort";
/// Annotation holding the token of the latest `retry` request.
pub const RETRY_ANNOTATION: &str = "serin.dev/retry";
/// Annotation holding the token of the latest `restart` request: run the analysis of the
/// target's current revision again from the start.
pub const RESTART_ANNOTATION: &str = "serin.dev/restart";
/// The annotation with which an object's owner lets the Canary it names (in the same namespace)
/// take the object over: `serin.dev/adopt: <canary name>`.
pub const ADOPT_ANNOTATION: &str = "serin.dev/adopt";

/// A manual request on a release: the annotation that carries its token, and where the operator
/// records the token once it has acted on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManualRequest {
    /// Leave a pause or a promotion gate.
    Promote,
    /// Promote at once, skipping the remaining steps and checks.
    PromoteFull,
    /// Roll the release back now.
    Abort,
    /// Run a Failed release again.
    Retry,
    /// Run the analysis of the target's current revision again from the start.
    Restart,
}

impl ManualRequest {
    /// The annotation a request's token is written to.
    pub fn annotation(self) -> &'static str {
        match self {
            ManualRequest::Promote => PROMOTE_ANNOTATION,
            ManualRequest::PromoteFull => PROMOTE_FULL_ANNOTATION,
            ManualRequest::Abort => ABORT_ANNOTATION,
            ManualRequest::Retry => RETRY_ANNOTATION,
            ManualRequest::Restart => RESTART_ANNOTATION,
        }
    }

    /// The request's name as a verb: `promote`, `promote-full`, `abort`, `retry`, `restart`.
    pub fn verb(self) -> &'static str {
        self.annotation().trim_start_matches("serin.dev/")
    }

    /// The token of the last request of this kind the operator acted on.
    pub fn handled(self, handled: &crate::HandledRequests) -> Option<&String> {
        match self {
            ManualRequest::Promote => handled.promote.as_ref(),
            ManualRequest::PromoteFull => handled.promote_full.as_ref(),
            ManualRequest::Abort => handled.abort.as_ref(),
            ManualRequest::Retry => handled.retry.as_ref(),
            ManualRequest::Restart => handled.restart.as_ref(),
        }
    }
}

/// Release strategy derived from the analysis fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Progressive weights from stepWeight/maxWeight or stepWeights.
    Canary,
    /// Explicit `steps`.
    Steps,
    /// A/B testing: `match` plus `iterations`.
    AbTesting,
    /// Blue/green: `iterations` without `match`.
    BlueGreen,
}

impl Strategy {
    /// Lower-case name used in events and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Canary => "canary",
            Strategy::Steps => "steps",
            Strategy::AbTesting => "ab-testing",
            Strategy::BlueGreen => "blue-green",
        }
    }
}

/// Default analysis interval when none (or an unparseable one) is given.
pub const DEFAULT_INTERVAL_SECONDS: u64 = 60;
/// Shortest interval the operator runs at.
pub const MIN_INTERVAL_SECONDS: u64 = 10;
/// Default `progressDeadlineSeconds`.
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: i32 = 600;

/// The provider without a mesh: blue/green by switching the apex Service's selector, or a canary by
/// replica ratio.
pub const KUBERNETES_PROVIDER: &str = "kubernetes";

impl CanarySpec {
    /// The analysis in effect (`analysis`, or the deprecated `canaryAnalysis` it was read from).
    pub fn analysis(&self) -> Option<&CanaryAnalysis> {
        self.analysis.as_ref()
    }

    /// Which spelling the analysis was written with.
    pub fn analysis_spelling(&self) -> AnalysisSpelling {
        self.analysis_spelling
    }

    /// Whether new revisions are promoted without analysis.
    pub fn skips_analysis(&self) -> bool {
        self.skip_analysis.unwrap_or(false) || self.analysis().is_none()
    }

    /// Whether the traffic split is the ratio of ready pods: provider `kubernetes` with a weighted
    /// strategy (steps, stepWeight or stepWeights), the apex Service selecting both sides' pods.
    pub fn splits_by_replicas(&self) -> bool {
        self.provider.as_deref() == Some(KUBERNETES_PROVIDER)
            && self.target_ref.kind != "DaemonSet"
            && matches!(
                self.analysis()
                    .map_or(Strategy::Canary, CanaryAnalysis::strategy),
                Strategy::Canary | Strategy::Steps
            )
    }

    /// Apex Service name: `service.name` or the target's name.
    pub fn service_name(&self) -> &str {
        self.service
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or(&self.target_ref.name)
    }

    /// `progressDeadlineSeconds`, defaulted to 600.
    pub fn progress_deadline_seconds(&self) -> i32 {
        self.progress_deadline_seconds
            .unwrap_or(DEFAULT_PROGRESS_DEADLINE_SECONDS)
    }

    /// Whether every tick is skipped.
    pub fn is_suspended(&self) -> bool {
        self.suspend.unwrap_or(false)
    }
}

impl CanaryAnalysis {
    /// The strategy these fields select (steps, A/B, blue/green or progressive canary).
    pub fn strategy(&self) -> Strategy {
        let iterations = self.iterations.unwrap_or(0);
        if self.steps.as_ref().is_some_and(|s| !s.is_empty()) {
            Strategy::Steps
        } else if iterations > 0 && self.r#match.as_ref().is_some_and(|m| !m.is_empty()) {
            Strategy::AbTesting
        } else if iterations > 0 {
            Strategy::BlueGreen
        } else {
            Strategy::Canary
        }
    }

    /// Tick period in seconds: the parsed interval, 60 when absent or unparseable, at least 10.
    pub fn interval_seconds(&self) -> u64 {
        self.interval
            .as_deref()
            .and_then(|text| crate::duration::parse_go_duration(text).ok())
            .map_or(DEFAULT_INTERVAL_SECONDS, |interval| interval.as_secs())
            .max(MIN_INTERVAL_SECONDS)
    }

    /// Failed checks that trigger a rollback; 1 when unset or not positive.
    pub fn threshold(&self) -> i32 {
        self.threshold.filter(|t| *t > 0).unwrap_or(1)
    }

    /// Iterations for A/B and blue/green (0 when unset).
    pub fn iterations(&self) -> i32 {
        self.iterations.unwrap_or(0)
    }

    /// Whether traffic mirroring is on.
    pub fn mirror(&self) -> bool {
        self.mirror.unwrap_or(false)
    }

    /// The steps, or an empty slice.
    pub fn steps(&self) -> &[CanaryStep] {
        self.steps.as_deref().unwrap_or(&[])
    }

    /// The metrics, or an empty slice.
    pub fn metrics(&self) -> &[CanaryMetric] {
        self.metrics.as_deref().unwrap_or(&[])
    }

    /// The webhooks, or an empty slice.
    pub fn webhooks(&self) -> &[CanaryWebhook] {
        self.webhooks.as_deref().unwrap_or(&[])
    }

    /// The pre- and post-promotion analyses that are set.
    pub fn promotion_analyses(&self) -> impl Iterator<Item = &PromotionAnalysis> {
        [&self.pre_promotion_analysis, &self.post_promotion_analysis]
            .into_iter()
            .flatten()
    }

    /// Every metric check: the analysis's, then the pre- and post-promotion analyses' (their names
    /// are unique across all three).
    pub fn every_metric(&self) -> impl Iterator<Item = &CanaryMetric> {
        self.metrics().iter().chain(
            self.promotion_analyses()
                .flat_map(PromotionAnalysis::metrics),
        )
    }

    /// The analysis at step `step`, or the background analysis for `None`.
    pub fn analysis_at(&self, step: Option<usize>) -> Option<&crate::analysis_run::StepAnalysis> {
        match step {
            Some(index) => self.steps().get(index)?.analysis.as_ref(),
            None => self.background_analysis.as_deref(),
        }
    }

    /// Every Argo-style analysis with its field path: the analysis steps', then the background one.
    pub fn analyses(&self) -> impl Iterator<Item = (String, &crate::analysis_run::StepAnalysis)> {
        let steps = self.steps().iter().enumerate().filter_map(|(i, step)| {
            Some((
                format!("spec.analysis.steps[{i}].analysis"),
                step.analysis.as_ref()?,
            ))
        });
        let background = self
            .background_analysis
            .as_deref()
            .map(|b| ("spec.analysis.backgroundAnalysis".to_string(), b));
        steps.chain(background)
    }

    /// Every webhook: the analysis's, then the pre- and post-promotion analyses'.
    pub fn every_webhook(&self) -> impl Iterator<Item = &CanaryWebhook> {
        self.webhooks().iter().chain(
            self.promotion_analyses()
                .flat_map(PromotionAnalysis::webhooks),
        )
    }

    /// Percent of primary replicas that must be available (default 100).
    pub fn primary_ready_threshold(&self) -> i32 {
        self.primary_ready_threshold.unwrap_or(100)
    }

    /// Percent of canary replicas that must be available (default 100).
    pub fn canary_ready_threshold(&self) -> i32 {
        self.canary_ready_threshold.unwrap_or(100)
    }

    /// Whether blue/green promotion happens without a manual promote (default true).
    pub fn auto_promotion_enabled(&self) -> bool {
        self.auto_promotion_enabled.unwrap_or(true)
    }
}

impl CanaryWebhook {
    /// The hook type, with an empty or absent type read as `rollout`.
    pub fn hook_type(&self) -> Option<crate::HookType> {
        crate::HookType::parse(self.type_.as_deref().unwrap_or(""))
    }
}

impl CanaryMetric {
    /// Whether an empty or NaN result passes (`noData: ignore`).
    pub fn ignores_no_data(&self) -> bool {
        self.no_data.as_deref() == Some("ignore")
    }
}

crate::group::served_kind!(
    /// A progressive delivery of one workload: its spec and the operator's record of the release.
    Canary,
    CanarySpec,
    crate::status::CanaryStatus,
    "Canary",
    "canaries"
);
