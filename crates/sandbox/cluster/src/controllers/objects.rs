//! What every controller reads from the objects it owns (names, owners, readiness, templates,
//! times) and the Events it writes about them.

use serde_json::{Value, json};
use serin_sandbox_apiserver::registry::ResourceInfo;
use serin_sandbox_apiserver::store::{Store, WriteOptions, now_rfc3339};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the built-in controllers write (their field manager, as on a real cluster).
pub(crate) fn controller_writes() -> WriteOptions {
    WriteOptions::by("kube-controller-manager")
}

pub(crate) fn alphabet_hash(text: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut h: u64 = 0xcbf29ce484222325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    (0..10)
        .map(|i| ALPHABET[((h >> (i * 6)) % ALPHABET.len() as u64) as usize] as char)
        .collect()
}

/// A pod template as a typed API server compares it: without the `pod-template-hash` label and
/// without null, empty-object and empty-list fields (a client that round-trips a template through
/// typed structs, as `kubectl rollout undo` does, adds `creationTimestamp: null` and `resources: {}`).
pub(crate) fn comparable_template(template: &Value) -> Value {
    fn prune(value: &Value) -> Option<Value> {
        match value {
            Value::Null => None,
            Value::Object(fields) => {
                let kept: serde_json::Map<String, Value> = fields
                    .iter()
                    .filter_map(|(k, v)| prune(v).map(|v| (k.clone(), v)))
                    .collect();
                (!kept.is_empty()).then_some(Value::Object(kept))
            }
            Value::Array(items) => {
                let kept: Vec<Value> = items
                    .iter()
                    .map(|v| prune(v).unwrap_or(json!({})))
                    .collect();
                (!kept.is_empty()).then_some(Value::Array(kept))
            }
            other => Some(other.clone()),
        }
    }
    let mut t = template.clone();
    if let Some(labels) = t["metadata"]["labels"].as_object_mut() {
        labels.remove("pod-template-hash");
    }
    prune(&t).unwrap_or(json!({}))
}

/// When time alone can change the status of a Deployment whose last sync changed nothing: once
/// its progress deadline has passed, while it is rolling out. `None` for one that is complete,
/// paused or already past its deadline: only a change to it or its ReplicaSets moves those.
pub(crate) fn deadline_check(deploy: &Value) -> Option<Instant> {
    let progressing = deploy["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Progressing")?;
    if !matches!(
        progressing["reason"].as_str(),
        Some("ReplicaSetUpdated" | "NewReplicaSetCreated")
    ) {
        return None;
    }
    let deadline = deploy["spec"]["progressDeadlineSeconds"]
        .as_i64()
        .unwrap_or(600);
    let since = progressing["lastUpdateTime"]
        .as_str()
        .and_then(seconds_since)?;
    // The deadline counts whole seconds past it; one more second makes sure it has passed.
    let left = u64::try_from(deadline - since + 1).unwrap_or(0);
    Some(Instant::now() + Duration::from_secs(left))
}

/// [`comparable_template`]s, kept per object (uid) for as long as its resourceVersion stays:
/// pruning templates is most of a Deployment sync's work, and a pass syncs every Deployment
/// while few of them have changed since the last one.
#[derive(Default)]
pub(crate) struct ComparableTemplates(HashMap<String, (String, Arc<Value>)>);

impl ComparableTemplates {
    /// The comparable form of `object`'s `spec.template`.
    pub(crate) fn of(&mut self, object: &Value) -> Arc<Value> {
        let version = object["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default();
        let object_uid = uid(object);
        if let Some((seen, template)) = self.0.get(&object_uid)
            && seen == version
        {
            return template.clone();
        }
        let template = Arc::new(comparable_template(&object["spec"]["template"]));
        self.0
            .insert(object_uid, (version.to_string(), template.clone()));
        template
    }

    /// Forgets a deleted object's template.
    pub(crate) fn forget(&mut self, object_uid: &str) {
        self.0.remove(object_uid);
    }
}

/// The object's uid, borrowed.
pub(crate) fn uid_of(o: &Value) -> &str {
    o["metadata"]["uid"].as_str().unwrap_or_default()
}

pub(crate) fn name(o: &Value) -> String {
    o["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

pub(crate) fn ns(o: &Value) -> String {
    o["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

pub(crate) fn uid(o: &Value) -> String {
    uid_of(o).to_string()
}

pub(crate) fn controller_uid(o: &Value) -> Option<&str> {
    o["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"].as_bool() == Some(true))
        .and_then(|r| r["uid"].as_str())
}

/// `objects` grouped by the uid of their controlling owner, so a pass finds an object's children
/// without scanning every object for each owner.
pub(crate) fn by_controller(objects: &[Arc<Value>]) -> HashMap<&str, Vec<&Value>> {
    let mut children: HashMap<&str, Vec<&Value>> = HashMap::new();
    for object in objects {
        if let Some(owner) = controller_uid(object) {
            children.entry(owner).or_default().push(&**object);
        }
    }
    children
}

/// Whether a pod's Ready condition is True.
pub(crate) fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

pub(crate) fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

pub(crate) fn resolve(value: &Value, replicas: i64, round_up: bool) -> i64 {
    match value {
        Value::Number(n) => n.as_i64().unwrap_or(0),
        Value::String(s) => {
            let pct: i64 = s.trim_end_matches('%').parse().unwrap_or(0);
            let p = pct * replicas;
            if round_up { (p + 99) / 100 } else { p / 100 }
        }
        _ => 0,
    }
}

pub(crate) fn parse_time(text: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    text.parse().ok()
}

pub(crate) fn seconds_since(text: &str) -> Option<i64> {
    let then = parse_time(text)?;
    let now = parse_time(&now_rfc3339())?;
    Some(now.duration_since(then).as_secs())
}

/// Writes a core/v1 Event about `object` (of `kind`), as the cluster's `component` does, so
/// `kubectl events` and `kubectl describe` show a rollout.
pub(crate) fn record_event(
    store: &Store,
    events: &ResourceInfo,
    object: &Value,
    kind: &str,
    component: &str,
    reason: &str,
    message: String,
) {
    write_event(
        store,
        events,
        object,
        kind,
        component,
        ("Normal", reason),
        message,
    );
}

/// Like [`record_event`], for a `Warning`.
pub(crate) fn record_warning(
    store: &Store,
    events: &ResourceInfo,
    object: &Value,
    kind: &str,
    component: &str,
    reason: &str,
    message: String,
) {
    write_event(
        store,
        events,
        object,
        kind,
        component,
        ("Warning", reason),
        message,
    );
}

/// Writes a core/v1 Event of `event_type` (`Normal` or `Warning`) about `object`, as `component`.
pub(crate) fn write_event(
    store: &Store,
    events: &ResourceInfo,
    object: &Value,
    kind: &str,
    component: &str,
    (event_type, reason): (&str, &str),
    message: String,
) {
    let now = now_rfc3339();
    let api_version = object["apiVersion"].as_str().unwrap_or(match kind {
        "Pod" => "v1",
        _ => "apps/v1",
    });
    let event = json!({
        "metadata": {"generateName": format!("{}.", name(object))},
        "involvedObject": {"apiVersion": api_version, "kind": kind, "namespace": ns(object),
            "name": name(object), "uid": uid(object),
            "resourceVersion": object["metadata"]["resourceVersion"]},
        "reason": reason, "message": message, "type": event_type,
        "source": {"component": component}, "reportingComponent": component,
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    });
    let _ = store.create_shared(events, Some(&ns(object)), event, &controller_writes());
}
