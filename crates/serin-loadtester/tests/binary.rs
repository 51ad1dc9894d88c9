//! The `serin-loadtester` binary as a pod runs it: the token comes from `LOADTESTER_TOKEN` only,
//! and `--max-tasks` and the anchored `--namespace-regexp` are read from the command line.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const TOKEN: &str = "lt-0c1d2e3f4a5b";

fn binary() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_serin-loadtester"));
    command
        .env_remove("LOADTESTER_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// Kills the child when the test ends, passed or not.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP/1.1 POST with `Connection: close`; the status code and the body.
fn post(address: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Length: {}\r\n{headers}\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn the_token_comes_from_the_environment_and_guards_the_gates() {
    let mut child = binary()
        .args([
            "--address=127.0.0.1",
            "--port=0",
            "--max-tasks=3",
            "--namespace-regexp=test",
        ])
        .env("LOADTESTER_TOKEN", format!("{TOKEN}\n"))
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let _running = Running(child);
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let started: serde_json::Value = loop {
        let line = received
            .recv_timeout(Duration::from_secs(30))
            .expect("the load tester logs its start within 30 s");
        assert!(!line.contains(TOKEN), "{line}");
        if line.contains("Starting load tester") {
            break serde_json::from_str(&line).unwrap();
        }
    };
    assert_eq!(started["max_tasks"], 3, "{started}");
    assert_eq!(started["token_required"], true, "{started}");
    let address = started["address"].as_str().unwrap().to_string();

    let gate = r#"{"name":"podinfo","namespace":"test"}"#;
    let (status, message) = post(&address, "/gate/open", "", gate);
    assert_eq!(status, 401, "{message}");
    assert!(
        message.contains("Authorization: Bearer <token>"),
        "{message}"
    );
    let bearer = format!("Authorization: Bearer {TOKEN}\r\n");
    assert_eq!(post(&address, "/gate/open", &bearer, gate).0, 202);
    assert_eq!(post(&address, "/gate/check", "", gate).0, 200);
    // `test` is the whole namespace, not a prefix.
    let elsewhere = r#"{"name":"podinfo","namespace":"test-2","metadata":{"cmd":"hey -n 1 -c 1 http://127.0.0.1:1/"}}"#;
    assert_eq!(post(&address, "/", &bearer, elsewhere).0, 403);
}

#[test]
fn a_blank_token_a_token_flag_and_no_task_places_are_refused() {
    let blank = binary()
        .args(["--address=127.0.0.1", "--port=0"])
        .env("LOADTESTER_TOKEN", " \n")
        .output()
        .unwrap();
    assert!(!blank.status.success());
    let said = String::from_utf8_lossy(&blank.stderr);
    assert!(said.contains("LOADTESTER_TOKEN is set but empty"), "{said}");

    for (args, expected) in [
        (&["--token", TOKEN][..], "unexpected argument '--token'"),
        (&["--max-tasks=0"][..], "at least 1"),
    ] {
        let refused = binary().args(args).output().unwrap();
        assert_eq!(refused.status.code(), Some(2), "{args:?}");
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(said.contains(expected), "{args:?}: {said}");
    }
}
