//! `serin-operator`: watches Canaries and runs their releases. Flags follow Flagger's where they
//! apply; the admin server answers `/healthz`, `/readyz` and `/metrics`.

mod flagger_cli;
mod wget;

use anyhow::Context as _;
use clap::Parser;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

// A reconcile builds and drops hundreds of small JSON values; with glibc's malloc, allocating and
// freeing them was a quarter of the operator's CPU at 1,000 Canaries (docs/scale.md). mimalloc
// also hands freed pages back to the system by itself, so nothing has to trim the heap.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "serin-operator",
    version,
    about = "Progressive delivery for Kubernetes"
)]
struct Flags {
    /// API group of the Canaries, MetricTemplates and AlertProviders served: `serin.dev` (Serin's
    /// CRDs) or `flagger.app` (Flagger's CRDs, to take over a Flagger install). Started under the
    /// name `flagger`, the default is `flagger.app`.
    #[arg(long, env = "SERIN_API_GROUP")]
    api_group: Option<String>,
    /// Kubeconfig file to connect with (default: `KUBECONFIG`, then the in-cluster service account).
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
    /// Kubernetes API requests a second, on average (default: no limit); Flagger's
    /// `-kubeconfig-qps`.
    #[arg(long)]
    kube_api_qps: Option<f64>,
    /// Kubernetes API requests at once before `--kube-api-qps` applies (default: 2 × the qps).
    #[arg(long)]
    kube_api_burst: Option<u32>,
    /// Only watch Canaries in this namespace (default: all namespaces).
    #[arg(long)]
    namespace: Option<String>,
    /// Prometheus address for the builtin metrics and inline queries.
    #[arg(long, default_value = "http://prometheus:9090")]
    metrics_server: String,
    /// Labels that identify a target's pods, in order of preference.
    #[arg(long, default_value = "app,name,app.kubernetes.io/name")]
    selector_labels: String,
    /// Routing provider of Canaries without `spec.provider`: `istio` (VirtualService weights) or
    /// `kubernetes` (blue/green by switching the apex Service's selector, no mesh).
    #[arg(long, default_value = "istio")]
    mesh_provider: String,
    /// Wait to hold the `serin-operator` Lease before acting, so only one replica runs releases.
    #[arg(long)]
    leader_elect: bool,
    /// Namespace of the leader-election Lease.
    #[arg(long, default_value = "default")]
    leader_election_namespace: String,
    /// How long a leader's Lease lasts without renewal (e.g. `15s`); another replica may take over
    /// after that. Whole seconds, at least 3.
    #[arg(long, default_value = "15s", value_parser = lease_duration)]
    leader_election_lease_duration: u64,
    /// This replica's identity in the Lease (default: the host name and the process id).
    #[arg(long, env = "POD_NAME")]
    leader_election_identity: Option<String>,
    /// Address of the admin server (`/healthz`, `/readyz`, `/metrics`); port 0 lets the system
    /// pick one, which the log's "admin server listening on" line names.
    #[arg(long, default_value = "0.0.0.0:8080")]
    admin_address: SocketAddr,
    /// Prefixes of the target labels copied to the primary (comma list; empty or `*` copies all).
    #[arg(long, default_value = "")]
    include_label_prefix: String,
    /// Treat the ConfigMaps and Secrets a target uses as part of its revision and run the primary
    /// on `-primary` copies of them.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    enable_config_tracking: bool,
    /// Canaries reconciled at the same time.
    #[arg(long, default_value_t = 4)]
    concurrency: u16,
    /// Log line format: `text`, or `json` for one JSON object per line.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    /// Log level (`trace`, `debug`, `info`, `warn`, `error`) or directives such as
    /// `info,kube=debug`; `RUST_LOG`, when set, takes precedence.
    #[arg(long, default_value = "info")]
    log_level: String,
    /// URL that receives every event of Canaries without an `event` webhook. Such a URL often
    /// carries a credential: pass it in the environment variable (from a Secret), not on the
    /// command line, where any process of the node can read it.
    #[arg(long, env = "EVENT_WEBHOOK_URL", hide_env_values = true)]
    event_webhook: Option<String>,
    /// Refuse MetricTemplate and AlertProvider references to another namespace (Flagger's
    /// `-no-cross-namespace-refs`); the Canary holds with a message naming the field.
    #[arg(long)]
    no_cross_namespace_refs: bool,
    /// Cluster name shown in alerts.
    #[arg(long)]
    cluster_name: Option<String>,
    /// Slack incoming webhook that receives the alerts of Canaries without `alerts`, as Flagger's
    /// `-slack-url` (pass it in the environment, from a Secret).
    #[arg(long, env = "SLACK_URL", hide_env_values = true)]
    slack_url: Option<String>,
    /// Slack bot token, for the chat.postMessage API instead of an incoming webhook.
    #[arg(long, env = "SLACK_TOKEN", hide_env_values = true)]
    slack_token: Option<String>,
    /// Proxy for the Slack alerts.
    #[arg(long, env = "SLACK_PROXY_URL")]
    slack_proxy_url: Option<String>,
    /// Slack channel of the alerts (required with `--slack-url`).
    #[arg(long)]
    slack_channel: Option<String>,
    /// Name the Slack alerts are posted under.
    #[arg(long, default_value = "serin")]
    slack_user: String,
    /// Microsoft Teams webhook that receives the alerts of Canaries without `alerts` (it wins over
    /// Slack, as in Flagger).
    #[arg(long, env = "MSTEAMS_URL", hide_env_values = true)]
    msteams_url: Option<String>,
    /// Proxy for the Microsoft Teams alerts.
    #[arg(long, env = "MSTEAMS_PROXY_URL")]
    msteams_proxy_url: Option<String>,
    /// Let analysis metrics of provider `job` run their Jobs in the Canaries' namespaces (with the
    /// operator's rights: whoever may write a Canary or MetricTemplate there may then run pods).
    #[arg(long)]
    allow_job_metrics: bool,
}

fn main() -> std::process::ExitCode {
    let mut args = std::env::args();
    if args
        .next()
        .is_some_and(|program| std::path::Path::new(&program).ends_with("wget"))
    {
        return std::process::ExitCode::from(wget::run(&args.collect::<Vec<_>>()));
    }
    // One thread by default: the operator waits on the API server far more than it computes, and
    // a second worker mostly wakes up to find nothing to do (twice the context switches, a fifth
    // more CPU at 1,000 Canaries). The current-thread scheduler used 3 to 14% less CPU than the
    // multi-thread one with one worker (docs/scale.md). TOKIO_WORKER_THREADS=N gives N workers.
    let mut builder = if std::env::var_os("TOKIO_WORKER_THREADS").is_some() {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("serin-operator: starting the async runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // As a task, the operator's main future shares the scheduler's queue with the controller's
    // streams and reconciles; with workers, it would otherwise cross threads at every wakeup.
    runtime.block_on(async {
        tokio::spawn(run_main())
            .await
            .unwrap_or(std::process::ExitCode::FAILURE)
    })
}

async fn run_main() -> std::process::ExitCode {
    let mut argv: Vec<String> = std::env::args().collect();
    let program = if argv.is_empty() {
        "serin-operator".to_string()
    } else {
        argv.remove(0)
    };
    // The image links `serin-dashboard` to this binary: the in-cluster web dashboard.
    if std::path::Path::new(&program).ends_with("serin-dashboard") {
        return dashboard(std::iter::once(program).chain(argv)).await;
    }
    // Flagger's chart starts `./flagger -log-level=info ...`: read its flags as Flagger does.
    let mut notes = Vec::new();
    if flagger_cli::is_flagger_style(&argv) {
        use clap::CommandFactory;
        let serin_flags: Vec<(String, bool)> = Flags::command()
            .get_arguments()
            .filter_map(|arg| Some((arg.get_long()?.to_string(), arg.get_action().takes_values())))
            .collect();
        (argv, notes) = match flagger_cli::translate(&argv, &serin_flags) {
            Ok(translated) => translated,
            Err(message) => {
                eprintln!("{program}: {message}");
                return std::process::ExitCode::from(2);
            }
        };
    }
    let mut flags = Flags::parse_from(std::iter::once(program.clone()).chain(argv));
    if flagger_cli::started_as_flagger(&program) && flags.api_group.is_none() {
        flags.api_group = Some("flagger.app".into());
    }
    let format = match flags.log_format.as_str() {
        "json" => serin_controller::LogFormat::Json,
        _ => serin_controller::LogFormat::Text,
    };
    if let Err(error) = serin_controller::init_logging(format, &flags.log_level) {
        eprintln!("serin-operator: {error}");
        return std::process::ExitCode::from(2);
    }
    for note in notes {
        tracing::info!("{note}");
    }
    match operate(flags).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs the web dashboard (started as `serin-dashboard`) until a signal stops it.
async fn dashboard(args: impl Iterator<Item = String>) -> std::process::ExitCode {
    let flags = <serin_dashboard::Flags as clap::Parser>::parse_from(args);
    let format = match flags.log_format.as_str() {
        "json" => serin_controller::LogFormat::Json,
        _ => serin_controller::LogFormat::Text,
    };
    if let Err(error) = serin_controller::init_logging(format, &flags.log_level) {
        eprintln!("serin-dashboard: {error}");
        return std::process::ExitCode::from(2);
    }
    let outcome = tokio::select! {
        served = serin_dashboard::run_in_cluster(flags) => served,
        _ = tokio::signal::ctrl_c() => Ok(()),
        _ = terminated() => Ok(()),
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Resolves when SIGTERM arrives (a pod being stopped); never, where it cannot be listened for.
async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut terminate) => {
            terminate.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}

/// Runs the operator until a signal stops it or leadership is lost.
async fn operate(flags: Flags) -> anyhow::Result<()> {
    anyhow::ensure!(
        serin_api::validate::ROUTING_PROVIDERS.contains(&flags.mesh_provider.as_str()),
        "--mesh-provider {}: write one of {} (the providers this build routes with)",
        flags.mesh_provider,
        serin_api::validate::ROUTING_PROVIDERS.join(", ")
    );
    let group: serin_api::ApiGroup = flags
        .api_group
        .as_deref()
        .unwrap_or("serin.dev")
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--api-group: {e}"))?;
    serin_api::set_api_group(group);
    let global_alerts = global_notifier(&flags)?;
    let mut config = match &flags.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("--kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("--kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("connecting to Kubernetes (KUBECONFIG or the in-cluster service account)")?,
    };
    let identity = flags
        .leader_election_identity
        .clone()
        .unwrap_or_else(default_identity);
    // The identity in the User-Agent lets the API server's request counts tell replicas apart.
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_str(&format!(
            "serin-operator/{} ({identity})",
            env!("CARGO_PKG_VERSION")
        ))
        .context("--leader-election-identity must be printable ASCII")?,
    ));
    let leadership = if flags.leader_elect {
        serin_controller::leadership::Leadership::elected(
            &identity,
            &flags.leader_election_namespace,
            lease_name(),
        )
    } else {
        serin_controller::leadership::Leadership::unelected()
    };
    // Both clients count their requests on /metrics; the counter sits below the write guard, so
    // only requests actually sent are counted.
    let mut metrics = serin_controller::metrics::OperatorMetrics::default();
    if group == serin_api::ApiGroup::Flagger {
        metrics.add_flagger_names();
    }
    let metrics = Arc::new(metrics);
    let api_requests = metrics.kubernetes_api_layer();
    // Only the lease manager writes unguarded: everything else is refused once the lease is lost.
    // Flagger's -kubeconfig-qps/-kubeconfig-burst: `burst` requests per window of burst/qps
    // seconds, so the average is qps and no more than `burst` go at once.
    let limit = flags.kube_api_qps.filter(|qps| *qps > 0.0).map(|qps| {
        let burst = flags
            .kube_api_burst
            .unwrap_or_else(|| (qps * 2.0).ceil() as u32)
            .max(1);
        tower::limit::RateLimitLayer::new(
            u64::from(burst),
            std::time::Duration::from_secs_f64(f64::from(burst) / qps),
        )
    });
    let lease_client = kube::client::ClientBuilder::try_from(config.clone())?
        .with_layer(&api_requests)
        .build();
    let client = kube::client::ClientBuilder::try_from(config)?
        .with_layer(&tower::util::option_layer(limit))
        .with_layer(&api_requests)
        .with_layer(&leadership.write_guard())
        .build();
    let metrics_server = serin_metrics::PrometheusClient::new(&flags.metrics_server)
        .map_err(|e| anyhow::anyhow!("--metrics-server: {e}"))?;
    let mut ctx = serin_controller::Context::new(client.clone(), metrics_server);
    ctx.metrics = metrics;
    ctx.selector_labels = comma_list(&flags.selector_labels);
    ctx.mesh_provider = flags.mesh_provider.clone();
    ctx.include_label_prefix = comma_list(&flags.include_label_prefix);
    ctx.config_tracking = flags.enable_config_tracking;
    ctx.concurrency = flags.concurrency.max(1);
    ctx.event_webhook = flags.event_webhook.filter(|url| !url.is_empty());
    ctx.cross_namespace_refs = !flags.no_cross_namespace_refs;
    ctx.job_metrics = flags.allow_job_metrics;
    ctx.cluster_name = flags.cluster_name.clone();
    ctx.global_alerts = global_alerts;
    let leading = Arc::new(AtomicBool::new(false));
    let admin = admin_server(
        flags.admin_address,
        leading.clone(),
        ctx.metrics.clone(),
        flags.mesh_provider.clone(),
    )
    .await?;
    let mut lost_lease = None;
    if flags.leader_elect {
        lost_lease = Some(
            lead(
                lease_client,
                &flags.leader_election_namespace,
                &identity,
                flags.leader_election_lease_duration,
                &leadership,
            )
            .await?,
        );
    }
    leading.store(true, Ordering::Relaxed);
    ctx.metrics.set_leader(true);
    tracing::info!(
        "watching Canaries of {} in {}",
        serin_api::api_version(),
        flags.namespace.as_deref().unwrap_or("all namespaces")
    );
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("listening for SIGTERM")?;
    let lost = async {
        match lost_lease {
            Some(lost) => lost.await,
            None => std::future::pending().await,
        }
    };
    // A task of its own, so that the controller's many wake-ups do not poll the signal listeners
    // too. Returning drops the set, which aborts the controller with its reconciles in flight: a
    // lost lease abandons them.
    let mut controller = tokio::task::JoinSet::new();
    controller.spawn(serin_controller::run(Arc::new(ctx), flags.namespace));
    let stopped_by = tokio::select! {
        finished = controller.join_next() => match finished {
            Some(Err(error)) if error.is_panic() => anyhow::bail!("the controller failed: {error}"),
            _ => None,
        },
        _ = tokio::signal::ctrl_c() => Some("interrupt"),
        _ = terminate.recv() => Some("SIGTERM"),
        reason = lost => {
            admin.abort();
            anyhow::bail!("{reason}; stopping so that a restart competes for the lease again");
        }
    };
    if let Some(signal) = stopped_by {
        tracing::info!("stopping ({signal})");
    }
    admin.abort();
    Ok(())
}

/// The Lease replicas compete for. Serving Flagger's group, it is Flagger's, so that Flagger
/// and Serin never act on the same Canaries at once.
fn lease_name() -> &'static str {
    match serin_api::api_group() {
        serin_api::ApiGroup::Serin => "serin-operator",
        serin_api::ApiGroup::Flagger => "flagger-leader-election",
    }
}

/// Where the alerts of Canaries without `alerts` go: Microsoft Teams, else Slack, else nowhere.
fn global_notifier(flags: &Flags) -> anyhow::Result<Option<serin_webhooks::alert::Notifier>> {
    let non_empty = |value: &Option<String>| value.clone().filter(|v| !v.is_empty());
    let (flag, spec) = if let Some(address) = non_empty(&flags.msteams_url) {
        let spec = serin_api::AlertProviderSpec {
            type_: "msteams".into(),
            address: Some(address),
            proxy: non_empty(&flags.msteams_proxy_url),
            ..Default::default()
        };
        ("--msteams-url", spec)
    } else if let Some(address) = non_empty(&flags.slack_url) {
        let Some(channel) = non_empty(&flags.slack_channel) else {
            anyhow::bail!(
                "--slack-url needs --slack-channel (Flagger's -slack-channel): the channel the alerts go to"
            );
        };
        let spec = serin_api::AlertProviderSpec {
            type_: "slack".into(),
            address: Some(address),
            channel: Some(channel),
            username: Some(flags.slack_user.clone()),
            proxy: non_empty(&flags.slack_proxy_url),
            ..Default::default()
        };
        ("--slack-url", spec)
    } else {
        return Ok(None);
    };
    let notifier = serin_webhooks::alert::Notifier::from_provider(
        flag,
        &spec,
        None,
        non_empty(&flags.slack_token).as_deref(),
    )
    .map_err(|e| anyhow::anyhow!("{flag}: {e}"))?;
    Ok(Some(notifier))
}

/// `--leader-election-lease-duration` in whole seconds.
fn lease_duration(text: &str) -> Result<u64, String> {
    let duration = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if duration.subsec_nanos() != 0 || duration.as_secs() < 3 {
        return Err(format!(
            "{text:?}: write whole seconds, at least 3s, e.g. 15s"
        ));
    }
    Ok(duration.as_secs())
}

fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "serin-operator".into());
    format!("{host}-{}", std::process::id())
}

/// Waits until this replica holds the Lease and its guard lets writes through, then returns a
/// future that ends (with the reason) when the lease is lost.
async fn lead(
    client: kube::Client,
    namespace: &str,
    identity: &str,
    lease_seconds: u64,
    leadership: &serin_controller::leadership::Leadership,
) -> anyhow::Result<impl std::future::Future<Output = String> + use<>> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), namespace);
    let (store, writer) = reflector::store();
    let lease_watch = watcher(
        leases,
        watcher::Config::default().fields(&format!("metadata.name={}", lease_name())),
    )
    .default_backoff()
    .reflect(writer)
    .for_each(|_| async {});
    let lease_watch = tokio::spawn(lease_watch);
    leadership.watch_lease(store);
    // Renewals come a third of the lease before its expiry, so a late one still lands in time.
    let grace = (lease_seconds / 3).max(1);
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client, lease_name())
        .with_namespace(namespace)
        .with_identity(identity)
        .with_duration(lease_seconds)
        .with_grace(grace)
        .build()
        .await
        .context("setting up leader election")?;
    let (mut leader, manager_task) = manager.watch().await;
    tracing::info!(
        "waiting to hold the Lease {namespace}/{} as {identity}",
        lease_name()
    );
    while !*leader.borrow_and_update() {
        leader.changed().await.context("leader election stopped")?;
    }
    leadership.set_leading(true);
    // The guard reads the Lease from the watch: wait until it shows this replica's renewal.
    let waiting_since = std::time::Instant::now();
    let mut warned = false;
    while !leadership.may_write() {
        if !warned && waiting_since.elapsed() > std::time::Duration::from_secs(10) {
            tracing::warn!(
                "holding the Lease {namespace}/{}, but its watch has not shown the renewal for 10s: may the operator watch leases.coordination.k8s.io?",
                lease_name()
            );
            warned = true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    tracing::info!("leading as {identity}");
    let leadership = leadership.clone();
    Ok(async move {
        let reason = loop {
            if leader.changed().await.is_err() {
                break "leader election stopped".to_string();
            }
            if !*leader.borrow_and_update() {
                break "lost the Lease".to_string();
            }
        };
        leadership.set_leading(false);
        lease_watch.abort();
        drop(manager_task);
        reason
    })
}

fn comma_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The admin server. `/readyz` is 200 as soon as it serves, for a standby replica too (its body
/// says it waits), so a Deployment's rolling update can replace replicas; `serin_leader` tells
/// which replica acts.
async fn admin_server(
    address: SocketAddr,
    leading: Arc<AtomicBool>,
    metrics: Arc<serin_controller::metrics::OperatorMetrics>,
    mesh_provider: String,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    metrics.set_info(env!("CARGO_PKG_VERSION"), &mesh_provider);
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("binding the admin server to {address}"))?;
    // With port 0 the system picks the port; the log line is how a supervisor learns it.
    let bound = listener.local_addr().unwrap_or(address);
    tracing::info!("admin server listening on {bound}");
    let app = axum::Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .route(
            "/readyz",
            axum::routing::get(move || {
                let leading = leading.load(Ordering::Relaxed);
                async move {
                    if leading {
                        "ok"
                    } else {
                        "ok (standby: waiting to hold the Lease)"
                    }
                }
            }),
        )
        .route(
            "/metrics",
            serin_controller::metrics::metrics_route(metrics),
        );
    Ok(tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    }))
}

#[cfg(test)]
mod reference {
    use clap::CommandFactory;

    /// The operator's flags with their long help, as `serin-operator --help` prints them.
    fn markdown() -> String {
        let help = super::Flags::command()
            .term_width(100)
            .mut_args(|arg| arg.hide_env_values(true))
            .render_long_help()
            .to_string();
        format!(
            "# Reference: `serin-operator` flags\n\n\
             <!-- Generated by `make reference` from crates/serin-operator; do not edit. -->\n\n\
             The chart sets these from its values ([helm-values.md](helm-values.md)). Started as\n\
             `flagger` (Flagger's chart with Serin's image), the operator also reads Flagger's\n\
             single-dash flags ([migrating.md](../migrating.md)).\n\n```text\n{}\n```\n",
            help.trim_end()
        )
    }

    #[test]
    fn the_checked_in_flag_reference_is_current() {
        serin_api::reference::check_checked_in("docs/reference/operator.md", &markdown())
            .unwrap_or_else(|problem| panic!("{problem}"));
    }
}
