//! Which Canaries a change of another object concerns: a target or primary Deployment, a config
//! the target uses, a MetricTemplate or AlertProvider the analysis references, or a provider's
//! Secret.
//!
//! Workloads, routes and autoscalers change often and there is one of each per Canary, so their
//! Canaries are found through [`TriggerIndex`]; the rarer kinds scan the Canaries.

use crate::cache::Caches;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use serin_api::{AlertProvider, Canary, MetricTemplate};
use serin_core::revision::ConfigKind;
use std::collections::{HashMap, HashSet};
use std::sync::RwLock;

/// An object a Canary names: a change of it concerns that Canary.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Named {
    /// The target workload or its `-primary` copy (Deployments and DaemonSets share names).
    Workload(Option<String>, String),
    /// The apex Service's name, which its VirtualService or HTTPRoute shares.
    Route(Option<String>, String),
    /// The HorizontalPodAutoscaler of `autoscalerRef`.
    Autoscaler(Option<String>, String),
}

impl Named {
    /// What `canary` names.
    fn of(canary: &Canary) -> Vec<Named> {
        let namespace = canary.namespace();
        let target = &canary.spec.target_ref.name;
        let mut named = vec![
            Named::Workload(namespace.clone(), target.clone()),
            Named::Workload(namespace.clone(), format!("{target}-primary")),
            Named::Route(namespace.clone(), canary.spec.service_name().to_string()),
        ];
        if let Some(autoscaler) = &canary.spec.autoscaler_ref {
            named.push(Named::Autoscaler(namespace, autoscaler.name.clone()));
        }
        named
    }
}

/// Which Canaries name each workload, route and autoscaler, kept up to date from the Canary
/// watch: a change of one of 20,000 Deployments finds its Canary without reading every Canary.
#[derive(Default)]
pub(super) struct TriggerIndex(RwLock<IndexState>);

#[derive(Default)]
struct IndexState {
    live: Names,
    /// Filled while the watch relists, and swapped in when the list is complete (as the
    /// reflector's store does), so a relist never shows a half-empty index.
    relisting: Option<Names>,
}

/// Each object named, with the Canaries that name it.
#[derive(Default)]
struct Names {
    canaries: HashMap<Named, Naming>,
    named_by: HashMap<ObjectRef<Canary>, Vec<Named>>,
}

/// The Canaries that name one object: almost always one, kept without a set (a set of one costs
/// four times its element); a set once there are more, so that many Canaries of one namespace
/// naming the same object cost no more per change than one.
enum Naming {
    One(ObjectRef<Canary>),
    Many(HashSet<ObjectRef<Canary>>),
}

impl Naming {
    fn insert(&mut self, reference: ObjectRef<Canary>) {
        match self {
            Naming::One(one) if *one == reference => {}
            Naming::One(one) => {
                let set = HashSet::from([one.clone(), reference]);
                *self = Naming::Many(set);
            }
            Naming::Many(set) => {
                set.insert(reference);
            }
        }
    }

    /// Removes `reference`; true when no Canary is left.
    fn remove(&mut self, reference: &ObjectRef<Canary>) -> bool {
        match self {
            Naming::One(one) => one == reference,
            Naming::Many(set) => {
                set.remove(reference);
                set.is_empty()
            }
        }
    }

    fn references(&self) -> Vec<ObjectRef<Canary>> {
        match self {
            Naming::One(one) => vec![one.clone()],
            Naming::Many(set) => set.iter().cloned().collect(),
        }
    }
}

/// `canary`'s reference without its resourceVersion and uid, which references are compared
/// without and the index need not keep.
fn reference_of(canary: &Canary) -> ObjectRef<Canary> {
    let reference = ObjectRef::new(&canary.name_any());
    match canary.namespace() {
        Some(namespace) => reference.within(&namespace),
        None => reference,
    }
}

impl Names {
    fn insert(&mut self, canary: &Canary) {
        let reference = reference_of(canary);
        self.remove(&reference);
        let mut named = Named::of(canary);
        for name in &named {
            match self.canaries.get_mut(name) {
                Some(naming) => naming.insert(reference.clone()),
                None => {
                    self.canaries
                        .insert(name.clone(), Naming::One(reference.clone()));
                }
            }
        }
        named.shrink_to_fit();
        self.named_by.insert(reference, named);
    }

    fn remove(&mut self, reference: &ObjectRef<Canary>) {
        for name in self.named_by.remove(reference).unwrap_or_default() {
            if let Some(naming) = self.canaries.get_mut(&name)
                && naming.remove(reference)
            {
                self.canaries.remove(&name);
            }
        }
    }
}

impl TriggerIndex {
    /// Follows one event of the Canary watch.
    pub(super) fn apply(&self, event: &watcher::Event<Canary>) {
        use watcher::Event;
        let mut state = self
            .0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match event {
            Event::Init => state.relisting = Some(Names::default()),
            Event::InitApply(canary) => state
                .relisting
                .get_or_insert_with(Names::default)
                .insert(canary),
            Event::InitDone => {
                if let Some(names) = state.relisting.take() {
                    state.live = names;
                }
            }
            Event::Apply(canary) => state.live.insert(canary),
            Event::Delete(canary) => state.live.remove(&reference_of(canary)),
        }
    }

    /// The Canaries that name `named`.
    pub(super) fn canaries(&self, named: &Named) -> Vec<ObjectRef<Canary>> {
        let state = self
            .0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        state
            .live
            .canaries
            .get(named)
            .map(Naming::references)
            .unwrap_or_default()
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use serin_api::CanarySpec;

    fn canary(name: &str, target: &str) -> Canary {
        let spec: CanarySpec = serde_json::from_value(serde_json::json!({
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "service": {"port": 9898},
        }))
        .expect("a valid spec");
        let mut canary = Canary::new(name, spec);
        canary.metadata.namespace = Some("shop".into());
        canary
    }

    fn workload(name: &str) -> Named {
        Named::Workload(Some("shop".into()), name.into())
    }

    fn names(index: &TriggerIndex, named: &Named) -> Vec<String> {
        let mut names: Vec<String> = index.canaries(named).into_iter().map(|r| r.name).collect();
        names.sort();
        names
    }

    #[test]
    fn a_deployment_finds_the_canaries_that_target_it_or_its_primary() {
        use watcher::Event;
        let index = TriggerIndex::default();
        index.apply(&Event::Init);
        index.apply(&Event::InitApply(canary("web", "web")));
        assert!(
            names(&index, &workload("web")).is_empty(),
            "nothing shows before the list is complete"
        );
        index.apply(&Event::InitDone);
        assert_eq!(names(&index, &workload("web")), ["web"]);
        assert_eq!(names(&index, &workload("web-primary")), ["web"]);
        assert_eq!(
            names(&index, &Named::Route(Some("shop".into()), "web".into())),
            ["web"]
        );
        assert!(names(&index, &Named::Workload(None, "web".into())).is_empty());
        let mut front = canary("front", "shop-web");
        front.spec.service.name = Some("storefront".into());
        front.spec.autoscaler_ref = serde_json::from_value(serde_json::json!(
            {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": "shop-web"}))
        .expect("a valid reference");
        index.apply(&Event::Apply(front));
        assert_eq!(
            names(
                &index,
                &Named::Route(Some("shop".into()), "storefront".into())
            ),
            ["front"]
        );
        assert!(
            names(
                &index,
                &Named::Route(Some("shop".into()), "shop-web".into())
            )
            .is_empty()
        );
        assert_eq!(
            names(
                &index,
                &Named::Autoscaler(Some("shop".into()), "shop-web".into())
            ),
            ["front"]
        );
        index.apply(&Event::Delete(canary("front", "shop-web")));

        // Retargeting moves the Canary; deleting it removes it; a relist replaces everything.
        index.apply(&Event::Apply(canary("web", "web-v2")));
        assert!(names(&index, &workload("web")).is_empty());
        assert_eq!(names(&index, &workload("web-v2-primary")), ["web"]);
        index.apply(&Event::Apply(canary("api", "web-v2")));
        assert_eq!(names(&index, &workload("web-v2")), ["api", "web"]);
        index.apply(&Event::Delete(canary("web", "web-v2")));
        assert_eq!(names(&index, &workload("web-v2")), ["api"]);
        index.apply(&Event::Delete(canary("api", "web-v2")));
        assert!(names(&index, &workload("web-v2")).is_empty());
        index.apply(&Event::Apply(canary("api", "web-v2")));
        assert_eq!(names(&index, &workload("web-v2")), ["api"]);
        index.apply(&Event::Init);
        index.apply(&Event::InitApply(canary("cart", "cart")));
        assert_eq!(names(&index, &workload("web-v2")), ["api"]);
        index.apply(&Event::InitDone);
        assert!(names(&index, &workload("web-v2")).is_empty());
        assert_eq!(names(&index, &workload("cart")), ["cart"]);
    }
}
