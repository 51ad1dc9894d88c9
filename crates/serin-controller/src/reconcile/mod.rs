//! One reconcile of a Canary, in the order a tick runs: `observe` reads the Canary's world from
//! the watch caches, serin-core decides, `checks` runs the metric queries and webhooks the
//! decision asks for, `act` writes the workloads, configs, autoscalers and routing objects, and
//! `record` writes the one status change, the events, event webhooks, alerts and the operator's
//! metrics. `finalize` handles `revertOnDeletion`; `triggers` maps changes of other objects to
//! the Canaries they concern.

mod act;
mod checks;
mod echoes;
mod finalize;
mod observe;
mod own_writes;
pub mod ownership;
mod quiet;
mod record;
pub mod references;
mod steady;
mod stored;
mod template_hashes;
mod triggers;
mod undecodable;
mod written;

use crate::budget::NamespaceBudgets;
use crate::cache::Caches;
use crate::metrics::OperatorMetrics;
use crate::raw_object::RawObject;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::{self, Action as Requeue, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use serde_json::Value;
use serin_api::limits::{
    MAX_CHECKS_IN_FLIGHT_PER_NAMESPACE, MAX_NOTIFICATIONS_QUEUED_PER_NAMESPACE, MAX_TICK,
};
use serin_api::{Canary, MetricTemplate};
use serin_core::plan::{Check, Decision, MetricReading, Outcome, Verdict};
use serin_core::revision::ConfigKind;
use serin_metrics::PrometheusClient;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;
use triggers::Named;

/// The field manager of everything the operator writes.
pub const FIELD_MANAGER: &str = "serin";

/// The Canaries' totals are counted every 10 s, and the bytes of their JSON every sixth time.
const CANARY_BYTES_EVERY_PASSES: u64 = 6;

/// The finalizer that holds a Canary with `revertOnDeletion` until its target is restored
/// (`finalizer.serin.dev`, or Flagger's `finalizer.flagger.app` when serving its group).
pub fn finalizer() -> &'static str {
    serin_api::api_group().finalizer()
}

/// What every reconcile shares.
pub struct Context {
    /// The Kubernetes client.
    pub client: Client,
    /// The metrics server for builtin and inline metric queries (`--metrics-server`).
    pub metrics_server: PrometheusClient,
    /// Labels that identify a target's pods, in order of preference (`--selector-labels`).
    pub selector_labels: Vec<String>,
    /// The routing provider of Canaries without `spec.provider` (`--mesh-provider`).
    pub mesh_provider: String,
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
    /// Where the alerts of Canaries without `alerts` go (`--slack-url`, `--msteams-url`).
    pub global_alerts: Option<serin_webhooks::alert::Notifier>,
    /// Calls the Canaries' webhooks and alert providers (proxy settings from the environment).
    pub webhooks: serin_webhooks::WebhookClient,
    /// The canary metrics served at `/metrics`.
    pub metrics: Arc<OperatorMetrics>,
    /// The clients of Canaries' `metricsServer` and MetricTemplates' Prometheus servers, kept
    /// from one check to the next.
    pub prometheus_clients: serin_metrics::ClientCache,
    /// Whether a Canary may reference a MetricTemplate or AlertProvider of another namespace
    /// (`--no-cross-namespace-refs` turns it off). Even then, one that uses a Secret is used only
    /// when its namespace shares it (see `references`).
    pub cross_namespace_refs: bool,
    /// Whether analysis metrics of provider `job` may run Jobs in Canaries' namespaces
    /// (`--allow-job-metrics`); off, such a metric holds its release with a message saying so.
    pub job_metrics: bool,
    /// The Events written recently, so a repeat raises their count instead of adding one.
    pub event_series: crate::event_series::EventSeries,
}

impl Context {
    /// A context for `client`, querying `metrics_server`, with Flagger's defaults for the rest.
    pub fn new(client: Client, metrics_server: PrometheusClient) -> Self {
        let prometheus_clients = serin_metrics::ClientCache::default();
        // Keptn's metrics are Kubernetes objects, read with the operator's own client.
        prometheus_clients
            .providers()
            .use_kubernetes(client.clone());
        Context {
            client,
            metrics_server,
            selector_labels: serin_router::services::DEFAULT_SELECTOR_LABELS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            mesh_provider: "istio".into(),
            include_label_prefix: Vec::new(),
            config_tracking: true,
            concurrency: 4,
            event_webhook: None,
            cluster_name: None,
            global_alerts: None,
            webhooks: serin_webhooks::WebhookClient::new(serin_webhooks::ClientOptions::from_env()),
            metrics: Arc::default(),
            prometheus_clients,
            cross_namespace_refs: true,
            job_metrics: false,
            event_series: Default::default(),
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
    /// The tick did not finish within [`MAX_TICK`] (a slow API server, say); it is retried.
    #[error("the tick did not finish within {}s and is retried", MAX_TICK.as_secs())]
    TickTimeout,
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
    /// The Canary writes whose watch events have not arrived yet.
    own_writes: Arc<own_writes::OwnWrites>,
    /// Digests of the routing objects last applied for each Canary.
    applied: AppliedRouting,
    /// The routing objects that do not move with the routes, as each Canary's last tick found them.
    steady: steady::SteadyRouting,
    /// The checks under way, run outside the reconcile slots.
    checks: Arc<checks::CheckRuns>,
    /// Each namespace's places for checks and notifications.
    budgets: NamespaceBudgets,
    /// The operator's own writes whose watch events need no reconcile.
    echoes: Arc<echoes::QuietEchoes>,
    /// The Canaries whose next decision waits for their tick, whatever their workloads do.
    quiet: Arc<quiet::QuietCanaries>,
    /// The pod-template hash of each Canary's target at the version last seen.
    template_hashes: template_hashes::TemplateHashes,
}

/// Per Canary (namespace, name), what was last applied of each routing object (kind/name).
type AppliedRouting =
    std::sync::Mutex<std::collections::HashMap<(String, String), BTreeMap<String, act::Applied>>>;

impl Shared {
    fn canary_key(canary: &Canary) -> (String, String) {
        (canary.namespace().unwrap_or_default(), canary.name_any())
    }

    /// Remembers that `canary` (as read) has just been written to, giving `written_version`; a
    /// write the API server found to change nothing leaves the version as it was and is not
    /// remembered.
    fn wrote(&self, canary: &Canary, written_version: Option<&str>) {
        self.wrote_over(
            Self::canary_key(canary),
            canary.resource_version(),
            written_version,
        );
    }

    /// [`Shared::wrote`] for the Canary `key` read at `version`.
    fn wrote_over(
        &self,
        key: (String, String),
        version: Option<String>,
        written_version: Option<&str>,
    ) {
        self.own_writes
            .wrote(key, version.as_deref(), written_version, Instant::now());
    }

    /// Drops what was remembered about Canaries for which `keep` is false (they are gone).
    fn forget_unless(&self, keep: impl Fn(&(String, String)) -> bool) {
        self.own_writes.forget_unless(&keep);
        self.applied
            .lock()
            .expect("never poisoned")
            .retain(|key, _| keep(key));
        self.steady.forget_unless(&keep);
        self.checks.forget_unless(&keep);
        self.echoes.forget_unless(&keep);
        self.quiet.forget_unless(&keep);
        self.template_hashes.forget_unless(&keep);
        self.budgets.prune();
    }

    /// Whether `canary` is older than this operator's last write to it: a change it caused
    /// elsewhere (a scaled Deployment, say), or someone else's write of the Canary, can trigger a
    /// reconcile before the Canary's own watch delivers the write, and deciding on the old status
    /// would repeat the last transition or undo it.
    fn is_stale(&self, canary: &Canary) -> bool {
        self.own_writes.is_stale(
            &Self::canary_key(canary),
            canary.metadata.resource_version.as_deref(),
            Instant::now(),
        )
    }
}

/// What one tick observed and acts with: the Canary as JSON, its target and the selector label,
/// and the configs its target uses.
struct Tick<'a> {
    ctx: &'a Context,
    caches: &'a Caches,
    applied: &'a AppliedRouting,
    steady: &'a steady::SteadyRouting,
    budgets: &'a NamespaceBudgets,
    echoes: &'a echoes::QuietEchoes,
    /// The plan has scheduled the next reconcile, so the watch events of this tick's own writes
    /// need not trigger one.
    quiet: bool,
    /// The generations of the workloads this tick wrote.
    written: std::sync::Mutex<Vec<(quiet::Workload, Option<i64>)>>,
    canary_key: (String, String),
    /// The Canary as JSON, for the router: its status holds only the routed part
    /// ([`serin_router::routed_status`]).
    canary: Value,
    namespace: String,
    target: Option<Value>,
    label: Option<(String, String)>,
    /// The Canary splits traffic by the ratio of ready pods (provider kubernetes with steps).
    by_ratio: bool,
    tracked: BTreeSet<(ConfigKind, String)>,
}

fn canary_id(canary: &Canary) -> String {
    format!(
        "{}.{}",
        canary.name_any(),
        canary.namespace().unwrap_or_default()
    )
}

/// Reconciles one Canary; a failure is shown in its status and as a Warning event, then retried.
/// What it does past the early returns, which log nothing, runs in a `reconcile` span naming the
/// Canary.
async fn reconcile(canary: Arc<Canary>, shared: Arc<Shared>) -> Result<Requeue, Error> {
    shared
        .filled
        .get_or_init(|| shared.caches.wait_until_ready(Duration::from_secs(10)))
        .await;
    if shared.is_stale(&canary) {
        // The write's watch event triggers nothing when it is a quiet echo (see `echoes`), so this
        // requeue is what brings the Canary back once its cache has caught up.
        return Ok(Requeue::requeue(Duration::from_secs(2)));
    }
    let _timing = shared.ctx.metrics.start_reconcile();
    let key = Shared::canary_key(&canary);
    if let Some(left) = shared
        .quiet
        .asleep(&key, canary.metadata.resource_version.as_deref())
    {
        // Nothing but this Canary as its last tick left it has asked for this reconcile.
        return Ok(Requeue::requeue(left));
    }
    shared.quiet.ticking(&key);
    // A tick's future is about 16 KiB: boxed, the wrappers below (the timeout, the report, the
    // span) move a pointer instead of copying the whole of it each time they are built.
    let work = async {
        if canary.metadata.deletion_timestamp.is_some() {
            Box::pin(finalize::finalize(&canary, &shared)).await
        } else {
            // One write per reconcile: a finalizer change is followed by a tick on the next one.
            match Box::pin(finalize::sync_finalizer(&canary, &shared)).await {
                Ok(false) => Box::pin(tick(&canary, &shared)).await,
                Ok(true) => Ok(Requeue::requeue(Duration::from_secs(2))),
                Err(error) => Err(error),
            }
        }
    };
    let report = async {
        // Every action is idempotent, so a tick abandoned half-way converges when it is retried.
        let result = tokio::time::timeout(MAX_TICK, work)
            .await
            .unwrap_or(Err(Error::TickTimeout));
        if let Err(error) = &result {
            record::report_failure(&canary, &shared, error).await;
        }
        result
    };
    let span = tracing::info_span!("reconcile", canary = %key.1, namespace = key.0.as_str());
    report.instrument(span).await
}

/// One tick: observe, decide (running the checks it asks for), act, record.
async fn tick(canary: &Arc<Canary>, shared: &Shared) -> Result<Requeue, Error> {
    let started = Instant::now();
    let (mut tick, mut observation) = observe::observe(canary, shared)?;
    let routes = observation.routes;
    let now = now();
    let plan = loop {
        match serin_core::decide(&observation, now) {
            Decision::Check(check) => {
                let outcome = match tick.check(shared, canary, &check) {
                    checks::Progress::Done(outcome) => outcome,
                    checks::Progress::Running { slow, look_again } => {
                        if let Some(elapsed) = slow {
                            let message = checks::slow_check_message(canary, &check, elapsed);
                            record::note_waiting(canary, shared, &tick.canary_key, &message)
                                .await?;
                        }
                        // The check's end reconciles the Canary again; this is a backstop.
                        return Ok(Requeue::requeue(look_again));
                    }
                };
                if let (Check::Metric { name }, Outcome::Metric(MetricReading::Value(value))) =
                    (&check, &outcome)
                {
                    shared.ctx.metrics.record_metric(
                        &canary.spec.target_ref.name,
                        &tick.namespace,
                        name,
                        *value,
                    );
                }
                observation.verdicts.push(Verdict { check, outcome });
            }
            Decision::Plan(plan) => break *plan,
        }
    };
    tick.quiet = plan.requeue_after.is_some();
    for action in &plan.actions {
        tick.act(canary, action, routes, &plan.status).await?;
    }
    // The tick's one status write, when the plan changes the status; its Events come first.
    let transition = canary.status.as_ref() != Some(&plan.status);
    let mut version = canary.metadata.resource_version.clone();
    if transition {
        record::record_transition_events(canary, shared, &plan).await;
        version = stored::write(canary, shared, &plan.status, tick.quiet).await?;
    }
    let wait = match (plan.requeue_after, plan.workload_status_waits, version) {
        (Some(after), true, Some(version)) => {
            let generations = tick.generations(&observation);
            Some((
                after,
                quiet::LeftAt {
                    version,
                    generations,
                },
            ))
        }
        _ => None,
    };
    shared.quiet.ticked(&tick.canary_key, wait);
    shared.checks.finish(&tick.canary_key);
    record::record_plan(canary, shared, &plan, started, transition).await;
    Ok(match plan.requeue_after {
        Some(after) => Requeue::requeue(after),
        None => Requeue::await_change(),
    })
}

/// What a change of a target or primary (Deployments or DaemonSets, cached in `store`) triggers.
struct WorkloadTriggers {
    kind: &'static str,
    echoes: Arc<echoes::QuietEchoes>,
    index: Arc<triggers::TriggerIndex>,
    quiet: Arc<quiet::QuietCanaries>,
    store: crate::json_store::JsonStore,
}

impl WorkloadTriggers {
    /// The Canaries that a change of `workload` concerns: none for the operator's own write; a
    /// quiet Canary lets a change that keeps the spec it saw wait for its tick, unless the
    /// workload is gone.
    fn of<K: kube::Resource>(&self, workload: &K) -> Vec<ObjectRef<Canary>> {
        if self.echoes.is_echo_of(self.kind, workload) {
            return Vec::new();
        }
        let metadata = workload.meta();
        let namespace = metadata.namespace.as_deref().unwrap_or_default();
        let name = metadata.name.clone().unwrap_or_default();
        let mut canaries = self
            .index
            .canaries(&Named::Workload(metadata.namespace.clone(), name.clone()));
        if self.store.contains(namespace, &name) {
            canaries.retain(|canary| {
                self.quiet.workload_changed(
                    &quiet::key_of(canary),
                    (self.kind, name.clone()),
                    metadata.generation,
                )
            });
            canaries
        } else {
            self.quiet.disturbing(canaries)
        }
    }
}

fn retry_later(_canary: Arc<Canary>, _error: &Error, _shared: Arc<Shared>) -> Requeue {
    Requeue::requeue(Duration::from_secs(5))
}

/// Runs the controller over the Canaries of `namespace` (all namespaces when `None`) until the
/// stream of changes ends.
pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let keda = crate::cache::serves_scaled_objects(&ctx.client).await;
    let (caches, feeds) = Caches::new(&ctx.client, namespace.as_deref(), keda);
    // The Canaries are decoded one by one: one the types cannot read is reported, not allowed to
    // stop the watch of every other (see `undecodable`).
    let writer = kube::runtime::reflector::store::Writer::<Canary>::default();
    let store = writer.as_reader();
    let index = Arc::new(triggers::TriggerIndex::default());
    let canaries = undecodable::watch(
        &ctx.client,
        namespace.as_deref(),
        writer,
        index.clone(),
        ctx.clone(),
    );
    let echoes = Arc::new(echoes::QuietEchoes::default());
    let canary_echoes = echoes.clone();
    let own_writes = Arc::new(own_writes::OwnWrites::default());
    let delivered = own_writes.clone();
    let canaries = canaries.filter(move |event| {
        if let Ok(canary) = event {
            delivered.delivered(
                &Shared::canary_key(canary),
                canary.metadata.resource_version.as_deref(),
            );
        }
        let echo = event
            .as_ref()
            .is_ok_and(|canary| canary_echoes.is_echo_of("Canary", canary));
        std::future::ready(!echo)
    });
    let (wake, woken) = futures::channel::mpsc::unbounded();
    let quiet = Arc::new(quiet::QuietCanaries::default());
    let woken_quiet = quiet.clone();
    // A finished check is news the Canary's last tick did not have.
    let woken = woken.map(move |canary: ObjectRef<Canary>| {
        woken_quiet.disturb(&quiet::key_of(&canary));
        canary
    });
    let controller = Controller::for_stream(canaries, store.clone())
        .with_config(controller::Config::default().concurrency(ctx.concurrency.max(1)))
        .reconcile_on(woken);
    let mut background = tokio::task::JoinSet::new();
    for feed in feeds.passive {
        background.spawn(feed.for_each(|_| async {}));
    }
    let (hpa_index, route_index) = (index.clone(), index.clone());
    let (config_canaries, secret_canaries, template_canaries) =
        (store.clone(), store.clone(), store.clone());
    let provider_canaries = store.clone();
    let (config_caches, secret_caches) = (caches.clone(), caches.clone());
    let shared = Arc::new(Shared {
        ctx,
        caches,
        filled: tokio::sync::OnceCell::new(),
        own_writes,
        applied: Default::default(),
        steady: Default::default(),
        checks: Arc::new(checks::CheckRuns::new(wake)),
        echoes: echoes.clone(),
        quiet: quiet.clone(),
        template_hashes: Default::default(),
        budgets: NamespaceBudgets::new(
            MAX_CHECKS_IN_FLIGHT_PER_NAMESPACE,
            MAX_NOTIFICATIONS_QUEUED_PER_NAMESPACE,
        ),
    });
    let workload_triggers = |kind, store: &crate::json_store::JsonStore| WorkloadTriggers {
        kind,
        echoes: echoes.clone(),
        index: index.clone(),
        quiet: quiet.clone(),
        store: store.clone(),
    };
    let deployment_triggers = workload_triggers("Deployment", &shared.caches.deployments);
    let daemon_set_triggers = workload_triggers("DaemonSet", &shared.caches.daemon_sets);
    let (config_quiet, secret_quiet) = (quiet.clone(), quiet.clone());
    let (hpa_quiet, template_quiet, provider_quiet, route_quiet) =
        (quiet.clone(), quiet.clone(), quiet.clone(), quiet);
    let totals_store = store.clone();
    let totals_shared = shared.clone();
    background.spawn(async move {
        let mut counted = None;
        for pass in 0u64.. {
            let mut totals: BTreeMap<String, usize> = BTreeMap::new();
            let mut present = std::collections::HashSet::new();
            let canaries = totals_store.state();
            for canary in &canaries {
                *totals
                    .entry(canary.namespace().unwrap_or_default())
                    .or_default() += 1;
                present.insert(Shared::canary_key(canary));
            }
            let metrics = &totals_shared.ctx.metrics;
            metrics.set_totals(&totals);
            // Measuring the Canaries' bytes encodes every one of them: once a minute, or when
            // their number changed.
            if pass % CANARY_BYTES_EVERY_PASSES == 0 || counted != Some(canaries.len()) {
                counted = Some(canaries.len());
                let bytes = canaries
                    .iter()
                    .map(|canary| serde_json::to_vec(&**canary).map_or(0, |text| text.len()))
                    .sum();
                metrics.set_cache_footprint(
                    "Canary",
                    crate::json_store::Footprint {
                        objects: canaries.len(),
                        bytes,
                    },
                );
            }
            // Not held across the sleep: a deleted Canary would stay in memory until the next pass.
            drop(canaries);
            for (kind, footprint) in totals_shared.caches.footprints() {
                metrics.set_cache_footprint(kind, footprint);
            }
            // Canaries deleted without a finalizer leave nothing else to clean.
            totals_shared.forget_unless(|key| present.contains(key));
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
    });
    controller
        .watches_stream(
            feeds.deployments,
            move |deployment: RawObject<Deployment>| deployment_triggers.of(&deployment),
        )
        .watches_stream(
            feeds.daemon_sets,
            move |daemon_set: RawObject<DaemonSet>| daemon_set_triggers.of(&daemon_set),
        )
        .watches_stream(feeds.config_maps, move |config_map| {
            config_quiet.disturbing(triggers::canaries_of_config(
                &config_canaries,
                &config_caches,
                config_map.namespace(),
                ConfigKind::ConfigMap,
                &config_map.name_any(),
            ))
        })
        .watches_stream(feeds.secrets, move |secret| {
            let mut canaries = triggers::canaries_of_config(
                &secret_canaries,
                &secret_caches,
                secret.namespace(),
                ConfigKind::Secret,
                &secret.name_any(),
            );
            canaries.extend(triggers::canaries_of_provider_secret(
                &secret_canaries,
                &secret_caches,
                secret.namespace(),
                &secret.name_any(),
            ));
            secret_quiet.disturbing(canaries)
        })
        .watches_stream(
            feeds.autoscalers,
            move |hpa: k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler| {
                hpa_quiet.disturbing(
                    hpa_index.canaries(&Named::Autoscaler(hpa.namespace(), hpa.name_any())),
                )
            },
        )
        .watches_stream(feeds.metric_templates, move |template: MetricTemplate| {
            template_quiet.disturbing(triggers::canaries_of_template(
                &template_canaries,
                &template,
            ))
        })
        .watches_stream(feeds.alert_providers, move |provider| {
            provider_quiet.disturbing(triggers::canaries_of_alert_provider(
                &provider_canaries,
                &provider,
            ))
        })
        .watches_stream_with(
            feeds.http_routes,
            move |route: kube::api::DynamicObject| {
                route_quiet.disturbing(
                    route_index.canaries(&Named::Route(route.namespace(), route.name_any())),
                )
            },
            crate::cache::http_routes(),
        )
        // Boxed, the controller's wrappers move a pointer instead of the reconcile's future.
        .run(
            |canary, shared| Box::pin(reconcile(canary, shared)),
            retry_later,
            shared,
        )
        .for_each(|_| async {})
        .await;
    background.abort_all();
}
