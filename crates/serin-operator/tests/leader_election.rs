//! Two `serin-operator --leader-elect` processes on one sandbox: the leader is frozen (SIGSTOP)
//! past its lease in the middle of a release, the other takes over, and when the first resumes it
//! writes nothing more and exits; the release ends once, with no step taken twice.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../../serin-controller/tests/common/mod.rs"]
mod common;
use common::{PODINFO, kubectl, sandbox_with_crds};

/// The Canary of `common::PODINFO`.
const CANARY: &str = r#"
apiVersion: serin.dev/v1beta1
kind: Canary
metadata: {name: podinfo, namespace: test}
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: podinfo}
  service: {port: 9898}
  analysis: {interval: 10s, threshold: 2, stepWeight: 20, maxWeight: 60}
"#;

/// How long a Lease lasts here: short, so the test does not wait long for a take-over.
const LEASE_DURATION: &str = "6s";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port()
}

/// The status code and body of `GET path` on an operator's admin server.
fn admin_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())?;
    Some((code, body))
}

/// Whether the operator on `port` acts, as its `serin_leader` gauge says.
fn leads(port: u16) -> Option<bool> {
    let (_, metrics) = admin_get(port, "/metrics")?;
    let line = metrics.lines().find(|l| l.starts_with("serin_leader "))?;
    Some(line.ends_with(" 1"))
}

fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// An operator process, killed when dropped (also when an assertion fails).
struct Operator(Child);

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_operator(
    kubeconfig: &std::path::Path,
    identity: &str,
    admin: u16,
    log: &std::path::Path,
) -> Operator {
    let child = Command::new(env!("CARGO_BIN_EXE_serin-operator"))
        .args([
            "--namespace",
            "test",
            "--metrics-server",
            "http://127.0.0.1:9",
            "--admin-address",
            &format!("127.0.0.1:{admin}"),
            "--leader-elect",
            "--leader-election-lease-duration",
            LEASE_DURATION,
            "--leader-election-identity",
            identity,
        ])
        .env("KUBECONFIG", kubeconfig)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    Operator(child)
}

fn signal(operator: &Operator, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &operator.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_writes_nothing_after_another_took_over() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox_with_crds(dir.path(), false).await;
    kubectl(
        &sandbox,
        &["apply", "-f", "-"],
        Some(&format!("{PODINFO}{CANARY}")),
    );
    let (admin_a, admin_b) = (free_port(), free_port());
    let (log_a, log_b) = (dir.path().join("a.log"), dir.path().join("b.log"));
    let mut a = start_operator(&sandbox.kubeconfig, "operator-a", admin_a, &log_a);
    let log_of_b = log_b.clone();
    let metrics = sandbox.metrics.clone();
    let kubeconfig = sandbox.kubeconfig.clone();

    let blocking = tokio::task::spawn_blocking(move || {
        let get = |args: &[&str]| {
            let out = Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(["-n", "test"])
                .args(args)
                .output()
                .expect("kubectl is installed");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let status = |field: &str| {
            get(&[
                "get",
                "canary",
                "podinfo",
                "-o",
                &format!("jsonpath={{.status.{field}}}"),
            ])
        };
        eventually(Duration::from_secs(30), "operator-a leads", || {
            leads(admin_a) == Some(true)
        });
        let b = start_operator(&kubeconfig, "operator-b", admin_b, &log_b);
        eventually(Duration::from_secs(10), "operator-b answers", || {
            leads(admin_b).is_some()
        });
        assert_eq!(
            leads(admin_b),
            Some(false),
            "operator-b waits while a leads"
        );
        // A standby is Ready, so a Deployment's rolling update can replace the replicas.
        let (code, body) = admin_get(admin_b, "/readyz").unwrap();
        assert_eq!(
            (code, body.as_str()),
            (200, "ok (standby: waiting to hold the Lease)")
        );
        eventually(Duration::from_secs(90), "the Canary is Initialized", || {
            status("phase") == "Initialized"
        });
        get(&[
            "set",
            "image",
            "deployment/podinfo",
            "podinfod=ghcr.io/stefanprodan/podinfo:6.0.1",
        ]);
        eventually(Duration::from_secs(90), "the release reaches 20%", || {
            status("phase") == "Progressing" && status("canaryWeight") == "20"
        });

        signal(&a, "STOP");
        eventually(Duration::from_secs(40), "operator-b takes over", || {
            leads(admin_b) == Some(true)
        });
        // Its lease manager may still try to renew after the freeze; nothing else may be written.
        let writes_of_a = metrics.object_writes_by("operator-a");
        assert!(writes_of_a > 0, "operator-a wrote while it led");
        signal(&a, "CONT");
        let mut exit = None;
        eventually(
            Duration::from_secs(20),
            "operator-a stops after losing the lease",
            || {
                exit = a.0.try_wait().unwrap();
                exit.is_some()
            },
        );
        assert!(!exit.unwrap().success(), "a lost lease is an error exit");
        assert_eq!(
            metrics.object_writes_by("operator-a"),
            writes_of_a,
            "operator-a wrote after operator-b took over"
        );

        eventually(Duration::from_secs(120), "the release ends", || {
            matches!(status("phase").as_str(), "Succeeded" | "Failed")
        });
        assert_eq!(status("phase"), "Succeeded");
        assert!(
            metrics.writes_by("operator-b") > 0,
            "operator-b carried the release on"
        );
        let events = get(&[
            "get",
            "events",
            "-o",
            "jsonpath={range .items[*]}{.count}{\"\\t\"}{.message}{\"\\n\"}{end}",
        ]);
        // A repeat raises an Event's count instead of adding one: both are counted.
        for message in [
            "Advance podinfo.test canary weight 20",
            "Advance podinfo.test canary weight 40",
            "Advance podinfo.test canary weight 60",
            "Promotion completed! Scaling down podinfo.test",
        ] {
            let times: u64 = events
                .lines()
                .filter_map(|line| line.split_once('\t'))
                .filter(|(_, text)| *text == message)
                .map(|(count, _)| count.parse::<u64>().unwrap_or(1))
                .sum();
            assert_eq!(times, 1, "{message:?} once, in:\n{events}");
        }
        assert_eq!(
            get(&[
                "get",
                "deployment",
                "podinfo-primary",
                "-o",
                "jsonpath={.spec.template.spec.containers[0].image}"
            ]),
            "ghcr.io/stefanprodan/podinfo:6.0.1"
        );
        drop(b);
    });
    let outcome = blocking.await;
    let log_of_a = std::fs::read_to_string(&log_a).unwrap_or_default();
    sandbox.stop().await;
    if let Err(panic) = outcome {
        eprintln!("operator-a's log:\n{log_of_a}");
        eprintln!(
            "operator-b's log:\n{}",
            std::fs::read_to_string(&log_of_b).unwrap_or_default()
        );
        std::panic::resume_unwind(panic.into_panic());
    }
    assert!(log_of_a.contains("lost the Lease"), "{log_of_a}");
}
