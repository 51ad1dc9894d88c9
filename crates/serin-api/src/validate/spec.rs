//! The checks of a Canary's spec as a whole: the provider, target, autoscaler and the fields that
//! depend on them, handing the routing and the analysis to their own checks.

use super::analysis::validate_analysis;
use super::report::Report;
use super::routing::{
    KUBERNETES_PROVIDER, PROVIDERS, ROUTING_PROVIDERS, validate_gateway_api_provider,
    validate_kubernetes_provider, validate_service,
};
use crate::{AnalysisSpelling, CanarySpec};

pub(super) fn validate_spec(spec: &CanarySpec, r: &mut Report) {
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
        super::managed_routes::validate_managed_routes(spec, analysis, base, r);
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
        let keda = scaler.kind == "ScaledObject";
        if scaler.name.is_empty() {
            r.add(
                "spec.autoscalerRef.name",
                "missing; write the name of the target's HorizontalPodAutoscaler or KEDA ScaledObject",
            );
        }
        if !keda && scaler.kind != "HorizontalPodAutoscaler" {
            r.add(
                "spec.autoscalerRef.kind",
                format!(
                    "{:?} is not supported; write kind: HorizontalPodAutoscaler, or ScaledObject for KEDA",
                    scaler.kind
                ),
            );
        }
        let api_version = if keda {
            "keda.sh/v1alpha1"
        } else {
            "autoscaling/v2"
        };
        if !scaler.api_version.is_empty() && scaler.api_version != api_version {
            r.add(
                "spec.autoscalerRef.apiVersion",
                format!(
                    "{:?} is not supported; write apiVersion: {api_version}",
                    scaler.api_version
                ),
            );
        }
        r.not_supported(
            "spec.autoscalerRef.primaryScalerQueries",
            !keda && scaler.primary_scaler_queries.is_some(),
            "it replaces queries of a KEDA ScaledObject's triggers; remove it, or use kind: ScaledObject",
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

/// Where the analysis is written: `spec.analysis`, or the deprecated `spec.canaryAnalysis`.
fn analysis_base(spec: &CanarySpec) -> &'static str {
    match spec.analysis_spelling() {
        AnalysisSpelling::CanaryAnalysis => "spec.canaryAnalysis",
        _ => "spec.analysis",
    }
}
