//! The Canary writes whose watch events have not arrived yet. Until the watch delivers the version
//! a write made, every other version in the cache is older than it: the version the write was
//! based on, or one someone else made in between (a GitOps tool re-applying the Canary, a user's
//! annotation). A tick deciding on such a copy would act on a status the operator has already
//! moved past, and its write would put that status back.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a write's version is awaited. The watch delivers every version in order, so this only
/// ends the wait when a relist skipped the version (it shows the latest one instead).
const AWAITED_AT_MOST: Duration = Duration::from_secs(15);

/// Per Canary (namespace, name), the version its last write made and when, until the Canary's
/// watch delivers that version.
#[derive(Default)]
pub(super) struct OwnWrites {
    awaited: Mutex<HashMap<(String, String), (String, Instant)>>,
}

impl OwnWrites {
    /// Remembers that the Canary `key`, read at `read`, was written to and is now at `written`
    /// (at `now`). A write the API server found to change nothing keeps the version it was read
    /// at, and leaves nothing to await.
    pub(super) fn wrote(
        &self,
        key: (String, String),
        read: Option<&str>,
        written: Option<&str>,
        now: Instant,
    ) {
        let Some(written) = written else { return };
        if read == Some(written) {
            return;
        }
        self.lock().insert(key, (written.to_string(), now));
    }

    /// Notes that the Canary's watch delivered `key` at `version`: once the awaited version has
    /// come, every later version is newer than the operator's write.
    pub(super) fn delivered(&self, key: &(String, String), version: Option<&str>) {
        let mut awaited = self.lock();
        if let (Some((written, _)), Some(version)) = (awaited.get(key), version)
            && written == version
        {
            awaited.remove(key);
        }
    }

    /// Whether the Canary `key` as cached at `version` predates the operator's last write to it
    /// (at `now`).
    pub(super) fn is_stale(
        &self,
        key: &(String, String),
        version: Option<&str>,
        now: Instant,
    ) -> bool {
        let mut awaited = self.lock();
        let Some((written, at)) = awaited.get(key) else {
            return false;
        };
        if version == Some(written.as_str()) || now.duration_since(*at) >= AWAITED_AT_MOST {
            awaited.remove(key);
            return false;
        }
        true
    }

    /// Forgets the Canaries for which `keep` is false (they are gone).
    pub(super) fn forget_unless(&self, keep: impl Fn(&(String, String)) -> bool) {
        self.lock().retain(|key, _| keep(key));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), (String, Instant)>> {
        self.awaited.lock().expect("never poisoned")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> (String, String) {
        ("test".into(), name.into())
    }

    #[test]
    fn a_copy_cached_before_the_write_came_back_is_stale() {
        let writes = OwnWrites::default();
        let now = Instant::now();
        writes.wrote(key("podinfo"), Some("10"), Some("12"), now);
        // The version the tick read, and one a GitOps tool made before the write landed.
        assert!(writes.is_stale(&key("podinfo"), Some("10"), now));
        assert!(writes.is_stale(&key("podinfo"), Some("11"), now));
        assert!(!writes.is_stale(&key("other"), Some("11"), now));
        assert!(!writes.is_stale(&key("podinfo"), Some("12"), now));
        assert!(
            !writes.is_stale(&key("podinfo"), Some("11"), now),
            "12 was seen: nothing awaited"
        );
    }

    #[test]
    fn after_the_written_version_is_delivered_every_version_is_newer() {
        let writes = OwnWrites::default();
        let now = Instant::now();
        writes.wrote(key("podinfo"), Some("10"), Some("12"), now);
        writes.delivered(&key("podinfo"), Some("11"));
        assert!(writes.is_stale(&key("podinfo"), Some("11"), now));
        writes.delivered(&key("podinfo"), Some("12"));
        assert!(!writes.is_stale(&key("podinfo"), Some("13"), now));
    }

    #[test]
    fn the_last_of_two_writes_is_awaited() {
        let writes = OwnWrites::default();
        let now = Instant::now();
        writes.wrote(key("podinfo"), Some("10"), Some("12"), now);
        writes.wrote(key("podinfo"), Some("12"), Some("13"), now);
        writes.delivered(&key("podinfo"), Some("12"));
        assert!(writes.is_stale(&key("podinfo"), Some("12"), now));
        assert!(!writes.is_stale(&key("podinfo"), Some("13"), now));
    }

    #[test]
    fn a_write_that_changed_nothing_awaits_nothing() {
        let writes = OwnWrites::default();
        let now = Instant::now();
        writes.wrote(key("podinfo"), Some("10"), Some("10"), now);
        writes.wrote(key("podinfo"), Some("10"), None, now);
        assert!(!writes.is_stale(&key("podinfo"), Some("9"), now));
    }

    #[test]
    fn a_version_a_relist_skipped_is_awaited_for_a_bounded_time() {
        let writes = OwnWrites::default();
        let now = Instant::now();
        writes.wrote(key("podinfo"), Some("10"), Some("12"), now);
        assert!(writes.is_stale(&key("podinfo"), Some("14"), now + AWAITED_AT_MOST / 2));
        assert!(!writes.is_stale(&key("podinfo"), Some("14"), now + AWAITED_AT_MOST));
    }

    #[test]
    fn a_gone_canary_is_forgotten() {
        let writes = OwnWrites::default();
        let now = Instant::now();
        writes.wrote(key("podinfo"), Some("10"), Some("12"), now);
        writes.wrote(key("other"), Some("10"), Some("12"), now);
        writes.forget_unless(|key| key.1 != "podinfo");
        assert!(!writes.is_stale(&key("podinfo"), Some("10"), now));
        assert!(writes.is_stale(&key("other"), Some("10"), now));
    }
}
