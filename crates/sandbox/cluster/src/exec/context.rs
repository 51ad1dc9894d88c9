//! Where a command runs (the pod's name, namespace, env and HTTP proxy) and what it returns.

use serde_json::{Value, json};
use serin_loadtester::proxy::ProxyConfig;
use std::time::Duration;

/// The subprotocols the sandbox speaks, in preference order.
pub const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

/// Longest `sleep` the sandbox's shell waits.
pub const MAX_SLEEP: Duration = Duration::from_secs(60);

/// How long curl and wget wait for an answer unless told otherwise (`--max-time`, `-T`).
pub(crate) const DEFAULT_HTTP_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest `--max-time` or `-T` honoured.
pub(crate) const MAX_HTTP_TIMEOUT: Duration = Duration::from_secs(600);

/// What a command printed and how it ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// The exit code.
    pub exit_code: i32,
}

impl Outcome {
    pub(crate) fn out(text: String) -> Self {
        Outcome {
            stdout: text,
            ..Outcome::default()
        }
    }

    pub(crate) fn failed(code: i32, stderr: String) -> Self {
        Outcome {
            stderr,
            exit_code: code,
            ..Outcome::default()
        }
    }

    pub(crate) fn status(code: i32) -> Self {
        Outcome {
            exit_code: code,
            ..Outcome::default()
        }
    }
}

/// Where a command runs: the pod's name and namespace, its container's environment, whether its
/// image is the load tester's, how its HTTP traffic leaves the pod, and which loopback port
/// serves each of the pod's own ports.
#[derive(Clone, Debug)]
pub struct Context {
    /// The pod's name (`hostname`).
    pub pod_name: String,
    /// The pod's namespace: short Service names are searched in it, as the pod's DNS would.
    pub namespace: String,
    /// The container's `env` values.
    pub env: Vec<(String, String)>,
    /// The load tester image (which has `hey`).
    pub load_tester: bool,
    /// The pod's outgoing proxy (the mesh proxy under `serin sandbox up`).
    pub proxy: ProxyConfig,
    /// The pod's ports as `(container port, loopback port)`: `localhost:PORT` in the pod reaches
    /// the loopback port, as inside the pod's network namespace; a port not listed refuses
    /// connections. Empty: the pod's ports are unknown and `localhost` is the host's.
    pub local_ports: Vec<(u16, u16)>,
}

impl Context {
    /// The context of `container` in `pod`, whose HTTP traffic leaves through `proxy`; its local
    /// ports come from the pod's `status.sandboxPorts`.
    pub fn of(pod: &Value, container: &Value, proxy: ProxyConfig) -> Self {
        // As the kubelet resolves it for the container's process (fieldRefs included).
        let env = crate::process::container_env(pod, container);
        let image = container["image"].as_str().unwrap_or_default();
        let local_ports = pod["status"][serin_sandbox_apiserver::services::PORTS_FIELD]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|entry| {
                let port = u16::try_from(entry["containerPort"].as_u64()?).ok()?;
                let host = u16::try_from(entry["hostPort"].as_u64()?).ok()?;
                Some((port, host))
            })
            .collect();
        Context {
            pod_name: pod["metadata"]["name"].as_str().unwrap_or_default().into(),
            namespace: pod["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .into(),
            env,
            load_tester: image.contains("loadtester"),
            proxy,
            local_ports,
        }
    }
}

/// A duration in (fractional) seconds, as curl's `--max-time` and wget's `-T` take it, capped at
/// [`MAX_HTTP_TIMEOUT`].
pub(crate) fn seconds(text: &str) -> Option<Duration> {
    let value: f64 = text.parse().ok()?;
    (value.is_finite() && value >= 0.0)
        .then(|| Duration::from_secs_f64(value).min(MAX_HTTP_TIMEOUT))
}

/// The Status kubectl reads on the error channel: success, or the exit code as a cause.
pub fn status(outcome: &Outcome) -> Value {
    if outcome.exit_code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({"metadata": {}, "status": "Failure",
        "message": format!("command terminated with non-zero exit code: error executing command, exit status {}", outcome.exit_code),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": outcome.exit_code.to_string()}]}})
}
