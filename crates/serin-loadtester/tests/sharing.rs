//! A load tester shared between teams, driven over loopback: the token guards what starts work or
//! moves a gate, at most `--max-tasks` run at once, request bodies are capped, and credentials in
//! hey command lines never reach a log line or the task history while the command still sends them.

mod common;
use common::CapturedLogs;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::any;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serin_loadtester::proxy::ProxyConfig;
use serin_loadtester::shell::{CommandRunner, RunnerOutput};
use serin_loadtester::tasks::{CUT_MARKER, TaskOutcome, TaskRecord};
use serin_loadtester::{MAX_BODY_BYTES, Options, RECORD_TEXT_LIMIT, Server};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

const TOKEN: &str = "lt-7f3a9c2e51d84b06";

fn options() -> Options {
    Options {
        timeout: Duration::from_secs(10),
        proxy: ProxyConfig::direct(),
        ..Options::default()
    }
}

async fn start(options: Options) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    Server::start(listener, options).unwrap()
}

/// POSTs `body` to `path` with `headers`; returns the status, the `WWW-Authenticate` header and
/// the body.
async fn post(
    server: &Server,
    path: &str,
    headers: &[(&str, &str)],
    body: String,
) -> (u16, String, String) {
    let stream = TcpStream::connect(server.local_addr()).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = http::Request::post(path)
        .header("host", server.local_addr().to_string())
        .header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = sender
        .send_request(request.body(Full::new(Bytes::from(body))).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        challenge,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

fn payload(name: &str, metadata: serde_json::Value) -> String {
    serde_json::json!({"name": name, "namespace": "test", "metadata": metadata}).to_string()
}

fn gate(name: &str) -> String {
    serde_json::json!({"name": name, "namespace": "test"}).to_string()
}

/// A local HTTP server remembering the Authorization header of each request it answers.
struct Target {
    url: String,
    authorizations: Arc<Mutex<Vec<String>>>,
}

impl Target {
    async fn start() -> Target {
        let authorizations = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new()
            .fallback(any(
                |State(seen): State<Arc<Mutex<Vec<String>>>>, headers: HeaderMap| async move {
                    let auth = headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string();
                    seen.lock().unwrap().push(auth);
                    "ok"
                },
            ))
            .with_state(authorizations.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Target {
            url,
            authorizations,
        }
    }
}

async fn wait_for_history(server: &Server, count: usize) -> Vec<TaskRecord> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let history = server.task_history();
        if history.len() >= count {
            return history;
        }
        assert!(Instant::now() < deadline, "history: {history:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs command lines by holding each until released; remembers the lines it was given.
struct Held {
    release: Arc<Semaphore>,
    lines: Mutex<Vec<String>>,
}

impl Held {
    fn new() -> Arc<Held> {
        Arc::new(Held {
            release: Arc::new(Semaphore::new(0)),
            lines: Mutex::default(),
        })
    }
}

impl CommandRunner for Held {
    fn run<'a>(&'a self, line: &'a str) -> Pin<Box<dyn Future<Output = RunnerOutput> + Send + 'a>> {
        Box::pin(async move {
            self.lines.lock().unwrap().push(line.to_string());
            if line.starts_with("wait") {
                let _ = self.release.acquire().await;
            }
            RunnerOutput {
                exit_code: i32::from(line.ends_with("false")),
                stdout: if line.starts_with("chatty") {
                    "x".repeat(10 * RECORD_TEXT_LIMIT)
                } else {
                    String::new()
                },
                stderr: String::new(),
            }
        })
    }
}

#[tokio::test]
async fn what_starts_work_or_moves_a_gate_needs_the_token() {
    let target = Target::start().await;
    let server = start(Options {
        token: Some(TOKEN.into()),
        ..options()
    })
    .await;
    let work = payload(
        "podinfo",
        serde_json::json!({"cmd": format!("hey -n 2 -c 1 {}", target.url)}),
    );
    for (path, body) in [
        ("/gate/open", gate("podinfo")),
        ("/gate/close", gate("podinfo")),
        ("/rollback/open", gate("podinfo")),
        ("/rollback/close", gate("podinfo")),
        ("/", work.clone()),
        ("/gate/open", "{not json".to_string()),
    ] {
        for headers in [
            &[][..],
            &[("authorization", "Bearer lt-wrong")][..],
            &[("authorization", format!("Basic {TOKEN}").as_str())][..],
        ] {
            let (status, challenge, message) = post(&server, path, headers, body.clone()).await;
            assert_eq!(status, 401, "{path} {headers:?}: {message}");
            assert_eq!(challenge, "Bearer");
            assert!(
                message.contains("Authorization: Bearer <token>")
                    && message.contains("metadata.token"),
                "{message}"
            );
            assert!(!message.contains(TOKEN), "{message}");
        }
    }
    let wrong = payload(
        "podinfo",
        serde_json::json!({"token": "lt-wrong", "cmd": "hey http://a/"}),
    );
    assert_eq!(post(&server, "/", &[], wrong).await.0, 401);
    // Nothing ran and no gate moved.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(target.authorizations.lock().unwrap().is_empty());
    assert!(server.task_history().is_empty());
    assert_eq!(
        post(&server, "/gate/check", &[], gate("podinfo")).await.0,
        403
    );

    // The header or the metadata carries it.
    let bearer = format!("Bearer {TOKEN}");
    let with_header = [("authorization", bearer.as_str())];
    assert_eq!(
        post(&server, "/gate/open", &with_header, gate("podinfo"))
            .await
            .0,
        202
    );
    // Reading a gate needs no token.
    let (status, _, answer) = post(&server, "/gate/check", &[], gate("podinfo")).await;
    assert_eq!((status, answer.as_str()), (200, "Approved\n"));
    let in_metadata = serde_json::json!({"name": "podinfo", "namespace": "test",
        "metadata": {"token": TOKEN}})
    .to_string();
    assert_eq!(
        post(&server, "/gate/close", &[], in_metadata.clone())
            .await
            .0,
        202
    );
    assert_eq!(
        post(&server, "/gate/check", &[], gate("podinfo")).await.0,
        403
    );
    assert_eq!(
        post(&server, "/rollback/open", &[], in_metadata.clone())
            .await
            .0,
        202
    );
    assert_eq!(
        post(&server, "/rollback/check", &[], gate("podinfo"))
            .await
            .0,
        200
    );
    assert_eq!(
        post(&server, "/rollback/close", &with_header, gate("podinfo"))
            .await
            .0,
        202
    );
    assert_eq!(post(&server, "/", &with_header, work).await.0, 202);
    wait_for_history(&server, 1).await;
    assert_eq!(target.authorizations.lock().unwrap().len(), 2);
    for path in ["/healthz", "/metrics", "/gate/approve"] {
        assert_eq!(
            post(&server, path, &[], String::new()).await.0,
            200,
            "{path}"
        );
    }
    assert_eq!(post(&server, "/gate/halt", &[], String::new()).await.0, 403);
    server.stop().await;
}

#[tokio::test]
async fn credentials_reach_the_target_but_no_log_line_or_record() {
    let logs = CapturedLogs::start(tracing::Level::DEBUG);
    let target = Target::start().await;
    let sunk = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = sunk.clone();
    let runner = Held::new();
    let server = start(Options {
        token: Some(TOKEN.into()),
        log_sink: Some(Arc::new(move |line: &str| {
            sink.lock().unwrap().push(line.to_string())
        })),
        command_runner: Some(runner.clone()),
        ..options()
    })
    .await;
    let hey = format!(
        r#"hey -n 2 -c 1 -a deploy:pw-1d2e -H "Authorization: Bearer hdr-9b8c" -H 'X-Canary: insider' {}"#,
        target.url
    );
    let task = payload(
        "podinfo",
        serde_json::json!({"cmd": hey, "token": TOKEN, "logCmdOutput": "true"}),
    );
    assert_eq!(post(&server, "/", &[], task).await.0, 202);
    // A failing bash task's answer shows the command, masked.
    let curl =
        "curl -s -u ops:pw-5f6a -H 'X-Api-Key: key-3c4d' http://podinfo-canary:9898/ && false";
    let failing = payload(
        "podinfo",
        serde_json::json!({"type": "bash", "cmd": curl, "token": TOKEN}),
    );
    let (status, _, answer) = post(&server, "/", &[], failing).await;
    assert_eq!(status, 500, "{answer}");
    assert!(
        answer.starts_with(
            "command curl -s -u ops:*** -H 'X-Api-Key: ***' http://podinfo-canary:9898/ && false failed"
        ),
        "{answer}"
    );
    let history = wait_for_history(&server, 2).await;

    // The command ran with the real values: -H Authorization replaces -a's, as in hey.
    assert_eq!(
        *target.authorizations.lock().unwrap(),
        ["Bearer hdr-9b8c", "Bearer hdr-9b8c"]
    );
    assert_eq!(runner.lines.lock().unwrap().as_slice(), [curl]);
    let load = history
        .iter()
        .find(|record| matches!(record.outcome, TaskOutcome::Load(_)))
        .unwrap();
    assert_eq!(
        load.command,
        format!(
            r#"hey -n 2 -c 1 -a deploy:*** -H "Authorization: ***" -H 'X-Canary: insider' {}"#,
            target.url
        )
    );
    let lines = sunk.lock().unwrap().join("\n") + &logs.text();
    assert!(lines.contains("deploy:***"), "{lines}");
    assert!(lines.contains("ops:***"), "{lines}");
    let recorded = format!("{history:?}");
    for secret in [TOKEN, "pw-1d2e", "hdr-9b8c", "pw-5f6a", "key-3c4d"] {
        assert!(
            !lines.contains(secret),
            "{secret} in the log lines:\n{lines}"
        );
        assert!(!recorded.contains(secret), "{secret} in the history");
    }
    server.stop().await;
}

#[tokio::test]
async fn at_most_max_tasks_run_at_once() {
    let runner = Held::new();
    let server = start(Options {
        max_tasks: 2,
        command_runner: Some(runner.clone()),
        ..options()
    })
    .await;
    let cmd = |line: &str| payload("podinfo", serde_json::json!({"cmd": line}));
    assert_eq!(post(&server, "/", &[], cmd("wait a")).await.2, "started\n");
    assert_eq!(post(&server, "/", &[], cmd("wait b")).await.2, "started\n");
    // At the limit: another task, of any type, is refused and the refusal names the flag.
    let (status, _, message) = post(&server, "/", &[], cmd("wait c")).await;
    assert_eq!(status, 429);
    assert!(message.contains("2 tasks are running") && message.contains("--max-tasks"));
    let bash = payload(
        "podinfo",
        serde_json::json!({"type": "bash", "cmd": "true"}),
    );
    assert_eq!(post(&server, "/", &[], bash.clone()).await.0, 429);
    // The same task for the same canary is still just "already running".
    assert_eq!(
        post(&server, "/", &[], cmd("wait a")).await.2,
        "already running; skipped\n"
    );
    let (_, _, metrics) = post(&server, "/metrics", &[], String::new()).await;
    assert!(
        metrics.contains("serin_loadtester_tasks_running 2"),
        "{metrics}"
    );
    assert_eq!(runner.lines.lock().unwrap().len(), 2);

    runner.release.add_permits(100);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.running_tasks().is_empty() {
        assert!(Instant::now() < deadline, "{:?}", server.running_tasks());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(post(&server, "/", &[], bash).await.0, 200);
    // Output beyond the record limit is cut in the history.
    let chatty = payload(
        "podinfo",
        serde_json::json!({"type": "bash", "cmd": "chatty"}),
    );
    assert_eq!(post(&server, "/", &[], chatty).await.0, 200);
    let history = server.task_history();
    let Some(TaskOutcome::Command(result)) = history.last().map(|r| &r.outcome) else {
        panic!("{history:?}");
    };
    assert!(result.output.len() <= RECORD_TEXT_LIMIT && result.output.ends_with(CUT_MARKER));
    server.stop().await;
}

#[tokio::test]
async fn request_bodies_are_capped() {
    let server = start(options()).await;
    // A valid payload padded to exactly `size` bytes.
    let padded = |size: usize| {
        let empty = r#"{"name":"podinfo","namespace":"test","pad":""}"#.len();
        let body = format!(
            r#"{{"name":"podinfo","namespace":"test","pad":"{}"}}"#,
            "x".repeat(size - empty)
        );
        assert_eq!(body.len(), size);
        body
    };
    let (status, _, _) = post(&server, "/gate/open", &[], padded(MAX_BODY_BYTES)).await;
    assert_eq!(status, 202);
    assert_eq!(
        post(&server, "/gate/check", &[], gate("podinfo")).await.0,
        200
    );
    for path in ["/gate/close", "/gate/check", "/"] {
        let (status, _, message) = post(&server, path, &[], padded(MAX_BODY_BYTES + 1)).await;
        assert_eq!(status, 413, "{path}: {message}");
        assert!(message.contains("larger than 65536 bytes"), "{message}");
    }
    // The oversized close did nothing.
    assert_eq!(
        post(&server, "/gate/check", &[], gate("podinfo")).await.0,
        200
    );
    server.stop().await;
}
