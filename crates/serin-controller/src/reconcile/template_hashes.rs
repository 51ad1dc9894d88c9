//! The pod-template hash of each Canary's target, kept for the generation of the target it was
//! computed from: a release's ticks mostly find their target's spec as the last tick left it
//! (its status changes, its generation does not), and the hash encodes and digests the whole pod
//! template.

use k8s_openapi::api::apps::v1::Deployment;
use std::collections::HashMap;
use std::sync::Mutex;

/// Per Canary (namespace, name): the target's uid and generation, and the hash of its pod
/// template at that generation.
#[derive(Default)]
pub(super) struct TemplateHashes {
    hashes: Mutex<HashMap<(String, String), Kept>>,
}

struct Kept {
    uid: String,
    generation: i64,
    hash: String,
}

impl TemplateHashes {
    /// The pod-template hash of `target` (as the decision core reads it) for the Canary `key`:
    /// the one kept when the target is at the same generation, else computed and kept. `None` for
    /// a target without a template, or without a uid or generation to tell its specs apart. The
    /// API server raises a Deployment's or DaemonSet's generation with every change of its spec,
    /// where the template and the selector that decide the hash are.
    pub(super) fn of(&self, key: &(String, String), target: &Deployment) -> Option<String> {
        let template = &target.spec.as_ref()?.template;
        let uid = target.metadata.uid.as_deref()?;
        let generation = target.metadata.generation?;
        if let Some(kept) = self.hashes.lock().expect("never poisoned").get(key)
            && kept.uid == uid
            && kept.generation == generation
        {
            return Some(kept.hash.clone());
        }
        let hash = serin_core::revision::pod_template_hash(template);
        self.hashes.lock().expect("never poisoned").insert(
            key.clone(),
            Kept {
                uid: uid.to_string(),
                generation,
                hash: hash.clone(),
            },
        );
        Some(hash)
    }

    /// Forgets the Canaries for which `keep` is false.
    pub(super) fn forget_unless(&self, keep: &impl Fn(&(String, String)) -> bool) {
        self.hashes
            .lock()
            .expect("never poisoned")
            .retain(|key, _| keep(key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn target(generation: i64, image: &str) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "podinfo", "uid": "u-1", "generation": generation},
            "spec": {"selector": {}, "template": {"spec": {"containers": [
                {"name": "app", "image": image}]}}},
        }))
        .unwrap()
    }

    fn hash_of(deployment: &Deployment) -> String {
        serin_core::revision::pod_template_hash(&deployment.spec.as_ref().unwrap().template)
    }

    #[test]
    fn a_new_generation_of_the_target_gets_its_own_hash() {
        let hashes = TemplateHashes::default();
        let key = ("test".to_string(), "podinfo".to_string());
        let first = target(1, "podinfo:6.0.0");
        assert_eq!(hashes.of(&key, &first), Some(hash_of(&first)));
        let second = target(2, "podinfo:6.0.1");
        assert_eq!(hashes.of(&key, &second), Some(hash_of(&second)));
        assert_ne!(hash_of(&first), hash_of(&second));
        // The same generation again is the kept hash, which is the hash of that generation: a
        // template that changed without a new generation (the API server never does that) shows
        // the hash was kept, not computed again.
        let mut unchanged = target(2, "podinfo:6.0.2");
        unchanged.metadata.resource_version = Some("a status change later".into());
        assert_eq!(hashes.of(&key, &unchanged), Some(hash_of(&second)));
        hashes.forget_unless(&|_| false);
        assert!(hashes.hashes.lock().unwrap().is_empty());
    }

    #[test]
    fn a_target_without_a_generation_is_not_kept() {
        let hashes = TemplateHashes::default();
        let key = ("test".to_string(), "podinfo".to_string());
        let mut unversioned = target(1, "podinfo:6.0.0");
        unversioned.metadata.generation = None;
        assert_eq!(hashes.of(&key, &unversioned), None);
        assert!(hashes.hashes.lock().unwrap().is_empty());
    }
}
