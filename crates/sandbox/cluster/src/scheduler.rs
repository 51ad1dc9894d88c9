//! The sandbox's scheduler, deciding as kube-scheduler does: filters drop the nodes a pod may not
//! run on (cordon, taints, node selector and affinity, inter-pod affinity and anti-affinity), then
//! the remaining nodes are scored (preferred affinities, then the fewest pods) and the best one
//! wins, ties going to the first node by name. Everything here is a pure function over the JSON
//! Node, Pod and Namespace objects; the DaemonSet controller uses the node rules as well.

use serde_json::Value;
use serin_sandbox_apiserver::selectors::LabelSelector;
use std::collections::{BTreeMap, HashMap, HashSet};

/// What the scheduler sees of the cluster when it places one pod.
#[derive(Clone, Copy)]
pub struct Cluster<'a> {
    /// Every Node object as stored now.
    pub nodes: &'a [Value],
    /// Every Pod object (shared, as the store keeps them); those bound to a node
    /// (`spec.nodeName`) and not ended occupy it.
    pub pods: &'a [std::sync::Arc<Value>],
    /// Every Namespace object, for affinity terms with a `namespaceSelector`.
    pub namespaces: &'a [Value],
    /// The pods occupying each node, by node name, when the caller counted them: then `pods`
    /// need only hold the pods whose terms can concern the pod being placed (see
    /// [`has_pod_affinity`]).
    pub pods_per_node: Option<&'a HashMap<String, usize>>,
}

/// Whether `pod` has pod affinity or anti-affinity terms (required or preferred). Placing a pod
/// without them needs, of the other pods, only those with anti-affinity and the count per node.
pub fn has_pod_affinity(pod: &Value) -> bool {
    let affinity = &pod["spec"]["affinity"];
    affinity["podAffinity"].is_object() || has_pod_anti_affinity(pod)
}

/// Whether `pod` has pod anti-affinity terms, which can keep other pods off its node.
pub fn has_pod_anti_affinity(pod: &Value) -> bool {
    pod["spec"]["affinity"]["podAntiAffinity"].is_object()
}

/// Effects of the taints that keep a pod off a node unless it tolerates them.
pub const BLOCKING_EFFECTS: &[&str] = &["NoSchedule", "NoExecute"];

const UNSCHEDULABLE: &str = "node(s) were unschedulable";
const NODE_AFFINITY: &str = "node(s) didn't match Pod's node affinity/selector";
const POD_AFFINITY: &str = "node(s) didn't match pod affinity rules";
const POD_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";
const EXISTING_ANTI_AFFINITY: &str = "node(s) didn't satisfy existing pods anti-affinity rules";
const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
const NO_VICTIMS: &str = "No preemption victims found for incoming pod.";

/// Why a node cannot take a pod, in kube-scheduler's words.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Refusal {
    reason: String,
    /// Whether removing pods could make room, so preemption would look for victims there (it
    /// finds none: the sandbox never preempts).
    resolvable: bool,
}

impl Refusal {
    fn unresolvable(reason: impl Into<String>) -> Self {
        Refusal {
            reason: reason.into(),
            resolvable: false,
        }
    }

    fn resolvable(reason: &str) -> Self {
        Refusal {
            reason: reason.into(),
            resolvable: true,
        }
    }
}

fn name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

fn label<'v>(object: &'v Value, key: &str) -> Option<&'v str> {
    object["metadata"]["labels"][key].as_str()
}

fn items(value: &Value) -> impl Iterator<Item = &Value> {
    value.as_array().into_iter().flatten()
}

/// Whether `pod` takes up room on its node: bound, not being deleted, and not ended.
pub fn occupies_node(pod: &Value) -> bool {
    pod["spec"]["nodeName"].is_string()
        && !pod["metadata"]["deletionTimestamp"].is_string()
        && !matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        )
}

/// Whether `toleration` tolerates `taint`: same key (or an empty key with `Exists`), same effect
/// (or an empty one), and with `Equal` (the default) the same value.
pub fn tolerates(toleration: &Value, taint: &Value) -> bool {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let effect = text(&toleration["effect"]);
    if !effect.is_empty() && effect != text(&taint["effect"]) {
        return false;
    }
    let key = text(&toleration["key"]);
    if !key.is_empty() && key != text(&taint["key"]) {
        return false;
    }
    match toleration["operator"].as_str().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => text(&toleration["value"]) == text(&taint["value"]),
        _ => false,
    }
}

/// The first taint of `node` with one of `effects` that none of `tolerations` (a pod spec's
/// list) tolerates.
pub fn untolerated_taint<'n>(
    node: &'n Value,
    tolerations: &Value,
    effects: &[&str],
) -> Option<&'n Value> {
    items(&node["spec"]["taints"])
        .filter(|taint| effects.contains(&taint["effect"].as_str().unwrap_or_default()))
        .find(|taint| !items(tolerations).any(|t| tolerates(t, taint)))
}

/// Whether a node selector requirement (`key`, `operator`, `values`) holds for `value`, the
/// node's label or field (`None` when it has none).
fn requirement_holds(requirement: &Value, value: Option<&str>) -> bool {
    let values: Vec<&str> = items(&requirement["values"])
        .filter_map(Value::as_str)
        .collect();
    let number = |text: &str| text.trim().parse::<i64>().ok();
    match requirement["operator"].as_str().unwrap_or_default() {
        "In" => value.is_some_and(|v| values.contains(&v)),
        "NotIn" => !value.is_some_and(|v| values.contains(&v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        operator @ ("Gt" | "Lt") => {
            let (Some(have), [bound]) = (value.and_then(number), values.as_slice()) else {
                return false;
            };
            let Some(bound) = number(bound) else {
                return false;
            };
            if operator == "Gt" {
                have > bound
            } else {
                have < bound
            }
        }
        _ => false,
    }
}

/// Whether `node` satisfies a NodeSelectorTerm: all its `matchExpressions` (on labels) and
/// `matchFields` (on `metadata.name`) hold; a term with neither matches no node.
fn node_term_matches(term: &Value, node: &Value) -> bool {
    let expressions: Vec<&Value> = items(&term["matchExpressions"]).collect();
    let fields: Vec<&Value> = items(&term["matchFields"]).collect();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    expressions.iter().all(|e| {
        let key = e["key"].as_str().unwrap_or_default();
        requirement_holds(e, label(node, key))
    }) && fields.iter().all(|f| {
        let value = (f["key"] == "metadata.name").then(|| name(node));
        requirement_holds(f, value)
    })
}

/// Whether `node` is one a pod with `spec` may run on by its `nodeSelector` (every label equal)
/// and its required node affinity (any of the `nodeSelectorTerms` matches).
pub fn matches_node_selection(spec: &Value, node: &Value) -> bool {
    let selector_holds = spec["nodeSelector"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(key, value)| node["metadata"]["labels"][key.as_str()] == *value);
    let required =
        &spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    selector_holds
        && (required.is_null()
            || items(&required["nodeSelectorTerms"]).any(|term| node_term_matches(term, node)))
}

/// Where a DaemonSet's pod (of pod spec `spec`, with the controller's tolerations) belongs on
/// `node`, as the DaemonSet controller decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DaemonFit {
    /// A daemon pod should run there (counted in `desiredNumberScheduled`).
    pub should_run: bool,
    /// A daemon pod already there may stay (false for a node the selector or affinity no longer
    /// picks, or with a `NoExecute` taint the pod does not tolerate).
    pub may_stay: bool,
}

/// The DaemonSet controller's verdict for `node`: the node selector and required node affinity
/// decide both; an untolerated `NoSchedule` taint keeps new pods off but lets a running one stay,
/// an untolerated `NoExecute` one does neither. A cordoned node still runs daemon pods.
pub fn daemon_fit(spec: &Value, node: &Value) -> DaemonFit {
    if !matches_node_selection(spec, node) {
        return DaemonFit {
            should_run: false,
            may_stay: false,
        };
    }
    let tolerations = &spec["tolerations"];
    DaemonFit {
        should_run: untolerated_taint(node, tolerations, BLOCKING_EFFECTS).is_none(),
        may_stay: untolerated_taint(node, tolerations, &["NoExecute"]).is_none(),
    }
}

/// One PodAffinityTerm, read relative to the namespace of the pod that states it.
struct Term {
    /// `None` (no or an invalid labelSelector): the term matches no pod.
    selector: Option<LabelSelector>,
    namespaces: HashSet<String>,
    namespace_selector: Option<LabelSelector>,
    topology_key: String,
}

impl Term {
    fn read(raw: &Value, owner_namespace: &str) -> Term {
        let selector_of = |v: &Value| {
            v.is_object()
                .then(|| LabelSelector::from_json(v).ok())
                .flatten()
        };
        let mut namespaces: HashSet<String> = items(&raw["namespaces"])
            .filter_map(|n| n.as_str().map(String::from))
            .collect();
        let namespace_selector = selector_of(&raw["namespaceSelector"]);
        if namespaces.is_empty() && namespace_selector.is_none() {
            namespaces.insert(owner_namespace.to_string());
        }
        Term {
            selector: selector_of(&raw["labelSelector"]),
            namespaces,
            namespace_selector,
            topology_key: raw["topologyKey"].as_str().unwrap_or_default().to_string(),
        }
    }

    /// Whether `pod` is one the term selects: in one of its namespaces, with matching labels.
    fn matches(&self, pod: &Value, namespaces: &[Value]) -> bool {
        let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
        let in_namespace = self.namespaces.contains(namespace)
            || self.namespace_selector.as_ref().is_some_and(|selector| {
                selector.is_empty()
                    || namespaces
                        .iter()
                        .find(|n| name(n) == namespace)
                        .is_some_and(|n| selector.matches(n))
            });
        in_namespace && self.selector.as_ref().is_some_and(|s| s.matches(pod))
    }
}

/// The pod's required terms of `kind` (`podAffinity` or `podAntiAffinity`).
fn required_terms(pod: &Value, kind: &str) -> Vec<Term> {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    items(&pod["spec"]["affinity"][kind]["requiredDuringSchedulingIgnoredDuringExecution"])
        .map(|raw| Term::read(raw, namespace))
        .collect()
}

/// The pod's preferred terms of `kind` with their weights.
fn preferred_terms(pod: &Value, kind: &str) -> Vec<(i64, Term)> {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    items(&pod["spec"]["affinity"][kind]["preferredDuringSchedulingIgnoredDuringExecution"])
        .map(|w| {
            let weight = w["weight"].as_i64().unwrap_or(0);
            (weight, Term::read(&w["podAffinityTerm"], namespace))
        })
        .collect()
}

/// A topology domain: a topology key and a node's value of it.
type Domain = (String, String);

/// What one pod's placement needs to know of the pods already placed, computed once per pod.
struct Placement<'a> {
    pod: &'a Value,
    cluster: Cluster<'a>,
    /// The pods that occupy a known node, with that node.
    placed: Vec<(&'a Value, &'a Value)>,
    affinity: Vec<Term>,
    /// Domains holding a pod that matches all of the pod's required affinity terms.
    affine_domains: HashSet<Domain>,
    /// Domains holding a pod that one of the pod's required anti-affinity terms matches.
    repelling_domains: HashSet<Domain>,
    /// Domains holding a pod whose required anti-affinity matches the pod being placed.
    repelled_domains: HashSet<Domain>,
    /// Preferred pod (anti-)affinity score of each domain.
    domain_scores: HashMap<Domain, i64>,
}

fn domain_of(term: &Term, node: &Value) -> Option<Domain> {
    label(node, &term.topology_key).map(|v| (term.topology_key.clone(), v.to_string()))
}

impl<'a> Placement<'a> {
    fn new(pod: &'a Value, cluster: Cluster<'a>) -> Self {
        let nodes: HashMap<&str, &Value> = cluster.nodes.iter().map(|n| (name(n), n)).collect();
        let own_uid = &pod["metadata"]["uid"];
        let placed: Vec<(&Value, &Value)> = cluster
            .pods
            .iter()
            .filter(|p| occupies_node(p) && (own_uid.is_null() || p["metadata"]["uid"] != *own_uid))
            .filter_map(|p| {
                let node = nodes.get(p["spec"]["nodeName"].as_str()?)?;
                Some((&**p, *node))
            })
            .collect();
        let affinity = required_terms(pod, "podAffinity");
        let anti_affinity = required_terms(pod, "podAntiAffinity");
        let preferred: Vec<(i64, Term)> = preferred_terms(pod, "podAffinity")
            .into_iter()
            .chain(
                preferred_terms(pod, "podAntiAffinity")
                    .into_iter()
                    .map(|(w, t)| (-w, t)),
            )
            .collect();
        let namespaces = cluster.namespaces;
        let mut affine_domains = HashSet::new();
        let mut repelling_domains = HashSet::new();
        let mut repelled_domains = HashSet::new();
        let mut domain_scores: HashMap<Domain, i64> = HashMap::new();
        for &(other, node) in &placed {
            if !affinity.is_empty() && affinity.iter().all(|t| t.matches(other, namespaces)) {
                affine_domains.extend(affinity.iter().filter_map(|t| domain_of(t, node)));
            }
            for term in anti_affinity
                .iter()
                .filter(|t| t.matches(other, namespaces))
            {
                repelling_domains.extend(domain_of(term, node));
            }
            // Most pods have no anti-affinity: skip parsing for them.
            let repels = has_pod_anti_affinity(other);
            for term in repels
                .then(|| required_terms(other, "podAntiAffinity"))
                .into_iter()
                .flatten()
            {
                if term.matches(pod, namespaces) {
                    repelled_domains.extend(domain_of(&term, node));
                }
            }
            for (weight, term) in preferred
                .iter()
                .filter(|(_, t)| t.matches(other, namespaces))
            {
                if let Some(domain) = domain_of(term, node) {
                    *domain_scores.entry(domain).or_default() += weight;
                }
            }
        }
        Placement {
            pod,
            cluster,
            placed,
            affinity,
            affine_domains,
            repelling_domains,
            repelled_domains,
            domain_scores,
        }
    }

    /// Why `node` cannot take the pod, checked in kube-scheduler's plugin order; `None`: it fits.
    fn refusal(&self, node: &Value) -> Option<Refusal> {
        let spec = &self.pod["spec"];
        let tolerations = &spec["tolerations"];
        let cordon =
            serde_json::json!({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"});
        if node["spec"]["unschedulable"] == true
            && !items(tolerations).any(|t| tolerates(t, &cordon))
        {
            return Some(Refusal::unresolvable(UNSCHEDULABLE));
        }
        if let Some(taint) = untolerated_taint(node, tolerations, BLOCKING_EFFECTS) {
            return Some(Refusal::unresolvable(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                taint["key"].as_str().unwrap_or_default(),
                taint["value"].as_str().unwrap_or_default()
            )));
        }
        if !matches_node_selection(spec, node) {
            return Some(Refusal::unresolvable(NODE_AFFINITY));
        }
        if !self.affinity_holds(node) {
            return Some(Refusal::unresolvable(POD_AFFINITY));
        }
        let domains = || {
            node["metadata"]["labels"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        };
        if domains().any(|d| self.repelling_domains.contains(&d)) {
            return Some(Refusal::resolvable(POD_ANTI_AFFINITY));
        }
        if domains().any(|d| self.repelled_domains.contains(&d)) {
            return Some(Refusal::resolvable(EXISTING_ANTI_AFFINITY));
        }
        None
    }

    /// The required pod affinity: every term's domain on `node` holds a pod matching all terms;
    /// or no such pod exists anywhere and the pod matches its own terms (the first of a group).
    fn affinity_holds(&self, node: &Value) -> bool {
        let mut domains = Vec::new();
        for term in &self.affinity {
            match domain_of(term, node) {
                Some(domain) => domains.push(domain),
                None => return false,
            }
        }
        domains.iter().all(|d| self.affine_domains.contains(d))
            || (self.affine_domains.is_empty()
                && self
                    .affinity
                    .iter()
                    .all(|t| t.matches(self.pod, self.cluster.namespaces)))
    }

    /// The preferred affinities' score of `node` (higher is better): the weight of each preferred
    /// pod affinity term once per matching pod in the node's domain (subtracted for
    /// anti-affinity), plus the weight of each preferred node affinity term the node matches.
    fn score(&self, node: &Value) -> i64 {
        let pods: i64 = node["metadata"]["labels"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| {
                let domain = (k.clone(), v.as_str()?.to_string());
                self.domain_scores.get(&domain)
            })
            .sum();
        let nodes: i64 = items(
            &self.pod["spec"]["affinity"]["nodeAffinity"]
                ["preferredDuringSchedulingIgnoredDuringExecution"],
        )
        .filter(|p| {
            let preference = &p["preference"];
            let empty = items(&preference["matchExpressions"]).next().is_none()
                && items(&preference["matchFields"]).next().is_none();
            preference.is_object() && (empty || node_term_matches(preference, node))
        })
        .map(|p| p["weight"].as_i64().unwrap_or(0))
        .sum();
        pods + nodes
    }

    fn pods_on(&self, node: &Value) -> usize {
        match self.cluster.pods_per_node {
            Some(counts) => counts.get(name(node)).copied().unwrap_or(0),
            None => self
                .placed
                .iter()
                .filter(|(_, n)| name(n) == name(node))
                .count(),
        }
    }
}

/// Picks the node for `pod` (which has no `spec.nodeName` yet) among `cluster.nodes`, or says why
/// none fits in kube-scheduler's FailedScheduling form (`0/3 nodes are available: 1 node(s) had
/// untolerated taint {dedicated: infra}, 2 node(s) were unschedulable. preemption: ...`).
pub fn schedule(pod: &Value, cluster: Cluster) -> Result<String, String> {
    if cluster.nodes.is_empty() {
        return Err("no nodes available to schedule pods".into());
    }
    let placement = Placement::new(pod, cluster);
    let mut fitting = Vec::new();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut preemption: BTreeMap<&str, usize> = BTreeMap::new();
    for node in cluster.nodes {
        match placement.refusal(node) {
            None => fitting.push(node),
            Some(refusal) => {
                *reasons.entry(refusal.reason).or_default() += 1;
                let outcome = if refusal.resolvable {
                    NO_VICTIMS
                } else {
                    NOT_HELPFUL
                };
                *preemption.entry(outcome).or_default() += 1;
            }
        }
    }
    let tolerations = &pod["spec"]["tolerations"];
    let best = fitting.into_iter().min_by_key(|node| {
        (
            std::cmp::Reverse(placement.score(node)),
            // kube-scheduler's TaintToleration score: fewer untolerated PreferNoSchedule taints.
            items(&node["spec"]["taints"])
                .filter(|t| t["effect"] == "PreferNoSchedule")
                .filter(|t| !items(tolerations).any(|tol| tolerates(tol, t)))
                .count(),
            placement.pods_on(node),
            name(node),
        )
    });
    match best {
        Some(node) => Ok(name(node).to_string()),
        None => {
            let total = cluster.nodes.len();
            let counted = |counts: Vec<String>| {
                let mut counts = counts;
                counts.sort();
                counts.join(", ")
            };
            let reasons = counted(reasons.iter().map(|(r, n)| format!("{n} {r}")).collect());
            let preemption = counted(preemption.iter().map(|(r, n)| format!("{n} {r}")).collect());
            Err(format!(
                "0/{total} nodes are available: {reasons}. preemption: 0/{total} nodes are available: {preemption}."
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    const HOSTNAME: &str = "kubernetes.io/hostname";

    /// A node `name` in zone `zone` with `labels` besides its hostname and zone.
    fn node(name: &str, zone: &str, labels: Value) -> Value {
        let mut all = json!({HOSTNAME: name, "topology.kubernetes.io/zone": zone});
        for (k, v) in labels.as_object().into_iter().flatten() {
            all[k] = v.clone();
        }
        json!({"metadata": {"name": name, "labels": all}, "spec": {}})
    }

    /// Three nodes a, b and c, in zones 1, 2 and 3.
    fn three_nodes() -> Vec<Value> {
        vec![
            node("a", "zone-1", json!({"disk": "ssd", "cores": "4"})),
            node("b", "zone-2", json!({"disk": "hdd", "cores": "16"})),
            node("c", "zone-3", json!({"cores": "64"})),
        ]
    }

    /// A pod `name` in namespace `default` labelled `app: <app>`, with `spec`.
    fn pod(name: &str, app: &str, spec: Value) -> Value {
        json!({"metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "labels": {"app": app}}, "spec": spec})
    }

    fn on(mut pod: Value, node: &str) -> Value {
        pod["spec"]["nodeName"] = json!(node);
        pod
    }

    fn place(pod: &Value, nodes: &[Value], pods: &[Value]) -> Result<String, String> {
        let pods: Vec<Arc<Value>> = pods.iter().cloned().map(Arc::new).collect();
        schedule(
            pod,
            Cluster {
                nodes,
                pods: &pods,
                namespaces: &[],
                pods_per_node: None,
            },
        )
    }

    /// Places `pods` one after the other as a scheduling pass does; the node of each.
    fn place_in_turn(pods: &[Value], nodes: &[Value]) -> Vec<Result<String, String>> {
        let mut placed = Vec::new();
        let mut outcomes = Vec::new();
        for p in pods {
            let outcome = place(p, nodes, &placed);
            if let Ok(node) = &outcome {
                placed.push(on(p.clone(), node));
            }
            outcomes.push(outcome);
        }
        outcomes
    }

    fn anti_affinity(app: &str, topology_key: &str) -> Value {
        json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": topology_key}]}}})
    }

    fn node_affinity(terms: Value) -> Value {
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}}})
    }

    #[test]
    fn unconstrained_pods_go_to_the_emptiest_node_ties_by_name() {
        let nodes = three_nodes();
        let web = |n: &str| pod(n, "web", json!({}));
        let outcomes = place_in_turn(&[web("1"), web("2"), web("3"), web("4")], &nodes);
        assert_eq!(
            outcomes,
            vec![
                Ok("a".into()),
                Ok("b".into()),
                Ok("c".into()),
                Ok("a".into())
            ]
        );
        // Pods that ended or are going leave room.
        let mut done = on(web("old"), "a");
        done["status"]["phase"] = json!("Succeeded");
        let mut going = on(web("going"), "a");
        going["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let busy = [on(web("x"), "b"), on(web("y"), "c"), done, going];
        assert_eq!(place(&web("new"), &nodes, &busy), Ok("a".into()));
    }

    #[test]
    fn node_selector_picks_nodes_with_all_its_labels() {
        let nodes = three_nodes();
        let wants = |selector: Value| {
            place(
                &pod("p", "web", json!({"nodeSelector": selector})),
                &nodes,
                &[],
            )
        };
        assert_eq!(wants(json!({"disk": "hdd"})), Ok("b".into()));
        assert_eq!(wants(json!({"disk": "hdd", HOSTNAME: "b"})), Ok("b".into()));
        assert_eq!(
            wants(json!({"disk": "nvme"})),
            Err(
                "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. \
                 preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
                    .into()
            )
        );
    }

    #[test]
    fn required_node_affinity_ors_terms_and_ands_expressions() {
        let nodes = three_nodes();
        let wants = |terms: Value| place(&pod("p", "web", node_affinity(terms)), &nodes, &[]);
        let expression = |key: &str, operator: &str, values: Value| json!([{"matchExpressions": [{"key": key, "operator": operator, "values": values}]}]);
        assert_eq!(
            wants(expression("disk", "In", json!(["hdd", "nvme"]))),
            Ok("b".into())
        );
        assert_eq!(
            wants(expression("disk", "NotIn", json!(["ssd", "hdd"]))),
            Ok("c".into())
        );
        assert_eq!(
            wants(expression("disk", "DoesNotExist", json!(null))),
            Ok("c".into())
        );
        assert_eq!(
            wants(expression("disk", "Exists", json!(null))),
            Ok("a".into())
        );
        assert_eq!(
            wants(expression("cores", "Gt", json!(["8"]))),
            Ok("b".into())
        );
        assert_eq!(
            wants(expression("cores", "Lt", json!(["8"]))),
            Ok("a".into())
        );
        assert!(wants(expression("cores", "Gt", json!(["many"]))).is_err());
        let fields =
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["c"]}]}]);
        assert_eq!(wants(fields), Ok("c".into()));
        // Expressions of one term must all hold; any term may.
        let both = json!([{"matchExpressions": [
            {"key": "disk", "operator": "In", "values": ["ssd", "hdd"]},
            {"key": "cores", "operator": "Gt", "values": ["8"]}]}]);
        assert_eq!(wants(both), Ok("b".into()));
        let either = json!([
            {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["nvme"]}]},
            {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": ["c"]}]}]);
        assert_eq!(wants(either), Ok("c".into()));
        assert!(wants(json!([{}])).is_err(), "an empty term matches no node");
        // nodeSelector and affinity must both hold.
        let mut spec = node_affinity(expression("cores", "Gt", json!(["2"])));
        spec["nodeSelector"] = json!({"disk": "ssd"});
        assert_eq!(place(&pod("p", "web", spec), &nodes, &[]), Ok("a".into()));
    }

    #[test]
    fn taints_keep_pods_off_unless_tolerated() {
        let mut nodes = three_nodes();
        nodes[0]["spec"]["taints"] =
            json!([{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]);
        nodes[1]["spec"]["taints"] = json!([{"key": "gpu", "effect": "NoExecute"}]);
        nodes[2]["spec"]["taints"] =
            json!([{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}]);
        let with = |tolerations: Value| pod("p", "web", json!({"tolerations": tolerations}));
        let place_with = |tolerations: Value| place(&with(tolerations), &nodes, &[]);
        // PreferNoSchedule does not refuse; it only makes the node less attractive.
        assert_eq!(place_with(json!([])), Ok("c".into()));
        let equal = json!([{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"},
            {"key": "spot", "operator": "Exists"}]);
        assert_eq!(place_with(equal), Ok("a".into()));
        let wrong_value =
            json!([{"key": "dedicated", "value": "db"}, {"key": "spot", "operator": "Exists"}]);
        assert_eq!(place_with(wrong_value), Ok("c".into()));
        let wrong_effect = json!([{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "spot", "operator": "Exists"}]);
        assert_eq!(place_with(wrong_effect), Ok("c".into()));
        let any_effect =
            json!([{"key": "gpu", "operator": "Exists"}, {"key": "spot", "operator": "Exists"}]);
        assert_eq!(place_with(any_effect), Ok("b".into()));
        // An empty key with Exists tolerates every taint: then a is the first by name.
        assert_eq!(place_with(json!([{"operator": "Exists"}])), Ok("a".into()));
        nodes[2]["spec"]["taints"][0]["effect"] = json!("NoSchedule");
        assert_eq!(
            place(&with(json!([])), &nodes, &[]),
            Err("0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: infra}, \
                 1 node(s) had untolerated taint {gpu: }, 1 node(s) had untolerated taint {spot: true}. \
                 preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
                .into())
        );
    }

    #[test]
    fn a_cordoned_node_takes_no_pod_unless_it_tolerates_the_cordon() {
        let mut nodes = three_nodes();
        nodes.truncate(1);
        nodes[0]["spec"]["unschedulable"] = json!(true);
        let refused = place(&pod("p", "web", json!({})), &nodes, &[]);
        assert_eq!(
            refused,
            Err(
                "0/1 nodes are available: 1 node(s) were unschedulable. preemption: 0/1 nodes are \
                 available: 1 Preemption is not helpful for scheduling."
                    .into()
            )
        );
        let tolerant = pod(
            "p",
            "web",
            json!({"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]}),
        );
        assert_eq!(place(&tolerant, &nodes, &[]), Ok("a".into()));
        assert_eq!(
            place(&tolerant, &[], &[]),
            Err("no nodes available to schedule pods".into())
        );
    }

    #[test]
    fn required_anti_affinity_puts_pods_created_together_on_different_nodes() {
        let nodes = three_nodes();
        let replica = |n: &str| pod(n, "web", anti_affinity("web", HOSTNAME));
        let outcomes = place_in_turn(
            &[replica("1"), replica("2"), replica("3"), replica("4")],
            &nodes,
        );
        assert_eq!(
            outcomes[..3],
            [Ok("a".into()), Ok("b".into()), Ok("c".into())]
        );
        assert_eq!(
            outcomes[3],
            Err("0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. \
                 preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.."
                .into())
        );
        // Other apps and other namespaces do not count; a node without the topology label is free.
        let mut elsewhere = on(pod("x", "web", json!({})), "a");
        elsewhere["metadata"]["namespace"] = json!("other");
        let busy = [on(pod("y", "db", json!({})), "a"), elsewhere];
        assert_eq!(place(&replica("5"), &nodes, &busy), Ok("b".into()));
        let mut spread = nodes.clone();
        spread[0]["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("topology.kubernetes.io/zone");
        let zonal = pod(
            "z",
            "web",
            anti_affinity("web", "topology.kubernetes.io/zone"),
        );
        let taken = [
            on(pod("1", "web", json!({})), "a"),
            on(pod("2", "web", json!({})), "b"),
            on(pod("3", "web", json!({})), "c"),
        ];
        assert_eq!(place(&zonal, &spread, &taken), Ok("a".into()));
    }

    #[test]
    fn an_existing_pods_anti_affinity_keeps_matching_pods_away() {
        let nodes = three_nodes();
        let loner = on(
            pod(
                "loner",
                "db",
                anti_affinity("web", "topology.kubernetes.io/zone"),
            ),
            "a",
        );
        let web = pod("w", "web", json!({"nodeSelector": {HOSTNAME: "a"}}));
        assert_eq!(
            place(&web, &nodes, std::slice::from_ref(&loner)),
            Err("0/3 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules, \
                 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are \
                 available: 1 No preemption victims found for incoming pod., 2 Preemption is not \
                 helpful for scheduling."
                .into())
        );
        assert_eq!(
            place(&pod("d", "db", json!({})), &nodes, &[loner]),
            Ok("b".into())
        );
    }

    #[test]
    fn required_affinity_joins_matching_pods_or_lets_the_first_of_a_group_in() {
        let nodes = three_nodes();
        let follower = |name: &str, app: &str| {
            pod(
                name,
                app,
                json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["cache"]}]},
                 "topologyKey": "topology.kubernetes.io/zone"}]}}}),
            )
        };
        let cache = on(pod("cache", "cache", json!({})), "c");
        assert_eq!(
            place(&follower("w", "web"), &nodes, &[cache]),
            Ok("c".into())
        );
        assert_eq!(
            place(&follower("w", "web"), &nodes, &[]),
            Err(
                "0/3 nodes are available: 3 node(s) didn't match pod affinity rules. preemption: \
                 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
                    .into()
            )
        );
        // The first cache pod with affinity to caches may start anywhere; the next joins it.
        let outcomes = place_in_turn(&[follower("1", "cache"), follower("2", "cache")], &nodes);
        assert_eq!(outcomes, vec![Ok("a".into()), Ok("a".into())]);
    }

    #[test]
    fn affinity_terms_read_namespaces_and_namespace_selectors() {
        let nodes = three_nodes();
        let mut there = on(pod("t", "web", json!({})), "a");
        there["metadata"]["namespace"] = json!("prod");
        let term = |extra: Value| {
            let mut term =
                json!({"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOSTNAME});
            for (k, v) in extra.as_object().into_iter().flatten() {
                term[k] = v.clone();
            }
            // Wants node a, unless the term finds a web pod there.
            pod(
                "p",
                "web",
                json!({"nodeSelector": {HOSTNAME: "a"},
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}),
            )
        };
        let namespaces = [json!({"metadata": {"name": "prod", "labels": {"env": "prod"}}})];
        let cluster = |pods| Cluster {
            nodes: &nodes,
            pods,
            namespaces: &namespaces,
            pods_per_node: None,
        };
        let pods = [Arc::new(there)];
        let admitted = |extra: Value| schedule(&term(extra), cluster(&pods)).is_ok();
        assert!(admitted(json!({})), "the pod's own namespace only");
        assert!(!admitted(json!({"namespaces": ["prod"]})));
        assert!(
            !admitted(json!({"namespaceSelector": {}})),
            "every namespace"
        );
        assert!(!admitted(
            json!({"namespaceSelector": {"matchLabels": {"env": "prod"}}})
        ));
        assert!(admitted(
            json!({"namespaceSelector": {"matchLabels": {"env": "dev"}}})
        ));
    }

    #[test]
    fn preferred_affinities_score_nodes_before_the_pod_count() {
        let nodes = three_nodes();
        let preferring = |name: &str| {
            pod(
                name,
                "web",
                json!({"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOSTNAME}}]}}}),
            )
        };
        // Node a already runs two other pods, b and c one web pod each: a is preferred anyway.
        let busy = [
            on(pod("x", "db", json!({})), "a"),
            on(pod("y", "db", json!({})), "a"),
            on(pod("w1", "web", json!({})), "b"),
            on(pod("w2", "web", json!({})), "c"),
        ];
        assert_eq!(place(&preferring("p"), &nodes, &busy), Ok("a".into()));
        // Each matching pod counts, so the web pods spread out as they come: then by pod count.
        let mut placed = busy.to_vec();
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for i in 0..6 {
            let p = preferring(&format!("p{i}"));
            let node = place(&p, &nodes, &placed).unwrap();
            *counts.entry(node.clone()).or_default() += 1;
            placed.push(on(p, &node));
        }
        assert_eq!(
            counts.values().copied().collect::<Vec<_>>(),
            [2, 2, 2],
            "{counts:?}"
        );
        // Preferred pod affinity and node affinity add their weights.
        let near_cache = pod(
            "n",
            "web",
            json!({"affinity": {
            "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": HOSTNAME}}]},
            "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 50, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["hdd"]}]}}]}}}),
        );
        assert_eq!(place(&near_cache, &nodes, &busy), Ok("b".into()));
        let cache = [
            on(pod("cache1", "cache", json!({})), "c"),
            on(pod("cache2", "cache", json!({})), "c"),
            on(pod("cache3", "cache", json!({})), "c"),
            on(pod("cache4", "cache", json!({})), "c"),
            on(pod("cache5", "cache", json!({})), "c"),
            on(pod("cache6", "cache", json!({})), "c"),
        ];
        assert_eq!(
            place(&near_cache, &nodes, &cache),
            Ok("c".into()),
            "6 × 10 beats 50"
        );
    }

    #[test]
    fn the_message_counts_each_nodes_first_reason() {
        let mut nodes = three_nodes();
        nodes[0]["spec"]["taints"] =
            json!([{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]);
        let pods = [
            on(pod("1", "web", json!({})), "b"),
            on(pod("2", "web", json!({})), "c"),
        ];
        assert_eq!(
            place(&pod("3", "web", anti_affinity("web", HOSTNAME)), &nodes, &pods),
            Err("0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: infra}, \
                 2 node(s) didn't match pod anti-affinity rules. preemption: 0/3 nodes are available: \
                 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod.."
                .into())
        );
    }

    #[test]
    fn daemon_pods_follow_selectors_and_taints_but_not_cordons() {
        let mut node = node("a", "zone-1", json!({"disk": "ssd"}));
        node["spec"]["unschedulable"] = json!(true);
        let fit = |spec: &Value, node: &Value| daemon_fit(spec, node);
        let runs = DaemonFit {
            should_run: true,
            may_stay: true,
        };
        assert_eq!(
            fit(&json!({}), &node),
            runs,
            "cordoned nodes run daemon pods"
        );
        assert_eq!(
            fit(&json!({"nodeSelector": {"disk": "hdd"}}), &node),
            DaemonFit {
                should_run: false,
                may_stay: false
            }
        );
        node["spec"]["taints"] =
            json!([{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]);
        assert_eq!(
            fit(&json!({}), &node),
            DaemonFit {
                should_run: false,
                may_stay: true
            },
            "a NoSchedule taint lets a running pod stay"
        );
        let tolerant = json!({"tolerations": [{"key": "dedicated", "operator": "Exists"}]});
        assert_eq!(fit(&tolerant, &node), runs);
        node["spec"]["taints"][0]["effect"] = json!("NoExecute");
        assert!(!fit(&json!({}), &node).may_stay);
    }
}
