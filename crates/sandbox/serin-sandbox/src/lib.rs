//! A local Kubernetes-API-compatible server for Serin's demo and tests: the real `kubectl` and
//! kube-rs use it unchanged through the kubeconfig it writes. Everything runs in-process on
//! 127.0.0.1; state lives in memory and is gone when the sandbox stops.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let dir = std::env::temp_dir().join("serin-sandbox");
//! let sandbox = serin_sandbox::Sandbox::start(&dir).await?;
//! println!("export KUBECONFIG={}", sandbox.kubeconfig.display());
//! sandbox.stop().await;
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

// The layers, re-exported under the paths the sandbox's users have always used.
pub use serin_sandbox_apiserver::{
    apiproxy, auth, builtin_schemas, convert, defaults, discovery, instrument, kubelet, managed,
    openapi, patch, protobuf, registry, scale, selectors, server, services, status, store,
    structural, tables, tls,
};
pub use serin_sandbox_cluster::{
    autoscaling, controllers, endpoints, exec, grpc_health, http_probe, loadtester_pod, logs,
    node_kubelet, pod_runtime, podinfo, portforward, process, runtime, scheduler, spdy,
};
pub use serin_sandbox_mesh::{
    gateway_route, gateways, mesh_crds, mesh_proxy, mesh_route, pod_targets, prometheus, telemetry,
    upstreams,
};

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use store::Store;

/// Settings of a sandbox.
#[derive(Clone)]
pub struct SandboxOptions {
    /// How often watches that ask for bookmarks get one.
    pub bookmark_interval: Duration,
    /// Runs pods; by default every pod becomes Ready after `pod_ready_delay`.
    pub runtime: Option<Arc<dyn controllers::PodRuntime>>,
    /// How long a pod takes to become Ready with the default runtime.
    pub pod_ready_delay: Duration,
    /// Period of the controllers' time-based passes.
    pub controller_period: Duration,
    /// How often the HorizontalPodAutoscaler controller syncs (15 s, as on a cluster).
    pub autoscaler_period: Duration,
    /// Fault rules in force from the start (changeable later with [`Sandbox::set_faults`]).
    pub faults: Vec<instrument::FaultRule>,
    /// The mesh: when set, the Istio and Gateway API CRDs are served, a mesh proxy (and
    /// Prometheus, if asked) starts with the sandbox, Istio's ingress gateway is installed in
    /// `istio-system` and Gateway API Gateways of the `istio` class are deployed ([`gateways`]).
    pub mesh: Option<MeshSettings>,
    /// How many nodes the cluster has (at least one; 3 by default): `sandbox-node`,
    /// `sandbox-node-2`, ... ([`controllers::node_name`]), each in a zone of its own.
    pub nodes: usize,
}

impl SandboxOptions {
    /// The whole data plane, as `serin sandbox up` runs it: pods serving real HTTP, the mesh proxy
    /// and Prometheus.
    pub fn with_data_plane() -> Self {
        SandboxOptions {
            runtime: Some(Arc::new(runtime::ServingRuntime::new(Default::default()))),
            mesh: Some(MeshSettings::default()),
            ..SandboxOptions::default()
        }
    }
}

/// How the sandbox's mesh runs.
#[derive(Clone, Debug)]
pub struct MeshSettings {
    /// The proxy's caller identity and randomness.
    pub proxy: mesh_proxy::MeshOptions,
    /// The Prometheus binary to start scraping the mesh (`prometheus` from PATH), or none.
    pub prometheus: Option<String>,
}

impl Default for MeshSettings {
    fn default() -> Self {
        MeshSettings {
            proxy: mesh_proxy::MeshOptions::default(),
            prometheus: Some("prometheus".into()),
        }
    }
}

impl Default for SandboxOptions {
    fn default() -> Self {
        SandboxOptions {
            bookmark_interval: Duration::from_secs(10),
            runtime: None,
            pod_ready_delay: Duration::from_millis(300),
            controller_period: Duration::from_millis(100),
            autoscaler_period: Duration::from_secs(15),
            faults: Vec::new(),
            mesh: None,
            nodes: 3,
        }
    }
}

/// A running sandbox: the API server and the built-in controllers.
pub struct Sandbox {
    /// The local admin address, plain HTTP on loopback, e.g. `http://127.0.0.1:38123`: a request
    /// without credentials acts as the admin there (as on kube-apiserver's old insecure port), so
    /// in-process clients such as `kube::Config::new(url)` need no token.
    pub url: String,
    /// The same API over HTTPS, e.g. `https://127.0.0.1:38124`, which kubeconfigs name: credentials
    /// are checked as on a cluster, and a request without them is `system:anonymous`.
    pub https_url: String,
    /// The PEM certificate of the authority that signed the HTTPS address's certificate (also
    /// written to `ca.crt` beside the kubeconfig).
    pub ca_pem: String,
    /// Path of the admin kubeconfig: the HTTPS address, its authority and the admin token.
    pub kubeconfig: PathBuf,
    /// Path of `endpoints.json`.
    pub endpoints: PathBuf,
    /// The object store, for tests and built-in controllers.
    pub store: Arc<Store>,
    /// Request counters (also served at `/metrics`).
    pub metrics: Arc<instrument::Metrics>,
    /// Fault rules in force.
    pub faults: Arc<instrument::Faults>,
    /// The mesh proxy, when the sandbox runs a mesh (use `http://ADDRESS` as HTTP_PROXY).
    pub mesh: Option<mesh_proxy::MeshProxy>,
    /// Prometheus scraping the mesh, when started.
    pub prometheus: Option<prometheus::Prometheus>,
    /// The directory whose `*.json` target files that Prometheus also scrapes
    /// (`DIR/prometheus-targets`), when it runs; see [`Sandbox::register_scrape_target`].
    pub prometheus_targets: Option<PathBuf>,
    /// Keeps a target file in `prometheus_targets` for every pod annotated
    /// `prometheus.io/scrape: "true"` ([`pod_targets`]), while Prometheus runs.
    pod_targets: Option<tokio::task::JoinHandle<()>>,
    /// The Gateway API controller for the `istio` class ([`gateways`]), with a mesh.
    gateway_controller: Option<tokio::task::JoinHandle<()>>,
    /// Issued ServiceAccount tokens, and what each identity was allowed to do
    /// ([`auth::Auth::access`]).
    pub auth: Arc<auth::Auth>,
    identity_controllers: tokio::task::JoinHandle<()>,
    autoscaler: tokio::task::JoinHandle<()>,
    shutdown: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<()>,
    https_server: tokio::task::JoinHandle<()>,
    controllers: tokio::task::JoinHandle<()>,
}

/// A kubeconfig for the HTTPS address `https_url` (trusting `ca_pem`) that authenticates as `user`
/// with `token`, default namespace `namespace`.
fn token_kubeconfig(
    https_url: &str,
    ca_pem: &str,
    user: &str,
    token: &str,
    namespace: &str,
) -> String {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: serin-sandbox\n  cluster:\n    server: {https_url}\n    certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n- name: {user}\n  context:\n    cluster: serin-sandbox\n    user: {user}\n    namespace: {namespace}\ncurrent-context: {user}\n"
    )
}

/// Gateway pods serve the mesh's routing engine.
struct MeshGateways(mesh_proxy::GatewayHost);

impl pod_runtime::GatewayPods for MeshGateways {
    fn service_for_pod(&self, pod: &serde_json::Value) -> axum::Router {
        self.0.service_for_pod(pod)
    }
}

/// How long the tokens handed to pods last (the API server's bound tokens are refreshed by the
/// kubelet; the sandbox issues one long enough for any run instead).
const POD_TOKEN_SECONDS: i64 = 48 * 3600;

/// Credentials for pods: a fresh token of their ServiceAccount in a kubeconfig for the HTTPS address.
struct PodCredentials {
    store: Arc<Store>,
    auth: Arc<auth::Auth>,
    https_url: String,
    ca_pem: String,
}

impl process::ApiAccess for PodCredentials {
    fn kubeconfig_for(&self, namespace: &str, service_account: &str) -> Result<String, String> {
        let accounts = self
            .store
            .resource("", "v1", "serviceaccounts")
            .expect("built in");
        let account = self
            .store
            .get(&accounts, namespace, service_account)
            .map_err(|_| {
                format!(
                    "error looking up service account {namespace}/{service_account}: serviceaccount \"{service_account}\" not found"
                )
            })?;
        let uid = account["metadata"]["uid"].as_str().unwrap_or_default();
        let (token, _) = self
            .auth
            .issue(namespace, service_account, uid, &[], POD_TOKEN_SECONDS);
        Ok(token_kubeconfig(
            &self.https_url,
            &self.ca_pem,
            "token",
            &token,
            namespace,
        ))
    }

    fn core_object(&self, plural: &str, namespace: &str, name: &str) -> Option<serde_json::Value> {
        let resource = self.store.resource("", "v1", plural)?;
        self.store.get(&resource, namespace, name).ok()
    }
}

impl Sandbox {
    /// Starts the API server on two free loopback ports (plain HTTP and HTTPS) and writes
    /// `dir/kubeconfig`, `dir/ca.crt` and `dir/endpoints.json` (`{"apiserver": URL,
    /// "apiserverHttps": HTTPS_URL}`, plus `proxy`, `prometheus` and `prometheusTargets` with a mesh).
    pub async fn start(dir: &Path) -> std::io::Result<Sandbox> {
        Self::start_with(dir, SandboxOptions::default()).await
    }

    /// Like [`Sandbox::start`], with explicit settings.
    pub async fn start_with(dir: &Path, options: SandboxOptions) -> std::io::Result<Sandbox> {
        std::fs::create_dir_all(dir)?;
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let address = listener.local_addr()?;
        let url = format!("http://{address}");
        let store = Store::new();
        auth::bootstrap(&store);
        let metrics = Arc::new(instrument::Metrics::default());
        let faults = Arc::new(instrument::Faults::new(options.faults.clone()));
        let auth = Arc::new(auth::Auth::default());
        let runtime: Arc<dyn controllers::PodRuntime> =
            options.runtime.clone().unwrap_or_else(|| {
                Arc::new(controllers::DelayRuntime {
                    delay: options.pod_ready_delay,
                })
            });
        let state = server::AppState {
            store: store.clone(),
            address: address.to_string(),
            bookmark_interval: options.bookmark_interval,
            metrics: metrics.clone(),
            faults: faults.clone(),
            auth: auth.clone(),
            unauthenticated: auth::Unauthenticated::Admin,
            kubelet: Arc::new(node_kubelet::RuntimeKubelet {
                runtime: runtime.clone(),
            }),
        };
        // The mesh proxy starts before the controllers, so the runtime knows it before the first
        // pod starts (load tester pods send their traffic through it).
        let mut mesh = None;
        if let Some(settings) = &options.mesh {
            mesh_crds::install(&store);
            let upstreams = Arc::new(upstreams::SandboxUpstreams {
                store: store.clone(),
            });
            let proxy =
                mesh_proxy::MeshProxy::start(store.clone(), upstreams, settings.proxy.clone())
                    .await?;
            runtime.mesh_proxy_started(proxy.address);
            runtime.mesh_gateways_ready(Arc::new(MeshGateways(proxy.gateways())));
            gateways::install_ingress_gateway(&store);
            mesh = Some(proxy);
        }
        let certificate = tls::ServingCertificate::generate()?;
        let tls_listener =
            tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let https_address = tls_listener.local_addr()?;
        let https_url = format!("https://{https_address}");
        // Before the first pod starts: pods that call the API server do so as their ServiceAccount.
        runtime.api_access_ready(Arc::new(PodCredentials {
            store: store.clone(),
            auth: auth.clone(),
            https_url: https_url.clone(),
            ca_pem: certificate.ca_pem.clone(),
        }));
        let autoscaler =
            autoscaling::spawn(store.clone(), runtime.clone(), options.autoscaler_period);
        let controllers = controllers::spawn(
            store.clone(),
            runtime,
            options.controller_period,
            options.nodes,
            metrics.clone(),
        );
        let identity_controllers = auth::spawn_controllers(store.clone());
        let gateway_controller = mesh.is_some().then(|| gateways::spawn(store.clone()));
        let tls_listener = tls::TlsListener::new(tls_listener, &certificate)?;
        // The HTTPS address is what kubeconfigs name, so it checks credentials as a cluster does.
        let https_app = server::router(server::AppState {
            address: https_address.to_string(),
            unauthenticated: auth::Unauthenticated::Anonymous,
            ..state.clone()
        });
        let app = server::router(state);
        let https_server = tokio::spawn(async move {
            let _ = axum::serve(tls_listener, https_app).await;
        });
        std::fs::write(dir.join("ca.crt"), &certificate.ca_pem)?;
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            token_kubeconfig(
                &https_url,
                &certificate.ca_pem,
                "serin-sandbox",
                auth::ADMIN_TOKEN,
                "default",
            ),
        )?;
        let mut listed = serde_json::json!({"apiserver": url, "apiserverHttps": https_url});
        let mut prometheus = None;
        let mut prometheus_targets = None;
        let mut pod_targets = None;
        if let (Some(settings), Some(proxy)) = (&options.mesh, &mesh) {
            listed["proxy"] = serde_json::json!(format!("http://{}", proxy.address));
            if let Some(binary) = settings.prometheus.clone() {
                let target = proxy.address;
                let targets_dir = dir.join(prometheus::TARGETS_DIR);
                std::fs::create_dir_all(&targets_dir)?;
                let scraped_dir = targets_dir.clone();
                let started = tokio::task::spawn_blocking(move || {
                    prometheus::Prometheus::start_with_file_targets(
                        &binary,
                        &[target],
                        "/stats/prometheus",
                        &scraped_dir,
                    )
                })
                .await
                .map_err(std::io::Error::other)?
                .map_err(std::io::Error::other)?;
                listed["prometheus"] = serde_json::json!(started.url);
                listed["prometheusTargets"] = serde_json::json!(targets_dir);
                prometheus = Some(started);
                pod_targets = Some(pod_targets::spawn(store.clone(), targets_dir.clone()));
                prometheus_targets = Some(targets_dir);
            }
        }
        let endpoints = dir.join("endpoints.json");
        std::fs::write(&endpoints, serde_json::to_string_pretty(&listed)?)?;
        Ok(Sandbox {
            url,
            https_url,
            ca_pem: certificate.ca_pem,
            kubeconfig,
            endpoints,
            store,
            metrics,
            faults,
            mesh,
            prometheus,
            prometheus_targets,
            pod_targets,
            gateway_controller,
            auth,
            identity_controllers,
            autoscaler,
            shutdown,
            server,
            https_server,
            controllers,
        })
    }

    /// A kubeconfig that authenticates with `token` (e.g. one `kubectl create token` printed) over
    /// the HTTPS address, as that token's ServiceAccount.
    pub fn kubeconfig_for_token(&self, token: &str) -> String {
        token_kubeconfig(&self.https_url, &self.ca_pem, "token", token, "default")
    }

    /// Has the sandbox's Prometheus scrape `/metrics` at `address` as job `job`, from now until the
    /// sandbox stops (a file `NAME.json` in [`Sandbox::prometheus_targets`]).
    pub fn register_scrape_target(
        &self,
        name: &str,
        job: &str,
        address: SocketAddr,
    ) -> std::io::Result<PathBuf> {
        let dir = self.prometheus_targets.as_ref().ok_or_else(|| {
            std::io::Error::other("the sandbox runs no Prometheus to scrape the target")
        })?;
        prometheus::write_target_file(dir, name, job, &[address])
    }

    /// Replaces the fault rules in force.
    pub fn set_faults(&self, rules: Vec<instrument::FaultRule>) {
        self.faults.set(rules);
    }

    /// Stops the server. Open watches end when their connections close.
    pub async fn stop(self) {
        if let Some(mesh) = self.mesh {
            mesh.stop().await;
        }
        drop(self.prometheus);
        if let Some(task) = self.pod_targets {
            task.abort();
            let _ = task.await;
        }
        if let Some(task) = self.gateway_controller {
            task.abort();
            let _ = task.await;
        }
        // Its pods stop serving with it; a later sandbox in the same directory writes its own.
        if let Some(dir) = &self.prometheus_targets {
            pod_targets::remove_all(dir);
        }
        let _ = self.shutdown.send(());
        self.controllers.abort();
        self.identity_controllers.abort();
        self.autoscaler.abort();
        self.server.abort();
        self.https_server.abort();
        let _ = self.server.await;
    }
}
