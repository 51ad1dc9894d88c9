//! Services: resolving a cluster host name (`name.namespace[.svc[.cluster.local]][:port]`) to the
//! loopback addresses of the ready pods a Service selects, and an Endpoints controller that keeps
//! `kubectl get endpoints` showing them.

use crate::runtime::PORTS_FIELD;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{Change, ChangeType, DeleteOptions, Part, Store, WriteOptions};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

/// A host name split into the Service it names and the port asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceHost {
    /// The Service's name.
    pub name: String,
    /// The Service's namespace.
    pub namespace: String,
    /// The Service port asked for, if the host carried one.
    pub port: Option<u16>,
}

/// Why a host did not resolve.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum ResolveError {
    /// The host is not a cluster Service name.
    #[error("{0:?} is not a Service host (name.namespace[.svc[.cluster.local]][:port])")]
    NotAServiceHost(String),
    /// No such Service.
    #[error("service {0} not found")]
    NoService(String),
    /// The Service has no port matching the one asked for.
    #[error("service {0} has no port {1}")]
    NoPort(String, String),
}

/// Splits `host` (optionally with `:port`) into a Service name, namespace and port. A bare `name`
/// resolves in `default_namespace`, as from a pod in that namespace.
pub fn parse_host(host: &str, default_namespace: &str) -> Option<ServiceHost> {
    let host = host.trim().trim_end_matches('.');
    let (name_part, port) = match host.rsplit_once(':') {
        Some((h, p)) => (h, Some(p.parse::<u16>().ok()?)),
        None => (host, None),
    };
    let name_part = name_part.to_ascii_lowercase();
    let labels: Vec<&str> = name_part.split('.').collect();
    let (name, namespace) = match labels.as_slice() {
        [name] => (*name, default_namespace),
        [name, ns] | [name, ns, "svc"] | [name, ns, "svc", "cluster", "local"] => (*name, *ns),
        _ => return None,
    };
    let valid = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    (valid(name) && valid(namespace)).then(|| ServiceHost {
        name: name.to_string(),
        namespace: namespace.to_string(),
        port,
    })
}

fn all(
    store: &Store,
    group: &str,
    version: &str,
    plural: &str,
    namespace: Option<&str>,
) -> Vec<Value> {
    let info = store.resource(group, version, plural).expect("built in");
    store
        .list(
            &info,
            namespace,
            &LabelSelector::default(),
            &FieldSelector::default(),
        )
        .0
}

fn is_ready(pod: &Value) -> bool {
    !pod["metadata"]["deletionTimestamp"].is_string()
        && pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn selects(service: &Value, pod: &Value) -> bool {
    let Some(selector) = service["spec"]["selector"].as_object() else {
        return false;
    };
    !selector.is_empty()
        && selector
            .iter()
            .all(|(k, v)| pod["metadata"]["labels"][k.as_str()] == *v)
}

/// The container port a Service port's `targetPort` means in `pod`: a number, a container port
/// name, or (absent) the Service port itself.
fn target_port(service_port: &Value, pod: &Value) -> Option<u64> {
    match &service_port["targetPort"] {
        Value::Number(n) => n.as_u64(),
        Value::String(name) => match name.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
                .find(|p| p["name"] == name.as_str())
                .and_then(|p| p["containerPort"].as_u64()),
        },
        _ => service_port["port"].as_u64(),
    }
}

/// Where `pod` serves `container_port`: the loopback port the serving runtime recorded in the
/// pod's status, if any.
fn served_address(pod: &Value, container_port: u64) -> Option<SocketAddr> {
    pod["status"][PORTS_FIELD]
        .as_array()?
        .iter()
        .find(|p| p["containerPort"].as_u64() == Some(container_port))
        .and_then(|p| p["hostPort"].as_u64())
        .and_then(|port| u16::try_from(port).ok())
        .map(|port| SocketAddr::from(([127, 0, 0, 1], port)))
}

/// The Service port a request for `port` (a number or a port name) uses: that port, or with none
/// given the only port, else port 80.
fn service_port<'a>(service: &'a Value, port: Option<&str>) -> Option<&'a Value> {
    let ports = service["spec"]["ports"].as_array()?;
    match port {
        Some(p) => ports.iter().find(|sp| {
            sp["port"].as_u64().map(|n| n.to_string()).as_deref() == Some(p) || sp["name"] == p
        }),
        None if ports.len() == 1 => ports.first(),
        None => ports.iter().find(|sp| sp["port"].as_u64() == Some(80)),
    }
}

/// The ready, served pods behind the Service `namespace/name` with the loopback address each serves
/// `port` (a Service port number or name; `None` for the only port) on, in pod name order. Pods the
/// runtime does not serve (no recorded port) are left out.
pub fn service_backends(
    store: &Store,
    namespace: &str,
    name: &str,
    port: Option<&str>,
) -> Result<Vec<(SocketAddr, Value)>, ResolveError> {
    let services = store.resource("", "v1", "services").expect("built in");
    let key = format!("{name}.{namespace}");
    let service = store
        .get(&services, namespace, name)
        .map_err(|_| ResolveError::NoService(key.clone()))?;
    let port = service_port(&service, port).ok_or_else(|| {
        ResolveError::NoPort(key.clone(), port.unwrap_or("(default)").to_string())
    })?;
    let mut pods = all(store, "", "v1", "pods", Some(namespace));
    pods.sort_by_key(|p| {
        p["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    });
    Ok(pods
        .into_iter()
        .filter(|pod| selects(&service, pod) && is_ready(pod))
        .filter_map(|pod| Some((served_address(&pod, target_port(port, &pod)?)?, pod)))
        .collect())
}

/// The loopback address `pod` serves `port` on (a container port number or name; `None` for its
/// first served port).
pub fn pod_address(pod: &Value, port: Option<&str>) -> Option<SocketAddr> {
    let container_port = match port {
        None => pod["status"][PORTS_FIELD][0]["containerPort"].as_u64()?,
        Some(p) => match p.parse::<u64>() {
            Ok(n) => n,
            Err(_) => target_port(&json!({"targetPort": p}), pod)?,
        },
    };
    served_address(pod, container_port)
}

/// The ready, served pods behind `host` (see [`parse_host`]) with the loopback address each serves
/// the Service port on, in pod name order.
pub fn resolve_pods(
    store: &Store,
    host: &str,
    default_namespace: &str,
) -> Result<Vec<(SocketAddr, Value)>, ResolveError> {
    let target = parse_host(host, default_namespace)
        .ok_or_else(|| ResolveError::NotAServiceHost(host.to_string()))?;
    let port = target.port.map(|p| p.to_string());
    service_backends(store, &target.namespace, &target.name, port.as_deref())
}

/// The loopback addresses of the ready, served pods behind `host`, as [`resolve_pods`] finds them.
pub fn resolve(
    store: &Store,
    host: &str,
    default_namespace: &str,
) -> Result<Vec<SocketAddr>, ResolveError> {
    Ok(resolve_pods(store, host, default_namespace)?
        .into_iter()
        .map(|(address, _)| address)
        .collect())
}

/// The workload a pod belongs to, as Istio's telemetry names it: its Deployment (through its
/// ReplicaSet), else its direct owner, else the pod itself.
pub fn workload_of(store: &Store, pod: &Value) -> crate::telemetry::Workload {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let owner = |object: &Value, kind: &str| {
        object["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["kind"] == kind)
            .and_then(|r| r["name"].as_str())
            .map(String::from)
    };
    let replica_sets = store
        .resource("apps", "v1", "replicasets")
        .expect("built in");
    let name = match owner(pod, "ReplicaSet") {
        Some(rs) => store
            .get(&replica_sets, namespace, &rs)
            .ok()
            .and_then(|rs_object| owner(&rs_object, "Deployment"))
            .unwrap_or(rs),
        // A DaemonSet's or a Job's pod is named after its owner, as Istio names workloads.
        None => ["DaemonSet", "Job", "StatefulSet"]
            .iter()
            .find_map(|kind| owner(pod, kind))
            .unwrap_or_else(|| pod["metadata"]["name"].as_str().unwrap_or("unknown").into()),
    };
    let label = |key: &str| {
        pod["metadata"]["labels"][key]
            .as_str()
            .unwrap_or("unknown")
            .to_string()
    };
    crate::telemetry::Workload {
        name,
        namespace: namespace.into(),
        app: label("app"),
        version: label("version"),
    }
}

/// The mesh proxy's view of the sandbox: Service hosts resolve to their ready pods.
pub struct SandboxUpstreams {
    /// The sandbox's store.
    pub store: std::sync::Arc<Store>,
}

impl crate::mesh_proxy::Upstreams for SandboxUpstreams {
    fn endpoints(&self, host: &str, port: Option<u16>) -> Vec<crate::mesh_proxy::Endpoint> {
        let host = match port {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        };
        resolve_pods(&self.store, &host, "default")
            .unwrap_or_default()
            .into_iter()
            .map(|(address, pod)| crate::mesh_proxy::Endpoint {
                address,
                labels: pod["metadata"]["labels"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
                workload: workload_of(&self.store, &pod),
            })
            .collect()
    }
}

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
                        json!(crate::store::now_rfc3339());
                    store.update_shared(&endpoints, namespace, name, updated, Part::Main, writes)
                }
                None => {
                    let mut object = json!({"metadata": {"name": name, "labels": service["metadata"]["labels"],
                        "annotations": {MANAGED_ANNOTATION: crate::store::now_rfc3339()}}});
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

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str, namespace: &str, port: Option<u16>) -> Option<ServiceHost> {
        Some(ServiceHost {
            name: name.into(),
            namespace: namespace.into(),
            port,
        })
    }

    #[test]
    fn every_cluster_form_of_a_service_host_parses() {
        assert_eq!(
            parse_host("podinfo.test", "default"),
            host("podinfo", "test", None)
        );
        assert_eq!(
            parse_host("podinfo.test.svc", "default"),
            host("podinfo", "test", None)
        );
        assert_eq!(
            parse_host("podinfo.test.svc.cluster.local:9898", "default"),
            host("podinfo", "test", Some(9898))
        );
        assert_eq!(
            parse_host("podinfo.test.svc.cluster.local.", "default"),
            host("podinfo", "test", None)
        );
        assert_eq!(
            parse_host("podinfo-canary", "test"),
            host("podinfo-canary", "test", None)
        );
        assert_eq!(
            parse_host("Podinfo.Test:80", "x"),
            host("podinfo", "test", Some(80))
        );
    }

    #[test]
    fn other_hosts_do_not_parse() {
        for bad in [
            "example.com.org.net",
            "podinfo.test.svc.other.local",
            "podinfo.test:http",
            "podinfo.test:99999",
            "",
            "under_score.test",
            "127.0.0.1:80",
        ] {
            assert_eq!(parse_host(bad, "default"), None, "{bad}");
        }
    }

    #[test]
    fn named_target_ports_map_to_container_ports() {
        let pod =
            json!({"spec": {"containers": [{"ports": [{"name": "http", "containerPort": 9898}]}]}});
        assert_eq!(
            target_port(&json!({"port": 80, "targetPort": "http"}), &pod),
            Some(9898)
        );
        assert_eq!(
            target_port(&json!({"port": 80, "targetPort": 8080}), &pod),
            Some(8080)
        );
        assert_eq!(target_port(&json!({"port": 80}), &pod), Some(80));
        assert_eq!(
            target_port(&json!({"port": 80, "targetPort": "grpc"}), &pod),
            None
        );
    }
}
