//! Routing objects for a Canary, as Flagger writes them: the Kubernetes Services (`<svc>`,
//! `<svc>-primary`, `<svc>-canary`), the Istio DestinationRules and the VirtualService, and the
//! weights set into and read back from that VirtualService — or, with the `kubernetes` provider,
//! from the apex Service's selector. Everything here is pure: it builds JSON
//! objects; the controller applies them.
#![deny(missing_docs)]

pub mod gateway_api;
pub mod istio;
pub mod kubernetes;
pub mod managed;
pub mod services;

use serde_json::Value;

/// The annotations Flagger adds to every object it manages, so GitOps tools leave them alone.
pub const TOOLKIT_ANNOTATIONS: [(&str, &str); 2] = [
    ("kustomize.toolkit.fluxcd.io/reconcile", "disabled"),
    ("helm.toolkit.fluxcd.io/driftDetection", "disabled"),
];

/// Why routing objects cannot be built or read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RouterError {
    /// The target's selector has none of the selector labels.
    #[error(
        "deployment {target}.{namespace} spec.selector.matchLabels must contain one of [{labels}]"
    )]
    NoSelectorLabel {
        /// The target Deployment.
        target: String,
        /// Its namespace.
        namespace: String,
        /// The labels looked for.
        labels: String,
    },
    /// Delegation was asked with hosts or gateways.
    #[error(
        "VirtualService {service}.{namespace} cannot have hosts and gateways when delegation enabled: remove service.hosts and service.gateways, or set service.delegation: false"
    )]
    DelegationWithHosts {
        /// The apex Service name.
        service: String,
        /// The namespace.
        namespace: String,
    },
    /// A Gateway API router Canary without parents.
    #[error(
        "HTTPRoute {service}.{namespace} needs a Gateway: set spec.service.gatewayRefs, e.g. [{{name: public-gateway, namespace: istio-system}}]"
    )]
    NoGatewayRefs {
        /// The apex Service name.
        service: String,
        /// The namespace.
        namespace: String,
    },
    /// A match the Gateway API cannot express.
    #[error(
        "spec.service.match {field}: Gateway API matches headers and query parameters with exact or regex only; replace prefix with regex"
    )]
    UnsupportedMatch {
        /// Where the match is.
        field: String,
    },
    /// The VirtualService has no weighted route to the primary and the canary.
    #[error(
        "VirtualService {service}.{namespace} does not contain routes for {service}-primary and {service}-canary"
    )]
    NoRoutes {
        /// The apex Service name.
        service: String,
        /// The namespace.
        namespace: String,
    },
}

/// The names Flagger derives from a Canary.
#[derive(Clone, Debug, PartialEq)]
pub struct Names {
    /// The apex Service and VirtualService: `service.name`, else the target's name.
    pub apex: String,
    /// `<apex>-primary`.
    pub primary: String,
    /// `<apex>-canary`.
    pub canary: String,
    /// The Canary's namespace.
    pub namespace: String,
}

impl Names {
    /// The names for `canary` (its JSON form).
    pub fn of(canary: &Value) -> Names {
        let apex = canary["spec"]["service"]["name"]
            .as_str()
            .or(canary["spec"]["targetRef"]["name"].as_str())
            .unwrap_or_default()
            .to_string();
        Names {
            primary: format!("{apex}-primary"),
            canary: format!("{apex}-canary"),
            namespace: canary["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string(),
            apex,
        }
    }
}

/// The part of a Canary's status the routing objects are built from: the phase and step that
/// make managed routes active, and the session-affinity cookies. The controller hands the router
/// a Canary with only this status, so that objects built from the same spec and the same routed
/// status are the same.
pub fn routed_status(status: &serin_api::CanaryStatus) -> Value {
    let mut fields = serde_json::Map::new();
    let mut put = |key: &str, value: Value| {
        if !value.is_null() {
            fields.insert(key.to_string(), value);
        }
    };
    put(
        "phase",
        serde_json::to_value(status.phase).unwrap_or_default(),
    );
    put("currentStepIndex", status.current_step_index.into());
    put(
        "sessionAffinityCookie",
        status.session_affinity_cookie.clone().into(),
    );
    put(
        "primarySessionAffinityCookie",
        status.primary_session_affinity_cookie.clone().into(),
    );
    put(
        "previousSessionAffinityCookie",
        status.previous_session_affinity_cookie.clone().into(),
    );
    Value::Object(fields)
}

/// The owner reference that makes an object belong to (and be collected with) its Canary.
pub fn owner_reference(canary: &Value) -> Value {
    serde_json::json!({
        "apiVersion": canary["apiVersion"].as_str().unwrap_or(serin_api::api_version()),
        "kind": "Canary",
        "name": canary["metadata"]["name"],
        "uid": canary["metadata"]["uid"],
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// Labels and annotations from a `service.apex|primary|canary` metadata block, with the toolkit
/// annotations added.
pub(crate) fn custom_metadata(
    block: &Value,
) -> (
    serde_json::Map<String, Value>,
    serde_json::Map<String, Value>,
) {
    let labels = block["labels"].as_object().cloned().unwrap_or_default();
    let mut annotations = block["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for (key, value) in TOOLKIT_ANNOTATIONS {
        annotations.insert(key.into(), Value::String(value.into()));
    }
    (labels, annotations)
}
