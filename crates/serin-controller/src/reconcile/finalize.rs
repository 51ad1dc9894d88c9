//! `revertOnDeletion`: the finalizer that holds a deleted Canary until its target serves again and
//! an adopted VirtualService has its original spec back.

use super::act::{ORIGINAL_CONFIGURATION, controlled_by, original_spec};
use super::record::record;
use super::{Error, Shared, canary_id, finalizer};
use crate::cache::virtual_services;
use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action as Requeue;
use serde_json::json;
use serin_api::{Canary, Phase};
use serin_core::plan::EventType;
use serin_router::Names;
use serin_router::services::selector_label;

/// Adds the finalizer when `revertOnDeletion` is set, removes it when it is not; returns whether
/// it wrote the Canary.
pub(super) async fn sync_finalizer(canary: &Canary, shared: &Shared) -> Result<bool, Error> {
    let ctx = &shared.ctx;
    let wanted = canary.spec.revert_on_deletion == Some(true);
    let finalizers = canary.finalizers();
    let present = finalizers.iter().any(|f| f == finalizer());
    if wanted == present {
        return Ok(false);
    }
    let mut next: Vec<String> = finalizers
        .iter()
        .filter(|f| *f != finalizer())
        .cloned()
        .collect();
    if wanted {
        next.push(finalizer().into());
    }
    let canaries: Api<Canary> =
        Api::namespaced(ctx.client.clone(), &canary.namespace().unwrap_or_default());
    let written = canaries
        .patch(
            &canary.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": next}})),
        )
        .await?;
    shared.wrote(canary, written.resource_version().as_deref());
    Ok(true)
}

/// A Canary with `revertOnDeletion` is being deleted: give the target its replicas back (so the
/// workload keeps serving once the primary is garbage-collected), route everything to it through
/// the apex Service, then let the Canary go.
pub(super) async fn finalize(canary: &Canary, shared: &Shared) -> Result<Requeue, Error> {
    if !canary.finalizers().iter().any(|f| f == finalizer()) {
        return Ok(Requeue::await_change());
    }
    let ctx = &shared.ctx;
    let namespace = canary.namespace().unwrap_or_default();
    let target_name = &canary.spec.target_ref.name;
    let canaries: Api<Canary> = Api::namespaced(ctx.client.clone(), &namespace);
    let canary_json = serde_json::to_value(canary)?;
    let apex = Names::of(&canary_json).apex;
    let phase = canary.status.as_ref().and_then(|s| s.phase);
    let mut terminating = None;
    if phase != Some(Phase::Terminating) {
        let written = canaries
            .patch_status(
                &canary.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Terminating"}})),
            )
            .await?;
        shared.wrote(canary, written.resource_version().as_deref());
        terminating = Some(written);
        record(
            ctx,
            canary,
            EventType::Normal,
            serin_core::plan::reason::TERMINATING,
            &format!("Terminating canary {}", canary_id(canary)),
        )
        .await;
    }
    let kind = canary.spec.target_ref.kind.as_str();
    if let Some(target) = shared.caches.workload(&namespace, kind, target_name) {
        // The ScaledObject held the target at zero while the primary served: let it scale again.
        crate::autoscaler::pause_target_scaler(
            &ctx.client,
            &shared.caches,
            &namespace,
            canary,
            false,
        )
        .await?;
        let primary_replicas = shared
            .caches
            .deployment(&namespace, &format!("{target_name}-primary"))
            .and_then(|p| p.spec.and_then(|s| s.replicas))
            .filter(|r| *r > 0)
            .unwrap_or(1);
        if kind == "DaemonSet" {
            // A DaemonSet scaled to zero runs again once no selector keeps it off every node.
            let current = shared.caches.daemon_set(&namespace, target_name);
            let current = current.map(|ds| serde_json::to_value(&ds)).transpose()?;
            if let Some(patch) = current
                .as_ref()
                .and_then(|ds| crate::daemon_sets::daemon_set_scale_patch(ds, false))
            {
                let daemon_sets: Api<k8s_openapi::api::apps::v1::DaemonSet> =
                    Api::namespaced(ctx.client.clone(), &namespace);
                daemon_sets
                    .patch(target_name, &PatchParams::default(), &Patch::Merge(patch))
                    .await?;
            }
        } else if target.spec.as_ref().and_then(|s| s.replicas) != Some(primary_replicas) {
            let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &namespace);
            deployments
                .patch(
                    target_name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": primary_replicas}})),
                )
                .await?;
        }
        let labels: Vec<&str> = ctx.selector_labels.iter().map(String::as_str).collect();
        let target_json = serde_json::to_value(&target)?;
        if let Ok((key, value)) = selector_label(&target_json, &labels) {
            // The apex Service goes with the Canary (or, adopted, stays); until then it selects
            // the target's pods.
            let services: Api<k8s_openapi::api::core::v1::Service> =
                Api::namespaced(ctx.client.clone(), &namespace);
            if shared
                .caches
                .routing_object("Service", &namespace, &apex)
                .is_some()
            {
                services
                    .patch(
                        &apex,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"selector": {key: value}}})),
                    )
                    .await?;
            }
        }
    }
    restore_routes(canary, shared, &apex).await?;
    let finalizers: Vec<String> = canary
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer())
        .cloned()
        .collect();
    let released = canaries
        .patch(
            &canary.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
        )
        .await?;
    let gone = Shared::canary_key(canary);
    shared.forget_unless(|key| *key != gone);
    // A change of the target can trigger a reconcile of a copy read before these writes, still
    // holding the finalizer: it must not finalize again once the primary is gone (it would give
    // the target one replica instead of the primary's).
    shared.wrote(canary, released.resource_version().as_deref());
    if let Some(terminating) = &terminating {
        shared.wrote(terminating, released.resource_version().as_deref());
    }
    record(
        ctx,
        canary,
        EventType::Normal,
        serin_core::plan::reason::TERMINATED,
        &format!("Terminated canary {}", canary_id(canary)),
    )
    .await;
    Ok(Requeue::await_change())
}

/// Gives the VirtualService and the HTTPRoute `name` their original spec back when the Canary
/// adopted them (does not own them); those the Canary owns go with it.
async fn restore_routes(canary: &Canary, shared: &Shared, name: &str) -> Result<(), Error> {
    let namespace = canary.namespace().unwrap_or_default();
    let uid = canary.metadata.uid.as_deref().unwrap_or_default();
    for (kind, resource) in [
        ("VirtualService", virtual_services()),
        ("HTTPRoute", crate::cache::http_routes()),
    ] {
        let Some(current) = shared.caches.routing_object(kind, &namespace, name) else {
            continue;
        };
        if controlled_by(&current, uid) {
            continue;
        }
        let Some(spec) = original_spec(&current) else {
            tracing::warn!(
                "{kind} {name}.{namespace}: original configuration not found, unable to revert"
            );
            continue;
        };
        let mut restored: DynamicObject = serde_json::from_value(current)?;
        restored.data["spec"] = spec;
        if let Some(annotations) = restored.metadata.annotations.as_mut() {
            annotations.remove(ORIGINAL_CONFIGURATION);
        }
        let api: Api<DynamicObject> =
            Api::namespaced_with(shared.ctx.client.clone(), &namespace, &resource);
        api.replace(name, &PostParams::default(), &restored).await?;
    }
    Ok(())
}
