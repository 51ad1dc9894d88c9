//! A [`PodRuntime`] that really serves: every started pod is an in-process HTTP server on its own
//! 127.0.0.1 port, running the built-in podinfo app, the load tester, Serin's operator or a mesh
//! gateway (Istio's `proxyv2` image) chosen by the image, with its readiness and liveness probes
//! run against that server. Other images stay `ErrImagePull`.
//!
//! Load tester pods send their traffic through the sandbox's mesh proxy, as a pod with an Istio
//! sidecar would: `hey ... http://podinfo-canary.test:9898/` resolves the Service and is counted in
//! the mesh telemetry without anyone setting `HTTP_PROXY` (see [`ServingOptions::loadtester_proxy`]).

use crate::loadtester_pod::LoadTesterApp;
use crate::logs::{ContainerLog, PodLogs};
use crate::pod_runtime::{PodHealth, PodRuntime, PodStart, Termination, runs_to_completion};
use crate::podinfo::{self, PodinfoSettings};
use crate::process::{ApiAccess, ProcessSpec};
use serde_json::{Value, json};
use serin_loadtester::proxy::ProxyConfig;
use std::collections::HashMap;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

pub use crate::http_probe::http_get;
pub use serin_sandbox_apiserver::services::PORTS_FIELD;

/// Longest a probe's `initialDelaySeconds` is honoured, so a pod cannot wait forever.
const MAX_INITIAL_DELAY: Duration = Duration::from_secs(60);

/// Which images run which built-in app (an image matches when its name contains a pattern).
#[derive(Clone, Debug)]
pub struct ServingOptions {
    /// Images that run the podinfo demo app; `podinfo` by default.
    pub podinfo_images: Vec<String>,
    /// Images that run the load tester; `serin-loadtester` and `flagger-loadtester` by default.
    pub loadtester_images: Vec<String>,
    /// The HTTP proxy load tester pods send their traffic through. `None` (the default): the
    /// sandbox's mesh proxy once it runs (the sandbox tells the runtime with
    /// [`PodRuntime::mesh_proxy_started`] before any pod starts), else the process's `HTTP_PROXY`
    /// and `NO_PROXY`. Either way loopback targets (`localhost`, `127.0.0.0/8`, `::1`) and the
    /// hosts in `NO_PROXY` are reached directly, and hey's `-x` still wins.
    pub loadtester_proxy: Option<SocketAddr>,
    /// Images that run Serin's operator as a child process; `serin-operator` by default.
    pub operator_images: Vec<String>,
    /// The `serin-operator` binary those pods run; by default [`crate::process::operator_binary`].
    pub operator_binary: Option<std::path::PathBuf>,
    /// Images that run a mesh gateway routing through the sandbox's mesh (the Istio ingress
    /// gateway, Gateway API gateways); `proxyv2` (Istio's proxy image) by default.
    pub gateway_images: Vec<String>,
}

impl Default for ServingOptions {
    fn default() -> Self {
        ServingOptions {
            podinfo_images: vec!["podinfo".into()],
            loadtester_images: vec!["serin-loadtester".into(), "flagger-loadtester".into()],
            loadtester_proxy: None,
            operator_images: vec!["serin-operator".into()],
            operator_binary: crate::process::operator_binary(),
            gateway_images: vec!["proxyv2".into()],
        }
    }
}

/// Hosts a load tester pod always reaches directly, even with a proxy: the pods themselves.
const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.0/8", "::1/128"];

/// The load generator's proxy settings when its traffic goes through `proxy`: loopback and the
/// process's `NO_PROXY` entries bypass it.
pub fn loadtester_proxy_config(proxy: SocketAddr) -> ProxyConfig {
    let (_, from_env) = serin_loadtester::proxy::proxy_env();
    let mut no_proxy: Vec<String> = LOOPBACK.iter().map(|entry| entry.to_string()).collect();
    no_proxy.extend(from_env);
    ProxyConfig {
        http_proxy: Some((proxy.ip().to_string(), proxy.port())),
        no_proxy,
    }
}

#[derive(Clone)]
enum App {
    Podinfo(PodinfoSettings),
    LoadTester(LoadTesterApp),
    Operator(Arc<ProcessSpec>),
    /// A gateway pod's HTTP service, routing through the mesh.
    Gateway(axum::Router),
}

/// Why a pod's app cannot start.
enum Refusal {
    /// No container's image is one the sandbox runs.
    Image(String),
    /// The image is known but its container cannot be set up.
    Container(&'static str, String),
}

/// One container probe, with Kubernetes' defaults for the fields left out.
#[derive(Clone, Debug)]
struct Probe {
    /// `None` for probes the sandbox cannot run (exec), which count as passing.
    check: Option<ProbeCheck>,
    initial_delay: Duration,
    period: Duration,
    timeout: Duration,
    failure_threshold: u32,
}

#[derive(Clone, Debug)]
enum ProbeCheck {
    HttpGet(String),
    TcpSocket,
}

impl Probe {
    fn from_spec(spec: &Value) -> Option<Probe> {
        if !spec.is_object() {
            return None;
        }
        let seconds =
            |key: &str, default: u64| Duration::from_secs(spec[key].as_u64().unwrap_or(default));
        let check = if spec["httpGet"].is_object() {
            Some(ProbeCheck::HttpGet(
                spec["httpGet"]["path"].as_str().unwrap_or("/").to_string(),
            ))
        } else if spec["tcpSocket"].is_object() {
            Some(ProbeCheck::TcpSocket)
        } else {
            None
        };
        Some(Probe {
            check,
            initial_delay: seconds("initialDelaySeconds", 0).min(MAX_INITIAL_DELAY),
            period: seconds("periodSeconds", 10).max(Duration::from_secs(1)),
            timeout: seconds("timeoutSeconds", 1).max(Duration::from_secs(1)),
            failure_threshold: spec["failureThreshold"].as_u64().unwrap_or(3).max(1) as u32,
        })
    }

    async fn passes(&self, address: SocketAddr) -> bool {
        match &self.check {
            None => true,
            Some(ProbeCheck::TcpSocket) => {
                tokio::time::timeout(self.timeout, tokio::net::TcpStream::connect(address))
                    .await
                    .is_ok_and(|c| c.is_ok())
            }
            Some(ProbeCheck::HttpGet(path)) => http_get(address, path, self.timeout)
                .await
                .is_ok_and(|(status, _)| (200..400).contains(&status)),
        }
    }
}

struct PodServer {
    address: SocketAddr,
    ports: Value,
    health: Arc<Mutex<PodHealth>>,
    stop: watch::Sender<bool>,
    app: App,
    meter: RequestMeter,
    logs: Arc<PodLogs>,
}

/// Counts the requests a pod served, and keeps a few timed readings of the count for its rate.
#[derive(Default)]
struct RequestMeter {
    served: Arc<AtomicU64>,
    readings: Mutex<VecDeque<(Instant, u64)>>,
}

/// The window `kubectl top` and the HPA see usage over, as metrics-server's.
const USAGE_WINDOW: Duration = Duration::from_secs(30);

impl RequestMeter {
    /// Requests per second over about the last [`USAGE_WINDOW`] (0 until two readings exist).
    fn rate(&self) -> f64 {
        let now = Instant::now();
        let total = self.served.load(Ordering::Relaxed);
        let mut readings = self.readings.lock().unwrap();
        readings.push_back((now, total));
        // Keep one reading older than the window, so the rate always spans a full window.
        while readings.len() > 2 && now.duration_since(readings[1].0) >= USAGE_WINDOW {
            readings.pop_front();
        }
        let (since, count) = readings[0];
        let elapsed = now.duration_since(since).as_secs_f64();
        if elapsed < 1.0 {
            return 0.0;
        }
        (total - count) as f64 / elapsed
    }
}

/// A load tester pod that runs one command to completion (a Job's pod).
struct CommandRun {
    logs: Arc<PodLogs>,
    ended: Arc<Mutex<Option<Termination>>>,
    task: tokio::task::JoinHandle<()>,
}

/// Runs a load tester container's command as its image would: `hey` through the built-in load
/// generator, anything else through the sandbox's command interpreter (`sh -c`, `curl`, `exit`,
/// ...; see [`crate::exec`]), whose exit code ends the pod.
async fn run_command(
    words: Vec<String>,
    proxy: ProxyConfig,
    context: crate::exec::Context,
    log: Arc<ContainerLog>,
) -> Termination {
    let ended = |exit_code: i32, reason: &str| Termination {
        exit_code,
        reason: reason.into(),
        message: String::new(),
    };
    if !serin_loadtester::hey::is_hey(&words) {
        let program = words.first().cloned().unwrap_or_default();
        let outcome = crate::exec::run(&words, &context).await;
        // A program the image lacks never starts: containerd reports it, not the program.
        if outcome.exit_code == 127 && !matches!(program.as_str(), "sh" | "bash") {
            let message = format!(
                "failed to create containerd task: exec: \"{program}\": executable file not found in $PATH"
            );
            log.write(&message);
            return Termination {
                exit_code: 128,
                reason: "StartError".into(),
                message,
            };
        }
        for text in [&outcome.stdout, &outcome.stderr] {
            if !text.is_empty() {
                log.write(text.trim_end());
            }
        }
        return match outcome.exit_code {
            0 => ended(0, "Completed"),
            code => ended(code, "Error"),
        };
    }
    match serin_loadtester::hey::parse_hey_args(&words[1..]) {
        Ok(plan) => {
            let report =
                serin_loadtester::load::run_load(&plan, &proxy, Duration::from_secs(3600)).await;
            log.write(&report.summary());
            ended(0, "Completed")
        }
        Err(error) => {
            log.write(&error);
            ended(1, "Error")
        }
    }
}

/// Runs pods as in-process HTTP servers on loopback ports; see the module documentation.
pub struct ServingRuntime {
    options: ServingOptions,
    pods: Mutex<HashMap<String, PodServer>>,
    commands: Mutex<HashMap<String, CommandRun>>,
    /// The sandbox's mesh proxy, once it runs.
    mesh_proxy: Mutex<Option<SocketAddr>>,
    /// Credentials for pods that call the API server, once the sandbox hands them out.
    api_access: Mutex<Option<Arc<dyn ApiAccess>>>,
    /// The mesh gateway pods route through, once it runs.
    gateways: Mutex<Option<Arc<dyn crate::pod_runtime::GatewayPods>>>,
}

impl Default for ServingRuntime {
    fn default() -> Self {
        ServingRuntime::new(ServingOptions::default())
    }
}

fn pod_uid(pod: &Value) -> String {
    pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

impl ServingRuntime {
    /// A runtime choosing apps by `options`.
    pub fn new(options: ServingOptions) -> Self {
        ServingRuntime {
            options,
            pods: Mutex::default(),
            commands: Mutex::default(),
            mesh_proxy: Mutex::default(),
            api_access: Mutex::default(),
            gateways: Mutex::default(),
        }
    }

    /// What load tester pods started now send their traffic through: the explicit
    /// [`ServingOptions::loadtester_proxy`], else the mesh proxy, else the environment.
    pub fn loadtester_proxy(&self) -> ProxyConfig {
        match self
            .options
            .loadtester_proxy
            .or(*self.mesh_proxy.lock().unwrap())
        {
            Some(proxy) => loadtester_proxy_config(proxy),
            None => ProxyConfig::from_env(),
        }
    }

    /// Every image pattern this runtime runs.
    fn served_images(&self) -> impl Iterator<Item = &String> {
        self.options
            .podinfo_images
            .iter()
            .chain(&self.options.loadtester_images)
            .chain(&self.options.operator_images)
            .chain(&self.options.gateway_images)
    }

    /// The loopback address serving the pod with this uid, while it runs.
    pub fn address(&self, uid: &str) -> Option<SocketAddr> {
        self.pods.lock().unwrap().get(uid).map(|p| p.address)
    }

    /// The app for the first container whose image the sandbox serves, or the first image it
    /// cannot serve.
    fn app_for(&self, pod: &Value) -> Result<(App, Value), Refusal> {
        let containers = pod["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut chosen = None;
        for container in &containers {
            let image = container["image"].as_str().unwrap_or_default();
            let matches = |patterns: &[String]| patterns.iter().any(|p| image.contains(p.as_str()));
            let app = if matches(&self.options.podinfo_images) {
                App::Podinfo(PodinfoSettings::for_pod(pod, container))
            } else if matches(&self.options.loadtester_images) {
                let access = self.api_access.lock().unwrap().clone();
                let app = LoadTesterApp::for_pod(
                    pod,
                    container,
                    self.loadtester_proxy(),
                    access.as_deref(),
                )
                .map_err(|refused| Refusal::Container(refused.reason, refused.message))?;
                App::LoadTester(app)
            } else if matches(&self.options.operator_images) {
                App::Operator(Arc::new(self.operator_process(pod, container)?))
            } else if matches(&self.options.gateway_images) {
                let gateways = self.gateways.lock().unwrap().clone();
                match gateways {
                    Some(gateways) => App::Gateway(gateways.service_for_pod(pod)),
                    None => {
                        return Err(Refusal::Container(
                            "CreateContainerConfigError",
                            format!(
                                "{image} runs a mesh gateway, and the sandbox runs no mesh (start it with one: SandboxOptions::mesh)"
                            ),
                        ));
                    }
                }
            } else {
                return Err(Refusal::Image(image.to_string()));
            };
            chosen.get_or_insert((app, container.clone()));
        }
        chosen.ok_or_else(|| Refusal::Image(String::new()))
    }

    /// The operator binary, run for `container` as the pod's ServiceAccount.
    fn operator_process(&self, pod: &Value, container: &Value) -> Result<ProcessSpec, Refusal> {
        let Some(binary) = self.options.operator_binary.clone() else {
            return Err(Refusal::Container(
                "CreateContainerError",
                format!(
                    "the sandbox runs {} images with the serin-operator binary built from this workspace, and found none: build it (cargo build -p serin-operator) or set {}",
                    container["image"].as_str().unwrap_or_default(),
                    crate::process::OPERATOR_BINARY_ENV
                ),
            ));
        };
        let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default");
        let account = pod["spec"]["serviceAccountName"]
            .as_str()
            .filter(|a| !a.is_empty())
            .unwrap_or("default");
        let Some(access) = self.api_access.lock().unwrap().clone() else {
            return Err(Refusal::Container(
                "CreateContainerConfigError",
                "the sandbox hands out no API credentials to pods".into(),
            ));
        };
        let kubeconfig = access
            .kubeconfig_for(namespace, account)
            .map_err(|e| Refusal::Container("CreateContainerConfigError", e))?;
        let mut spec = ProcessSpec::of(pod, container, binary, kubeconfig, access.as_ref())
            .map_err(|e| Refusal::Container("CreateContainerConfigError", e))?;
        // Its webhooks call cluster names (http://flagger-loadtester.test/), which only the mesh
        // proxy resolves: the proxy goes in the environment, as a sidecar would take the traffic.
        // The container's own settings come later and win.
        if let Some(proxy) = *self.mesh_proxy.lock().unwrap() {
            let mut env = vec![
                ("HTTP_PROXY".to_string(), format!("http://{proxy}")),
                (
                    "NO_PROXY".to_string(),
                    "127.0.0.1,localhost,::1".to_string(),
                ),
            ];
            env.append(&mut spec.env);
            spec.env = env;
        }
        Ok(spec)
    }
}

/// Every declared container port, plus the ports the app itself listens on (podinfo's `--port` and
/// `--port-metrics`), maps to the pod's one loopback server.
fn port_mapping(pod: &Value, app: &App, address: SocketAddr) -> Value {
    let mut ports: Vec<Value> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for container in pod["spec"]["containers"].as_array().into_iter().flatten() {
        for port in container["ports"].as_array().into_iter().flatten() {
            if let Some(number) = port["containerPort"].as_u64()
                && seen.insert(number)
            {
                let mut entry = json!({"containerPort": number, "hostIP": "127.0.0.1", "hostPort": address.port()});
                if let Some(name) = port["name"].as_str() {
                    entry["name"] = json!(name);
                }
                ports.push(entry);
            }
        }
    }
    let own_ports: Vec<u64> = match app {
        App::Podinfo(settings) => std::iter::once(settings.port)
            .chain(settings.metrics_port)
            .chain(settings.grpc_port)
            .map(u64::from)
            .collect(),
        App::LoadTester(_) | App::Operator(_) => vec![8080],
        // Envoy's readiness port.
        App::Gateway(_) => vec![15021],
    };
    for own_port in own_ports {
        if seen.insert(own_port) {
            ports.push(
                json!({"containerPort": own_port, "hostIP": "127.0.0.1", "hostPort": address.port()}),
            );
        }
    }
    Value::Array(ports)
}

/// What a pod's app reports to: its request counter and its container's log.
#[derive(Clone)]
struct Outputs {
    served: Arc<AtomicU64>,
    log: Arc<ContainerLog>,
}

fn log_json(log: &ContainerLog, line: Value) {
    let mut line = line;
    line["ts"] = json!(k8s_openapi::jiff::Timestamp::now().to_string());
    log.write(&line.to_string());
}

async fn serve(
    app: App,
    listener: std::net::TcpListener,
    mut stop: watch::Receiver<bool>,
    outputs: Outputs,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    match app {
        App::Podinfo(settings) => {
            log_json(
                &outputs.log,
                json!({"level": "info", "msg": "Starting podinfo",
                "version": settings.version, "port": settings.port.to_string()}),
            );
            log_json(
                &outputs.log,
                json!({"level": "info", "msg": "Starting HTTP Server",
                "addr": format!(":{}", settings.port)}),
            );
            let Outputs { served, log } = outputs;
            let counted = podinfo::router(settings).layer(axum::middleware::from_fn(
                move |request: axum::extract::Request, next: axum::middleware::Next| {
                    // Prometheus' scrapes reach podinfo's metrics port, which neither logs nor
                    // counts as load.
                    let scrape = request.uri().path() == "/metrics";
                    if !scrape {
                        served.fetch_add(1, Ordering::Relaxed);
                    }
                    let log = log.clone();
                    let started = Instant::now();
                    let (method, uri) = (request.method().to_string(), request.uri().to_string());
                    let agent = request
                        .headers()
                        .get(axum::http::header::USER_AGENT)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string();
                    async move {
                        let response = next.run(request).await;
                        if !scrape {
                            log_json(
                                &log,
                                json!({"level": "info", "msg": "request", "method": method,
                                "uri": uri, "status": response.status().as_u16(), "user-agent": agent,
                                "duration": format!("{:?}", started.elapsed())}),
                            );
                        }
                        response
                    }
                },
            ));
            serve_until_stopped(listener, counted, stop).await;
        }
        App::Operator(spec) => {
            let Ok(address) = listener.local_addr() else {
                return;
            };
            // The process binds the pod's port itself.
            drop(listener);
            let dir = std::env::temp_dir().join(format!(
                "serin-sandbox-pod-{}-{}",
                std::process::id(),
                address.port()
            ));
            crate::process::run(&spec, address, &dir, stop, outputs.log).await;
            let _ = std::fs::remove_dir_all(&dir);
        }
        App::Gateway(service) => {
            log_json(
                &outputs.log,
                json!({"level": "info", "msg": "Envoy proxy is ready", "port": port}),
            );
            let served = outputs.served.clone();
            let counted = service.layer(axum::middleware::from_fn(
                move |request: axum::extract::Request, next: axum::middleware::Next| {
                    served.fetch_add(1, Ordering::Relaxed);
                    next.run(request)
                },
            ));
            serve_until_stopped(listener, counted, stop).await;
        }
        App::LoadTester(setup) => {
            log_json(
                &outputs.log,
                json!({"level": "info", "msg": "Starting load tester",
                "port": port}),
            );
            let log = outputs.log.clone();
            let options = serin_loadtester::Options {
                log_sink: Some(Arc::new(move |line: &str| log.write(line))),
                ..setup.options(port)
            };
            if let Ok(server) = serin_loadtester::Server::start(listener, options) {
                let _ = stop.wait_for(|stopping| *stopping).await;
                server.stop().await;
            }
        }
    }
}

/// Serves `app` on `listener` until `stop` turns true.
async fn serve_until_stopped(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    mut stop: watch::Receiver<bool>,
) {
    let _ = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|stopping| *stopping).await;
        })
        .await;
}

fn bind(address: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(address)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves the pod and runs its probes until `stop`; a liveness failure restarts the server on the
/// same port (a bounded number of bind attempts) and counts a restart.
async fn supervise(
    app: App,
    first: std::net::TcpListener,
    address: SocketAddr,
    (readiness, liveness): (Option<Probe>, Option<Probe>),
    health: Arc<Mutex<PodHealth>>,
    stop: watch::Receiver<bool>,
    outputs: Outputs,
) {
    let mut listener = Some(first);
    loop {
        let Some(current) = listener.take() else {
            return;
        };
        // probe_until_dead returns both when the pod stops and when liveness fails: either way
        // this server ends.
        let (end_server, server_ends) = watch::channel(false);
        let server = tokio::spawn(serve(app.clone(), current, server_ends, outputs.clone()));
        let live = probe_until_dead(
            address,
            readiness.clone(),
            liveness.clone(),
            &health,
            stop.clone(),
        )
        .await;
        let _ = end_server.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(2), server).await;
        if live {
            return;
        }
        {
            let mut h = health.lock().unwrap();
            h.ready = false;
            h.restarts += 1;
        }
        outputs.log.restarted();
        for _ in 0..40 {
            if *stop.borrow() {
                return;
            }
            match bind(address) {
                Ok(l) => {
                    listener = Some(l);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

/// Runs the probes until the pod stops (returns true) or its liveness probe fails
/// `failureThreshold` times in a row (returns false).
async fn probe_until_dead(
    address: SocketAddr,
    readiness: Option<Probe>,
    liveness: Option<Probe>,
    health: &Mutex<PodHealth>,
    mut stop: watch::Receiver<bool>,
) -> bool {
    let started = tokio::time::Instant::now();
    let mut next_readiness = started
        + readiness
            .as_ref()
            .map_or(Duration::ZERO, |p| p.initial_delay);
    let mut next_liveness = started
        + liveness
            .as_ref()
            .map_or(Duration::ZERO, |p| p.initial_delay);
    let mut readiness_failures = 0;
    let mut liveness_failures = 0;
    if readiness.is_none() {
        health.lock().unwrap().ready = true;
    }
    loop {
        let now = tokio::time::Instant::now();
        if let Some(probe) = &readiness
            && now >= next_readiness
        {
            if probe.passes(address).await {
                readiness_failures = 0;
                health.lock().unwrap().ready = true;
            } else {
                readiness_failures += 1;
                let mut h = health.lock().unwrap();
                // Not yet ready stays unready; a ready pod turns unready after the threshold.
                if !h.ready || readiness_failures >= probe.failure_threshold {
                    h.ready = false;
                }
            }
            next_readiness = tokio::time::Instant::now() + probe.period;
        }
        if let Some(probe) = &liveness
            && now >= next_liveness
        {
            if probe.passes(address).await {
                liveness_failures = 0;
            } else {
                liveness_failures += 1;
                if liveness_failures >= probe.failure_threshold {
                    return false;
                }
            }
            next_liveness = tokio::time::Instant::now() + probe.period;
        }
        let wake = match (&readiness, &liveness) {
            (Some(_), Some(_)) => next_readiness.min(next_liveness),
            (Some(_), None) => next_readiness,
            (None, Some(_)) => next_liveness,
            (None, None) => started + Duration::from_secs(3600),
        };
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return true,
            _ = tokio::time::sleep_until(wake) => {}
        }
    }
}

impl PodRuntime for ServingRuntime {
    fn mesh_proxy_started(&self, proxy: SocketAddr) {
        *self.mesh_proxy.lock().unwrap() = Some(proxy);
    }

    fn api_access_ready(&self, access: Arc<dyn ApiAccess>) {
        *self.api_access.lock().unwrap() = Some(access);
    }

    fn mesh_gateways_ready(&self, gateways: Arc<dyn crate::pod_runtime::GatewayPods>) {
        *self.gateways.lock().unwrap() = Some(gateways);
    }

    fn start(&self, pod: &Value) -> PodStart {
        let uid = pod_uid(pod);
        if self.pods.lock().unwrap().contains_key(&uid)
            || self.commands.lock().unwrap().contains_key(&uid)
        {
            return PodStart::ReadyAfter(Duration::ZERO);
        }
        let (app, container) = match self.app_for(pod) {
            Ok(found) => found,
            Err(Refusal::Image(image)) => {
                return PodStart::Waiting {
                    reason: "ErrImagePull".into(),
                    message: format!(
                        "failed to pull image \"{image}\": the sandbox only runs images matching {:?}",
                        self.served_images().collect::<Vec<_>>()
                    ),
                };
            }
            Err(Refusal::Container(reason, message)) => {
                return PodStart::Waiting {
                    reason: reason.into(),
                    message,
                };
            }
        };
        let words: Vec<String> = ["command", "args"]
            .iter()
            .flat_map(|field| container[*field].as_array().cloned().unwrap_or_default())
            .filter_map(|w| w.as_str().map(String::from))
            .collect();
        if let App::LoadTester(setup) = &app
            && runs_to_completion(pod)
            && !words.is_empty()
        {
            let logs = Arc::new(PodLogs::for_pod(pod));
            let log = container["name"]
                .as_str()
                .and_then(|name| logs.container(name))
                .unwrap_or_default();
            let ended = Arc::new(Mutex::new(None));
            let recorded = ended.clone();
            let proxy = setup.proxy.clone();
            let context = crate::exec::Context::of(pod, &container, proxy.clone());
            let task = tokio::spawn(async move {
                let termination = run_command(words, proxy, context, log.clone()).await;
                *recorded.lock().unwrap() = Some(termination);
                log.clone().end();
            });
            self.commands
                .lock()
                .unwrap()
                .insert(uid, CommandRun { logs, ended, task });
            return PodStart::ReadyAfter(Duration::ZERO);
        }
        let listener = match bind(SocketAddr::from(([127, 0, 0, 1], 0))) {
            Ok(l) => l,
            Err(e) => {
                return PodStart::Waiting {
                    reason: "RunContainerError".into(),
                    message: format!("binding a loopback port: {e}"),
                };
            }
        };
        let Ok(address) = listener.local_addr() else {
            return PodStart::Waiting {
                reason: "RunContainerError".into(),
                message: "no local address".into(),
            };
        };
        let health = Arc::new(Mutex::new(PodHealth::default()));
        let (stop, stopped) = watch::channel(false);
        let meter = RequestMeter::default();
        let logs = Arc::new(PodLogs::for_pod(pod));
        let app_log = container["name"]
            .as_str()
            .and_then(|name| logs.container(name))
            .unwrap_or_default();
        tokio::spawn(supervise(
            app.clone(),
            listener,
            address,
            (
                Probe::from_spec(&container["readinessProbe"]),
                Probe::from_spec(&container["livenessProbe"]),
            ),
            health.clone(),
            stopped,
            Outputs {
                served: meter.served.clone(),
                log: app_log,
            },
        ));
        self.pods.lock().unwrap().insert(
            uid,
            PodServer {
                address,
                ports: port_mapping(pod, &app, address),
                health,
                stop,
                app,
                meter,
                logs,
            },
        );
        PodStart::ReadyAfter(Duration::ZERO)
    }

    fn running_status(&self, pod: &Value) -> Value {
        match self.pods.lock().unwrap().get(&pod_uid(pod)) {
            Some(server) => json!({
                "podIP": "127.0.0.1",
                "podIPs": [{"ip": "127.0.0.1"}],
                PORTS_FIELD: server.ports
            }),
            None => json!({}),
        }
    }

    fn health(&self, pod: &Value) -> Option<PodHealth> {
        self.pods
            .lock()
            .unwrap()
            .get(&pod_uid(pod))
            .map(|server| server.health.lock().unwrap().clone())
    }

    /// The sandbox's CPU estimate: 1m idle plus 1m per request per second served over the last
    /// 30 s (podinfo); 12 MiB for podinfo, 16 MiB for the load tester. Other containers idle.
    fn usage(&self, pod: &Value) -> Vec<crate::pod_runtime::ContainerUsage> {
        let mut usage = crate::pod_runtime::idle_usage(pod);
        let pods = self.pods.lock().unwrap();
        let Some(server) = pods.get(&pod_uid(pod)) else {
            return usage;
        };
        // The app runs as the pod's first container the sandbox can serve; it is the one that
        // does the work.
        let serving = pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .position(|c| {
                let image = c["image"].as_str().unwrap_or_default();
                self.served_images().any(|p| image.contains(p.as_str()))
            });
        if let Some(container) = serving.and_then(|i| usage.get_mut(i)) {
            match server.app {
                App::Podinfo(_) => {
                    container.cpu_millis = 1 + server.meter.rate().round() as u64;
                    container.memory_bytes = 12 << 20;
                }
                App::LoadTester(_) => {
                    container.cpu_millis = 2;
                    container.memory_bytes = 16 << 20;
                }
                App::Operator(_) => {
                    container.cpu_millis = 5;
                    container.memory_bytes = 24 << 20;
                }
                App::Gateway(_) => {
                    container.cpu_millis = 2 + server.meter.rate().round() as u64;
                    container.memory_bytes = 40 << 20;
                }
            }
        }
        usage
    }

    fn logs(&self, pod: &Value) -> Option<Arc<PodLogs>> {
        let uid = pod_uid(pod);
        if let Some(run) = self.commands.lock().unwrap().get(&uid) {
            return Some(run.logs.clone());
        }
        self.pods
            .lock()
            .unwrap()
            .get(&uid)
            .map(|server| server.logs.clone())
    }

    fn exec_context(&self, pod: &Value, container: &Value) -> crate::exec::Context {
        let mut context = crate::exec::Context::of(pod, container, self.loadtester_proxy());
        let image = container["image"].as_str().unwrap_or_default();
        context.load_tester = self
            .options
            .loadtester_images
            .iter()
            .any(|p| image.contains(p.as_str()));
        context
    }

    fn terminated(&self, pod: &Value) -> Option<Termination> {
        self.commands
            .lock()
            .unwrap()
            .get(&pod_uid(pod))
            .and_then(|run| run.ended.lock().unwrap().clone())
    }

    fn stop(&self, pod: &Value) {
        if let Some(run) = self.commands.lock().unwrap().remove(&pod_uid(pod)) {
            run.task.abort();
            run.logs.end();
        }
        if let Some(server) = self.pods.lock().unwrap().remove(&pod_uid(pod)) {
            server.logs.end();
            let _ = server.stop.send(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_testers_use_the_mesh_proxy_but_reach_loopback_directly() {
        let runtime = ServingRuntime::default();
        let mesh: SocketAddr = "127.0.0.1:15001".parse().unwrap();
        runtime.mesh_proxy_started(mesh);
        let config = runtime.loadtester_proxy();
        assert_eq!(config.http_proxy, Some(("127.0.0.1".into(), 15001)));
        for host in ["localhost", "127.0.0.1", "127.0.0.53", "::1"] {
            assert!(
                config.proxy_for(host).is_none(),
                "{host} is reached directly"
            );
        }

        // An explicit proxy wins over the mesh.
        let explicit = ServingRuntime::new(ServingOptions {
            loadtester_proxy: Some("127.0.0.1:3128".parse().unwrap()),
            ..ServingOptions::default()
        });
        explicit.mesh_proxy_started(mesh);
        assert_eq!(
            explicit.loadtester_proxy().http_proxy,
            Some(("127.0.0.1".into(), 3128))
        );
    }

    #[test]
    fn podinfos_own_ports_map_to_its_server_even_when_not_declared() {
        let pod = json!({"metadata": {"name": "podinfo-a-b"}, "spec": {"containers": [{
            "name": "podinfod",
            "image": "ghcr.io/stefanprodan/podinfo:6.0.1",
            "command": ["./podinfo", "--port=9898", "--port-metrics=9797"],
            "ports": [{"name": "http", "containerPort": 9898}]
        }]}});
        let container = &pod["spec"]["containers"][0];
        let app = App::Podinfo(PodinfoSettings::for_pod(&pod, container));
        let address: SocketAddr = "127.0.0.1:40123".parse().unwrap();
        assert_eq!(
            port_mapping(&pod, &app, address),
            json!([
                {"containerPort": 9898, "hostIP": "127.0.0.1", "hostPort": 40123, "name": "http"},
                {"containerPort": 9797, "hostIP": "127.0.0.1", "hostPort": 40123}
            ])
        );
    }
}
