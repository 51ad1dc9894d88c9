//! Helpers shared by the controller's end-to-end tests.

use serin_sandbox::{MeshSettings, Sandbox, SandboxOptions};

/// The namespace `test` and Deployment `podinfo` (one replica of podinfo 6.0.0, label
/// `app: podinfo`) that most tests release; a YAML stream ending in `---`, so a Canary can follow.
#[allow(dead_code)] // not every test binary that includes this module releases podinfo
pub const PODINFO: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: test}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: podinfo, namespace: test, labels: {app: podinfo}}
spec:
  replicas: 1
  selector: {matchLabels: {app: podinfo}}
  template:
    metadata: {labels: {app: podinfo}}
    spec:
      containers:
      - name: podinfod
        image: ghcr.io/stefanprodan/podinfo:6.0.0
        ports: [{name: http, containerPort: 9898}]
---
"#;

/// A new version of `podinfo` in `test`: its container runs podinfo `tag`, as `kubectl set image`
/// writes it.
#[allow(dead_code)] // not every test binary that includes this module releases podinfo
pub fn set_podinfo_image(sandbox: &Sandbox, tag: &str) {
    kubectl(
        sandbox,
        &[
            "-n",
            "test",
            "set",
            "image",
            "deploy/podinfo",
            &format!("podinfod=ghcr.io/stefanprodan/podinfo:{tag}"),
        ],
        None,
    );
}

/// Runs the real kubectl against `sandbox` with `stdin` as input; panics with its stderr on failure.
pub fn kubectl(sandbox: &Sandbox, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&sandbox.kubeconfig)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl is installed");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(input.as_bytes()).unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A sandbox in `dir` with pods, the mesh and (with `prometheus`) Debian's Prometheus, and Serin's
/// CRDs installed and established.
pub async fn sandbox_with_crds(dir: &std::path::Path, prometheus: bool) -> Sandbox {
    let mut options = SandboxOptions::with_data_plane();
    if !prometheus {
        options.mesh = Some(MeshSettings {
            prometheus: None,
            ..MeshSettings::default()
        });
    }
    let sandbox = Sandbox::start_with(dir, options)
        .await
        .expect("the sandbox (with Prometheus: Debian's prometheus, apt-get install prometheus)");
    kubectl(
        &sandbox,
        &["apply", "-f", "-"],
        Some(include_str!("../../../../artifacts/crds/serin.yaml")),
    );
    kubectl(
        &sandbox,
        &[
            "wait",
            "--for=condition=Established",
            "crd/canaries.serin.dev",
        ],
        None,
    );
    sandbox
}
