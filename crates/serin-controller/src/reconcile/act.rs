//! Acting on a plan: the workloads (primary Deployment, scaling, promotion), the `-primary` config
//! copies and autoscaler, and the routing objects (Services, DestinationRules, the VirtualService),
//! applied only when they changed. Routing objects the user made before the Canary are adopted,
//! keeping the VirtualService's original spec for `revertOnDeletion`.

use super::{Error, FIELD_MANAGER, Tick};
use super::{steady, written};
use crate::autoscaler::{pause_target_scaler, primary_autoscaler, primary_scaled_object};
use crate::cache::{self, scaled_objects, virtual_services};
use crate::configs;
use crate::daemon_sets::daemon_set_scale_patch;
use crate::workloads::{primary_from, promoted_fields, template_for, template_patch};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};
use serin_api::{Canary, CanaryStatus};
use serin_core::plan::{Action, Routes};
use serin_router::gateway_api::{http_route, routes_by_http_route};
use serin_router::istio::{destination_rules, set_routes, virtual_service};
use serin_router::kubernetes::{APEX_LABEL, route_apex, route_apex_by_ratio, routes_by_service};
use serin_router::services::services;
use serin_router::{owner_reference, routed_status};
use std::sync::Arc;

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// Creates or updates `object` with server-side apply, taking over fields other managers own.
async fn apply(
    client: &Client,
    namespace: &str,
    api: &ApiResource,
    object: &Value,
) -> Result<Option<String>, Error> {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let written: written::Written = written::patch(
        client,
        &written::request::<DynamicObject>(api, namespace),
        name,
        None,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await?;
    Ok(written.metadata.resource_version)
}

/// Creates `object` unless it exists already (the cache may not have seen our own creation yet,
/// and creating twice must not roll the object a second time).
async fn create(
    client: &Client,
    namespace: &str,
    api: &ApiResource,
    object: &Value,
) -> Result<(), Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, api);
    let object: DynamicObject = serde_json::from_value(object.clone())?;
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Whether `actual` holds everything `wanted` says: every field of an object, arrays element by
/// element; fields the API server adds (defaults, status, resourceVersion) do not matter.
fn contains(actual: &Value, wanted: &Value) -> bool {
    match (actual, wanted) {
        (Value::Object(actual), Value::Object(wanted)) => wanted
            .iter()
            .all(|(key, value)| actual.get(key).is_some_and(|a| contains(a, value))),
        (Value::Array(actual), Value::Array(wanted)) => {
            actual.len() == wanted.len() && actual.iter().zip(wanted).all(|(a, w)| contains(a, w))
        }
        _ => actual == wanted,
    }
}

/// Where the spec of a VirtualService (or HTTPRoute) that existed before its Canary is kept, to be
/// restored when the Canary is deleted with `revertOnDeletion` (Flagger's annotation, so a
/// VirtualService adopted by Flagger is restored too).
pub(super) const ORIGINAL_CONFIGURATION: &str = "flagger.kubernetes.io/original-configuration";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Whether `object`'s controlling owner is the Canary with `uid`.
pub(super) fn controlled_by(object: &Value, uid: &str) -> bool {
    object["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|owner| owner["controller"] == json!(true) && owner["uid"] == json!(uid))
}

/// `desired` for a routing object the user made before the Canary (typically the apex Service or
/// the VirtualService): it takes over the spec but not the ownership, so deleting the Canary does
/// not delete it; a VirtualService also keeps its original spec in an annotation.
fn adopted(desired: &Value, existing: &Value) -> Value {
    let mut desired = desired.clone();
    if let Some(metadata) = desired["metadata"].as_object_mut() {
        metadata.remove("ownerReferences");
    }
    if desired["kind"] == "VirtualService" || desired["kind"] == "HTTPRoute" {
        let annotations = &existing["metadata"]["annotations"];
        let original = match annotations[ORIGINAL_CONFIGURATION].as_str() {
            Some(kept) => Some(kept.to_string()),
            None if annotations[LAST_APPLIED].is_string() => None,
            None => Some(json!({"spec": existing["spec"]}).to_string()),
        };
        if let Some(original) = original {
            desired["metadata"]["annotations"][ORIGINAL_CONFIGURATION] = json!(original);
        }
    }
    desired
}

/// The spec a VirtualService had before its Canary adopted it: from kubectl's last-applied
/// configuration, else from the annotation [`adopted`] wrote.
pub(super) fn original_spec(virtual_service: &Value) -> Option<Value> {
    let annotations = &virtual_service["metadata"]["annotations"];
    [LAST_APPLIED, ORIGINAL_CONFIGURATION]
        .iter()
        .filter_map(|key| annotations[*key].as_str())
        .filter_map(|text| serde_json::from_str::<Value>(text).ok())
        .map(|configuration| configuration["spec"].clone())
        .find(Value::is_object)
}

/// A digest of `object`'s JSON text, fed to the hasher as it is written instead of built first.
fn digest(object: &Value) -> u64 {
    use std::hash::Hasher;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    steady::feed_json(&mut hasher, object);
    hasher.finish()
}

/// What this operator last applied of one routing object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Applied {
    /// The digest of the object applied.
    digest: u64,
    /// The resourceVersion at which the object was known to contain it: the version the apply
    /// made, or the one at which the cache last showed it containing it.
    seen_at: Option<String>,
}

impl Applied {
    /// Whether the cached object, now at `version`, is still the one that was seen to contain
    /// what was applied: an object whose version did not change is byte for byte the same.
    fn still_seen_at(&self, version: Option<&str>) -> bool {
        version.is_some() && self.seen_at.as_deref() == version
    }
}

impl Tick<'_> {
    /// Applies a Service, DestinationRule or VirtualService, unless this operator applied the same
    /// object last time and the cache shows it unchanged since: most ticks would rewrite identical
    /// routing objects otherwise. Later ticks compare the cached object's resourceVersion with
    /// the one the apply made (or the cache last showed containing it) and decode the object
    /// only when it changed. Says whether it wrote.
    async fn apply_routing(&self, api: &ApiResource, object: &Value) -> Result<bool, Error> {
        let kind = object["kind"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let cached_ownership = self
            .caches
            .routing_ownership(kind, &self.namespace, name, None);
        let uid = self.canary["metadata"]["uid"].as_str().unwrap_or_default();
        let foreign = cached_ownership
            .as_ref()
            .is_some_and(|ownership| !ownership.controlled_by(uid));
        let mut cached = None;
        let adopted_object;
        let object = if foreign {
            cached = self.caches.routing_object(kind, &self.namespace, name);
            adopted_object = cached.as_ref().map(|existing| adopted(object, existing));
            adopted_object.as_ref().unwrap_or(object)
        } else {
            object
        };
        let key = format!("{kind}/{name}");
        let wanted = digest(object);
        let last = self
            .applied
            .lock()
            .expect("never poisoned")
            .get(&self.canary_key)
            .and_then(|objects| objects.get(&key).cloned());
        let version = cached_ownership.and_then(|ownership| ownership.resource_version);
        if let Some(last) = last.filter(|last| last.digest == wanted) {
            if last.still_seen_at(version.as_deref()) {
                return Ok(false);
            }
            let cached = cached.or_else(|| self.caches.routing_object(kind, &self.namespace, name));
            let mut body = object.clone();
            if let Some(fields) = body.as_object_mut() {
                fields.remove("apiVersion");
                fields.remove("kind");
            }
            if cached.is_some_and(|cached| contains(&cached, &body)) {
                self.remember_applied(key, wanted, version);
                return Ok(false);
            }
        }
        // A forced server-side apply leaves the object holding every field applied, so the
        // version it answers with is one the cache can be trusted to show containing them.
        let written = apply(&self.ctx.client, &self.namespace, api, object).await?;
        self.remember_applied(key, wanted, written);
        Ok(true)
    }

    fn remember_applied(&self, key: String, digest: u64, seen_at: Option<String>) {
        self.applied
            .lock()
            .expect("never poisoned")
            .entry(self.canary_key.clone())
            .or_default()
            .insert(key, Applied { digest, seen_at });
    }

    /// Applies the `-primary` copies of the tracked configs; with `only_missing`, creates the
    /// copies that do not exist yet and leaves the others as they are, since during an analysis
    /// the primary must keep running on the promoted data.
    async fn copy_configs(&self, only_missing: bool) -> Result<(), Error> {
        let owner = owner_reference(&self.canary);
        for copy in configs::primary_copies(self.caches, &self.namespace, &self.tracked, &owner) {
            let name = copy["metadata"]["name"].as_str().unwrap_or_default();
            let (api, exists) = match copy["kind"].as_str() {
                Some("Secret") => (
                    resource("", "v1", "Secret", "secrets"),
                    self.caches.secret(&self.namespace, name).is_some(),
                ),
                _ => (
                    resource("", "v1", "ConfigMap", "configmaps"),
                    self.caches.config_map(&self.namespace, name).is_some(),
                ),
            };
            if only_missing && exists {
                continue;
            }
            apply(&self.ctx.client, &self.namespace, &api, &copy).await?;
        }
        Ok(())
    }

    /// Merge-patches the target or primary workload `name` of `api`'s kind.
    async fn patch_workload(
        &self,
        api: &ApiResource,
        name: &str,
        body: Value,
    ) -> Result<(), Error> {
        let written: written::Written = written::patch(
            &self.ctx.client,
            &written::request::<DynamicObject>(api, &self.namespace),
            name,
            None,
            &PatchParams::default(),
            &Patch::Merge(body),
        )
        .await?;
        let kind = if api.kind == "DaemonSet" {
            "DaemonSet"
        } else {
            "Deployment"
        };
        self.wrote_workload(kind, name, &written.metadata);
        Ok(())
    }

    /// Remembers a write of the workload `name` (giving `written`): its watch event needs no
    /// reconcile when this tick has scheduled its next one (see `echoes`), and its generation is
    /// one this tick knows (see `quiet`).
    fn wrote_workload(&self, kind: &'static str, name: &str, written: &written::WrittenMetadata) {
        if self.quiet {
            self.echoes.expect(
                (kind, self.namespace.clone(), name.to_string()),
                &self.canary_key,
                written.resource_version.clone(),
            );
        }
        let mut generations = self.written.lock().expect("never poisoned");
        match generations
            .iter_mut()
            .find(|((k, n), _)| *k == kind && n == name)
        {
            Some((_, generation)) => *generation = (*generation).max(written.generation),
            None => generations.push(((kind, name.to_string()), written.generation)),
        }
    }

    /// The generations of the target and the primary after this tick: as observed, or as its
    /// own writes left them.
    pub(super) fn generations(
        &self,
        observation: &serin_core::plan::Observation,
    ) -> Vec<(super::quiet::Workload, Option<i64>)> {
        let kind = match observation.canary.spec.target_ref.kind.as_str() {
            "DaemonSet" => "DaemonSet",
            _ => "Deployment",
        };
        let target = &observation.canary.spec.target_ref.name;
        let written = self.written.lock().expect("never poisoned");
        [
            (target.clone(), observation.target.as_ref()),
            (format!("{target}-primary"), observation.primary.as_ref()),
        ]
        .into_iter()
        .map(|(name, observed)| {
            let observed = observed.and_then(|w| w.metadata.generation);
            let wrote = written
                .iter()
                .find(|((k, n), _)| *k == kind && *n == name)
                .and_then(|(_, generation)| *generation);
            ((kind, name), observed.max(wrote))
        })
        .collect()
    }

    /// Applies the HTTPRoute with `routes`, keeping the rules of the live one that Serin does not
    /// manage (the user's own, in a route it adopted).
    async fn apply_http_route(&self, routes: Routes, status: &CanaryStatus) -> Result<(), Error> {
        let apex = serin_router::Names::of(&self.canary).apex;
        let live = self
            .caches
            .routing_object("HTTPRoute", &self.namespace, &apex);
        let route = http_route(&self.routed_with(status), routes, live.as_ref())?;
        self.apply_routing(&cache::http_routes(), &route).await?;
        Ok(())
    }

    /// The `-canary`, `-primary` and apex Services of `target`, the apex selecting the primary.
    fn services(&self, target: &Value) -> Result<[Value; 3], Error> {
        let labels: Vec<&str> = self
            .ctx
            .selector_labels
            .iter()
            .map(String::as_str)
            .collect();
        Ok(services(&self.canary, target, &labels)?)
    }

    /// The primary's pod template for `target`; a canary by replica ratio also labels it for the
    /// apex Service, which selects both sides.
    fn primary_template(&self, target: &Value, key: &str, primary_value: &str) -> Value {
        let mut template = template_for(&target["spec"], key, primary_value, &self.tracked);
        if self.by_ratio {
            let apex = serin_router::Names::of(&self.canary).apex;
            template["metadata"]["labels"][APEX_LABEL] = json!(apex);
        }
        template
    }

    /// Points the apex Service at the pods `routes` send traffic to.
    fn route_apex(&self, apex: &mut Value, key: &str, value: &str, routes: Routes) {
        if self.by_ratio {
            route_apex_by_ratio(apex, key, value, routes);
        } else {
            route_apex(apex, key, value, routes);
        }
    }

    /// The merge patch that scales the target (`primary` false) or the primary to `replicas`, and
    /// brings its pod template to what Serin adds to it: the apex label on both sides of a canary
    /// by replica ratio (so the apex Service can select them all), and on the target's the
    /// anti-affinity to the primary's pods when the Canary asks for it. Joining the two means a
    /// template change never rolls running pods for nothing: at initialization the target's new
    /// template comes with its scale to zero.
    fn scale_patch(
        &self,
        canary: &Canary,
        workload: &Value,
        primary: bool,
        replicas: i32,
        (key, primary_value): (&str, &str),
    ) -> Value {
        let apex = serin_router::Names::of(&self.canary).apex;
        let apex = self.by_ratio.then_some(apex.as_str());
        let template = if primary {
            apex.and_then(|apex| template_patch(workload, Some(apex), None, key, primary_value))
        } else {
            let anti = canary
                .spec
                .analysis()
                .and_then(|a| a.anti_affinity.as_ref());
            template_patch(workload, apex, anti, key, primary_value)
        };
        let mut patch = template.unwrap_or_else(|| json!({"spec": {}}));
        patch["spec"]["replicas"] = json!(replicas);
        patch
    }

    /// The target's `autoscalerRef` HorizontalPodAutoscaler, when it has one.
    fn target_autoscaler(
        &self,
        canary: &Canary,
    ) -> Option<Arc<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>> {
        let reference = canary.spec.autoscaler_ref.as_ref()?;
        self.caches.autoscaler(&self.namespace, &reference.name)
    }

    /// The target's `autoscalerRef` KEDA ScaledObject (JSON), when it has one.
    fn target_scaled_object(&self, canary: &Canary) -> Option<Value> {
        crate::autoscaler::target_scaled_object(canary, self.caches, &self.namespace)
    }

    /// The Canary as the router builds from it: with the part of the status this tick writes that
    /// routes depend on (the phase and step of managed routes, the session-affinity cookies).
    fn routed_with(&self, status: &CanaryStatus) -> Value {
        let mut routed = self.canary.clone();
        routed["status"] = routed_status(status);
        routed
    }

    /// Carries out one action of the plan; `status` is the one the plan writes.
    pub(super) async fn act(
        &self,
        canary: &Canary,
        action: &Action,
        routes: Option<Routes>,
        status: &CanaryStatus,
    ) -> Result<(), Error> {
        if let Action::NotifyHooks { hook_type, phase } = action {
            // Post-rollout style notifications: their outcome does not change the release, so they
            // are sent in the namespace's budget instead of holding the tick.
            let (webhooks, canary, hook_type, phase) = (
                self.ctx.webhooks.clone(),
                canary.clone(),
                *hook_type,
                *phase,
            );
            let notify = async move {
                for run in webhooks.notify_hooks(&canary, hook_type, phase).await {
                    if let Err(error) = run.result {
                        tracing::warn!("{error}");
                    }
                }
            };
            let span = tracing::Span::current();
            if let Err(full) = self.budgets.spawn(
                &self.namespace,
                tracing::Instrument::instrument(notify, span),
            ) {
                tracing::warn!("{hook_type} hooks not called: {full}");
            }
            return Ok(());
        }
        let client = &self.ctx.client;
        let namespace = &self.namespace;
        let deployments = resource("apps", "v1", "Deployment", "deployments");
        let autoscalers = resource(
            "autoscaling",
            "v2",
            "HorizontalPodAutoscaler",
            "horizontalpodautoscalers",
        );
        let (Some(target), Some((key, value))) = (&self.target, &self.label) else {
            return Ok(());
        };
        let target_name = target["metadata"]["name"].as_str().unwrap_or_default();
        let primary_name = format!("{target_name}-primary");
        let primary_value = format!("{value}-primary");
        let kind = target["kind"].as_str().unwrap_or("Deployment");
        let daemon_set = kind == "DaemonSet";
        let workloads = if daemon_set {
            resource("apps", "v1", "DaemonSet", "daemonsets")
        } else {
            deployments.clone()
        };
        let merge = |body: Value| Patch::Merge(body);
        let owner = owner_reference(&self.canary);
        match action {
            Action::EnsurePrimary { sync_template } => {
                self.copy_configs(!sync_template).await?;
                // Most ticks find the primary there and leave its template alone: neither it nor
                // the template is read then.
                let exists = self.caches.has_workload(namespace, kind, &primary_name);
                if !exists {
                    let template = self.primary_template(target, key, &primary_value);
                    let primary = primary_from(
                        target,
                        key,
                        value,
                        &owner,
                        template,
                        &self.ctx.include_label_prefix,
                    );
                    create(client, namespace, &workloads, &primary).await?;
                } else if *sync_template
                    && let Some(primary) = self.caches.workload(namespace, kind, &primary_name)
                {
                    let template = self.primary_template(target, key, &primary_value);
                    let primary = serde_json::to_value(primary)?;
                    if primary["spec"]["template"]["spec"] != template["spec"] {
                        self.patch_workload(
                            &workloads,
                            &primary_name,
                            json!({"spec": {"template": template}}),
                        )
                        .await?;
                    }
                }
                if let Some(hpa) = self.target_autoscaler(canary) {
                    let primary_hpa = primary_autoscaler(canary, &hpa, &owner)?;
                    let name = primary_hpa["metadata"]["name"].as_str().unwrap_or_default();
                    if self.caches.autoscaler(namespace, name).is_none() {
                        create(client, namespace, &autoscalers, &primary_hpa).await?;
                    }
                }
                if let Some(so) = self.target_scaled_object(canary) {
                    let primary_so = primary_scaled_object(canary, &so, &owner);
                    let name = primary_so["metadata"]["name"].as_str().unwrap_or_default();
                    if self.caches.scaled_object(namespace, name).is_none() {
                        create(client, namespace, &scaled_objects(), &primary_so).await?;
                    }
                }
            }
            Action::EnsureRouting => {
                let by_service = routes_by_service(&self.canary);
                let by_http_route = routes_by_http_route(&self.canary);
                let istio = !by_service && !by_http_route;
                let steady =
                    steady::Group::of(&self.canary, target, (!by_service, istio), |kind, name| {
                        self.caches.routing_entry(kind, namespace, name)
                    });
                let check_steady = !self.steady.unchanged(&self.canary_key, &steady);
                let service_api = resource("", "v1", "Service", "services");
                if check_steady || by_service {
                    let [canary_service, primary_service, mut apex] = self.services(target)?;
                    let mut wrote = false;
                    if check_steady {
                        for service in [&canary_service, &primary_service] {
                            wrote |= self.apply_routing(&service_api, service).await?;
                        }
                    }
                    if by_service {
                        if let Some(current) = routes {
                            self.route_apex(&mut apex, key, value, current);
                        }
                        self.apply_routing(&service_api, &apex).await?;
                    } else if check_steady {
                        wrote |= self.apply_routing(&service_api, &apex).await?;
                    }
                    if check_steady {
                        if istio {
                            for rule in destination_rules(&self.canary) {
                                wrote |= self
                                    .apply_routing(&cache::destination_rules(), &rule)
                                    .await?;
                            }
                        }
                        self.steady.checked(&self.canary_key, steady, wrote);
                    }
                }
                if by_http_route {
                    let full = Routes {
                        primary: 100,
                        canary: 0,
                        mirrored: false,
                    };
                    self.apply_http_route(routes.unwrap_or(full), status)
                        .await?;
                } else if istio {
                    let routed = self.routed_with(status);
                    let mut vs = virtual_service(&routed)?;
                    if let Some(current) = routes {
                        vs["spec"] = set_routes(&routed, current)?;
                    }
                    self.apply_routing(&virtual_services(), &vs).await?;
                }
            }
            Action::ScaleTarget(replicas) | Action::ScalePrimary(replicas) if daemon_set => {
                let name = match action {
                    Action::ScaleTarget(_) => target_name,
                    _ => primary_name.as_str(),
                };
                // A DaemonSet runs one pod per node: scaled to zero, no node matches its selector.
                let current = self.caches.daemon_set(namespace, name);
                let current = current.map(|ds| serde_json::to_value(&ds)).transpose()?;
                if let Some(patch) = current
                    .as_ref()
                    .and_then(|ds| daemon_set_scale_patch(ds, *replicas == 0))
                {
                    self.patch_workload(&workloads, name, patch).await?;
                }
            }
            Action::ScaleTarget(replicas) | Action::ScalePrimary(replicas) => {
                let primary = matches!(action, Action::ScalePrimary(_));
                let (name, workload) = if primary {
                    let live = self.caches.workload(namespace, kind, &primary_name);
                    let live = live.map(|p| serde_json::to_value(&p)).transpose()?;
                    (primary_name.as_str(), live.unwrap_or(Value::Null))
                } else {
                    (target_name, target.clone())
                };
                let patch =
                    self.scale_patch(canary, &workload, primary, *replicas, (key, &primary_value));
                let written: written::Written = written::patch(
                    client,
                    &written::request::<Deployment>(&(), namespace),
                    name,
                    None,
                    &PatchParams::default(),
                    &merge(patch),
                )
                .await?;
                self.wrote_workload("Deployment", name, &written.metadata);
                if !primary {
                    pause_target_scaler(client, self.caches, namespace, canary, *replicas == 0)
                        .await?;
                }
            }
            Action::SetRoutes(next) if routes_by_http_route(&self.canary) => {
                self.apply_http_route(*next, status).await?;
            }
            Action::SetRoutes(next) if routes_by_service(&self.canary) => {
                let [_, _, mut apex] = self.services(target)?;
                self.route_apex(&mut apex, key, value, *next);
                self.apply_routing(&resource("", "v1", "Service", "services"), &apex)
                    .await?;
            }
            Action::SetRoutes(next) => {
                let routed = self.routed_with(status);
                let mut vs = virtual_service(&routed)?;
                vs["spec"] = set_routes(&routed, *next)?;
                self.apply_routing(&virtual_services(), &vs).await?;
            }
            Action::Promote { replicas } => {
                self.copy_configs(false).await?;
                let mut spec =
                    json!({"template": self.primary_template(target, key, &primary_value)});
                for field in promoted_fields(target) {
                    if !target["spec"][field].is_null() {
                        spec[field] = target["spec"][field].clone();
                    }
                }
                if let Some(replicas) = replicas
                    && !daemon_set
                {
                    spec["replicas"] = json!(replicas);
                }
                self.patch_workload(&workloads, &primary_name, json!({"spec": spec}))
                    .await?;
            }
            Action::SyncPrimaryAutoscaler => {
                if let Some(hpa) = self.target_autoscaler(canary) {
                    let primary_hpa = primary_autoscaler(canary, &hpa, &owner)?;
                    apply(client, namespace, &autoscalers, &primary_hpa).await?;
                }
                if let Some(so) = self.target_scaled_object(canary) {
                    let primary_so = primary_scaled_object(canary, &so, &owner);
                    apply(client, namespace, &scaled_objects(), &primary_so).await?;
                }
            }
            Action::NotifyHooks { .. } => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Applied, contains};
    use serde_json::json;

    #[test]
    fn an_applied_object_is_compared_again_once_its_version_changed() {
        let applied = Applied {
            digest: 1,
            seen_at: Some("41".into()),
        };
        assert!(applied.still_seen_at(Some("41")));
        assert!(!applied.still_seen_at(Some("42")), "edited since");
        assert!(!applied.still_seen_at(None), "gone from the cache");
        let just_applied = Applied {
            digest: 1,
            seen_at: None,
        };
        assert!(
            !just_applied.still_seen_at(None),
            "applied but never seen in the cache"
        );
        assert!(!just_applied.still_seen_at(Some("41")));
    }

    #[test]
    fn a_routing_object_with_server_defaults_still_contains_what_was_applied() {
        let applied = json!({"metadata": {"name": "podinfo"},
            "spec": {"ports": [{"port": 9898, "targetPort": "http"}], "selector": {"app": "podinfo"}}});
        let served = json!({"metadata": {"name": "podinfo", "resourceVersion": "12", "uid": "u"},
            "spec": {"ports": [{"port": 9898, "targetPort": "http", "protocol": "TCP"}],
                     "selector": {"app": "podinfo"}, "type": "ClusterIP"}});
        assert!(contains(&served, &applied));
    }

    #[test]
    fn an_edited_or_shortened_routing_object_no_longer_contains_it() {
        let applied = json!({"spec": {"http": [{"route": [{"weight": 90}, {"weight": 10}]}]}});
        let edited = json!({"spec": {"http": [{"route": [{"weight": 100}, {"weight": 0}]}]}});
        let shortened = json!({"spec": {"http": [{"route": [{"weight": 90}]}]}});
        assert!(!contains(&edited, &applied));
        assert!(!contains(&shortened, &applied));
        assert!(!contains(&json!({}), &applied));
    }
}
