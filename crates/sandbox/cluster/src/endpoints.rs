//! The Endpoints controller: keeps each Service's Endpoints listing the pods it selects, ready ones
//! under `addresses`, so `kubectl get endpoints` shows what the Service would reach.

use serde_json::{Value, json};
use serin_sandbox_apiserver::services::{is_ready, selects, served_address, target_port};
use serin_sandbox_apiserver::store::{
    Change, ChangeType, DeleteOptions, Part, Store, WriteOptions,
};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// Marks Endpoints this controller wrote, so it only deletes its own when their Service goes.
const MANAGED_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// The Endpoints `subsets` for `service`: pods grouped by their resolved ports, ready ones under
/// `addresses`, the others under `notReadyAddresses`.
fn subsets(service: &Value, pods: &[&Value]) -> Value {
    let mut groups: BTreeMap<String, (Value, Vec<Value>, Vec<Value>)> = BTreeMap::new();
    for pod in pods.iter().filter(|p| selects(service, p)) {
        if pod["metadata"]["deletionTimestamp"].is_string() {
            continue;
        }
        let Some(ip) = pod["status"]["podIP"].as_str() else {
            continue;
        };
        let mut ports = Vec::new();
        for sp in service["spec"]["ports"].as_array().into_iter().flatten() {
            let Some(container_port) = target_port(sp, pod) else {
                continue;
            };
            let port =
                served_address(pod, container_port).map_or(container_port, |a| u64::from(a.port()));
            let mut entry =
                json!({"port": port, "protocol": sp["protocol"].as_str().unwrap_or("TCP")});
            if let Some(name) = sp["name"].as_str() {
                entry["name"] = json!(name);
            }
            ports.push(entry);
        }
        if ports.is_empty() {
            continue;
        }
        let ports = Value::Array(ports);
        let address = json!({"ip": ip, "nodeName": pod["spec"]["nodeName"],
            "targetRef": {"kind": "Pod", "namespace": pod["metadata"]["namespace"], "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}});
        let group = groups
            .entry(ports.to_string())
            .or_insert_with(|| (ports, Vec::new(), Vec::new()));
        if is_ready(pod) {
            group.1.push(address);
        } else {
            group.2.push(address);
        }
    }
    let subsets: Vec<Value> = groups
        .into_values()
        .map(|(ports, ready, not_ready)| {
            let mut subset = json!({"ports": ports});
            if !ready.is_empty() {
                subset["addresses"] = Value::Array(ready);
            }
            if !not_ready.is_empty() {
                subset["notReadyAddresses"] = Value::Array(not_ready);
            }
            subset
        })
        .collect();
    Value::Array(subsets)
}

/// A (namespace, label key, label value) triple, hashed: the key of the pod index. Two triples
/// with the same hash only make a Service look at a pod its selector then turns down.
fn label_hash(namespace: &str, key: &str, value: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (namespace, key, value).hash(&mut hasher);
    hasher.finish()
}

fn pod_label_hashes(pod: &Value) -> Vec<u64> {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    pod["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(key, value)| Some(label_hash(namespace, key, value.as_str()?)))
        .collect()
}

fn text<'a>(object: &'a Value, field: &str) -> &'a str {
    object["metadata"][field].as_str().unwrap_or_default()
}

/// A Service's key: its namespace and name.
type ServiceKey = (String, String);

/// The Endpoints controller: every Service with a selector gets an Endpoints object of the same
/// name listing its pods; Endpoints it wrote for a Service that is gone are deleted. It follows
/// the store's changes ([`EndpointsController::note`]) into an index of pods and Services by
/// label, so a pass recomputes only the Services whose pods, own object or Endpoints changed.
#[derive(Default)]
pub struct EndpointsController {
    /// Whether a pass has read every Service, pod and Endpoints once; from then on the noted
    /// changes say what to look at.
    seeded: bool,
    /// Each pod (by uid) with its label hashes.
    pods: HashMap<String, (Arc<Value>, Vec<u64>)>,
    /// Pod uids by label hash.
    pods_by_label: HashMap<u64, BTreeSet<String>>,
    /// Services by the hashes of their selector's labels, and each one's hashes.
    services_by_label: HashMap<u64, HashSet<ServiceKey>>,
    service_hashes: HashMap<ServiceKey, Vec<u64>>,
    /// The resourceVersion of the Endpoints each Service's last write left, so that write's own
    /// change does not send it round again.
    written: HashMap<ServiceKey, String>,
    /// The Services the next pass recomputes.
    dirty: HashSet<ServiceKey>,
}

impl EndpointsController {
    /// Takes one committed change into the indexes and marks the Services it can affect.
    pub fn note(&mut self, change: &Change) {
        let gone = change.change == ChangeType::Deleted;
        match change.resource.as_str() {
            "pods" => self.note_pod(&change.object, gone),
            "services" => self.note_service(&change.object, gone),
            "endpoints" => {
                let key = key_of(&change.object);
                let own = self
                    .written
                    .get(&key)
                    .is_some_and(|rv| *rv == text(&change.object, "resourceVersion"));
                if !own {
                    self.dirty.insert(key);
                }
            }
            _ => {}
        }
    }

    fn note_pod(&mut self, pod: &Arc<Value>, gone: bool) {
        let uid = text(pod, "uid").to_string();
        let old = self.pods.remove(&uid).map(|(_, hashes)| hashes);
        for hash in old.iter().flatten() {
            if let Some(uids) = self.pods_by_label.get_mut(hash) {
                uids.remove(&uid);
                if uids.is_empty() {
                    self.pods_by_label.remove(hash);
                }
            }
        }
        let hashes = if gone {
            Vec::new()
        } else {
            pod_label_hashes(pod)
        };
        for hash in old.iter().flatten().chain(&hashes) {
            if let Some(services) = self.services_by_label.get(hash) {
                self.dirty.extend(services.iter().cloned());
            }
        }
        if !gone {
            for hash in &hashes {
                self.pods_by_label
                    .entry(*hash)
                    .or_default()
                    .insert(uid.clone());
            }
            self.pods.insert(uid, (pod.clone(), hashes));
        }
    }

    fn note_service(&mut self, service: &Value, gone: bool) {
        let key = key_of(service);
        for hash in self.service_hashes.remove(&key).into_iter().flatten() {
            if let Some(keys) = self.services_by_label.get_mut(&hash) {
                keys.remove(&key);
                if keys.is_empty() {
                    self.services_by_label.remove(&hash);
                }
            }
        }
        if !gone {
            let hashes = selector_hashes(service);
            for hash in &hashes {
                self.services_by_label
                    .entry(*hash)
                    .or_default()
                    .insert(key.clone());
            }
            self.service_hashes.insert(key.clone(), hashes);
        }
        self.dirty.insert(key);
    }

    /// Reads every Service, pod and Endpoints (the first pass, before any change was noted).
    fn seed(&mut self, store: &Store) {
        let shared =
            |plural: &str| store.list_shared(&store.resource("", "v1", plural).expect("built in"));
        for pod in shared("pods") {
            self.note_pod(&pod, false);
        }
        for service in shared("services") {
            self.note_service(&service, false);
        }
        for endpoints in shared("endpoints") {
            self.dirty.insert(key_of(&endpoints));
        }
        self.seeded = true;
    }

    /// One pass over the Services marked since the last; returns whether anything changed.
    pub fn sync(&mut self, store: &Store, writes: &WriteOptions) -> bool {
        if !self.seeded {
            self.seed(store);
        }
        let services = store.resource("", "v1", "services").expect("built in");
        let endpoints = store.resource("", "v1", "endpoints").expect("built in");
        let mut changed = false;
        let work: BTreeSet<ServiceKey> = std::mem::take(&mut self.dirty).into_iter().collect();
        for key in work {
            let (namespace, name) = (key.0.as_str(), key.1.as_str());
            let current = store.get_shared(&endpoints, namespace, name);
            let service = store
                .get_shared(&services, namespace, name)
                .filter(|s| s["spec"]["selector"].is_object())
                .filter(|s| !s["metadata"]["deletionTimestamp"].is_string());
            let Some(service) = service else {
                if let Some(current) = current
                    && current["metadata"]["annotations"][MANAGED_ANNOTATION].is_string()
                {
                    let deleted = store.delete(
                        &endpoints,
                        namespace,
                        name,
                        &DeleteOptions::default(),
                        false,
                    );
                    changed |= deleted.is_ok();
                }
                self.written.remove(&key);
                continue;
            };
            let subsets = subsets(&service, &self.candidates(&service));
            let written = match &current {
                Some(current)
                    if current["subsets"] == subsets
                        || (current["subsets"].is_null() && subsets == json!([])) =>
                {
                    continue;
                }
                Some(current) => {
                    let mut updated = Value::clone(current);
                    updated["subsets"] = subsets;
                    updated["metadata"]["annotations"][MANAGED_ANNOTATION] =
                        json!(serin_sandbox_apiserver::store::now_rfc3339());
                    store.update_shared(&endpoints, namespace, name, updated, Part::Main, writes)
                }
                None => {
                    let mut object = json!({"metadata": {"name": name, "labels": service["metadata"]["labels"],
                        "annotations": {MANAGED_ANNOTATION: serin_sandbox_apiserver::store::now_rfc3339()}}});
                    if object["metadata"]["labels"].is_null() {
                        object["metadata"]
                            .as_object_mut()
                            .map(|m| m.remove("labels"));
                    }
                    if subsets != json!([]) {
                        object["subsets"] = subsets;
                    }
                    store.create_shared(&endpoints, Some(namespace), object, writes)
                }
            };
            match written {
                Ok(written) => {
                    changed = true;
                    let rv = text(&written, "resourceVersion").to_string();
                    self.written.insert(key, rv);
                }
                // Tried again next pass, as the controller requeues a failed sync.
                Err(_) => {
                    self.dirty.insert(key);
                }
            }
        }
        changed
    }

    /// The pods with the rarest of the Service's selector labels: a superset of those it selects.
    fn candidates(&self, service: &Value) -> Vec<&Value> {
        let key = key_of(service);
        self.service_hashes
            .get(&key)
            .into_iter()
            .flatten()
            .filter_map(|h| self.pods_by_label.get(h))
            .min_by_key(|uids| uids.len())
            .into_iter()
            .flatten()
            .filter_map(|uid| self.pods.get(uid).map(|(pod, _)| &**pod))
            .collect()
    }
}

fn key_of(object: &Value) -> ServiceKey {
    (
        text(object, "namespace").to_string(),
        text(object, "name").to_string(),
    )
}

fn selector_hashes(service: &Value) -> Vec<u64> {
    let namespace = text(service, "namespace");
    service["spec"]["selector"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(key, value)| label_hash(namespace, key, value.as_str().unwrap_or_default()))
        .collect()
}
