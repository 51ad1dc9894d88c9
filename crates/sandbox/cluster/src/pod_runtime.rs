//! How the kubelet runs pods: the [`PodRuntime`] a sandbox is given decides whether and when a
//! scheduled pod becomes Ready, how it ends, what it logs and uses, and where `kubectl exec` runs.
//! The default, [`DelayRuntime`], makes every pod Ready after a fixed delay.

use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// The mesh as gateway pods see it: the HTTP service a gateway pod runs, routing through the
/// mesh's engine. The mesh implements it; the pod runtime only serves it.
pub trait GatewayPods: Send + Sync {
    /// The service of gateway `pod` (an ingress gateway's, or a Gateway API Gateway's).
    fn service_for_pod(&self, pod: &Value) -> axum::Router;
}

/// What the runtime says about a pod it was asked to start.
#[derive(Clone, Debug, PartialEq)]
pub enum PodStart {
    /// The pod becomes Ready after this long.
    ReadyAfter(Duration),
    /// The pod's containers cannot start (for example `ErrImagePull`), with a message.
    Waiting {
        /// Container waiting reason, e.g. `ErrImagePull`.
        reason: String,
        /// Why.
        message: String,
    },
}

/// Runs pods: decides whether and when a scheduled pod becomes Ready, and may report where it
/// serves. The default runtime makes every pod Ready after a fixed delay.
pub trait PodRuntime: Send + Sync {
    /// Starts `pod` (a scheduled Pod object).
    fn start(&self, pod: &Value) -> PodStart;
    /// Extra status fields for a running pod (merged into `status`), e.g. where it listens.
    fn running_status(&self, _pod: &Value) -> Value {
        json!({})
    }
    /// What the pod's probes say now, for a runtime that probes its pods; `None` (the default)
    /// keeps a running pod Ready as it is.
    fn health(&self, _pod: &Value) -> Option<PodHealth> {
        None
    }
    /// The pod is gone (deleted, or no longer in the store).
    fn stop(&self, _pod: &Value) {}
    /// Whether a started pod's health or end can change with no change to its object (a runtime
    /// that runs or probes processes): the kubelet then asks about every started pod once a
    /// second. `true` by default.
    fn changes_pods_on_its_own(&self) -> bool {
        true
    }
    /// The sandbox's mesh proxy listens at `proxy` (called once, before any pod starts), so a
    /// runtime can send its pods' outgoing traffic through it as a sidecar would.
    fn mesh_proxy_started(&self, _proxy: std::net::SocketAddr) {}
    /// The sandbox's mesh is running and gateway pods can route through it (called once, before
    /// any pod starts), so a runtime can serve the ingress and Gateway API gateways' pods.
    fn mesh_gateways_ready(&self, _gateways: Arc<dyn GatewayPods>) {}
    /// The sandbox hands out API credentials for ServiceAccounts (called once, before any pod
    /// starts), so a runtime can run pods that call the API server as their ServiceAccount.
    fn api_access_ready(&self, _access: Arc<dyn crate::process::ApiAccess>) {}
    /// How the pod's app ended, for pods that run to completion (restartPolicy `Never` or
    /// `OnFailure`, as a Job's); `None` (the default): still running.
    fn terminated(&self, _pod: &Value) -> Option<Termination> {
        None
    }
    /// Where `kubectl exec` runs a command in `container` of `pod`: by default its name and env,
    /// `hey` in load tester images, and direct HTTP.
    fn exec_context(&self, pod: &Value, container: &Value) -> crate::exec::Context {
        crate::exec::Context::of(
            pod,
            container,
            serin_loadtester::proxy::ProxyConfig::direct(),
        )
    }
    /// What the pod's containers wrote (`kubectl logs`); `None` (the default): nothing.
    fn logs(&self, _pod: &Value) -> Option<Arc<crate::logs::PodLogs>> {
        None
    }
    /// What a running pod's containers use now (`kubectl top`, the HPA); idle by default.
    fn usage(&self, pod: &Value) -> Vec<ContainerUsage> {
        idle_usage(pod)
    }
}

/// How a pod's app ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Termination {
    /// The exit code (0: the pod Succeeded).
    pub exit_code: i32,
    /// The kubelet's reason: `Completed`, `Error`, `StartError`.
    pub reason: String,
    /// What went wrong, if anything.
    pub message: String,
}

/// Whether `pod` runs to completion rather than forever (restartPolicy `Never` or `OnFailure`).
pub fn runs_to_completion(pod: &Value) -> bool {
    matches!(
        pod["spec"]["restartPolicy"].as_str(),
        Some("Never" | "OnFailure")
    )
}

/// A running pod's health as its runtime's probes see it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodHealth {
    /// The readiness probe passes (or there is none and the pod serves).
    pub ready: bool,
    /// How often the liveness probe made the runtime restart the pod's containers.
    pub restarts: u32,
}

/// Makes every pod Ready after `delay`; pods that run to completion then finish successfully.
pub struct DelayRuntime {
    /// How long a pod takes to become Ready.
    pub delay: Duration,
}

impl PodRuntime for DelayRuntime {
    fn start(&self, _pod: &Value) -> PodStart {
        PodStart::ReadyAfter(self.delay)
    }

    // Readiness comes from the delay and a run-to-completion pod ends as soon as it runs: both
    // follow a change the kubelet sees anyway.
    fn changes_pods_on_its_own(&self) -> bool {
        false
    }

    fn terminated(&self, pod: &Value) -> Option<Termination> {
        runs_to_completion(pod).then(|| Termination {
            exit_code: 0,
            reason: "Completed".into(),
            message: String::new(),
        })
    }
}

/// What one container uses, as the runtime estimates it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerUsage {
    /// The container's name.
    pub name: String,
    /// CPU in millicores.
    pub cpu_millis: u64,
    /// Memory in bytes.
    pub memory_bytes: u64,
}

/// An idle container's usage, for runtimes that run nothing (1m CPU, 8 MiB).
pub fn idle_usage(pod: &Value) -> Vec<ContainerUsage> {
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| ContainerUsage {
            name: c["name"].as_str().unwrap_or_default().into(),
            cpu_millis: 1,
            memory_bytes: 8 << 20,
        })
        .collect()
}
