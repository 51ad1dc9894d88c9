//! The resources the sandbox serves: built-in kinds and those defined by CRDs.

use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// When `metadata.generation` moves on an update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GenerationRule {
    /// The kind carries no generation.
    None,
    /// A change of `spec` bumps it.
    Spec,
    /// A change of `spec` or `metadata.annotations` bumps it (Deployments).
    SpecOrAnnotations,
    /// Any change outside `metadata` bumps it (custom resources).
    AnythingButMetadata,
}

/// JSON paths of a scale subresource, as a CRD declares them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    /// Where the desired replicas live, e.g. `.spec.replicas`.
    pub spec_replicas: String,
    /// Where the observed replicas live, e.g. `.status.replicas`.
    pub status_replicas: String,
    /// Where the label selector string lives, if anywhere.
    pub label_selector: Option<String>,
}

/// One served resource in one API version.
#[derive(Clone, Debug)]
pub struct ResourceInfo {
    /// API group; empty for the core group.
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Deployment`.
    pub kind: String,
    /// URL plural, e.g. `deployments`.
    pub plural: String,
    /// Lower-case singular, e.g. `deployment`.
    pub singular: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Short names (`deploy`).
    pub short_names: Vec<String>,
    /// Categories (`all`).
    pub categories: Vec<String>,
    /// Whether `/status` is a subresource (status is then ignored on the main endpoint).
    pub status_subresource: bool,
    /// The scale subresource, if any.
    pub scale: Option<ScalePaths>,
    /// How generation evolves.
    pub generation: GenerationRule,
    /// Whether this is a built-in kind (strategic merge patch is accepted only for those).
    pub builtin: bool,
    /// CRD `additionalPrinterColumns` of this version.
    pub printer_columns: Vec<Value>,
    /// Which verbs the resource answers.
    pub verbs: Verbs,
    /// A custom resource's structural schema (its CRD version's `openAPIV3Schema`), which prunes,
    /// defaults and validates what is written.
    pub schema: Option<Arc<crate::structural::Schema>>,
}

/// The verbs a resource answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verbs {
    /// Every verb of a stored kind.
    All,
    /// Only `create`, and nothing is stored (access and identity reviews).
    CreateOnly,
    /// Only `get` and `list`, computed on demand (the resource metrics of metrics.k8s.io).
    ReadOnly,
}

impl Verbs {
    /// The verb names discovery lists.
    pub fn names(self) -> &'static [&'static str] {
        match self {
            Verbs::All => &[
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ],
            Verbs::CreateOnly => &["create"],
            Verbs::ReadOnly => &["get", "list"],
        }
    }
}

impl ResourceInfo {
    /// `group/version`, or just `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Storage key shared by every version of the resource: `plural.group` (or `plural`); the
    /// `events.k8s.io` Events share the core Events' storage.
    pub fn storage_key(&self) -> String {
        if self.is_events_api_event() {
            return self.plural.clone();
        }
        self.qualified_plural()
    }

    /// Whether this is the `events.k8s.io` view of core events (see `convert`).
    pub fn is_events_api_event(&self) -> bool {
        self.group == "events.k8s.io" && self.kind == "Event"
    }

    /// `plural` or `plural.group`, as error messages and metrics name resources.
    pub fn qualified_plural(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn builtin(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    short_names: &[&str],
    categories: &[&str],
    status: bool,
    generation: GenerationRule,
) -> ResourceInfo {
    ResourceInfo {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        namespaced,
        short_names: short_names.iter().map(|s| s.to_string()).collect(),
        categories: categories.iter().map(|s| s.to_string()).collect(),
        status_subresource: status,
        scale: None,
        generation,
        builtin: true,
        printer_columns: Vec::new(),
        verbs: Verbs::All,
        schema: None,
    }
}

/// A review kind: `create` is its only verb and nothing is stored.
fn review(group: &str, kind: &str, plural: &str, namespaced: bool) -> ResourceInfo {
    ResourceInfo {
        verbs: Verbs::CreateOnly,
        ..builtin(
            group,
            "v1",
            kind,
            plural,
            namespaced,
            &[],
            &[],
            false,
            GenerationRule::None,
        )
    }
}

/// The resource metrics of metrics.k8s.io (`kubectl top`), computed from the pods' usage.
fn metrics(kind: &str, plural: &str, namespaced: bool) -> ResourceInfo {
    ResourceInfo {
        verbs: Verbs::ReadOnly,
        ..builtin(
            "metrics.k8s.io",
            "v1beta1",
            kind,
            plural,
            namespaced,
            &[],
            &[],
            false,
            GenerationRule::None,
        )
    }
}

/// RBAC kinds, namespaced (`Role`, `RoleBinding`) or cluster-wide.
fn rbac(kind: &str, plural: &str, namespaced: bool) -> ResourceInfo {
    builtin(
        "rbac.authorization.k8s.io",
        "v1",
        kind,
        plural,
        namespaced,
        &[],
        &[],
        false,
        GenerationRule::None,
    )
}

fn replicas_scale() -> Option<ScalePaths> {
    Some(ScalePaths {
        spec_replicas: ".spec.replicas".into(),
        status_replicas: ".status.replicas".into(),
        label_selector: None,
    })
}

/// The built-in kinds every sandbox serves.
pub fn builtins() -> Vec<ResourceInfo> {
    use GenerationRule::*;
    let mut deployments = builtin(
        "apps",
        "v1",
        "Deployment",
        "deployments",
        true,
        &["deploy"],
        &["all"],
        true,
        SpecOrAnnotations,
    );
    deployments.scale = replicas_scale();
    let mut replicasets = builtin(
        "apps",
        "v1",
        "ReplicaSet",
        "replicasets",
        true,
        &["rs"],
        &["all"],
        true,
        Spec,
    );
    replicasets.scale = replicas_scale();
    vec![
        builtin(
            "",
            "v1",
            "Namespace",
            "namespaces",
            false,
            &["ns"],
            &[],
            true,
            None,
        ),
        builtin("", "v1", "Pod", "pods", true, &["po"], &["all"], true, None),
        builtin(
            "",
            "v1",
            "Service",
            "services",
            true,
            &["svc"],
            &["all"],
            true,
            None,
        ),
        builtin(
            "",
            "v1",
            "Endpoints",
            "endpoints",
            true,
            &["ep"],
            &[],
            false,
            None,
        ),
        builtin(
            "",
            "v1",
            "ConfigMap",
            "configmaps",
            true,
            &["cm"],
            &[],
            false,
            None,
        ),
        builtin("", "v1", "Secret", "secrets", true, &[], &[], false, None),
        builtin(
            "",
            "v1",
            "ResourceQuota",
            "resourcequotas",
            true,
            &["quota"],
            &[],
            true,
            None,
        ),
        builtin(
            "",
            "v1",
            "ServiceAccount",
            "serviceaccounts",
            true,
            &["sa"],
            &[],
            false,
            None,
        ),
        builtin("", "v1", "Event", "events", true, &["ev"], &[], false, None),
        builtin("", "v1", "Node", "nodes", false, &["no"], &[], true, None),
        deployments,
        replicasets,
        builtin(
            "autoscaling",
            "v2",
            "HorizontalPodAutoscaler",
            "horizontalpodautoscalers",
            true,
            &["hpa"],
            &["all"],
            true,
            Spec,
        ),
        builtin(
            "apps",
            "v1",
            "DaemonSet",
            "daemonsets",
            true,
            &["ds"],
            &["all"],
            true,
            Spec,
        ),
        // Stored and served (Helm charts ship them); evictions do not consult them yet.
        builtin(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            true,
            &["pdb"],
            &[],
            true,
            Spec,
        ),
        // Stored and served (the load tester's chart ships one); the sandbox runs every pod on
        // loopback without network namespaces, so nothing enforces them.
        builtin(
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
            "networkpolicies",
            true,
            &["netpol"],
            &[],
            false,
            Spec,
        ),
        builtin(
            "batch",
            "v1",
            "Job",
            "jobs",
            true,
            &[],
            &["all"],
            true,
            Spec,
        ),
        // Served for `kubectl autoscale`, which writes v1; stored as v2 (see `convert`).
        builtin(
            "autoscaling",
            "v1",
            "HorizontalPodAutoscaler",
            "horizontalpodautoscalers",
            true,
            &["hpa"],
            &["all"],
            true,
            Spec,
        ),
        metrics("PodMetrics", "pods", true),
        metrics("NodeMetrics", "nodes", false),
        builtin(
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            true,
            &[],
            &[],
            false,
            None,
        ),
        builtin(
            "events.k8s.io",
            "v1",
            "Event",
            "events",
            true,
            &["ev"],
            &[],
            false,
            None,
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
            &["crd", "crds"],
            &["api-extensions"],
            true,
            Spec,
        ),
        rbac("Role", "roles", true),
        rbac("RoleBinding", "rolebindings", true),
        rbac("ClusterRole", "clusterroles", false),
        rbac("ClusterRoleBinding", "clusterrolebindings", false),
        review(
            "authorization.k8s.io",
            "SelfSubjectAccessReview",
            "selfsubjectaccessreviews",
            false,
        ),
        review(
            "authorization.k8s.io",
            "SelfSubjectRulesReview",
            "selfsubjectrulesreviews",
            false,
        ),
        review(
            "authorization.k8s.io",
            "SubjectAccessReview",
            "subjectaccessreviews",
            false,
        ),
        review(
            "authorization.k8s.io",
            "LocalSubjectAccessReview",
            "localsubjectaccessreviews",
            true,
        ),
        review(
            "authentication.k8s.io",
            "SelfSubjectReview",
            "selfsubjectreviews",
            false,
        ),
        review(
            "authentication.k8s.io",
            "TokenReview",
            "tokenreviews",
            false,
        ),
    ]
}

/// Every served resource, by `(group, version, plural)`.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    resources: BTreeMap<(String, String, String), ResourceInfo>,
    /// Versions of each group in preference order (first is preferred).
    group_versions: BTreeMap<String, Vec<String>>,
}

impl Registry {
    /// A registry of the built-in kinds.
    pub fn with_builtins() -> Self {
        let mut registry = Registry::default();
        for info in builtins() {
            registry.insert(info);
        }
        registry
    }

    fn insert(&mut self, info: ResourceInfo) {
        let versions = self.group_versions.entry(info.group.clone()).or_default();
        if !versions.contains(&info.version) {
            versions.push(info.version.clone());
        }
        self.resources.insert(
            (
                info.group.clone(),
                info.version.clone(),
                info.plural.clone(),
            ),
            info,
        );
    }

    /// Looks a resource up by group, version and plural.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceInfo> {
        self.resources
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
    }

    /// Every served resource.
    pub fn all(&self) -> impl Iterator<Item = &ResourceInfo> {
        self.resources.values()
    }

    /// Groups with their versions in preference order; the core group is `""`.
    pub fn groups(&self) -> &BTreeMap<String, Vec<String>> {
        &self.group_versions
    }

    /// Resources of one group-version.
    pub fn in_group_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a ResourceInfo> + 'a {
        self.resources
            .values()
            .filter(move |r| r.group == group && r.version == version)
    }

    /// Replaces whatever a CRD served before with the versions it serves now (none when `crd`
    /// is not established or is being removed).
    pub fn set_crd(&mut self, crd_name: &str, served: Vec<ResourceInfo>) {
        if let Some((plural, group)) = crd_name.split_once('.') {
            self.resources
                .retain(|(g, _, p), info| !(g == group && p == plural && !info.builtin));
            let group = group.to_string();
            let still: Vec<String> = self
                .resources
                .keys()
                .filter(|(g, _, _)| *g == group)
                .map(|(_, v, _)| v.clone())
                .collect();
            if let Some(versions) = self.group_versions.get_mut(&group) {
                versions.retain(|v| still.contains(v));
                if versions.is_empty() {
                    self.group_versions.remove(&group);
                }
            }
        }
        for info in served {
            self.insert(info);
        }
    }
}

/// The resources a CRD object serves: one per `served: true` version, when it is well formed.
pub fn resources_of_crd(crd: &Value) -> Vec<ResourceInfo> {
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default();
    let names = &spec["names"];
    let kind = names["kind"].as_str().unwrap_or_default();
    let plural = names["plural"].as_str().unwrap_or_default();
    if group.is_empty() || kind.is_empty() || plural.is_empty() {
        return Vec::new();
    }
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let namespaced = spec["scope"].as_str() != Some("Cluster");
    let mut served = Vec::new();
    for version in spec["versions"].as_array().into_iter().flatten() {
        if version["served"].as_bool() == Some(false) {
            continue;
        }
        let Some(name) = version["name"].as_str() else {
            continue;
        };
        let subresources = &version["subresources"];
        let scale = subresources.get("scale").map(|s| ScalePaths {
            spec_replicas: s["specReplicasPath"]
                .as_str()
                .unwrap_or(".spec.replicas")
                .into(),
            status_replicas: s["statusReplicasPath"]
                .as_str()
                .unwrap_or(".status.replicas")
                .into(),
            label_selector: s["labelSelectorPath"].as_str().map(String::from),
        });
        served.push(ResourceInfo {
            group: group.into(),
            version: name.into(),
            kind: kind.into(),
            plural: plural.into(),
            singular: names["singular"]
                .as_str()
                .map(String::from)
                .unwrap_or_else(|| kind.to_lowercase()),
            namespaced,
            short_names: strings(&names["shortNames"]),
            categories: strings(&names["categories"]),
            status_subresource: subresources.get("status").is_some(),
            scale,
            generation: GenerationRule::AnythingButMetadata,
            builtin: false,
            verbs: Verbs::All,
            printer_columns: version["additionalPrinterColumns"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
            schema: version["schema"]["openAPIV3Schema"]
                .as_object()
                .map(|schema| crate::structural::Schema::new(&Value::Object(schema.clone()))),
        });
    }
    // The storage version is preferred in discovery.
    if let Some(storage) = spec["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["storage"].as_bool() == Some(true))
        .and_then(|v| v["name"].as_str())
    {
        served.sort_by_key(|r| r.version != storage);
    }
    served
}
