//! The object store: every object as JSON, one global resourceVersion, a retained history of
//! changes for watches, and the write rules of the API server (generation, status subresource,
//! finalizers, namespaces, garbage collection, CRD registration).

use crate::managed;
use crate::patch;
use crate::registry::{GenerationRule, Registry, ResourceInfo, resources_of_crd};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, mpsc};

/// How many changes are kept for watches that resume from a resourceVersion: enough that a
/// client relisting thousands of objects while the controllers write can resume watching from
/// its list (a shorter history sends it back to list again).
pub const HISTORY_LIMIT: usize = 100_000;

/// Kind of a change, as a watch event type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeType {
    /// The object was created.
    Added,
    /// The object was updated.
    Modified,
    /// The object was removed.
    Deleted,
}

impl ChangeType {
    /// The watch event type.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// One committed write.
#[derive(Clone, Debug)]
pub struct Change {
    /// The resourceVersion it created.
    pub rv: u64,
    /// Storage key of the resource (`plural.group`).
    pub resource: String,
    /// What happened.
    pub change: ChangeType,
    /// The object after the change (the last state, for deletions), shared with the store while
    /// it is the stored version.
    pub object: Arc<Value>,
    /// The object before the change, for watchers whose selectors it may have left or entered.
    pub previous: Option<Arc<Value>>,
    /// When it was committed (to the nanosecond, unlike the objects' own timestamps).
    pub at: std::time::SystemTime,
}

/// One page of a paged list.
#[derive(Debug)]
pub struct Page {
    /// The page's objects, in namespace/name order.
    pub items: Vec<Value>,
    /// The resourceVersion every page of this list shows.
    pub rv: u64,
    /// The token for the next page, when more objects follow.
    pub continue_token: Option<String>,
    /// How many objects follow this page.
    pub remaining: Option<u64>,
}

/// Where a paged list resumes: the snapshot's resourceVersion and the last key served, as the
/// API server's token holds them (base64 of `{"v":"meta.k8s.io/v1","rv":N,"start":"ns/name\0"}`).
struct ContinueToken {
    rv: u64,
    namespace: String,
    name: String,
}

impl ContinueToken {
    fn encode(&self) -> String {
        use base64::Engine;
        let start = format!("{}/{}\u{0}", self.namespace, self.name);
        let json = json!({"v": "meta.k8s.io/v1", "rv": self.rv, "start": start});
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json.to_string())
    }

    fn decode(token: &str) -> Result<Self, ApiError> {
        use base64::Engine;
        let invalid = || {
            ApiError::bad_request(
                "continue key is not valid: the token was not issued by this server",
            )
        };
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.trim_end_matches('='))
            .map_err(|_| invalid())?;
        let value: Value = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
        let start = value["start"].as_str().ok_or_else(invalid)?;
        let start = start.strip_suffix('\u{0}').unwrap_or(start);
        let (namespace, name) = start.split_once('/').ok_or_else(invalid)?;
        Ok(ContinueToken {
            rv: value["rv"].as_u64().ok_or_else(invalid)?,
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }
}

/// Which part of an object a write may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The main endpoint: everything but a status subresource's status.
    Main,
    /// The `/status` subresource: only status.
    Status,
}

/// How a PATCH body is interpreted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/json-patch+json`.
    Json,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

/// Options of a delete.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `propagationPolicy`: `Background` (default), `Foreground` or `Orphan`.
    pub propagation: Option<String>,
}

/// Who writes and how: recorded in `metadata.managedFields`.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    /// Validate and answer, but persist nothing (`dryRun=All`).
    pub dry_run: bool,
    /// The field manager; empty means `unknown`.
    pub field_manager: String,
    /// A server-side apply takes fields other managers own instead of failing with a conflict.
    pub force: bool,
}

impl WriteOptions {
    /// A write by `manager`.
    pub fn by(manager: &str) -> Self {
        WriteOptions {
            field_manager: manager.into(),
            ..WriteOptions::default()
        }
    }

    /// The managedFields writer of a write to `part` of an object of `info`.
    fn writer(&self, info: &ResourceInfo, part: Part) -> managed::Writer {
        let manager = if self.field_manager.is_empty() {
            "unknown"
        } else {
            &self.field_manager
        };
        managed::Writer {
            manager: manager.into(),
            api_version: info.api_version(),
            subresource: (part == Part::Status).then_some("status"),
            now: now_rfc3339(),
        }
    }
}

/// Whether a write is a server-side apply (ownership already recorded) or an ordinary update.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tracking {
    Update,
    Applied,
}

type Key = (String, String, String);

struct Inner {
    registry: Registry,
    /// Shared, so the built-in controllers read them without copying ([`Store::list_shared`]).
    objects: BTreeMap<Key, Arc<Value>>,
    rv: u64,
    history: VecDeque<Arc<Change>>,
    compacted_through: u64,
    /// In-process followers that must see every change, however far behind they are.
    followers: Vec<mpsc::UnboundedSender<Arc<Change>>>,
    /// The changes of one resource (by storage key) for its watches: a watch then falls behind
    /// only because of its own resource's changes, not every commit of every kind.
    watch_feeds: HashMap<String, broadcast::Sender<Arc<Change>>>,
    gc: GcIndex,
}

impl Inner {
    /// The stored objects of `info`'s kind, shared.
    fn shared(&self, info: &ResourceInfo) -> Vec<Arc<Value>> {
        let resource = info.storage_key();
        self.objects
            .range((resource.clone(), String::new(), String::new())..)
            .take_while(|((r, _, _), _)| *r == resource)
            .map(|(_, o)| o.clone())
            .collect()
    }
}

/// Changes a watch may fall behind by before it ends with 410 Gone.
const WATCH_BUFFER: usize = 16_384;

/// What garbage collection needs to know without reading every object: who owns whom, which
/// objects are being deleted, and which objects a change since the last collection concerns.
/// Kept by [`Store::commit`], the one place objects change.
#[derive(Default)]
struct GcIndex {
    keys_by_uid: HashMap<String, Key>,
    /// The objects that name each uid among their owners.
    dependents: HashMap<String, HashSet<Key>>,
    /// Objects with a deletionTimestamp or a foregroundDeletion or orphan finalizer.
    finalizing: HashSet<Key>,
    /// Objects to look at in the next collection: an owner of theirs went away or began a
    /// foreground or orphaning deletion, a dependent went away, or they are being deleted.
    pending: HashSet<Key>,
}

fn owner_uids(object: &Value) -> Vec<String> {
    meta(object)["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["uid"].as_str().map(String::from))
        .collect()
}

fn uid_of(object: &Value) -> Option<&str> {
    meta(object)["uid"].as_str()
}

fn is_finalizing(object: &Value) -> bool {
    meta(object)["deletionTimestamp"].is_string()
        || meta(object)["finalizers"].as_array().is_some_and(|list| {
            list.iter()
                .any(|f| f == "foregroundDeletion" || f == "orphan")
        })
}

impl GcIndex {
    /// Follows one object's change from `old` to `new` (absent when created or removed).
    fn update(&mut self, key: &Key, old: Option<&Value>, new: Option<&Value>) {
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
    fn clearing_a_scope(&self) -> bool {
        self.finalizing.iter().any(|(resource, _, _)| {
            resource == "namespaces" || resource == "customresourcedefinitions.apiextensions.k8s.io"
        })
    }
}

/// The sandbox's state, shared by the HTTP handlers and the built-in controllers.
pub struct Store {
    inner: Mutex<Inner>,
    changes: broadcast::Sender<Arc<Change>>,
    resets: broadcast::Sender<()>,
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

/// The current time as RFC 3339 with second precision, as the API server writes timestamps.
pub fn now_rfc3339() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    k8s_openapi::jiff::Timestamp::from_second(seconds)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn meta(object: &Value) -> &Value {
    &object["metadata"]
}

fn meta_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    object["metadata"].as_object_mut().expect("set above")
}

fn name_of(object: &Value) -> &str {
    meta(object)["name"].as_str().unwrap_or_default()
}

fn namespace_of(object: &Value) -> &str {
    meta(object)["namespace"].as_str().unwrap_or_default()
}

fn has_finalizers(object: &Value) -> bool {
    meta(object)["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    uuid::Uuid::new_v4()
        .as_bytes()
        .iter()
        .take(5)
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

fn valid_name(name: &str) -> bool {
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
fn same_but_version(a: &Value, b: &Value) -> bool {
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
fn drops_status_on_create(info: &ResourceInfo) -> bool {
    !info.builtin
        || matches!(
            info.kind.as_str(),
            "Deployment" | "ReplicaSet" | "HorizontalPodAutoscaler" | "CustomResourceDefinition"
        )
}

impl Store {
    /// An empty store with the built-in kinds and the bootstrap namespaces.
    pub fn new() -> Arc<Self> {
        let (changes, _) = broadcast::channel(4096);
        let (resets, _) = broadcast::channel(4);
        let store = Arc::new(Store {
            inner: Mutex::new(Inner {
                registry: Registry::with_builtins(),
                objects: BTreeMap::new(),
                rv: 0,
                history: VecDeque::new(),
                compacted_through: 0,
                followers: Vec::new(),
                watch_feeds: HashMap::new(),
                gc: GcIndex::default(),
            }),
            changes,
            resets,
        });
        let namespaces = store.resource("", "v1", "namespaces").expect("built in");
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            store
                .create(
                    &namespaces,
                    None,
                    json!({"metadata": {"name": ns}}),
                    &WriteOptions::by("kube-apiserver"),
                )
                .expect("bootstrap namespaces are valid");
        }
        store
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The resource served at group/version/plural, if any.
    pub fn resource(&self, group: &str, version: &str, plural: &str) -> Option<ResourceInfo> {
        self.lock().registry.get(group, version, plural).cloned()
    }

    /// A copy of the registry (for discovery).
    pub fn registry(&self) -> Registry {
        self.lock().registry.clone()
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// Number of stored objects.
    pub fn object_count(&self) -> usize {
        self.lock().objects.len()
    }

    /// Objects stored per resource (storage key), with the bytes of their JSON text: how the
    /// store's memory divides between kinds.
    pub fn footprint_by_resource(&self) -> BTreeMap<String, (usize, usize)> {
        let objects: Vec<(String, Arc<Value>)> = self
            .lock()
            .objects
            .iter()
            .map(|((resource, _, _), object)| (resource.clone(), object.clone()))
            .collect();
        let mut footprint: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for (resource, object) in objects {
            let entry = footprint.entry(resource).or_default();
            entry.0 += 1;
            entry.1 += serde_json::to_vec(&*object).map_or(0, |text| text.len());
        }
        footprint
    }

    /// Forgets the change history as an etcd compaction would: open watches end with an in-stream
    /// 410 Expired, and resuming from any older resourceVersion gets 410 too, so clients relist.
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.history.clear();
        inner.compacted_through = inner.rv;
        let _ = self.resets.send(());
    }

    /// Every committed change from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.changes.subscribe()
    }

    /// Every committed change from now on, in order, with no limit on how far the receiver may
    /// fall behind (an in-process reader that must see every commit, such as a benchmark).
    pub fn follow(&self) -> mpsc::UnboundedReceiver<Arc<Change>> {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.lock().followers.push(sender);
        receiver
    }

    /// The objects of `infos` as stored (as [`Store::list_shared`]) and every change committed
    /// after that list (as [`Store::follow`]), taken together so none falls between them.
    pub fn list_and_follow(
        &self,
        infos: &[&ResourceInfo],
    ) -> (Vec<Vec<Arc<Value>>>, mpsc::UnboundedReceiver<Arc<Change>>) {
        let mut inner = self.lock();
        let listed = infos.iter().map(|info| inner.shared(info)).collect();
        let (sender, receiver) = mpsc::unbounded_channel();
        inner.followers.push(sender);
        (listed, receiver)
    }

    /// A signal that fires when [`Store::compact`] runs.
    pub fn resets(&self) -> broadcast::Receiver<()> {
        self.resets.subscribe()
    }

    /// Like [`Store::present`] for a shared object: the same object when the version shows it as
    /// stored, a converted copy otherwise.
    pub fn present_shared(info: &ResourceInfo, object: &Arc<Value>) -> Arc<Value> {
        let as_stored = !crate::convert::converts(info)
            && info.schema.as_ref().is_none_or(|s| !s.has_defaults())
            && object["apiVersion"].as_str() == Some(info.api_version().as_str())
            && object["kind"].as_str() == Some(info.kind.as_str());
        if as_stored {
            object.clone()
        } else {
            Arc::new(Self::present(info, Value::clone(object)))
        }
    }

    /// A copy of a stored object as the resource's version shows it.
    fn presented(info: &ResourceInfo, object: &Value) -> Value {
        Self::present(info, object.clone())
    }

    /// The stored object as the resource's version shows it (with its `apiVersion` and `kind`).
    pub fn present(info: &ResourceInfo, object: Value) -> Value {
        let mut object = crate::convert::to_version(info, object);
        // Defaults added to a CRD after an object was stored appear when it is read, as from etcd.
        if let Some(schema) = info.schema.as_ref().filter(|s| s.has_defaults()) {
            crate::structural::default(schema, &mut object);
        }
        object
    }

    fn key(info: &ResourceInfo, namespace: &str, name: &str) -> Key {
        (info.storage_key(), namespace.to_string(), name.to_string())
    }

    /// Reads one object.
    pub fn get(&self, info: &ResourceInfo, namespace: &str, name: &str) -> Result<Value, ApiError> {
        let inner = self.lock();
        inner
            .objects
            .get(&Self::key(info, namespace, name))
            .map(|o| Self::present(info, (**o).clone()))
            .ok_or_else(|| {
                ApiError::not_found(&info.qualified_plural(), &info.group, &info.plural, name)
            })
    }

    /// One stored object, shared rather than copied: as stored, without the defaults a read of a
    /// custom resource adds.
    pub fn get_shared(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<Value>> {
        self.lock()
            .objects
            .get(&Self::key(info, namespace, name))
            .cloned()
    }

    /// Lists objects (of one namespace, or all when `namespace` is `None`) matching the selectors,
    /// with the resourceVersion of the snapshot.
    pub fn list(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> (Vec<Value>, u64) {
        let inner = self.lock();
        let resource = info.storage_key();
        let items = inner
            .objects
            .range((resource.clone(), String::new(), String::new())..)
            .take_while(|((r, _, _), _)| *r == resource)
            .filter(|((_, ns, _), _)| namespace.is_none_or(|want| want == ns))
            .filter(|(_, o)| labels.matches(o))
            .map(|(_, o)| Self::present(info, (**o).clone()))
            .filter(|o| fields.matches(o))
            .collect();
        (items, inner.rv)
    }

    /// The objects of a built-in kind as stored (every object is stored with its `apiVersion`
    /// and `kind`), shared rather than copied: for the built-in controllers. Unlike
    /// [`Store::list`], objects are not converted to `info`'s version nor given a CRD schema's
    /// defaults.
    pub fn list_shared(&self, info: &ResourceInfo) -> Vec<Arc<Value>> {
        self.lock().shared(info)
    }

    /// One page of a list (`limit`, `continue`): at most `limit` objects after the token's position,
    /// as they were at the first page's resourceVersion. A token older than the retained history
    /// is 410 Expired, as when etcd has compacted past it.
    pub fn list_page(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: usize,
        token: Option<&str>,
    ) -> Result<Page, ApiError> {
        let inner = self.lock();
        let resource = info.storage_key();
        let (snapshot, after) = match token {
            None => (inner.rv, None),
            Some(token) => {
                let position = ContinueToken::decode(token)?;
                if position.rv < inner.compacted_through {
                    return Err(ApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                    ));
                }
                (position.rv, Some((position.namespace, position.name)))
            }
        };
        let in_scope = |ns: &str, name: &str| {
            namespace.is_none_or(|want| want == ns)
                && after
                    .as_ref()
                    .is_none_or(|(a_ns, a_name)| (ns, name) > (a_ns.as_str(), a_name.as_str()))
        };
        // The objects as they are now, then every later change undone, newest first.
        let mut view: BTreeMap<(String, String), Value> = inner
            .objects
            .range((resource.clone(), String::new(), String::new())..)
            .take_while(|((r, _, _), _)| *r == resource)
            .filter(|((_, ns, name), _)| in_scope(ns, name))
            .map(|((_, ns, name), o)| ((ns.clone(), name.clone()), (**o).clone()))
            .collect();
        for change in inner.history.iter().rev() {
            if change.rv <= snapshot {
                break;
            }
            if change.resource != resource {
                continue;
            }
            let (ns, name) = (namespace_of(&change.object), name_of(&change.object));
            if !in_scope(ns, name) {
                continue;
            }
            let key = (ns.to_string(), name.to_string());
            match (&change.change, &change.previous) {
                (ChangeType::Added, _) => {
                    view.remove(&key);
                }
                (_, Some(previous)) => {
                    view.insert(key, Value::clone(previous));
                }
                (_, None) => {
                    view.insert(key, Value::clone(&change.object));
                }
            }
        }
        let mut matching = view
            .into_iter()
            .filter(|(_, o)| labels.matches(o))
            .map(|(key, o)| (key, Self::present(info, o)))
            .filter(|(_, o)| fields.matches(o));
        let mut items = Vec::new();
        let mut last = None;
        for (key, object) in matching.by_ref().take(limit) {
            items.push(object);
            last = Some(key);
        }
        let remaining = matching.count();
        let token = (remaining > 0)
            .then(|| {
                last.map(|(namespace, name)| {
                    ContinueToken {
                        rv: snapshot,
                        namespace,
                        name,
                    }
                    .encode()
                })
            })
            .flatten();
        Ok(Page {
            items,
            rv: snapshot,
            continue_token: token,
            remaining: (remaining > 0).then_some(remaining as u64),
        })
    }

    /// Starts a watch of `info` from `resource_version` (`None` or `"0"`: current objects first).
    pub fn watch(
        &self,
        info: &ResourceInfo,
        resource_version: Option<&str>,
    ) -> Result<WatchStart, ApiError> {
        let mut inner = self.lock();
        let resource = info.storage_key();
        let receiver = inner
            .watch_feeds
            .entry(resource.clone())
            .or_insert_with(|| broadcast::channel(WATCH_BUFFER).0)
            .subscribe();
        let from = match resource_version.filter(|v| !v.is_empty() && *v != "0") {
            None => {
                let initial = inner
                    .objects
                    .range((resource.clone(), String::new(), String::new())..)
                    .take_while(|((r, _, _), _)| *r == resource)
                    .map(|(_, o)| (ChangeType::Added, Self::present(info, (**o).clone())))
                    .collect();
                return Ok(WatchStart {
                    initial,
                    receiver,
                    start_rv: inner.rv,
                });
            }
            Some(v) => v
                .parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {v:?}")))?,
        };
        if from < inner.compacted_through {
            return Err(ApiError::expired(format!(
                "too old resource version: {from} ({})",
                inner.compacted_through
            )));
        }
        let initial = inner
            .history
            .iter()
            .filter(|c| c.rv > from && c.resource == resource)
            .map(|c| (c.change, Self::presented(info, &c.object)))
            .collect();
        Ok(WatchStart {
            initial,
            receiver,
            start_rv: inner.rv.max(from),
        })
    }

    /// Commits a change: new resourceVersion, history, broadcast.
    fn commit(
        &self,
        inner: &mut Inner,
        info: &ResourceInfo,
        change: ChangeType,
        mut object: Value,
        previous: Option<Arc<Value>>,
    ) -> Arc<Value> {
        inner.rv += 1;
        let rv = inner.rv;
        meta_mut(&mut object).insert("resourceVersion".into(), json!(rv.to_string()));
        let key = Self::key(info, namespace_of(&object), name_of(&object));
        let object = Arc::new(object);
        // The history shares the stored versions instead of copying them: the version replaced
        // here is the change's previous object.
        let replaced = match change {
            ChangeType::Deleted => {
                let old = inner.objects.remove(&key);
                inner.gc.update(&key, old.as_deref(), None);
                old
            }
            _ => {
                let old = inner.objects.insert(key.clone(), object.clone());
                inner.gc.update(&key, old.as_deref(), Some(&object));
                old
            }
        };
        let record = Arc::new(Change {
            rv,
            resource: info.storage_key(),
            change,
            object: object.clone(),
            previous: replaced.or(previous),
            at: std::time::SystemTime::now(),
        });
        inner.history.push_back(record.clone());
        while inner.history.len() > HISTORY_LIMIT {
            if let Some(old) = inner.history.pop_front() {
                inner.compacted_through = old.rv;
            }
        }
        inner
            .followers
            .retain(|follower| follower.send(record.clone()).is_ok());
        if let Some(feed) = inner.watch_feeds.get(&record.resource) {
            let _ = feed.send(record.clone());
        }
        let _ = self.changes.send(record);
        object
    }

    /// Creates an object from a request body (`namespace` from the URL).
    pub fn create(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        body: Value,
        options: &WriteOptions,
    ) -> Result<Value, ApiError> {
        self.create_shared(info, namespace, body, options)
            .map(|created| Self::presented(info, &created))
    }

    /// Like [`Store::create`], returning the stored object shared rather than a presented copy
    /// (for the sandbox's own controllers, which write built-in kinds as stored).
    pub fn create_shared(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        body: Value,
        options: &WriteOptions,
    ) -> Result<Arc<Value>, ApiError> {
        self.create_tracked(info, namespace, body, options, Tracking::Update)
    }

    fn create_tracked(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        body: Value,
        options: &WriteOptions,
        tracking: Tracking,
    ) -> Result<Arc<Value>, ApiError> {
        let dry_run = options.dry_run;
        let mut inner = self.lock();
        let applied = (tracking == Tracking::Applied).then(|| body.clone());
        let mut object = Self::prepare_create(&inner, info, namespace, body)?;
        let writer = options.writer(info, Part::Main);
        match applied {
            None => managed::record_update(None, &mut object, info.builtin, &writer),
            Some(applied) => {
                managed::set_entries(&mut object, Vec::new());
                let empty = json!({"metadata": {}});
                managed::record_apply(&empty, &applied, &mut object, info.builtin, true, &writer)?;
            }
        }
        if info.group.is_empty() && info.plural == "pods" {
            pod_quota_admission(&inner, info, &object)?;
        }
        let key = Self::key(info, namespace_of(&object), name_of(&object));
        if inner.objects.contains_key(&key) {
            return Err(ApiError::already_exists(
                &info.qualified_plural(),
                &info.group,
                &info.plural,
                name_of(&object),
            ));
        }
        if dry_run {
            return Ok(Arc::new(object));
        }
        let created = self.commit(&mut inner, info, ChangeType::Added, object, None);
        self.after_write(&mut inner, info, &created);
        Ok(created)
    }

    fn prepare_create(
        inner: &Inner,
        info: &ResourceInfo,
        namespace: Option<&str>,
        body: Value,
    ) -> Result<Value, ApiError> {
        let Value::Object(_) = body else {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        };
        let mut object = crate::convert::to_storage(info, body);
        if let Some(kind) = object["kind"].as_str()
            && kind != info.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind {kind:?} of the body does not match the resource {:?}",
                info.kind
            )));
        }
        // Stored with both, as the API server keeps them, so a list can share the stored object
        // instead of copying it to add them.
        if object["apiVersion"].is_null() {
            object["apiVersion"] = json!(info.api_version());
        }
        if object["kind"].is_null() {
            object["kind"] = json!(info.kind);
        }
        let meta = meta_mut(&mut object);
        if info.namespaced {
            let ns = namespace.unwrap_or("default");
            if let Some(body_ns) = meta.get("namespace").and_then(Value::as_str)
                && !body_ns.is_empty()
                && body_ns != ns
            {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            meta.insert("namespace".into(), json!(ns));
        } else {
            meta.remove("namespace");
        }
        let name = match meta
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            Some(name) => name.to_string(),
            None => match meta.get("generateName").and_then(Value::as_str) {
                Some(prefix) => format!("{prefix}{}", random_suffix()),
                None => {
                    return Err(ApiError::invalid(
                        &info.kind,
                        "",
                        "metadata.name",
                        "FieldValueRequired",
                        "Required value: name or generateName is required",
                    ));
                }
            },
        };
        if info.group == "rbac.authorization.k8s.io" {
            // RBAC names are path segments (`system:discovery`), not DNS subdomains.
            if name == "." || name == ".." || name.contains(['/', '%']) {
                return Err(ApiError::invalid(
                    &info.kind,
                    &name,
                    "metadata.name",
                    "FieldValueInvalid",
                    &format!(
                        "Invalid value: may not be '.' or '..' and may not contain '/' or '%': {name:?}"
                    ),
                ));
            }
        } else if !valid_name(&name) {
            return Err(ApiError::invalid(
                &info.kind,
                &name,
                "metadata.name",
                "FieldValueInvalid",
                "Invalid value: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            ));
        }
        meta.insert("name".into(), json!(name));
        meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
        for server_owned in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "managedFields",
        ] {
            meta.remove(server_owned);
        }
        if info.generation != GenerationRule::None {
            meta.insert("generation".into(), json!(1));
        } else {
            meta.remove("generation");
        }
        if info.namespaced {
            let ns = namespace_of(&object).to_string();
            match inner
                .objects
                .get(&("namespaces".into(), String::new(), ns.clone()))
            {
                None => return Err(ApiError::not_found("namespaces", "", "namespaces", &ns)),
                Some(n) if n["status"]["phase"] == "Terminating" => {
                    return Err(ApiError::forbidden(format!(
                        "unable to create new content in namespace {ns} because it is being terminated"
                    )));
                }
                Some(_) => {}
            }
        }
        if info.status_subresource
            && drops_status_on_create(info)
            && let Some(map) = object.as_object_mut()
        {
            map.remove("status");
        }
        match (info.group.as_str(), info.kind.as_str()) {
            ("", "Namespace") => {
                object["status"] = json!({"phase": "Active"});
                object["spec"] = json!({"finalizers": ["kubernetes"]});
                // The label every namespace carries, so selectors can name namespaces.
                let name = name_of(&object).to_string();
                meta_mut(&mut object)
                    .entry("labels")
                    .or_insert_with(|| json!({}))["kubernetes.io/metadata.name"] = json!(name);
            }
            ("batch", "Job") if object["spec"]["selector"].is_null() => {
                // As the API server does for Jobs without manualSelector: pods are matched by
                // the Job's uid, and the template carries the labels that say so.
                let uid = object["metadata"]["uid"].clone();
                let name = json!(name_of(&object));
                object["spec"]["selector"] =
                    json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
                let template = &mut object["spec"]["template"];
                if !template["metadata"]["labels"].is_object() {
                    template["metadata"]["labels"] = json!({});
                }
                let labels = &mut template["metadata"]["labels"];
                labels["batch.kubernetes.io/controller-uid"] = uid.clone();
                labels["batch.kubernetes.io/job-name"] = name.clone();
                labels["controller-uid"] = uid;
                labels["job-name"] = name;
            }
            ("", "Pod") if object["status"]["phase"].is_null() => {
                object["status"]["phase"] = json!("Pending");
            }
            _ => {}
        }
        crate::defaults::apply(info, &mut object);
        if let Some(schema) = &info.schema {
            crate::structural::admit(schema, &info.kind, &info.group, &mut object)?;
        }
        Ok(object)
    }

    /// Replaces an object (PUT), or its status with [`Part::Status`].
    pub fn update(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        body: Value,
        part: Part,
        options: &WriteOptions,
    ) -> Result<Value, ApiError> {
        self.update_shared(info, namespace, name, body, part, options)
            .map(|updated| Self::presented(info, &updated))
    }

    /// Like [`Store::update`], returning the stored object shared rather than a presented copy.
    pub fn update_shared(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        body: Value,
        part: Part,
        options: &WriteOptions,
    ) -> Result<Arc<Value>, ApiError> {
        let mut inner = self.lock();
        let old = Self::existing(&inner, info, namespace, name)?;
        self.write_update(&mut inner, info, old, body, part, options, Tracking::Update)
    }

    fn existing(
        inner: &Inner,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<Value>, ApiError> {
        inner
            .objects
            .get(&Self::key(info, namespace, name))
            .cloned()
            .ok_or_else(|| {
                ApiError::not_found(&info.qualified_plural(), &info.group, &info.plural, name)
            })
    }

    /// Applies the update rules to `new` (what the client wants) given the stored `old`.
    #[allow(clippy::too_many_arguments)]
    fn write_update(
        &self,
        inner: &mut Inner,
        info: &ResourceInfo,
        old: Arc<Value>,
        new: Value,
        part: Part,
        options: &WriteOptions,
        tracking: Tracking,
    ) -> Result<Arc<Value>, ApiError> {
        let dry_run = options.dry_run;
        let name = name_of(&old).to_string();
        if !new.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        let new = crate::convert::to_storage(info, new);
        if let Some(rv) = meta(&new)["resourceVersion"]
            .as_str()
            .filter(|v| !v.is_empty())
            && Some(rv) != meta(&old)["resourceVersion"].as_str()
        {
            return Err(ApiError::conflict(
                &info.qualified_plural(),
                &info.group,
                &info.plural,
                &name,
            ));
        }
        if let Some(body_name) = meta(&new)["name"].as_str()
            && !body_name.is_empty()
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let mut object = match part {
            Part::Status => {
                // The body is already a copy: it becomes the stored object but for its status,
                // copying from the stored object only the fields that differ.
                let mut object = new;
                let status = object
                    .as_object_mut()
                    .and_then(|fields| fields.remove("status"));
                // The workload controllers record revisions as annotations through /status, which
                // takes annotations for these kinds (and never bumps generation).
                let annotated =
                    info.builtin && matches!(info.kind.as_str(), "Deployment" | "ReplicaSet");
                let annotations = annotated
                    .then(|| meta(&object).get("annotations").cloned())
                    .flatten();
                if let (Some(fields), Some(stored)) = (object.as_object_mut(), old.as_object()) {
                    fields.retain(|key, _| key != "status" && stored.contains_key(key));
                    for (key, value) in stored {
                        if key != "status" && fields.get(key) != Some(value) {
                            fields.insert(key.clone(), value.clone());
                        }
                    }
                }
                object["status"] = status.unwrap_or(Value::Null);
                if annotated {
                    match annotations {
                        Some(a) => meta_mut(&mut object).insert("annotations".into(), a),
                        None => meta_mut(&mut object).remove("annotations"),
                    };
                }
                if object["status"].is_null() {
                    object.as_object_mut().expect("object").remove("status");
                }
                object
            }
            Part::Main => {
                let mut object = new;
                {
                    let m = meta_mut(&mut object);
                    let old_meta = meta(&old);
                    for kept in [
                        "uid",
                        "creationTimestamp",
                        "deletionTimestamp",
                        "deletionGracePeriodSeconds",
                        "namespace",
                        "name",
                        "generation",
                    ] {
                        match old_meta.get(kept) {
                            Some(v) => m.insert(kept.into(), v.clone()),
                            None => m.remove(kept),
                        };
                    }
                    if tracking == Tracking::Update
                        && !m.get("managedFields").is_some_and(Value::is_array)
                    {
                        // A write that does not send managedFields keeps the recorded ones.
                        match old_meta.get("managedFields") {
                            Some(fields) => m.insert("managedFields".into(), fields.clone()),
                            None => m.remove("managedFields"),
                        };
                    }
                }
                if info.status_subresource {
                    match old.get("status") {
                        Some(status) => object["status"] = status.clone(),
                        None => {
                            object.as_object_mut().expect("object").remove("status");
                        }
                    }
                }
                if meta(&old)["deletionTimestamp"].is_string() {
                    let before: HashSet<String> = string_set(&meta(&old)["finalizers"]);
                    let after: HashSet<String> = string_set(&meta(&object)["finalizers"]);
                    if !after.is_subset(&before) {
                        return Err(ApiError::invalid(
                            &info.kind,
                            &name,
                            "metadata.finalizers",
                            "FieldValueForbidden",
                            "Forbidden: no new finalizers can be added if the object is being deleted",
                        ));
                    }
                }
                crate::defaults::apply(info, &mut object);
                object
            }
        };
        if let Some(schema) = &info.schema {
            crate::structural::admit(schema, &info.kind, &info.group, &mut object)?;
        }
        object["apiVersion"] = old["apiVersion"].clone();
        object["kind"] = old["kind"].clone();
        if object["apiVersion"].is_null() {
            object = Self::present(info, object);
        }
        if tracking == Tracking::Update {
            let writer = options.writer(info, part);
            managed::record_update(Some(&old), &mut object, info.builtin, &writer);
        }
        if part == Part::Main && bumps_generation(info.generation, &old, &object) {
            let generation = meta(&old)["generation"].as_i64().unwrap_or(0) + 1;
            meta_mut(&mut object).insert("generation".into(), json!(generation));
        }
        if same_but_version(&object, &old) {
            return Ok(old);
        }
        if dry_run {
            return Ok(Arc::new(object));
        }
        if meta(&object)["deletionTimestamp"].is_string() && !has_finalizers(&object) {
            let removed = self.commit(inner, info, ChangeType::Deleted, object, Some(old));
            self.after_removal(inner);
            return Ok(removed);
        }
        let updated = self.commit(inner, info, ChangeType::Modified, object, Some(old));
        self.after_write(inner, info, &updated);
        Ok(updated)
    }

    /// Patches an object; server-side apply creates it when missing. Returns the object and whether
    /// it was created.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        patch_type: PatchType,
        body: &Value,
        part: Part,
        options: &WriteOptions,
    ) -> Result<(Value, bool), ApiError> {
        self.patch_shared(info, namespace, name, patch_type, body, part, options)
            .map(|(patched, created)| (Self::presented(info, &patched), created))
    }

    /// Like [`Store::patch`], returning the stored object shared rather than a presented copy.
    #[allow(clippy::too_many_arguments)]
    pub fn patch_shared(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        patch_type: PatchType,
        body: &Value,
        part: Part,
        options: &WriteOptions,
    ) -> Result<(Arc<Value>, bool), ApiError> {
        let mut inner = self.lock();
        let old = match Self::existing(&inner, info, namespace, name) {
            Ok(old) => old,
            Err(missing) if patch_type == PatchType::Apply && part == Part::Main => {
                drop(inner);
                let mut object = body.clone();
                meta_mut(&mut object).insert("name".into(), json!(name));
                let ns = info.namespaced.then_some(namespace);
                return self
                    .create_tracked(info, ns, object, options, Tracking::Applied)
                    .map(|o| (o, true))
                    .map_err(|e| if e.code == 404 { missing } else { e });
            }
            Err(missing) => return Err(missing),
        };
        // The patch sees the live resourceVersion (kubectl's JSON patches replace it, which makes
        // them conditional); a patch that leaves it alone is unconditional.
        let mut patched = Self::presented(info, &old);
        match patch_type {
            PatchType::Merge => patch::merge_patch(&mut patched, body),
            PatchType::Json => {
                patch::json_patch(&mut patched, body).map_err(ApiError::unprocessable_patch)?
            }
            PatchType::Strategic => {
                if !info.builtin {
                    return Err(ApiError::unsupported_media_type(
                        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                    ));
                }
                patch::strategic_merge_patch(&mut patched, body)
                    .map_err(ApiError::unprocessable_patch)?
            }
            PatchType::Apply => {
                if info.builtin {
                    patch::strategic_merge_patch(&mut patched, body)
                        .map_err(ApiError::unprocessable_patch)?
                } else {
                    patch::merge_patch(&mut patched, body)
                }
            }
        }
        // A patch whose top level is not an object (`"x"`, `[]`, a JSON patch replacing the root)
        // would leave no object to store: refused, as the API server does, instead of the panic
        // that reading its metadata would be.
        if !patched.is_object() {
            return Err(ApiError::bad_request(format!(
                "the patch would make the object a JSON {}, not an object; send a JSON object (merge, strategic merge) or a list of operations (JSON patch)",
                match &patched {
                    Value::Array(_) => "array",
                    Value::String(_) => "string",
                    Value::Number(_) => "number",
                    Value::Bool(_) => "boolean",
                    _ => "null",
                }
            )));
        }
        if meta(&patched)["resourceVersion"].is_null()
            && let Some(rv) = meta(&old)["resourceVersion"].as_str()
        {
            meta_mut(&mut patched).insert("resourceVersion".into(), json!(rv));
        }
        let tracking = if patch_type == PatchType::Apply {
            let writer = options.writer(info, part);
            let live = Self::present_shared(info, &old);
            managed::record_apply(
                &live,
                body,
                &mut patched,
                info.builtin,
                options.force,
                &writer,
            )?;
            Tracking::Applied
        } else {
            Tracking::Update
        };
        self.write_update(&mut inner, info, old, patched, part, options, tracking)
            .map(|o| (o, false))
    }

    /// Deletes an object: at once without finalizers, otherwise by marking it for deletion.
    pub fn delete(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        options: &DeleteOptions,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let mut inner = self.lock();
        let old = Self::existing(&inner, info, namespace, name)?;
        if info.kind == "Namespace"
            && info.group.is_empty()
            && ["default", "kube-system"].contains(&name)
        {
            return Err(ApiError::forbidden(format!(
                "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
            )));
        }
        if let Some(uid) = &options.uid
            && meta(&old)["uid"].as_str() != Some(uid.as_str())
        {
            return Err(ApiError {
                message: format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta(&old)["uid"].as_str().unwrap_or("")
                ),
                ..ApiError::conflict(&info.qualified_plural(), &info.group, &info.plural, name)
            });
        }
        if let Some(rv) = &options.resource_version
            && meta(&old)["resourceVersion"].as_str() != Some(rv.as_str())
        {
            return Err(ApiError::conflict(
                &info.qualified_plural(),
                &info.group,
                &info.plural,
                name,
            ));
        }
        if dry_run {
            return Ok(Self::presented(info, &old));
        }
        let deleted = self.delete_object(&mut inner, info, old, options.propagation.as_deref());
        Ok(Self::presented(info, &deleted))
    }

    fn delete_object(
        &self,
        inner: &mut Inner,
        info: &ResourceInfo,
        old: Arc<Value>,
        propagation: Option<&str>,
    ) -> Arc<Value> {
        let marked = meta(&old)["deletionTimestamp"].is_string();
        let is_namespace = info.group.is_empty() && info.kind == "Namespace";
        let is_crd = info.kind == "CustomResourceDefinition";
        let mut object = Value::clone(&old);
        let finalizer = match propagation {
            Some("Foreground") => Some("foregroundDeletion"),
            Some("Orphan") => Some("orphan"),
            _ => None,
        };
        if let Some(f) = finalizer
            && !marked
        {
            let m = meta_mut(&mut object);
            let mut list = m
                .get("finalizers")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if !list.contains(&json!(f)) {
                list.push(json!(f));
            }
            m.insert("finalizers".into(), Value::Array(list));
        }
        if has_finalizers(&object) || is_namespace || is_crd {
            if marked {
                return old;
            }
            let m = meta_mut(&mut object);
            m.insert("deletionTimestamp".into(), json!(now_rfc3339()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            if is_namespace {
                object["status"]["phase"] = json!("Terminating");
            }
            let updated = self.commit(inner, info, ChangeType::Modified, object, Some(old));
            self.run_controllers(inner);
            return updated;
        }
        let removed = self.commit(inner, info, ChangeType::Deleted, object, Some(old));
        self.after_removal(inner);
        removed
    }

    fn after_write(&self, inner: &mut Inner, info: &ResourceInfo, object: &Value) {
        if info.kind == "CustomResourceDefinition" && info.group == "apiextensions.k8s.io" {
            self.establish_crd(inner, info, object);
        }
        if meta(object)["deletionTimestamp"].is_string() {
            self.run_controllers(inner);
        }
    }

    fn after_removal(&self, inner: &mut Inner) {
        self.run_controllers(inner);
    }

    /// CRD registration: validate names, serve the versions, write the Established status.
    fn establish_crd(&self, inner: &mut Inner, info: &ResourceInfo, crd: &Value) {
        if meta(crd)["deletionTimestamp"].is_string() {
            return;
        }
        let name = name_of(crd).to_string();
        let served = resources_of_crd(crd);
        let expected = format!(
            "{}.{}",
            crd["spec"]["names"]["plural"].as_str().unwrap_or(""),
            crd["spec"]["group"].as_str().unwrap_or("")
        );
        let accepted = !served.is_empty() && expected == name;
        inner
            .registry
            .set_crd(&name, if accepted { served } else { Vec::new() });
        let names = &crd["spec"]["names"];
        let kind = names["kind"].as_str().unwrap_or_default();
        let mut accepted_names = names.clone();
        if accepted_names["singular"].is_null() {
            accepted_names["singular"] = json!(kind.to_lowercase());
        }
        if accepted_names["listKind"].is_null() {
            accepted_names["listKind"] = json!(format!("{kind}List"));
        }
        let time = crd["status"]["conditions"]
            .as_array()
            .and_then(|c| c.first())
            .and_then(|c| c["lastTransitionTime"].as_str())
            .map(String::from)
            .unwrap_or_else(now_rfc3339);
        let storage: Vec<Value> = crd["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| v["storage"].as_bool() == Some(true))
            .map(|v| v["name"].clone())
            .collect();
        let status = if accepted {
            json!({
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": time},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": time}
                ],
                "acceptedNames": accepted_names,
                "storedVersions": storage
            })
        } else {
            json!({
                "conditions": [
                    {"type": "NamesAccepted", "status": "False", "reason": "InvalidName", "message": format!("metadata.name must be {expected:?} and the CRD needs a group, kind, plural and one served version"), "lastTransitionTime": time},
                    {"type": "Established", "status": "False", "reason": "NotAccepted", "message": "not all names are accepted", "lastTransitionTime": time}
                ],
                "acceptedNames": {"plural": "", "kind": ""},
                "storedVersions": storage
            })
        };
        if crd["status"] != status {
            let mut updated = crd.clone();
            updated["status"] = status;
            self.commit(
                inner,
                info,
                ChangeType::Modified,
                updated,
                Some(Arc::new(crd.clone())),
            );
        }
    }

    /// The built-in controllers that react to deletions: namespace and CRD cleanup, garbage
    /// collection of dependents, foreground and orphan propagation. Runs until nothing changes.
    /// Garbage collection and finalization, after a change that may need them: dependents of
    /// deleted owners go, owners waiting on their dependents finish. Only the objects the changes
    /// since the last run concern are read, unless a namespace or CRD is being emptied.
    fn run_controllers(&self, inner: &mut Inner) {
        loop {
            let acted = if inner.gc.clearing_a_scope() {
                inner.gc.pending.clear();
                self.collect_everything(inner)
            } else {
                self.collect_pending(inner)
            };
            if !acted {
                break;
            }
        }
    }

    /// One round of [`Store::run_controllers`] over the objects [`GcIndex`] marked as pending;
    /// whether it changed anything.
    fn collect_pending(&self, inner: &mut Inner) -> bool {
        let pending: Vec<Key> = inner.gc.pending.drain().collect();
        let mut infos: HashMap<String, Option<ResourceInfo>> = HashMap::new();
        let mut acted = false;
        for key in pending {
            let Some(object) = inner.objects.get(&key).map(|o| (**o).clone()) else {
                continue;
            };
            let info = infos
                .entry(key.0.clone())
                .or_insert_with(|| {
                    inner
                        .registry
                        .all()
                        .find(|i| i.storage_key() == key.0)
                        .cloned()
                })
                .clone();
            let Some(info) = info else {
                continue;
            };
            let owners = owner_uids(&object);
            let owner_objects: Vec<&Value> = owners
                .iter()
                .filter_map(|u| inner.gc.keys_by_uid.get(u))
                .filter_map(|k| inner.objects.get(k).map(|o| &**o))
                .collect();
            let marked = meta(&object)["deletionTimestamp"].is_string();
            if !marked {
                let orphaned = !owners.is_empty() && owner_objects.is_empty();
                let owner_foreground = owner_objects
                    .iter()
                    .any(|o| string_set(&meta(o)["finalizers"]).contains("foregroundDeletion"));
                if orphaned || owner_foreground {
                    self.delete_object_quietly(inner, &info, object);
                    acted = true;
                    continue;
                }
            }
            let orphaning: HashSet<String> = owner_objects
                .iter()
                .filter(|o| {
                    meta(o)["deletionTimestamp"].is_string()
                        && string_set(&meta(o)["finalizers"]).contains("orphan")
                })
                .filter_map(|o| uid_of(o).map(String::from))
                .collect();
            if !orphaning.is_empty() {
                let mut updated = object.clone();
                if let Some(refs) = meta_mut(&mut updated)
                    .get_mut("ownerReferences")
                    .and_then(Value::as_array_mut)
                {
                    refs.retain(|r| !r["uid"].as_str().is_some_and(|u| orphaning.contains(u)));
                }
                self.commit(
                    inner,
                    &info,
                    ChangeType::Modified,
                    updated,
                    Some(Arc::new(object)),
                );
                acted = true;
                continue;
            }
            if marked {
                let has_dependents = uid_of(&object)
                    .and_then(|u| inner.gc.dependents.get(u))
                    .is_some_and(|set| !set.is_empty());
                let finalizers = string_set(&meta(&object)["finalizers"]);
                for finalizer in ["foregroundDeletion", "orphan"] {
                    if finalizers.contains(finalizer) && !has_dependents {
                        let current = inner.objects.get(&key).map(|o| (**o).clone());
                        if let Some(current) = current {
                            self.finish_finalizer(inner, &info, current, finalizer);
                            acted = true;
                        }
                    }
                }
            }
        }
        acted
    }

    /// Removes `finalizer` from `object`, deleting it when no finalizer is left.
    fn finish_finalizer(
        &self,
        inner: &mut Inner,
        info: &ResourceInfo,
        object: Value,
        finalizer: &str,
    ) {
        let mut updated = object.clone();
        if let Some(list) = meta_mut(&mut updated)
            .get_mut("finalizers")
            .and_then(Value::as_array_mut)
        {
            list.retain(|f| f != finalizer);
        }
        if info.kind == "Namespace" {
            updated["spec"]["finalizers"] = json!([]);
        }
        if has_finalizers(&updated) {
            self.commit(
                inner,
                info,
                ChangeType::Modified,
                updated,
                Some(Arc::new(object)),
            );
        } else {
            if info.kind == "CustomResourceDefinition" {
                inner.registry.set_crd(name_of(&object), Vec::new());
            }
            self.commit(
                inner,
                info,
                ChangeType::Deleted,
                updated,
                Some(Arc::new(object)),
            );
        }
    }

    /// One round of [`Store::run_controllers`] that reads every object, while a namespace or a
    /// CRD is being emptied; whether it changed anything.
    fn collect_everything(&self, inner: &mut Inner) -> bool {
        {
            let mut acted = false;
            let uids: HashSet<String> = inner
                .objects
                .values()
                .filter_map(|o| meta(o)["uid"].as_str().map(String::from))
                .collect();
            let mut to_delete: Vec<(ResourceInfo, Value)> = Vec::new();
            let mut to_finish: Vec<(ResourceInfo, Value, &'static str)> = Vec::new();
            let infos: BTreeMap<String, ResourceInfo> = inner
                .registry
                .all()
                .map(|i| (i.storage_key(), i.clone()))
                .collect();
            let terminating_namespaces: HashSet<String> = inner
                .objects
                .iter()
                .filter(|((r, _, _), o)| {
                    r == "namespaces" && meta(o)["deletionTimestamp"].is_string()
                })
                .map(|((_, _, n), _)| n.clone())
                .collect();
            let dying_crds: Vec<Value> = inner
                .objects
                .iter()
                .filter(|((r, _, _), o)| {
                    r == "customresourcedefinitions.apiextensions.k8s.io"
                        && meta(o)["deletionTimestamp"].is_string()
                })
                .map(|(_, o)| (**o).clone())
                .collect();
            let dying_crd_keys: HashSet<String> =
                dying_crds.iter().map(|c| name_of(c).to_string()).collect();
            let foreground_owners: HashSet<String> = inner
                .objects
                .values()
                .filter(|o| string_set(&meta(o)["finalizers"]).contains("foregroundDeletion"))
                .filter_map(|o| meta(o)["uid"].as_str().map(String::from))
                .collect();
            let orphaning_owners: HashSet<String> = inner
                .objects
                .values()
                .filter(|o| {
                    string_set(&meta(o)["finalizers"]).contains("orphan")
                        && meta(o)["deletionTimestamp"].is_string()
                })
                .filter_map(|o| meta(o)["uid"].as_str().map(String::from))
                .collect();
            let mut orphan_updates: Vec<(ResourceInfo, Value)> = Vec::new();
            for ((resource, ns, _), object) in &inner.objects {
                let object: &Value = object;
                let Some(info) = infos.get(resource) else {
                    continue;
                };
                let marked = meta(object)["deletionTimestamp"].is_string();
                let owners: Vec<&str> = meta(object)["ownerReferences"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r["uid"].as_str())
                    .collect();
                if !marked {
                    let in_dying_namespace = !ns.is_empty() && terminating_namespaces.contains(ns);
                    let of_dying_crd = dying_crd_keys.contains(resource);
                    let orphaned = !owners.is_empty() && owners.iter().all(|u| !uids.contains(*u));
                    let owner_foreground = owners.iter().any(|u| foreground_owners.contains(*u));
                    if in_dying_namespace || of_dying_crd || orphaned || owner_foreground {
                        to_delete.push((info.clone(), object.clone()));
                        continue;
                    }
                }
                if owners.iter().any(|u| orphaning_owners.contains(*u)) {
                    orphan_updates.push((info.clone(), object.clone()));
                }
            }
            for (info, object) in orphan_updates {
                let mut updated = object.clone();
                if let Some(refs) = meta_mut(&mut updated)
                    .get_mut("ownerReferences")
                    .and_then(Value::as_array_mut)
                {
                    refs.retain(|r| {
                        !r["uid"]
                            .as_str()
                            .is_some_and(|u| orphaning_owners.contains(u))
                    });
                }
                self.commit(
                    inner,
                    &info,
                    ChangeType::Modified,
                    updated,
                    Some(Arc::new(object)),
                );
                acted = true;
            }
            for (info, object) in to_delete {
                self.delete_object_quietly(inner, &info, object);
                acted = true;
            }
            // Owners waiting on their dependents, namespaces and CRDs waiting to be emptied.
            let mut status_updates = Vec::new();
            for ((resource, _, _), object) in &inner.objects {
                let object: &Value = object;
                if !meta(object)["deletionTimestamp"].is_string() {
                    continue;
                }
                let Some(info) = infos.get(resource) else {
                    continue;
                };
                let uid = meta(object)["uid"].as_str().unwrap_or_default();
                let finalizers = string_set(&meta(object)["finalizers"]);
                let has_dependents = inner.objects.values().any(|o| {
                    meta(o)["ownerReferences"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|r| r["uid"] == uid)
                });
                if finalizers.contains("foregroundDeletion") && !has_dependents {
                    to_finish.push((info.clone(), object.clone(), "foregroundDeletion"));
                }
                if finalizers.contains("orphan") && !has_dependents {
                    to_finish.push((info.clone(), object.clone(), "orphan"));
                }
                if resource == "namespaces" {
                    let name = name_of(object);
                    let empty = !inner.objects.keys().any(|(_, ns, _)| ns == name);
                    if empty {
                        to_finish.push((info.clone(), object.clone(), "kubernetes"));
                    } else {
                        let status = terminating_namespace_status(inner, object);
                        if object["status"] != status {
                            let mut updated = object.clone();
                            updated["status"] = status;
                            status_updates.push((info.clone(), object.clone(), updated));
                        }
                    }
                }
                if resource == "customresourcedefinitions.apiextensions.k8s.io" {
                    let name = name_of(object);
                    let empty = !inner.objects.keys().any(|(r, _, _)| r == name);
                    if empty {
                        to_finish.push((
                            info.clone(),
                            object.clone(),
                            "customresourcecleanup.apiextensions.k8s.io",
                        ));
                    }
                }
            }
            for (info, object, updated) in status_updates {
                self.commit(
                    inner,
                    &info,
                    ChangeType::Modified,
                    updated,
                    Some(Arc::new(object)),
                );
            }
            for (info, object, finalizer) in to_finish {
                self.finish_finalizer(inner, &info, object, finalizer);
                acted = true;
            }
            acted
        }
    }

    fn delete_object_quietly(&self, inner: &mut Inner, info: &ResourceInfo, object: Value) {
        if has_finalizers(&object) || (info.group.is_empty() && info.kind == "Namespace") {
            let mut updated = object.clone();
            meta_mut(&mut updated).insert("deletionTimestamp".into(), json!(now_rfc3339()));
            meta_mut(&mut updated).insert("deletionGracePeriodSeconds".into(), json!(0));
            self.commit(
                inner,
                info,
                ChangeType::Modified,
                updated,
                Some(Arc::new(object)),
            );
        } else {
            self.commit(
                inner,
                info,
                ChangeType::Deleted,
                object.clone(),
                Some(Arc::new(object)),
            );
        }
    }
}

/// A Terminating namespace's status as the namespace controller reports it: what is left in it
/// and which finalizers hold it (`kubectl describe ns`).
fn terminating_namespace_status(inner: &Inner, namespace: &Value) -> Value {
    let name = name_of(namespace);
    let mut remaining: BTreeMap<&str, usize> = BTreeMap::new();
    let mut finalizers: BTreeMap<String, usize> = BTreeMap::new();
    for ((resource, ns, _), object) in &inner.objects {
        if ns != name {
            continue;
        }
        *remaining.entry(resource.as_str()).or_default() += 1;
        for finalizer in string_set(&meta(object)["finalizers"]) {
            *finalizers.entry(finalizer).or_default() += 1;
        }
    }
    let since = namespace["status"]["conditions"]
        .as_array()
        .and_then(|c| c.first())
        .and_then(|c| c["lastTransitionTime"].as_str())
        .map(String::from)
        .unwrap_or_else(now_rfc3339);
    let condition = |kind: &str, status: bool, reason: &str, message: String| {
        json!({"type": kind, "status": if status { "True" } else { "False" },
            "reason": reason, "message": message, "lastTransitionTime": since})
    };
    let listed = |counts: Vec<String>| counts.join(", ");
    let content = listed(
        remaining
            .iter()
            .map(|(resource, n)| {
                let resource = if resource.contains('.') {
                    resource.to_string()
                } else {
                    format!("{resource}.")
                };
                format!("{resource} has {n} resource instances")
            })
            .collect(),
    );
    let held = listed(
        finalizers
            .iter()
            .map(|(f, n)| format!("{f} in {n} resource instances"))
            .collect(),
    );
    json!({"phase": "Terminating", "conditions": [
        condition("NamespaceDeletionDiscoveryFailure", false, "ResourcesDiscovered", "All resources successfully discovered".into()),
        condition("NamespaceDeletionGroupVersionParsingFailure", false, "ParsedGroupVersions", "All legacy kube types successfully parsed".into()),
        condition("NamespaceDeletionContentFailure", false, "ContentDeleted", "All content successfully deleted, may be waiting on finalization".into()),
        condition("NamespaceContentRemaining", true, "SomeResourcesRemain", format!("Some resources are remaining: {content}")),
        condition("NamespaceFinalizersRemaining", !finalizers.is_empty(),
            if finalizers.is_empty() { "ContentHasNoFinalizers" } else { "SomeFinalizersRemain" },
            if finalizers.is_empty() { "All content-preserving finalizers finished".into() } else { format!("Some content in the namespace has finalizers remaining: {held}") }),
    ]})
}

fn string_set(value: &Value) -> HashSet<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(String::from))
        .collect()
}

fn bumps_generation(rule: GenerationRule, old: &Value, new: &Value) -> bool {
    match rule {
        GenerationRule::None => false,
        GenerationRule::Spec => old["spec"] != new["spec"],
        GenerationRule::SpecOrAnnotations => {
            old["spec"] != new["spec"] || meta(old)["annotations"] != meta(new)["annotations"]
        }
        GenerationRule::AnythingButMetadata => {
            let strip = |o: &Value| {
                let mut copy = o.clone();
                if let Some(map) = copy.as_object_mut() {
                    map.remove("metadata");
                    map.remove("apiVersion");
                    map.remove("kind");
                }
                copy
            };
            strip(old) != strip(new)
        }
    }
}

/// Kubernetes' ResourceQuota admission for the `pods` count: a new pod is refused (403, "exceeded
/// quota") when a quota of its namespace limits `spec.hard.pods` and the namespace's pods that have
/// not ended already reach the limit, as a full quota stops a rollout in a real cluster.
fn pod_quota_admission(inner: &Inner, pods: &ResourceInfo, pod: &Value) -> Result<(), ApiError> {
    let namespace = namespace_of(pod);
    let Some(quotas) = inner.registry.get("", "v1", "resourcequotas") else {
        return Ok(());
    };
    let in_namespace = |storage: String| {
        let start = (storage.clone(), namespace.to_string(), String::new());
        inner
            .objects
            .range(start..)
            .take_while(move |((s, n, _), _)| *s == storage && n == namespace)
            .map(|(_, object)| object)
    };
    // Counted only when the namespace has a quota: a pod's creation must not cost every pod.
    let mut counted = None;
    for quota in in_namespace(quotas.storage_key()) {
        let Some(limit) = quota["spec"]["hard"]["pods"]
            .as_str()
            .and_then(|l| l.parse::<usize>().ok())
            .or_else(|| quota["spec"]["hard"]["pods"].as_u64().map(|l| l as usize))
        else {
            continue;
        };
        let used = *counted.get_or_insert_with(|| {
            in_namespace(pods.storage_key())
                .filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
                .count()
        });
        if used >= limit {
            let meta = &pod["metadata"];
            let shown = meta["generateName"]
                .as_str()
                .filter(|g| !g.is_empty())
                .or(meta["name"].as_str())
                .unwrap_or_default();
            return Err(ApiError::forbidden(format!(
                "pods \"{shown}\" is forbidden: exceeded quota: {}, requested: pods=1, used: pods={used}, limited: pods={limit}",
                name_of(quota)
            )));
        }
    }
    Ok(())
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
