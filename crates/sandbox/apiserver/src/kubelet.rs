//! What the API server asks of the nodes: `kubectl exec`, `kubectl port-forward`, `kubectl logs`
//! and `kubectl top` are served by the kubelet on a cluster. The API server checks who asks and
//! finds the pod; a [`Kubelet`] does the rest.

use crate::registry::ResourceInfo;
use crate::selectors::LabelSelector;
use crate::status::ApiError;
use crate::store::Store;
use axum::body::Body;
use axum::extract::ws::WebSocketUpgrade;
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::Value;

/// How a streaming request asked to switch protocols.
pub enum Transport {
    /// A WebSocket upgrade (kubectl's exec, and port-forward since kubectl 1.30).
    WebSocket(WebSocketUpgrade),
    /// An `Upgrade: SPDY/3.1` request (kubectl's fallback), with the connection to take over.
    Spdy(Option<hyper::upgrade::OnUpgrade>),
}

/// The query of a log request.
#[derive(Clone, Debug, Default)]
pub struct LogOptions {
    /// `container`.
    pub container: Option<String>,
    /// `follow`.
    pub follow: bool,
    /// `previous`.
    pub previous: bool,
    /// `timestamps`.
    pub timestamps: bool,
    /// `tailLines`.
    pub tail_lines: Option<usize>,
    /// `sinceSeconds`.
    pub since_seconds: Option<u64>,
    /// `limitBytes`.
    pub limit_bytes: Option<usize>,
}

/// The node side of the pod subresources that stream or measure.
pub trait Kubelet: Send + Sync {
    /// `kubectl exec`: runs `command` in `container` of the running `pod` over the upgraded
    /// WebSocket.
    fn exec(
        &self,
        pod: &Value,
        container: &Value,
        command: Vec<String>,
        upgrade: WebSocketUpgrade,
    ) -> Response;
    /// `kubectl port-forward` to the running `pod`, in whichever transport kubectl chose.
    fn port_forward(
        &self,
        pod: Value,
        transport: Transport,
        headers: &HeaderMap,
    ) -> Result<Response, ApiError>;
    /// `kubectl logs` of `pod`.
    fn logs(&self, pod: &Value, options: &LogOptions) -> Result<Body, ApiError>;
    /// The `metrics.k8s.io` answer (`kubectl top`) for the pods or nodes `info` names.
    fn resource_metrics(
        &self,
        store: &Store,
        info: &ResourceInfo,
        namespace: Option<&str>,
        name: Option<&str>,
        labels: &LabelSelector,
    ) -> Result<Value, ApiError>;
}
