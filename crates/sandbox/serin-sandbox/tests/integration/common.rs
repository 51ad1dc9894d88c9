//! Helpers shared by the integration tests: the real kubectl pointed at a sandbox.

use serin_sandbox::runtime::ServingRuntime;
use serin_sandbox::{Sandbox, SandboxOptions};
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A sandbox whose pods serve (podinfo, the load tester) with `options` otherwise, and kubectl.
pub async fn serving_sandbox(options: SandboxOptions) -> (Sandbox, tempfile::TempDir, Kubectl) {
    let dir = tempfile::tempdir().unwrap();
    let options = SandboxOptions {
        runtime: Some(Arc::new(ServingRuntime::default())),
        ..options
    };
    let sandbox = Sandbox::start_with(dir.path(), options).await.unwrap();
    let kubectl = Kubectl::new(&sandbox);
    (sandbox, dir, kubectl)
}

/// A serving sandbox with its mesh proxy (and no Prometheus), and kubectl.
pub async fn mesh_sandbox() -> (Sandbox, tempfile::TempDir, Kubectl) {
    serving_sandbox(SandboxOptions {
        mesh: Some(serin_sandbox::MeshSettings {
            prometheus: None,
            ..serin_sandbox::MeshSettings::default()
        }),
        ..SandboxOptions::default()
    })
    .await
}

/// `kubectl create deployment NAME` of podinfo 6.0.0 (port 9898, `extra` flags), rolled out.
pub fn rolled_out_podinfo_deployment(k: &Kubectl, name: &str, extra: &[&str]) {
    let mut args = vec![
        "create",
        "deployment",
        name,
        "--image=ghcr.io/stefanprodan/podinfo:6.0.0",
        "--port=9898",
    ];
    args.extend_from_slice(extra);
    k.ok(&args);
    k.ok(&[
        "rollout",
        "status",
        &format!("deployment/{name}"),
        "--timeout=60s",
    ]);
}

/// Polls `check` every 200 ms for up to `limit`; whether it ever held.
pub fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// The real kubectl with the sandbox's kubeconfig and a private discovery cache.
pub struct Kubectl {
    kubeconfig: std::path::PathBuf,
    cache: tempfile::TempDir,
}

impl Kubectl {
    pub fn new(sandbox: &Sandbox) -> Self {
        Kubectl {
            kubeconfig: sandbox.kubeconfig.clone(),
            cache: tempfile::tempdir().unwrap(),
        }
    }

    /// kubectl with another kubeconfig (e.g. a ServiceAccount token's).
    pub fn with_kubeconfig(kubeconfig: std::path::PathBuf) -> Self {
        Kubectl {
            kubeconfig,
            cache: tempfile::tempdir().unwrap(),
        }
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("kubectl");
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.cache.path())
            .args(args);
        command
    }

    /// Runs kubectl (optionally with `stdin`) and returns (success, stdout, stderr).
    pub fn run(&self, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl is installed (apt package kubectl)");
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs kubectl and returns (success, stdout followed by stderr).
    pub fn output(&self, args: &[&str]) -> (bool, String) {
        let (ok, stdout, stderr) = self.run(args, None);
        (ok, stdout + &stderr)
    }

    /// Runs kubectl, asserts it succeeded and returns its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.run(args, None);
        assert!(ok, "kubectl {args:?} failed:\n{stdout}\n{stderr}");
        stdout
    }

    pub fn apply(&self, yaml: &str, extra: &[&str]) -> String {
        let mut args = vec!["apply", "-f", "-"];
        args.extend_from_slice(extra);
        let (ok, stdout, stderr) = self.run(&args, Some(yaml));
        assert!(ok, "kubectl apply failed:\n{stdout}\n{stderr}\n{yaml}");
        stdout
    }

    pub fn fails(&self, args: &[&str], stdin: Option<&str>) -> String {
        let (ok, stdout, stderr) = self.run(args, stdin);
        assert!(!ok, "kubectl {args:?} should have failed:\n{stdout}");
        stderr
    }
}

/// The cells of a `kubectl get` table, row by row (cells split on white space).
pub fn table_rows(table: &str) -> Vec<Vec<&str>> {
    table
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect()
}
