//! A watch cache that keeps each object as its JSON text instead of its decoded Rust value.
//!
//! A decoded Deployment takes several times its JSON's size in memory (every optional field of a
//! pod spec is laid out inline), and at thousands of Canaries the caches are most of the
//! operator's memory. Objects a tick reads once or twice are cheaper to keep as text and decode on
//! read.

use crate::raw_object::RawObject;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::watcher;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

type Key = (String, String);

/// The objects of one kind, by namespace and name, as JSON; readers share it with the watch that
/// fills it.
#[derive(Clone)]
pub struct JsonStore {
    objects: Arc<RwLock<HashMap<Key, Arc<[u8]>>>>,
    ready: tokio::sync::watch::Receiver<bool>,
}

/// The watch's side of a [`JsonStore`]: applies watch events, swapping in a relist whole once it
/// is complete, as kube's reflector does.
pub struct JsonWriter {
    objects: Arc<RwLock<HashMap<Key, Arc<[u8]>>>>,
    relist: Option<HashMap<Key, Arc<[u8]>>>,
    ready: tokio::sync::watch::Sender<bool>,
}

/// How many objects a store holds and the bytes of their JSON.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Objects cached.
    pub objects: usize,
    /// Bytes of their JSON text.
    pub bytes: usize,
}

impl JsonStore {
    /// An empty store, not ready until its writer applies a first complete list.
    pub fn new() -> (JsonStore, JsonWriter) {
        let objects = Arc::new(RwLock::new(HashMap::new()));
        let (sender, receiver) = tokio::sync::watch::channel(false);
        (
            JsonStore {
                objects: objects.clone(),
                ready: receiver,
            },
            JsonWriter {
                objects,
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

    fn text(&self, namespace: &str, name: &str) -> Option<Arc<[u8]>> {
        self.objects
            .read()
            .expect("never poisoned")
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
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

    /// The objects held and the bytes of their JSON.
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
        self.apply_as(event, |object| {
            serde_json::to_vec(object).ok().map(Arc::from)
        });
    }

    /// Applies one watch event of objects that carry their JSON text already.
    pub fn apply_raw<K>(&mut self, event: &watcher::Event<RawObject<K>>)
    where
        RawObject<K>: Resource,
    {
        self.apply_as(event, |object| Some(object.text().clone()));
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
        let (store, mut writer) = JsonStore::new();
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
        let (store, mut writer) = JsonStore::new();
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
        assert_eq!(
            footprint.bytes,
            serde_json::to_vec(&deployment("podinfo", 2)).unwrap().len()
        );
    }
}
