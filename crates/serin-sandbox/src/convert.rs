//! Conversion between the stored form of an object and the API version a client asked for.
//!
//! Events are the one kind served by two groups: `v1` Event and `events.k8s.io/v1` Event are two
//! views of the same objects, so an event written by kube-rs' Recorder (events.k8s.io) shows in
//! `kubectl describe` (core v1) and the other way round. They are stored in the core form.

use crate::registry::ResourceInfo;
use serde_json::{Map, Value, json};

/// Field names of `events.k8s.io/v1` Event and the core `v1` Event fields they map to; the fields
/// not listed (`reason`, `type`, `action`, `reportingInstance`, `eventTime`, `series`, `related`)
/// have the same name in both.
const EVENT_FIELDS: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// Whether `info` is the `events.k8s.io` view of core events.
pub fn is_events_api_event(info: &ResourceInfo) -> bool {
    info.group == "events.k8s.io" && info.kind == "Event"
}

fn rename(object: Value, pairs: impl Iterator<Item = (&'static str, &'static str)>) -> Value {
    let Value::Object(mut fields) = object else {
        return object;
    };
    let mut renamed = Map::new();
    for (from, to) in pairs {
        if let Some(value) = fields.remove(from) {
            renamed.insert(to.to_string(), value);
        }
    }
    fields.extend(renamed);
    Value::Object(fields)
}

/// The object as stored, from a body written through `info`'s API version.
pub fn to_storage(info: &ResourceInfo, object: Value) -> Value {
    if !is_events_api_event(info) {
        return object;
    }
    let mut object = rename(object, EVENT_FIELDS.into_iter());
    object["apiVersion"] = json!("v1");
    object
}

/// The stored object as `info`'s API version shows it, with its `apiVersion` and `kind`.
pub fn to_version(info: &ResourceInfo, object: Value) -> Value {
    let mut object = if is_events_api_event(info) {
        rename(
            object,
            EVENT_FIELDS.into_iter().map(|(new, old)| (old, new)),
        )
    } else {
        object
    };
    object["apiVersion"] = json!(info.api_version());
    object["kind"] = json!(info.kind);
    object
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    #[test]
    fn an_events_api_event_round_trips_through_the_core_form() {
        let registry = Registry::with_builtins();
        let events_api = registry
            .get("events.k8s.io", "v1", "events")
            .unwrap()
            .clone();
        let core = registry.get("", "v1", "events").unwrap().clone();
        let written = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "podinfo.1", "namespace": "test"},
            "regarding": {"kind": "Canary", "name": "podinfo"},
            "note": "New revision detected", "reason": "Synced", "type": "Normal",
            "reportingController": "serin", "eventTime": "2026-11-22T10:00:00.000000Z",
        });
        let stored = to_storage(&events_api, written.clone());
        let as_core = to_version(&core, stored.clone());
        assert_eq!(as_core["involvedObject"]["name"], "podinfo");
        assert_eq!(as_core["message"], "New revision detected");
        assert_eq!(as_core["reportingComponent"], "serin");
        assert_eq!(as_core["apiVersion"], "v1");
        assert_eq!(to_version(&events_api, stored), written);
    }
}
