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
use serin_api::ADOPT_ANNOTATION;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

type Key = (String, String);

/// The most of a store's compression space kept between objects, in bytes.
const SCRATCH_KEPT: usize = 64 * 1024;

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

    /// An entry for `text`: `head` in front of `text` compressed (see [`Entry`]); `None` past
    /// 4 GiB of text, far beyond what an API server stores. `scratch` is where it is compressed,
    /// kept from one object to the next so that it is neither allocated nor zeroed again.
    fn compress(self, head: &[u8], text: &[u8], scratch: &mut Vec<u8>) -> Option<Arc<[u8]>> {
        let length = u32::try_from(text.len()).ok()?;
        let head_length = u16::try_from(head.len()).ok()?;
        let start = 2 + head.len() + 4;
        let bound = start + lz4_flex::block::get_maximum_output_size(text.len());
        if scratch.len() < bound {
            scratch.resize(bound, 0);
        }
        scratch[..2].copy_from_slice(&head_length.to_le_bytes());
        scratch[2..2 + head.len()].copy_from_slice(head);
        scratch[start - 4..start].copy_from_slice(&length.to_le_bytes());
        let output = &mut scratch[start..];
        let written = if self.0.is_empty() {
            lz4_flex::block::compress_into(text, output)
        } else {
            lz4_flex::block::compress_into_with_dict(text, output, self.0)
        }
        .ok()?;
        let compressed = Arc::from(&scratch[..start + written]);
        // A rare large object does not keep its space for the small ones after it.
        if scratch.len() > SCRATCH_KEPT {
            *scratch = Vec::new();
        }
        Some(compressed)
    }

    /// The text of `entry`; `None` only if it was not made by [`Dictionary::compress`] with
    /// this dictionary.
    fn decompress(self, entry: &[u8]) -> Option<Vec<u8>> {
        let (_, compressed) = Entry::split(entry)?;
        lz4_flex::block::decompress_size_prepended_with_dict(compressed, self.0).ok()
    }
}

/// The layout of a cache entry: the length of its head (two bytes, little-endian), the head, then
/// the object's text compressed with its length in front. The head is the object's
/// [`Ownership`] with [`ADOPT_ANNOTATION`] (see [`head`]), which every tick checks of each object
/// it would write: kept beside the text, the check neither decompresses nor parses the object.
/// An empty head (an ownership too large to encode) leaves the check to read the text.
struct Entry;

impl Entry {
    /// The head and the compressed text of `entry`.
    fn split(entry: &[u8]) -> Option<(&[u8], &[u8])> {
        let length = u16::from_le_bytes(entry.get(..2)?.try_into().ok()?) as usize;
        let head = entry.get(2..2 + length)?;
        Some((head, &entry[2 + length..]))
    }
}

/// An [`Ownership`] as bytes: its resourceVersion and annotation (each a two-byte length, or
/// `0xFFFF` for none, then the text), then the number of controllers (two bytes) and each uid.
mod head {
    use super::Ownership;

    const NONE: u16 = u16::MAX;

    fn put(out: &mut Vec<u8>, text: Option<&str>) -> Option<()> {
        match text {
            None => out.extend_from_slice(&NONE.to_le_bytes()),
            Some(text) => {
                let length = u16::try_from(text.len()).ok().filter(|l| *l != NONE)?;
                out.extend_from_slice(&length.to_le_bytes());
                out.extend_from_slice(text.as_bytes());
            }
        }
        Some(())
    }

    /// `ownership` encoded into `out` (cleared first); empty when a field is too long to encode.
    pub(super) fn encode(ownership: &Ownership, out: &mut Vec<u8>) {
        out.clear();
        let encoded = (|| {
            put(out, ownership.resource_version.as_deref())?;
            put(out, ownership.annotation.as_deref())?;
            let count = u16::try_from(ownership.controllers.len()).ok()?;
            out.extend_from_slice(&count.to_le_bytes());
            for uid in &ownership.controllers {
                put(out, Some(uid))?;
            }
            u16::try_from(out.len()).ok()
        })();
        if encoded.is_none() {
            out.clear();
        }
    }

    struct Reader<'a>(&'a [u8]);

    impl Reader<'_> {
        fn number(&mut self) -> Option<u16> {
            let (number, rest) = self.0.split_first_chunk::<2>()?;
            self.0 = rest;
            Some(u16::from_le_bytes(*number))
        }

        fn text(&mut self) -> Option<Option<String>> {
            let length = self.number()?;
            if length == NONE {
                return Some(None);
            }
            let (text, rest) = self.0.split_at_checked(length as usize)?;
            self.0 = rest;
            Some(Some(std::str::from_utf8(text).ok()?.to_string()))
        }
    }

    /// The ownership `bytes` encode; `None` for an empty or damaged head.
    pub(super) fn decode(bytes: &[u8]) -> Option<Ownership> {
        let mut reader = Reader(bytes);
        let resource_version = reader.text()?;
        let annotation = reader.text()?;
        let count = reader.number()?;
        let controllers = (0..count)
            .map(|_| reader.text()?)
            .collect::<Option<Vec<String>>>()?;
        reader.0.is_empty().then_some(Ownership {
            controllers,
            annotation,
            resource_version,
        })
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
    /// Where objects are compressed (see [`Dictionary::compress`]).
    scratch: Vec<u8>,
    /// Where each object's head is encoded (see [`Entry`]).
    head: Vec<u8>,
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
                scratch: Default::default(),
                head: Default::default(),
            },
        )
    }

    /// The object `name` in `namespace`, decoded as `K`; `None` when it is not cached or does not
    /// decode as `K`.
    pub fn get<K: DeserializeOwned>(&self, namespace: &str, name: &str) -> Option<K> {
        serde_json::from_slice(&self.text(namespace, name)?).ok()
    }

    /// Who the object `name` in `namespace` belongs to, with the value of its `annotation` when
    /// one is named: a tick checks this of every object it would write, so it is read from the
    /// head kept beside the text, and only for another annotation from the object's metadata.
    pub fn ownership(
        &self,
        namespace: &str,
        name: &str,
        annotation: Option<&str>,
    ) -> Option<Ownership> {
        let entry = self.entry(namespace, name)?;
        if annotation.is_none_or(|key| key == ADOPT_ANNOTATION) {
            let kept = Entry::split(&entry).and_then(|(head, _)| head::decode(head));
            if let Some(mut ownership) = kept {
                if annotation.is_none() {
                    ownership.annotation = None;
                }
                return Some(ownership);
            }
        }
        let text = self.dictionary.decompress(&entry)?;
        let head: OwnershipHead = head_of(&text)?;
        Some(Ownership {
            controllers: head
                .owner_references
                .iter()
                .flatten()
                .filter(|owner| owner.controller == Some(true))
                .map(|owner| owner.uid.to_string())
                .collect(),
            annotation: annotation
                .and_then(|key| head.annotations.as_ref()?.get(key))
                .map(|value| value.to_string()),
            resource_version: head.resource_version.map(Cow::into_owned),
        })
    }

    fn text(&self, namespace: &str, name: &str) -> Option<Vec<u8>> {
        self.dictionary.decompress(&self.entry(namespace, name)?)
    }

    /// The entry `name` in `namespace` as the cache holds it now. Every watch event of an object
    /// replaces its entry, so an entry still pointing at the same bytes ([`Arc::ptr_eq`]) holds
    /// the same version of the object.
    pub fn entry(&self, namespace: &str, name: &str) -> Option<Arc<[u8]>> {
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
        self.apply_as(event, |object| {
            serde_json::to_vec(object).ok().map(Cow::Owned)
        });
    }

    /// Applies one watch event of objects that carry their JSON text already.
    pub fn apply_raw<K>(&mut self, event: &watcher::Event<RawObject<K>>)
    where
        RawObject<K>: Resource,
    {
        self.apply_as(event, |object| Some(Cow::Borrowed(&object.text()[..])));
    }

    /// Applies `event`, keeping each object as `text_of` gives its JSON, compressed.
    fn apply_as<'a, K: Resource>(
        &mut self,
        event: &'a watcher::Event<K>,
        text_of: impl Fn(&'a K) -> Option<Cow<'a, [u8]>>,
    ) {
        let dictionary = self.dictionary;
        let (scratch, head) = (&mut self.scratch, &mut self.head);
        let mut encoded = |object: &'a K| {
            let text = text_of(object)?;
            head::encode(&Ownership::of(object.meta(), Some(ADOPT_ANNOTATION)), head);
            Some((key_of(object), dictionary.compress(head, &text, scratch)?))
        };
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

/// Who an object belongs to (see [`JsonStore::ownership`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ownership {
    /// The uids of its owner references marked `controller`.
    pub controllers: Vec<String>,
    /// The value of the annotation asked for.
    pub annotation: Option<String>,
    /// Its resourceVersion.
    pub resource_version: Option<String>,
}

impl Ownership {
    /// What `metadata` says of its owners, with the value of its `annotation` when one is named:
    /// for the objects cached decoded.
    pub fn of(metadata: &ObjectMeta, annotation: Option<&str>) -> Ownership {
        Ownership {
            controllers: metadata
                .owner_references
                .iter()
                .flatten()
                .filter(|owner| owner.controller == Some(true))
                .map(|owner| owner.uid.clone())
                .collect(),
            annotation: annotation
                .and_then(|key| metadata.annotations.as_ref()?.get(key))
                .cloned(),
            resource_version: metadata.resource_version.clone(),
        }
    }

    /// Whether the object with `uid` is its controlling owner.
    pub fn controlled_by(&self, uid: &str) -> bool {
        self.controllers.iter().any(|owner| owner == uid)
    }
}

/// The fields of an object's metadata that [`Ownership`] reads, borrowed from its text.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct OwnershipHead<'a> {
    #[serde(borrow, default)]
    resource_version: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    owner_references: Option<Vec<OwnerHead<'a>>>,
    #[serde(borrow, default)]
    annotations: Option<std::collections::BTreeMap<Cow<'a, str>, Cow<'a, str>>>,
}

#[derive(serde::Deserialize)]
struct OwnerHead<'a> {
    #[serde(borrow)]
    uid: Cow<'a, str>,
    #[serde(default)]
    controller: Option<bool>,
}

/// The metadata of the object `text`, read without the fields after it: the API server writes
/// `metadata` before `spec` and `status`, so a Deployment's pod template is never scanned.
fn head_of<'de, T: serde::Deserialize<'de>>(text: &'de [u8]) -> Option<T> {
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};

    struct UpToMetadata<'a, T>(&'a mut Option<T>);

    impl<'de, T: serde::Deserialize<'de>> Visitor<'de> for UpToMetadata<'_, T> {
        type Value = ();

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a Kubernetes object")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                if key == "metadata" {
                    *self.0 = Some(map.next_value()?);
                    // Stopping here leaves the object unfinished, which the caller expects.
                    return Ok(());
                }
                map.next_value::<IgnoredAny>()?;
            }
            // No metadata: what an empty one decodes as.
            *self.0 = T::deserialize(serde_json::json!({})).ok();
            Ok(())
        }
    }

    let mut metadata = None;
    // An error after the metadata (the unread rest of the object) changes nothing.
    let _ = serde_json::Deserializer::from_slice(text).deserialize_map(UpToMetadata(&mut metadata));
    metadata
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
    fn objects_compressed_in_one_space_read_back_whole() {
        let mut scratch = Vec::new();
        let large = serde_json::to_vec(&served_deployment()).unwrap();
        let huge = vec![b' '; SCRATCH_KEPT * 2];
        let small = br#"{"kind":"Deployment"}"#.to_vec();
        for dictionary in [Dictionary::DEPLOYMENTS, Dictionary::NONE] {
            for text in [&large, &huge, &small, &large] {
                let compressed = dictionary.compress(b"", text, &mut scratch).unwrap();
                assert_eq!(dictionary.decompress(&compressed).as_ref(), Some(text));
            }
            // The space a huge object needed is not kept.
            assert!(scratch.len() <= SCRATCH_KEPT);
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
        writer.apply(&watcher::Event::Delete(deployment("podinfo", 3)));
        assert_eq!(store.get::<Deployment>("test", "podinfo"), None);
    }

    #[test]
    fn ownership_names_the_controllers_the_annotation_asked_for_and_the_version() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let (store, mut writer) = JsonStore::new(Dictionary::DEPLOYMENTS);
        let mut primary = deployment("podinfo-primary", 1);
        let owner = |uid: &str, controller| OwnerReference {
            api_version: "serin.dev/v1beta1".into(),
            kind: "Canary".into(),
            name: "podinfo".into(),
            uid: uid.into(),
            controller: Some(controller),
            block_owner_deletion: None,
        };
        primary.metadata.owner_references = Some(vec![owner("u1", false), owner("u2", true)]);
        primary.metadata.resource_version = Some("41".into());
        primary.metadata.annotations = Some(
            [
                ("serin.dev/adopt".to_string(), " podinfo ".to_string()),
                ("note".to_string(), "say \"hi\"\n".to_string()),
            ]
            .into(),
        );
        writer.apply(&watcher::Event::Apply(primary));
        let ownership = |annotation| store.ownership("test", "podinfo-primary", annotation);
        assert_eq!(
            ownership(Some("serin.dev/adopt")),
            Some(Ownership {
                controllers: vec!["u2".into()],
                annotation: Some(" podinfo ".into()),
                resource_version: Some("41".into()),
            })
        );
        assert_eq!(
            ownership(Some("note")).and_then(|o| o.annotation),
            Some("say \"hi\"\n".into()),
            "an escaped value reads as written"
        );
        assert_eq!(ownership(None).and_then(|o| o.annotation), None);
        assert_eq!(store.ownership("test", "other", None), None);
        writer.apply(&watcher::Event::Apply(deployment("bare", 1)));
        assert_eq!(
            store.ownership("test", "bare", Some("serin.dev/adopt")),
            Some(Ownership::default())
        );
    }

    #[test]
    fn a_head_reads_back_as_written_and_one_too_long_leaves_the_check_to_the_text() {
        let ownerships = [
            Ownership::default(),
            Ownership {
                controllers: vec!["u1".into(), "ü2".into()],
                annotation: Some(String::new()),
                resource_version: Some("7".into()),
            },
        ];
        let mut bytes = Vec::new();
        for ownership in &ownerships {
            head::encode(ownership, &mut bytes);
            assert_eq!(head::decode(&bytes).as_ref(), Some(ownership));
            // A damaged head is not believed.
            assert_eq!(head::decode(&bytes[..bytes.len() - 1]), None);
        }
        assert_eq!(head::decode(b""), None);

        // An annotation too long for a head is read from the text instead.
        let (store, mut writer) = JsonStore::new(Dictionary::SERVICES);
        let mut long = deployment("long", 1);
        let value = "x".repeat(70_000);
        long.metadata.annotations = Some([(ADOPT_ANNOTATION.to_string(), value.clone())].into());
        long.metadata.resource_version = Some("9".into());
        writer.apply(&watcher::Event::Apply(long));
        let entry = store.entry("test", "long").unwrap();
        assert_eq!(Entry::split(&entry).map(|(head, _)| head.len()), Some(0));
        assert_eq!(
            store.ownership("test", "long", Some(ADOPT_ANNOTATION)),
            Some(Ownership {
                controllers: Vec::new(),
                annotation: Some(value),
                resource_version: Some("9".into()),
            })
        );
        assert_eq!(
            store
                .ownership("test", "long", None)
                .and_then(|o| o.annotation),
            None
        );
    }

    #[test]
    fn metadata_is_read_wherever_it_is_and_what_follows_it_is_not_read() {
        let name = |text: &str| head_of::<ObjectMeta>(text.as_bytes()).map(|m| m.name);
        assert_eq!(
            name(r#"{"kind":"Service","spec":{"ports":[]},"metadata":{"name":"web"}}"#),
            Some(Some("web".into()))
        );
        // The rest of the object is left unread, even where it would not parse.
        assert_eq!(
            name(r#"{"kind":"Deployment","metadata":{"name":"web"},"spec":{"#),
            Some(Some("web".into()))
        );
        assert_eq!(name(r#"{"kind":"Service"}"#), Some(None));
        // Fields written as null read as absent, as in ObjectMeta.
        assert_eq!(
            head_of::<OwnershipHead>(
                br#"{"metadata":{"ownerReferences":null,"annotations":null,"resourceVersion":"3"}}"#
            )
            .and_then(|head| head.resource_version),
            Some("3".into())
        );
        assert_eq!(name(r#"{"metadata":{"name":7}}"#), None);
        assert_eq!(name("not JSON"), None);
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
        let mut head_of_podinfo = Vec::new();
        head::encode(&Ownership::default(), &mut head_of_podinfo);
        assert_eq!(
            footprint.bytes,
            Dictionary::NONE
                .compress(&head_of_podinfo, &text, &mut Vec::new())
                .unwrap()
                .len()
        );
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
        let alone = Dictionary::NONE
            .compress(
                b"",
                &serde_json::to_vec(&served_deployment()).unwrap(),
                &mut Vec::new(),
            )
            .unwrap();
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
