//! The mesh proxy's view of the sandbox: Service hosts resolve to their ready pods.

use crate::telemetry::workload_of;
use serin_sandbox_apiserver::services::resolve_pods;
use serin_sandbox_apiserver::store::Store;

/// The mesh proxy's view of the sandbox: Service hosts resolve to their ready pods.
pub struct SandboxUpstreams {
    /// The sandbox's store.
    pub store: std::sync::Arc<Store>,
}

impl crate::mesh_proxy::Upstreams for SandboxUpstreams {
    fn endpoints(&self, host: &str, port: Option<u16>) -> Vec<crate::mesh_proxy::Endpoint> {
        let host = match port {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        };
        resolve_pods(&self.store, &host, "default")
            .unwrap_or_default()
            .into_iter()
            .map(|(address, pod)| crate::mesh_proxy::Endpoint {
                address,
                labels: pod["metadata"]["labels"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
                workload: workload_of(&self.store, &pod),
            })
            .collect()
    }
}
