//! `kubectl port-forward` with the real kubectl: to a pod, a Deployment and a Service, over
//! kubectl's WebSocket tunnel and its SPDY fallback, with a cluster's errors when the port is not
//! served or RBAC denies `pods/portforward`.

use crate::common;

use crate::common::Kubectl;
use serin_sandbox::SandboxOptions;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A running `kubectl port-forward` and the local port it listens on.
struct PortForward {
    child: Child,
    local: u16,
    stderr: mpsc::Receiver<String>,
}

impl PortForward {
    /// Starts `kubectl port-forward TARGET :REMOTE` and waits for "Forwarding from 127.0.0.1:N".
    fn start(k: &Kubectl, target: &[&str], remote: &str, env: &[(&str, &str)]) -> Self {
        let port_arg = format!(":{remote}");
        let mut args = vec!["port-forward", "--address=127.0.0.1"];
        args.extend_from_slice(target);
        args.push(&port_arg);
        let mut command = k.command(&args);
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let (lines, stderr_lines) = (mpsc::channel(), mpsc::channel());
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                let _ = lines.0.send(line);
            }
        });
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                let _ = stderr_lines.0.send(line);
            }
        });
        let first = lines
            .1
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| {
                let errors: Vec<String> = stderr_lines.1.try_iter().collect();
                panic!("kubectl port-forward {target:?} printed nothing: {errors:?}")
            });
        let local = first
            .strip_prefix("Forwarding from 127.0.0.1:")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line: {first}"));
        PortForward {
            child,
            local,
            stderr: stderr_lines.1,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.local)
    }

    /// kubectl's exit status once it ends on its own, and what it wrote to stderr.
    fn wait(mut self) -> (bool, String) {
        let status = self.child.wait().unwrap();
        let stderr: Vec<String> = self.stderr.try_iter().collect();
        (status.success(), stderr.join("\n"))
    }
}

impl Drop for PortForward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn get(client: &reqwest::Client, url: String) -> (u16, String) {
    let response = client.get(url).send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_port_forward_reaches_pods_deployments_and_services() {
    let (_sandbox, _dir, k) = common::serving_sandbox(SandboxOptions::default()).await;
    common::rolled_out_podinfo_deployment(&k, "web", &[]);
    k.ok(&[
        "expose",
        "deployment",
        "web",
        "--port=80",
        "--target-port=9898",
    ]);
    let pod = k.ok(&["get", "pods", "-l", "app=web", "-o", "name"]);
    let pod = pod.trim();
    // A fresh client per forward: a pooled connection would outlive the kubectl it went through.
    let client = || reqwest::Client::builder().no_proxy().build().unwrap();

    for (target, remote) in [(pod, "9898"), ("deployment/web", "9898"), ("svc/web", "80")] {
        let forward = PortForward::start(&k, &[target], remote, &[]);
        let (code, body) = get(&client(), forward.url("/version")).await;
        assert_eq!(code, 200, "{target}: {body}");
        assert!(body.contains("\"version\":\"6.0.0\""), "{target}: {body}");
    }

    // Many connections at once, each its own pair of streams in the one tunnel.
    let forward = PortForward::start(&k, &["deployment/web"], "9898", &[]);
    let client = client();
    let answers =
        futures::future::join_all((0..20).map(|_| get(&client, forward.url("/healthz")))).await;
    assert!(answers.iter().all(|(code, _)| *code == 200), "{answers:?}");
    // A body larger than any one frame arrives whole, both ways.
    let payload: String = (0..300_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let echoed = client
        .post(forward.url("/echo"))
        .body(payload.clone())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(echoed.len(), payload.len());
    assert!(
        echoed == payload,
        "the echoed body differs from the one sent"
    );
    drop(forward);

    // kubectl's SPDY fallback, used when WebSockets are turned off, reaches the same pod.
    let spdy = PortForward::start(
        &k,
        &["svc/web"],
        "80",
        &[("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")],
    );
    let (code, body) = get(&client, spdy.url("/version")).await;
    assert_eq!((code, body.contains("6.0.0")), (200, true), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_port_forward_fails_as_on_a_cluster() {
    let (_sandbox, _dir, k) = common::serving_sandbox(SandboxOptions::default()).await;
    common::rolled_out_podinfo_deployment(&k, "web", &[]);

    // A port nothing listens on: the connection is refused inside the pod, and kubectl gives up.
    let forward = PortForward::start(&k, &["deployment/web"], "7777", &[]);
    let refused = reqwest::Client::new()
        .get(forward.url("/"))
        .timeout(Duration::from_secs(10))
        .send()
        .await;
    assert!(refused.is_err(), "{refused:?}");
    let (ok, stderr) = forward.wait();
    assert!(!ok);
    assert!(
        stderr.contains("an error occurred forwarding")
            && stderr
                .contains("failed to connect to localhost:7777 inside the pod: connection refused"),
        "{stderr}"
    );
    assert!(stderr.contains("lost connection to pod"), "{stderr}");

    // RBAC: reading pods is not enough; port-forward needs create on pods/portforward.
    k.ok(&["create", "serviceaccount", "robot"]);
    k.ok(&[
        "create",
        "role",
        "reader",
        "--verb=get,list",
        "--resource=pods,deployments",
    ]);
    k.ok(&[
        "create",
        "rolebinding",
        "robot-reader",
        "--role=reader",
        "--serviceaccount=default:robot",
    ]);
    let as_robot = "--as=system:serviceaccount:default:robot";
    for websockets in ["true", "false"] {
        let mut command = k.command(&[as_robot, "port-forward", "deployment/web", ":9898"]);
        let output = command
            .env("KUBECTL_PORT_FORWARD_WEBSOCKETS", websockets)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(
                "cannot create resource \"pods/portforward\" in API group \"\" in the namespace \"default\""
            ),
            "{stderr}"
        );
    }
    k.ok(&[
        "create",
        "role",
        "forwarder",
        "--verb=create",
        "--resource=pods/portforward",
    ]);
    k.ok(&[
        "create",
        "rolebinding",
        "robot-forwarder",
        "--role=forwarder",
        "--serviceaccount=default:robot",
    ]);
    let forward = PortForward::start(&k, &[as_robot, "deployment/web"], "9898", &[]);
    let (code, _) = get(&reqwest::Client::new(), forward.url("/version")).await;
    assert_eq!(code, 200);
}
