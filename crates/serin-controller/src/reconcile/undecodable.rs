//! The Canary watch, kept going when a Canary cannot be read into the operator's types.
//!
//! The API server checks a Canary against the CRD's schema, but the schema cannot say everything
//! the types do: a number beyond 32 bits in an `int32` field, or `2.0` where a whole number
//! belongs, is stored, and a typed watch would then fail its whole list on that one object and
//! stop every other Canary with it. Here the Canaries are watched as untyped objects and decoded
//! one by one: one that does not decode is left out of the controller's store (as if deleted), and
//! its status and a Warning event (reason `InvalidSpec`) name the field and the fix.

use super::Context;
use super::triggers::TriggerIndex;
use crate::raw_object::RawObject;
use futures::{Stream, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use serin_api::{Canary, CanaryStatus};
use serin_core::condition::{Health, set_health};
use serin_core::plan::{EventType, reason};
use std::sync::Arc;

/// Watches the Canaries of `namespace` (all when `None`) into `writer`'s store and yields each
/// one that changed, as `Controller::for_stream` takes them; Canaries that do not decode are
/// reported and skipped.
pub(super) fn watch(
    client: &Client,
    namespace: Option<&str>,
    writer: Writer<Canary>,
    index: Arc<TriggerIndex>,
    ctx: Arc<Context>,
) -> impl Stream<Item = Result<Canary, watcher::Error>> + Send + 'static {
    // Read as text with its metadata (managedFields left out), then decoded once as a Canary.
    let api: Api<RawObject<Canary>> = match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    watcher(api, watcher::Config::default())
        .filter_map(move |event| {
            let ctx = ctx.clone();
            async move {
                match event {
                    Ok(event) => decode_event(event, &ctx).map(Ok),
                    Err(error) => Some(Err(error)),
                }
            }
        })
        .inspect(move |event| {
            if let Ok(event) = event {
                index.apply(event);
            }
        })
        .reflect(writer)
        .applied_objects()
}

/// Drops what no tick reads before a Canary is cached: kubectl's copy of the last applied
/// manifest is often larger than the rest of the object (its managedFields are never decoded).
fn slim(canary: &mut Canary) {
    if let Some(annotations) = canary.metadata.annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

fn decode_event(
    event: watcher::Event<RawObject<Canary>>,
    ctx: &Arc<Context>,
) -> Option<watcher::Event<Canary>> {
    use watcher::Event;
    match event {
        Event::Init => Some(Event::Init),
        Event::InitDone => Some(Event::InitDone),
        Event::InitApply(object) => decode(object, ctx).ok().map(Event::InitApply),
        // An object that no longer decodes leaves the store, so its last readable version is
        // not released any further.
        Event::Apply(object) => Some(match decode(object, ctx) {
            Ok(canary) => Event::Apply(canary),
            Err(stub) => Event::Delete(*stub),
        }),
        // The store and the trigger index forget a deleted Canary by its name alone.
        Event::Delete(object) => Some(Event::Delete(stub(&object))),
    }
}

/// A Canary with only the object's metadata: enough to remove it from the store and to name it
/// in an event.
fn stub(object: &RawObject<Canary>) -> Canary {
    let mut canary = Canary::new(
        object.metadata.name.as_deref().unwrap_or_default(),
        Default::default(),
    );
    canary.metadata = object.metadata.clone();
    canary
}

/// The object as a Canary, or, when it does not decode, its stub after the problem was reported.
fn decode(object: RawObject<Canary>, ctx: &Arc<Context>) -> Result<Canary, Box<Canary>> {
    match serde_json::from_slice::<Canary>(object.text()) {
        Ok(mut canary) => {
            slim(&mut canary);
            Ok(super::stored::joined(canary))
        }
        Err(error) => {
            let value = serde_json::from_slice::<Value>(object.text()).unwrap_or_default();
            let message = format!("invalid spec: {}", describe(&value, &error.to_string()));
            let stub = stub(&object);
            let reported = value
                .pointer("/status/message")
                .and_then(Value::as_str)
                .is_some_and(|m| m == message);
            if !reported {
                tokio::spawn(report(ctx.clone(), stub.clone(), message));
            }
            Err(Box::new(stub))
        }
    }
}

/// What is wrong, starting with the field's path: serde names the value it could not take (`integer
/// `99999999999``), and the first field of the object holding that value is the one.
pub(crate) fn describe(object: &Value, error: &str) -> String {
    let error = error
        .rfind(" at line ")
        .map_or(error, |at| &error[..at])
        .to_string();
    let wanted = offending_value(&error);
    let path = wanted
        .as_ref()
        .and_then(|wanted| {
            object
                .get("spec")
                .and_then(|spec| find(spec, "spec", wanted))
        })
        .unwrap_or_else(|| "spec".to_string());
    let hint = if error.contains("expected i32") || error.contains("expected u32") {
        "; write a whole number from -2147483648 to 2147483647 (without a decimal point), within the field's range"
    } else if error.contains("expected i64") {
        "; write a whole number without a decimal point"
    } else {
        "; write a value of the field's type (kubectl explain canary.spec shows them)"
    };
    format!(
        "{path}: the operator cannot read this value ({error}){hint}; the Canary is not released until it is fixed"
    )
}

/// The JSON value serde quotes in `error`: ``integer `5` ``, ``floating point `2.0` ``,
/// `string "x"`, ``boolean `true` ``.
fn offending_value(error: &str) -> Option<Value> {
    let between = |start: &str, end: char| -> Option<&str> {
        let from = error.find(start)? + start.len();
        let rest = &error[from..];
        Some(&rest[..rest.find(end)?])
    };
    if let Some(n) = between("integer `", '`') {
        return serde_json::from_str(n).ok();
    }
    if let Some(n) = between("floating point `", '`') {
        return n.parse::<f64>().ok().map(|f| json!(f));
    }
    if let Some(b) = between("boolean `", '`') {
        return b.parse::<bool>().ok().map(Value::Bool);
    }
    if let Some(s) = between("string \"", '"') {
        return Some(Value::String(s.to_string()));
    }
    None
}

/// The path of the first leaf under `value` equal to `wanted` (numbers compared as numbers).
fn find(value: &Value, path: &str, wanted: &Value) -> Option<String> {
    match value {
        Value::Object(map) => map
            .iter()
            .find_map(|(key, v)| find(v, &format!("{path}.{key}"), wanted)),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| find(v, &format!("{path}[{i}]"), wanted)),
        other => (other == wanted).then(|| path.to_string()),
    }
}

/// Shows the problem in the Canary's status (message and a Stalled condition with reason
/// `InvalidSpec`) and as a Warning event.
async fn report(ctx: Arc<Context>, canary: Canary, message: String) {
    tracing::warn!(canary = %canary.name_any(), reason = reason::INVALID_SPEC, "{message}");
    let mut status = CanaryStatus {
        message: Some(message.clone()),
        ..Default::default()
    };
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(super::now());
    let health = Health {
        phase: None,
        blocked: Some((reason::INVALID_SPEC, &message)),
        generation: canary.metadata.generation,
        kind: "Deployment",
    };
    set_health(&mut status.conditions, &health, &now);
    let patch = json!({"status": {"message": status.message, "conditions": status.conditions}});
    let namespace = canary.namespace().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        &namespace,
        &ApiResource::erase::<Canary>(&()),
    );
    if let Err(error) = api
        .patch_status(
            &canary.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        tracing::error!(canary = %canary.name_any(), "writing the status of an unreadable Canary: {error}");
    }
    super::record::record(
        &ctx,
        &canary,
        EventType::Warning,
        reason::INVALID_SPEC,
        &message,
    )
    .await;
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    fn describe(object: serde_json::Value) -> String {
        let error = serde_json::from_value::<serin_api::Canary>(object.clone())
            .expect_err("the object must not decode");
        super::describe(&object, &error.to_string())
    }

    fn canary(analysis: serde_json::Value) -> serde_json::Value {
        json!({"apiVersion": "serin.dev/v1beta1", "kind": "Canary",
               "metadata": {"name": "c", "namespace": "test"},
               "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "p"},
                        "service": {"port": 9898}, "analysis": analysis}})
    }

    #[test]
    fn a_number_beyond_32_bits_is_named_by_its_field() {
        let message = describe(canary(
            json!({"interval": "10s", "threshold": 99999999999_i64, "stepWeight": 10}),
        ));
        assert!(
            message.starts_with("spec.analysis.threshold: "),
            "{message}"
        );
        assert!(message.contains("99999999999"), "{message}");
    }

    #[test]
    fn a_whole_number_written_with_a_decimal_point_is_named_by_its_field() {
        let message = describe(canary(
            json!({"interval": "10s", "stepWeights": [10, 20.0]}),
        ));
        assert!(
            message.starts_with("spec.analysis.stepWeights[1]: "),
            "{message}"
        );
    }
}
