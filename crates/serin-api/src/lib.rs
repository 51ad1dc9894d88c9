//! Serin's custom resources (API group `serin.dev`, version `v1beta1`): `Canary`, `MetricTemplate` and
//! `AlertProvider`, their defaults, `validate`, and the generated CRD manifests.
//!
//! Field names follow Flagger's v1beta1 API so existing manifests carry over; extensions take the
//! names Argo Rollouts uses (`steps`, `setWeight`, `pause`, `setCanaryScale`, `dynamicStableScale`, ...).

#![deny(missing_docs)]

pub mod alert_provider;
pub mod analysis_run;
pub mod canary;
pub mod crd;
pub mod duration;
pub mod group;
pub mod hooks;
pub mod limits;
pub mod managed_routes;
pub mod mesh;
pub mod metric_template;
pub mod object_ref;
pub mod reference;
pub mod schema;
pub mod status;
pub mod timestamp;
pub mod validate;

pub use alert_provider::{AlertProvider, AlertProviderSpec};
pub use analysis_run::*;
pub use canary::*;
pub use group::{ApiGroup, api_group, api_version, set_api_group};
pub use hooks::HookType;
pub use managed_routes::*;
pub use metric_template::{MetricProvider, MetricTemplate, MetricTemplateSpec};
pub use object_ref::CrossNamespaceObjectReference;
pub use status::*;
pub use validate::{FieldError, validate};

/// API version of every Serin resource.
pub const VERSION: &str = "v1beta1";
