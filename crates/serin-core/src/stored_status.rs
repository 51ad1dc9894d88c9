//! How a Canary's status is stored when the CRD is Flagger's, whose status schema prunes every
//! field Flagger does not declare: Flagger's fields stay in `status`, where Flagger reads them if
//! it is started again, and the rest of Serin's status goes into the annotation
//! [`STATUS_ANNOTATION`], with a digest of the `status` it belongs to. A status that someone else
//! wrote since (Flagger, before or after Serin) no longer matches the digest, so the annotation is
//! then ignored rather than mixed with it.
//!
//! Revision hashes that another operator recorded (see [`crate::revision::is_foreign_hash`]) are
//! written back as they were for as long as they stand for the same pod template, so that Flagger,
//! started again, does not take its own Canaries for new releases.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use serin_api::CanaryStatus;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The annotation that holds what Serin keeps beside Flagger's status fields.
pub const STATUS_ANNOTATION: &str = "serin.dev/status";

/// The status fields Flagger's Canary CRD declares.
pub const FLAGGER_STATUS_FIELDS: [&str; 12] = [
    "phase",
    "failedChecks",
    "canaryWeight",
    "iterations",
    "trackedConfigs",
    "lastAppliedSpec",
    "lastPromotedSpec",
    "lastTransitionTime",
    "sessionAffinityCookie",
    "primarySessionAffinityCookie",
    "previousSessionAffinityCookie",
    "conditions",
];

/// The condition fields Flagger's Canary CRD declares.
const FLAGGER_CONDITION_FIELDS: [&str; 6] = [
    "type",
    "status",
    "lastUpdateTime",
    "lastTransitionTime",
    "reason",
    "message",
];

/// The content of [`STATUS_ANNOTATION`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Kept {
    /// [`digest`] of the stored `status` these fields go with.
    pub status_digest: String,
    /// Serin's status fields that Flagger's schema does not declare.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub fields: Map<String, Value>,
    /// Serin's hash of a pod template → the hash another operator recorded for the same template.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub revisions: BTreeMap<String, String>,
}

/// A status as stored: what goes into `status`, and what into the annotation (without its digest).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stored {
    /// Flagger's fields, with recorded foreign hashes in place of Serin's.
    pub status: Map<String, Value>,
    /// Every other field.
    pub fields: Map<String, Value>,
}

/// Splits `status` into what Flagger's schema keeps and the rest, writing the foreign hash of
/// `revisions` (Serin's hash → foreign) wherever Serin's hash stands.
pub fn split(status: &CanaryStatus, revisions: &BTreeMap<String, String>) -> Stored {
    let Value::Object(all) = serde_json::to_value(status).expect("a status always serializes")
    else {
        return Stored::default();
    };
    let mut stored = Stored::default();
    for (key, mut value) in all {
        if !FLAGGER_STATUS_FIELDS.contains(&key.as_str()) {
            stored.fields.insert(key, value);
            continue;
        }
        match key.as_str() {
            "lastAppliedSpec" | "lastPromotedSpec" => {
                if let Some(foreign) = value.as_str().and_then(|hash| revisions.get(hash)) {
                    value = Value::String(foreign.clone());
                }
            }
            "conditions" => {
                for condition in value.as_array_mut().into_iter().flatten() {
                    if let Value::Object(fields) = condition {
                        fields.retain(|name, _| FLAGGER_CONDITION_FIELDS.contains(&name.as_str()));
                    }
                }
            }
            _ => {}
        }
        stored.status.insert(key, value);
    }
    stored
}

/// A short digest of a stored status (its Flagger fields, keys in order).
pub fn digest(status: &Map<String, Value>) -> String {
    let mut canonical = Vec::new();
    crate::revision::write_canonical_map(status, &mut canonical);
    Sha256::digest(&canonical)
        .iter()
        .take(12)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The status Serin works with, from the stored `status` and the annotation: the annotation's
/// fields added and foreign hashes replaced by Serin's when its digest matches `status`, with the
/// revisions in force; `status` alone and `None` when it does not match, or there is none.
pub fn join(
    status: &CanaryStatus,
    annotation: Option<&str>,
) -> (CanaryStatus, Option<BTreeMap<String, String>>) {
    let Some(kept) = annotation.and_then(|text| serde_json::from_str::<Kept>(text).ok()) else {
        return (status.clone(), None);
    };
    let stored = split(status, &BTreeMap::new());
    if digest(&stored.status) != kept.status_digest {
        return (status.clone(), None);
    }
    let mut all = stored.status;
    for (key, value) in kept.fields {
        all.entry(key).or_insert(value);
    }
    for key in ["lastAppliedSpec", "lastPromotedSpec"] {
        let serin = all.get(key).and_then(Value::as_str).and_then(|recorded| {
            kept.revisions
                .iter()
                .find(|(_, foreign)| *foreign == recorded)
                .map(|(serin, _)| serin.clone())
        });
        if let Some(serin) = serin {
            all.insert(key.into(), Value::String(serin));
        }
    }
    match serde_json::from_value(Value::Object(all)) {
        Ok(joined) => (joined, Some(kept.revisions)),
        Err(_) => (status.clone(), None),
    }
}

/// `canary` with its status as Serin works with it: the annotation's fields joined in when they
/// belong to its status; an annotation that does not (someone else wrote the status since) is
/// dropped from the object, so that it is written afresh.
pub fn joined(mut canary: serin_api::Canary) -> serin_api::Canary {
    let annotation = canary
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(STATUS_ANNOTATION))
        .cloned();
    let status = canary.status.clone().unwrap_or_default();
    match join(&status, annotation.as_deref()) {
        (joined, Some(_)) => canary.status = Some(joined),
        (_, None) => {
            if let Some(annotations) = canary.metadata.annotations.as_mut() {
                annotations.remove(STATUS_ANNOTATION);
            }
        }
    }
    canary
}

/// The revisions to keep once `next` is written over `previous` (both as Serin works with them):
/// those of `revisions` that `next` still names, and the foreign hash `previous` had where `next`
/// has Serin's hash of the same template (see [`crate::revision::adopt_foreign_revision`]).
pub fn revisions_after(
    previous: Option<&CanaryStatus>,
    next: &CanaryStatus,
    revisions: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut kept = revisions.clone();
    if let (Some(foreign), Some(serin)) = (
        previous
            .and_then(|s| s.last_applied_spec.as_deref())
            .filter(|hash| crate::revision::is_foreign_hash(hash)),
        next.last_applied_spec.as_deref(),
    ) && !crate::revision::is_foreign_hash(serin)
    {
        kept.insert(serin.to_string(), foreign.to_string());
    }
    let named = [&next.last_applied_spec, &next.last_promoted_spec];
    kept.retain(|serin, _| {
        named
            .iter()
            .any(|hash| hash.as_deref() == Some(serin.as_str()))
    });
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use serin_api::Phase;

    fn status(value: Value) -> CanaryStatus {
        serde_json::from_value(value).unwrap()
    }

    const SERIN: &str = "4f2a0c3e8b1d6f7a9c0e2b4d6f8a1c3e5b7d9f0a2c4e6b8d0f1a3c5e7b9d1f30";

    #[test]
    fn flagger_fields_stay_in_status_and_the_rest_goes_to_the_annotation() {
        let full = status(json!({
            "phase": "Progressing", "canaryWeight": 30, "iterations": 2, "failedChecks": 1,
            "lastAppliedSpec": SERIN, "lastPromotedSpec": "7b9c6d5f4d",
            "currentStepIndex": 3, "lastTickTime": "2026-11-27T05:00:00.000000Z",
            "conditions": [{"type": "Promoted", "status": "Unknown", "reason": "Progressing",
                            "message": "New revision detected, progressing canary analysis.",
                            "observedGeneration": 4}]
        }));
        let revisions = BTreeMap::from([(SERIN.to_string(), "84c4d8b7c9".to_string())]);
        let stored = split(&full, &revisions);
        assert_eq!(stored.status["lastAppliedSpec"], "84c4d8b7c9");
        assert_eq!(stored.status["canaryWeight"], 30);
        assert!(
            stored.status["conditions"][0]
                .get("observedGeneration")
                .is_none()
        );
        assert_eq!(stored.fields["currentStepIndex"], 3);
        assert!(stored.fields.contains_key("lastTickTime"));
        assert!(!stored.status.contains_key("currentStepIndex"));

        // What the API server keeps, read back with the annotation, is the status as written
        // (but the condition's observedGeneration, which no decision reads back).
        let pruned = status(Value::Object(stored.status.clone()));
        let kept = Kept {
            status_digest: digest(&stored.status),
            fields: stored.fields.clone(),
            revisions: revisions.clone(),
        };
        let text = serde_json::to_string(&kept).unwrap();
        let (joined, in_force) = join(&pruned, Some(&text));
        assert_eq!(in_force, Some(revisions.clone()));
        assert_eq!(joined.last_applied_spec.as_deref(), Some(SERIN));
        assert_eq!(joined.current_step_index, Some(3));
        assert_eq!(joined.last_tick_time, full.last_tick_time);
        assert_eq!(joined.phase, Some(Phase::Progressing));

        // Flagger wrote the status since: the annotation is someone else's past, and ignored.
        let mut rewritten = pruned.clone();
        rewritten.canary_weight = 40;
        let (joined, in_force) = join(&rewritten, Some(&text));
        assert_eq!(joined, rewritten);
        assert_eq!(in_force, None);
        assert_eq!(join(&pruned, Some("not json")).0, pruned);

        // On a whole Canary: joined in when in force, dropped when someone else wrote since.
        let mut canary = serin_api::Canary::new("podinfo", Default::default());
        canary.metadata.annotations = Some([(STATUS_ANNOTATION.to_string(), text)].into());
        canary.status = Some(pruned);
        assert_eq!(
            super::joined(canary.clone())
                .status
                .unwrap()
                .current_step_index,
            Some(3)
        );
        canary.status = Some(rewritten);
        let stale = super::joined(canary);
        assert_eq!(stale.status.unwrap().current_step_index, None);
        assert!(stale.metadata.annotations.unwrap().is_empty());
    }

    #[test]
    fn an_adopted_foreign_hash_is_remembered_until_no_hash_names_it() {
        let flagger = status(
            json!({"phase": "Progressing", "canaryWeight": 30, "iterations": 2,
            "lastAppliedSpec": "84c4d8b7c9", "lastPromotedSpec": "5d4b8f6c7z"}),
        );
        let mut adopted = flagger.clone();
        adopted.last_applied_spec = Some(SERIN.into());
        adopted.canary_weight = 40;
        let revisions = revisions_after(Some(&flagger), &adopted, &BTreeMap::new());
        assert_eq!(
            revisions,
            BTreeMap::from([(SERIN.into(), "84c4d8b7c9".into())])
        );
        // Promoted: the template Flagger knew is now the promoted one too.
        let mut promoted = adopted.clone();
        promoted.last_promoted_spec = Some(SERIN.into());
        assert_eq!(
            revisions_after(Some(&adopted), &promoted, &revisions),
            revisions
        );
        let stored = split(&promoted, &revisions);
        assert_eq!(stored.status["lastPromotedSpec"], "84c4d8b7c9");
        // A new revision replaces both: nothing foreign is left to remember.
        let mut next = promoted.clone();
        next.last_applied_spec = Some("b".repeat(64));
        next.last_promoted_spec = Some("c".repeat(64));
        assert!(revisions_after(Some(&promoted), &next, &revisions).is_empty());
    }
}
