//! Observing a Canary: everything decide needs, read from the watch caches without a request.

use super::{Error, Shared, Tick};
use crate::cache::Caches;
use crate::configs;
use kube::ResourceExt;
use serde_json::json;
use serin_api::Canary;
use serin_core::plan::Observation;
use serin_router::Names;
use serin_router::istio::get_routes;
use serin_router::services::selector_label;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Reads a Canary's world from the watch caches (its target and primary, the routes, the tracked
/// configs, the autoscaler) and what blocks its release: the observation decide needs, and the
/// tick that acts on the plan.
pub(super) fn observe<'a>(
    canary: &Arc<Canary>,
    shared: &'a Shared,
) -> Result<(Tick<'a>, Observation), Error> {
    let ctx = &shared.ctx;
    let caches = &shared.caches;
    let namespace = canary.namespace().unwrap_or_else(|| "default".into());
    // A Canary without spec.provider routes with the operator's --mesh-provider: filling it in
    // here lets validation and the router see the provider in force.
    let mut effective = (**canary).clone();
    if effective.spec.provider.as_deref().is_none_or(str::is_empty) {
        effective.spec.provider = Some(ctx.mesh_provider.clone());
    }
    let mut canary_json = serde_json::to_value(&effective)?;
    canary_json["apiVersion"] = json!("serin.dev/v1beta1");
    let target_name = canary.spec.target_ref.name.clone();
    let kind = canary.spec.target_ref.kind.as_str();
    let target = caches.workload(&namespace, kind, &target_name);
    let primary = caches.workload(&namespace, kind, &format!("{target_name}-primary"));
    let names = Names::of(&canary_json);
    let configs = match (&target, ctx.config_tracking) {
        (Some(target), true) => configs::observe(caches, &namespace, target),
        _ => Ok(BTreeMap::new()),
    };
    // What act builds the primary from: the target as it is (a DaemonSet keeps its kind and
    // updateStrategy), where the decision core reads it as a Deployment.
    let target_json = match kind {
        "DaemonSet" => caches
            .daemon_set(&namespace, &target_name)
            .map(|ds| serde_json::to_value(&ds))
            .transpose()?,
        _ => target.as_ref().map(serde_json::to_value).transpose()?,
    };
    let labels: Vec<&str> = ctx.selector_labels.iter().map(String::as_str).collect();
    let label = target_json.as_ref().map(|t| selector_label(t, &labels));
    // What Serin adds to the target's pod template is not part of its revision.
    let target = match (target, &label) {
        (Some(target), Some(Ok((key, value)))) => Some(crate::workloads::as_released(
            target,
            key,
            &format!("{value}-primary"),
        )),
        (target, _) => target,
    };
    let mut route_problem = None;
    let mut route_pending = None;
    let routes = if serin_router::gateway_api::routes_by_http_route(&canary_json) {
        match caches.routing_object("HTTPRoute", &namespace, &names.apex) {
            Some(route) => {
                use serin_router::gateway_api::Acceptance;
                match serin_router::gateway_api::acceptance(&route) {
                    Acceptance::Accepted => {}
                    Acceptance::Refused(message) => route_problem = Some(message),
                    Acceptance::Pending { written, message } => {
                        let written = written.and_then(|time| time.parse().ok());
                        route_pending = Some(serin_core::RoutesPending { written, message });
                    }
                }
                serin_router::gateway_api::get_routes(&canary_json, &route).ok()
            }
            None => None,
        }
    } else if serin_router::kubernetes::routes_by_service(&canary_json) {
        match (
            caches.routing_object("Service", &namespace, &names.apex),
            &label,
        ) {
            (Some(apex), Some(Ok((key, value)))) => {
                serin_router::kubernetes::get_routes(&apex, key, value)
            }
            _ => None,
        }
    } else {
        match caches.routing_object("VirtualService", &namespace, &names.apex) {
            Some(vs) => get_routes(&canary_json, &vs).ok(),
            None => None,
        }
    };
    let mut blocked = match &label {
        Some(Err(error)) => Some(error.to_string()),
        _ => route_problem
            .or_else(|| template_problem(canary, caches, &namespace))
            .or_else(|| alert_provider_problem(canary, caches, &namespace)),
    };
    let mut autoscaler_min_replicas = None;
    if let Some(reference) = &canary.spec.autoscaler_ref {
        if reference.kind != "HorizontalPodAutoscaler" {
            blocked.get_or_insert(format!(
                "spec.autoscalerRef.kind {:?} is not supported; use HorizontalPodAutoscaler",
                reference.kind
            ));
        } else {
            match caches.autoscaler(&namespace, &reference.name) {
                Some(hpa) => {
                    autoscaler_min_replicas = hpa.spec.as_ref().and_then(|s| s.min_replicas);
                }
                None => {
                    blocked.get_or_insert(format!(
                        "HorizontalPodAutoscaler {}.{namespace} in spec.autoscalerRef not found; create it or remove autoscalerRef",
                        reference.name
                    ));
                }
            }
        }
    }
    let tick = Tick {
        ctx,
        caches,
        applied: &shared.applied,
        canary_key: Shared::canary_key(canary),
        canary: canary_json,
        namespace: namespace.clone(),
        target: target_json,
        label: label.and_then(Result::ok),
        by_ratio: effective.spec.splits_by_replicas(),
        tracked: configs
            .as_ref()
            .map(configs::tracked_names)
            .unwrap_or_default(),
    };
    let observation = Observation {
        canary: effective,
        target,
        primary,
        configs,
        routes,
        autoscaler_min_replicas,
        blocked,
        routes_pending: route_pending,
        verdicts: Vec::new(),
    };
    Ok((tick, observation))
}

/// Why the MetricTemplates the analysis references cannot be queried (missing, or invalid), if
/// so: the release waits for the template to be fixed instead of failing checks and rolling back.
fn template_problem(canary: &Canary, caches: &Caches, namespace: &str) -> Option<String> {
    let analysis = canary.spec.analysis()?;
    for (i, metric) in analysis.metrics().iter().enumerate() {
        let Some(reference) = &metric.template_ref else {
            continue;
        };
        let template_namespace = reference.namespace_or(namespace);
        let id = format!("{}.{template_namespace}", reference.name);
        let Some(template) = caches.metric_template(template_namespace, &reference.name) else {
            return Some(format!(
                "MetricTemplate {id} in spec.analysis.metrics[{i}].templateRef not found; create it or fix templateRef"
            ));
        };
        let errors = serin_api::validate::validate_metric_template(&template);
        if !errors.is_empty() {
            let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
            return Some(format!(
                "MetricTemplate {id} (spec.analysis.metrics[{i}].templateRef) is invalid: {}",
                list.join("; ")
            ));
        }
    }
    None
}

/// Why an AlertProvider the analysis's alerts reference cannot be used (missing, invalid, or its
/// address Secret missing), if so: the release waits for it to be fixed, as for a MetricTemplate,
/// instead of running with alerts that would never arrive.
fn alert_provider_problem(canary: &Canary, caches: &Caches, namespace: &str) -> Option<String> {
    let analysis = canary.spec.analysis()?;
    for (i, alert) in analysis.alerts.iter().flatten().enumerate() {
        let reference = &alert.provider_ref;
        let provider_namespace = reference.namespace_or(namespace);
        let id = format!("{}.{provider_namespace}", reference.name);
        let field = format!("spec.analysis.alerts[{i}].providerRef");
        let Some(provider) = caches.alert_provider(provider_namespace, &reference.name) else {
            return Some(format!(
                "AlertProvider {id} in {field} not found; create it or fix providerRef"
            ));
        };
        let errors = serin_api::validate::validate_alert_provider(&provider);
        if !errors.is_empty() {
            let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
            return Some(format!(
                "AlertProvider {id} ({field}) is invalid: {}",
                list.join("; ")
            ));
        }
        if provider.spec.address.is_none()
            && let Some(secret) = &provider.spec.secret_ref
        {
            let has_address = caches
                .secret_text(provider_namespace, &secret.name)
                .is_some_and(|data| data.get("address").is_some_and(|a| !a.trim().is_empty()));
            if !has_address {
                return Some(format!(
                    "AlertProvider {id} ({field}) is invalid: spec.secretRef: Secret {}.{provider_namespace} is missing or has no address key, and spec.address is not set; create the Secret with an address key or set spec.address",
                    secret.name
                ));
            }
        }
    }
    None
}
