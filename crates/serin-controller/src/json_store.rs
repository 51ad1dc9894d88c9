//! A watch cache that keeps each object as its JSON text instead of its decoded Rust value,
//! compressed.
//!
//! A decoded Deployment takes several times its JSON's size in memory (every optional field of a
//! pod spec is laid out inline), and at thousands of Canaries the caches are most of the
//! operator's memory. Objects a tick reads once or twice are cheaper to keep as text and decode on
//! read. The text is kept LZ4-compressed against a [`Dictionary`] of its kind: most of a
//! Kubernetes object is field names and the API server's defaults, which a single small object
//! does not repeat enough to compress well on its own, but the dictionary does.

use crate::raw_object::RawObject;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::watcher;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

type Key = (String, String);

/// Typical objects of one kind as JSON (the API server's defaults, the fields and annotations the
/// operator writes), which that kind's objects are compressed against; any text works, a closer
/// one compresses better.
#[derive(Clone, Copy, Debug)]
pub struct Dictionary(&'static [u8]);

impl Dictionary {
    /// No dictionary: each object is compressed on its own.
    pub const NONE: Dictionary = Dictionary(b"");
    /// For Deployments: a target and its primary.
    pub const DEPLOYMENTS: Dictionary = Dictionary(include_bytes!("json_store/deployments.jsonl"));
    /// For DaemonSets.
    pub const DAEMON_SETS: Dictionary = Dictionary(include_bytes!("json_store/daemon_sets.jsonl"));
    /// For Services.
    pub const SERVICES: Dictionary = Dictionary(include_bytes!("json_store/services.jsonl"));
    /// For Istio VirtualServices.
    pub const VIRTUAL_SERVICES: Dictionary =
        Dictionary(include_bytes!("json_store/virtual_services.jsonl"));
    /// For Istio DestinationRules.
    pub const DESTINATION_RULES: Dictionary =
        Dictionary(include_bytes!("json_store/destination_rules.jsonl"));
    /// For Gateway API HTTPRoutes.
    pub const HTTP_ROUTES: Dictionary = Dictionary(include_bytes!("json_store/http_routes.jsonl"));

    fn compress(self, text: &[u8]) -> Arc<[u8]> {
        lz4_flex::block::compress_prepend_size_with_dict(text, self.0).into()
    }

    /// The text of `compressed`; `None` only if it was not made by [`Dictionary::compress`] with
    /// this dictionary.
    fn decompress(self, compressed: &[u8]) -> Option<Vec<u8>> {
        lz4_flex::block::decompress_size_prepended_with_dict(compressed, self.0).ok()
    }
}

/// The objects of one kind, by namespace and name, as JSON; readers share it with the watch that
/// fills it.
#[derive(Clone)]
pub struct JsonStore {
    objects: Arc<RwLock<HashMap<Key, Arc<[u8]>>>>,
    dictionary: Dictionary,
    ready: tokio::sync::watch::Receiver<bool>,
}

/// The watch's side of a [`JsonStore`]: applies watch events, swapping in a relist whole once it
/// is complete, as kube's reflector does.
pub struct JsonWriter {
    objects: Arc<RwLock<HashMap<Key, Arc<[u8]>>>>,
    dictionary: Dictionary,
    relist: Option<HashMap<Key, Arc<[u8]>>>,
    ready: tokio::sync::watch::Sender<bool>,
}

/// How many objects a store holds and the bytes they take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Objects cached.
    pub objects: usize,
    /// Bytes held for them: their compressed JSON, or for the kinds cached decoded, the size of
    /// their JSON.
    pub bytes: usize,
}

impl JsonStore {
    /// An empty store whose objects are compressed against `dictionary`, not ready until its
    /// writer applies a first complete list.
    pub fn new(dictionary: Dictionary) -> (JsonStore, JsonWriter) {
        let objects = Arc::new(RwLock::new(HashMap::new()));
        let (sender, receiver) = tokio::sync::watch::channel(false);
        (
            JsonStore {
                objects: objects.clone(),
                dictionary,
                ready: receiver,
            },
            JsonWriter {
                objects,
                dictionary,
                relist: None,
                ready: sender,
            },
        )
    }

    /// The object `name` in `namespace`, decoded as `K`; `None` when it is not cached or does not
    /// decode as `K`.
    pub fn get<K: DeserializeOwned>(&self, namespace: &str, name: &str) -> Option<K> {
        serde_json::from_slice(&self.text(namespace, name)?).ok()
    }

    /// The metadata of the object `name` in `namespace`, read without decoding the rest of it:
    /// ownership checks and change checks need no more, and a tick makes many of them.
    pub fn metadata(&self, namespace: &str, name: &str) -> Option<ObjectMeta> {
        #[derive(serde::Deserialize)]
        struct Head {
            #[serde(default)]
            metadata: ObjectMeta,
        }
        serde_json::from_slice::<Head>(&self.text(namespace, name)?)
            .ok()
            .map(|head| head.metadata)
    }

    fn text(&self, namespace: &str, name: &str) -> Option<Vec<u8>> {
        let compressed = self
            .objects
            .read()
            .expect("never poisoned")
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()?;
        self.dictionary.decompress(&compressed)
    }

    /// Whether the object `name` in `namespace` is cached.
    pub fn contains(&self, namespace: &str, name: &str) -> bool {
        self.objects
            .read()
            .expect("never poisoned")
            .contains_key(&(namespace.to_string(), name.to_string()))
    }

    /// Waits until the first complete list is in; an error means the writer is gone.
    pub async fn wait_until_ready(&self) -> Result<(), tokio::sync::watch::error::RecvError> {
        let mut ready = self.ready.clone();
        ready.wait_for(|ready| *ready).await.map(|_| ())
    }

    /// The objects held and the bytes of their compressed JSON.
    pub fn footprint(&self) -> Footprint {
        let objects = self.objects.read().expect("never poisoned");
        Footprint {
            objects: objects.len(),
            bytes: objects.values().map(|text| text.len()).sum(),
        }
    }
}

impl JsonWriter {
    /// Applies one watch event; objects that do not serialise (none do) are left out.
    pub fn apply<K: Resource + Serialize>(&mut self, event: &watcher::Event<K>) {
        let dictionary = self.dictionary;
        self.apply_as(event, |object| {
            serde_json::to_vec(object)
                .ok()
                .map(|text| dictionary.compress(&text))
        });
    }

    /// Applies one watch event of objects that carry their JSON text already.
    pub fn apply_raw<K>(&mut self, event: &watcher::Event<RawObject<K>>)
    where
        RawObject<K>: Resource,
    {
        let dictionary = self.dictionary;
        self.apply_as(event, |object| Some(dictionary.compress(object.text())));
    }

    fn apply_as<K: Resource>(
        &mut self,
        event: &watcher::Event<K>,
        text_of: impl Fn(&K) -> Option<Arc<[u8]>>,
    ) {
        let encoded = |object: &K| Some((key_of(object), text_of(object)?));
        match event {
            watcher::Event::Apply(object) => {
                if let Some((key, text)) = encoded(object) {
                    self.objects
                        .write()
                        .expect("never poisoned")
                        .insert(key, text);
                }
            }
            watcher::Event::Delete(object) => {
                self.objects
                    .write()
                    .expect("never poisoned")
                    .remove(&key_of(object));
            }
            watcher::Event::Init => self.relist = Some(HashMap::new()),
            watcher::Event::InitApply(object) => {
                if let (Some(relist), Some((key, text))) = (self.relist.as_mut(), encoded(object)) {
                    relist.insert(key, text);
                }
            }
            watcher::Event::InitDone => {
                if let Some(relist) = self.relist.take() {
                    *self.objects.write().expect("never poisoned") = relist;
                }
                self.ready.send_replace(true);
            }
        }
    }
}

fn key_of<K: Resource>(object: &K) -> Key {
    let meta = object.meta();
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::ObjectMeta;

    fn deployment(name: &str, replicas: i32) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("test".into()),
                ..ObjectMeta::default()
            },
            spec: Some(k8s_openapi::api::apps::v1::DeploymentSpec {
                replicas: Some(replicas),
                ..Default::default()
            }),
            ..Deployment::default()
        }
    }

    #[test]
    fn objects_read_back_as_they_were_written() {
        let (store, mut writer) = JsonStore::new(Dictionary::DEPLOYMENTS);
        let podinfo = deployment("podinfo", 3);
        writer.apply(&watcher::Event::Apply(podinfo.clone()));
        assert_eq!(
            store.get::<Deployment>("test", "podinfo"),
            Some(podinfo.clone())
        );
        assert_eq!(store.get::<Deployment>("other", "podinfo"), None);
        assert_eq!(
            store.metadata("test", "podinfo"),
            Some(podinfo.metadata.clone())
        );
        assert_eq!(store.metadata("other", "podinfo"), None);
        writer.apply(&watcher::Event::Delete(deployment("podinfo", 3)));
        assert_eq!(store.get::<Deployment>("test", "podinfo"), None);
    }

    #[tokio::test]
    async fn a_relist_replaces_the_objects_whole_once_it_is_complete() {
        let (store, mut writer) = JsonStore::new(Dictionary::NONE);
        writer.apply(&watcher::Event::Apply(deployment("gone", 1)));
        writer.apply(&watcher::Event::<Deployment>::Init);
        writer.apply(&watcher::Event::InitApply(deployment("podinfo", 2)));
        // Until the list is complete, readers see the objects from before it.
        assert!(store.get::<Deployment>("test", "gone").is_some());
        assert!(store.get::<Deployment>("test", "podinfo").is_none());
        assert!(
            tokio::time::timeout(
                std::time::Duration::from_millis(10),
                store.wait_until_ready()
            )
            .await
            .is_err()
        );
        writer.apply(&watcher::Event::<Deployment>::InitDone);
        store.wait_until_ready().await.unwrap();
        assert!(store.get::<Deployment>("test", "gone").is_none());
        assert_eq!(
            store.get::<Deployment>("test", "podinfo"),
            Some(deployment("podinfo", 2))
        );
        let footprint = store.footprint();
        assert_eq!(footprint.objects, 1);
        let text = serde_json::to_vec(&deployment("podinfo", 2)).unwrap();
        assert_eq!(footprint.bytes, Dictionary::NONE.compress(&text).len());
    }

    /// A Deployment as the API server answers it, with names the dictionary does not hold.
    fn served_deployment() -> serde_json::Value {
        serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"annotations": {"deployment.kubernetes.io/revision": "3"},
                "creationTimestamp": "2026-11-28T23:27:12Z", "generation": 3,
                "labels": {"app.kubernetes.io/name": "checkout"}, "name": "checkout",
                "namespace": "payments", "resourceVersion": "48213",
                "uid": "daa94bba-6e3a-45cf-9d9d-e652e68a2a85"},
            "spec": {"progressDeadlineSeconds": 600, "replicas": 4, "revisionHistoryLimit": 10,
                "selector": {"matchLabels": {"app.kubernetes.io/name": "checkout"}},
                "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
                    "type": "RollingUpdate"},
                "template": {"metadata": {"labels": {"app.kubernetes.io/name": "checkout"}},
                    "spec": {"containers": [{
                        "image": "registry.example.org/payments/checkout:2.14.1",
                        "imagePullPolicy": "IfNotPresent", "name": "checkout",
                        "ports": [{"containerPort": 8443, "name": "https", "protocol": "TCP"}],
                        "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}},
                        "terminationMessagePath": "/dev/termination-log",
                        "terminationMessagePolicy": "File"}],
                    "dnsPolicy": "ClusterFirst", "restartPolicy": "Always",
                    "schedulerName": "default-scheduler", "securityContext": {},
                    "terminationGracePeriodSeconds": 30}}},
            "status": {"availableReplicas": 4, "conditions": [
                {"lastTransitionTime": "2026-11-28T23:27:12Z",
                 "lastUpdateTime": "2026-11-28T23:27:12Z",
                 "message": "Deployment has minimum availability.",
                 "reason": "MinimumReplicasAvailable", "status": "True", "type": "Available"},
                {"lastTransitionTime": "2026-11-28T23:27:12Z",
                 "lastUpdateTime": "2026-11-28T23:31:40Z",
                 "message": "ReplicaSet \"checkout-8sgjw6p94l\" has successfully progressed.",
                 "reason": "NewReplicaSetAvailable", "status": "True", "type": "Progressing"}],
                "observedGeneration": 3, "readyReplicas": 4, "replicas": 4, "updatedReplicas": 4}})
    }

    #[test]
    fn a_deployment_is_held_in_a_fraction_of_its_json_and_read_back_whole() {
        let served = served_deployment();
        let object: Deployment = serde_json::from_value(served.clone()).unwrap();
        let json = serde_json::to_vec(&object).unwrap().len();
        let (store, mut writer) = JsonStore::new(Dictionary::DEPLOYMENTS);
        writer.apply(&watcher::Event::Apply(object.clone()));
        assert_eq!(
            store.get::<Deployment>("payments", "checkout"),
            Some(object)
        );
        assert_eq!(
            store.get::<serde_json::Value>("payments", "checkout"),
            Some(served)
        );
        let held = store.footprint().bytes;
        assert!(held * 3 < json, "{held} bytes held for {json} of JSON");
        // Without the dictionary, one object alone repeats too little to compress as well.
        let alone = Dictionary::NONE.compress(&serde_json::to_vec(&served_deployment()).unwrap());
        assert!(
            alone.len() > held * 2,
            "{} alone, {held} with it",
            alone.len()
        );
    }

    #[test]
    fn every_dictionary_is_objects_of_its_kind() {
        for (dictionary, kind) in [
            (Dictionary::DEPLOYMENTS, "Deployment"),
            (Dictionary::DAEMON_SETS, "DaemonSet"),
            (Dictionary::SERVICES, "Service"),
            (Dictionary::VIRTUAL_SERVICES, "VirtualService"),
            (Dictionary::DESTINATION_RULES, "DestinationRule"),
            (Dictionary::HTTP_ROUTES, "HTTPRoute"),
        ] {
            let objects: Vec<serde_json::Value> =
                serde_json::Deserializer::from_slice(dictionary.0)
                    .into_iter()
                    .collect::<Result<_, _>>()
                    .unwrap();
            assert!(!objects.is_empty());
            assert!(
                objects.iter().all(|object| object["kind"] == kind),
                "{kind}"
            );
        }
    }
}
