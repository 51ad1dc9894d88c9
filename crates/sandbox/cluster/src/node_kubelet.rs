//! The cluster's [`Kubelet`]: exec, port-forward, logs and resource metrics served from the pods'
//! runtime.

use crate::pod_runtime::PodRuntime;
use axum::body::Body;
use axum::extract::ws::WebSocketUpgrade;
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::Value;
use serin_sandbox_apiserver::kubelet::{Kubelet, LogOptions, Transport};
use serin_sandbox_apiserver::registry::ResourceInfo;
use serin_sandbox_apiserver::selectors::LabelSelector;
use serin_sandbox_apiserver::status::ApiError;
use serin_sandbox_apiserver::store::Store;
use std::sync::Arc;

/// Serves the pod subresources the API server hands over, from `runtime`.
pub struct RuntimeKubelet {
    /// The pods' runtime.
    pub runtime: Arc<dyn PodRuntime>,
}

impl Kubelet for RuntimeKubelet {
    fn exec(
        &self,
        pod: &Value,
        container: &Value,
        command: Vec<String>,
        upgrade: WebSocketUpgrade,
    ) -> Response {
        let context = self.runtime.exec_context(pod, container);
        upgrade
            .protocols(crate::exec::PROTOCOLS)
            .on_upgrade(move |socket| crate::exec::serve(socket, command, context))
    }

    fn port_forward(
        &self,
        pod: Value,
        transport: Transport,
        headers: &HeaderMap,
    ) -> Result<Response, ApiError> {
        crate::portforward::upgrade(transport, headers, pod)
    }

    fn logs(&self, pod: &Value, options: &LogOptions) -> Result<Body, ApiError> {
        crate::logs::serve(pod, self.runtime.logs(pod), options)
    }

    fn resource_metrics(
        &self,
        store: &Store,
        info: &ResourceInfo,
        namespace: Option<&str>,
        name: Option<&str>,
        labels: &LabelSelector,
    ) -> Result<Value, ApiError> {
        crate::autoscaling::serve(store, self.runtime.as_ref(), info, namespace, name, labels)
    }
}
