//! `serin-operator`: watches Canaries and runs their releases. Flags follow Flagger's where they
//! apply; the admin server answers `/healthz`, `/readyz` and `/metrics`.

use anyhow::Context as _;
use clap::Parser;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Parser)]
#[command(
    name = "serin-operator",
    version,
    about = "Progressive delivery for Kubernetes"
)]
struct Flags {
    /// Only watch Canaries in this namespace (default: all namespaces).
    #[arg(long)]
    namespace: Option<String>,
    /// Prometheus address for the builtin metrics and inline queries.
    #[arg(long, default_value = "http://prometheus:9090")]
    metrics_server: String,
    /// Labels that identify a target's pods, in order of preference.
    #[arg(long, default_value = "app,name,app.kubernetes.io/name")]
    selector_labels: String,
    /// Mesh provider; `istio` is the one this build supports.
    #[arg(long, default_value = "istio")]
    mesh_provider: String,
    /// Wait to hold the `serin-operator` Lease before acting, so only one replica runs releases.
    #[arg(long)]
    leader_elect: bool,
    /// Namespace of the leader-election Lease.
    #[arg(long, default_value = "default")]
    leader_election_namespace: String,
    /// Address of the admin server (`/healthz`, `/readyz`, `/metrics`).
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
    /// Log line format: `text` or `json`.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    /// URL that receives every event of Canaries without an `event` webhook.
    #[arg(long, env = "EVENT_WEBHOOK_URL")]
    event_webhook: Option<String>,
    /// Cluster name shown in alerts.
    #[arg(long)]
    cluster_name: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    anyhow::ensure!(
        flags.mesh_provider == "istio",
        "--mesh-provider {}: only istio is supported by this build",
        flags.mesh_provider
    );
    let client = kube::Client::try_default()
        .await
        .context("connecting to Kubernetes (KUBECONFIG or the in-cluster service account)")?;
    let metrics_server = serin_metrics::PrometheusClient::new(&flags.metrics_server)
        .map_err(|e| anyhow::anyhow!("--metrics-server: {e}"))?;
    let mut ctx = serin_controller::Context::new(client.clone(), metrics_server);
    ctx.selector_labels = comma_list(&flags.selector_labels);
    ctx.include_label_prefix = comma_list(&flags.include_label_prefix);
    ctx.config_tracking = flags.enable_config_tracking;
    ctx.concurrency = flags.concurrency.max(1);
    ctx.event_webhook = flags.event_webhook.filter(|url| !url.is_empty());
    ctx.cluster_name = flags.cluster_name;
    serin_controller::set_log_format(match flags.log_format.as_str() {
        "json" => serin_controller::LogFormat::Json,
        _ => serin_controller::LogFormat::Text,
    });
    let ready = Arc::new(AtomicBool::new(false));
    let admin = admin_server(
        flags.admin_address,
        ready.clone(),
        ctx.metrics.clone(),
        flags.mesh_provider.clone(),
    )
    .await?;
    if flags.leader_elect {
        let manager =
            kube_lease_manager::LeaseManagerBuilder::new(client.clone(), "serin-operator")
                .with_namespace(&flags.leader_election_namespace)
                .build()
                .await
                .context("setting up leader election")?;
        let (mut leader, _lease) = manager.watch().await;
        serin_controller::log("info", "", "waiting to become the leader");
        while !*leader.borrow_and_update() {
            leader.changed().await.context("leader election stopped")?;
        }
        serin_controller::log("info", "", "leading");
    }
    ready.store(true, Ordering::Relaxed);
    serin_controller::log(
        "info",
        "",
        &format!(
            "watching Canaries in {}",
            flags.namespace.as_deref().unwrap_or("all namespaces")
        ),
    );
    tokio::select! {
        _ = serin_controller::run(Arc::new(ctx), flags.namespace) => {}
        _ = tokio::signal::ctrl_c() => serin_controller::log("info", "", "stopping"),
    }
    admin.abort();
    Ok(())
}

fn comma_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

async fn admin_server(
    address: SocketAddr,
    ready: Arc<AtomicBool>,
    metrics: Arc<serin_controller::metrics::OperatorMetrics>,
    mesh_provider: String,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let info = format!(
        "# HELP serin_info Build and mesh provider of the operator.\n# TYPE serin_info gauge\nserin_info{{version=\"{}\",mesh_provider=\"{mesh_provider}\"}} 1\n",
        env!("CARGO_PKG_VERSION")
    );
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("binding the admin server to {address}"))?;
    let app = axum::Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .route(
            "/readyz",
            axum::routing::get(move || {
                let ready = ready.load(Ordering::Relaxed);
                async move {
                    if ready {
                        (axum::http::StatusCode::OK, "ok")
                    } else {
                        (
                            axum::http::StatusCode::SERVICE_UNAVAILABLE,
                            "not leading yet",
                        )
                    }
                }
            }),
        )
        .route(
            "/metrics",
            axum::routing::get(move || {
                let text = format!("{info}{}", metrics.render());
                async move { text }
            }),
        );
    Ok(tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    }))
}
