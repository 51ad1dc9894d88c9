//! Checks a Canary (and MetricTemplate, AlertProvider) and reports every problem with its field path
//! and what to write instead.

use crate::duration::{parse_go_duration, parse_pause_duration};
use crate::limits::{MAX_QUERY_TEMPLATE_BYTES, MAX_WEBHOOK_TIMEOUT, bytes};
use crate::mesh::{HttpMatchRequest, StringMatch};
use crate::{
    AlertProvider, AnalysisSpelling, Canary, CanaryAnalysis, CanaryMetric, CanarySpec, CanaryStep,
    CanaryWebhook, HookType, MetricTemplate, Strategy,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::{BTreeMap, HashSet};

/// One problem in a resource: where it is and how to fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// JSON path of the field, e.g. `spec.analysis.maxWeight`.
    pub path: String,
    /// What is wrong and what to write instead.
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Routing providers Flagger's Canary accepts in `spec.provider`.
pub const PROVIDERS: [&str; 19] = [
    "apisix",
    "appmesh",
    "appmesh:v1beta2",
    "contour",
    "gatewayapi:v1",
    "gatewayapi:v1beta1",
    "gloo",
    "istio",
    "knative",
    "kubernetes",
    "kuma",
    "linkerd",
    "nginx",
    "osm",
    "skipper",
    "smi:v1alpha1",
    "smi:v1alpha2",
    "smi:v1alpha3",
    "traefik",
];

/// The routing providers Serin implements; the operator's `--mesh-provider` is one of them.
pub const ROUTING_PROVIDERS: [&str; 4] = [
    "istio",
    KUBERNETES_PROVIDER,
    "gatewayapi:v1",
    "gatewayapi:v1beta1",
];

/// The provider without a mesh: blue/green by switching the apex Service's selector.
pub const KUBERNETES_PROVIDER: &str = "kubernetes";

/// Metric names evaluated without a template.
pub const BUILTIN_METRICS: [&str; 2] = ["request-success-rate", "request-duration"];

#[derive(Default)]
struct Report {
    errors: Vec<FieldError>,
}

impl Report {
    fn add(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(FieldError {
            path: path.into(),
            message: message.into(),
        });
    }

    fn range(&mut self, path: &str, value: Option<i32>, min: i32, max: i32, example: &str) {
        if let Some(v) = value
            && !(min..=max).contains(&v)
        {
            self.add(
                path,
                format!(
                    "{v} is out of range; write a whole number from {min} to {max}, e.g. {example}"
                ),
            );
        }
    }

    fn not_negative(&mut self, path: &str, value: Option<i32>) {
        if let Some(v) = value
            && v < 0
        {
            self.add(path, format!("{v} is negative; write 0 or more seconds"));
        }
    }

    fn interval(&mut self, path: &str, value: Option<&str>) {
        if let Some(text) = value
            && parse_go_duration(text).is_err()
        {
            self.add(path, interval_hint(text));
        }
    }

    /// A webhook's per-attempt timeout: a duration no longer than [`MAX_WEBHOOK_TIMEOUT`], so that
    /// one Canary's silent hook cannot hold a call for hours.
    fn webhook_timeout(&mut self, path: &str, value: Option<&str>) {
        let Some(text) = value else { return };
        match parse_go_duration(text) {
            Err(_) => self.add(path, interval_hint(text)),
            Ok(timeout) if timeout > MAX_WEBHOOK_TIMEOUT => self.add(
                path,
                format!(
                    "{text:?} is above the maximum of {}; a webhook waits at most that long for one answer: write {} or less",
                    humanize(MAX_WEBHOOK_TIMEOUT),
                    humanize(MAX_WEBHOOK_TIMEOUT)
                ),
            ),
            Ok(_) => {}
        }
    }

    /// A query template no longer than [`MAX_QUERY_TEMPLATE_BYTES`].
    fn query_length(&mut self, path: &str, query: &str) {
        if query.len() > MAX_QUERY_TEMPLATE_BYTES {
            self.add(
                path,
                format!(
                    "the query is {} long, over the limit of {}: shorten it",
                    bytes(query.len()),
                    bytes(MAX_QUERY_TEMPLATE_BYTES)
                ),
            );
        }
    }

    /// A metric's interval goes into PromQL as a range (`[1m]`), where Prometheus takes whole
    /// numbers with h, m, s or ms but no fractions or smaller units.
    fn metric_interval(&mut self, path: &str, value: Option<&str>) {
        if let Some(text) = value
            && (parse_go_duration(text).is_err()
                || !text
                    .bytes()
                    .all(|b| b.is_ascii_digit() || b"hms".contains(&b)))
        {
            self.add(path, interval_hint(text));
        }
    }

    fn url(&mut self, path: &str, value: &str) {
        if !is_absolute_http_url(value) {
            self.add(
                path,
                format!("{value:?} is not an absolute URL; write http:// or https:// followed by a host, e.g. \"http://loadtester.test/\""),
            );
        }
    }

    /// A Prometheus URL: absolute http or https.
    fn prometheus_address(&mut self, path: &str, value: &str) {
        if !is_absolute_http_url(value) {
            self.add(
                path,
                format!("{value:?} is not an absolute URL; write http:// or https:// followed by a host, e.g. \"http://prometheus.istio-system:9090\""),
            );
        }
    }

    /// A field that is part of Flagger's API but that this operator does not act on yet: accepting it
    /// would let a user believe a setting is in force when it is not.
    fn not_supported(&mut self, path: &str, set: bool, instead: &str) {
        if set {
            self.add(
                path,
                format!("is not supported yet, and would be ignored; {instead}"),
            );
        }
    }

    fn string_match(&mut self, path: &str, m: &StringMatch) {
        if m.kinds_set() != 1 {
            self.add(
                path,
                "set exactly one of exact, prefix, suffix or regex, e.g. {exact: \"insider\"}",
            );
        }
    }

    fn string_matches(&mut self, path: &str, map: Option<&BTreeMap<String, StringMatch>>) {
        for (key, m) in map.into_iter().flatten() {
            self.string_match(&format!("{path}.{key}"), m);
        }
    }

    fn http_matches(&mut self, path: &str, matches: Option<&Vec<HttpMatchRequest>>) {
        for (i, m) in matches.into_iter().flatten().enumerate() {
            let p = format!("{path}[{i}]");
            for (field, sm) in [
                ("uri", &m.uri),
                ("scheme", &m.scheme),
                ("method", &m.method),
                ("authority", &m.authority),
            ] {
                if let Some(sm) = sm {
                    self.string_match(&format!("{p}.{field}"), sm);
                }
            }
            self.string_matches(&format!("{p}.headers"), m.headers.as_ref());
            self.string_matches(&format!("{p}.queryParams"), m.query_params.as_ref());
            self.string_matches(&format!("{p}.withoutHeaders"), m.without_headers.as_ref());
        }
    }
}

/// Whether `text` is an absolute `http://` or `https://` URL with a host.
pub fn is_absolute_http_url(text: &str) -> bool {
    let rest = text
        .strip_prefix("http://")
        .or_else(|| text.strip_prefix("https://"));
    match rest {
        Some(rest) => {
            let host = rest.split(['/', '?', '#']).next().unwrap_or("");
            !host.is_empty() && !host.starts_with(':') && !host.contains(char::is_whitespace)
        }
        None => false,
    }
}

/// Checks a Canary and returns every problem found; an empty list means it can be run.
pub fn validate(canary: &Canary) -> Vec<FieldError> {
    let mut report = Report::default();
    validate_spec(&canary.spec, &mut report);
    report.errors
}

/// A whole number of minutes or seconds as a duration is written: `5m`, `90s`.
fn humanize(duration: std::time::Duration) -> String {
    let seconds = duration.as_secs();
    if seconds.is_multiple_of(60) {
        format!("{}m", seconds / 60)
    } else {
        format!("{seconds}s")
    }
}

fn interval_hint(text: &str) -> String {
    format!(
        "cannot parse {text:?}; write a number followed by s, m or h, e.g. \"30s\", \"1m\" or \"1m30s\""
    )
}

fn validate_spec(spec: &CanarySpec, r: &mut Report) {
    match spec.provider.as_deref() {
        None | Some("") => {}
        Some(provider) if ROUTING_PROVIDERS.contains(&provider) => {}
        Some(provider) if PROVIDERS.contains(&provider) => r.add(
            "spec.provider",
            format!("{provider:?} is not supported yet: Serin routes with {}; write one of them or remove provider", ROUTING_PROVIDERS.join(", ")),
        ),
        Some(provider) => r.add(
            "spec.provider",
            format!("unknown provider {provider:?}; write one of {}", ROUTING_PROVIDERS.join(", ")),
        ),
    }
    let gateway_api = spec
        .provider
        .as_deref()
        .is_some_and(|p| p.starts_with("gatewayapi"));
    let router = match spec.provider.as_deref() {
        Some(KUBERNETES_PROVIDER) => "a Kubernetes Service",
        _ if gateway_api => "a Gateway API HTTPRoute",
        _ => "an Istio VirtualService",
    };
    for (field, set, provider) in [
        ("ingressRef", spec.ingress_ref.is_some(), "nginx"),
        ("routeRef", spec.route_ref.is_some(), "APISIX"),
        ("upstreamRef", spec.upstream_ref.is_some(), "Gloo"),
    ] {
        r.not_supported(
            &format!("spec.{field}"),
            set,
            &format!("it belongs to Flagger's {provider} provider; remove it (Serin routes with {router})"),
        );
    }
    if let Some(analysis) = spec.analysis() {
        let base = match spec.analysis_spelling() {
            AnalysisSpelling::CanaryAnalysis => "spec.canaryAnalysis",
            _ => "spec.analysis",
        };
        if !spec.splits_by_replicas() {
            for (field, set) in [
                ("maxSurge", analysis.max_surge.is_some()),
                ("maxUnavailable", analysis.max_unavailable.is_some()),
            ] {
                if set {
                    r.add(
                        format!("{base}.{field}"),
                        format!("only a canary by replica ratio (provider: kubernetes with steps or stepWeight on a Deployment) moves pods within {field}; remove it (a Deployment's own rollingUpdate still applies to its rollouts)"),
                    );
                }
            }
        }
    }
    if let Some(anti) = spec.analysis().and_then(|a| a.anti_affinity.as_ref()) {
        let path = format!("{}.antiAffinity", analysis_base(spec));
        let preferred = &anti.preferred_during_scheduling_ignored_during_execution;
        let required = &anti.required_during_scheduling_ignored_during_execution;
        match (preferred, required) {
            (Some(_), Some(_)) | (None, None) => r.add(
                &path,
                "set exactly one of preferredDuringSchedulingIgnoredDuringExecution: {weight: 1-100} or requiredDuringSchedulingIgnoredDuringExecution: {}",
            ),
            (Some(preferred), None) => r.range(
                &format!("{path}.preferredDuringSchedulingIgnoredDuringExecution.weight"),
                Some(preferred.weight),
                1,
                100,
                "50",
            ),
            (None, Some(_)) => {}
        }
        if spec.target_ref.kind == "DaemonSet" {
            r.add(
                &path,
                "a DaemonSet runs one pod on every node, so its canary cannot avoid the primary's nodes; remove antiAffinity or target a Deployment",
            );
        }
    }
    if spec.provider.as_deref() == Some(KUBERNETES_PROVIDER) {
        validate_kubernetes_provider(spec, r);
    }
    if gateway_api {
        validate_gateway_api_provider(spec, r);
    }
    if let Some(url) = spec.metrics_server.as_deref() {
        r.prometheus_address("spec.metricsServer", url);
    }

    let target = &spec.target_ref;
    if target.name.is_empty() {
        r.add(
            "spec.targetRef.name",
            "missing; write the name of the Deployment to release",
        );
    }
    if target.kind != "Deployment" && target.kind != "DaemonSet" {
        r.add(
            "spec.targetRef.kind",
            format!("{:?} is not supported; write kind: Deployment or DaemonSet (Service targets are not supported yet)", target.kind),
        );
    }
    if target.kind == "DaemonSet" {
        validate_daemon_set_target(spec, r);
    }
    if !target.api_version.is_empty() && target.api_version != "apps/v1" {
        r.add(
            "spec.targetRef.apiVersion",
            format!(
                "{:?} is not the API version of Deployments and DaemonSets; write apiVersion: apps/v1",
                target.api_version
            ),
        );
    }

    if let Some(scaler) = &spec.autoscaler_ref {
        if scaler.name.is_empty() {
            r.add(
                "spec.autoscalerRef.name",
                "missing; write the name of the target's HorizontalPodAutoscaler",
            );
        }
        if scaler.kind != "HorizontalPodAutoscaler" {
            r.add(
                "spec.autoscalerRef.kind",
                format!(
                    "{:?} is not supported; write kind: HorizontalPodAutoscaler",
                    scaler.kind
                ),
            );
        }
        if !scaler.api_version.is_empty() && scaler.api_version != "autoscaling/v2" {
            r.add(
                "spec.autoscalerRef.apiVersion",
                format!(
                    "{:?} is not supported; write apiVersion: autoscaling/v2",
                    scaler.api_version
                ),
            );
        }
        r.not_supported(
            "spec.autoscalerRef.primaryScalerQueries",
            scaler.primary_scaler_queries.is_some(),
            "it is for KEDA ScaledObjects and Serin scales HorizontalPodAutoscalers only; remove it",
        );
        if let Some(bounds) = &scaler.primary_scaler_replicas {
            let p = "spec.autoscalerRef.primaryScalerReplicas";
            r.range(
                &format!("{p}.minReplicas"),
                bounds.min_replicas,
                1,
                i32::MAX,
                "2",
            );
            r.range(
                &format!("{p}.maxReplicas"),
                bounds.max_replicas,
                1,
                i32::MAX,
                "10",
            );
            if let (Some(min), Some(max)) = (bounds.min_replicas, bounds.max_replicas)
                && min > max
            {
                r.add(
                    format!("{p}.minReplicas"),
                    format!("minReplicas {min} is above maxReplicas {max}; make minReplicas at most maxReplicas"),
                );
            }
        }
    }

    r.range(
        "spec.progressDeadlineSeconds",
        spec.progress_deadline_seconds,
        1,
        i32::MAX,
        "600",
    );
    validate_service(spec, r);

    let analysis_path = match spec.analysis_spelling() {
        AnalysisSpelling::Analysis => "spec.analysis",
        AnalysisSpelling::CanaryAnalysis => "spec.canaryAnalysis",
        AnalysisSpelling::Both => {
            r.add(
                "spec.canaryAnalysis",
                "deprecated alias of analysis, and both are set; delete canaryAnalysis and keep analysis",
            );
            "spec.analysis"
        }
    };
    if let Some(analysis) = spec.analysis() {
        // Without a strategy, a canary by replica ratio rolls to the new version like a rolling
        // update (Argo's canary without steps).
        let strategy_optional = spec.skips_analysis() || spec.splits_by_replicas();
        validate_analysis(analysis, analysis_path, strategy_optional, r);
        if analysis.dynamic_stable_scale == Some(true) && spec.autoscaler_ref.is_some() {
            r.add(
                format!("{analysis_path}.dynamicStableScale"),
                "cannot be combined with spec.autoscalerRef yet: the HorizontalPodAutoscaler would fight the primary's scale-down; remove dynamicStableScale or autoscalerRef",
            );
        }
    }
}

/// A DaemonSet runs one pod per node, so nothing that counts replicas applies to it.
fn validate_daemon_set_target(spec: &CanarySpec, r: &mut Report) {
    const ONE_PER_NODE: &str = "a DaemonSet runs one pod per node, so replica counts do not apply to it; remove it or target a Deployment";
    if spec.autoscaler_ref.is_some() {
        r.add("spec.autoscalerRef", ONE_PER_NODE);
    }
    let Some(analysis) = spec.analysis() else {
        return;
    };
    let base = match spec.analysis_spelling() {
        AnalysisSpelling::CanaryAnalysis => "spec.canaryAnalysis",
        _ => "spec.analysis",
    };
    for (field, set) in [
        (
            "dynamicStableScale",
            analysis.dynamic_stable_scale == Some(true),
        ),
        (
            "previewReplicaCount",
            analysis.preview_replica_count.is_some(),
        ),
    ] {
        if set {
            r.add(format!("{base}.{field}"), ONE_PER_NODE);
        }
    }
    for (i, step) in analysis.steps().iter().enumerate() {
        if step.set_canary_scale.is_some() {
            r.add(format!("{base}.steps[{i}].setCanaryScale"), ONE_PER_NODE);
        }
    }
}

/// The kubernetes provider has no L7 routing: the apex Service selects pods. Blue/green switches its
/// selector between the sides; a weighted canary (steps, stepWeight) selects both sides and splits
/// traffic by the ratio of their ready pods. Fields that need a mesh are refused here rather than
/// ignored.
fn validate_kubernetes_provider(spec: &CanarySpec, r: &mut Report) {
    const NO_WEIGHTS: &str = "the kubernetes provider splits traffic by pods only for a canary with steps or stepWeight on a Deployment; blue/green (iterations) switches the apex Service all at once, so remove it, or use provider: istio for weighted blue/green";
    const NO_MESH: &str = "it configures the Istio VirtualService, which the kubernetes provider does not create; remove it or use provider: istio";
    let svc = &spec.service;
    let mesh_fields = [
        (
            "gateways",
            svc.gateways.as_ref().is_some_and(|g| !g.is_empty()),
        ),
        ("hosts", svc.hosts.as_ref().is_some_and(|h| !h.is_empty())),
        ("delegation", svc.delegation == Some(true)),
        ("trafficPolicy", svc.traffic_policy.is_some()),
        ("match", svc.r#match.as_ref().is_some_and(|m| !m.is_empty())),
        ("rewrite", svc.rewrite.is_some()),
        ("retries", svc.retries.is_some()),
        ("headers", svc.headers.is_some()),
        ("corsPolicy", svc.cors_policy.is_some()),
        ("timeout", svc.timeout.is_some()),
    ];
    for (field, set) in mesh_fields {
        if set {
            r.add(format!("spec.service.{field}"), NO_MESH);
        }
    }
    let Some(analysis) = spec.analysis() else {
        return;
    };
    let base = match spec.analysis_spelling() {
        AnalysisSpelling::CanaryAnalysis => "spec.canaryAnalysis",
        _ => "spec.analysis",
    };
    if spec.splits_by_replicas() {
        validate_replica_ratio(spec, analysis, base, r);
    } else {
        let weighted = [
            ("stepWeight", analysis.step_weight.unwrap_or(0) > 0),
            ("stepWeights", analysis.step_weights.is_some()),
            ("maxWeight", analysis.max_weight.is_some()),
            ("steps", analysis.steps.is_some()),
            (
                "stepWeightPromotion",
                analysis.step_weight_promotion.is_some(),
            ),
            (
                "dynamicStableScale",
                analysis.dynamic_stable_scale.is_some(),
            ),
        ];
        for (field, set) in weighted {
            if set {
                r.add(format!("{base}.{field}"), NO_WEIGHTS);
            }
        }
        if analysis.iterations.unwrap_or(0) < 1 && !spec.skips_analysis() {
            r.add(
                format!("{base}.iterations"),
                "the kubernetes provider runs a DaemonSet by blue/green, which counts iterations; set iterations, e.g. iterations: 10",
            );
        }
    }
    if analysis.r#match.as_ref().is_some_and(|m| !m.is_empty()) {
        r.add(
            format!("{base}.match"),
            "A/B testing routes requests by header or cookie, which needs a mesh; the kubernetes provider cannot, so remove match (blue/green with iterations) or use provider: istio",
        );
    }
    if analysis.session_affinity.is_some() {
        r.add(
            format!("{base}.sessionAffinity"),
            "pinning users by cookie needs a mesh; the kubernetes provider cannot route by cookie, so remove sessionAffinity or use provider: istio",
        );
    }
    if analysis.mirror() {
        r.add(
            format!("{base}.mirror"),
            "mirroring needs a mesh; the kubernetes provider cannot copy requests, so remove mirror or use provider: istio",
        );
    }
}

/// The replica-ratio canary: Argo Rollouts' canary without traffic routing. Fields whose meaning
/// needs a router that weighs traffic apart from pods are refused, with Argo's reasons.
fn validate_replica_ratio(
    spec: &CanarySpec,
    analysis: &CanaryAnalysis,
    base: &str,
    r: &mut Report,
) {
    const PODS_ARE_TRAFFIC: &str = "in a canary by replica ratio (provider: kubernetes) every canary pod takes its share of traffic, so the canary cannot be scaled apart from its weight; remove it (Argo Rollouts also ignores it without traffic routing), or use provider: istio";
    let fields = [
        (
            "dynamicStableScale",
            analysis.dynamic_stable_scale.is_some(),
        ),
        (
            "abortScaleDownDelaySeconds",
            analysis.abort_scale_down_delay_seconds.is_some(),
        ),
        (
            "scaleDownDelaySeconds",
            analysis.scale_down_delay_seconds.is_some(),
        ),
        (
            "stepWeightPromotion",
            analysis.step_weight_promotion.is_some(),
        ),
    ];
    for (field, set) in fields {
        if set {
            r.add(format!("{base}.{field}"), PODS_ARE_TRAFFIC);
        }
    }
    for (i, step) in analysis.steps().iter().enumerate() {
        if step.set_canary_scale.is_some() {
            r.add(
                format!("{base}.steps[{i}].setCanaryScale"),
                PODS_ARE_TRAFFIC,
            );
        }
    }
    if spec.autoscaler_ref.is_some() {
        r.add(
            "spec.autoscalerRef",
            "a canary by replica ratio sets both sides' replica counts at every step, which an autoscaler would fight; remove autoscalerRef or use provider: istio",
        );
    }
    let surge = analysis.max_surge.as_ref();
    let unavailable = analysis.max_unavailable.as_ref();
    for (field, value) in [("maxSurge", surge), ("maxUnavailable", unavailable)] {
        if let Some(value) = value
            && int_or_percent(value).is_none()
        {
            r.add(
                format!("{base}.{field}"),
                "write a number of pods (e.g. 2) or a percentage of the replicas (e.g. \"25%\"), not negative",
            );
        }
    }
    if surge.and_then(int_or_percent) == Some(0) && unavailable.and_then(int_or_percent) == Some(0)
    {
        r.add(
            format!("{base}.maxUnavailable"),
            "maxSurge and maxUnavailable are both 0, so no pod could ever move; allow one of them, e.g. maxUnavailable: 1",
        );
    }
}

/// Where the analysis is written: `spec.analysis`, or the deprecated `spec.canaryAnalysis`.
fn analysis_base(spec: &CanarySpec) -> &'static str {
    match spec.analysis_spelling() {
        AnalysisSpelling::CanaryAnalysis => "spec.canaryAnalysis",
        _ => "spec.analysis",
    }
}

/// The number in a `maxSurge`-style value (`3` or `"25%"`), if it is a non-negative whole number.
fn int_or_percent(value: &IntOrString) -> Option<i64> {
    match value {
        IntOrString::Int(n) => (*n >= 0).then_some(i64::from(*n)),
        IntOrString::String(text) => text
            .strip_suffix('%')
            .and_then(|n| n.parse::<i64>().ok())
            .filter(|n| *n >= 0),
    }
}

/// The Gateway API router needs parents, and has no place for the VirtualService's own fields.
fn validate_gateway_api_provider(spec: &CanarySpec, r: &mut Report) {
    let svc = &spec.service;
    if svc.gateway_refs.as_ref().is_none_or(Vec::is_empty) {
        r.add(
            "spec.service.gatewayRefs",
            "missing: the Gateway API router attaches the HTTPRoute to Gateways; list them, e.g. [{name: public-gateway, namespace: istio-system}]",
        );
    }
    for (i, parent) in svc.gateway_refs.iter().flatten().enumerate() {
        if parent.name.is_empty() {
            r.add(
                format!("spec.service.gatewayRefs[{i}].name"),
                "missing; write the name of a Gateway",
            );
        }
    }
    let istio_only = [
        (
            "gateways",
            svc.gateways.as_ref().is_some_and(|g| !g.is_empty()),
        ),
        ("delegation", svc.delegation == Some(true)),
        ("trafficPolicy", svc.traffic_policy.is_some()),
        ("retries", svc.retries.is_some()),
        ("corsPolicy", svc.cors_policy.is_some()),
    ];
    for (field, set) in istio_only {
        if set {
            r.add(
                format!("spec.service.{field}"),
                "it configures the Istio VirtualService, which the Gateway API router does not write; remove it (Gateways are listed in service.gatewayRefs) or use provider: istio",
            );
        }
    }
    if let Some(analysis) = spec.analysis()
        && analysis.session_affinity.is_some()
    {
        let base = match spec.analysis_spelling() {
            AnalysisSpelling::CanaryAnalysis => "spec.canaryAnalysis",
            _ => "spec.analysis",
        };
        r.add(
            format!("{base}.sessionAffinity"),
            "is not supported yet with the Gateway API router (its cookie rules are not proven end to end); remove sessionAffinity or use provider: istio",
        );
    }
}

fn validate_service(spec: &CanarySpec, r: &mut Report) {
    let svc = &spec.service;
    r.range("spec.service.port", Some(svc.port), 1, 65535, "9898");
    match &svc.target_port {
        Some(IntOrString::Int(port)) => {
            r.range("spec.service.targetPort", Some(*port), 1, 65535, "9898")
        }
        Some(IntOrString::String(name)) if name.is_empty() => r.add(
            "spec.service.targetPort",
            "empty; write a container port number or name, e.g. http",
        ),
        _ => {}
    }
    if let Some(td) = svc.traffic_distribution.as_deref()
        && !["PreferClose", "PreferSameZone", "PreferSameNode"].contains(&td)
    {
        r.add(
            "spec.service.trafficDistribution",
            format!("unknown value {td:?}; write PreferClose, PreferSameZone or PreferSameNode"),
        );
    }
    let gateway_api = spec
        .provider
        .as_deref()
        .is_some_and(|p| p.starts_with("gatewayapi"));
    let unsupported = [
        (
            "gatewayRefs",
            svc.gateway_refs.is_some() && !gateway_api,
            "it belongs to the Gateway API router; set provider: gatewayapi:v1, or remove gatewayRefs and list Istio gateways in spec.service.gateways",
        ),
        (
            "backendTimeout",
            svc.backend_timeout.is_some() && !gateway_api,
            "it belongs to the Gateway API router; set provider: gatewayapi:v1, or remove it and use spec.service.timeout",
        ),
        (
            "mirror",
            svc.mirror.is_some() && !gateway_api,
            "it holds Gateway API mirror filters; set provider: gatewayapi:v1, or remove it (spec.analysis.mirror mirrors to the canary)",
        ),
        (
            "meshName",
            svc.mesh_name.is_some(),
            "it belongs to Flagger's App Mesh provider; remove it",
        ),
        (
            "backends",
            svc.backends.is_some(),
            "it belongs to Flagger's App Mesh provider; remove it",
        ),
    ];
    for (field, set, instead) in unsupported {
        r.not_supported(&format!("spec.service.{field}"), set, instead);
    }
    if svc.delegation.unwrap_or(false) && !gateway_api {
        if svc.hosts.as_ref().is_some_and(|h| !h.is_empty()) {
            r.add(
                "spec.service.hosts",
                "a delegate VirtualService has no hosts; remove hosts or set delegation: false",
            );
        }
        if svc.gateways.as_ref().is_some_and(|g| !g.is_empty()) {
            r.add(
                "spec.service.gateways",
                "a delegate VirtualService has no gateways; remove gateways or set delegation: false",
            );
        }
    }
    for (i, host) in svc.hosts.iter().flatten().enumerate() {
        if host.trim().is_empty() {
            r.add(
                format!("spec.service.hosts[{i}]"),
                "empty host; write a host name such as app.example.com, or remove the entry",
            );
        }
    }
    r.http_matches("spec.service.match", svc.r#match.as_ref());
    if let Some(retries) = &svc.retries {
        r.range(
            "spec.service.retries.attempts",
            Some(retries.attempts),
            0,
            i32::MAX,
            "3",
        );
    }
}

fn validate_analysis(a: &CanaryAnalysis, base: &str, strategy_optional: bool, r: &mut Report) {
    let p = |field: &str| format!("{base}.{field}");
    r.interval(&p("interval"), a.interval.as_deref());
    r.range(&p("threshold"), a.threshold, 1, i32::MAX, "5");
    r.range(&p("iterations"), a.iterations, 0, i32::MAX, "10");
    r.range(&p("maxWeight"), a.max_weight, 1, 100, "50");
    r.range(&p("stepWeight"), a.step_weight, 0, 100, "10");
    r.range(
        &p("stepWeightPromotion"),
        a.step_weight_promotion,
        0,
        100,
        "50",
    );
    r.range(&p("mirrorWeight"), a.mirror_weight, 0, 100, "50");
    r.range(
        &p("primaryReadyThreshold"),
        a.primary_ready_threshold,
        0,
        100,
        "100",
    );
    r.range(
        &p("canaryReadyThreshold"),
        a.canary_ready_threshold,
        0,
        100,
        "100",
    );
    r.not_negative(
        &p("abortScaleDownDelaySeconds"),
        a.abort_scale_down_delay_seconds,
    );
    r.not_negative(&p("scaleDownDelaySeconds"), a.scale_down_delay_seconds);
    r.range(
        &p("autoPromotionSeconds"),
        a.auto_promotion_seconds,
        1,
        i32::MAX,
        "30",
    );
    r.range(
        &p("previewReplicaCount"),
        a.preview_replica_count,
        1,
        i32::MAX,
        "1",
    );

    if let Some(weights) = &a.step_weights {
        // `previous` is the last in-range weight, so one bad entry is reported once and does not make
        // the entries after it look out of order.
        let mut previous = 0;
        for (i, w) in weights.iter().enumerate() {
            let path = format!("{base}.stepWeights[{i}]");
            if !(1..=100).contains(w) {
                r.add(
                    path,
                    format!("{w} is out of range; write a weight from 1 to 100"),
                );
            } else if *w <= previous {
                r.add(
                    path,
                    format!("{w} does not ascend after {previous}; list weights in increasing order, e.g. [1, 5, 10, 50]"),
                );
            } else {
                previous = *w;
            }
        }
        if weights.is_empty() {
            r.add(
                p("stepWeights"),
                "empty list; write weights such as [5, 10, 25, 50] or remove stepWeights",
            );
        }
    }
    if a.steps.as_ref().is_some_and(Vec::is_empty) {
        r.add(
            p("steps"),
            "empty list; write steps such as [{setWeight: 20}, {pause: {duration: 1m}}] or remove steps",
        );
    }

    validate_strategy_choice(a, base, strategy_optional, r);
    r.http_matches(&p("match"), a.r#match.as_ref());
    validate_steps(a.steps(), base, r);
    validate_metrics(a.metrics(), base, r);
    validate_webhooks(a.webhooks(), base, r);
    validate_promotion_analyses(a, base, r);

    for (i, alert) in a.alerts.iter().flatten().enumerate() {
        let ap = format!("{base}.alerts[{i}]");
        if alert.name.is_empty() {
            r.add(
                format!("{ap}.name"),
                "missing; name the alert, e.g. on-call",
            );
        }
        if let Some(sev) = alert.severity.as_deref()
            && !["", "info", "warn", "error"].contains(&sev)
        {
            r.add(
                format!("{ap}.severity"),
                format!("unknown severity {sev:?}; write info, warn or error"),
            );
        }
        if alert.provider_ref.name.is_empty() {
            r.add(
                format!("{ap}.providerRef.name"),
                "missing; write the name of an AlertProvider",
            );
        }
    }

    if a.session_affinity.is_some() {
        let weighted = matches!(a.strategy(), Strategy::Canary | Strategy::Steps);
        if !weighted {
            r.add(
                format!("{base}.sessionAffinity"),
                format!("pins users to the canary while weights move, so it works with stepWeight, stepWeights or steps, not with {}; remove sessionAffinity", a.strategy().as_str()),
            );
        } else if a.mirror() && a.strategy() == Strategy::Canary {
            // Mirroring with steps is refused as such; this is for the mirroring that works.
            r.add(
                format!("{base}.sessionAffinity"),
                "cannot be combined with mirror: a mirrored request gets no cookie; remove mirror or sessionAffinity",
            );
        }
    }
    if let Some(sa) = &a.session_affinity {
        let sp = format!("{base}.sessionAffinity");
        if sa.cookie_name.is_empty() {
            r.add(
                format!("{sp}.cookieName"),
                "missing; write a cookie name, e.g. canary-affinity",
            );
        }
        if sa.primary_cookie_name.as_deref() == Some(sa.cookie_name.as_str()) {
            r.add(
                format!("{sp}.primaryCookieName"),
                format!("same as cookieName {:?}; write a different name, e.g. primary-affinity, so the primary and canary cookies can be told apart", sa.cookie_name),
            );
        }
        if let Some(ss) = sa.same_site.as_deref()
            && !["Strict", "Lax", "None"].contains(&ss)
        {
            r.add(
                format!("{sp}.sameSite"),
                format!("unknown value {ss:?}; write Strict, Lax or None"),
            );
        }
        r.not_negative(&format!("{sp}.maxAge"), sa.max_age);
    }
}

fn validate_strategy_choice(
    a: &CanaryAnalysis,
    base: &str,
    strategy_optional: bool,
    r: &mut Report,
) {
    let chosen: Vec<&str> = [
        ("stepWeight", a.step_weight.unwrap_or(0) > 0),
        ("stepWeights", a.step_weights.is_some()),
        ("iterations", a.iterations.unwrap_or(0) > 0),
        ("steps", a.steps.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect();
    // A negative stepWeight or iterations is already reported as out of range; saying "no strategy"
    // as well would blame the same field twice.
    let negative_choice =
        a.step_weight.is_some_and(|w| w < 0) || a.iterations.is_some_and(|i| i < 0);
    if chosen.len() > 1 {
        for extra in &chosen[1..] {
            r.add(
                format!("{base}.{extra}"),
                format!("{extra} cannot be combined with {}; a canary uses one of stepWeight (with maxWeight), stepWeights, iterations or steps, so remove one", chosen[0]),
            );
        }
    } else if chosen.is_empty() && !strategy_optional && !negative_choice {
        r.add(
            base.to_string(),
            "no strategy; set one of stepWeight (with maxWeight), stepWeights, iterations or steps, e.g. stepWeight: 10",
        );
    }
    if a.steps.is_some() && a.max_weight.is_some() {
        r.add(
            format!("{base}.maxWeight"),
            "steps set the weights themselves; remove maxWeight or use stepWeight instead of steps",
        );
    }

    let strategy = a.strategy();
    let mirror_ok = matches!(strategy, Strategy::Canary | Strategy::BlueGreen) && a.steps.is_none();
    if a.mirror() && !mirror_ok {
        r.add(
            format!("{base}.mirror"),
            format!("mirroring works with stepWeight/stepWeights canaries and blue/green, not with {}; remove mirror", strategy.as_str()),
        );
    }
    if a.mirror_weight.is_some() && !a.mirror() {
        r.add(
            format!("{base}.mirrorWeight"),
            "has no effect without mirror: true; set mirror: true or remove mirrorWeight",
        );
    }
    if a.step_weight_promotion.is_some() && !matches!(strategy, Strategy::Canary | Strategy::Steps)
    {
        r.add(
            format!("{base}.stepWeightPromotion"),
            "only weight-based canaries (stepWeight, stepWeights, steps) promote stepwise; remove stepWeightPromotion",
        );
    }
    let blue_green_only = [
        ("autoPromotionEnabled", a.auto_promotion_enabled.is_some()),
        ("autoPromotionSeconds", a.auto_promotion_seconds.is_some()),
        ("previewReplicaCount", a.preview_replica_count.is_some()),
    ];
    if strategy != Strategy::BlueGreen {
        for (field, set) in blue_green_only {
            if set {
                r.add(
                    format!("{base}.{field}"),
                    format!("only blue/green (iterations without match) uses {field}; remove it or switch to blue/green"),
                );
            }
        }
    }
    if a.dynamic_stable_scale.unwrap_or(false)
        && !matches!(strategy, Strategy::Canary | Strategy::Steps)
    {
        r.add(
            format!("{base}.dynamicStableScale"),
            "only weight-based canaries (stepWeight, stepWeights, steps) can scale the primary with its weight; remove dynamicStableScale",
        );
    }
}

fn validate_steps(steps: &[CanaryStep], base: &str, r: &mut Report) {
    for (i, step) in steps.iter().enumerate() {
        let sp = format!("{base}.steps[{i}]");
        let kinds = [
            step.set_weight.is_some(),
            step.pause.is_some(),
            step.set_canary_scale.is_some(),
        ]
        .iter()
        .filter(|k| **k)
        .count();
        if kinds != 1 {
            r.add(
                sp.clone(),
                "a step has exactly one of setWeight, pause or setCanaryScale; split it into separate steps, e.g. [{setWeight: 20}, {pause: {duration: 1m}}]",
            );
        }
        r.range(&format!("{sp}.setWeight"), step.set_weight, 0, 100, "20");
        if let Some(duration) = step.pause.as_ref().and_then(|p| p.duration.as_ref())
            && let Err(e) = parse_pause_duration(duration)
        {
            r.add(format!("{sp}.pause.duration"), e.to_string());
        }
        if let Some(scale) = &step.set_canary_scale {
            let set = [
                scale.replicas.is_some(),
                scale.weight.is_some(),
                scale.match_traffic_weight == Some(true),
            ]
            .iter()
            .filter(|k| **k)
            .count();
            if set != 1 {
                r.add(
                    format!("{sp}.setCanaryScale"),
                    "set exactly one of replicas, weight or matchTrafficWeight: true, e.g. {replicas: 2}",
                );
            }
            r.range(
                &format!("{sp}.setCanaryScale.replicas"),
                scale.replicas,
                0,
                i32::MAX,
                "2",
            );
            r.range(
                &format!("{sp}.setCanaryScale.weight"),
                scale.weight,
                0,
                100,
                "25",
            );
        }
    }
}

fn validate_metrics(metrics: &[CanaryMetric], base: &str, r: &mut Report) {
    let mut names = HashSet::new();
    for (i, m) in metrics.iter().enumerate() {
        let mp = format!("{base}.metrics[{i}]");
        if m.name.is_empty() {
            r.add(
                format!("{mp}.name"),
                "missing; name the metric, e.g. request-success-rate",
            );
        } else if !names.insert(m.name.as_str()) {
            r.add(
                format!("{mp}.name"),
                format!(
                    "duplicate metric name {:?}; give each metric its own name",
                    m.name
                ),
            );
        }
        r.metric_interval(&format!("{mp}.interval"), m.interval.as_deref());
        match (&m.template_ref, &m.query) {
            (Some(_), Some(_)) => r.add(
                format!("{mp}.query"),
                "both query and templateRef are set; keep templateRef and move the query into the MetricTemplate",
            ),
            (Some(t), None) if t.name.is_empty() => r.add(
                format!("{mp}.templateRef.name"),
                "missing; write the name of a MetricTemplate",
            ),
            (None, Some(q)) if q.trim().is_empty() => r.add(
                format!("{mp}.query"),
                "empty query; write a PromQL query or use templateRef",
            ),
            (None, Some(q)) => r.query_length(&format!("{mp}.query"), q),
            (None, None) if !m.name.is_empty() && !BUILTIN_METRICS.contains(&m.name.as_str()) => {
                r.add(
                    format!("{mp}.name"),
                    format!("{:?} is not a builtin metric; use request-success-rate or request-duration, or set templateRef to a MetricTemplate", m.name),
                )
            }
            _ => {}
        }
        match &m.threshold_range {
            Some(range) => {
                if let (Some(min), Some(max)) = (range.min, range.max)
                    && min > max
                {
                    r.add(
                        format!("{mp}.thresholdRange"),
                        format!("min {min} is above max {max}; make min at most max"),
                    );
                }
                if range.min.is_none() && range.max.is_none() {
                    r.add(
                        format!("{mp}.thresholdRange"),
                        "empty range accepts nothing; set min, max or both, e.g. {min: 99}",
                    );
                }
            }
            None if m.threshold.is_none() => r.add(
                format!("{mp}.thresholdRange"),
                "missing, so the check cannot pass or fail meaningfully; set the accepted range, e.g. {min: 99} or {max: 500}",
            ),
            None => {}
        }
        if let Some(nd) = m.no_data.as_deref()
            && !["fail", "ignore"].contains(&nd)
        {
            r.add(
                format!("{mp}.noData"),
                format!("unknown value {nd:?}; write fail (the default) or ignore"),
            );
        }
    }
}

fn validate_webhooks(webhooks: &[CanaryWebhook], base: &str, r: &mut Report) {
    let mut names = HashSet::new();
    for (i, hook) in webhooks.iter().enumerate() {
        let hp = format!("{base}.webhooks[{i}]");
        if hook.name.is_empty() {
            r.add(
                format!("{hp}.name"),
                "missing; name the webhook, e.g. load-test",
            );
        } else if !names.insert(hook.name.as_str()) {
            r.add(
                format!("{hp}.name"),
                format!(
                    "duplicate webhook name {:?}; give each webhook its own name",
                    hook.name
                ),
            );
        }
        if hook.hook_type().is_none() {
            let known: Vec<&str> = HookType::ALL.iter().map(|t| t.as_str()).collect();
            r.add(
                format!("{hp}.type"),
                format!(
                    "unknown type {:?}; write one of {}",
                    hook.type_.as_deref().unwrap_or(""),
                    known.join(", ")
                ),
            );
        }
        r.url(&format!("{hp}.url"), &hook.url);
        r.webhook_timeout(&format!("{hp}.timeout"), hook.timeout.as_deref());
        r.range(&format!("{hp}.retries"), hook.retries, 0, 100, "2");
    }
}

/// Blue/green's pre- and post-promotion analyses: checks written like the analysis's (rollout
/// webhooks only), with names unique across all three blocks, since a check is found by its name.
fn validate_promotion_analyses(a: &CanaryAnalysis, base: &str, r: &mut Report) {
    let mut metric_names: HashSet<&str> = a.metrics().iter().map(|m| m.name.as_str()).collect();
    let mut hook_names: HashSet<&str> = a.webhooks().iter().map(|h| h.name.as_str()).collect();
    for (field, stage) in [
        ("prePromotionAnalysis", &a.pre_promotion_analysis),
        ("postPromotionAnalysis", &a.post_promotion_analysis),
    ] {
        let Some(stage) = stage else { continue };
        let path = format!("{base}.{field}");
        if a.strategy() != Strategy::BlueGreen {
            r.add(
                &path,
                format!("only blue/green (iterations without match) switches traffic at once, which {field} surrounds; remove it or switch to blue/green"),
            );
        }
        r.range(
            &format!("{path}.iterations"),
            stage.iterations,
            1,
            1000,
            "1",
        );
        if stage.metrics().is_empty() && stage.webhooks().is_empty() {
            r.add(
                &path,
                "no checks; list metrics or webhooks, e.g. metrics: [{name: request-success-rate, thresholdRange: {min: 99}, interval: 1m}]",
            );
        }
        validate_metrics(stage.metrics(), &path, r);
        validate_webhooks(stage.webhooks(), &path, r);
        for (i, metric) in stage.metrics().iter().enumerate() {
            if !metric.name.is_empty() && !metric_names.insert(metric.name.as_str()) {
                r.add(
                    format!("{path}.metrics[{i}].name"),
                    format!(
                        "{:?} is already a metric of the analysis; give each check its own name",
                        metric.name
                    ),
                );
            }
        }
        for (i, hook) in stage.webhooks().iter().enumerate() {
            if !hook.name.is_empty() && !hook_names.insert(hook.name.as_str()) {
                r.add(
                    format!("{path}.webhooks[{i}].name"),
                    format!(
                        "{:?} is already a webhook of the analysis; give each check its own name",
                        hook.name
                    ),
                );
            }
            if hook.hook_type().is_some_and(|t| t != HookType::Rollout) {
                r.add(
                    format!("{path}.webhooks[{i}].type"),
                    format!("{field} runs checks only; remove type (or write rollout), and put other hooks in analysis.webhooks"),
                );
            }
        }
    }
}

/// Checks a MetricTemplate and returns every problem found.
pub fn validate_metric_template(template: &MetricTemplate) -> Vec<FieldError> {
    let mut r = Report::default();
    let provider = &template.spec.provider;
    if provider.type_ != "prometheus" {
        let known =
            crate::metric_template::METRIC_PROVIDER_TYPES.contains(&provider.type_.as_str());
        r.add(
            "spec.provider.type",
            format!(
                "{} provider {:?}; write prometheus (the only metrics provider Serin queries yet)",
                if known {
                    "not supported yet:"
                } else {
                    "unknown"
                },
                provider.type_,
            ),
        );
    }
    match provider.address.as_deref() {
        Some(address) => r.prometheus_address("spec.provider.address", address),
        None if provider.type_ == "prometheus" => r.add(
            "spec.provider.address",
            "missing; write the Prometheus URL, e.g. http://prometheus.istio-system:9090",
        ),
        None => {}
    }
    if template.spec.query.trim().is_empty() {
        r.add("spec.query", "empty; write the query, e.g. sum(rate(...{namespace=\"{{ namespace }}\"}[{{ interval }}]))");
    }
    r.query_length("spec.query", &template.spec.query);
    r.errors
}

/// Checks an AlertProvider and returns every problem found.
pub fn validate_alert_provider(provider: &AlertProvider) -> Vec<FieldError> {
    let mut r = Report::default();
    let spec = &provider.spec;
    let types = crate::alert_provider::ALERT_PROVIDER_TYPES;
    if !types.contains(&spec.type_.as_str()) {
        r.add(
            "spec.type",
            format!(
                "unknown type {:?}; write one of {}",
                spec.type_,
                types.join(", ")
            ),
        );
    }
    match (&spec.address, &spec.secret_ref) {
        (Some(address), _) => r.url("spec.address", address),
        (None, None) => r.add(
            "spec.address",
            "missing; write the webhook URL, or set secretRef to a Secret with an address key",
        ),
        (None, Some(_)) => {}
    }
    if let Some(proxy) = spec.proxy.as_deref() {
        r.url("spec.proxy", proxy);
    }
    r.errors
}
