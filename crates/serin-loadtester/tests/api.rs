//! The load tester's HTTP API, driven over loopback as Flagger's webhooks drive it: gates, the task
//! endpoint with hey and shell commands, de-duplication, timeouts, bad payloads and the proxy.

mod common;
use common::CapturedLogs;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, Method, Uri};
use axum::routing::any;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serin_loadtester::proxy::ProxyConfig;
use serin_loadtester::tasks::{TaskOutcome, TaskRecord};
use serin_loadtester::{Options, Server};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};

type Counters = (Arc<AtomicU64>, Arc<AtomicU64>, Arc<Mutex<String>>);

fn options() -> Options {
    Options {
        timeout: Duration::from_secs(10),
        allow_shell: false,
        proxy: ProxyConfig::direct(),
        ..Options::default()
    }
}

async fn start(options: Options) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    Server::start(listener, options).unwrap()
}

/// A local HTTP server counting the requests it answers; absolute-form requests (the ones a
/// proxy receives) are counted separately.
struct Target {
    address: SocketAddr,
    requests: Arc<AtomicU64>,
    absolute_form: Arc<AtomicU64>,
    last_request: Arc<Mutex<String>>,
}

impl Target {
    async fn start() -> Target {
        let requests = Arc::new(AtomicU64::new(0));
        let absolute_form = Arc::new(AtomicU64::new(0));
        let last_request = Arc::new(Mutex::new(String::new()));
        let counters = (
            requests.clone(),
            absolute_form.clone(),
            last_request.clone(),
        );
        let app = Router::new().fallback(any(
            |State((requests, absolute, last)): State<Counters>,
             method: Method,
             uri: Uri,
             headers: HeaderMap,
             body: Bytes| async move {
                requests.fetch_add(1, Ordering::SeqCst);
                if uri.scheme().is_some()
                    && uri.authority().is_some_and(|a| a == "podinfo.test:9898")
                {
                    absolute.fetch_add(1, Ordering::SeqCst);
                }
                let header = |name: &str| {
                    headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_string()
                };
                *last.lock().unwrap() = format!(
                    "{method} {uri} type={} canary={} auth={} body={}",
                    header("content-type"),
                    header("x-canary"),
                    header("authorization"),
                    String::from_utf8_lossy(&body)
                );
                "ok"
            },
        ));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app.with_state(counters)).await });
        Target {
            address,
            requests,
            absolute_form,
            last_request,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/", self.address)
    }

    fn count(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }
}

async fn call(server: &Server, path: &str, body: &str) -> (u16, String) {
    let stream = TcpStream::connect(server.local_addr()).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = http::Request::post(path)
        .header("host", server.local_addr().to_string())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn task(name: &str, metadata: serde_json::Value) -> String {
    serde_json::json!({"name": name, "namespace": "test", "phase": "Progressing", "metadata": metadata}).to_string()
}

async fn wait_for_history(server: &Server, count: usize, within: Duration) -> Vec<TaskRecord> {
    let deadline = Instant::now() + within;
    loop {
        let history = server.task_history();
        let finished = history
            .iter()
            .filter(|record| !matches!(record.outcome, TaskOutcome::Skipped))
            .count();
        if finished >= count {
            return history;
        }
        assert!(
            Instant::now() < deadline,
            "only {finished} of {count} tasks finished: {history:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn load_report(record: &TaskRecord) -> &serin_loadtester::LoadReport {
    match &record.outcome {
        TaskOutcome::Load(report) => report,
        other => panic!("expected a load report, got {other:?}"),
    }
}

#[tokio::test]
async fn healthz_and_metrics() {
    let server = start(options()).await;
    assert_eq!(call(&server, "/healthz", "").await, (200, "OK\n".into()));
    let (status, metrics) = call(&server, "/metrics", "").await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains("serin_loadtester_tasks_running 0"),
        "{metrics}"
    );
    server.stop().await;
}

#[tokio::test]
async fn gates_open_close_approve_and_halt() {
    let server = start(options()).await;
    let podinfo = r#"{"name":"podinfo","namespace":"test","phase":"Progressing"}"#;
    let other = r#"{"name":"other","namespace":"test"}"#;
    // An unknown gate is closed.
    assert_eq!(
        call(&server, "/gate/check", podinfo).await,
        (403, "Forbidden\n".into())
    );
    assert_eq!(
        call(&server, "/gate/open", podinfo).await,
        (202, String::new())
    );
    assert_eq!(
        call(&server, "/gate/check", podinfo).await,
        (200, "Approved\n".into())
    );
    // Gates are per canary, and sticky until closed.
    assert_eq!(call(&server, "/gate/check", other).await.0, 403);
    assert_eq!(call(&server, "/gate/check", podinfo).await.0, 200);
    assert_eq!(
        call(&server, "/gate/close", podinfo).await,
        (202, String::new())
    );
    assert_eq!(call(&server, "/gate/check", podinfo).await.0, 403);
    assert_eq!(
        call(&server, "/gate/approve", "").await,
        (200, "OK\n".into())
    );
    assert_eq!(
        call(&server, "/gate/halt", "").await,
        (403, "Forbidden\n".into())
    );
    server.stop().await;
}

#[tokio::test]
async fn rollback_gates_are_separate_from_gates() {
    let server = start(options()).await;
    let podinfo = r#"{"name":"podinfo","namespace":"test"}"#;
    assert_eq!(
        call(&server, "/rollback/check", podinfo).await,
        (403, "Forbidden\n".into())
    );
    assert_eq!(
        call(&server, "/rollback/open", podinfo).await,
        (202, String::new())
    );
    assert_eq!(
        call(&server, "/rollback/check", podinfo).await,
        (200, "Approved\n".into())
    );
    assert_eq!(call(&server, "/gate/check", podinfo).await.0, 403);
    assert_eq!(call(&server, "/rollback/close", podinfo).await.0, 202);
    assert_eq!(call(&server, "/rollback/check", podinfo).await.0, 403);
    server.stop().await;
}

#[tokio::test]
async fn bad_payloads_say_what_is_accepted() {
    let server = start(options()).await;
    let (status, message) = call(&server, "/", "{not json").await;
    assert_eq!(status, 400);
    assert!(message.starts_with("malformed JSON payload"), "{message}");
    let (status, message) = call(&server, "/gate/open", r#"{"namespace":"test"}"#).await;
    assert_eq!(
        (status, message.as_str()),
        (400, "field `name` is missing; expected the canary's name\n")
    );
    let (status, message) = call(&server, "/", r#"{"name":"podinfo","namespace":"test"}"#).await;
    assert_eq!(status, 400);
    assert!(
        message.starts_with("metadata not found in payload"),
        "{message}"
    );
    let (status, message) = call(
        &server,
        "/",
        &task("podinfo", serde_json::json!({"type": "grpc", "cmd": "x"})),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        message.starts_with(
            "unknown task type grpc; supported types: cmd, bash, helm, helmv3, kubectl"
        ),
        "{message}"
    );
    let (status, message) = call(
        &server,
        "/",
        &task("podinfo", serde_json::json!({"type": "cmd"})),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        message.starts_with("metadata.cmd not found in payload"),
        "{message}"
    );
    let (status, message) = call(
        &server,
        "/",
        &task("podinfo", serde_json::json!({"cmd": "hey -k http://a/"})),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        message.starts_with(
            "hey flag -k is not supported by the built-in load generator; supported flags: -n -c"
        ),
        "{message}"
    );
    let (status, message) = call(
        &server,
        "/",
        &task("podinfo", serde_json::json!({"type": "concord"})),
    )
    .await;
    assert_eq!(status, 501);
    assert!(message.contains("concord is not implemented"), "{message}");
    assert!(
        server.task_history().is_empty(),
        "nothing may run after a refusal"
    );
    server.stop().await;
}

#[tokio::test]
async fn shell_commands_are_refused_without_allow_shell() {
    let server = start(options()).await;
    for metadata in [
        serde_json::json!({"cmd": "curl -s http://podinfo.test:9898/"}),
        serde_json::json!({"type": "bash", "cmd": "echo hi"}),
        serde_json::json!({"type": "helm", "cmd": "test podinfo"}),
    ] {
        let (status, message) = call(&server, "/", &task("podinfo", metadata)).await;
        assert_eq!(status, 403);
        assert!(
            message.contains("started without --allow-shell"),
            "{message}"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn shell_commands_run_with_allow_shell() {
    let server = start(Options {
        allow_shell: true,
        ..options()
    })
    .await;
    let ok = task(
        "podinfo",
        serde_json::json!({"type": "bash", "cmd": "echo hello", "returnCmdOutput": "true"}),
    );
    assert_eq!(call(&server, "/", &ok).await, (200, "hello\n".into()));
    let quiet = task(
        "podinfo",
        serde_json::json!({"type": "bash", "cmd": "echo hello"}),
    );
    assert_eq!(call(&server, "/", &quiet).await, (200, String::new()));
    let failing = task(
        "podinfo",
        serde_json::json!({"type": "bash", "cmd": "echo oops; exit 2"}),
    );
    assert_eq!(
        call(&server, "/", &failing).await,
        (
            500,
            "command echo oops; exit 2 failed: oops\n: exit status 2\n".into()
        )
    );
    // A `cmd` task is asynchronous: 202 at once, the command runs after.
    let logs = CapturedLogs::start(tracing::Level::INFO);
    let server2 = start(Options {
        allow_shell: true,
        ..options()
    })
    .await;
    let logged = task(
        "podinfo",
        serde_json::json!({"cmd": "echo logged-output", "logCmdOutput": "true"}),
    );
    let silent = task("podinfo", serde_json::json!({"cmd": "echo silent-output"}));
    assert_eq!(call(&server2, "/", &logged).await.0, 202);
    assert_eq!(call(&server2, "/", &silent).await.0, 202);
    wait_for_history(&server2, 2, Duration::from_secs(5)).await;
    let lines = logs.text();
    assert!(lines.contains("logged-output"), "{lines}");
    assert!(
        !lines.contains("silent-output\\n"),
        "output is logged only with logCmdOutput: {lines}"
    );
    server.stop().await;
    server2.stop().await;
}

#[tokio::test]
async fn hey_n_sends_exactly_n_requests() {
    let target = Target::start().await;
    let logs = CapturedLogs::start(tracing::Level::INFO);
    let server = start(options()).await;
    let cmd = format!("hey -n 200 -c 4 {}", target.url());
    let (status, _) = call(
        &server,
        "/",
        &task(
            "podinfo",
            serde_json::json!({"cmd": cmd, "logCmdOutput": "true"}),
        ),
    )
    .await;
    assert_eq!(status, 202);
    let history = wait_for_history(&server, 1, Duration::from_secs(5)).await;
    let report = load_report(&history[0]);
    assert_eq!(target.count(), 200);
    assert_eq!(report.requests, 200);
    assert_eq!(report.status_counts.get(&200), Some(&200));
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(
        logs.text().contains("Requests/sec"),
        "the summary is logged with logCmdOutput"
    );
    assert!(server.running_tasks().is_empty());
    server.stop().await;
}

#[tokio::test]
async fn hey_sends_the_method_body_and_headers_asked_for() {
    let target = Target::start().await;
    let server = start(options()).await;
    let cmd = format!(
        r#"hey -n 4 -c 2 -m post -T application/json -d '{{"x": 1}}' -H "X-Canary: insider" -a user:pass -disable-keepalive {}api?q=1"#,
        target.url()
    );
    assert_eq!(
        call(
            &server,
            "/",
            &task("podinfo", serde_json::json!({"cmd": cmd}))
        )
        .await
        .0,
        202
    );
    let history = wait_for_history(&server, 1, Duration::from_secs(5)).await;
    let report = load_report(&history[0]);
    assert_eq!(report.status_counts.get(&200), Some(&4), "{report:?}");
    assert_eq!(
        *target.last_request.lock().unwrap(),
        r#"POST /api?q=1 type=application/json canary=insider auth=Basic dXNlcjpwYXNz body={"x": 1}"#
    );
    server.stop().await;
}

#[tokio::test]
async fn hey_against_a_closed_port_reports_errors() {
    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let server = start(options()).await;
    let cmd = format!("hey -n 4 -c 2 http://{closed}/");
    assert_eq!(
        call(
            &server,
            "/",
            &task("podinfo", serde_json::json!({"cmd": cmd}))
        )
        .await
        .0,
        202
    );
    let history = wait_for_history(&server, 1, Duration::from_secs(5)).await;
    let report = load_report(&history[0]);
    assert_eq!((report.requests, report.responses), (4, 0));
    assert_eq!(report.errors.values().sum::<u64>(), 4);
    assert!(
        report
            .errors
            .keys()
            .all(|error| error.contains(&format!("dial tcp {closed}"))),
        "{:?}",
        report.errors
    );
    server.stop().await;
}

#[tokio::test]
async fn hey_z_with_a_rate_sends_rate_times_workers_times_duration() {
    let target = Target::start().await;
    let server = start(options()).await;
    let cmd = format!("hey -z 2s -q 20 -c 2 {}", target.url());
    let started = Instant::now();
    assert_eq!(
        call(
            &server,
            "/",
            &task("podinfo", serde_json::json!({"cmd": cmd}))
        )
        .await
        .0,
        202
    );
    let history = wait_for_history(&server, 1, Duration::from_secs(5)).await;
    let elapsed = started.elapsed();
    let sent = target.count();
    // 2 workers x 20 per second x 2 s = 80, within 10%.
    assert!((72..=88).contains(&sent), "{sent} requests");
    assert_eq!(load_report(&history[0]).requests, sent);
    assert!(
        elapsed >= Duration::from_secs(2) && elapsed < Duration::from_secs(3),
        "{elapsed:?}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_running_command_is_not_started_twice_for_the_same_canary() {
    let target = Target::start().await;
    let server = start(options()).await;
    let cmd = format!("hey -z 1s -q 10 -c 1 {}", target.url());
    let payload = task("podinfo", serde_json::json!({"cmd": cmd}));
    assert_eq!(
        call(&server, "/", &payload).await,
        (202, "started\n".into())
    );
    assert_eq!(
        call(&server, "/", &payload).await,
        (202, "already running; skipped\n".into())
    );
    assert_eq!(server.running_tasks(), [format!("podinfo.test{cmd}")]);
    // Another canary with the same command is another task.
    assert_eq!(
        call(
            &server,
            "/",
            &task("other", serde_json::json!({"cmd": cmd}))
        )
        .await
        .1,
        "started\n"
    );
    let history = wait_for_history(&server, 2, Duration::from_secs(5)).await;
    assert_eq!(
        history
            .iter()
            .filter(|record| matches!(record.outcome, TaskOutcome::Skipped))
            .count(),
        1
    );
    // Two runs of about 10 requests each, not three.
    let sent = target.count();
    assert!((16..=22).contains(&sent), "{sent} requests");
    // Once finished, the same command starts again.
    assert_eq!(call(&server, "/", &payload).await.1, "started\n");
    server.stop().await;
}

#[tokio::test]
async fn tasks_are_cancelled_at_the_timeout() {
    let target = Target::start().await;
    let server = start(Options {
        timeout: Duration::from_millis(700),
        allow_shell: true,
        ..options()
    })
    .await;
    // A blocking command is killed and reported as failed.
    let started = Instant::now();
    let (status, message) = call(
        &server,
        "/",
        &task(
            "podinfo",
            serde_json::json!({"type": "bash", "cmd": "sleep 30"}),
        ),
    )
    .await;
    assert_eq!(status, 500);
    assert!(message.ends_with("signal: killed\n"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // A -z longer than the timeout is cut at the timeout.
    let started = Instant::now();
    let cmd = format!("hey -z 30s -q 10 -c 1 {}", target.url());
    assert_eq!(
        call(
            &server,
            "/",
            &task("podinfo", serde_json::json!({"cmd": cmd}))
        )
        .await
        .0,
        202
    );
    let history = wait_for_history(&server, 2, Duration::from_secs(3)).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let report = load_report(&history[1]);
    assert!(report.stopped_by_limit);
    assert!(
        report.requests <= 8,
        "{} requests in 0.7 s at 10/s",
        report.requests
    );
    server.stop().await;
}

#[tokio::test]
async fn stopping_the_server_cancels_running_load() {
    let target = Target::start().await;
    let server = start(options()).await;
    let cmd = format!("hey -z 30s -q 50 -c 1 {}", target.url());
    assert_eq!(
        call(
            &server,
            "/",
            &task("podinfo", serde_json::json!({"cmd": cmd}))
        )
        .await
        .0,
        202
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.stop().await;
    let after_stop = target.count();
    assert!(after_stop > 0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        target.count() <= after_stop + 1,
        "load continued after stop"
    );
}

#[tokio::test]
async fn load_goes_through_the_http_proxy_unless_no_proxy_lists_the_host() {
    // The "proxy" is a counting server: a proxy receives absolute-form request targets.
    let proxy = Target::start().await;
    let direct = Target::start().await;
    let proxy_config =
        ProxyConfig::through(&format!("http://{}", proxy.address), &["127.0.0.1"]).unwrap();
    let server = start(Options {
        proxy: proxy_config,
        ..options()
    })
    .await;
    let through_proxy = task(
        "podinfo",
        serde_json::json!({"cmd": "hey -n 10 -c 2 http://podinfo.test:9898/"}),
    );
    assert_eq!(call(&server, "/", &through_proxy).await.0, 202);
    let bypass = task(
        "podinfo",
        serde_json::json!({"cmd": format!("hey -n 6 -c 2 {}", direct.url())}),
    );
    assert_eq!(call(&server, "/", &bypass).await.0, 202);
    wait_for_history(&server, 2, Duration::from_secs(5)).await;
    assert_eq!(proxy.absolute_form.load(Ordering::SeqCst), 10);
    assert_eq!(proxy.count(), 10);
    assert_eq!(direct.count(), 6);
    server.stop().await;
}

#[tokio::test]
async fn namespace_filter_forbids_other_namespaces() {
    let filter = serin_loadtester::access::namespace_filter("test").unwrap();
    let server = start(Options {
        namespace_filter: Some(filter),
        ..options()
    })
    .await;
    // The pattern matches whole namespaces: `test` is not a prefix filter.
    for namespace in ["prod", "test-2", "my-test"] {
        let payload = format!(
            r#"{{"name":"podinfo","namespace":"{namespace}","metadata":{{"cmd":"hey -n 1 -c 1 http://127.0.0.1:1/"}}}}"#
        );
        assert_eq!(
            call(&server, "/", &payload).await,
            (403, "Forbidden\n".into()),
            "{namespace}"
        );
    }
    let allowed = r#"{"name":"podinfo","namespace":"test","metadata":{"cmd":"hey -n 1 -c 1 http://127.0.0.1:1/"}}"#;
    assert_eq!(call(&server, "/", allowed).await.0, 202);
    server.stop().await;
}
