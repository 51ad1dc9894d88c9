//! Checks a Canary (and MetricTemplate, AlertProvider) and reports every problem with its field path
//! and what to write instead.

mod analysis;
mod managed_routes;
mod report;
mod resources;
mod routing;
mod spec;
mod step_analysis;

pub use analysis::BUILTIN_METRICS;
pub use managed_routes::MAX_MANAGED_ROUTES;
pub use report::{FieldError, is_absolute_http_url};
pub use resources::{validate_alert_provider, validate_metric_template};
pub use routing::{KUBERNETES_PROVIDER, PROVIDERS, ROUTING_PROVIDERS};
pub use step_analysis::MAX_CONDITION_BYTES;

use crate::Canary;
use report::Report;
use spec::validate_spec;

/// Checks a Canary and returns every problem found; an empty list means it can be run.
pub fn validate(canary: &Canary) -> Vec<FieldError> {
    let mut report = Report::default();
    validate_spec(&canary.spec, &mut report);
    report.errors
}
