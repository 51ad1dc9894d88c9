//! Pods whose image is Serin's operator run the `serin-operator` binary built from this workspace
//! as a child process, as a kubelet would run the image's entrypoint: with the container's args and
//! env (downward-API `fieldRef`s resolved), listening on the pod's loopback port, authenticated as
//! the pod's ServiceAccount through a kubeconfig the sandbox issues for it (so RBAC applies), and
//! with its output as the container's log (`kubectl logs deploy/serin`).

use crate::logs::ContainerLog;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::watch;

/// The environment variable naming the `serin-operator` binary pods of the operator image run.
pub const OPERATOR_BINARY_ENV: &str = "SERIN_OPERATOR_BIN";

/// How long a stopped process has between SIGTERM and SIGKILL (Kubernetes' default grace period
/// is longer; the sandbox keeps deletions quick).
const GRACE: Duration = Duration::from_secs(5);

/// Hands out credentials for a ServiceAccount: a kubeconfig that authenticates as it.
pub trait ApiAccess: Send + Sync {
    /// A kubeconfig (YAML text) for `namespace/service_account`, or why there is none.
    fn kubeconfig_for(&self, namespace: &str, service_account: &str) -> Result<String, String>;
}

/// `$SERIN_OPERATOR_BIN`, else a `serin-operator` next to the running binary (or one directory
/// up, for test binaries in `target/debug/deps`).
pub fn operator_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(OPERATOR_BINARY_ENV) {
        return Some(PathBuf::from(path));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir, dir.parent().unwrap_or(dir)]
        .iter()
        .map(|d| d.join("serin-operator"))
        .find(|candidate| candidate.is_file())
}

/// What to run for a container: the binary, its args and env, and the kubeconfig it uses.
#[derive(Clone, Debug)]
pub struct ProcessSpec {
    /// The binary standing in for the image's entrypoint.
    pub binary: PathBuf,
    /// The container's `args` (its `command` names the image's entrypoint, which `binary` is).
    pub args: Vec<String>,
    /// The container's environment.
    pub env: Vec<(String, String)>,
    /// The kubeconfig text for the pod's ServiceAccount.
    pub kubeconfig: String,
}

impl ProcessSpec {
    /// The spec of `container` in `pod`, running `binary` with `kubeconfig`.
    pub fn of(pod: &Value, container: &Value, binary: PathBuf, kubeconfig: String) -> Self {
        let args = container["args"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a.as_str().map(String::from))
            .collect();
        ProcessSpec {
            binary,
            args,
            env: container_env(pod, container),
            kubeconfig,
        }
    }

    /// The args with the admin server moved to `address`, the pod's loopback port: the port
    /// mapping a kubelet does with network namespaces, done here by rewriting the listen address.
    pub fn args_listening_on(&self, address: SocketAddr) -> Vec<String> {
        let flag = "--admin-address";
        let mut args: Vec<String> = Vec::new();
        let mut skip_next = false;
        for arg in &self.args {
            if skip_next {
                skip_next = false;
                continue;
            }
            if arg == flag {
                skip_next = true;
            } else if !arg.starts_with(&format!("{flag}=")) {
                args.push(arg.clone());
            }
        }
        args.push(format!("{flag}={address}"));
        args
    }
}

/// The container's `env`: literal values, and `fieldRef`s to the pod's name, namespace, uid,
/// service account and node.
pub fn container_env(pod: &Value, container: &Value) -> Vec<(String, String)> {
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let name = e["name"].as_str()?.to_string();
            if let Some(value) = e["value"].as_str() {
                return Some((name, value.to_string()));
            }
            let path = e["valueFrom"]["fieldRef"]["fieldPath"].as_str()?;
            let value = match path {
                "metadata.name" => &pod["metadata"]["name"],
                "metadata.namespace" => &pod["metadata"]["namespace"],
                "metadata.uid" => &pod["metadata"]["uid"],
                "spec.serviceAccountName" => &pod["spec"]["serviceAccountName"],
                "spec.nodeName" => &pod["spec"]["nodeName"],
                "status.podIP" => return Some((name, "127.0.0.1".to_string())),
                _ => return None,
            };
            Some((name, value.as_str().unwrap_or_default().to_string()))
        })
        .collect()
}

/// Runs `spec` until `stop`, its output going to `log`; the kubeconfig lives in `dir`. Returns when
/// the process has ended (by itself, or stopped with SIGTERM and, after a grace period, SIGKILL).
pub async fn run(
    spec: &ProcessSpec,
    address: SocketAddr,
    dir: &Path,
    mut stop: watch::Receiver<bool>,
    log: Arc<ContainerLog>,
) {
    let kubeconfig = dir.join("kubeconfig");
    if let Err(error) =
        std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&kubeconfig, &spec.kubeconfig))
    {
        log.write(&format!(
            "sandbox: cannot write the pod's kubeconfig: {error}"
        ));
        return;
    }
    // A container sees only its own environment.
    let mut command = tokio::process::Command::new(&spec.binary);
    command
        .args(spec.args_listening_on(address))
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", dir)
        .env("KUBECONFIG", &kubeconfig)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            log.write(&format!(
                "sandbox: cannot start {}: {error}",
                spec.binary.display()
            ));
            return;
        }
    };
    let mut pumps = Vec::new();
    if let Some(out) = child.stdout.take() {
        pumps.push(tokio::spawn(pump(out, log.clone())));
    }
    if let Some(err) = child.stderr.take() {
        pumps.push(tokio::spawn(pump(err, log.clone())));
    }
    let stopping = async move {
        let _ = stop.wait_for(|stopping| *stopping).await;
    };
    tokio::select! {
        status = child.wait() => {
            if let Ok(status) = status {
                log.write(&format!("sandbox: the container exited ({status})"));
            }
        }
        () = stopping => {
            if let Some(pid) = child.id() {
                let _ = tokio::process::Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status()
                    .await;
            }
            if tokio::time::timeout(GRACE, child.wait()).await.is_err() {
                let _ = child.kill().await;
            }
        }
    }
    for pump in pumps {
        let _ = tokio::time::timeout(Duration::from_secs(1), pump).await;
    }
}

async fn pump(output: impl AsyncRead + Unpin, log: Arc<ContainerLog>) {
    let mut lines = BufReader::new(output).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        log.write(&line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_admin_address_moves_to_the_pods_port_and_the_env_resolves() {
        let pod = json!({"metadata": {"name": "serin-abc", "namespace": "serin-system", "uid": "u1"},
                         "spec": {"serviceAccountName": "serin"}});
        let container = json!({
            "args": ["--admin-address=0.0.0.0:8080", "--leader-elect", "--admin-address", "0.0.0.0:9", "--log-level=debug"],
            "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "MODE", "value": "x"},
                    {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
        });
        let spec = ProcessSpec::of(&pod, &container, "/bin/true".into(), String::new());
        assert_eq!(
            spec.args_listening_on("127.0.0.1:4000".parse().unwrap()),
            [
                "--leader-elect",
                "--log-level=debug",
                "--admin-address=127.0.0.1:4000"
            ]
        );
        assert_eq!(
            spec.env,
            [
                ("POD_NAME".to_string(), "serin-abc".to_string()),
                ("MODE".into(), "x".into())
            ]
        );
    }
}
