//! Never take over what Serin did not create. A Canary writes objects under names derived from its
//! own (`<target>-primary`, the `-primary` copies of its configs, `<service>`, `<service>-canary`,
//! `<service>-primary`, the routing objects): an object of such a name that this Canary does not
//! control — made by a person, a chart, or another Canary — holds the release with a message,
//! instead of being rewritten (and, for the `-primary` objects, deleted with the Canary). The
//! object's owner may hand it over with the annotation [`ADOPT_ANNOTATION`] naming the Canary.
//! Under Flagger's API group, objects are taken over without asking, as Flagger does.

use crate::cache::Caches;
use crate::json_store::Ownership;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;
use serin_core::revision::ConfigKind;
use std::collections::BTreeSet;

pub use serin_api::ADOPT_ANNOTATION;

/// What taking an object over means for its owner, said in the hold message.
#[derive(Clone, Copy)]
enum Takeover {
    /// Serin would write the object and own it: it would be deleted with the Canary (the
    /// `-primary` config copies).
    Owned,
    /// Serin would rewrite this part of the object, which stays unowned.
    Rewritten(&'static str),
    /// Serin would rewrite this part of the object, which stays the user's and gets its spec back
    /// when the Canary is deleted with `revertOnDeletion` (the apex Service, the VirtualService or
    /// HTTPRoute).
    Restored(&'static str),
}

/// One object Serin would write for the Canary, as found in the caches.
struct Found {
    kind: &'static str,
    name: String,
    /// It is the Canary's own, or handed to it (see [`belongs_to`]).
    belongs: bool,
    takeover: Takeover,
}

/// Whether `ownership` names the Canary with `uid` as its controlling owner, or hands the object
/// to the Canary `canary` with [`ADOPT_ANNOTATION`] (as its value).
fn owned_or_adopted(ownership: &Ownership, uid: &str, canary: &str) -> bool {
    ownership.controlled_by(uid)
        || ownership
            .annotation
            .as_deref()
            .is_some_and(|name| name.trim() == canary)
}

/// [`owned_or_adopted`], of an object cached decoded.
fn belongs_to(metadata: &ObjectMeta, uid: &str, canary: &str) -> bool {
    owned_or_adopted(
        &Ownership::of(metadata, Some(ADOPT_ANNOTATION)),
        uid,
        canary,
    )
}

/// The first object Serin would write for the Canary `canary` (JSON, with its provider filled in)
/// that already exists and does not belong to it, as the message that holds the release.
/// `target_kind` is the target's kind and `tracked` its tracked configs.
pub(super) fn problem(
    canary: &Value,
    caches: &Caches,
    namespace: &str,
    target_kind: &str,
    tracked: &BTreeSet<(ConfigKind, String)>,
) -> Option<String> {
    // Serving Flagger's Canaries, Serin takes objects over as Flagger does: a drop-in cannot
    // hold releases that Flagger ran.
    if serin_api::api_group() == serin_api::ApiGroup::Flagger {
        return None;
    }
    let uid = canary["metadata"]["uid"].as_str().unwrap_or_default();
    let name = canary["metadata"]["name"].as_str().unwrap_or_default();
    let target = canary["spec"]["targetRef"]["name"]
        .as_str()
        .unwrap_or_default();
    let names = serin_router::Names::of(canary);
    let mut found: Vec<Found> = Vec::new();
    let primary = format!("{target}-primary");
    if let Some(ownership) =
        caches.workload_ownership(namespace, target_kind, &primary, Some(ADOPT_ANNOTATION))
    {
        found.push(Found {
            kind: if target_kind == "DaemonSet" {
                "DaemonSet"
            } else {
                "Deployment"
            },
            name: primary,
            belongs: owned_or_adopted(&ownership, uid, name),
            takeover: Takeover::Rewritten("its pod template and replicas"),
        });
    }
    for (kind, config) in tracked {
        let copy = format!("{config}-primary");
        let (kind, metadata) = match kind {
            ConfigKind::ConfigMap => (
                "ConfigMap",
                caches
                    .config_map(namespace, &copy)
                    .map(|c| c.metadata.clone()),
            ),
            ConfigKind::Secret => (
                "Secret",
                caches.secret(namespace, &copy).map(|s| s.metadata.clone()),
            ),
        };
        if let Some(metadata) = metadata {
            found.push(Found {
                kind,
                name: copy,
                belongs: belongs_to(&metadata, uid, name),
                takeover: Takeover::Owned,
            });
        }
    }
    if let Some(hpa) = canary["spec"]["autoscalerRef"]["name"].as_str() {
        let copy = format!("{hpa}-primary");
        if let Some(existing) = caches.autoscaler(namespace, &copy) {
            found.push(Found {
                kind: "HorizontalPodAutoscaler",
                name: copy,
                belongs: belongs_to(&existing.metadata, uid, name),
                takeover: Takeover::Rewritten("its spec"),
            });
        }
    }
    let selector = Takeover::Rewritten("its selector and ports");
    let mut routing: Vec<(&'static str, String, Takeover)> = vec![
        ("Service", names.canary.clone(), selector),
        ("Service", names.primary.clone(), selector),
        (
            "Service",
            names.apex.clone(),
            Takeover::Restored("its selector and ports"),
        ),
    ];
    if serin_router::gateway_api::routes_by_http_route(canary) {
        routing.push((
            "HTTPRoute",
            names.apex.clone(),
            Takeover::Restored("its rules"),
        ));
    } else if !serin_router::kubernetes::routes_by_service(canary) {
        let rule = Takeover::Rewritten("its host and traffic policy");
        routing.push(("DestinationRule", names.canary.clone(), rule));
        routing.push(("DestinationRule", names.primary.clone(), rule));
        routing.push((
            "VirtualService",
            names.apex.clone(),
            Takeover::Restored("its routes"),
        ));
    }
    for (kind, object_name, takeover) in routing {
        if let Some(ownership) =
            caches.routing_ownership(kind, namespace, &object_name, Some(ADOPT_ANNOTATION))
        {
            found.push(Found {
                kind,
                name: object_name,
                belongs: owned_or_adopted(&ownership, uid, name),
                takeover,
            });
        }
    }
    let foreign = found.into_iter().find(|f| !f.belongs)?;
    let consequence = match foreign.takeover {
        Takeover::Owned => "Serin would overwrite it and delete it with the Canary".to_string(),
        Takeover::Rewritten(what) => format!("Serin would rewrite {what}"),
        Takeover::Restored(what) => format!(
            "Serin would rewrite {what} (it would stay yours, its spec given back when the Canary is deleted with revertOnDeletion)"
        ),
    };
    Some(format!(
        "{} {}.{namespace} exists and was not created by this Canary; {consequence}. Delete or rename it, or annotate it {ADOPT_ANNOTATION}={name} to let this Canary adopt it",
        foreign.kind, foreign.name
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn owned_by(uid: &str, controller: bool) -> ObjectMeta {
        ObjectMeta {
            owner_references: Some(vec![OwnerReference {
                api_version: "serin.dev/v1beta1".into(),
                kind: "Canary".into(),
                name: "podinfo".into(),
                uid: uid.into(),
                controller: Some(controller),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        }
    }

    fn annotated(canary: &str) -> ObjectMeta {
        ObjectMeta {
            annotations: Some(
                [(ADOPT_ANNOTATION.to_string(), canary.to_string())]
                    .into_iter()
                    .collect(),
            ),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn an_object_belongs_to_the_canary_that_controls_it_or_that_its_owner_names() {
        assert!(belongs_to(&owned_by("u1", true), "u1", "podinfo"));
        assert!(
            !belongs_to(&owned_by("u1", false), "u1", "podinfo"),
            "an owner that is not the controller is not enough"
        );
        assert!(
            !belongs_to(&owned_by("u2", true), "u1", "podinfo"),
            "another Canary's (or a deleted and recreated Canary's) object"
        );
        assert!(!belongs_to(&ObjectMeta::default(), "u1", "podinfo"));
        assert!(belongs_to(&annotated("podinfo"), "u1", "podinfo"));
        assert!(!belongs_to(&annotated("frontend"), "u1", "podinfo"));
    }
}
