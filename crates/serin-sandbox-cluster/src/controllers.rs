//! Built-in controllers that make workloads behave like a cluster's: a scheduler and kubelet that
//! run pods through a pluggable [`PodRuntime`], a ReplicaSet controller, and a Deployment controller
//! with rolling updates (maxSurge, maxUnavailable, minReadySeconds, progressDeadlineSeconds) and the
//! status and conditions a real cluster reports.

pub use crate::pod_runtime::{
    DelayRuntime, PodHealth, PodRuntime, PodStart, Termination, runs_to_completion,
};
use serde_json::{Value, json};
use serin_sandbox_apiserver::registry::ResourceInfo;
use serin_sandbox_apiserver::selectors::{FieldSelector, LabelSelector};
use serin_sandbox_apiserver::store::{
    DeleteOptions, Part, PatchType, Store, WriteOptions, now_rfc3339,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `status` with the Ready and ContainersReady conditions and the container statuses set from
/// `health`; a condition's lastTransitionTime only moves when its status flips.
fn with_health(status: &Value, health: &PodHealth, now: &str) -> Value {
    let mut status = status.clone();
    let flag = if health.ready { "True" } else { "False" };
    for condition in status["conditions"].as_array_mut().into_iter().flatten() {
        if condition["type"] == "Ready" || condition["type"] == "ContainersReady" {
            if condition["status"] != flag {
                condition["lastTransitionTime"] = json!(now);
            }
            condition["status"] = json!(flag);
            if let Some(c) = condition.as_object_mut() {
                if health.ready {
                    c.remove("reason");
                    c.remove("message");
                } else {
                    c.insert("reason".into(), json!("ContainersNotReady"));
                    c.insert("message".into(), json!("containers with unready status"));
                }
            }
        }
    }
    for container in status["containerStatuses"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        container["ready"] = json!(health.ready);
        container["restartCount"] = json!(health.restarts);
    }
    status
}

/// The status of a pod whose app ended: Succeeded on exit 0, else Failed, with each container
/// terminated as the kubelet reports it.
fn finished_status(pod: &Value, ended: &Termination) -> Value {
    let now = now_rfc3339();
    let mut status = pod["status"].clone();
    status["phase"] = json!(if ended.exit_code == 0 {
        "Succeeded"
    } else {
        "Failed"
    });
    let started = pod["status"]["startTime"].clone();
    for container in status["containerStatuses"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        container["ready"] = json!(false);
        container["started"] = json!(false);
        container["state"] = json!({"terminated": {"exitCode": ended.exit_code, "reason": ended.reason,
            "message": (!ended.message.is_empty()).then_some(&ended.message),
            "startedAt": started, "finishedAt": now}});
    }
    for condition in status["conditions"].as_array_mut().into_iter().flatten() {
        if condition["type"] == "Ready" || condition["type"] == "ContainersReady" {
            condition["status"] = json!("False");
            condition["reason"] = json!("PodCompleted");
            condition["lastTransitionTime"] = json!(now);
        }
    }
    status
}

/// Name of the sandbox's first node; the others add `-2`, `-3`, ... ([`node_name`]).
pub const NODE_NAME: &str = "sandbox-node";

/// Name of the sandbox's node number `index` (from 1): [`NODE_NAME`], then `sandbox-node-2`, ...
pub fn node_name(index: usize) -> String {
    if index <= 1 {
        NODE_NAME.to_string()
    } else {
        format!("{NODE_NAME}-{index}")
    }
}

/// The Node object of the sandbox's node number `index` (from 1): Ready, with room for any pod,
/// labelled with its hostname, OS, architecture and a zone of its own (`zone-<index>`).
fn sandbox_node(index: usize) -> Value {
    let name = node_name(index);
    json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "topology.kubernetes.io/zone": format!("zone-{index}")}},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "sandbox kubelet is ready"}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
            "allocatable": {"cpu": "1k", "memory": "1Ti", "pods": "1M"}, "capacity": {"cpu": "1k", "memory": "1Ti", "pods": "1M"},
            "nodeInfo": {"kubeletVersion": "v1.32.5-serin", "architecture": "amd64", "operatingSystem": "linux"}}})
}

/// The tolerations the DaemonSet controller gives every daemon pod, so node conditions and a
/// cordon do not keep it off a node.
fn daemon_tolerations(spec: &Value) -> Vec<Value> {
    let mut added = vec![
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if spec["hostNetwork"] == true {
        added.push(("node.kubernetes.io/network-unavailable", "NoSchedule"));
    }
    let mut tolerations: Vec<Value> = spec["tolerations"].as_array().cloned().unwrap_or_default();
    for (key, effect) in added {
        if !tolerations
            .iter()
            .any(|t| t["key"] == key && t["effect"] == effect)
        {
            tolerations.push(json!({"key": key, "operator": "Exists", "effect": effect}));
        }
    }
    tolerations
}

/// How the built-in controllers write (their field manager, as on a real cluster).
fn controller_writes() -> WriteOptions {
    WriteOptions::by("kube-controller-manager")
}

fn alphabet_hash(text: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut h: u64 = 0xcbf29ce484222325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    (0..10)
        .map(|i| ALPHABET[((h >> (i * 6)) % ALPHABET.len() as u64) as usize] as char)
        .collect()
}

/// A pod template as a typed API server compares it: without the `pod-template-hash` label and
/// without null, empty-object and empty-list fields (a client that round-trips a template through
/// typed structs, as `kubectl rollout undo` does, adds `creationTimestamp: null` and `resources: {}`).
fn comparable_template(template: &Value) -> Value {
    fn prune(value: &Value) -> Option<Value> {
        match value {
            Value::Null => None,
            Value::Object(fields) => {
                let kept: serde_json::Map<String, Value> = fields
                    .iter()
                    .filter_map(|(k, v)| prune(v).map(|v| (k.clone(), v)))
                    .collect();
                (!kept.is_empty()).then_some(Value::Object(kept))
            }
            Value::Array(items) => {
                let kept: Vec<Value> = items
                    .iter()
                    .map(|v| prune(v).unwrap_or(json!({})))
                    .collect();
                (!kept.is_empty()).then_some(Value::Array(kept))
            }
            other => Some(other.clone()),
        }
    }
    let mut t = template.clone();
    if let Some(labels) = t["metadata"]["labels"].as_object_mut() {
        labels.remove("pod-template-hash");
    }
    prune(&t).unwrap_or(json!({}))
}

/// When time alone can change the status of a Deployment whose last sync changed nothing: once
/// its progress deadline has passed, while it is rolling out. `None` for one that is complete,
/// paused or already past its deadline: only a change to it or its ReplicaSets moves those.
fn deadline_check(deploy: &Value) -> Option<Instant> {
    let progressing = deploy["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Progressing")?;
    if !matches!(
        progressing["reason"].as_str(),
        Some("ReplicaSetUpdated" | "NewReplicaSetCreated")
    ) {
        return None;
    }
    let deadline = deploy["spec"]["progressDeadlineSeconds"]
        .as_i64()
        .unwrap_or(600);
    let since = progressing["lastUpdateTime"]
        .as_str()
        .and_then(seconds_since)?;
    // The deadline counts whole seconds past it; one more second makes sure it has passed.
    let left = u64::try_from(deadline - since + 1).unwrap_or(0);
    Some(Instant::now() + Duration::from_secs(left))
}

/// [`comparable_template`]s, kept per object (uid) for as long as its resourceVersion stays:
/// pruning templates is most of a Deployment sync's work, and a pass syncs every Deployment
/// while few of them have changed since the last one.
#[derive(Default)]
struct ComparableTemplates(HashMap<String, (String, Arc<Value>)>);

impl ComparableTemplates {
    /// The comparable form of `object`'s `spec.template`.
    fn of(&mut self, object: &Value) -> Arc<Value> {
        let version = object["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default();
        let object_uid = uid(object);
        if let Some((seen, template)) = self.0.get(&object_uid)
            && seen == version
        {
            return template.clone();
        }
        let template = Arc::new(comparable_template(&object["spec"]["template"]));
        self.0
            .insert(object_uid, (version.to_string(), template.clone()));
        template
    }

    /// Forgets a deleted object's template.
    fn forget(&mut self, object_uid: &str) {
        self.0.remove(object_uid);
    }
}

/// The object's uid, borrowed.
fn uid_of(o: &Value) -> &str {
    o["metadata"]["uid"].as_str().unwrap_or_default()
}

fn name(o: &Value) -> String {
    o["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn ns(o: &Value) -> String {
    o["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn uid(o: &Value) -> String {
    uid_of(o).to_string()
}

fn controller_uid(o: &Value) -> Option<&str> {
    o["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"].as_bool() == Some(true))
        .and_then(|r| r["uid"].as_str())
}

/// `objects` grouped by the uid of their controlling owner, so a pass finds an object's children
/// without scanning every object for each owner.
fn by_controller(objects: &[Arc<Value>]) -> HashMap<&str, Vec<&Value>> {
    let mut children: HashMap<&str, Vec<&Value>> = HashMap::new();
    for object in objects {
        if let Some(owner) = controller_uid(object) {
            children.entry(owner).or_default().push(&**object);
        }
    }
    children
}

/// Whether a pod's Ready condition is True.
fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

fn resolve(value: &Value, replicas: i64, round_up: bool) -> i64 {
    match value {
        Value::Number(n) => n.as_i64().unwrap_or(0),
        Value::String(s) => {
            let pct: i64 = s.trim_end_matches('%').parse().unwrap_or(0);
            let p = pct * replicas;
            if round_up { (p + 99) / 100 } else { p / 100 }
        }
        _ => 0,
    }
}

fn parse_time(text: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    text.parse().ok()
}

fn seconds_since(text: &str) -> Option<i64> {
    let then = parse_time(text)?;
    let now = parse_time(&now_rfc3339())?;
    Some(now.duration_since(then).as_secs())
}

/// The ReplicaSets, Deployments and pods, kept current from the store's changes: each by uid,
/// the children of each controlling owner, and which ReplicaSets and Deployments the next pass
/// syncs, so a pass looks only at what changed instead of at every workload.
#[derive(Default)]
struct Workloads {
    replica_sets: HashMap<String, Arc<Value>>,
    deployments: HashMap<String, Arc<Value>>,
    /// Pods and ReplicaSets by the uid of their controlling owner, then by name (a list's order).
    children: HashMap<String, BTreeMap<String, Arc<Value>>>,
    /// Each child's owner uid as last noted, to move it when its owner changes or it goes.
    owner_of: HashMap<String, String>,
    dirty_rs: std::collections::HashSet<String>,
    dirty_deployments: std::collections::HashSet<String>,
    /// Settled Deployments that time alone can change ([`deadline_check`]), and when.
    deadlines: HashMap<String, Instant>,
}

impl Workloads {
    /// Takes a committed object of `storage` (a storage key) in, or its removal when `gone`.
    fn note(&mut self, storage: &str, object: &Arc<Value>, gone: bool) {
        let (is_pod, own) = match storage {
            "pods" => (true, None),
            "replicasets.apps" => (false, Some(&mut self.replica_sets)),
            "deployments.apps" => (false, Some(&mut self.deployments)),
            _ => return,
        };
        let object_uid = uid(object);
        if let Some(own) = own {
            if gone {
                own.remove(&object_uid);
            } else {
                own.insert(object_uid.clone(), object.clone());
            }
        }
        if storage == "deployments.apps" {
            self.dirty_deployments.insert(object_uid);
            return;
        }
        if !is_pod {
            self.dirty_rs.insert(object_uid.clone());
        }
        // A child's change concerns its controller before and after it.
        let owners = [
            self.owner_of.remove(&object_uid),
            controller_uid(object).map(str::to_string),
        ];
        for owner in owners.iter().flatten() {
            if let Some(children) = self.children.get_mut(owner) {
                children.remove(&name(object));
                if children.is_empty() {
                    self.children.remove(owner);
                }
            }
            if is_pod {
                self.dirty_rs.insert(owner.clone());
            } else {
                self.dirty_deployments.insert(owner.clone());
            }
        }
        if !gone && let Some(owner) = controller_uid(object) {
            self.children
                .entry(owner.to_string())
                .or_default()
                .insert(name(object), object.clone());
            self.owner_of.insert(object_uid, owner.to_string());
        }
    }

    /// The pods or ReplicaSets `owner_uid` controls, in name order.
    fn children(&self, owner_uid: &str) -> Vec<Arc<Value>> {
        self.children
            .get(owner_uid)
            .map(|children| children.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Empties `dirty` into the objects it names that still exist, in namespace/name order.
    fn take(
        dirty: &mut std::collections::HashSet<String>,
        objects: &HashMap<String, Arc<Value>>,
    ) -> Vec<Arc<Value>> {
        let mut work: Vec<Arc<Value>> = dirty
            .drain()
            .filter_map(|object_uid| objects.get(&object_uid).cloned())
            .collect();
        work.sort_by_key(|a| (ns(a), name(a)));
        work
    }
}

/// How often the kubelet asks the runtime about every pod it started (probes, exits), as the
/// kubelet's own relist does every second; pods that changed are looked at on every pass.
const RUNTIME_POLL: Duration = Duration::from_secs(1);

/// The kubelet's and the scheduler's view of the pods, kept from the store's changes so a pass
/// looks at the pods that changed instead of at every pod.
#[derive(Default)]
struct PodIndex {
    pods: HashMap<String, Arc<Value>>,
    /// Pods changed since the kubelet last looked at them.
    dirty: HashSet<String>,
    /// Pods that left the store since the last pass, for the runtime to stop.
    gone: Vec<String>,
    /// Pods waiting for a node: none yet, not being deleted, not finished.
    unscheduled: HashSet<String>,
    /// How many pods occupy each node.
    per_node: HashMap<String, usize>,
    /// The occupying pods with anti-affinity terms, which can keep pods off their node.
    repelling: HashSet<String>,
}

impl PodIndex {
    fn note(&mut self, pod: &Arc<Value>, gone: bool) {
        let pod_uid = uid(pod);
        let previous = if gone {
            self.pods.remove(&pod_uid)
        } else {
            self.pods.insert(pod_uid.clone(), pod.clone())
        };
        if let Some(previous) = previous {
            self.count(&pod_uid, &previous, false);
        }
        if gone {
            self.dirty.remove(&pod_uid);
            self.gone.push(pod_uid);
        } else {
            self.count(&pod_uid, pod, true);
            self.dirty.insert(pod_uid);
        }
    }

    /// Adds `pod` to the scheduler's counts, or takes it out of them.
    fn count(&mut self, pod_uid: &str, pod: &Value, add: bool) {
        if crate::scheduler::occupies_node(pod) {
            let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
            if add {
                *self.per_node.entry(node.to_string()).or_default() += 1;
            } else if let Some(count) = self.per_node.get_mut(node) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    self.per_node.remove(node);
                }
            }
            if crate::scheduler::has_pod_anti_affinity(pod) {
                if add {
                    self.repelling.insert(pod_uid.to_string());
                } else {
                    self.repelling.remove(pod_uid);
                }
            }
        }
        let unscheduled = pod["spec"]["nodeName"].is_null()
            && !pod["metadata"]["deletionTimestamp"].is_string()
            && !matches!(
                pod["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            );
        if unscheduled {
            if add {
                self.unscheduled.insert(pod_uid.to_string());
            } else {
                self.unscheduled.remove(pod_uid);
            }
        }
    }

    /// The pods with these uids, by namespace and name.
    fn sorted<'a>(&self, uids: impl Iterator<Item = &'a String>) -> Vec<Arc<Value>> {
        let mut pods: Vec<(&str, &str, &Arc<Value>)> = uids
            .filter_map(|u| self.pods.get(u))
            .map(|pod| {
                let meta = &pod["metadata"];
                (
                    meta["namespace"].as_str().unwrap_or_default(),
                    meta["name"].as_str().unwrap_or_default(),
                    pod,
                )
            })
            .collect();
        pods.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        pods.into_iter().map(|(_, _, pod)| pod.clone()).collect()
    }
}

/// The controllers' state between passes.
pub struct Controllers {
    store: Arc<Store>,
    runtime: Arc<dyn PodRuntime>,
    ready_at: HashMap<String, Instant>,
    /// Pods the runtime was asked to start, by uid, so it can stop the ones that vanish.
    started: HashMap<String, Arc<Value>>,
    pod_index: PodIndex,
    /// When the kubelet next asks the runtime about every started pod.
    next_runtime_poll: Instant,
    templates: ComparableTemplates,
    /// Every change committed to the store since the last pass: it tells which memos below no
    /// longer hold, so a pass looks again only at what changed instead of at every object.
    changes: tokio::sync::mpsc::UnboundedReceiver<Arc<serin_sandbox_apiserver::store::Change>>,
    /// The ReplicaSets, Deployments and pods by owner, and which of them the next pass syncs.
    workloads: Workloads,
    endpoints: crate::endpoints::EndpointsController,
    next_ip: u32,
    pods: ResourceInfo,
    replicasets: ResourceInfo,
    deployments: ResourceInfo,
    jobs: ResourceInfo,
    daemonsets: ResourceInfo,
    events: ResourceInfo,
    nodes: ResourceInfo,
    namespaces: ResourceInfo,
}

/// Writes a core/v1 Event about `object` (of `kind`), as the cluster's `component` does, so
/// `kubectl events` and `kubectl describe` show a rollout.
fn record_event(
    store: &Store,
    events: &ResourceInfo,
    object: &Value,
    kind: &str,
    component: &str,
    reason: &str,
    message: String,
) {
    write_event(
        store,
        events,
        object,
        kind,
        component,
        ("Normal", reason),
        message,
    );
}

/// Like [`record_event`], for a `Warning`.
fn record_warning(
    store: &Store,
    events: &ResourceInfo,
    object: &Value,
    kind: &str,
    component: &str,
    reason: &str,
    message: String,
) {
    write_event(
        store,
        events,
        object,
        kind,
        component,
        ("Warning", reason),
        message,
    );
}

/// Writes a core/v1 Event of `event_type` (`Normal` or `Warning`) about `object`, as `component`.
pub(crate) fn write_event(
    store: &Store,
    events: &ResourceInfo,
    object: &Value,
    kind: &str,
    component: &str,
    (event_type, reason): (&str, &str),
    message: String,
) {
    let now = now_rfc3339();
    let api_version = object["apiVersion"].as_str().unwrap_or(match kind {
        "Pod" => "v1",
        _ => "apps/v1",
    });
    let event = json!({
        "metadata": {"generateName": format!("{}.", name(object))},
        "involvedObject": {"apiVersion": api_version, "kind": kind, "namespace": ns(object),
            "name": name(object), "uid": uid(object),
            "resourceVersion": object["metadata"]["resourceVersion"]},
        "reason": reason, "message": message, "type": event_type,
        "source": {"component": component}, "reportingComponent": component,
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    });
    let _ = store.create_shared(events, Some(&ns(object)), event, &controller_writes());
}

impl Controllers {
    /// Controllers over `store`, running pods with `runtime` on `node_count` nodes (at least one),
    /// which are created now.
    pub fn new(store: Arc<Store>, runtime: Arc<dyn PodRuntime>, node_count: usize) -> Self {
        let pods = store.resource("", "v1", "pods").expect("built in");
        let replicasets = store
            .resource("apps", "v1", "replicasets")
            .expect("built in");
        let deployments = store
            .resource("apps", "v1", "deployments")
            .expect("built in");
        let nodes = store.resource("", "v1", "nodes").expect("built in");
        let namespaces = store.resource("", "v1", "namespaces").expect("built in");
        let events = store.resource("", "v1", "events").expect("built in");
        let jobs = store.resource("batch", "v1", "jobs").expect("built in");
        let daemonsets = store
            .resource("apps", "v1", "daemonsets")
            .expect("built in");
        let (listed, changes) = store.list_and_follow(&[&pods, &replicasets, &deployments]);
        let mut workloads = Workloads::default();
        let mut pod_index = PodIndex::default();
        for (info, objects) in [&pods, &replicasets, &deployments].iter().zip(&listed) {
            for object in objects {
                workloads.note(&info.storage_key(), object, false);
                if info.storage_key() == "pods" {
                    pod_index.note(object, false);
                }
            }
        }
        for index in 1..=node_count.max(1) {
            let node = sandbox_node(index);
            let _ = store.create(&nodes, None, node.clone(), &controller_writes());
            let _ = store.update(
                &nodes,
                "",
                &node_name(index),
                node,
                Part::Status,
                &controller_writes(),
            );
        }
        Controllers {
            store,
            runtime,
            ready_at: HashMap::new(),
            started: HashMap::new(),
            pod_index,
            next_runtime_poll: Instant::now(),
            templates: ComparableTemplates::default(),
            changes,
            workloads,
            endpoints: Default::default(),
            next_ip: 10,
            pods,
            replicasets,
            deployments,
            jobs,
            daemonsets,
            events,
            nodes,
            namespaces,
        }
    }

    fn all(&self, info: &ResourceInfo) -> Vec<Arc<Value>> {
        self.store.list_shared(info)
    }

    /// One pass of every controller; returns whether anything changed.
    pub fn reconcile(&mut self) -> bool {
        self.take_changes();
        let mut changed = false;
        changed |= self.kubelet();
        changed |= self.replicasets();
        changed |= self.deployments();
        changed |= self.sync_jobs();
        changed |= self.sync_daemonsets();
        changed |= self.endpoints.sync(&self.store, &controller_writes());
        changed |= self.sync_quotas();
        changed
    }

    /// The ResourceQuota controller, for the one resource the sandbox counts: `status.hard` is the
    /// quota's `spec.hard`, `status.used.pods` the namespace's pods that have not ended.
    fn sync_quotas(&self) -> bool {
        let Some(quotas) = self.store.resource("", "v1", "resourcequotas") else {
            return false;
        };
        let quotas_now = self.all(&quotas);
        if quotas_now.is_empty() {
            return false;
        }
        let pods = self.all(&self.pods);
        let mut changed = false;
        for quota in quotas_now {
            let used = pods
                .iter()
                .filter(|p| ns(p) == ns(&quota))
                .filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
                .count();
            let hard = quota["spec"]["hard"].clone();
            let mut status = json!({"hard": hard});
            if hard.get("pods").is_some() {
                status["used"] = json!({"pods": used.to_string()});
            }
            changed |= self.write_status(&quotas, &quota, status);
        }
        changed
    }

    /// Takes the changes committed since the last pass into the indexes, marking what they
    /// concern for this pass: a pod's change its controller, a ReplicaSet's itself and its
    /// Deployment, a Service's or an Endpoints' the Service.
    fn take_changes(&mut self) {
        while let Ok(change) = self.changes.try_recv() {
            let gone = change.change == serin_sandbox_apiserver::store::ChangeType::Deleted;
            if gone {
                self.templates.forget(uid_of(&change.object));
            }
            self.workloads.note(&change.resource, &change.object, gone);
            if change.resource == "pods" {
                self.pod_index.note(&change.object, gone);
            }
            self.endpoints.note(&change);
        }
    }

    fn write_status(&self, info: &ResourceInfo, object: &Value, status: Value) -> bool {
        if object["status"] == status {
            return false;
        }
        let mut updated = object.clone();
        updated["status"] = status;
        self.store
            .update_shared(
                info,
                &ns(object),
                &name(object),
                updated,
                Part::Status,
                &controller_writes(),
            )
            .is_ok()
    }

    /// The kubelet: looks at the pods that changed, those waiting to become Ready and, every
    /// [`RUNTIME_POLL`], every pod it started, whose runtime may have news of it.
    fn kubelet(&mut self) -> bool {
        let mut changed = false;
        // A pod deleted without finalizers leaves the store at once; its runtime still has to stop it.
        for gone in std::mem::take(&mut self.pod_index.gone) {
            self.ready_at.remove(&gone);
            if let Some(pod) = self.started.remove(&gone) {
                self.runtime.stop(&pod);
            }
        }
        changed |= self.schedule_pending();
        let mut visit = std::mem::take(&mut self.pod_index.dirty);
        visit.extend(self.ready_at.keys().cloned());
        let now = Instant::now();
        if now >= self.next_runtime_poll && self.runtime.changes_pods_on_its_own() {
            visit.extend(self.started.keys().cloned());
            self.next_runtime_poll = now + RUNTIME_POLL;
        }
        let pods = self.pod_index.sorted(visit.iter());
        for pod in pods {
            let pod_uid = uid(&pod);
            if pod["metadata"]["deletionTimestamp"].is_string() {
                self.started.remove(&pod_uid);
                self.runtime.stop(&pod);
                let mut released = Value::clone(&pod);
                released["metadata"]["finalizers"] = json!([]);
                let _ = self.store.update_shared(
                    &self.pods,
                    &ns(&pod),
                    &name(&pod),
                    released,
                    Part::Main,
                    &controller_writes(),
                );
                changed = true;
                continue;
            }
            if pod["spec"]["nodeName"].is_null() {
                // Bound (or still Pending) by `schedule_pending` above; the kubelet sees it next pass.
                continue;
            }
            if matches!(
                pod["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            ) {
                continue;
            }
            if pod["status"]["phase"] == "Running"
                && let Some(ended) = self.runtime.terminated(&pod)
            {
                changed |= self.write_status(&self.pods, &pod, finished_status(&pod, &ended));
                continue;
            }
            if pod["status"]["phase"] == "Running" {
                self.ready_at.remove(&pod_uid);
                if let Some(health) = self.runtime.health(&pod) {
                    let status = with_health(&pod["status"], &health, &now_rfc3339());
                    changed |= self.write_status(&self.pods, &pod, status);
                }
                continue;
            }
            let containers: Vec<String> = pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| c["name"].as_str().unwrap_or_default().to_string())
                .collect();
            let images: Vec<String> = pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| c["image"].as_str().unwrap_or_default().to_string())
                .collect();
            let start = match self.ready_at.get(&pod_uid) {
                Some(at) => PodStart::ReadyAfter(at.saturating_duration_since(Instant::now())),
                None => {
                    let start = self.runtime.start(&pod);
                    self.started.insert(pod_uid.clone(), pod.clone());
                    if let PodStart::ReadyAfter(delay) = &start {
                        self.ready_at
                            .insert(pod_uid.clone(), Instant::now() + *delay);
                    }
                    start
                }
            };
            let now = now_rfc3339();
            let status = match start {
                PodStart::ReadyAfter(left) if left.is_zero() => {
                    self.next_ip += 1;
                    let ip = format!("10.244.{}.{}", self.next_ip / 250, self.next_ip % 250 + 1);
                    let statuses: Vec<Value> = containers.iter().zip(&images).map(|(c, i)| json!({
                        "name": c, "image": i, "imageID": i, "ready": true, "started": true, "restartCount": 0,
                        "state": {"running": {"startedAt": now}}})).collect();
                    let conditions: Vec<Value> =
                        ["PodScheduled", "Initialized", "ContainersReady", "Ready"]
                            .iter()
                            .map(
                                |t| json!({"type": t, "status": "True", "lastTransitionTime": now}),
                            )
                            .collect();
                    let mut status = json!({
                        "phase": "Running", "hostIP": "127.0.0.1", "podIP": ip, "podIPs": [{"ip": ip}], "startTime": now,
                        "qosClass": "BestEffort",
                        "conditions": conditions,
                        "containerStatuses": statuses
                    });
                    serin_sandbox_apiserver::patch::merge_patch(
                        &mut status,
                        &self.runtime.running_status(&pod),
                    );
                    match self.runtime.health(&pod) {
                        Some(health) => with_health(&status, &health, &now),
                        None => status,
                    }
                }
                PodStart::ReadyAfter(_) => continue,
                PodStart::Waiting { reason, message } => {
                    let statuses: Vec<Value> = containers.iter().zip(&images).map(|(c, i)| json!({
                        "name": c, "image": i, "imageID": "", "ready": false, "started": false, "restartCount": 0,
                        "state": {"waiting": {"reason": reason, "message": message}}})).collect();
                    json!({
                        "phase": "Pending", "hostIP": "127.0.0.1", "qosClass": "BestEffort",
                        "startTime": pod["status"]["startTime"].as_str().unwrap_or(&now),
                        "conditions": [
                            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                            {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": format!("containers with unready status: [{}]", containers.join(" ")), "lastTransitionTime": pod["status"]["conditions"][1]["lastTransitionTime"].as_str().unwrap_or(&now)}
                        ],
                        "containerStatuses": statuses
                    })
                }
            };
            let mut comparable_old = pod["status"].clone();
            let mut comparable_new = status.clone();
            for s in [&mut comparable_old, &mut comparable_new] {
                if let Some(m) = s.as_object_mut() {
                    m.remove("startTime");
                    m.remove("conditions");
                }
            }
            if comparable_old != comparable_new || pod["status"]["phase"] != status["phase"] {
                changed |= self.write_status(&self.pods, &pod, status);
            }
        }
        changed
    }

    /// The scheduler: binds each pod without a node to the best node for it, one pod after the
    /// other so each decision sees the pods bound before it (by priority, then age). A pod no node
    /// takes stays Pending with `PodScheduled=False` and one `FailedScheduling` event per distinct
    /// reason; it is tried again on every pass, so a removed taint or a deleted pod lets it run.
    fn schedule_pending(&self) -> bool {
        let index = &self.pod_index;
        let pending_pods = index.sorted(index.unscheduled.iter());
        let mut pending: Vec<&Value> = pending_pods.iter().map(|p| &**p).collect();
        if pending.is_empty() {
            return false;
        }
        pending.sort_by_key(|p| {
            (
                std::cmp::Reverse(p["spec"]["priority"].as_i64().unwrap_or(0)),
                p["metadata"]["creationTimestamp"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                name(p),
            )
        });
        let copies = |objects: Vec<Arc<Value>>| -> Vec<Value> {
            objects.iter().map(|o| Value::clone(o)).collect()
        };
        let nodes = copies(self.all(&self.nodes));
        let namespaces = copies(self.all(&self.namespaces));
        // What the decisions read, copied from the index and kept current as this pass binds
        // pods: the pods per node, and the occupying pods with anti-affinity (all a pod without
        // affinity terms needs); every pod only when a pending pod has terms of its own (a bound
        // pod is copied, the others shared).
        let mut per_node = index.per_node.clone();
        let mut repelling = index.sorted(index.repelling.iter());
        let with_terms = pending
            .iter()
            .any(|p| crate::scheduler::has_pod_affinity(p));
        let mut placed: Vec<Arc<Value>> = if with_terms {
            index.sorted(index.pods.keys())
        } else {
            Vec::new()
        };
        let position: HashMap<String, usize> = placed
            .iter()
            .enumerate()
            .map(|(i, p)| (uid(p), i))
            .collect();
        let mut changed = false;
        for pod in pending {
            let own_terms = crate::scheduler::has_pod_affinity(pod);
            let cluster = crate::scheduler::Cluster {
                nodes: &nodes,
                pods: if own_terms { &placed } else { &repelling },
                namespaces: &namespaces,
                pods_per_node: (!own_terms).then_some(&per_node),
            };
            match crate::scheduler::schedule(pod, cluster) {
                Ok(node) => {
                    if self.bind(pod, &node) {
                        let mut bound = Value::clone(pod);
                        bound["spec"]["nodeName"] = json!(node);
                        if let Some(at) = position.get(&uid(pod)) {
                            placed[*at] = Arc::new(bound.clone());
                        }
                        if crate::scheduler::has_pod_anti_affinity(pod) {
                            repelling.push(Arc::new(bound));
                        }
                        *per_node.entry(node).or_default() += 1;
                    }
                    changed = true;
                }
                Err(message) => changed |= self.leave_unschedulable(pod, &message),
            }
        }
        changed
    }

    /// Binds `pod` to `node` with the scheduler's `Scheduled` event; whether it was bound.
    fn bind(&self, pod: &Value, node: &str) -> bool {
        let mut scheduled = pod.clone();
        scheduled["spec"]["nodeName"] = json!(node);
        let Ok(bound) = self.store.update_shared(
            &self.pods,
            &ns(pod),
            &name(pod),
            scheduled,
            Part::Main,
            &controller_writes(),
        ) else {
            return false;
        };
        record_event(
            &self.store,
            &self.events,
            &bound,
            "Pod",
            "default-scheduler",
            "Scheduled",
            format!(
                "Successfully assigned {}/{} to {node}",
                ns(&bound),
                name(&bound)
            ),
        );
        let mut status = bound["status"].clone();
        status["conditions"] = json!([{"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()}]);
        self.write_status(&self.pods, &bound, status);
        true
    }

    /// Keeps `pod` Pending because no node takes it: `PodScheduled=False` (reason Unschedulable)
    /// and a `FailedScheduling` warning, both only when `message` is news.
    fn leave_unschedulable(&self, pod: &Value, message: &str) -> bool {
        let known = pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["reason"] == "Unschedulable" && c["message"] == message);
        if known {
            return false;
        }
        record_warning(
            &self.store,
            &self.events,
            pod,
            "Pod",
            "default-scheduler",
            "FailedScheduling",
            message.to_string(),
        );
        let mut status = pod["status"].clone();
        status["phase"] = json!("Pending");
        status["conditions"] = json!([{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": message, "lastTransitionTime": now_rfc3339()}]);
        self.write_status(&self.pods, pod, status)
    }

    fn replicasets(&mut self) -> bool {
        let mut changed = false;
        let work = Workloads::take(&mut self.workloads.dirty_rs, &self.workloads.replica_sets);
        for rs in work.iter() {
            let rs = &**rs;
            if rs["metadata"]["deletionTimestamp"].is_string() {
                continue;
            }
            let rs_uid = uid(rs);
            let owned_all = self.workloads.children(&rs_uid);
            let mut acted = false;
            let owned: Vec<&Value> = owned_all
                .iter()
                .map(|p| &**p)
                .filter(|p| !p["metadata"]["deletionTimestamp"].is_string())
                .collect();
            let desired = int(&rs["spec"]["replicas"]);
            let current = owned.len() as i64;
            let mut refused = None;
            if current < desired {
                for _ in current..desired {
                    let template = &rs["spec"]["template"];
                    let labels = template["metadata"]["labels"].clone();
                    match self.create_owned_pod(
                        rs,
                        "replicaset-controller",
                        labels,
                        template["spec"].clone(),
                    ) {
                        Ok(()) => acted = true,
                        Err(message) => {
                            refused = Some(message);
                            break;
                        }
                    }
                }
            } else if current > desired {
                let mut victims = owned.clone();
                // Not-ready pods go first, then the newest.
                victims.sort_by_key(|p| {
                    (
                        p["status"]["phase"] == "Running",
                        std::cmp::Reverse(
                            p["metadata"]["creationTimestamp"]
                                .as_str()
                                .unwrap_or("")
                                .to_string(),
                        ),
                    )
                });
                for pod in victims.iter().take((current - desired) as usize) {
                    let deleted = self.store.delete(
                        &self.pods,
                        &ns(pod),
                        &name(pod),
                        &DeleteOptions::default(),
                        false,
                    );
                    if deleted.is_ok() {
                        record_event(
                            &self.store,
                            &self.events,
                            rs,
                            "ReplicaSet",
                            "replicaset-controller",
                            "SuccessfulDelete",
                            format!("Deleted pod: {}", name(pod)),
                        );
                    }
                }
                acted = true;
            }
            let min_ready = int(&rs["spec"]["minReadySeconds"]);
            let ready: Vec<&&Value> = owned.iter().filter(|p| is_ready(p)).collect();
            let available = ready
                .iter()
                .filter(|p| {
                    min_ready == 0
                        || p["status"]["conditions"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .find(|c| c["type"] == "Ready")
                            .and_then(|c| c["lastTransitionTime"].as_str())
                            .and_then(seconds_since)
                            .is_some_and(|s| s >= min_ready)
                })
                .count() as i64;
            let mut status = json!({"replicas": current.min(desired.max(current)), "observedGeneration": rs["metadata"]["generation"]});
            status["replicas"] = json!(owned.len());
            status["fullyLabeledReplicas"] = json!(owned.len());
            status["readyReplicas"] = json!(ready.len());
            status["availableReplicas"] = json!(available);
            if let Some(m) = status.as_object_mut() {
                m.retain(|k, v| k == "replicas" || k == "observedGeneration" || v != &json!(0));
            }
            // A refused creation is retried, and pods waiting out minReadySeconds become
            // available, with no change to what was read.
            let waits = refused.is_some() || available < ready.len() as i64;
            if let Some(message) = refused {
                // Reported once per refusal, as the ReplicaSet controller's condition and event.
                let known = rs["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["type"] == "ReplicaFailure");
                let condition = match known {
                    Some(c) if c["message"] == message.as_str() => c.clone(),
                    _ => {
                        record_warning(
                            &self.store,
                            &self.events,
                            rs,
                            "ReplicaSet",
                            "replicaset-controller",
                            "FailedCreate",
                            message.clone(),
                        );
                        json!({"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                            "message": message, "lastTransitionTime": now_rfc3339()})
                    }
                };
                status["conditions"] = json!([condition]);
            }
            acted |= self.write_status(&self.replicasets, rs, status);
            if acted || waits {
                self.workloads.dirty_rs.insert(rs_uid);
            }
            changed |= acted;
        }
        changed
    }

    /// Creates a pod of `owner` (a ReplicaSet, DaemonSet or Job) with its template's annotations
    /// and the given labels and spec, and records the controller's `SuccessfulCreate` event; the
    /// API server's refusal (an exceeded quota) is returned as the controller would report it.
    fn create_owned_pod(
        &self,
        owner: &Value,
        component: &str,
        labels: Value,
        spec: Value,
    ) -> Result<(), String> {
        let kind = owner["kind"].as_str().unwrap_or_default();
        let pod = json!({
            "metadata": {"generateName": format!("{}-", name(owner)), "labels": labels,
                "annotations": owner["spec"]["template"]["metadata"]["annotations"],
                "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": kind, "name": name(owner),
                    "uid": uid(owner), "controller": true, "blockOwnerDeletion": true}]},
            "spec": spec,
        });
        let pod = self
            .store
            .create_shared(&self.pods, Some(&ns(owner)), pod, &controller_writes())
            .map_err(|refused| format!("Error creating: {}", refused.message))?;
        record_event(
            &self.store,
            &self.events,
            owner,
            kind,
            component,
            "SuccessfulCreate",
            format!("Created pod: {}", name(&pod)),
        );
        Ok(())
    }

    /// Deletes a DaemonSet's pod with the controller's `SuccessfulDelete` event; whether it went.
    fn delete_daemon_pod(&self, ds: &Value, pod: &Value) -> bool {
        let deleted = self.store.delete(
            &self.pods,
            &ns(pod),
            &name(pod),
            &DeleteOptions::default(),
            false,
        );
        if deleted.is_ok() {
            record_event(
                &self.store,
                &self.events,
                ds,
                "DaemonSet",
                "daemonset-controller",
                "SuccessfulDelete",
                format!("Deleted pod: {}", name(pod)),
            );
        }
        deleted.is_ok()
    }

    /// The DaemonSet controller: one pod on every node the template's node selector, required node
    /// affinity and tolerations admit, bound to it directly (daemon pods run on cordoned nodes
    /// too), replaced `maxUnavailable` at a time when the template changes.
    fn sync_daemonsets(&mut self) -> bool {
        let mut changed = false;
        let daemonsets = self.all(&self.daemonsets);
        if daemonsets.is_empty() {
            return false;
        }
        let pods = self.all(&self.pods);
        let pods_by_owner = by_controller(&pods);
        let all_nodes = self.all(&self.nodes);
        for ds in daemonsets {
            if ds["metadata"]["deletionTimestamp"].is_string() {
                continue;
            }
            let template = &ds["spec"]["template"];
            let mut spec = template["spec"].clone();
            spec["tolerations"] = json!(daemon_tolerations(&spec));
            // As the DaemonSet controller: a node runs a pod only if the pod would fit there (Flagger
            // scales a DaemonSet to zero with a nodeSelector no node has); a pod may stay on a node
            // it no longer fits only behind a NoSchedule taint.
            let fits: Vec<(String, crate::scheduler::DaemonFit)> = all_nodes
                .iter()
                .map(|node| (name(node), crate::scheduler::daemon_fit(&spec, node)))
                .collect();
            let nodes: Vec<&str> = fits
                .iter()
                .filter(|(_, fit)| fit.should_run)
                .map(|(node, _)| node.as_str())
                .collect();
            let on = |pod: &Value, node: &str| pod["spec"]["nodeName"] == node;
            let may_stay =
                |pod: &Value| fits.iter().any(|(node, fit)| fit.may_stay && on(pod, node));
            let ds_uid = uid(&ds);
            let generation = ds["metadata"]["generation"].as_i64().unwrap_or(1);
            let owned: Vec<&Value> = pods_by_owner
                .get(ds_uid.as_str())
                .into_iter()
                .flatten()
                .copied()
                .filter(|p| !p["metadata"]["deletionTimestamp"].is_string())
                .collect();
            let current_template = |pod: &Value| {
                pod["metadata"]["labels"]["pod-template-generation"]
                    == generation.to_string().as_str()
            };
            let max_unavailable = ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"]
                .as_i64()
                .unwrap_or(1)
                .max(1);
            let rolling = ds["spec"]["updateStrategy"]["type"] != "OnDelete";
            let mut replaced = 0;
            for stray in owned.iter().filter(|p| !may_stay(p)) {
                changed |= self.delete_daemon_pod(&ds, stray);
            }
            let owned: Vec<&Value> = owned.into_iter().filter(|p| may_stay(p)).collect();
            for node in &nodes {
                let on_node: Vec<&&Value> = owned.iter().filter(|p| on(p, node)).collect();
                if on_node.is_empty() {
                    let mut labels = template["metadata"]["labels"].clone();
                    if !labels.is_object() {
                        labels = json!({});
                    }
                    labels["pod-template-generation"] = json!(generation.to_string());
                    let mut spec = spec.clone();
                    spec["nodeName"] = json!(node);
                    changed |= self
                        .create_owned_pod(&ds, "daemonset-controller", labels, spec)
                        .is_ok();
                } else if rolling
                    && replaced < max_unavailable
                    && let Some(old) = on_node.iter().find(|p| !current_template(p))
                    && self.delete_daemon_pod(&ds, old)
                {
                    replaced += 1;
                    changed = true;
                }
            }
            // The counts are over the nodes that should run a pod; pods kept elsewhere (behind a
            // NoSchedule taint added later) are misscheduled.
            let (scheduled, misplaced): (Vec<&Value>, Vec<&Value>) = owned
                .iter()
                .partition(|p| nodes.iter().any(|node| on(p, node)));
            let node_count = |pods: &[&Value]| {
                let mut names: Vec<&str> = pods
                    .iter()
                    .filter_map(|p| p["spec"]["nodeName"].as_str())
                    .collect();
                names.sort_unstable();
                names.dedup();
                names.len()
            };
            let number_ready = scheduled.iter().filter(|p| is_ready(p)).count();
            let updated = scheduled.iter().filter(|p| current_template(p)).count();
            let available = scheduled
                .iter()
                .filter(|p| is_ready(p) && current_template(p))
                .count();
            let mut status = json!({
                "currentNumberScheduled": node_count(&scheduled), "desiredNumberScheduled": nodes.len(),
                "numberMisscheduled": node_count(&misplaced), "numberReady": number_ready,
                "numberAvailable": available, "updatedNumberScheduled": updated,
                "observedGeneration": generation,
            });
            let unavailable = nodes.len().saturating_sub(available);
            if unavailable > 0 {
                status["numberUnavailable"] = json!(unavailable);
            }
            if let Some(m) = status.as_object_mut() {
                m.retain(|k, v| {
                    !(matches!(k.as_str(), "numberAvailable" | "updatedNumberScheduled")
                        && v == &json!(0))
                });
            }
            changed |= self.write_status(&self.daemonsets, &ds, status);
        }
        changed
    }

    /// The Job controller: runs pods until `completions` succeed (at most `parallelism` at a
    /// time), or until more than `backoffLimit` failed.
    fn sync_jobs(&mut self) -> bool {
        let mut changed = false;
        let jobs = self.all(&self.jobs);
        if jobs.is_empty() {
            return false;
        }
        let pods = self.all(&self.pods);
        let pods_by_owner = by_controller(&pods);
        for job in jobs {
            if job["metadata"]["deletionTimestamp"].is_string() {
                continue;
            }
            let finished = job["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| {
                    (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True"
                });
            if finished {
                continue;
            }
            let job_uid = uid(&job);
            let owned: Vec<&Value> = pods_by_owner
                .get(job_uid.as_str())
                .into_iter()
                .flatten()
                .copied()
                .collect();
            let phase_count = |phase: &str| {
                owned
                    .iter()
                    .filter(|p| p["status"]["phase"] == phase)
                    .count() as i64
            };
            let (succeeded, failed) = (phase_count("Succeeded"), phase_count("Failed"));
            let active: Vec<&&Value> = owned
                .iter()
                .filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
                .filter(|p| !p["metadata"]["deletionTimestamp"].is_string())
                .collect();
            let spec = &job["spec"];
            let completions = spec["completions"].as_i64().unwrap_or(1);
            let parallelism = spec["parallelism"].as_i64().unwrap_or(1);
            let backoff_limit = spec["backoffLimit"].as_i64().unwrap_or(6);
            let now = now_rfc3339();
            let mut status = json!({
                "startTime": job["status"]["startTime"].as_str().unwrap_or(&now),
                "active": active.len(), "succeeded": succeeded, "failed": failed,
                "ready": active.iter().filter(|p| is_ready(p)).count(),
                "terminating": 0, "uncountedTerminatedPods": {},
            });
            let condition = |kind: &str, reason: &str, message: &str| {
                json!({"type": kind, "status": "True", "reason": reason, "message": message,
                    "lastProbeTime": now, "lastTransitionTime": now})
            };
            if succeeded >= completions {
                status["completionTime"] = json!(now);
                status["conditions"] = json!([
                    condition(
                        "SuccessCriteriaMet",
                        "CompletionsReached",
                        "Reached expected number of succeeded pods"
                    ),
                    condition(
                        "Complete",
                        "CompletionsReached",
                        "Reached expected number of succeeded pods"
                    ),
                ]);
                record_event(
                    &self.store,
                    &self.events,
                    &job,
                    "Job",
                    "job-controller",
                    "Completed",
                    "Job completed".into(),
                );
            } else if failed > backoff_limit {
                status["conditions"] = json!([
                    condition(
                        "FailureTarget",
                        "BackoffLimitExceeded",
                        "Job has reached the specified backoff limit"
                    ),
                    condition(
                        "Failed",
                        "BackoffLimitExceeded",
                        "Job has reached the specified backoff limit"
                    ),
                ]);
                for pod in &active {
                    let _ = self.store.delete(
                        &self.pods,
                        &ns(pod),
                        &name(pod),
                        &DeleteOptions::default(),
                        false,
                    );
                }
                status["active"] = json!(0);
                record_warning(
                    &self.store,
                    &self.events,
                    &job,
                    "Job",
                    "job-controller",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit".into(),
                );
            } else {
                let wanted = parallelism.min(completions - succeeded) - active.len() as i64;
                for _ in 0..wanted.max(0) {
                    let template = &spec["template"];
                    let labels = template["metadata"]["labels"].clone();
                    if self
                        .create_owned_pod(&job, "job-controller", labels, template["spec"].clone())
                        .is_ok()
                    {
                        status["active"] = json!(int(&status["active"]) + 1);
                    }
                }
            }
            if let Some(m) = status.as_object_mut() {
                m.retain(|k, v| {
                    !(matches!(k.as_str(), "active" | "succeeded" | "failed") && v == &json!(0))
                });
            }
            changed |= self.write_status(&self.jobs, &job, status);
        }
        changed
    }

    fn deployments(&mut self) -> bool {
        let mut changed = false;
        let now = Instant::now();
        let workloads = &mut self.workloads;
        workloads.deadlines.retain(|d_uid, at| {
            let due = *at <= now;
            if due {
                workloads.dirty_deployments.insert(d_uid.clone());
            }
            !due
        });
        let work = Workloads::take(
            &mut self.workloads.dirty_deployments,
            &self.workloads.deployments,
        );
        for deploy in work {
            if deploy["metadata"]["deletionTimestamp"].is_string() {
                continue;
            }
            let d_uid = uid(&deploy);
            let owned_rs = self.workloads.children(&d_uid);
            let owned = owned_rs.iter().map(|rs| &**rs).collect();
            let acted = self.sync_deployment(&deploy, owned);
            if acted {
                self.workloads.dirty_deployments.insert(d_uid);
            } else if let Some(at) = deadline_check(&deploy) {
                self.workloads.deadlines.insert(d_uid, at);
            }
            changed |= acted;
        }
        changed
    }

    /// Syncs one Deployment whose ReplicaSets are `owned`.
    fn sync_deployment(&mut self, deploy: &Value, owned: Vec<&Value>) -> bool {
        let d_uid = uid(deploy);
        let namespace = ns(deploy);
        let spec = &deploy["spec"];
        let replicas = spec["replicas"].as_i64().unwrap_or(1);
        let template = &spec["template"];
        let wanted = self.templates.of(deploy);
        let new_rs = owned.iter().find(|rs| self.templates.of(rs) == wanted);
        let revision = |rs: &Value| -> i64 {
            rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                .as_str()
                .and_then(|r| r.parse().ok())
                .unwrap_or(0)
        };
        let max_revision = owned.iter().map(|rs| revision(rs)).max().unwrap_or(0);
        let strategy = &spec["strategy"];
        let recreate = strategy["type"] == "Recreate";
        let surge = if recreate {
            0
        } else {
            resolve(&strategy["rollingUpdate"]["maxSurge"], replicas, true)
        };
        let mut unavailable = if recreate {
            0
        } else {
            resolve(
                &strategy["rollingUpdate"]["maxUnavailable"],
                replicas,
                false,
            )
        };
        if surge == 0 && unavailable == 0 && !recreate {
            unavailable = 1;
        }
        let mut created_new = None;
        let mut bumped = false;
        // Holds a ReplicaSet written in this sync, which `new_rs` then borrows.
        let written: Arc<Value>;
        let new_rs: &Value = match new_rs {
            // Rolled back to an older template: its ReplicaSet becomes the newest revision again.
            Some(rs) if revision(rs) < max_revision => {
                let revision_patch = json!({"metadata": {"annotations": {
                    "deployment.kubernetes.io/revision": (max_revision + 1).to_string()}}});
                match self.store.patch_shared(
                    &self.replicasets,
                    &namespace,
                    &name(rs),
                    PatchType::Merge,
                    &revision_patch,
                    Part::Main,
                    &controller_writes(),
                ) {
                    Ok((rs, _)) => {
                        bumped = true;
                        written = rs;
                        &written
                    }
                    Err(_) => return false,
                }
            }
            Some(rs) => rs,
            None => {
                let hash = alphabet_hash(&wanted.to_string());
                let rs_name = format!("{}-{hash}", name(deploy));
                let mut labels = template["metadata"]["labels"].clone();
                labels["pod-template-hash"] = json!(hash);
                let mut selector = spec["selector"].clone();
                selector["matchLabels"]["pod-template-hash"] = json!(hash);
                let mut rs_template = template.clone();
                rs_template["metadata"]["labels"] = labels.clone();
                let mut annotations = deploy["metadata"]["annotations"].clone();
                if let Some(a) = annotations.as_object_mut() {
                    a.remove("kubectl.kubernetes.io/last-applied-configuration");
                    a.remove("deployment.kubernetes.io/revision");
                }
                if !annotations.is_object() {
                    annotations = json!({});
                }
                annotations["deployment.kubernetes.io/revision"] =
                    json!((max_revision + 1).to_string());
                annotations["deployment.kubernetes.io/desired-replicas"] =
                    json!(replicas.to_string());
                annotations["deployment.kubernetes.io/max-replicas"] =
                    json!((replicas + surge).to_string());
                let rs = json!({
                    "metadata": {"name": rs_name, "labels": labels, "annotations": annotations,
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name(deploy), "uid": d_uid, "controller": true, "blockOwnerDeletion": true}]},
                    "spec": {"replicas": 0, "minReadySeconds": spec["minReadySeconds"].as_i64().unwrap_or(0), "selector": selector, "template": rs_template}
                });
                match self.store.create_shared(
                    &self.replicasets,
                    Some(&namespace),
                    rs,
                    &controller_writes(),
                ) {
                    Ok(rs) => {
                        created_new = Some(name(&rs));
                        written = rs;
                        &written
                    }
                    Err(_) => return false,
                }
            }
        };
        let new_name = name(new_rs);
        let old: Vec<&Value> = owned
            .iter()
            .copied()
            .filter(|rs| name(rs) != new_name)
            .collect();
        let rs_replicas = |rs: &Value| int(&rs["spec"]["replicas"]);
        let available_of = |rs: &Value| int(&rs["status"]["availableReplicas"]);
        let old_total: i64 = old.iter().map(|rs| rs_replicas(rs)).sum();
        let mut changed = created_new.is_some() || bumped;
        let events = &self.events;
        let scale = |store: &Store, info: &ResourceInfo, rs: &Value, to: i64| -> bool {
            let from = rs_replicas(rs);
            if from == to {
                return false;
            }
            let scaled = store
                .patch_shared(
                    info,
                    &ns(rs),
                    &name(rs),
                    PatchType::Merge,
                    &json!({"spec": {"replicas": to}}),
                    Part::Main,
                    &controller_writes(),
                )
                .is_ok();
            if scaled {
                let direction = if to > from { "up" } else { "down" };
                record_event(
                    store,
                    events,
                    deploy,
                    "Deployment",
                    "deployment-controller",
                    "ScalingReplicaSet",
                    format!(
                        "Scaled {direction} replica set {} from {from} to {to}",
                        name(rs)
                    ),
                );
            }
            scaled
        };
        let paused = spec["paused"].as_bool() == Some(true);
        if recreate {
            if old_total > 0 {
                for rs in &old {
                    changed |= scale(&self.store, &self.replicasets, rs, 0);
                }
            } else {
                let old_pods_left = old.iter().any(|rs| int(&rs["status"]["replicas"]) > 0);
                if !old_pods_left {
                    changed |= scale(&self.store, &self.replicasets, new_rs, replicas);
                }
            }
        } else if !paused || old.is_empty() {
            // Scale the new ReplicaSet up within replicas + maxSurge pods in total.
            let new_current = rs_replicas(new_rs);
            let max_total = replicas + surge;
            let new_target = if new_current > replicas {
                replicas
            } else if old_total + new_current < max_total {
                new_current + (max_total - old_total - new_current).min(replicas - new_current)
            } else {
                new_current
            };
            changed |= scale(&self.store, &self.replicasets, new_rs, new_target.max(0));
            // Scale old ones down only as far as replicas - maxUnavailable stay available, counting
            // the new ReplicaSet's pods that are not available yet.
            let new_unavailable = (new_target - available_of(new_rs)).max(0);
            let mut budget = old_total + new_target - (replicas - unavailable) - new_unavailable;
            let mut oldest_first = old.clone();
            oldest_first.sort_by_key(|rs| revision(rs));
            for rs in oldest_first {
                if budget <= 0 {
                    break;
                }
                let current = rs_replicas(rs);
                let down = current.min(budget);
                if down > 0 {
                    changed |= scale(&self.store, &self.replicasets, rs, current - down);
                    budget -= down;
                }
            }
        }
        // Old ReplicaSets beyond the history limit go away once scaled down.
        let limit = spec["revisionHistoryLimit"].as_i64().unwrap_or(10);
        let mut idle: Vec<&&Value> = old
            .iter()
            .filter(|rs| rs_replicas(rs) == 0 && int(&rs["status"]["replicas"]) == 0)
            .collect();
        idle.sort_by_key(|rs| revision(rs));
        let excess = idle.len() as i64 - limit;
        for rs in idle.iter().take(excess.max(0) as usize) {
            let _ = self.store.delete(
                &self.replicasets,
                &ns(rs),
                &name(rs),
                &DeleteOptions::default(),
                false,
            );
            changed = true;
        }

        // Status from the ReplicaSets as they are now.
        let Some(deploy_now) = self
            .store
            .get_shared(&self.deployments, &namespace, &name(deploy))
        else {
            return changed;
        };
        let mut names: Vec<String> = owned.iter().map(|rs| name(rs)).collect();
        names.push(new_name.clone());
        names.sort();
        names.dedup();
        let current_rs: Vec<Arc<Value>> = names
            .iter()
            .filter_map(|rs_name| {
                self.store
                    .get_shared(&self.replicasets, &namespace, rs_name)
            })
            .filter(|rs| controller_uid(rs) == Some(d_uid.as_str()))
            .collect();
        let sum =
            |field: &str| -> i64 { current_rs.iter().map(|rs| int(&rs["status"][field])).sum() };
        let new_now: &Value = current_rs
            .iter()
            .find(|rs| name(rs) == new_name)
            .map_or(new_rs, |rs| &**rs);
        let total_replicas = sum("replicas");
        let updated = int(&new_now["status"]["replicas"]);
        let ready = sum("readyReplicas");
        let available = sum("availableReplicas");
        let spec_total: i64 = current_rs
            .iter()
            .map(|rs| int(&rs["spec"]["replicas"]))
            .sum();
        let mut status = json!({"observedGeneration": deploy_now["metadata"]["generation"]});
        for (key, value) in [
            ("replicas", total_replicas),
            ("updatedReplicas", updated),
            ("readyReplicas", ready),
            ("availableReplicas", available),
            ("unavailableReplicas", (spec_total - available).max(0)),
        ] {
            if value != 0 {
                status[key] = json!(value);
            }
        }
        let old_conditions = deploy_now["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let find = |t: &str| old_conditions.iter().find(|c| c["type"] == t).cloned();
        let now = now_rfc3339();
        let condition = |t: &str, s: &str, reason: &str, message: String| -> Value {
            match find(t) {
                Some(c) if c["status"] == s && c["reason"] == reason => c,
                Some(c) if c["status"] == s => {
                    json!({"type": t, "status": s, "reason": reason, "message": message,
                    "lastUpdateTime": now, "lastTransitionTime": c["lastTransitionTime"]})
                }
                _ => {
                    json!({"type": t, "status": s, "reason": reason, "message": message, "lastUpdateTime": now, "lastTransitionTime": now})
                }
            }
        };
        let available_condition = if available >= replicas - unavailable {
            condition(
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.".into(),
            )
        } else {
            condition(
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.".into(),
            )
        };
        let complete = updated == replicas
            && total_replicas == replicas
            && int(&new_now["status"]["availableReplicas"]) == replicas
            && int(&new_now["spec"]["replicas"]) == replicas;
        let previous = find("Progressing");
        let deadline = spec["progressDeadlineSeconds"].as_i64().unwrap_or(600);
        let progressing = if paused {
            condition(
                "Progressing",
                "Unknown",
                "DeploymentPaused",
                "Deployment is paused".into(),
            )
        } else if complete {
            condition(
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                format!("ReplicaSet \"{new_name}\" has successfully progressed."),
            )
        } else if created_new.is_some() {
            condition(
                "Progressing",
                "True",
                "NewReplicaSetCreated",
                format!("Created new replica set \"{new_name}\""),
            )
        } else {
            let stalled = previous.as_ref().is_some_and(|c| {
                c["reason"] == "ProgressDeadlineExceeded"
                    || c["lastUpdateTime"]
                        .as_str()
                        .and_then(seconds_since)
                        .is_some_and(|s| s > deadline)
            });
            let counts_changed = deploy_now["status"]["updatedReplicas"]
                != status["updatedReplicas"]
                || deploy_now["status"]["availableReplicas"] != status["availableReplicas"]
                || deploy_now["status"]["readyReplicas"] != status["readyReplicas"]
                || deploy_now["status"]["replicas"] != status["replicas"];
            if stalled && !counts_changed {
                condition(
                    "Progressing",
                    "False",
                    "ProgressDeadlineExceeded",
                    format!("ReplicaSet \"{new_name}\" has timed out progressing."),
                )
            } else if counts_changed
                || previous
                    .as_ref()
                    .is_none_or(|c| c["reason"] == "NewReplicaSetAvailable")
            {
                json!({"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
                    "message": format!("ReplicaSet \"{new_name}\" is progressing."), "lastUpdateTime": now,
                    "lastTransitionTime": previous.as_ref().filter(|c| c["status"] == "True").map_or(json!(now), |c| c["lastTransitionTime"].clone())})
            } else {
                previous.clone().unwrap_or_else(|| {
                    condition(
                        "Progressing",
                        "True",
                        "ReplicaSetUpdated",
                        format!("ReplicaSet \"{new_name}\" is progressing."),
                    )
                })
            }
        };
        status["conditions"] = json!([available_condition, progressing]);
        let new_revision =
            new_now["metadata"]["annotations"]["deployment.kubernetes.io/revision"].clone();
        let revision_moved = new_revision.is_string()
            && deploy_now["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                != new_revision;
        if !revision_moved && deploy_now["status"] == status {
            return changed;
        }
        let mut updated = Value::clone(&deploy_now);
        if revision_moved {
            if !updated["metadata"]["annotations"].is_object() {
                updated["metadata"]["annotations"] = json!({});
            }
            updated["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = new_revision;
        }
        updated["status"] = status;
        let written = self
            .store
            .update_shared(
                &self.deployments,
                &namespace,
                &name(deploy),
                updated,
                Part::Status,
                &controller_writes(),
            )
            .is_ok();
        changed | written
    }
}

/// Whether a change to objects stored under `resource` (a storage key) can give the built-in
/// controllers work.
fn feeds_controllers(resource: &str) -> bool {
    matches!(
        resource,
        "pods"
            | "replicasets.apps"
            | "deployments.apps"
            | "jobs.batch"
            | "daemonsets.apps"
            | "services"
            | "endpoints"
            | "nodes"
    )
}

/// Runs the controllers over `nodes` nodes in the background until the returned handle is
/// aborted: a pass after every relevant change, and every `period` for time-based progress
/// (readiness delays, deadlines, Pending pods).
pub fn spawn(
    store: Arc<Store>,
    runtime: Arc<dyn PodRuntime>,
    period: Duration,
    nodes: usize,
    metrics: Arc<serin_sandbox_apiserver::instrument::Metrics>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut controllers = Controllers::new(store.clone(), runtime, nodes);
        let mut changes = store.subscribe();
        loop {
            // Settle: run passes until nothing changes (bounded, so a flapping object cannot spin),
            // on a blocking thread, so the API server's requests and watches keep the runtime's.
            let pass_metrics = metrics.clone();
            let settled = tokio::task::spawn_blocking(move || {
                for _ in 0..20 {
                    let started = Instant::now();
                    let changed = controllers.reconcile();
                    pass_metrics.controller_pass(started.elapsed());
                    if !changed {
                        break;
                    }
                }
                controllers
            });
            controllers = match settled.await {
                Ok(controllers) => controllers,
                Err(_) => return,
            };
            // A pass reads every workload object, so it runs once for all the changes that queued
            // meanwhile, and not at all for objects no controller reads (Canaries, Events, ...):
            // otherwise a busy client makes the passes O(changes × objects).
            let deadline = tokio::time::Instant::now() + period;
            loop {
                let received = tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => break,
                    received = changes.recv() => received,
                };
                let mut relevant = match received {
                    Ok(change) => feeds_controllers(&change.resource),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => true,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                loop {
                    match changes.try_recv() {
                        Ok(change) => relevant |= feeds_controllers(&change.resource),
                        Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => {
                            relevant = true
                        }
                        Err(tokio::sync::broadcast::error::TryRecvError::Closed) => return,
                        Err(tokio::sync::broadcast::error::TryRecvError::Empty) => break,
                    }
                }
                if relevant {
                    break;
                }
            }
        }
    })
}

/// Counts of pods by phase, for tests and the CLI.
pub fn pod_phases(store: &Store) -> BTreeMap<String, usize> {
    let pods = store.resource("", "v1", "pods").expect("built in");
    let mut counts = BTreeMap::new();
    for pod in store
        .list(
            &pods,
            None,
            &LabelSelector::default(),
            &FieldSelector::default(),
        )
        .0
    {
        *counts
            .entry(pod["status"]["phase"].as_str().unwrap_or("").to_string())
            .or_insert(0) += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Controllers over a fresh store with three nodes, whose pods are Ready at once.
    fn three_node_cluster() -> (Arc<Store>, Controllers) {
        let store = Store::new();
        let runtime = Arc::new(DelayRuntime {
            delay: Duration::ZERO,
        });
        let controllers = Controllers::new(store.clone(), runtime, 3);
        (store, controllers)
    }

    fn settle(controllers: &mut Controllers) {
        for _ in 0..20 {
            if !controllers.reconcile() {
                return;
            }
        }
    }

    fn create(store: &Store, plural: &str, group: &str, object: Value) {
        let info = store.resource(group, "v1", plural).unwrap();
        store
            .create(&info, Some("default"), object, &controller_writes())
            .unwrap();
    }

    /// Every object of a core/v1 `plural`.
    fn list(store: &Store, plural: &str) -> Vec<Value> {
        let info = store.resource("", "v1", plural).unwrap();
        store
            .list(
                &info,
                None,
                &LabelSelector::default(),
                &FieldSelector::default(),
            )
            .0
    }

    fn pods(store: &Store) -> Vec<Value> {
        list(store, "pods")
    }

    fn set_taints(store: &Store, node: &str, taints: Value) {
        let nodes = store.resource("", "v1", "nodes").unwrap();
        store
            .patch(
                &nodes,
                "",
                node,
                PatchType::Merge,
                &json!({"spec": {"taints": taints}}),
                Part::Main,
                &controller_writes(),
            )
            .unwrap();
    }

    fn warnings(store: &Store) -> Vec<String> {
        list(store, "events")
            .iter()
            .filter(|e| e["reason"] == "FailedScheduling")
            .map(|e| e["message"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    fn web_pod(name: &str) -> Value {
        json!({"metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "podinfo"}],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}}})
    }

    /// The addresses (ready and not) of the Endpoints `name`, by pod name.
    fn endpoint_pods(store: &Store, name: &str) -> Vec<String> {
        let endpoints = list(store, "endpoints");
        let Some(endpoints) = endpoints.iter().find(|e| e["metadata"]["name"] == name) else {
            return Vec::new();
        };
        let mut pods: Vec<String> = endpoints["subsets"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| {
                s["addresses"]
                    .as_array()
                    .into_iter()
                    .chain(s["notReadyAddresses"].as_array())
                    .flatten()
            })
            .map(|a| {
                a["targetRef"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        pods.sort();
        pods
    }

    #[test]
    fn endpoints_follow_pods_that_come_are_relabelled_and_go() {
        let (store, mut controllers) = three_node_cluster();
        create(
            &store,
            "services",
            "",
            json!({"metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 9898}]}}),
        );
        let pod = |name: &str| {
            json!({"metadata": {"name": name, "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "podinfo",
                    "ports": [{"containerPort": 9898}]}]}})
        };
        for name in ["web-a", "web-b", "web-c"] {
            create(&store, "pods", "", pod(name));
        }
        settle(&mut controllers);
        assert_eq!(endpoint_pods(&store, "web"), ["web-a", "web-b", "web-c"]);

        let pods = store.resource("", "v1", "pods").unwrap();
        store
            .patch(
                &pods,
                "default",
                "web-b",
                PatchType::Merge,
                &json!({"metadata": {"labels": {"app": "other"}}}),
                Part::Main,
                &controller_writes(),
            )
            .unwrap();
        store
            .delete(&pods, "default", "web-c", &DeleteOptions::default(), false)
            .unwrap();
        create(&store, "pods", "", pod("web-d"));
        settle(&mut controllers);
        assert_eq!(endpoint_pods(&store, "web"), ["web-a", "web-d"]);
        // What the controller skipped as unchanged, a controller without memory agrees with.
        assert!(
            !crate::endpoints::EndpointsController::default().sync(&store, &controller_writes()),
            "a pass from scratch would change the Endpoints"
        );
    }

    #[test]
    fn the_sandbox_has_the_asked_number_of_labelled_nodes() {
        let (store, _controllers) = three_node_cluster();
        let info = store.resource("", "v1", "nodes").unwrap();
        let nodes = store
            .list(
                &info,
                None,
                &LabelSelector::default(),
                &FieldSelector::default(),
            )
            .0;
        let names: Vec<String> = nodes.iter().map(name).collect();
        assert_eq!(names, ["sandbox-node", "sandbox-node-2", "sandbox-node-3"]);
        assert_eq!(
            nodes[1]["metadata"]["labels"],
            json!({"kubernetes.io/hostname": "sandbox-node-2", "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": "zone-2"})
        );
        assert_eq!(nodes[2]["status"]["conditions"][0]["type"], "Ready");
    }

    #[test]
    fn pods_created_together_with_anti_affinity_land_on_different_nodes() {
        let (store, mut controllers) = three_node_cluster();
        for n in 1..=4 {
            create(&store, "pods", "", web_pod(&format!("web-{n}")));
        }
        // One pass binds the first three (each decision sees the ones bound before it).
        controllers.reconcile();
        let mut nodes: Vec<String> = pods(&store)
            .iter()
            .filter_map(|p| p["spec"]["nodeName"].as_str().map(String::from))
            .collect();
        nodes.sort();
        assert_eq!(nodes, ["sandbox-node", "sandbox-node-2", "sandbox-node-3"]);
        settle(&mut controllers);
        settle(&mut controllers);
        let pending: Vec<Value> = pods(&store)
            .into_iter()
            .filter(|p| p["spec"]["nodeName"].is_null())
            .collect();
        assert_eq!(pending.len(), 1);
        let message = "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. \
            preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod..";
        assert_eq!(pending[0]["status"]["phase"], "Pending");
        assert_eq!(
            pending[0]["status"]["conditions"][0],
            json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": message, "lastTransitionTime": pending[0]["status"]["conditions"][0]["lastTransitionTime"]})
        );
        assert_eq!(
            warnings(&store),
            [message],
            "one event, however many passes"
        );
        // Deleting a pod that blocks it lets it schedule.
        let info = store.resource("", "v1", "pods").unwrap();
        store
            .delete(&info, "default", "web-1", &DeleteOptions::default(), false)
            .unwrap();
        settle(&mut controllers);
        assert!(
            pods(&store)
                .iter()
                .all(|p| p["status"]["phase"] == "Running")
        );
    }

    #[test]
    fn a_pending_pod_runs_once_the_taint_keeping_it_out_is_removed() {
        let (store, mut controllers) = three_node_cluster();
        for node in ["sandbox-node", "sandbox-node-2", "sandbox-node-3"] {
            set_taints(
                &store,
                node,
                json!([{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]),
            );
        }
        create(&store, "pods", "", web_pod("web"));
        settle(&mut controllers);
        assert_eq!(
            warnings(&store),
            [
                "0/3 nodes are available: 3 node(s) had untolerated taint {dedicated: infra}. \
              preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
            ]
        );
        set_taints(&store, "sandbox-node-2", json!(null));
        settle(&mut controllers);
        let pod = &pods(&store)[0];
        assert_eq!(pod["spec"]["nodeName"], "sandbox-node-2");
        assert_eq!(pod["status"]["phase"], "Running");
    }

    #[test]
    fn a_daemonset_runs_on_every_node_whose_taints_it_tolerates() {
        let (store, mut controllers) = three_node_cluster();
        set_taints(
            &store,
            "sandbox-node-3",
            json!([{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]),
        );
        let nodes = store.resource("", "v1", "nodes").unwrap();
        store
            .patch(
                &nodes,
                "",
                "sandbox-node",
                PatchType::Merge,
                &json!({"spec": {"unschedulable": true}}),
                Part::Main,
                &controller_writes(),
            )
            .unwrap();
        create(
            &store,
            "daemonsets",
            "apps",
            json!({"metadata": {"name": "agent"}, "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {"metadata": {"labels": {"app": "agent"}},
                    "spec": {"containers": [{"name": "agent", "image": "podinfo"}]}}}}),
        );
        settle(&mut controllers);
        let placed = |store: &Store| {
            let mut nodes: Vec<String> = pods(store)
                .iter()
                .filter_map(|p| p["spec"]["nodeName"].as_str().map(String::from))
                .collect();
            nodes.sort();
            nodes
        };
        assert_eq!(
            placed(&store),
            ["sandbox-node", "sandbox-node-2"],
            "the cordoned node runs one, the tainted one none"
        );
        let daemonsets = store.resource("apps", "v1", "daemonsets").unwrap();
        let status =
            |store: &Store| store.get(&daemonsets, "default", "agent").unwrap()["status"].clone();
        for field in [
            "desiredNumberScheduled",
            "currentNumberScheduled",
            "numberReady",
            "numberAvailable",
            "updatedNumberScheduled",
        ] {
            assert_eq!(status(&store)[field], 2, "{field}");
        }
        assert!(
            pods(&store)[0]["spec"]["tolerations"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["key"] == "node.kubernetes.io/unschedulable"),
            "daemon pods tolerate a cordon, as the DaemonSet controller's do"
        );
        store
            .patch(
                &daemonsets,
                "default",
                "agent",
                PatchType::Merge,
                &json!({"spec": {"template": {"spec": {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}}}}),
                Part::Main,
                &controller_writes(),
            )
            .unwrap();
        settle(&mut controllers);
        settle(&mut controllers);
        assert_eq!(
            placed(&store),
            ["sandbox-node", "sandbox-node-2", "sandbox-node-3"]
        );
        assert_eq!(status(&store)["numberReady"], 3);
        assert_eq!(status(&store)["desiredNumberScheduled"], 3);
        // A NoExecute taint the pods do not tolerate takes the pod off that node.
        set_taints(
            &store,
            "sandbox-node-2",
            json!([{"key": "maintenance", "effect": "NoExecute"}]),
        );
        settle(&mut controllers);
        assert_eq!(placed(&store), ["sandbox-node", "sandbox-node-3"]);
        assert_eq!(status(&store)["desiredNumberScheduled"], 2);
    }
}
