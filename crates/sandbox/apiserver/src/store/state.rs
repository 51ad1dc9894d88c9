//! The store's state behind its lock: the objects, the change history, the watch feeds and the
//! garbage collector's index, and the helpers every write uses.

use super::types::*;
use crate::registry::{Registry, ResourceInfo};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, mpsc};

/// Whether a write is a server-side apply (ownership already recorded) or an ordinary update.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tracking {
    Update,
    Applied,
}

pub(crate) type Key = (String, String, String);

pub(crate) struct Inner {
    pub(crate) registry: Registry,
    /// Shared, so the built-in controllers read them without copying ([`Store::list_shared`]).
    pub(crate) objects: BTreeMap<Key, Arc<Value>>,
    pub(crate) rv: u64,
    pub(crate) history: VecDeque<Arc<Change>>,
    pub(crate) compacted_through: u64,
    /// In-process followers that must see every change, however far behind they are.
    pub(crate) followers: Vec<mpsc::UnboundedSender<Arc<Change>>>,
    /// The changes of one resource (by storage key) for its watches: a watch then falls behind
    /// only because of its own resource's changes, not every commit of every kind.
    pub(crate) watch_feeds: HashMap<String, broadcast::Sender<Arc<Change>>>,
    pub(crate) gc: GcIndex,
}

impl Inner {
    /// The stored objects of `info`'s kind, shared.
    pub(crate) fn shared(&self, info: &ResourceInfo) -> Vec<Arc<Value>> {
        let resource = info.storage_key();
        self.objects
            .range((resource.clone(), String::new(), String::new())..)
            .take_while(|((r, _, _), _)| *r == resource)
            .map(|(_, o)| o.clone())
            .collect()
    }
}

/// Changes a watch may fall behind by before it ends with 410 Gone.
pub(crate) const WATCH_BUFFER: usize = 16_384;

/// What garbage collection needs to know without reading every object: who owns whom, which
/// objects are being deleted, and which objects a change since the last collection concerns.
/// Kept by [`Store::commit`], the one place objects change.
#[derive(Default)]
pub(crate) struct GcIndex {
    pub(crate) keys_by_uid: HashMap<String, Key>,
    /// The objects that name each uid among their owners.
    pub(crate) dependents: HashMap<String, HashSet<Key>>,
    /// Objects with a deletionTimestamp or a foregroundDeletion or orphan finalizer.
    pub(crate) finalizing: HashSet<Key>,
    /// Objects to look at in the next collection: an owner of theirs went away or began a
    /// foreground or orphaning deletion, a dependent went away, or they are being deleted.
    pub(crate) pending: HashSet<Key>,
}

pub(crate) fn owner_uids(object: &Value) -> Vec<String> {
    meta(object)["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["uid"].as_str().map(String::from))
        .collect()
}

pub(crate) fn uid_of(object: &Value) -> Option<&str> {
    meta(object)["uid"].as_str()
}

pub(crate) fn is_finalizing(object: &Value) -> bool {
    meta(object)["deletionTimestamp"].is_string()
        || meta(object)["finalizers"].as_array().is_some_and(|list| {
            list.iter()
                .any(|f| f == "foregroundDeletion" || f == "orphan")
        })
}

impl GcIndex {
    /// Follows one object's change from `old` to `new` (absent when created or removed).
    pub(crate) fn update(&mut self, key: &Key, old: Option<&Value>, new: Option<&Value>) {
        let old_owners = old.map(owner_uids).unwrap_or_default();
        let new_owners = new.map(owner_uids).unwrap_or_default();
        for owner in old_owners.iter().filter(|o| !new_owners.contains(o)) {
            if let Some(set) = self.dependents.get_mut(owner) {
                set.remove(key);
                if set.is_empty() {
                    self.dependents.remove(owner);
                }
            }
            // An owner waiting for its dependents to go may now be done.
            if let Some(owner_key) = self.keys_by_uid.get(owner) {
                self.pending.insert(owner_key.clone());
            }
        }
        match new {
            None => {
                self.finalizing.remove(key);
                self.pending.remove(key);
                if let Some(uid) = old.and_then(uid_of) {
                    self.keys_by_uid.remove(uid);
                    // Its dependents may be orphans now.
                    self.pending
                        .extend(self.dependents.get(uid).into_iter().flatten().cloned());
                }
            }
            Some(object) => {
                if let Some(uid) = uid_of(object) {
                    self.keys_by_uid.insert(uid.to_string(), key.clone());
                }
                for owner in &new_owners {
                    self.dependents
                        .entry(owner.clone())
                        .or_default()
                        .insert(key.clone());
                    if !self.keys_by_uid.contains_key(owner) {
                        self.pending.insert(key.clone());
                    }
                }
                if is_finalizing(object) {
                    self.finalizing.insert(key.clone());
                    self.pending.insert(key.clone());
                    if let Some(uid) = uid_of(object) {
                        self.pending
                            .extend(self.dependents.get(uid).into_iter().flatten().cloned());
                    }
                } else {
                    self.finalizing.remove(key);
                }
            }
        }
    }

    /// Whether a namespace or a CustomResourceDefinition is being deleted: their contents are
    /// found by reading every object.
    pub(crate) fn clearing_a_scope(&self) -> bool {
        self.finalizing.iter().any(|(resource, _, _)| {
            resource == "namespaces" || resource == "customresourcedefinitions.apiextensions.k8s.io"
        })
    }
}

/// The sandbox's state, shared by the HTTP handlers and the built-in controllers.
pub struct Store {
    pub(crate) inner: Mutex<Inner>,
    pub(crate) changes: broadcast::Sender<Arc<Change>>,
    pub(crate) resets: broadcast::Sender<()>,
}

/// What a watch starts with.
pub struct WatchStart {
    /// Events to send before live ones.
    pub initial: Vec<(ChangeType, Value)>,
    /// Live changes; those at or below `start_rv` are already covered.
    pub receiver: broadcast::Receiver<Arc<Change>>,
    /// The resourceVersion the initial events bring the watcher to.
    pub start_rv: u64,
}

pub(crate) fn meta(object: &Value) -> &Value {
    &object["metadata"]
}

pub(crate) fn meta_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    object["metadata"].as_object_mut().expect("set above")
}

pub(crate) fn name_of(object: &Value) -> &str {
    meta(object)["name"].as_str().unwrap_or_default()
}

pub(crate) fn namespace_of(object: &Value) -> &str {
    meta(object)["namespace"].as_str().unwrap_or_default()
}

pub(crate) fn has_finalizers(object: &Value) -> bool {
    meta(object)["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
}

pub(crate) fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    uuid::Uuid::new_v4()
        .as_bytes()
        .iter()
        .take(5)
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// The object without the fields the server rewrites on every write, to detect no-op writes.
/// Whether two versions of an object are the same but for their resourceVersion (a write that
/// changes nothing else is not committed). Compared in place: the objects are not copied.
pub(crate) fn same_but_version(a: &Value, b: &Value) -> bool {
    fn entries(map: &Map<String, Value>) -> impl Iterator<Item = (&String, &Value)> {
        map.iter().filter(|(key, _)| *key != "resourceVersion")
    }
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    a.len() == b.len()
        && a.iter()
            .all(|(key, value)| match (b.get(key), key.as_str()) {
                (None, _) => false,
                (Some(Value::Object(theirs)), "metadata") => match value.as_object() {
                    Some(ours) => {
                        entries(ours).count() == entries(theirs).count()
                            && entries(ours).all(|(k, v)| theirs.get(k) == Some(v))
                    }
                    None => false,
                },
                (Some(theirs), _) => value == theirs,
            })
}

/// Kinds whose status is the server's to set: a status sent on create is dropped.
pub(crate) fn drops_status_on_create(info: &ResourceInfo) -> bool {
    !info.builtin
        || matches!(
            info.kind.as_str(),
            "Deployment" | "ReplicaSet" | "HorizontalPodAutoscaler" | "CustomResourceDefinition"
        )
}

pub(crate) fn string_set(value: &Value) -> HashSet<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(String::from))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_resource_version_may_differ_for_a_write_to_change_nothing() {
        let stored = json!({"metadata": {"name": "a", "resourceVersion": "7", "labels": {"x": "1"}},
            "spec": {"replicas": 1}});
        let resent = json!({"spec": {"replicas": 1},
            "metadata": {"labels": {"x": "1"}, "name": "a", "resourceVersion": "6"}});
        let without_version = json!({"metadata": {"name": "a", "labels": {"x": "1"}},
            "spec": {"replicas": 1}});
        assert!(same_but_version(&stored, &resent));
        assert!(same_but_version(&stored, &without_version));
        let relabelled = json!({"metadata": {"name": "a", "resourceVersion": "7", "labels": {"x": "2"}},
            "spec": {"replicas": 1}});
        let rescaled = json!({"metadata": {"name": "a", "resourceVersion": "7", "labels": {"x": "1"}},
            "spec": {"replicas": 2}});
        let with_status = json!({"metadata": {"name": "a", "resourceVersion": "7", "labels": {"x": "1"}},
            "spec": {"replicas": 1}, "status": {}});
        for changed in [relabelled, rescaled, with_status] {
            assert!(!same_but_version(&stored, &changed), "{changed}");
            assert!(!same_but_version(&changed, &stored), "{changed}");
        }
    }
}
