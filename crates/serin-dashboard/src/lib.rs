//! Serin's web dashboard: every Canary live from one watch, a page per release with its steps,
//! metric charts, gates, routes and Events, and buttons for the manual requests.
//!
//! It runs two ways. `kubectl serin dashboard` serves it on a loopback address with the user's
//! kubeconfig ([`Mode::Local`]). In the cluster (`serin-dashboard`, the Helm value
//! `dashboard.enabled`) each viewer signs in with a Kubernetes token ([`Mode::Cluster`]): a
//! TokenReview says who they are, a SubjectAccessReview as them decides every read and action, and
//! actions are written with their own token.

mod access;
mod api;
mod assets;
mod guard;
mod stream;
mod view;

pub use access::Mode;
pub use guard::CONTENT_SECURITY_POLICY;

use access::Access;
use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::{HeaderMap, StatusCode};
use kube::runtime::reflector::Store;
use serin_api::Canary;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How a dashboard is served.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Local (the kubeconfig's user) or in the cluster (each viewer signs in).
    pub mode: Mode,
    /// Host names it answers to besides the loopback ones.
    pub allowed_hosts: Vec<String>,
    /// Mark the session cookie `Secure` (sent over HTTPS and to localhost only).
    pub secure_cookies: bool,
    /// Watch the Canaries of this namespace only (default: all namespaces).
    pub namespace: Option<String>,
}

/// What every request handler shares.
pub(crate) struct App {
    access: Access,
    canaries: Store<Canary>,
    changes: tokio::sync::broadcast::Sender<stream::Change>,
    streams: AtomicUsize,
    secure_cookies: bool,
}

/// Serves the dashboard on `listener` until the process ends. `config` is the kubeconfig's (local)
/// or the dashboard's own service account's (cluster) connection to the API server.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: kube::Config,
    settings: Settings,
) -> anyhow::Result<()> {
    let client = kube::Client::try_from(config.clone())?;
    let (canaries, changes) = stream::watch(client.clone(), settings.namespace.as_deref());
    let app = Arc::new(App {
        access: Access::new(settings.mode, client, config),
        canaries,
        changes,
        streams: AtomicUsize::new(0),
        secure_cookies: settings.secure_cookies,
    });
    let hosts = Arc::new(guard::Hosts::new(settings.allowed_hosts));
    let router = Router::new()
        .route("/", get(assets::page))
        .route("/canaries/{namespace}/{name}", get(assets::page))
        .route("/login", get(assets::page))
        .route("/assets/{file}", get(assets::asset))
        .route("/api/me", get(api::me))
        .route("/api/login", post(api::login))
        .route("/api/logout", post(api::logout))
        .route("/api/stream", get(feed))
        .route(
            "/api/namespaces/{namespace}/images",
            get(api::namespace_images),
        )
        .route(
            "/api/canaries/{namespace}/{name}/details",
            get(api::details),
        )
        .route(
            "/api/canaries/{namespace}/{name}/actions/{action}",
            post(api::act),
        )
        .with_state(app)
        .layer(axum::middleware::from_fn_with_state(hosts, guard::guard))
        .layer(axum::extract::DefaultBodyLimit::max(64 * 1024));
    // Probes come to the pod's address as their Host, so /healthz sits outside the host check.
    let router = Router::new()
        .route("/healthz", get(api::healthz))
        .merge(router);
    axum::serve(listener, router)
        .await
        .context("serving the dashboard")
}

async fn feed(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let viewer = match app.access.viewer(&headers).await {
        Ok(viewer) => viewer,
        Err(refusal) => return refusal.into_response(),
    };
    if app.streams.fetch_add(1, Ordering::SeqCst) >= stream::MAX_STREAMS {
        app.streams.fetch_sub(1, Ordering::SeqCst);
        return guard::text(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many pages are following the dashboard: try again later",
        );
    }
    stream::feed(app, viewer).into_response()
}

/// The in-cluster dashboard's command line (`serin-dashboard`, the operator image's link).
#[derive(clap::Parser, Debug)]
#[command(
    name = "serin-dashboard",
    version,
    about = "Serin's web dashboard, for a cluster: each viewer signs in with a Kubernetes token"
)]
pub struct Flags {
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub address: std::net::SocketAddr,
    /// API group of the Canaries: `serin.dev`, or `flagger.app` under Flagger's CRDs.
    #[arg(long, env = "SERIN_API_GROUP", default_value = "serin.dev")]
    pub api_group: String,
    /// Kubeconfig file (default: `KUBECONFIG`, then the pod's service account).
    #[arg(long)]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// Only show Canaries of this namespace (the chart's single-namespace mode).
    #[arg(long)]
    pub namespace: Option<String>,
    /// A host name the dashboard is served under (an Ingress host); repeatable. Its Service's own
    /// names and the loopback names are always answered.
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,
    /// Name of the dashboard's Service, whose cluster DNS names it answers to (with
    /// `POD_NAMESPACE`).
    #[arg(long)]
    pub service_name: Option<String>,
    /// Do not mark the session cookie Secure: only for plain-HTTP access from another host name
    /// than localhost.
    #[arg(long)]
    pub insecure_cookies: bool,
    /// Log level or directives (`RUST_LOG` wins when set).
    #[arg(long, default_value = "info")]
    pub log_level: String,
    /// Log line format: `text` or `json`.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
}

impl Flags {
    /// The host names the dashboard answers to: `--allowed-host`s and its Service's names.
    pub fn hosts(&self) -> Vec<String> {
        let mut hosts = self.allowed_hosts.clone();
        if let Some(service) = &self.service_name {
            hosts.push(service.clone());
            if let Ok(namespace) = std::env::var("POD_NAMESPACE") {
                for suffix in ["", ".svc", ".svc.cluster.local"] {
                    hosts.push(format!("{service}.{namespace}{suffix}"));
                }
            }
        }
        hosts
    }
}

/// Runs the in-cluster dashboard with `flags` (logging already set up).
pub async fn run_in_cluster(flags: Flags) -> anyhow::Result<()> {
    let group: serin_api::ApiGroup = flags
        .api_group
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--api-group: {e}"))?;
    serin_api::set_api_group(group);
    let config = match &flags.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading --kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
        }
        None => kube::Config::infer()
            .await
            .context("finding the API server (KUBECONFIG or the pod's service account)")?,
    };
    let listener = tokio::net::TcpListener::bind(flags.address)
        .await
        .with_context(|| format!("listening on {}", flags.address))?;
    tracing::info!("dashboard listening on http://{}", listener.local_addr()?);
    let settings = Settings {
        mode: Mode::Cluster,
        allowed_hosts: flags.hosts(),
        secure_cookies: !flags.insecure_cookies,
        namespace: flags.namespace.clone(),
    };
    serve(listener, config, settings).await
}
