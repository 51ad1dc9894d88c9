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

pub mod access;
pub mod hey;
pub mod histogram;
pub mod load;
pub mod payload;
pub mod proxy;
pub mod redact;
pub mod shell;
pub mod tasks;
pub mod words;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use payload::{Payload, parse_payload};
use proxy::ProxyConfig;
use regex::Regex;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tasks::{History, Running, TaskOutcome, TaskRecord, handle_task};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use load::LoadReport;

/// How many finished tasks [`Server::task_history`] remembers; older ones are dropped.
pub const TASK_HISTORY_LIMIT: usize = 1000;

/// The most bytes of output, of command and of canary name one task record keeps; longer text is
/// cut to end with [`tasks::CUT_MARKER`]. With [`TASK_HISTORY_LIMIT`] this bounds the history.
pub const RECORD_TEXT_LIMIT: usize = 4096;

/// The largest request body accepted, in bytes; a larger one is answered 413. A webhook payload
/// is a few hundred bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// How many tasks may run at once unless [`Options::max_tasks`] (`--max-tasks`) says otherwise.
pub const DEFAULT_MAX_TASKS: usize = 32;

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
    /// When set, the task endpoint and the gate-moving endpoints refuse (401) requests that carry
    /// neither `Authorization: Bearer <token>` nor `metadata.token` with this value.
    pub token: Option<String>,
    /// How many tasks may run at once (`--max-tasks`); another one is answered 429.
    pub max_tasks: usize,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("timeout", &self.timeout)
            .field("allow_shell", &self.allow_shell)
            .field("proxy", &self.proxy)
            .field("namespace_filter", &self.namespace_filter)
            .field("log_sink", &self.log_sink.as_ref().map(|_| "set"))
            .field(
                "command_runner",
                &self.command_runner.as_ref().map(|_| "set"),
            )
            .field("search_namespace", &self.search_namespace)
            .field("token", &self.token.as_ref().map(|_| redact::MASK))
            .field("max_tasks", &self.max_tasks)
            .finish()
    }
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
            token: None,
            max_tasks: DEFAULT_MAX_TASKS,
        }
    }
}

/// State shared by the handlers and the running tasks.
pub(crate) struct Shared {
    pub(crate) options: Options,
    gates: Mutex<HashMap<String, bool>>,
    pub(crate) running: Mutex<Running>,
    pub(crate) history: Mutex<History>,
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

    /// Finished (and skipped) tasks, oldest first, up to [`TASK_HISTORY_LIMIT`], their text cut
    /// at [`RECORD_TEXT_LIMIT`] and credentials in commands masked.
    pub fn task_history(&self) -> Vec<TaskRecord> {
        self.shared.history.lock().unwrap().records()
    }

    /// Keys (`<name>.<namespace><cmd>`, credentials masked) of the `cmd` tasks running now.
    pub fn running_tasks(&self) -> Vec<String> {
        self.shared.running.lock().unwrap().shown_keys()
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
            any(|state, headers, body| set_gate(state, headers, body, "", true)),
        )
        .route(
            "/gate/close",
            any(|state, headers, body| set_gate(state, headers, body, "", false)),
        )
        .route(
            "/rollback/check",
            any(|state, body| check_gate(state, body, "rollback.")),
        )
        .route(
            "/rollback/open",
            any(|state, headers, body| set_gate(state, headers, body, "rollback.", true)),
        )
        .route(
            "/rollback/close",
            any(|state, headers, body| set_gate(state, headers, body, "rollback.", false)),
        )
        .fallback(run_task)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(shared)
}

/// The request body, or the answer to a body over [`MAX_BODY_BYTES`] (413) or one that could not
/// be read.
fn read_body(body: Result<Bytes, BytesRejection>) -> Result<Bytes, Box<Response>> {
    body.map_err(|rejection| {
        Box::new(
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            text(
                413,
                format!(
                    "the request body is larger than {MAX_BODY_BYTES} bytes, the load tester's limit; a webhook payload is a few hundred bytes"
                ),
            )
        } else {
            rejection.into_response()
        })
    })
}

/// The payload of a request that starts work or moves a gate. With a token configured, the
/// request must carry it in `Authorization: Bearer` or `metadata.token`, else it is answered 401
/// before anything else is looked at; either way `metadata.token` is taken out of the payload, so
/// no log line, record or command can show it.
fn authorized_payload(
    shared: &Shared,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Payload, Box<Response>> {
    let body = read_body(body)?;
    let parsed = parse_payload(&body);
    if let Some(expected) = &shared.options.token {
        let in_header =
            access::bearer(headers).is_some_and(|given| access::same_token(expected, given));
        let in_metadata = || {
            parsed
                .as_ref()
                .ok()
                .and_then(|payload| payload.meta("token"))
                .is_some_and(|given| access::same_token(expected, given))
        };
        if !in_header && !in_metadata() {
            tracing::warn!("refused a request without the load tester's token");
            let mut answer = text(401, access::UNAUTHORIZED);
            answer.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
            return Err(Box::new(answer));
        }
    }
    let mut payload = parsed.map_err(|error| {
        tracing::warn!("bad payload: {error}");
        Box::new(text(400, error))
    })?;
    if let Some(metadata) = payload.metadata.as_mut() {
        metadata.remove("token");
    }
    Ok(payload)
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
    body: Result<Bytes, BytesRejection>,
    prefix: &'static str,
) -> Response {
    let body = match read_body(body) {
        Ok(body) => body,
        Err(answer) => return *answer,
    };
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
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
    prefix: &'static str,
    open: bool,
) -> Response {
    let payload = match authorized_payload(&shared, &headers, body) {
        Ok(payload) => payload,
        Err(answer) => return *answer,
    };
    let key = format!("{prefix}{}", payload.canary());
    shared.gates.lock().unwrap().insert(key.clone(), open);
    tracing::info!("gate {key} {}", if open { "opened" } else { "closed" });
    StatusCode::ACCEPTED.into_response()
}

async fn run_task(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    shared.task_requests.fetch_add(1, Ordering::Relaxed);
    let payload = match authorized_payload(&shared, &headers, body) {
        Ok(payload) => payload,
        Err(answer) => return *answer,
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
    let running = shared.running.lock().unwrap().count();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_debug_never_prints_the_token() {
        let options = Options {
            token: Some("lt-s3cret".into()),
            ..Options::default()
        };
        let printed = format!("{options:?}");
        assert!(!printed.contains("lt-s3cret"), "{printed}");
        assert!(printed.contains("token: Some(\"***\")"), "{printed}");
        assert!(printed.contains("max_tasks: 32"), "{printed}");
    }
}
