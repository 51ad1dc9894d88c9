//! Serin's load tester: a Flagger-compatible webhook receiver that generates traffic for canary
//! analysis (with a built-in, hey-compatible load generator), runs commands when allowed (or
//! through a pluggable [`shell::CommandRunner`]), and keeps manual gates. The same API as Flagger's `flagger-loadtester`, so existing webhooks work.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use serin_loadtester::{Options, Server};
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let server = Server::start(listener, Options::default())?;
//! println!("load tester at {}", server.url());
//! server.stop().await;
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

pub mod hey;
pub mod histogram;
pub mod load;
pub mod payload;
pub mod proxy;
pub mod shell;
pub mod tasks;
pub mod words;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use payload::parse_payload;
use proxy::ProxyConfig;
use regex::Regex;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tasks::{TaskOutcome, TaskRecord, handle_task};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use load::LoadReport;

/// How many finished tasks [`Server::task_history`] remembers.
pub const TASK_HISTORY_LIMIT: usize = 1000;

/// Settings of a load tester.
#[derive(Clone)]
pub struct Options {
    /// Longest a task may run; `-z` longer than this is cut, commands are killed (Flagger's default 1h).
    pub timeout: Duration,
    /// Run commands other than hey (`type: bash`, helm, kubectl, or a non-hey `cmd`).
    pub allow_shell: bool,
    /// Proxy for the load generator's http:// requests; the default reads HTTP_PROXY and NO_PROXY.
    pub proxy: ProxyConfig,
    /// When set, only payloads whose namespace matches may run tasks (Flagger's `-namespace-regexp`).
    pub namespace_filter: Option<Regex>,
    /// Where to write one JSON log line per task start and end, besides `tracing` (the sandbox
    /// keeps them as the pod's log for `kubectl logs`).
    pub log_sink: Option<LogSink>,
    /// Runs bash, helm and kubectl tasks and non-hey `cmd` tasks instead of a process, and
    /// whether or not `allow_shell` is set (the sandbox runs Flagger's image's commands through
    /// its interpreter this way). `None`: processes, only with `allow_shell`.
    pub command_runner: Option<Arc<dyn shell::CommandRunner>>,
    /// The namespace a short hey target host (`http://podinfo-canary:9898/`) is expanded in, as a
    /// pod's DNS search path would (`podinfo-canary.test`). `None`: hosts are used as written.
    pub search_namespace: Option<String>,
}

/// Receives the load tester's log lines.
pub type LogSink = Arc<dyn Fn(&str) + Send + Sync>;

impl Default for Options {
    fn default() -> Self {
        Options {
            timeout: Duration::from_secs(3600),
            allow_shell: false,
            proxy: ProxyConfig::from_env(),
            namespace_filter: None,
            log_sink: None,
            command_runner: None,
            search_namespace: None,
        }
    }
}

/// State shared by the handlers and the running tasks.
pub(crate) struct Shared {
    pub(crate) options: Options,
    gates: Mutex<HashMap<String, bool>>,
    pub(crate) running: Mutex<HashSet<String>>,
    pub(crate) history: Mutex<Vec<TaskRecord>>,
    pub(crate) shutdown: watch::Receiver<bool>,
    task_requests: AtomicU64,
}

/// A running load tester; [`Server::stop`] shuts it down and cancels its tasks.
pub struct Server {
    address: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    serving: JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// Serves the load tester's API on `listener` until [`Server::stop`].
    pub fn start(listener: TcpListener, options: Options) -> std::io::Result<Server> {
        let address = listener.local_addr()?;
        let (stop, shutdown) = watch::channel(false);
        let shared = Arc::new(Shared {
            options,
            gates: Mutex::default(),
            running: Mutex::default(),
            history: Mutex::default(),
            shutdown: shutdown.clone(),
            task_requests: AtomicU64::new(0),
        });
        let app = router(shared.clone());
        let mut stopped = shutdown;
        let serving = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.wait_for(|stopping| *stopping).await;
                })
                .await
        });
        Ok(Server {
            address,
            shared,
            stop,
            serving,
        })
    }

    /// The address the API listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// The API's base URL, e.g. `http://127.0.0.1:8080`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Finished (and skipped) tasks, oldest first, up to [`TASK_HISTORY_LIMIT`].
    pub fn task_history(&self) -> Vec<TaskRecord> {
        self.shared.history.lock().unwrap().clone()
    }

    /// Keys (`<name>.<namespace><cmd>`) of the `cmd` tasks running now.
    pub fn running_tasks(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .shared
            .running
            .lock()
            .unwrap()
            .iter()
            .cloned()
            .collect();
        keys.sort();
        keys
    }

    /// Stops serving and cancels every running task (their commands are killed).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.serving.await;
    }
}

/// Serves the load tester's API on `listener` until `shutdown` completes, then cancels its tasks.
pub async fn serve(
    listener: TcpListener,
    options: Options,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let server = Server::start(listener, options)?;
    shutdown.await;
    server.stop().await;
    Ok(())
}

fn router(shared: Arc<Shared>) -> Router {
    // Like Flagger's Go mux, methods are not checked and every other path is the task endpoint.
    Router::new()
        .route("/healthz", any(|| async { text(200, "OK") }))
        .route("/metrics", any(metrics))
        .route("/gate/approve", any(|| async { text(200, "OK") }))
        .route("/gate/halt", any(|| async { text(403, "Forbidden") }))
        .route(
            "/gate/check",
            any(|state, body| check_gate(state, body, "")),
        )
        .route(
            "/gate/open",
            any(|state, body| set_gate(state, body, "", true)),
        )
        .route(
            "/gate/close",
            any(|state, body| set_gate(state, body, "", false)),
        )
        .route(
            "/rollback/check",
            any(|state, body| check_gate(state, body, "rollback.")),
        )
        .route(
            "/rollback/open",
            any(|state, body| set_gate(state, body, "rollback.", true)),
        )
        .route(
            "/rollback/close",
            any(|state, body| set_gate(state, body, "rollback.", false)),
        )
        .fallback(run_task)
        .with_state(shared)
}

fn text(status: u16, body: impl Into<String>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut body = body.into();
    if !body.is_empty() && !body.ends_with('\n') {
        body.push('\n');
    }
    (status, body).into_response()
}

async fn check_gate(
    State(shared): State<Arc<Shared>>,
    body: Bytes,
    prefix: &'static str,
) -> Response {
    let payload = match parse_payload(&body) {
        Ok(payload) => payload,
        Err(error) => return text(400, error),
    };
    let key = format!("{prefix}{}", payload.canary());
    let open = shared
        .gates
        .lock()
        .unwrap()
        .get(&key)
        .copied()
        .unwrap_or(false);
    tracing::debug!(
        "gate {key} checked: {}",
        if open { "open" } else { "closed" }
    );
    if open {
        text(200, "Approved")
    } else {
        text(403, "Forbidden")
    }
}

async fn set_gate(
    State(shared): State<Arc<Shared>>,
    body: Bytes,
    prefix: &'static str,
    open: bool,
) -> Response {
    let payload = match parse_payload(&body) {
        Ok(payload) => payload,
        Err(error) => return text(400, error),
    };
    let key = format!("{prefix}{}", payload.canary());
    shared.gates.lock().unwrap().insert(key.clone(), open);
    tracing::info!("gate {key} {}", if open { "opened" } else { "closed" });
    StatusCode::ACCEPTED.into_response()
}

async fn run_task(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    shared.task_requests.fetch_add(1, Ordering::Relaxed);
    let payload = match parse_payload(&body) {
        Ok(payload) => payload,
        Err(error) => {
            tracing::warn!("bad task payload: {error}");
            return text(400, error);
        }
    };
    match handle_task(&shared, payload).await {
        Ok((status, body)) => text(status, body),
        Err(refusal) => {
            tracing::warn!("{}", refusal.message);
            text(refusal.status, refusal.message)
        }
    }
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    let running = shared.running.lock().unwrap().len();
    let (mut load, mut commands, mut skipped) = (0, 0, 0);
    let mut requests_sent = 0;
    for record in shared.history.lock().unwrap().iter() {
        match &record.outcome {
            TaskOutcome::Load(report) => {
                load += 1;
                requests_sent += report.requests;
            }
            TaskOutcome::Command(_) => commands += 1,
            TaskOutcome::Skipped => skipped += 1,
        }
    }
    let body = format!(
        "# HELP serin_loadtester_task_requests_total Requests to the task endpoint.\n\
         # TYPE serin_loadtester_task_requests_total counter\n\
         serin_loadtester_task_requests_total {}\n\
         # HELP serin_loadtester_tasks_running Tasks running now.\n\
         # TYPE serin_loadtester_tasks_running gauge\n\
         serin_loadtester_tasks_running {running}\n\
         # HELP serin_loadtester_tasks_finished Finished tasks among the last {TASK_HISTORY_LIMIT}, by kind.\n\
         # TYPE serin_loadtester_tasks_finished gauge\n\
         serin_loadtester_tasks_finished{{kind=\"load\"}} {load}\n\
         serin_loadtester_tasks_finished{{kind=\"command\"}} {commands}\n\
         serin_loadtester_tasks_finished{{kind=\"skipped\"}} {skipped}\n\
         # HELP serin_loadtester_load_requests Requests sent by the finished load tasks among the last {TASK_HISTORY_LIMIT}.\n\
         # TYPE serin_loadtester_load_requests gauge\n\
         serin_loadtester_load_requests {requests_sent}\n",
        shared.task_requests.load(Ordering::Relaxed)
    );
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        body,
    )
        .into_response()
}
