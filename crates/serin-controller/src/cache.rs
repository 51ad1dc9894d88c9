//! The operator's view of the cluster: one watch per kind feeds an in-memory store, so a tick reads
//! its Deployments, configs, autoscalers, routes, templates and providers without an API request.

use crate::json_store::{Dictionary, Footprint, JsonStore, Ownership};
use crate::raw_object::RawObject;
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serin_api::{AlertProvider, MetricTemplate};
use std::fmt::Debug;
use std::time::Duration;

/// The Istio VirtualService resource (`networking.istio.io/v1beta1`).
pub fn virtual_services() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("networking.istio.io", "v1beta1", "VirtualService"),
        "virtualservices",
    )
}

/// The Istio DestinationRule resource (`networking.istio.io/v1beta1`).
pub fn destination_rules() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("networking.istio.io", "v1beta1", "DestinationRule"),
        "destinationrules",
    )
}

/// The Gateway API HTTPRoute resource (`gateway.networking.k8s.io/v1`).
pub fn http_routes() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "HTTPRoute"),
        "httproutes",
    )
}

/// KEDA's ScaledObject resource (`keda.sh/v1alpha1`).
pub fn scaled_objects() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject"),
        "scaledobjects",
    )
}

/// Whether the API server serves KEDA's ScaledObjects (its CRD is installed), so that a cluster
/// without KEDA is not watched for them.
pub async fn serves_scaled_objects(client: &Client) -> bool {
    let request = http::Request::get("/apis/keda.sh/v1alpha1").body(Vec::new());
    let Ok(request) = request else {
        return false;
    };
    match client
        .request::<k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList>(request)
        .await
    {
        Ok(list) => list.resources.iter().any(|r| r.name == "scaledobjects"),
        Err(_) => false,
    }
}

/// In-memory copies of every object a tick reads, kept current by watches.
#[derive(Clone)]
pub struct Caches {
    /// Targets and primaries.
    pub deployments: JsonStore,
    /// DaemonSet targets and primaries.
    pub daemon_sets: JsonStore,
    /// ConfigMaps the targets use (and their `-primary` copies).
    pub config_maps: Store<ConfigMap>,
    /// Secrets the targets, MetricTemplates and AlertProviders use.
    pub secrets: Store<Secret>,
    /// Targets' autoscalers and their `-primary` copies.
    pub autoscalers: Store<HorizontalPodAutoscaler>,
    /// The VirtualServices whose weights a tick reads back.
    pub virtual_services: JsonStore,
    /// The apex, `-primary` and `-canary` Services, compared before they are applied.
    pub services: JsonStore,
    /// The DestinationRules, compared before they are applied.
    pub destination_rules: JsonStore,
    /// The HTTPRoutes of the Gateway API router, whose weights and acceptance a tick reads back.
    pub http_routes: JsonStore,
    /// MetricTemplates referenced by analyses.
    pub metric_templates: Store<MetricTemplate>,
    /// AlertProviders referenced by alerts.
    pub alert_providers: Store<AlertProvider>,
    /// KEDA ScaledObjects of targets and their `-primary` copies; `None` where KEDA is not
    /// installed.
    pub scaled_objects: Option<JsonStore>,
}

/// A watch stream that keeps a store: the objects it touches (changed or deleted) come out.
pub type Feed<K> = std::pin::Pin<Box<dyn Stream<Item = Result<K, watcher::Error>> + Send>>;

/// The feeds behind [`Caches`]: the controller either triggers on them or just drains them.
pub struct Feeds {
    /// Deployments (trigger the Canaries of a target or primary).
    pub deployments: Feed<RawObject<Deployment>>,
    /// DaemonSets (trigger the Canaries of a target or primary).
    pub daemon_sets: Feed<RawObject<DaemonSet>>,
    /// ConfigMaps (trigger the Canaries whose target uses them).
    pub config_maps: Feed<ConfigMap>,
    /// Secrets (trigger the Canaries whose target uses them).
    pub secrets: Feed<Secret>,
    /// Autoscalers (trigger the Canaries that reference them).
    pub autoscalers: Feed<HorizontalPodAutoscaler>,
    /// MetricTemplates (trigger the Canaries whose metrics reference them, so a Canary waiting for a
    /// missing or invalid template moves on once it is fixed).
    pub metric_templates: Feed<MetricTemplate>,
    /// AlertProviders (trigger the Canaries whose alerts reference them, so a Canary waiting for a
    /// missing or invalid provider moves on once it is fixed).
    pub alert_providers: Feed<AlertProvider>,
    /// HTTPRoutes (trigger the Canary whose apex they are, so a release waiting for its Gateway
    /// to accept the route moves on as soon as it does).
    pub http_routes: Feed<DynamicObject>,
    /// The feeds only read at tick time: VirtualServices, Services, DestinationRules.
    pub passive: Vec<std::pin::Pin<Box<dyn Stream<Item = ()> + Send>>>,
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    }
}

/// A store and the watch that fills it. managedFields are dropped before caching: the operator
/// never reads them and they are a large share of every object's size.
fn feed<K>(api: Api<K>, dyntype: K::DynamicType) -> (Store<K>, Feed<K>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    let writer = reflector::store::Writer::new(dyntype);
    let store = writer.as_reader();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|object: &mut K| object.meta_mut().managed_fields = None)
        .reflect(writer)
        .touched_objects();
    (store, Box::pin(stream))
}

/// [`feed`] into a [`JsonStore`]: for the kinds a tick reads an object or two of, where the
/// decoded form would take several times the memory; their text is compressed against
/// `dictionary`.
fn json_feed<K>(api: Api<K>, dictionary: Dictionary) -> (JsonStore, Feed<K>)
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug + Send + 'static,
{
    let (store, mut writer) = JsonStore::new(dictionary);
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|object: &mut K| object.meta_mut().managed_fields = None)
        .inspect(move |event| {
            if let Ok(event) = event {
                writer.apply(event);
            }
        })
        .touched_objects();
    (store, Box::pin(stream))
}

/// [`json_feed`] for a kind with Rust types, read as [`RawObject`]s: the store keeps the text that
/// came, without decoding the object into its type and encoding it again.
fn raw_feed<K>(api: Api<RawObject<K>>, dictionary: Dictionary) -> (JsonStore, Feed<RawObject<K>>)
where
    K: Resource<DynamicType = ()> + 'static,
{
    let (store, mut writer) = JsonStore::new(dictionary);
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .inspect(move |event| {
            if let Ok(event) = event {
                writer.apply_raw(event);
            }
        })
        .touched_objects();
    (store, Box::pin(stream))
}

/// [`json_feed`] for a kind without Rust types (Istio's), in `namespace` or all namespaces.
fn dynamic_feed(
    client: &Client,
    namespace: Option<&str>,
    resource: ApiResource,
    dictionary: Dictionary,
) -> (JsonStore, Feed<DynamicObject>) {
    let api = match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    json_feed(api, dictionary)
}

fn passive<K: Send + 'static>(
    feed: Feed<K>,
    kind: &'static str,
) -> std::pin::Pin<Box<dyn Stream<Item = ()> + Send>> {
    Box::pin(feed.map(move |item| {
        if let Err(error) = item {
            tracing::error!("watching {kind}: {error}");
        }
    }))
}

impl Caches {
    /// Stores for `namespace` (all namespaces when `None`) and the watches that fill them, KEDA's
    /// ScaledObjects only when `keda` (see [`serves_scaled_objects`]); nothing is requested until
    /// the feeds are polled.
    pub fn new(client: &Client, namespace: Option<&str>, keda: bool) -> (Caches, Feeds) {
        let (deployments, deployment_feed) = raw_feed(
            api::<RawObject<Deployment>>(client, namespace),
            Dictionary::DEPLOYMENTS,
        );
        let (daemon_sets, daemon_set_feed) = raw_feed(
            api::<RawObject<DaemonSet>>(client, namespace),
            Dictionary::DAEMON_SETS,
        );
        let (config_maps, config_map_feed) = feed(api::<ConfigMap>(client, namespace), ());
        let (secrets, secret_feed) = feed(api::<Secret>(client, namespace), ());
        let (autoscalers, autoscaler_feed) =
            feed(api::<HorizontalPodAutoscaler>(client, namespace), ());
        let (virtual_services, vs_feed) = dynamic_feed(
            client,
            namespace,
            virtual_services(),
            Dictionary::VIRTUAL_SERVICES,
        );
        let (services, service_feed) = raw_feed(
            api::<RawObject<Service>>(client, namespace),
            Dictionary::SERVICES,
        );
        let (destination_rules, rule_feed) = dynamic_feed(
            client,
            namespace,
            destination_rules(),
            Dictionary::DESTINATION_RULES,
        );
        let (http_routes, route_feed) =
            dynamic_feed(client, namespace, http_routes(), Dictionary::HTTP_ROUTES);
        let (metric_templates, template_feed) = feed(api::<MetricTemplate>(client, namespace), ());
        let (alert_providers, provider_feed) = feed(api::<AlertProvider>(client, namespace), ());
        let mut passive_feeds = vec![
            passive(vs_feed, "VirtualServices"),
            passive(service_feed, "Services"),
            passive(rule_feed, "DestinationRules"),
        ];
        let scaled_objects = keda.then(|| {
            let (store, feed) = dynamic_feed(client, namespace, scaled_objects(), Dictionary::NONE);
            passive_feeds.push(passive(feed, "ScaledObjects"));
            store
        });
        let caches = Caches {
            deployments,
            daemon_sets,
            config_maps,
            secrets,
            autoscalers,
            virtual_services,
            services,
            destination_rules,
            http_routes,
            metric_templates,
            alert_providers,
            scaled_objects,
        };
        let feeds = Feeds {
            deployments: deployment_feed,
            daemon_sets: daemon_set_feed,
            config_maps: config_map_feed,
            secrets: secret_feed,
            autoscalers: autoscaler_feed,
            metric_templates: template_feed,
            alert_providers: provider_feed,
            http_routes: route_feed,
            passive: passive_feeds,
        };
        (caches, feeds)
    }

    /// Waits until every store holds its first full list, at most `limit` per store; a store that
    /// is not ready by then (its CRD is not installed, say) is reported and the wait goes on.
    pub async fn wait_until_ready(&self, limit: Duration) {
        macro_rules! wait {
            ($store:expr, $kind:literal) => {
                if tokio::time::timeout(limit, $store.wait_until_ready())
                    .await
                    .map_or(true, |ready| ready.is_err())
                {
                    tracing::warn!(
                        "the {} cache is not filled after {limit:?}: is the CRD installed and may the operator list it?",
                        $kind
                    );
                }
            };
        }
        wait!(self.deployments, "Deployment");
        wait!(self.daemon_sets, "DaemonSet");
        wait!(self.config_maps, "ConfigMap");
        wait!(self.secrets, "Secret");
        wait!(self.autoscalers, "HorizontalPodAutoscaler");
        wait!(self.virtual_services, "VirtualService");
        wait!(self.services, "Service");
        wait!(self.destination_rules, "DestinationRule");
        wait!(self.http_routes, "HTTPRoute");
        wait!(self.metric_templates, "MetricTemplate");
        wait!(self.alert_providers, "AlertProvider");
        if let Some(scaled_objects) = &self.scaled_objects {
            wait!(scaled_objects, "ScaledObject");
        }
    }

    /// The cached KEDA ScaledObject `name` in `namespace`, as JSON (`None` without KEDA).
    pub fn scaled_object(&self, namespace: &str, name: &str) -> Option<Value> {
        self.scaled_objects.as_ref()?.get(namespace, name)
    }

    /// The Deployment `name` in `namespace`.
    pub fn deployment(&self, namespace: &str, name: &str) -> Option<Deployment> {
        self.deployments.get(namespace, name)
    }

    /// Who the workload `name` of `kind` (`Deployment` or `DaemonSet`) in `namespace` belongs to,
    /// with the value of its `annotation`.
    pub fn workload_ownership(
        &self,
        namespace: &str,
        kind: &str,
        name: &str,
        annotation: Option<&str>,
    ) -> Option<Ownership> {
        match kind {
            "DaemonSet" => self.daemon_sets.ownership(namespace, name, annotation),
            _ => self.deployments.ownership(namespace, name, annotation),
        }
    }

    /// The DaemonSet `name` in `namespace`.
    pub fn daemon_set(&self, namespace: &str, name: &str) -> Option<DaemonSet> {
        self.daemon_sets.get(namespace, name)
    }

    /// Whether the workload `name` of `kind` (`Deployment` or `DaemonSet`) in `namespace` is
    /// cached, without decoding it.
    pub fn has_workload(&self, namespace: &str, kind: &str, name: &str) -> bool {
        match kind {
            "DaemonSet" => self.daemon_sets.contains(namespace, name),
            _ => self.deployments.contains(namespace, name),
        }
    }

    /// The workload `name` of `kind` (`Deployment` or `DaemonSet`) as the decision core reads
    /// it: a Deployment, or a DaemonSet seen as one (see [`crate::daemon_sets::daemon_set_as_deployment`]).
    pub fn workload(&self, namespace: &str, kind: &str, name: &str) -> Option<Deployment> {
        match kind {
            "DaemonSet" => self
                .daemon_set(namespace, name)
                .and_then(|ds| crate::daemon_sets::daemon_set_as_deployment(&ds)),
            _ => self.deployment(namespace, name),
        }
    }

    /// The primary `name` of a target of `kind`, as [`Caches::workload`] reads it but for a
    /// Deployment's pod template, which is left empty: the decision core reads a primary's
    /// metadata, replicas and status, and decoding the template is most of a Deployment's cost.
    pub fn primary_workload(&self, namespace: &str, kind: &str, name: &str) -> Option<Deployment> {
        match kind {
            "DaemonSet" => self.workload(namespace, kind, name),
            _ => self
                .deployments
                .get::<DeploymentWithoutTemplate>(namespace, name)
                .map(Deployment::from),
        }
    }

    /// The ConfigMap `name` in `namespace`.
    pub fn config_map(&self, namespace: &str, name: &str) -> Option<std::sync::Arc<ConfigMap>> {
        self.config_maps
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// The Secret `name` in `namespace`.
    pub fn secret(&self, namespace: &str, name: &str) -> Option<std::sync::Arc<Secret>> {
        self.secrets.get(&ObjectRef::new(name).within(namespace))
    }

    /// The HorizontalPodAutoscaler `name` in `namespace`.
    pub fn autoscaler(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<std::sync::Arc<HorizontalPodAutoscaler>> {
        self.autoscalers
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// The cached Service, DestinationRule, VirtualService or HTTPRoute `name` in `namespace`, as
    /// JSON.
    pub fn routing_object(&self, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        self.routing_store(kind)?.get(namespace, name)
    }

    /// Who the routing object `name` of `kind` in `namespace` belongs to, with the value of its
    /// `annotation`.
    pub fn routing_ownership(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        annotation: Option<&str>,
    ) -> Option<Ownership> {
        self.routing_store(kind)?
            .ownership(namespace, name, annotation)
    }

    /// The cache entry of the routing object `name` of `kind` in `namespace` (see
    /// [`JsonStore::entry`]): the same entry later means the same version of the object.
    pub fn routing_entry(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<std::sync::Arc<[u8]>> {
        self.routing_store(kind)?.entry(namespace, name)
    }

    fn routing_store(&self, kind: &str) -> Option<&JsonStore> {
        match kind {
            "Service" => Some(&self.services),
            "DestinationRule" => Some(&self.destination_rules),
            "VirtualService" => Some(&self.virtual_services),
            "HTTPRoute" => Some(&self.http_routes),
            _ => None,
        }
    }

    /// The MetricTemplate `name` in `namespace`.
    pub fn metric_template(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<std::sync::Arc<MetricTemplate>> {
        self.metric_templates
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// The AlertProvider `name` in `namespace`.
    pub fn alert_provider(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<std::sync::Arc<AlertProvider>> {
        self.alert_providers
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// Objects and bytes cached per kind. The kinds kept as JSON report the exact size of their
    /// compressed text; the others report the size their JSON would have.
    pub fn footprints(&self) -> Vec<(&'static str, Footprint)> {
        fn encoded<K: Serialize>(objects: Vec<std::sync::Arc<K>>) -> Footprint {
            Footprint {
                objects: objects.len(),
                bytes: objects
                    .iter()
                    .filter_map(|object| serde_json::to_vec(&**object).ok())
                    .map(|text| text.len())
                    .sum(),
            }
        }
        vec![
            ("Deployment", self.deployments.footprint()),
            ("DaemonSet", self.daemon_sets.footprint()),
            ("Service", self.services.footprint()),
            ("VirtualService", self.virtual_services.footprint()),
            ("DestinationRule", self.destination_rules.footprint()),
            ("HTTPRoute", self.http_routes.footprint()),
            ("ConfigMap", encoded(self.config_maps.state())),
            ("Secret", encoded(self.secrets.state())),
            ("HorizontalPodAutoscaler", encoded(self.autoscalers.state())),
            ("MetricTemplate", encoded(self.metric_templates.state())),
            ("AlertProvider", encoded(self.alert_providers.state())),
        ]
    }

    /// A Secret's data as text (values that are not UTF-8 are left out).
    pub fn secret_text(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<std::collections::BTreeMap<String, String>> {
        let secret = self.secret(namespace, name)?;
        let mut data: std::collections::BTreeMap<String, String> = secret
            .data
            .iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), String::from_utf8(v.0.clone()).ok()?)))
            .collect();
        for (k, v) in secret.string_data.iter().flatten() {
            data.insert(k.clone(), v.clone());
        }
        Some(data)
    }
}

/// A Deployment read without its pod template (see [`Caches::primary_workload`]); the template
/// is skipped unread.
#[derive(serde::Deserialize)]
struct DeploymentWithoutTemplate {
    #[serde(default)]
    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    #[serde(default)]
    spec: Option<SpecWithoutTemplate>,
    #[serde(default)]
    status: Option<k8s_openapi::api::apps::v1::DeploymentStatus>,
}

/// A DeploymentSpec but for its template.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecWithoutTemplate {
    #[serde(default)]
    min_ready_seconds: Option<i32>,
    #[serde(default)]
    paused: Option<bool>,
    #[serde(default)]
    progress_deadline_seconds: Option<i32>,
    #[serde(default)]
    replicas: Option<i32>,
    #[serde(default)]
    revision_history_limit: Option<i32>,
    #[serde(default)]
    selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    #[serde(default)]
    strategy: Option<k8s_openapi::api::apps::v1::DeploymentStrategy>,
}

impl From<DeploymentWithoutTemplate> for Deployment {
    fn from(read: DeploymentWithoutTemplate) -> Deployment {
        Deployment {
            metadata: read.metadata,
            spec: read
                .spec
                .map(|spec| k8s_openapi::api::apps::v1::DeploymentSpec {
                    min_ready_seconds: spec.min_ready_seconds,
                    paused: spec.paused,
                    progress_deadline_seconds: spec.progress_deadline_seconds,
                    replicas: spec.replicas,
                    revision_history_limit: spec.revision_history_limit,
                    selector: spec.selector,
                    strategy: spec.strategy,
                    template: Default::default(),
                }),
            status: read.status,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_primary_is_read_whole_but_for_its_pod_template() {
        let text = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "podinfo-primary", "generation": 4, "resourceVersion": "9",
                         "ownerReferences": [{"apiVersion": "serin.dev/v1beta1", "kind": "Canary",
                             "name": "podinfo", "uid": "u-1", "controller": true}]},
            "spec": {"replicas": 3, "minReadySeconds": 5, "progressDeadlineSeconds": 60,
                     "paused": false, "revisionHistoryLimit": 2,
                     "selector": {"matchLabels": {"app": "podinfo-primary"}},
                     "strategy": {"type": "RollingUpdate"},
                     "template": {"metadata": {"labels": {"app": "podinfo-primary"}},
                                  "spec": {"containers": [{"name": "app", "image": "podinfo:6.0.0"}]}}},
            "status": {"observedGeneration": 4, "replicas": 3, "availableReplicas": 3,
                       "conditions": [{"type": "Available", "status": "True"}]},
        })
        .to_string();
        let mut whole: Deployment = serde_json::from_str(&text).unwrap();
        let lean: Deployment = serde_json::from_str::<DeploymentWithoutTemplate>(&text)
            .unwrap()
            .into();
        assert_eq!(lean.spec.as_ref().unwrap().template, Default::default());
        whole.spec.as_mut().unwrap().template = Default::default();
        assert_eq!(lean, whole);
    }
}
