//! Pods whose image is Serin's operator run the `serin-operator` binary built from this workspace
//! as a child process, as a kubelet would run the image's entrypoint: with the container's args and
//! env (downward-API `fieldRef`s, `secretKeyRef`s and `configMapKeyRef`s resolved), listening on
//! the pod's loopback port, authenticated as
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

/// What the kubelet reads from the API for a pod: credentials for its ServiceAccount, and the
/// Secrets and ConfigMaps its containers' env refers to.
pub trait ApiAccess: Send + Sync {
    /// A kubeconfig (YAML text) for `namespace/service_account`, or why there is none.
    fn kubeconfig_for(&self, namespace: &str, service_account: &str) -> Result<String, String>;
    /// The stored object `namespace/name` of the core resource `plural` (`secrets`,
    /// `configmaps`), if it exists.
    fn core_object(&self, plural: &str, namespace: &str, name: &str) -> Option<Value>;
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
    /// The name the binary is started under: the container's `command[0]` when it has a
    /// `command` (Flagger's chart runs `./flagger`, which the image links to the operator).
    pub program: Option<String>,
    /// The rest of the container's `command`, then its `args`.
    pub args: Vec<String>,
    /// The container's environment.
    pub env: Vec<(String, String)>,
    /// The kubeconfig text for the pod's ServiceAccount.
    pub kubeconfig: String,
}

impl ProcessSpec {
    /// The spec of `container` in `pod`, running `binary` with `kubeconfig`, its env resolved
    /// from `objects` ([`resolve_env`]); the error is the kubelet's message for an env that
    /// cannot be resolved.
    pub fn of(
        pod: &Value,
        container: &Value,
        binary: PathBuf,
        kubeconfig: String,
        objects: &dyn ApiAccess,
    ) -> Result<Self, String> {
        let words = |field: &str| -> Vec<String> {
            container[field]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| a.as_str().map(String::from))
                .collect()
        };
        let mut command = words("command");
        let program = (!command.is_empty()).then(|| command.remove(0));
        command.extend(words("args"));
        Ok(ProcessSpec {
            binary,
            program,
            args: command,
            env: resolve_env(pod, container, Some(objects))?,
            kubeconfig,
        })
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

/// The container's `env` as far as it can be known without the API: literal values and
/// downward-API `fieldRef`s; `secretKeyRef`s and `configMapKeyRef`s are left out.
pub fn container_env(pod: &Value, container: &Value) -> Vec<(String, String)> {
    resolve_env(pod, container, None).unwrap_or_default()
}

/// The container's `env` as the kubelet resolves it: literal values, `fieldRef`s to the pod's
/// name, namespace, uid, service account, node and IP, and, with `objects`, `secretKeyRef`s and
/// `configMapKeyRef`s read from the pod's namespace. A Secret, ConfigMap or key that is missing
/// and not `optional` is an error with the kubelet's message (`secret "x" not found`, `couldn't
/// find key k in Secret ns/x`); the pod then waits with `CreateContainerConfigError`.
pub fn resolve_env(
    pod: &Value,
    container: &Value,
    objects: Option<&dyn ApiAccess>,
) -> Result<Vec<(String, String)>, String> {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let mut env = Vec::new();
    for entry in container["env"].as_array().into_iter().flatten() {
        let Some(name) = entry["name"].as_str() else {
            continue;
        };
        if let Some(value) = entry["value"].as_str() {
            env.push((name.to_string(), value.to_string()));
            continue;
        }
        let from = &entry["valueFrom"];
        if let Some(path) = from["fieldRef"]["fieldPath"].as_str() {
            let value = match path {
                "metadata.name" => &pod["metadata"]["name"],
                "metadata.namespace" => &pod["metadata"]["namespace"],
                "metadata.uid" => &pod["metadata"]["uid"],
                "spec.serviceAccountName" => &pod["spec"]["serviceAccountName"],
                "spec.nodeName" => &pod["spec"]["nodeName"],
                "status.podIP" => &Value::String("127.0.0.1".into()),
                _ => continue,
            };
            env.push((
                name.to_string(),
                value.as_str().unwrap_or_default().to_string(),
            ));
            continue;
        }
        let Some(objects) = objects else {
            continue;
        };
        let (reference, plural, kind) = if from["secretKeyRef"].is_object() {
            (&from["secretKeyRef"], "secrets", "Secret")
        } else if from["configMapKeyRef"].is_object() {
            (&from["configMapKeyRef"], "configmaps", "ConfigMap")
        } else {
            continue;
        };
        let object_name = reference["name"].as_str().unwrap_or_default();
        let key = reference["key"].as_str().unwrap_or_default();
        let optional = reference["optional"].as_bool() == Some(true);
        let Some(object) = objects.core_object(plural, namespace, object_name) else {
            if optional {
                continue;
            }
            return Err(format!(
                "{} \"{object_name}\" not found",
                kind.to_lowercase()
            ));
        };
        match key_value(&object, kind, key) {
            Some(value) => env.push((name.to_string(), value)),
            None if optional => {}
            None => {
                return Err(format!(
                    "couldn't find key {key} in {kind} {namespace}/{object_name}"
                ));
            }
        }
    }
    Ok(env)
}

/// The value under `key` of a Secret (`data`, base64-decoded, or `stringData` as written) or a
/// ConfigMap (`data`).
fn key_value(object: &Value, kind: &str, key: &str) -> Option<String> {
    if kind == "ConfigMap" {
        return object["data"][key].as_str().map(String::from);
    }
    if let Some(encoded) = object["data"][key].as_str() {
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()?;
        return Some(String::from_utf8_lossy(&bytes).into_owned());
    }
    object["stringData"][key].as_str().map(String::from)
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
    if let Some(program) = &spec.program {
        command.arg0(program);
    }
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
        let spec = ProcessSpec::of(
            &pod,
            &container,
            "/bin/true".into(),
            String::new(),
            &Objects(vec![secret("s", "k", "v")]),
        )
        .unwrap();
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
                ("MODE".into(), "x".into()),
                ("SECRET".into(), "v".into())
            ]
        );
        // Without the API the reference is left out.
        assert_eq!(container_env(&pod, &container).len(), 2);
    }

    /// Stored objects, for [`ApiAccess::core_object`].
    struct Objects(Vec<Value>);

    impl ApiAccess for Objects {
        fn kubeconfig_for(&self, _: &str, _: &str) -> Result<String, String> {
            Err("no credentials in this test".into())
        }
        fn core_object(&self, plural: &str, namespace: &str, name: &str) -> Option<Value> {
            let kind = if plural == "secrets" {
                "Secret"
            } else {
                "ConfigMap"
            };
            self.0
                .iter()
                .find(|o| {
                    o["kind"] == kind
                        && o["metadata"]["namespace"] == namespace
                        && o["metadata"]["name"] == name
                })
                .cloned()
        }
    }

    fn secret(name: &str, key: &str, value: &str) -> Value {
        use base64::Engine;
        let encoded = base64::engine::general_purpose::STANDARD.encode(value);
        json!({"kind": "Secret", "metadata": {"name": name, "namespace": "serin-system"},
               "data": {key: encoded}})
    }

    #[test]
    fn secret_and_config_map_keys_resolve_as_the_kubelet_does() {
        let pod = json!({"metadata": {"name": "p", "namespace": "serin-system"}});
        let objects = Objects(vec![
            secret("lt", "token", "s3cret\n"),
            json!({"kind": "Secret", "metadata": {"name": "typed", "namespace": "serin-system"},
                   "stringData": {"token": "from-string-data"}}),
            json!({"kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "serin-system"},
                   "data": {"level": "debug"}}),
            json!({"kind": "Secret", "metadata": {"name": "lt", "namespace": "elsewhere"},
                   "data": {"other": "eA=="}}),
        ]);
        let env = |entries: Value| {
            resolve_env(
                &pod,
                &json!({"env": entries}),
                Some(&objects as &dyn ApiAccess),
            )
        };
        assert_eq!(
            env(json!([
                {"name": "A", "valueFrom": {"secretKeyRef": {"name": "lt", "key": "token"}}},
                {"name": "B", "valueFrom": {"secretKeyRef": {"name": "typed", "key": "token"}}},
                {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "level"}}},
                {"name": "D", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "x", "optional": true}}},
                {"name": "E", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "x", "optional": true}}}
            ]))
            .unwrap(),
            [
                ("A".to_string(), "s3cret\n".to_string()),
                ("B".into(), "from-string-data".into()),
                ("C".into(), "debug".into())
            ]
        );
        // Only the pod's own namespace is looked in.
        assert_eq!(
            env(
                json!([{"name": "A", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "token"}}}])
            ),
            Err("secret \"gone\" not found".into())
        );
        assert_eq!(
            env(
                json!([{"name": "A", "valueFrom": {"secretKeyRef": {"name": "lt", "key": "other"}}}])
            ),
            Err("couldn't find key other in Secret serin-system/lt".into())
        );
        assert_eq!(
            env(
                json!([{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "none", "key": "k"}}}])
            ),
            Err("configmap \"none\" not found".into())
        );
    }
}
