//! One reconcile of a Canary: observe → decide → act → record.

use crate::workloads::{primary_from, template_for};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::runtime::controller::{Action as Requeue, Controller};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use serin_api::{Canary, MetricTemplate};
use serin_core::plan::{Action, Check, Decision, EventType, Observation, Outcome, Routes, Verdict};
use serin_metrics::{MetricInputs, PrometheusClient, QueryContext};
use serin_router::istio::{destination_rules, get_routes, set_routes, virtual_service};
use serin_router::services::{selector_label, services};
use serin_router::{Names, owner_reference};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The field manager of everything the operator writes.
pub const FIELD_MANAGER: &str = "serin";

/// What every reconcile shares.
pub struct Context {
    /// The Kubernetes client.
    pub client: Client,
    /// The metrics server for builtin and inline metric queries (`--metrics-server`).
    pub metrics_server: PrometheusClient,
    /// Labels that identify a target's pods, in order of preference (`--selector-labels`).
    pub selector_labels: Vec<String>,
    /// Calls the Canaries' webhooks (proxy settings from the environment by default).
    pub webhooks: serin_webhooks::WebhookClient,
}

impl Context {
    /// A context for `client`, querying `metrics_server`.
    pub fn new(client: Client, metrics_server: PrometheusClient) -> Self {
        Context {
            client,
            metrics_server,
            selector_labels: serin_router::services::DEFAULT_SELECTOR_LABELS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            webhooks: serin_webhooks::WebhookClient::new(serin_webhooks::ClientOptions::from_env()),
        }
    }
}

/// Why a reconcile stopped early (it is retried).
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

fn virtual_services() -> ApiResource {
    resource(
        "networking.istio.io",
        "v1beta1",
        "VirtualService",
        "virtualservices",
    )
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

fn now() -> Timestamp {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    Timestamp::from_millisecond(millis).unwrap_or(Timestamp::UNIX_EPOCH)
}

struct Tick<'a> {
    ctx: &'a Context,
    canary: Value,
    namespace: String,
    target: Option<Value>,
    label: Option<(String, String)>,
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
                    .analysis
                    .as_ref()
                    .and_then(|a| a.metrics.as_ref())
                    .and_then(|metrics| metrics.iter().find(|m| &m.name == name));
                let Some(metric) = metric else {
                    return Outcome::Metric(serin_core::plan::MetricReading::Error(format!(
                        "metric {name} is not in analysis.metrics"
                    )));
                };
                let template = match &metric.template_ref {
                    Some(reference) => {
                        let namespace = reference
                            .namespace
                            .clone()
                            .unwrap_or(self.namespace.clone());
                        let api: Api<MetricTemplate> =
                            Api::namespaced(self.ctx.client.clone(), &namespace);
                        api.get_opt(&reference.name).await.ok().flatten()
                    }
                    None => None,
                };
                let inputs = MetricInputs {
                    context: self.query_context(),
                    template: template.as_ref(),
                    secret: None,
                    metrics_server: &self.ctx.metrics_server,
                };
                Outcome::Metric(serin_metrics::read(metric, inputs).await)
            }
            Check::Hook { name, .. } => match self.ctx.webhooks.run_check(canary, check).await {
                Some(verdict) => verdict.outcome,
                None => Outcome::Hook(Err(format!("webhook {name} could not be run"))),
            },
        }
    }

    async fn act(
        &self,
        canary: &Canary,
        action: &Action,
        routes: Option<Routes>,
    ) -> Result<(), Error> {
        if let Action::NotifyHooks { hook_type, phase } = action {
            // Post-rollout style notifications: their outcome does not change the release.
            let _ = self
                .ctx
                .webhooks
                .notify_hooks(canary, *hook_type, *phase)
                .await;
            return Ok(());
        }
        let client = &self.ctx.client;
        let namespace = &self.namespace;
        let deployments = resource("apps", "v1", "Deployment", "deployments");
        let (Some(target), Some((key, value))) = (&self.target, &self.label) else {
            return Ok(());
        };
        let target_name = target["metadata"]["name"].as_str().unwrap_or_default();
        let primary_name = format!("{target_name}-primary");
        let deployment_api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
        let merge = |body: Value| Patch::Merge(body);
        match action {
            Action::EnsurePrimary { sync_template } => {
                let existing = deployment_api.get_opt(&primary_name).await?;
                match existing {
                    None => {
                        let primary =
                            primary_from(target, key, value, &owner_reference(&self.canary));
                        apply(client, namespace, &deployments, &primary).await?;
                    }
                    Some(primary) if *sync_template => {
                        let primary = serde_json::to_value(primary)?;
                        if primary["spec"]["template"]["spec"] != target["spec"]["template"]["spec"]
                        {
                            let template =
                                template_for(&target["spec"], key, &format!("{value}-primary"));
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
            }
            Action::EnsureRouting => {
                let labels: Vec<&str> = self
                    .ctx
                    .selector_labels
                    .iter()
                    .map(String::as_str)
                    .collect();
                for service in services(&self.canary, target, &labels)? {
                    apply(
                        client,
                        namespace,
                        &resource("", "v1", "Service", "services"),
                        &service,
                    )
                    .await?;
                }
                let rules = resource(
                    "networking.istio.io",
                    "v1beta1",
                    "DestinationRule",
                    "destinationrules",
                );
                for rule in destination_rules(&self.canary) {
                    apply(client, namespace, &rules, &rule).await?;
                }
                let mut vs = virtual_service(&self.canary)?;
                if let Some(current) = routes {
                    vs["spec"] = set_routes(&self.canary, current)?;
                }
                apply(client, namespace, &virtual_services(), &vs).await?;
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
                apply(client, namespace, &virtual_services(), &vs).await?;
            }
            Action::Promote { replicas } => {
                let mut spec = json!({"template": template_for(&target["spec"], key, &format!("{value}-primary"))});
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
            // Not built yet: the primary autoscaler (see the README). Notifications are sent above.
            Action::SyncPrimaryAutoscaler | Action::NotifyHooks { .. } => {}
        }
        Ok(())
    }
}

/// Reconciles one Canary.
pub async fn reconcile(canary: Arc<Canary>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let namespace = canary.namespace().unwrap_or_else(|| "default".into());
    let mut canary_json = serde_json::to_value(&*canary)?;
    canary_json["apiVersion"] = json!("serin.dev/v1beta1");
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &namespace);
    let target_name = canary.spec.target_ref.name.clone();
    let target = deployments.get_opt(&target_name).await?;
    let primary = deployments
        .get_opt(&format!("{target_name}-primary"))
        .await?;
    let vs_api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &virtual_services());
    let names = Names::of(&canary_json);
    let routes = match vs_api.get_opt(&names.apex).await? {
        Some(vs) => get_routes(&canary_json, &serde_json::to_value(vs)?).ok(),
        None => None,
    };
    let target_json = target.as_ref().map(serde_json::to_value).transpose()?;
    let labels: Vec<&str> = ctx.selector_labels.iter().map(String::as_str).collect();
    let label = target_json.as_ref().map(|t| selector_label(t, &labels));
    let blocked = match &label {
        Some(Err(error)) => Some(error.to_string()),
        _ => None,
    };
    let tick = Tick {
        ctx: &ctx,
        canary: canary_json,
        namespace: namespace.clone(),
        target: target_json,
        label: label.and_then(Result::ok),
    };
    let mut observation = Observation {
        canary: (*canary).clone(),
        target,
        primary,
        configs: Ok(BTreeMap::new()),
        routes,
        autoscaler_min_replicas: None,
        blocked,
        verdicts: Vec::new(),
    };
    let now = now();
    let plan = loop {
        match serin_core::decide(&observation, now) {
            Decision::Check(check) => {
                let outcome = tick.run_check(&canary, &check).await;
                observation.verdicts.push(Verdict { check, outcome });
            }
            Decision::Plan(plan) => break *plan,
        }
    };
    for action in &plan.actions {
        tick.act(&canary, action, routes).await?;
    }
    if canary.status.as_ref() != Some(&plan.status) {
        let canaries: Api<Canary> = Api::namespaced(ctx.client.clone(), &namespace);
        canaries
            .patch_status(
                &canary.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": plan.status})),
            )
            .await?;
    }
    for event in &plan.events {
        // An event that cannot be written must not stop the release.
        let _ = record_event(&ctx.client, &canary, event).await;
    }
    Ok(match plan.requeue_after {
        Some(after) => Requeue::requeue(after),
        None => Requeue::await_change(),
    })
}

/// Writes a core/v1 Event about `canary`, one per message as Flagger's recorder does (so
/// `kubectl describe canary` lists every step).
async fn record_event(
    client: &Client,
    canary: &Canary,
    event: &serin_core::plan::Event,
) -> Result<(), Error> {
    let namespace = canary.namespace().unwrap_or_else(|| "default".into());
    let now = now().to_string();
    let kind = match event.type_ {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    };
    let object: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": format!("{}.{}", canary.name_any(), uuid::Uuid::new_v4().simple()),
                     "namespace": namespace},
        "involvedObject": {"apiVersion": "serin.dev/v1beta1", "kind": "Canary",
                           "name": canary.name_any(), "namespace": namespace,
                           "uid": canary.uid(), "resourceVersion": canary.resource_version()},
        "reason": event.reason, "message": event.message, "type": kind,
        "source": {"component": "serin"}, "reportingComponent": "serin",
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    }))?;
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(client.clone(), &namespace);
    events.create(&Default::default(), &object).await?;
    Ok(())
}

fn retry_later(_canary: Arc<Canary>, error: &Error, _ctx: Arc<Context>) -> Requeue {
    eprintln!("reconcile failed: {error}");
    Requeue::requeue(Duration::from_secs(5))
}

/// Runs the controller over the Canaries of `namespace` (all namespaces when `None`) until the
/// stream of changes ends.
pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let canaries: Api<Canary> = match &namespace {
        Some(namespace) => Api::namespaced(ctx.client.clone(), namespace),
        None => Api::all(ctx.client.clone()),
    };
    let deployments: Api<Deployment> = match &namespace {
        Some(namespace) => Api::namespaced(ctx.client.clone(), namespace),
        None => Api::all(ctx.client.clone()),
    };
    let controller = Controller::new(canaries, watcher::Config::default());
    let cache = controller.store();
    // A change of a target (or its primary) wakes the Canaries that point at it.
    controller
        .watches(
            deployments,
            watcher::Config::default(),
            move |deployment: Deployment| {
                let name = deployment.name_any();
                let namespace = deployment.namespace();
                cache
                    .state()
                    .into_iter()
                    .filter(|canary| {
                        let target = &canary.spec.target_ref.name;
                        canary.namespace() == namespace
                            && (*target == name || format!("{target}-primary") == name)
                    })
                    .map(|canary| kube::runtime::reflector::ObjectRef::from_obj(&*canary))
                    .collect::<Vec<_>>()
            },
        )
        .run(reconcile, retry_later, ctx)
        .for_each(|_| async {})
        .await;
}
