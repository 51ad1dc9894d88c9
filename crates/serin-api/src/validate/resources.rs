//! The checks of the resources a Canary refers to: MetricTemplate and AlertProvider.

use super::report::{FieldError, Report};
use crate::{AlertProvider, MetricTemplate};

/// Checks a MetricTemplate and returns every problem found.
pub fn validate_metric_template(template: &MetricTemplate) -> Vec<FieldError> {
    let mut r = Report::default();
    let provider = &template.spec.provider;
    if provider.type_ != "prometheus" {
        let known =
            crate::metric_template::METRIC_PROVIDER_TYPES.contains(&provider.type_.as_str());
        r.add(
            "spec.provider.type",
            format!(
                "{} provider {:?}; write prometheus (the only metrics provider Serin queries yet)",
                if known {
                    "not supported yet:"
                } else {
                    "unknown"
                },
                provider.type_,
            ),
        );
    }
    match provider.address.as_deref() {
        Some(address) => r.prometheus_address("spec.provider.address", address),
        None if provider.type_ == "prometheus" => r.add(
            "spec.provider.address",
            "missing; write the Prometheus URL, e.g. http://prometheus.istio-system:9090",
        ),
        None => {}
    }
    if template.spec.query.trim().is_empty() {
        r.add("spec.query", "empty; write the query, e.g. sum(rate(...{namespace=\"{{ namespace }}\"}[{{ interval }}]))");
    }
    r.query_length("spec.query", &template.spec.query);
    r.errors
}

/// Checks an AlertProvider and returns every problem found.
pub fn validate_alert_provider(provider: &AlertProvider) -> Vec<FieldError> {
    let mut r = Report::default();
    let spec = &provider.spec;
    let types = crate::alert_provider::ALERT_PROVIDER_TYPES;
    if !types.contains(&spec.type_.as_str()) {
        r.add(
            "spec.type",
            format!(
                "unknown type {:?}; write one of {}",
                spec.type_,
                types.join(", ")
            ),
        );
    }
    match (&spec.address, &spec.secret_ref) {
        (Some(address), _) => r.url("spec.address", address),
        (None, None) => r.add(
            "spec.address",
            "missing; write the webhook URL, or set secretRef to a Secret with an address key",
        ),
        (None, Some(_)) => {}
    }
    if let Some(proxy) = spec.proxy.as_deref() {
        r.url("spec.proxy", proxy);
    }
    r.errors
}
