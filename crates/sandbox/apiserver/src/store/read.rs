//! Creating the store, reading and listing objects, watches, and the one place a change is committed.

use super::state::*;
use super::types::*;
use crate::registry::{Registry, ResourceInfo};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, mpsc};

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

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
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
    pub(crate) fn presented(info: &ResourceInfo, object: &Value) -> Value {
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

    pub(crate) fn key(info: &ResourceInfo, namespace: &str, name: &str) -> Key {
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
    pub(crate) fn commit(
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
}
