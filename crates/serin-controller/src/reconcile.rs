//! One reconcile of a Canary: observe (from the watch caches) → decide (serin-core) → act → record
//! (one status write, events, event webhooks, alerts, operator metrics).

use crate::autoscaler::primary_autoscaler;
use crate::cache::{self, Caches, virtual_services};
use crate::configs;
use crate::metrics::OperatorMetrics;
use crate::workloads::{primary_from, template_for};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::runtime::controller::{self, Action as Requeue, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use serin_api::{Canary, MetricTemplate, Phase};
use serin_core::plan::{
    Action, Check, Decision, EventType, MetricReading, Observation, Outcome, Plan, Routes, Verdict,
};
use serin_core::revision::ConfigKind;
use serin_metrics::{MetricInputs, PrometheusClient, QueryContext};
use serin_router::istio::{destination_rules, get_routes, set_routes, virtual_service};
use serin_router::services::{selector_label, services};
use serin_router::{Names, owner_reference};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The field manager of everything the operator writes.
pub const FIELD_MANAGER: &str = "serin";

/// The finalizer that holds a Canary with `revertOnDeletion` until its target is restored.
pub const FINALIZER: &str = "finalizer.serin.dev";

/// What every reconcile shares.
pub struct Context {
    /// The Kubernetes client.
    pub client: Client,
    /// The metrics server for builtin and inline metric queries (`--metrics-server`).
    pub metrics_server: PrometheusClient,
    /// Labels that identify a target's pods, in order of preference (`--selector-labels`).
    pub selector_labels: Vec<String>,
    /// Prefixes of the target labels copied to the primary; empty or `*` copies all
    /// (`--include-label-prefix`).
    pub include_label_prefix: Vec<String>,
    /// Whether the ConfigMaps and Secrets a target uses are part of its revision and copied to
    /// `-primary` (`--enable-config-tracking`).
    pub config_tracking: bool,
    /// Canaries reconciled at once (`--concurrency`).
    pub concurrency: u16,
    /// Where events go when a Canary has no `event` webhook (`--event-webhook`).
    pub event_webhook: Option<String>,
    /// Cluster name added to alerts (`--cluster-name`).
    pub cluster_name: Option<String>,
    /// Calls the Canaries' webhooks and alert providers (proxy settings from the environment).
    pub webhooks: serin_webhooks::WebhookClient,
    /// The canary metrics served at `/metrics`.
    pub metrics: Arc<OperatorMetrics>,
}

impl Context {
    /// A context for `client`, querying `metrics_server`, with Flagger's defaults for the rest.
    pub fn new(client: Client, metrics_server: PrometheusClient) -> Self {
        Context {
            client,
            metrics_server,
            selector_labels: serin_router::services::DEFAULT_SELECTOR_LABELS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            include_label_prefix: Vec::new(),
            config_tracking: true,
            concurrency: 4,
            event_webhook: None,
            cluster_name: None,
            webhooks: serin_webhooks::WebhookClient::new(serin_webhooks::ClientOptions::from_env()),
            metrics: Arc::default(),
        }
    }
}

/// Why a reconcile stopped early (it is retried, and the reason shown in the Canary's status).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a request.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The routing objects could not be built.
    #[error("{0}")]
    Router(#[from] serin_router::RouterError),
    /// An object could not be converted.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// Creates or updates `object` with server-side apply, taking over fields other managers own.
async fn apply(
    client: &Client,
    namespace: &str,
    api: &ApiResource,
    object: &Value,
) -> Result<(), Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, api);
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await?;
    Ok(())
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

fn now() -> Timestamp {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    Timestamp::from_millisecond(millis).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// The controller's shared state: the context and the watch caches.
struct Shared {
    ctx: Arc<Context>,
    caches: Caches,
    filled: tokio::sync::OnceCell<()>,
    /// For each Canary this operator wrote, the resourceVersion the write was based on.
    written_over: std::sync::Mutex<std::collections::HashMap<(String, String), String>>,
    /// Digests of the routing objects last applied for each Canary.
    applied: AppliedRouting,
}

/// Per Canary (namespace, name), the digest of each routing object (kind/name) last applied.
type AppliedRouting =
    std::sync::Mutex<std::collections::HashMap<(String, String), BTreeMap<String, u64>>>;

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

/// Where the spec of a VirtualService that existed before its Canary is kept, to be restored
/// when the Canary is deleted with `revertOnDeletion` (Flagger's annotation, so a VirtualService
/// adopted by Flagger is restored too).
const ORIGINAL_CONFIGURATION: &str = "flagger.kubernetes.io/original-configuration";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Whether `object`'s controlling owner is the Canary with `uid`.
fn controlled_by(object: &Value, uid: &str) -> bool {
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
    if desired["kind"] == "VirtualService" {
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
fn original_spec(virtual_service: &Value) -> Option<Value> {
    let annotations = &virtual_service["metadata"]["annotations"];
    [LAST_APPLIED, ORIGINAL_CONFIGURATION]
        .iter()
        .filter_map(|key| annotations[*key].as_str())
        .filter_map(|text| serde_json::from_str::<Value>(text).ok())
        .map(|configuration| configuration["spec"].clone())
        .find(Value::is_object)
}

fn digest(object: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    object.to_string().hash(&mut hasher);
    hasher.finish()
}

impl Shared {
    fn canary_key(canary: &Canary) -> (String, String) {
        (canary.namespace().unwrap_or_default(), canary.name_any())
    }

    /// Remembers that `canary` (as read) has just been written to, giving `written`; a write
    /// the API server found to change nothing leaves the version as it was and is not remembered.
    fn wrote(&self, canary: &Canary, written: &Canary) {
        if let Some(version) = canary.resource_version()
            && written.resource_version().as_ref() != Some(&version)
        {
            self.written_over
                .lock()
                .expect("never poisoned")
                .insert(Self::canary_key(canary), version);
        }
    }

    /// Drops what was remembered about Canaries for which `keep` is false (they are gone).
    fn forget_unless(&self, keep: impl Fn(&(String, String)) -> bool) {
        self.written_over
            .lock()
            .expect("never poisoned")
            .retain(|key, _| keep(key));
        self.applied
            .lock()
            .expect("never poisoned")
            .retain(|key, _| keep(key));
    }

    /// Whether `canary` is the version this operator has already written over: a change it
    /// caused elsewhere (a scaled Deployment, say) can trigger a reconcile before the Canary's own
    /// watch delivers the write, and deciding on the old status would repeat the last transition.
    fn is_stale(&self, canary: &Canary) -> bool {
        let mut written_over = self.written_over.lock().expect("never poisoned");
        let key = Self::canary_key(canary);
        match written_over.get(&key) {
            Some(version) if canary.resource_version().as_ref() == Some(version) => true,
            Some(_) => {
                written_over.remove(&key);
                false
            }
            None => false,
        }
    }
}

struct Tick<'a> {
    ctx: &'a Context,
    caches: &'a Caches,
    applied: &'a AppliedRouting,
    canary_key: (String, String),
    canary: Value,
    namespace: String,
    target: Option<Value>,
    label: Option<(String, String)>,
    tracked: BTreeSet<(ConfigKind, String)>,
}

impl Tick<'_> {
    fn query_context(&self) -> QueryContext {
        let names = Names::of(&self.canary);
        let target = self.canary["spec"]["targetRef"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let or_target = |field: &str| {
            self.canary["spec"][field]["name"]
                .as_str()
                .map_or_else(|| target.clone(), String::from)
        };
        QueryContext {
            name: self.canary["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .into(),
            namespace: self.namespace.clone(),
            service: names.apex,
            ingress: or_target("ingressRef"),
            route: or_target("routeRef"),
            target,
            ..QueryContext::default()
        }
    }

    async fn run_check(&self, canary: &Canary, check: &Check) -> Outcome {
        match check {
            Check::Metric { name } => {
                let metric = canary
                    .spec
                    .analysis()
                    .and_then(|a| a.metrics().iter().find(|m| &m.name == name));
                let Some(metric) = metric else {
                    return Outcome::Metric(MetricReading::Error(format!(
                        "metric {name} is not in analysis.metrics"
                    )));
                };
                let template = metric.template_ref.as_ref().and_then(|reference| {
                    self.caches
                        .metric_template(reference.namespace_or(&self.namespace), &reference.name)
                });
                let secret = template.as_ref().and_then(|template| {
                    let reference = template.spec.provider.secret_ref.as_ref()?;
                    let namespace = template.namespace().unwrap_or(self.namespace.clone());
                    self.caches.secret_text(&namespace, &reference.name)
                });
                let own_server = match canary.spec.metrics_server.as_deref() {
                    Some(address) => match PrometheusClient::new(address) {
                        Ok(client) => Some(client),
                        Err(error) => {
                            return Outcome::Metric(MetricReading::Error(format!(
                                "spec.metricsServer: {error}"
                            )));
                        }
                    },
                    None => None,
                };
                let inputs = MetricInputs {
                    context: self.query_context(),
                    template: template.as_deref(),
                    secret: secret.as_ref(),
                    metrics_server: own_server.as_ref().unwrap_or(&self.ctx.metrics_server),
                };
                Outcome::Metric(serin_metrics::read(metric, inputs).await)
            }
            Check::Hook { name, .. } => match self.ctx.webhooks.run_check(canary, check).await {
                Some(verdict) => verdict.outcome,
                None => Outcome::Hook(Err(format!("webhook {name} could not be run"))),
            },
        }
    }

    /// Applies a Service, DestinationRule or VirtualService, unless this operator applied the same
    /// object last time and the cache shows it unchanged since: most ticks would rewrite identical
    /// routing objects otherwise.
    async fn apply_routing(&self, api: &ApiResource, object: &Value) -> Result<(), Error> {
        let kind = object["kind"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let cached = self.caches.routing_object(kind, &self.namespace, name);
        let uid = self.canary["metadata"]["uid"].as_str().unwrap_or_default();
        let object = &match &cached {
            Some(existing) if !controlled_by(existing, uid) => adopted(object, existing),
            _ => object.clone(),
        };
        let key = format!("{kind}/{name}");
        let wanted = digest(object);
        let last = self
            .applied
            .lock()
            .expect("never poisoned")
            .get(&self.canary_key)
            .and_then(|objects| objects.get(&key).copied());
        if last == Some(wanted) {
            let mut body = object.clone();
            if let Some(fields) = body.as_object_mut() {
                fields.remove("apiVersion");
                fields.remove("kind");
            }
            if cached.is_some_and(|cached| contains(&cached, &body)) {
                return Ok(());
            }
        }
        apply(&self.ctx.client, &self.namespace, api, object).await?;
        self.applied
            .lock()
            .expect("never poisoned")
            .entry(self.canary_key.clone())
            .or_default()
            .insert(key, wanted);
        Ok(())
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

    /// The target's `autoscalerRef` HorizontalPodAutoscaler, when it has one.
    fn target_autoscaler(
        &self,
        canary: &Canary,
    ) -> Option<Arc<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>> {
        let reference = canary.spec.autoscaler_ref.as_ref()?;
        self.caches.autoscaler(&self.namespace, &reference.name)
    }

    async fn act(
        &self,
        canary: &Canary,
        action: &Action,
        routes: Option<Routes>,
    ) -> Result<(), Error> {
        if let Action::NotifyHooks { hook_type, phase } = action {
            // Post-rollout style notifications: their outcome does not change the release.
            for run in self
                .ctx
                .webhooks
                .notify_hooks(canary, *hook_type, *phase)
                .await
            {
                if let Err(error) = run.result {
                    tracing::warn!("{error}");
                }
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
        let deployment_api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
        let merge = |body: Value| Patch::Merge(body);
        let owner = owner_reference(&self.canary);
        match action {
            Action::EnsurePrimary { sync_template } => {
                self.copy_configs(!sync_template).await?;
                let template = template_for(&target["spec"], key, &primary_value, &self.tracked);
                match self.caches.deployment(namespace, &primary_name) {
                    None => {
                        let primary = primary_from(
                            target,
                            key,
                            value,
                            &owner,
                            template,
                            &self.ctx.include_label_prefix,
                        );
                        create(client, namespace, &deployments, &primary).await?;
                    }
                    Some(primary) if *sync_template => {
                        let primary = serde_json::to_value(primary)?;
                        if primary["spec"]["template"]["spec"] != template["spec"] {
                            deployment_api
                                .patch(
                                    &primary_name,
                                    &PatchParams::default(),
                                    &merge(json!({"spec": {"template": template}})),
                                )
                                .await?;
                        }
                    }
                    Some(_) => {}
                }
                if let Some(hpa) = self.target_autoscaler(canary) {
                    let primary_hpa = primary_autoscaler(canary, &hpa, &owner)?;
                    let name = primary_hpa["metadata"]["name"].as_str().unwrap_or_default();
                    if self.caches.autoscaler(namespace, name).is_none() {
                        create(client, namespace, &autoscalers, &primary_hpa).await?;
                    }
                }
            }
            Action::EnsureRouting => {
                let labels: Vec<&str> = self
                    .ctx
                    .selector_labels
                    .iter()
                    .map(String::as_str)
                    .collect();
                let service_api = resource("", "v1", "Service", "services");
                for service in services(&self.canary, target, &labels)? {
                    self.apply_routing(&service_api, &service).await?;
                }
                for rule in destination_rules(&self.canary) {
                    self.apply_routing(&cache::destination_rules(), &rule)
                        .await?;
                }
                let mut vs = virtual_service(&self.canary)?;
                if let Some(current) = routes {
                    vs["spec"] = set_routes(&self.canary, current)?;
                }
                self.apply_routing(&virtual_services(), &vs).await?;
            }
            Action::ScaleTarget(replicas) => {
                deployment_api
                    .patch(
                        target_name,
                        &PatchParams::default(),
                        &merge(json!({"spec": {"replicas": replicas}})),
                    )
                    .await?;
            }
            Action::ScalePrimary(replicas) => {
                deployment_api
                    .patch(
                        &primary_name,
                        &PatchParams::default(),
                        &merge(json!({"spec": {"replicas": replicas}})),
                    )
                    .await?;
            }
            Action::SetRoutes(next) => {
                let mut vs = virtual_service(&self.canary)?;
                vs["spec"] = set_routes(&self.canary, *next)?;
                self.apply_routing(&virtual_services(), &vs).await?;
            }
            Action::Promote { replicas } => {
                self.copy_configs(false).await?;
                let mut spec = json!({"template": template_for(&target["spec"], key, &primary_value, &self.tracked)});
                for field in [
                    "progressDeadlineSeconds",
                    "minReadySeconds",
                    "revisionHistoryLimit",
                    "strategy",
                ] {
                    if !target["spec"][field].is_null() {
                        spec[field] = target["spec"][field].clone();
                    }
                }
                if let Some(replicas) = replicas {
                    spec["replicas"] = json!(replicas);
                }
                deployment_api
                    .patch(
                        &primary_name,
                        &PatchParams::default(),
                        &merge(json!({"spec": spec})),
                    )
                    .await?;
            }
            Action::SyncPrimaryAutoscaler => {
                if let Some(hpa) = self.target_autoscaler(canary) {
                    let primary_hpa = primary_autoscaler(canary, &hpa, &owner)?;
                    apply(client, namespace, &autoscalers, &primary_hpa).await?;
                }
            }
            Action::NotifyHooks { .. } => {}
        }
        Ok(())
    }
}

fn canary_id(canary: &Canary) -> String {
    format!(
        "{}.{}",
        canary.name_any(),
        canary.namespace().unwrap_or_default()
    )
}

/// Reconciles one Canary; a failure is shown in its status and as a Warning event, then retried.
#[tracing::instrument(name = "reconcile", skip_all, fields(canary = %canary.name_any(), namespace = canary.namespace().unwrap_or_default()))]
async fn reconcile(canary: Arc<Canary>, shared: Arc<Shared>) -> Result<Requeue, Error> {
    shared
        .filled
        .get_or_init(|| shared.caches.wait_until_ready(Duration::from_secs(10)))
        .await;
    if shared.is_stale(&canary) {
        // The Canary's watch event for that write triggers the next reconcile; this is a backstop.
        return Ok(Requeue::requeue(Duration::from_secs(2)));
    }
    shared.ctx.metrics.count_reconcile();
    let result = if canary.metadata.deletion_timestamp.is_some() {
        finalize(&canary, &shared).await
    } else {
        // One write per reconcile: a finalizer change is followed by a tick on the next one.
        match sync_finalizer(&canary, &shared).await {
            Ok(false) => tick(&canary, &shared).await,
            Ok(true) => Ok(Requeue::requeue(Duration::from_secs(2))),
            Err(error) => Err(error),
        }
    };
    if let Err(error) = &result {
        report_failure(&canary, &shared, error).await;
    }
    result
}

/// Adds the finalizer when `revertOnDeletion` is set, removes it when it is not; returns whether
/// it wrote the Canary.
async fn sync_finalizer(canary: &Canary, shared: &Shared) -> Result<bool, Error> {
    let ctx = &shared.ctx;
    let wanted = canary.spec.revert_on_deletion == Some(true);
    let finalizers = canary.finalizers();
    let present = finalizers.iter().any(|f| f == FINALIZER);
    if wanted == present {
        return Ok(false);
    }
    let mut next: Vec<String> = finalizers
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    if wanted {
        next.push(FINALIZER.into());
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
    shared.wrote(canary, &written);
    Ok(true)
}

/// A Canary with `revertOnDeletion` is being deleted: give the target its replicas back (so the
/// workload keeps serving once the primary is garbage-collected), route everything to it through
/// the apex Service, then let the Canary go.
async fn finalize(canary: &Canary, shared: &Shared) -> Result<Requeue, Error> {
    if !canary.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Requeue::await_change());
    }
    let ctx = &shared.ctx;
    let namespace = canary.namespace().unwrap_or_default();
    let target_name = &canary.spec.target_ref.name;
    let canaries: Api<Canary> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut canary_json = serde_json::to_value(canary)?;
    canary_json["apiVersion"] = json!("serin.dev/v1beta1");
    let apex = Names::of(&canary_json).apex;
    let phase = canary.status.as_ref().and_then(|s| s.phase);
    if phase != Some(Phase::Terminating) {
        let written = canaries
            .patch_status(
                &canary.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Terminating"}})),
            )
            .await?;
        shared.wrote(canary, &written);
        record(
            ctx,
            canary,
            EventType::Normal,
            serin_core::plan::reason::TERMINATING,
            &format!("Terminating canary {}", canary_id(canary)),
        )
        .await;
    }
    if let Some(target) = shared.caches.deployment(&namespace, target_name) {
        let primary_replicas = shared
            .caches
            .deployment(&namespace, &format!("{target_name}-primary"))
            .and_then(|p| p.spec.and_then(|s| s.replicas))
            .filter(|r| *r > 0)
            .unwrap_or(1);
        if target.spec.as_ref().and_then(|s| s.replicas) != Some(primary_replicas) {
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
    restore_virtual_service(canary, shared, &apex).await?;
    let finalizers: Vec<String> = canary
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    canaries
        .patch(
            &canary.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
        )
        .await?;
    let gone = Shared::canary_key(canary);
    shared.forget_unless(|key| *key != gone);
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

/// Gives the VirtualService `name` its original spec back when the Canary adopted it (does not
/// own it); one the Canary owns goes with it.
async fn restore_virtual_service(
    canary: &Canary,
    shared: &Shared,
    name: &str,
) -> Result<(), Error> {
    let namespace = canary.namespace().unwrap_or_default();
    let Some(cached) = shared.caches.virtual_service(&namespace, name) else {
        return Ok(());
    };
    let current = serde_json::to_value(&*cached)?;
    let uid = canary.metadata.uid.as_deref().unwrap_or_default();
    if controlled_by(&current, uid) {
        return Ok(());
    }
    let Some(spec) = original_spec(&current) else {
        tracing::warn!(
            "VirtualService {name}.{namespace}: original configuration not found, unable to revert"
        );
        return Ok(());
    };
    let mut restored = (*cached).clone();
    restored.data["spec"] = spec;
    if let Some(annotations) = restored.metadata.annotations.as_mut() {
        annotations.remove(ORIGINAL_CONFIGURATION);
    }
    let api: Api<DynamicObject> =
        Api::namespaced_with(shared.ctx.client.clone(), &namespace, &virtual_services());
    api.replace(name, &PostParams::default(), &restored).await?;
    Ok(())
}

/// Shows a failed reconcile in the Canary's status message and as a Warning event, once per
/// distinct message.
async fn report_failure(canary: &Canary, shared: &Shared, error: &Error) {
    let ctx = &shared.ctx;
    let message = format!("reconcile failed, retrying: {error}");
    tracing::error!("{message}");
    if canary.status.as_ref().and_then(|s| s.message.as_deref()) == Some(message.as_str()) {
        return;
    }
    let canaries: Api<Canary> =
        Api::namespaced(ctx.client.clone(), &canary.namespace().unwrap_or_default());
    if let Ok(written) = canaries
        .patch_status(
            &canary.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"message": message}})),
        )
        .await
    {
        shared.wrote(canary, &written);
    }
    record(
        ctx,
        canary,
        EventType::Warning,
        serin_core::plan::reason::RECONCILE_FAILED,
        &message,
    )
    .await;
}

/// One tick: observe, decide, act, record.
async fn tick(canary: &Arc<Canary>, shared: &Shared) -> Result<Requeue, Error> {
    let started = Instant::now();
    let ctx = &shared.ctx;
    let caches = &shared.caches;
    let namespace = canary.namespace().unwrap_or_else(|| "default".into());
    let mut canary_json = serde_json::to_value(&**canary)?;
    canary_json["apiVersion"] = json!("serin.dev/v1beta1");
    let target_name = canary.spec.target_ref.name.clone();
    let target = caches.deployment(&namespace, &target_name);
    let primary = caches.deployment(&namespace, &format!("{target_name}-primary"));
    let names = Names::of(&canary_json);
    let routes = match caches.virtual_service(&namespace, &names.apex) {
        Some(vs) => get_routes(&canary_json, &serde_json::to_value(&*vs)?).ok(),
        None => None,
    };
    let configs = match (&target, ctx.config_tracking) {
        (Some(target), true) => configs::observe(caches, &namespace, target),
        _ => Ok(BTreeMap::new()),
    };
    let target_json = target.as_ref().map(serde_json::to_value).transpose()?;
    let labels: Vec<&str> = ctx.selector_labels.iter().map(String::as_str).collect();
    let label = target_json.as_ref().map(|t| selector_label(t, &labels));
    let mut blocked = match &label {
        Some(Err(error)) => Some(error.to_string()),
        _ => template_problem(canary, caches, &namespace),
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
        tracked: configs
            .as_ref()
            .map(configs::tracked_names)
            .unwrap_or_default(),
    };
    let mut observation = Observation {
        canary: (**canary).clone(),
        target,
        primary,
        configs,
        routes,
        autoscaler_min_replicas,
        blocked,
        verdicts: Vec::new(),
    };
    let now = now();
    let plan = loop {
        match serin_core::decide(&observation, now) {
            Decision::Check(check) => {
                let outcome = tick.run_check(canary, &check).await;
                if let (Check::Metric { name }, Outcome::Metric(MetricReading::Value(value))) =
                    (&check, &outcome)
                {
                    ctx.metrics
                        .record_metric(&target_name, &namespace, name, *value);
                }
                observation.verdicts.push(Verdict { check, outcome });
            }
            Decision::Plan(plan) => break *plan,
        }
    };
    for action in &plan.actions {
        tick.act(canary, action, routes).await?;
    }
    if canary.status.as_ref() != Some(&plan.status) {
        let canaries: Api<Canary> = Api::namespaced(ctx.client.clone(), &namespace);
        let written = canaries
            .patch_status(
                &canary.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status_patch(
                    &serde_json::to_value(&canary.status)?,
                    &serde_json::to_value(&plan.status)?,
                )})),
            )
            .await?;
        shared.wrote(canary, &written);
    }
    record_plan(canary, shared, &plan, started).await;
    Ok(match plan.requeue_after {
        Some(after) => Requeue::requeue(after),
        None => Requeue::await_change(),
    })
}

/// A JSON merge patch from `old` to `new`: what `new` holds, plus `null` for every field `old`
/// has and `new` dropped (a merge patch leaves absent fields as they are, so a cleared
/// `status.message` would otherwise stay).
fn status_patch(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            let mut patch = serde_json::Map::new();
            for (key, value) in new {
                let value = match old.get(key) {
                    Some(before) => status_patch(before, value),
                    None => value.clone(),
                };
                patch.insert(key.clone(), value);
            }
            for key in old.keys().filter(|key| !new.contains_key(*key)) {
                patch.insert(key.clone(), Value::Null);
            }
            Value::Object(patch)
        }
        _ => new.clone(),
    }
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

/// Everything a tick tells: events (to the API, the log and the event webhooks), alerts, and the
/// operator's metrics.
async fn record_plan(canary: &Arc<Canary>, shared: &Shared, plan: &Plan, started: Instant) {
    let ctx = &shared.ctx;
    let namespace = canary.namespace().unwrap_or_default();
    let target = &canary.spec.target_ref.name;
    let old_phase = canary.status.as_ref().and_then(|s| s.phase);
    let phase = plan.status.phase;
    ctx.metrics
        .record_tick(target, &namespace, phase, plan.status.canary_weight);
    if old_phase == Some(Phase::Progressing) {
        ctx.metrics
            .observe_duration(target, &namespace, started.elapsed().as_secs_f64());
    }
    if phase != old_phase && matches!(phase, Some(Phase::Succeeded | Phase::Failed)) {
        let strategy = match canary.spec.analysis().map(|a| a.strategy()) {
            Some(serin_api::Strategy::AbTesting) => "ab-testing",
            Some(serin_api::Strategy::BlueGreen) => "blue-green",
            _ => "canary",
        };
        let analysis = if canary.spec.skips_analysis() {
            "skipped"
        } else {
            "completed"
        };
        ctx.metrics.record_release(
            target,
            &namespace,
            phase == Some(Phase::Succeeded),
            strategy,
            analysis,
        );
    }
    for event in &plan.events {
        record(ctx, canary, event.type_, event.reason, &event.message).await;
    }
    if plan.events.is_empty() && plan.alerts.is_empty() {
        return;
    }
    // Webhooks and chat services can be slow or down: they must not hold the next tick back.
    let mut updated = (**canary).clone();
    updated.status = Some(plan.status.clone());
    let events = plan.events.clone();
    let alerts = plan.alerts.clone();
    let ctx = shared.ctx.clone();
    let caches = shared.caches.clone();
    // The task keeps the reconcile's span, so its log lines name the Canary.
    let span = tracing::Span::current();
    tokio::spawn(tracing::Instrument::instrument(
        async move {
            for event in &events {
                let millis = now().as_millisecond();
                for run in ctx
                    .webhooks
                    .send_event(&updated, event, millis, ctx.event_webhook.as_deref())
                    .await
                {
                    if let Err(error) = run.result {
                        tracing::warn!("event webhook: {error}");
                    }
                }
            }
            for alert in &alerts {
                send_alert(&ctx, &caches, &updated, alert).await;
            }
        },
        span,
    ));
}

/// Posts `alert` to every AlertProvider of the canary whose severity admits it.
async fn send_alert(ctx: &Context, caches: &Caches, canary: &Canary, alert: &serin_core::Alert) {
    let namespace = canary.namespace().unwrap_or_default();
    let message =
        serin_webhooks::alert::AlertMessage::from_alert(canary, alert, ctx.cluster_name.as_deref());
    for recipient in serin_webhooks::alert::recipients(canary, alert.severity) {
        let reference = &recipient.provider_ref;
        let provider_namespace = reference.namespace_or(&namespace);
        let Some(provider) = caches.alert_provider(provider_namespace, &reference.name) else {
            tracing::error!(
                "alert {}: AlertProvider {}.{provider_namespace} not found; create it or fix spec.analysis.alerts[].providerRef",
                recipient.name,
                reference.name
            );
            continue;
        };
        let secret = provider
            .spec
            .secret_ref
            .as_ref()
            .and_then(|s| caches.secret_text(provider_namespace, &s.name));
        let key = |k: &str| secret.as_ref().and_then(|s| s.get(k)).map(String::as_str);
        let sent = match serin_webhooks::alert::Notifier::from_provider(
            &reference.name,
            &provider.spec,
            key("address"),
            key("token"),
        ) {
            Ok(notifier) => ctx.webhooks.post_alert(&notifier, &message).await,
            Err(error) => Err(error),
        };
        if let Err(error) = sent {
            tracing::error!("alert {}: {error}", recipient.name);
        }
    }
}

/// Writes a core/v1 Event about `canary` (one per message, as Flagger's recorder does, so
/// `kubectl describe canary` lists every step) and logs it. An event that cannot be written is
/// logged and does not stop the release. `reason` says what happened (see
/// `serin_core::plan::reason`).
async fn record(ctx: &Context, canary: &Canary, type_: EventType, reason: &str, message: &str) {
    let kind = match type_ {
        EventType::Normal => {
            tracing::info!(reason, "{message}");
            "Normal"
        }
        EventType::Warning => {
            tracing::warn!(reason, "{message}");
            "Warning"
        }
    };
    let namespace = canary.namespace().unwrap_or_else(|| "default".into());
    let now = now().to_string();
    let object = serde_json::from_value::<k8s_openapi::api::core::v1::Event>(json!({
        "metadata": {"name": format!("{}.{}", canary.name_any(), uuid::Uuid::new_v4().simple()),
                     "namespace": namespace},
        "involvedObject": {"apiVersion": "serin.dev/v1beta1", "kind": "Canary",
                           "name": canary.name_any(), "namespace": namespace,
                           "uid": canary.uid(), "resourceVersion": canary.resource_version()},
        "reason": reason, "message": message, "type": kind,
        "source": {"component": "serin"}, "reportingComponent": "serin",
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    }));
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(ctx.client.clone(), &namespace);
    let written = match object {
        Ok(object) => events
            .create(&Default::default(), &object)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Err(error) => Err(error.to_string()),
    };
    if let Err(error) = written {
        tracing::error!("writing event: {error}");
    }
}

fn retry_later(_canary: Arc<Canary>, _error: &Error, _shared: Arc<Shared>) -> Requeue {
    Requeue::requeue(Duration::from_secs(5))
}

/// The Canaries that point at `namespace`/`name` as target or primary.
fn canaries_of_deployment(
    canaries: &kube::runtime::reflector::Store<Canary>,
    namespace: Option<String>,
    name: &str,
) -> Vec<ObjectRef<Canary>> {
    canaries
        .state()
        .into_iter()
        .filter(|canary| {
            let target = &canary.spec.target_ref.name;
            canary.namespace() == namespace
                && (target == name || format!("{target}-primary") == name)
        })
        .map(|canary| ObjectRef::from_obj(&*canary))
        .collect()
}

/// The Canaries whose metrics reference `template`.
fn canaries_of_template(
    canaries: &kube::runtime::reflector::Store<Canary>,
    template: &MetricTemplate,
) -> Vec<ObjectRef<Canary>> {
    let name = template.name_any();
    let template_namespace = template.namespace();
    canaries
        .state()
        .into_iter()
        .filter(|canary| {
            canary.spec.analysis().is_some_and(|analysis| {
                analysis.metrics().iter().any(|metric| {
                    metric.template_ref.as_ref().is_some_and(|reference| {
                        let canary_namespace = canary.namespace().unwrap_or_default();
                        reference.name == name
                            && Some(reference.namespace_or(&canary_namespace))
                                == template_namespace.as_deref()
                    })
                })
            })
        })
        .map(|canary| ObjectRef::from_obj(&*canary))
        .collect()
}

/// The Canaries whose target uses the config `kind`/`name`.
fn canaries_of_config(
    canaries: &kube::runtime::reflector::Store<Canary>,
    caches: &Caches,
    namespace: Option<String>,
    kind: ConfigKind,
    name: &str,
) -> Vec<ObjectRef<Canary>> {
    let Some(namespace) = namespace else {
        return Vec::new();
    };
    canaries
        .state()
        .into_iter()
        .filter(|canary| canary.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|canary| {
            caches
                .deployment(&namespace, &canary.spec.target_ref.name)
                .and_then(|target| target.spec.and_then(|s| s.template.spec))
                .is_some_and(|pod| {
                    serin_core::revision::config_refs(&pod)
                        .iter()
                        .any(|r| r.kind == kind && r.name == name)
                })
        })
        .map(|canary| ObjectRef::from_obj(&*canary))
        .collect()
}

/// Runs the controller over the Canaries of `namespace` (all namespaces when `None`) until the
/// stream of changes ends.
pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let canaries: Api<Canary> = match &namespace {
        Some(namespace) => Api::namespaced(ctx.client.clone(), namespace),
        None => Api::all(ctx.client.clone()),
    };
    let (caches, feeds) = Caches::new(&ctx.client, namespace.as_deref());
    let controller = Controller::new(canaries, watcher::Config::default())
        .with_config(controller::Config::default().concurrency(ctx.concurrency.max(1)));
    let store = controller.store();
    let mut background = tokio::task::JoinSet::new();
    for feed in feeds.passive {
        background.spawn(feed.for_each(|_| async {}));
    }
    let (deployment_canaries, config_canaries, secret_canaries, hpa_canaries, template_canaries) = (
        store.clone(),
        store.clone(),
        store.clone(),
        store.clone(),
        store.clone(),
    );
    let (config_caches, secret_caches) = (caches.clone(), caches.clone());
    let shared = Arc::new(Shared {
        ctx,
        caches,
        filled: tokio::sync::OnceCell::new(),
        written_over: Default::default(),
        applied: Default::default(),
    });
    let totals_store = store.clone();
    let totals_shared = shared.clone();
    background.spawn(async move {
        loop {
            let mut totals: BTreeMap<String, usize> = BTreeMap::new();
            let mut present = std::collections::HashSet::new();
            for canary in totals_store.state() {
                *totals
                    .entry(canary.namespace().unwrap_or_default())
                    .or_default() += 1;
                present.insert(Shared::canary_key(&canary));
            }
            totals_shared.ctx.metrics.set_totals(&totals);
            // Canaries deleted without a finalizer leave nothing else to clean.
            totals_shared.forget_unless(|key| present.contains(key));
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
    });
    controller
        .watches_stream(feeds.deployments, move |deployment: Deployment| {
            canaries_of_deployment(
                &deployment_canaries,
                deployment.namespace(),
                &deployment.name_any(),
            )
        })
        .watches_stream(feeds.config_maps, move |config_map| {
            canaries_of_config(
                &config_canaries,
                &config_caches,
                config_map.namespace(),
                ConfigKind::ConfigMap,
                &config_map.name_any(),
            )
        })
        .watches_stream(feeds.secrets, move |secret| {
            canaries_of_config(
                &secret_canaries,
                &secret_caches,
                secret.namespace(),
                ConfigKind::Secret,
                &secret.name_any(),
            )
        })
        .watches_stream(
            feeds.autoscalers,
            move |hpa: k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler| {
                let name = hpa.name_any();
                hpa_canaries
                    .state()
                    .into_iter()
                    .filter(|canary| {
                        canary.namespace() == hpa.namespace()
                            && canary
                                .spec
                                .autoscaler_ref
                                .as_ref()
                                .is_some_and(|r| r.name == name)
                    })
                    .map(|canary| ObjectRef::from_obj(&*canary))
                    .collect::<Vec<_>>()
            },
        )
        .watches_stream(feeds.metric_templates, move |template: MetricTemplate| {
            canaries_of_template(&template_canaries, &template)
        })
        .run(reconcile, retry_later, shared)
        .for_each(|_| async {})
        .await;
    background.abort_all();
}

#[cfg(test)]
mod tests {
    use super::contains;
    use serde_json::json;

    #[test]
    fn a_status_patch_clears_what_the_new_status_dropped() {
        let old = json!({"phase": "Initializing", "message": "MetricTemplate x.test not found",
                         "handledRequests": {"promote": "1", "abort": "2"}});
        let new = json!({"phase": "Initialized", "handledRequests": {"promote": "1"}});
        assert_eq!(
            super::status_patch(&old, &new),
            json!({"phase": "Initialized", "message": null,
                   "handledRequests": {"promote": "1", "abort": null}})
        );
        assert_eq!(super::status_patch(&json!(null), &new), new);
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
