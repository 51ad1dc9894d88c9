//! The watch events of the operator's own writes that need no reconcile. A tick that writes a
//! Canary's status or one of its workloads and has already scheduled its next reconcile would
//! otherwise be woken again by each write coming back through the watch, only to observe the
//! Canary's world in full and find nothing due: about half of all reconciles of a release.

use std::collections::HashMap;
use std::sync::Mutex;

/// The most versions remembered per object: a tick writes an object at most twice (a status,
/// then an annotation), and a version whose event never comes (a relist coalesced it) is pushed
/// out by later writes.
const VERSIONS_PER_OBJECT: usize = 4;

/// An object the operator writes: its kind, namespace and name.
pub(super) type ObjectKey = (&'static str, String, String);

/// The resourceVersions written by ticks that had scheduled their next reconcile, per object,
/// until their watch event arrives.
#[derive(Default)]
pub(super) struct QuietEchoes {
    versions: Mutex<HashMap<ObjectKey, Expected>>,
}

/// The versions expected back for one object, and the Canary (namespace, name) whose tick wrote
/// them.
#[derive(Default)]
struct Expected {
    canary: (String, String),
    versions: Vec<String>,
}

impl QuietEchoes {
    /// Remembers that the write of `key` by a tick of `canary` that made `version` needs no
    /// reconcile when it comes back.
    pub(super) fn expect(
        &self,
        key: ObjectKey,
        canary: &(String, String),
        version: Option<String>,
    ) {
        let Some(version) = version else { return };
        let mut versions = self.versions.lock().expect("never poisoned");
        let expected = versions.entry(key).or_default();
        expected.canary.clone_from(canary);
        if expected.versions.len() == VERSIONS_PER_OBJECT {
            expected.versions.remove(0);
        }
        expected.versions.push(version);
    }

    /// Whether the watch event of `key` at `version` is the echo of such a write, forgetting it:
    /// any other version is someone else's change (or one the tick did not plan for) and
    /// reconciles as usual.
    pub(super) fn is_quiet_echo(&self, key: &ObjectKey, version: Option<&str>) -> bool {
        let Some(version) = version else { return false };
        let mut versions = self.versions.lock().expect("never poisoned");
        let Some(expected) = versions.get_mut(key) else {
            return false;
        };
        let Some(at) = expected.versions.iter().position(|v| v == version) else {
            return false;
        };
        // Versions older than this one will not come any more.
        expected.versions.drain(..=at);
        if expected.versions.is_empty() {
            versions.remove(key);
        }
        true
    }

    /// [`is_quiet_echo`](Self::is_quiet_echo) for `object`, of `kind`, as its watch delivered it.
    pub(super) fn is_echo_of<K: kube::Resource>(&self, kind: &'static str, object: &K) -> bool {
        let meta = object.meta();
        let key = (
            kind,
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        );
        self.is_quiet_echo(&key, meta.resource_version.as_deref())
    }

    /// Forgets the objects of the Canaries for which `keep` is false (they are gone).
    pub(super) fn forget_unless(&self, keep: impl Fn(&(String, String)) -> bool) {
        self.versions
            .lock()
            .expect("never poisoned")
            .retain(|_, expected| keep(&expected.canary));
    }

    /// How many objects have echoes outstanding.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.versions.lock().expect("never poisoned").len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ("Canary", "test".into(), name.into())
    }

    fn canary(name: &str) -> (String, String) {
        ("test".into(), name.into())
    }

    #[test]
    fn only_the_written_version_is_an_echo_and_only_once() {
        let echoes = QuietEchoes::default();
        echoes.expect(key("podinfo"), &canary("podinfo"), Some("12".into()));
        assert!(!echoes.is_quiet_echo(&key("podinfo"), Some("11")));
        assert!(!echoes.is_quiet_echo(&key("other"), Some("12")));
        assert!(echoes.is_quiet_echo(&key("podinfo"), Some("12")));
        assert!(!echoes.is_quiet_echo(&key("podinfo"), Some("12")));
        assert_eq!(echoes.len(), 0);
    }

    #[test]
    fn a_later_echo_drops_the_earlier_versions_that_never_came() {
        let echoes = QuietEchoes::default();
        echoes.expect(key("podinfo"), &canary("podinfo"), Some("12".into()));
        echoes.expect(key("podinfo"), &canary("podinfo"), Some("13".into()));
        echoes.expect(key("podinfo"), &canary("podinfo"), Some("14".into()));
        assert!(echoes.is_quiet_echo(&key("podinfo"), Some("13")));
        assert!(!echoes.is_quiet_echo(&key("podinfo"), Some("12")));
        assert!(echoes.is_quiet_echo(&key("podinfo"), Some("14")));
        assert_eq!(echoes.len(), 0);
    }

    #[test]
    fn versions_per_object_are_bounded() {
        let echoes = QuietEchoes::default();
        for version in 0..100 {
            echoes.expect(
                key("podinfo"),
                &canary("podinfo"),
                Some(version.to_string()),
            );
        }
        assert!(!echoes.is_quiet_echo(&key("podinfo"), Some("95")));
        assert!(echoes.is_quiet_echo(&key("podinfo"), Some("96")));
    }

    #[test]
    fn a_gone_canary_takes_its_workloads_echoes_with_it() {
        let echoes = QuietEchoes::default();
        echoes.expect(key("podinfo"), &canary("podinfo"), Some("1".into()));
        echoes.expect(
            ("Deployment", "test".into(), "web-primary".into()),
            &canary("podinfo"),
            Some("2".into()),
        );
        echoes.expect(key("kept"), &canary("kept"), Some("3".into()));
        echoes.forget_unless(|(_, name)| name == "kept");
        assert_eq!(echoes.len(), 1);
    }
}
