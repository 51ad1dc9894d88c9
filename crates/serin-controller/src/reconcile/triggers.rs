//! Which Canaries a change of another object concerns: a target or primary Deployment, a config
//! the target uses, a MetricTemplate or AlertProvider the analysis references, or a provider's
//! Secret.

use crate::cache::Caches;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use serin_api::{AlertProvider, Canary, MetricTemplate};
use serin_core::revision::ConfigKind;

/// The Canaries that point at `namespace`/`name` as target or primary.
pub(super) fn canaries_of_deployment(
    canaries: &Store<Canary>,
    namespace: Option<String>,
    name: &str,
) -> Vec<ObjectRef<Canary>> {
    canaries_where(canaries, |canary| {
        let target = &canary.spec.target_ref.name;
        canary.namespace() == namespace && (target == name || format!("{target}-primary") == name)
    })
}

/// The Canaries whose apex Service (and route) is `namespace`/`name`.
pub(super) fn canaries_of_route(
    canaries: &Store<Canary>,
    namespace: Option<String>,
    name: &str,
) -> Vec<ObjectRef<Canary>> {
    canaries_where(canaries, |canary| {
        let apex = canary
            .spec
            .service
            .name
            .as_deref()
            .unwrap_or(&canary.spec.target_ref.name);
        canary.namespace() == namespace && apex == name
    })
}

/// The Canaries whose metrics reference `template`.
pub(super) fn canaries_of_template(
    canaries: &Store<Canary>,
    template: &MetricTemplate,
) -> Vec<ObjectRef<Canary>> {
    let name = template.name_any();
    let template_namespace = template.namespace();
    canaries_where(canaries, |canary| {
        canary.spec.analysis().is_some_and(|analysis| {
            analysis.metrics().iter().any(|metric| {
                metric.template_ref.as_ref().is_some_and(|reference| {
                    let canary_namespace = canary.namespace().unwrap_or_default();
                    reference.name == name
                        && Some(reference.namespace_or(&canary_namespace))
                            == template_namespace.as_deref()
                })
            })
        })
    })
}

/// The Canaries whose alerts reference `provider`.
pub(super) fn canaries_of_alert_provider(
    canaries: &Store<Canary>,
    provider: &AlertProvider,
) -> Vec<ObjectRef<Canary>> {
    let name = provider.name_any();
    let provider_namespace = provider.namespace();
    canaries_where(canaries, |canary| {
        let canary_namespace = canary.namespace().unwrap_or_default();
        canary.spec.analysis().is_some_and(|analysis| {
            analysis.alerts.iter().flatten().any(|alert| {
                alert.provider_ref.name == name
                    && Some(alert.provider_ref.namespace_or(&canary_namespace))
                        == provider_namespace.as_deref()
            })
        })
    })
}

/// The Canaries whose alerts go to an AlertProvider that reads its address from the Secret
/// `namespace`/`name`.
pub(super) fn canaries_of_provider_secret(
    canaries: &Store<Canary>,
    caches: &Caches,
    namespace: Option<String>,
    name: &str,
) -> Vec<ObjectRef<Canary>> {
    let Some(namespace) = namespace else {
        return Vec::new();
    };
    canaries_where(canaries, |canary| {
        let canary_namespace = canary.namespace().unwrap_or_default();
        canary.spec.analysis().is_some_and(|analysis| {
            analysis.alerts.iter().flatten().any(|alert| {
                let reference = &alert.provider_ref;
                reference.namespace_or(&canary_namespace) == namespace
                    && caches
                        .alert_provider(&namespace, &reference.name)
                        .and_then(|p| p.spec.secret_ref.as_ref().map(|s| s.name == name))
                        .unwrap_or(false)
            })
        })
    })
}

/// The Canaries whose target uses the config `kind`/`name`.
pub(super) fn canaries_of_config(
    canaries: &Store<Canary>,
    caches: &Caches,
    namespace: Option<String>,
    kind: ConfigKind,
    name: &str,
) -> Vec<ObjectRef<Canary>> {
    let Some(namespace) = namespace else {
        return Vec::new();
    };
    canaries_where(canaries, |canary| {
        canary.namespace().as_deref() == Some(namespace.as_str())
            && caches
                .workload(
                    &namespace,
                    &canary.spec.target_ref.kind,
                    &canary.spec.target_ref.name,
                )
                .and_then(|target| target.spec.and_then(|s| s.template.spec))
                .is_some_and(|pod| {
                    serin_core::revision::config_refs(&pod)
                        .iter()
                        .any(|r| r.kind == kind && r.name == name)
                })
    })
}

/// The Canaries of the store that `keep` selects, as the controller's references.
fn canaries_where(
    canaries: &Store<Canary>,
    keep: impl Fn(&Canary) -> bool,
) -> Vec<ObjectRef<Canary>> {
    canaries
        .state()
        .into_iter()
        .filter(|canary| keep(canary))
        .map(|canary| ObjectRef::from_obj(&*canary))
        .collect()
}
