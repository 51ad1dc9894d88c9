//! Observing a Canary: everything decide needs, read from the watch caches without a request.

use super::checks::query_context;
use super::{Error, Shared, Tick, ownership, references};
use crate::configs;
use kube::ResourceExt;
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
    // The router, the only reader of the JSON form's status, builds from its routed part alone.
    let status = effective.status.take();
    let mut canary_json = serde_json::to_value(&effective)?;
    if let Some(status) = &status {
        canary_json["status"] = serin_router::routed_status(status);
    }
    effective.status = status;
    let target_name = canary.spec.target_ref.name.clone();
    let kind = canary.spec.target_ref.kind.as_str();
    let target = caches.workload(&namespace, kind, &target_name);
    let primary = caches.primary_workload(&namespace, kind, &format!("{target_name}-primary"));
    let names = Names::of(&canary_json);
    let configs = match (&target, ctx.config_tracking) {
        (Some(target), true) => configs::observe(caches, &namespace, target),
        _ => Ok(BTreeMap::new()),
    };
    if let (Ok(current), Some(recorded)) = (
        &configs,
        effective
            .status
            .as_mut()
            .and_then(|s| s.tracked_configs.as_mut()),
    ) {
        configs::upgrade_secret_checksums(recorded, current, caches, &namespace);
    }
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
    let tracked = configs
        .as_ref()
        .map(configs::tracked_names)
        .unwrap_or_default();
    let mut blocked = match &label {
        Some(Err(error)) => Some(error.to_string()),
        _ => ownership::problem(&canary_json, caches, &namespace, kind, &tracked)
            .or(route_problem)
            .or_else(|| {
                references::metric_problem(
                    canary,
                    caches,
                    &namespace,
                    ctx.cross_namespace_refs,
                    |metric| {
                        let mut context = query_context(&canary_json, &namespace);
                        context.interval = metric.interval.clone().unwrap_or_else(|| "1m".into());
                        context.variables = metric.template_variables.clone().unwrap_or_default();
                        context
                    },
                )
            })
            .or_else(|| {
                references::analysis_problem(
                    canary,
                    caches,
                    &namespace,
                    (ctx.cross_namespace_refs, ctx.job_metrics),
                )
            })
            .or_else(|| {
                references::alert_provider_problem(
                    canary,
                    caches,
                    &namespace,
                    ctx.cross_namespace_refs,
                )
            }),
    };
    let mut autoscaler_min_replicas = None;
    if let Some(reference) = &canary.spec.autoscaler_ref {
        if reference.kind == "ScaledObject" {
            match caches.scaled_object(&namespace, &reference.name) {
                // KEDA's ScaledObject scales between minReplicaCount (default 0) and
                // maxReplicaCount; the primary starts at the minimum, as with an HPA.
                Some(so) => {
                    autoscaler_min_replicas = so["spec"]["minReplicaCount"]
                        .as_i64()
                        .and_then(|n| i32::try_from(n).ok());
                }
                None if caches.scaled_objects.is_none() => {
                    blocked.get_or_insert(
                        "spec.autoscalerRef names a KEDA ScaledObject, and KEDA's ScaledObject CRD was not installed when the operator started; install KEDA, then restart the operator".to_string(),
                    );
                }
                None => {
                    blocked.get_or_insert(format!(
                        "ScaledObject {}.{namespace} in spec.autoscalerRef not found; create it or remove autoscalerRef",
                        reference.name
                    ));
                }
            }
        } else if reference.kind != "HorizontalPodAutoscaler" {
            blocked.get_or_insert(format!(
                "spec.autoscalerRef.kind {:?} is not supported; use HorizontalPodAutoscaler or ScaledObject",
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
        steady: &shared.steady,
        echoes: &shared.echoes,
        quiet: false,
        written: Default::default(),
        budgets: &shared.budgets,
        canary_key: Shared::canary_key(canary),
        canary: canary_json,
        namespace: namespace.clone(),
        target: target_json,
        label: label.and_then(Result::ok),
        by_ratio: effective.spec.splits_by_replicas(),
        tracked,
    };
    let target_hash = target
        .as_ref()
        .and_then(|target| shared.template_hashes.of(&tick.canary_key, target));
    let observation = Observation {
        canary: effective,
        target,
        primary,
        target_hash,
        configs,
        routes,
        autoscaler_min_replicas,
        blocked,
        routes_pending: route_pending,
        verdicts: Vec::new(),
    };
    Ok((tick, observation))
}
