//! The Canary's status as stored under Flagger's CRDs (see `serin_core::stored_status`): joined
//! with the annotation as each Canary is read, and split into `status` and the annotation as it
//! is written.

use super::written::{self, Written};
use super::{Error, Shared};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use serin_api::{Canary, CanaryStatus};
use serin_core::stored_status::{Kept, STATUS_ANNOTATION, digest, revisions_after, split};
use std::collections::BTreeMap;

/// The Canary as read, with its status as Serin works with it: under Flagger's CRDs, joined with
/// the status annotation (see [`serin_core::stored_status::joined`]).
pub(super) fn joined(canary: Canary) -> Canary {
    if serin_api::api_group().prunes_status() {
        serin_core::stored_status::joined(canary)
    } else {
        canary
    }
}

/// The revisions the annotation of a Canary (as [`joined`] left it) has in force.
fn revisions(canary: &Canary) -> BTreeMap<String, String> {
    canary
        .annotations()
        .get(STATUS_ANNOTATION)
        .and_then(|text| serde_json::from_str::<Kept>(text).ok())
        .map(|kept| kept.revisions)
        .unwrap_or_default()
}

/// Writes `next` as the Canary's status and returns the Canary's version as written. Under Serin's
/// CRDs it is one merge patch of the status; under Flagger's, Flagger's fields go to `status` (when
/// they changed) and the rest to the annotation (when it changed). `quiet` when the tick has
/// scheduled its next reconcile, so the writes' watch events need not trigger one.
pub(super) async fn write(
    canary: &Canary,
    shared: &Shared,
    next: &CanaryStatus,
    quiet: bool,
) -> Result<Option<String>, Error> {
    let previous = canary.status.clone().unwrap_or_default();
    let key = Shared::canary_key(canary);
    if !serin_api::api_group().prunes_status() {
        let patch = status_patch(
            &serde_json::to_value(&previous)?,
            serde_json::to_value(next)?,
        );
        let written: Written =
            patch_status(shared, &key, canary.resource_version(), patch, quiet).await?;
        return Ok(written.metadata.resource_version);
    }
    let in_force = revisions(canary);
    let before = split(&previous, &in_force);
    let revisions = revisions_after(canary.status.as_ref(), next, &in_force);
    let after = split(next, &revisions);
    let mut version = canary.resource_version();
    let mut stored_status = before.status.clone();
    if after.status != before.status {
        let patch = status_patch(
            &Value::Object(before.status.clone()),
            Value::Object(after.status),
        );
        let written: Written<Option<CanaryStatus>> =
            patch_status(shared, &key, version.clone(), patch, quiet).await?;
        version = written.metadata.resource_version;
        stored_status = split(&written.status.unwrap_or_default(), &BTreeMap::new()).status;
    }
    let kept = Kept {
        status_digest: digest(&stored_status),
        fields: after.fields,
        revisions,
    };
    let text = serde_json::to_string(&kept)?;
    if canary.annotations().get(STATUS_ANNOTATION) != Some(&text) {
        let annotated: Written = written::patch(
            &shared.ctx.client,
            &written::request::<Canary>(&(), &key.0),
            &key.1,
            None,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {STATUS_ANNOTATION: text}}})),
        )
        .await?;
        let annotated = annotated.metadata.resource_version;
        shared.wrote_over(key.clone(), version, annotated.as_deref());
        expect_echo(shared, &key, annotated.clone(), quiet);
        version = annotated;
    }
    Ok(version)
}

/// Remembers the write that gave the Canary `key` at `version` as one whose watch event needs no
/// reconcile, when `quiet`.
fn expect_echo(shared: &Shared, key: &(String, String), version: Option<String>, quiet: bool) {
    if quiet {
        shared
            .echoes
            .expect(("Canary", key.0.clone(), key.1.clone()), key, version);
    }
}

/// Merge-patches the status of the Canary `key`, read at `version`, with `status` and remembers
/// the write (see `Shared::wrote`).
async fn patch_status<S: serde::de::DeserializeOwned + Default>(
    shared: &Shared,
    key: &(String, String),
    version: Option<String>,
    status: Value,
    quiet: bool,
) -> Result<Written<S>, Error> {
    let written: Written<S> = written::patch(
        &shared.ctx.client,
        &written::request::<Canary>(&(), &key.0),
        &key.1,
        Some("status"),
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await?;
    let written_version = written.metadata.resource_version.clone();
    shared.wrote_over(key.clone(), version, written_version.as_deref());
    expect_echo(shared, key, written_version, quiet);
    Ok(written)
}

/// A JSON merge patch from `old` to `new`: what `new` holds, plus `null` for every field `old`
/// has and `new` dropped (a merge patch leaves absent fields as they are, so a cleared
/// `status.message` would otherwise stay).
fn status_patch(old: &Value, new: Value) -> Value {
    match (old, new) {
        (Value::Object(old), Value::Object(mut patch)) => {
            for (key, value) in patch.iter_mut() {
                if let Some(before) = old.get(key) {
                    *value = status_patch(before, value.take());
                }
            }
            for key in old.keys() {
                if !patch.contains_key(key) {
                    patch.insert(key.clone(), Value::Null);
                }
            }
            Value::Object(patch)
        }
        (_, new) => new,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_status_patch_clears_what_the_new_status_dropped() {
        let old = json!({"phase": "Initializing", "message": "MetricTemplate x.test not found",
                         "handledRequests": {"promote": "1", "abort": "2"}});
        let new = json!({"phase": "Initialized", "handledRequests": {"promote": "1"}});
        assert_eq!(
            super::status_patch(&old, new.clone()),
            json!({"phase": "Initialized", "message": null,
                   "handledRequests": {"promote": "1", "abort": null}})
        );
        assert_eq!(super::status_patch(&json!(null), new.clone()), new);
    }
}
