//! Conversion between the stored form of an object and the API version a client asked for.
//!
//! HorizontalPodAutoscalers are stored as `autoscaling/v2`; the `v1` view (which `kubectl
//! autoscale` writes) has one CPU utilization target instead of a metrics list.
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

/// Whether objects of `info`'s version are stored in another shape ([`to_storage`]).
pub fn converts(info: &ResourceInfo) -> bool {
    is_hpa_v1(info) || info.is_events_api_event()
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

fn is_hpa_v1(info: &ResourceInfo) -> bool {
    info.group == "autoscaling" && info.version == "v1" && info.kind == "HorizontalPodAutoscaler"
}

fn cpu_utilization(metrics: &Value) -> Option<&Value> {
    metrics.as_array()?.iter().find_map(|metric| {
        let resource = &metric["resource"];
        (metric["type"] == "Resource" && resource["name"] == "cpu").then_some(resource)
    })
}

/// An `autoscaling/v1` HPA as `autoscaling/v2` stores it.
fn hpa_from_v1(mut object: Value) -> Value {
    object["apiVersion"] = json!("autoscaling/v2");
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut)
        && let Some(percent) = spec.remove("targetCPUUtilizationPercentage")
    {
        spec.insert(
            "metrics".into(),
            json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": percent}}}]),
        );
    }
    if let Some(status) = object.get_mut("status").and_then(Value::as_object_mut)
        && let Some(percent) = status.remove("currentCPUUtilizationPercentage")
    {
        status.insert(
            "currentMetrics".into(),
            json!([{"type": "Resource", "resource": {"name": "cpu",
                "current": {"averageUtilization": percent}}}]),
        );
    }
    object
}

/// A stored (`autoscaling/v2`) HPA as `autoscaling/v1` shows it.
fn hpa_to_v1(mut object: Value) -> Value {
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut)
        && let Some(metrics) = spec.remove("metrics")
        && let Some(percent) = cpu_utilization(&metrics)
            .map(|resource| resource["target"]["averageUtilization"].clone())
            .filter(|p| !p.is_null())
    {
        spec.insert("targetCPUUtilizationPercentage".into(), percent);
    }
    if let Some(status) = object.get_mut("status").and_then(Value::as_object_mut) {
        status.remove("conditions");
        if let Some(metrics) = status.remove("currentMetrics")
            && let Some(percent) = cpu_utilization(&metrics)
                .map(|resource| resource["current"]["averageUtilization"].clone())
                .filter(|p| !p.is_null())
        {
            status.insert("currentCPUUtilizationPercentage".into(), percent);
        }
    }
    object
}

/// The object as stored, from a body written through `info`'s API version.
pub fn to_storage(info: &ResourceInfo, object: Value) -> Value {
    if is_hpa_v1(info) {
        return hpa_from_v1(object);
    }
    if !info.is_events_api_event() {
        return object;
    }
    let mut object = rename(object, EVENT_FIELDS.into_iter());
    object["apiVersion"] = json!("v1");
    object
}

/// The stored object as `info`'s API version shows it, with its `apiVersion` and `kind`.
pub fn to_version(info: &ResourceInfo, object: Value) -> Value {
    let mut object = if is_hpa_v1(info) {
        hpa_to_v1(object)
    } else if info.is_events_api_event() {
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
    fn an_autoscaling_v1_hpa_round_trips_through_v2() {
        let registry = Registry::with_builtins();
        let v1 = registry
            .get("autoscaling", "v1", "horizontalpodautoscalers")
            .unwrap()
            .clone();
        let v2 = registry
            .get("autoscaling", "v2", "horizontalpodautoscalers")
            .unwrap()
            .clone();
        let written = json!({
            "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "test"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": 1, "maxReplicas": 4, "targetCPUUtilizationPercentage": 50},
        });
        let stored = to_storage(&v1, written.clone());
        assert_eq!(
            to_version(&v2, stored.clone())["spec"]["metrics"][0]["resource"]["target"],
            json!({"type": "Utilization", "averageUtilization": 50})
        );
        assert_eq!(to_version(&v1, stored), written);
    }

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
