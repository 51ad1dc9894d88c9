//! Skipping the routing objects that do not move with the routes on a tick that would find them
//! as the last tick left them.
//!
//! A release's ticks move the VirtualService's weights and scale the workloads, but the `-canary`
//! and `-primary` Services, the apex Service (unless the Services route) and the DestinationRules
//! are built from the Canary's spec and the target's spec, its replicas aside. Once a tick has
//! found all of them as applied, without writing any, the next tick skips building and checking
//! them when the Canary's spec is at the same generation, the target's spec but for its replicas
//! is the same, and every one of their cache entries is the one that tick found. A watch event of
//! any of them (an edit, a relist) replaces its entry, and the next tick checks them all again.

use serde_json::Value;
use serin_router::Names;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

/// The steady routing objects of one Canary as a tick finds them: what they are built from and
/// their cache entries.
pub(super) struct Group {
    /// A digest of the Canary's uid and generation, the target's uid and spec but for its
    /// replicas, and the objects' kinds and names; `None` without those uids or the generation.
    inputs: Option<u64>,
    /// The objects' cache entries; `None` when one of them is not cached.
    entries: Option<Vec<Arc<[u8]>>>,
}

impl Group {
    /// The Services (the apex one when `apex`) and, when `destination_rules`, the
    /// DestinationRules of `canary` (its JSON form) for `target`, with the cache entry `entry`
    /// gives for each kind and name.
    pub(super) fn of(
        canary: &Value,
        target: &Value,
        (apex, destination_rules): (bool, bool),
        entry: impl Fn(&str, &str) -> Option<Arc<[u8]>>,
    ) -> Group {
        let names = Names::of(canary);
        let mut objects = vec![("Service", &names.canary), ("Service", &names.primary)];
        if apex {
            objects.push(("Service", &names.apex));
        }
        if destination_rules {
            objects.push(("DestinationRule", &names.canary));
            objects.push(("DestinationRule", &names.primary));
        }
        let entries = objects
            .iter()
            .map(|(kind, name)| entry(kind, name))
            .collect();
        let canary_identity = canary["metadata"]["uid"]
            .as_str()
            .zip(canary["metadata"]["generation"].as_i64());
        let inputs = canary_identity
            .zip(target["metadata"]["uid"].as_str())
            .map(|identities| {
                let mut hasher = DefaultHasher::new();
                (identities, &objects).hash(&mut hasher);
                // Scaling, which every release does, changes the target's generation but none
                // of these objects.
                for (field, value) in target["spec"].as_object().into_iter().flatten() {
                    if field != "replicas" {
                        field.hash(&mut hasher);
                        feed_json(&mut hasher, value);
                    }
                }
                hasher.finish()
            });
        Group { inputs, entries }
    }
}

/// Feeds `value`'s JSON text to `hasher` as it is written, without building the text first.
pub(super) fn feed_json(hasher: &mut impl Hasher, value: &Value) {
    struct Feed<'a, H>(&'a mut H);
    impl<H: Hasher> std::io::Write for Feed<'_, H> {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.write(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // Writing into a hasher cannot fail, and a Value always serializes.
    let _ = serde_json::to_writer(Feed(hasher), value);
}

/// The inputs digest and the cache entries of a [`Group`] found as applied.
type Found = (u64, Vec<Arc<[u8]>>);

/// What was last found of each Canary's steady routing objects (by namespace and name).
#[derive(Default)]
pub(super) struct SteadyRouting {
    found: Mutex<HashMap<(String, String), Found>>,
}

impl SteadyRouting {
    /// Whether the Canary `key`'s steady objects are built from the same specs as when a tick
    /// last found them all as applied, and the cache still holds the entries it found.
    pub(super) fn unchanged(&self, key: &(String, String), group: &Group) -> bool {
        let (Some(inputs), Some(entries)) = (group.inputs, &group.entries) else {
            return false;
        };
        self.found
            .lock()
            .expect("never poisoned")
            .get(key)
            .is_some_and(|(found_inputs, found_entries)| {
                *found_inputs == inputs
                    && found_entries.len() == entries.len()
                    && found_entries
                        .iter()
                        .zip(entries)
                        .all(|(found, now)| Arc::ptr_eq(found, now))
            })
    }

    /// Records what a tick that checked the Canary `key`'s steady objects found: `group`, taken
    /// before the check, when it wrote none of them; nothing when it wrote one.
    pub(super) fn checked(&self, key: &(String, String), group: Group, wrote: bool) {
        let mut found = self.found.lock().expect("never poisoned");
        match (group.inputs, group.entries) {
            (Some(inputs), Some(entries)) if !wrote => {
                found.insert(key.clone(), (inputs, entries));
            }
            _ => {
                found.remove(key);
            }
        }
    }

    /// Forgets the Canaries for which `keep` is false.
    pub(super) fn forget_unless(&self, keep: impl Fn(&(String, String)) -> bool) {
        self.found
            .lock()
            .expect("never poisoned")
            .retain(|key, _| keep(key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn group(inputs: Option<u64>, entries: &[&Arc<[u8]>]) -> Group {
        Group {
            inputs,
            entries: Some(entries.iter().map(|entry| Arc::clone(entry)).collect()),
        }
    }

    #[test]
    fn a_group_is_unchanged_only_with_the_same_inputs_and_the_same_entries() {
        let steady = SteadyRouting::default();
        let key = ("test".to_string(), "podinfo".to_string());
        let (a, b): (Arc<[u8]>, Arc<[u8]>) = (Arc::from(&b"a"[..]), Arc::from(&b"b"[..]));
        assert!(!steady.unchanged(&key, &group(Some(1), &[&a, &b])));
        steady.checked(&key, group(Some(1), &[&a, &b]), false);
        assert!(steady.unchanged(&key, &group(Some(1), &[&a, &b])));
        assert!(!steady.unchanged(&key, &group(Some(2), &[&a, &b])));
        assert!(!steady.unchanged(&key, &group(Some(1), &[&a])));
        // An entry with the same bytes is another version of the object.
        let a_again: Arc<[u8]> = Arc::from(&b"a"[..]);
        assert!(!steady.unchanged(&key, &group(Some(1), &[&a_again, &b])));
        assert!(!steady.unchanged(&key, &group(None, &[&a, &b])));
        // A tick that wrote one of them leaves nothing to skip on.
        steady.checked(&key, group(Some(1), &[&a, &b]), true);
        assert!(!steady.unchanged(&key, &group(Some(1), &[&a, &b])));
        steady.checked(&key, group(Some(1), &[&a, &b]), false);
        steady.forget_unless(|_| false);
        assert!(!steady.unchanged(&key, &group(Some(1), &[&a, &b])));
    }

    #[test]
    fn the_inputs_follow_the_uids_and_generations_and_need_both() {
        let cached: Arc<[u8]> = Arc::from(&b"{}"[..]);
        let all_cached = |_: &str, _: &str| Some(Arc::clone(&cached));
        let canary = |generation: i64| {
            json!({"metadata": {"name": "podinfo", "namespace": "test", "uid": "c1",
                                "generation": generation},
                   "spec": {"targetRef": {"name": "podinfo"}}})
        };
        let deployment = |uid: &str, replicas: i64, app: &str| {
            json!({"metadata": {"uid": uid, "generation": replicas},
                   "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}}}})
        };
        let target = |uid: &str| deployment(uid, 1, "podinfo");
        let inputs = |canary: &Value, target: &Value, istio: bool| {
            Group::of(canary, target, (true, istio), all_cached).inputs
        };
        let first = inputs(&canary(1), &target("t1"), true);
        assert!(first.is_some());
        assert_eq!(first, inputs(&canary(1), &target("t1"), true));
        assert_ne!(first, inputs(&canary(2), &target("t1"), true));
        assert_ne!(first, inputs(&canary(1), &target("t2"), true));
        assert_ne!(first, inputs(&canary(1), &target("t1"), false));
        // Scaling the target changes nothing these objects are built from; its selector does.
        assert_eq!(
            first,
            inputs(&canary(1), &deployment("t1", 3, "podinfo"), true)
        );
        assert_ne!(first, inputs(&canary(1), &deployment("t1", 1, "web"), true));
        let without_generation = json!({"metadata": {"uid": "c1"}});
        assert_eq!(inputs(&without_generation, &target("t1"), true), None);
        // The apex Service and the DestinationRules are part of the group when asked for.
        let entries = |flags| Group::of(&canary(1), &target("t1"), flags, all_cached).entries;
        assert_eq!(entries((true, true)).map(|e| e.len()), Some(5));
        assert_eq!(entries((false, false)).map(|e| e.len()), Some(2));
        // One object not cached leaves nothing to compare with.
        let primary_missing = |kind: &str, name: &str| {
            (kind != "DestinationRule" || name != "podinfo-primary").then(|| Arc::clone(&cached))
        };
        let group = Group::of(&canary(1), &target("t1"), (true, true), primary_missing);
        assert!(group.entries.is_none());
    }
}
