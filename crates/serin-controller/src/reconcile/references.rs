//! What a Canary's analysis references beyond its own objects — MetricTemplates, AlertProviders and
//! the Secrets they use — checked before a tick acts: each must exist, be valid, render within the
//! limits, and respect the namespace boundary. A problem holds the release with a message naming
//! the field and the fix, instead of failing its checks and rolling it back.
//!
//! The boundary: a Canary may reference a MetricTemplate or AlertProvider of another namespace (as
//! in Flagger, unless the operator runs with `--no-cross-namespace-refs`), but one that uses a
//! Secret of its namespace is used for the Canary only when that namespace shares it, with the
//! annotation [`SHARE_ANNOTATION`] on the template or provider. Whoever may annotate the object
//! decides who may borrow its credentials.

use crate::cache::Caches;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serin_api::{Canary, CanaryMetric};
use serin_metrics::QueryContext;
use std::sync::Arc;

/// The annotation with which a MetricTemplate or AlertProvider that uses a Secret names the other
/// namespaces whose Canaries may use it: a comma-separated list, or `*` for every namespace.
pub const SHARE_ANNOTATION: &str = "serin.dev/share-with-namespaces";

/// Whether `metadata`'s [`SHARE_ANNOTATION`] lists `namespace` (or `*`).
fn shared_with(metadata: &ObjectMeta, namespace: &str) -> bool {
    metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SHARE_ANNOTATION))
        .is_some_and(|list| {
            list.split(',')
                .map(str::trim)
                .any(|entry| entry == "*" || entry == namespace)
        })
}

/// Why the reference at `field` to `kind` `name`.`target_namespace` crosses the namespace
/// boundary in a way this operator refuses, if it does. `secret` is the Secret the object uses.
fn boundary_problem(
    field: &str,
    kind: &str,
    id: &str,
    metadata: Option<&ObjectMeta>,
    secret: Option<&str>,
    (namespace, target_namespace): (&str, &str),
    cross_namespace_refs: bool,
) -> Option<String> {
    if namespace == target_namespace {
        return None;
    }
    if !cross_namespace_refs {
        return Some(format!(
            "{field}: {kind} {id} is in another namespace, and this operator refuses references across namespaces (--no-cross-namespace-refs); create the {kind} in namespace {namespace} and drop {field}.namespace"
        ));
    }
    let (Some(metadata), Some(secret)) = (metadata, secret) else {
        return None;
    };
    if shared_with(metadata, namespace) {
        return None;
    }
    Some(format!(
        "{field}: {kind} {id} uses Secret {secret} of namespace {target_namespace}, which that namespace does not share with namespace {namespace}; its owners may add {namespace} to the {kind}'s annotation {SHARE_ANNOTATION} (a comma-separated list, or *), or namespace {namespace} may have one of its own, with its own Secret"
    ))
}

/// The object referenced at `field`, or why it cannot be used: it is missing, or `validate`
/// finds problems in it. `(kind, id, field, reference)` name it in the message.
fn usable<T>(
    (kind, id, field, reference): (&str, &str, &str, &str),
    object: Option<Arc<T>>,
    validate: impl Fn(&T) -> Vec<serin_api::FieldError>,
) -> Result<Arc<T>, String> {
    let Some(object) = object else {
        return Err(format!(
            "{kind} {id} in {field} not found; create it or fix {reference}"
        ));
    };
    let errors = validate(&object);
    if errors.is_empty() {
        return Ok(object);
    }
    let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
    Err(format!(
        "{kind} {id} ({field}) is invalid: {}",
        list.join("; ")
    ))
}

/// Every metric of the analysis with the path of its field.
fn metrics_with_paths(canary: &Canary) -> Vec<(String, &CanaryMetric)> {
    let Some(analysis) = canary.spec.analysis() else {
        return Vec::new();
    };
    let mut metrics: Vec<(String, &CanaryMetric)> = analysis
        .metrics()
        .iter()
        .enumerate()
        .map(|(i, m)| (format!("spec.analysis.metrics[{i}]"), m))
        .collect();
    for (field, stage) in [
        ("prePromotionAnalysis", &analysis.pre_promotion_analysis),
        ("postPromotionAnalysis", &analysis.post_promotion_analysis),
    ] {
        for (i, metric) in stage.iter().flat_map(|s| s.metrics()).enumerate() {
            metrics.push((format!("spec.analysis.{field}.metrics[{i}]"), metric));
        }
    }
    metrics
}

/// The MetricTemplate `reference` (at `field`) names, with its `name.namespace`, once it exists,
/// validates and may serve `namespace` (see [`boundary_problem`]); otherwise why not.
fn usable_template(
    field: &str,
    reference: &serin_api::CrossNamespaceObjectReference,
    caches: &Caches,
    namespace: &str,
    cross_namespace_refs: bool,
) -> Result<(String, std::sync::Arc<serin_api::MetricTemplate>), String> {
    let template_namespace = reference.namespace_or(namespace);
    let id = format!("{}.{template_namespace}", reference.name);
    let template = caches.metric_template(template_namespace, &reference.name);
    let secret = template
        .as_ref()
        .and_then(|t| t.spec.provider.secret_ref.as_ref())
        .map(|s| s.name.as_str());
    if let Some(problem) = boundary_problem(
        field,
        "MetricTemplate",
        &id,
        template.as_ref().map(|t| &t.metadata),
        secret,
        (namespace, template_namespace),
        cross_namespace_refs,
    ) {
        return Err(problem);
    }
    let template = usable(
        ("MetricTemplate", &id, field, "templateRef"),
        template,
        serin_api::validate::validate_metric_template,
    )?;
    Ok((id, template))
}

/// Why the MetricTemplates and inline queries of the analysis cannot be used (missing, invalid,
/// across the namespace boundary, or not rendering within the limits), if so. `context` gives a
/// metric's placeholder values.
pub(super) fn metric_problem(
    canary: &Canary,
    caches: &Caches,
    namespace: &str,
    cross_namespace_refs: bool,
    context: impl Fn(&CanaryMetric) -> QueryContext,
) -> Option<String> {
    for (path, metric) in metrics_with_paths(canary) {
        if let Some(query) = &metric.query
            && metric.template_ref.is_none()
            && let Err(error) = serin_metrics::render(query, &context(metric))
        {
            return Some(format!("{path}.query cannot be used: {error}"));
        }
        let Some(reference) = &metric.template_ref else {
            continue;
        };
        let field = format!("{path}.templateRef");
        let (id, template) =
            match usable_template(&field, reference, caches, namespace, cross_namespace_refs) {
                Ok(found) => found,
                Err(problem) => return Some(problem),
            };
        if template.spec.provider.type_ == "web" {
            return Some(format!(
                "MetricTemplate {id} ({field}) is a web metric, which analysis steps and the background analysis read with its conditions; move the metric there, or use a prometheus template here"
            ));
        }
        if let Err(error) = serin_metrics::render(&template.spec.query, &context(metric)) {
            return Some(format!(
                "MetricTemplate {id} ({field}) is invalid: spec.query: {error}"
            ));
        }
    }
    None
}

/// Why an analysis step's or the background analysis's metrics cannot be measured, if so: a
/// condition that is not a valid expression, or a MetricTemplate that is missing, invalid, of a
/// provider analysis cannot read, or across the namespace boundary. The release waits for the fix.
pub(super) fn analysis_problem(
    canary: &Canary,
    caches: &Caches,
    namespace: &str,
    (cross_namespace_refs, job_metrics): (bool, bool),
) -> Option<String> {
    let analysis = canary.spec.analysis()?;
    if let Some((field, error)) = serin_metrics::conditions::condition_problems(analysis)
        .into_iter()
        .next()
    {
        return Some(format!("{field} cannot be evaluated: {error}"));
    }
    for (base, spec) in analysis.analyses() {
        for (i, metric) in spec.metrics.iter().enumerate() {
            let path = format!("{base}.metrics[{i}]");
            let Some(reference) = &metric.template_ref else {
                continue;
            };
            let field = format!("{path}.templateRef");
            let (id, template) =
                match usable_template(&field, reference, caches, namespace, cross_namespace_refs) {
                    Ok(found) => found,
                    Err(problem) => return Some(problem),
                };
            let kind = template.spec.provider.type_.as_str();
            if kind == "job" && !job_metrics {
                return Some(format!(
                    "MetricTemplate {id} ({field}) runs a Job, and job metrics are turned off in this operator; its administrator turns them on with --allow-job-metrics (Helm: jobMetrics.enabled)"
                ));
            }
            let conditions =
                metric.success_condition.is_some() || metric.failure_condition.is_some();
            if kind == "job" && (conditions || metric.threshold_range.is_some()) {
                return Some(format!(
                    "{path}: a job metric passes when its Job completes and fails when it fails; remove successCondition, failureCondition and thresholdRange"
                ));
            }
            if !ANALYSIS_PROVIDERS.contains(&kind) && !serin_metrics::providers::reads(kind) {
                return Some(format!(
                    "MetricTemplate {id} ({field}) has provider type {kind:?}, which analysis cannot read yet; use one of {}, {}",
                    ANALYSIS_PROVIDERS.join(", "),
                    serin_metrics::providers::VALUE_PROVIDERS.join(", ")
                ));
            }
        }
    }
    None
}

/// The MetricTemplate providers an analysis measures besides those that read one value
/// ([`serin_metrics::providers::VALUE_PROVIDERS`]).
const ANALYSIS_PROVIDERS: [&str; 3] = ["prometheus", "web", "job"];

/// Why an AlertProvider the analysis's alerts reference cannot be used (missing, invalid, its
/// address Secret missing, or across the namespace boundary), if so: the release waits for it to
/// be fixed, as for a MetricTemplate, instead of running with alerts that would never arrive.
pub(super) fn alert_provider_problem(
    canary: &Canary,
    caches: &Caches,
    namespace: &str,
    cross_namespace_refs: bool,
) -> Option<String> {
    let analysis = canary.spec.analysis()?;
    for (i, alert) in analysis.alerts.iter().flatten().enumerate() {
        let reference = &alert.provider_ref;
        let provider_namespace = reference.namespace_or(namespace);
        let id = format!("{}.{provider_namespace}", reference.name);
        let field = format!("spec.analysis.alerts[{i}].providerRef");
        let provider = caches.alert_provider(provider_namespace, &reference.name);
        let secret = provider
            .as_ref()
            .and_then(|p| p.spec.secret_ref.as_ref())
            .map(|s| s.name.as_str());
        if let Some(problem) = boundary_problem(
            &field,
            "AlertProvider",
            &id,
            provider.as_ref().map(|p| &p.metadata),
            secret,
            (namespace, provider_namespace),
            cross_namespace_refs,
        ) {
            return Some(problem);
        }
        let provider = match usable(
            ("AlertProvider", &id, &field, "providerRef"),
            provider,
            serin_api::validate::validate_alert_provider,
        ) {
            Ok(provider) => provider,
            Err(problem) => return Some(problem),
        };
        if provider.spec.address.is_none()
            && let Some(secret) = &provider.spec.secret_ref
        {
            let has_address = caches
                .secret_text(provider_namespace, &secret.name)
                .is_some_and(|data| data.get("address").is_some_and(|a| !a.trim().is_empty()));
            if !has_address {
                return Some(format!(
                    "AlertProvider {id} ({field}) is invalid: spec.secretRef: Secret {}.{provider_namespace} is missing or has no address key, and spec.address is not set; create the Secret with an address key or set spec.address",
                    secret.name
                ));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(share: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            annotations: share.map(|list| {
                [(SHARE_ANNOTATION.to_string(), list.to_string())]
                    .into_iter()
                    .collect()
            }),
            ..ObjectMeta::default()
        }
    }

    fn problem(
        meta: &ObjectMeta,
        secret: Option<&str>,
        namespaces: (&str, &str),
        allowed: bool,
    ) -> Option<String> {
        boundary_problem(
            "spec.analysis.metrics[0].templateRef",
            "MetricTemplate",
            "latency.shared",
            Some(meta),
            secret,
            namespaces,
            allowed,
        )
    }

    #[test]
    fn a_template_of_the_canarys_own_namespace_is_always_usable() {
        assert_eq!(
            problem(&meta(None), Some("creds"), ("team-a", "team-a"), false),
            None
        );
    }

    #[test]
    fn a_template_without_a_secret_may_be_shared_as_in_flagger() {
        assert_eq!(problem(&meta(None), None, ("team-a", "shared"), true), None);
    }

    #[test]
    fn a_template_with_a_secret_serves_only_the_namespaces_it_is_shared_with() {
        let refused = problem(&meta(None), Some("creds"), ("team-a", "shared"), true).unwrap();
        assert!(
            refused.starts_with("spec.analysis.metrics[0].templateRef: MetricTemplate latency.shared uses Secret creds of namespace shared")
                && refused.contains("add team-a to the MetricTemplate's annotation serin.dev/share-with-namespaces"),
            "{refused}"
        );
        for list in ["team-a", "team-b, team-a", "*"] {
            assert_eq!(
                problem(&meta(Some(list)), Some("creds"), ("team-a", "shared"), true),
                None,
                "{list}"
            );
        }
        // A prefix is not a match.
        assert!(
            problem(
                &meta(Some("team")),
                Some("creds"),
                ("team-a", "shared"),
                true
            )
            .is_some()
        );
    }

    #[test]
    fn without_cross_namespace_references_nothing_of_another_namespace_is_used() {
        let refused = problem(&meta(Some("*")), None, ("team-a", "shared"), false).unwrap();
        assert!(refused.contains("--no-cross-namespace-refs"), "{refused}");
        assert!(
            refused.contains("create the MetricTemplate in namespace team-a"),
            "{refused}"
        );
    }
}
