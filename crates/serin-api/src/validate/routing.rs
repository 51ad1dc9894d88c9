//! The routing providers, and the checks of what each router can do: the kubernetes provider
//! (blue/green by selector, or a canary by replica ratio), the Gateway API router, `spec.service`.

use super::report::Report;
use crate::{AnalysisSpelling, CanaryAnalysis, CanarySpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

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

pub use crate::canary::KUBERNETES_PROVIDER;

/// The kubernetes provider has no L7 routing: the apex Service selects pods. Blue/green switches its
/// selector between the sides; a weighted canary (steps, stepWeight) selects both sides and splits
/// traffic by the ratio of their ready pods. Fields that need a mesh are refused here rather than
/// ignored.
pub(super) fn validate_kubernetes_provider(spec: &CanarySpec, r: &mut Report) {
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
pub(super) fn validate_gateway_api_provider(spec: &CanarySpec, r: &mut Report) {
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
}

pub(super) fn validate_service(spec: &CanarySpec, r: &mut Report) {
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
    // The routers write these durations into the route as they are; one the mesh cannot read
    // would fail every write of the route.
    r.interval("spec.service.timeout", svc.timeout.as_deref());
    r.interval(
        "spec.service.backendTimeout",
        svc.backend_timeout.as_deref(),
    );
    if let Some(retries) = &svc.retries {
        r.interval(
            "spec.service.retries.perTryTimeout",
            retries.per_try_timeout.as_deref(),
        );
    }
    if let Some(cors) = &svc.cors_policy {
        r.interval("spec.service.corsPolicy.maxAge", cors.max_age.as_deref());
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
