//! The schemas of the built-in kinds, from k8s-openapi (Kubernetes' own descriptions and names,
//! such as `io.k8s.api.apps.v1.Deployment`), with the extensions kubectl reads added: the kind's
//! `x-kubernetes-group-version-kind`, and the strategic-merge keys of list fields (the same table
//! the sandbox's strategic merge patch uses). The server's field validation walks objects through
//! them; [`crate::openapi`] serves them.

use k8s_openapi::api::core::v1 as core_v1;
use k8s_openapi::api::{
    apps, authentication, authorization, autoscaling, batch, coordination, events, networking,
    policy, rbac,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use k8s_openapi::schemars::JsonSchema;
use k8s_openapi::schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

/// The component schemas of the built-in kinds, and which schema is each kind's root.
pub struct Builtins {
    /// Every component schema, by name.
    pub definitions: Map<String, Value>,
    /// The root schema name of each kind, by (group, version, kind).
    pub roots: BTreeMap<(String, String, String), String>,
}

/// The built-in kinds' schemas, built on first use.
pub static BUILTINS: LazyLock<Builtins> = LazyLock::new(builtins);

fn builtins() -> Builtins {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let mut roots = BTreeMap::new();
    macro_rules! kinds {
        ($($kind:ty),* $(,)?) => {$(
            generator.subschema_for::<$kind>();
            roots.insert(
                (
                    <$kind as k8s_openapi::Resource>::GROUP.to_string(),
                    <$kind as k8s_openapi::Resource>::VERSION.to_string(),
                    <$kind as k8s_openapi::Resource>::KIND.to_string(),
                ),
                <$kind as JsonSchema>::schema_name().into_owned(),
            );
        )*};
    }
    kinds!(
        core_v1::Namespace,
        core_v1::Pod,
        core_v1::Service,
        core_v1::Endpoints,
        core_v1::ConfigMap,
        core_v1::Secret,
        core_v1::ServiceAccount,
        core_v1::Event,
        core_v1::Node,
        apps::v1::Deployment,
        apps::v1::ReplicaSet,
        apps::v1::DaemonSet,
        policy::v1::PodDisruptionBudget,
        networking::v1::NetworkPolicy,
        apps::v1::StatefulSet,
        batch::v1::Job,
        batch::v1::CronJob,
        autoscaling::v2::HorizontalPodAutoscaler,
        coordination::v1::Lease,
        events::v1::Event,
        apiextensions::CustomResourceDefinition,
        rbac::v1::Role,
        rbac::v1::ClusterRole,
        rbac::v1::RoleBinding,
        rbac::v1::ClusterRoleBinding,
        authentication::v1::TokenRequest,
        authentication::v1::SelfSubjectReview,
        authentication::v1::TokenReview,
        authorization::v1::SelfSubjectAccessReview,
        authorization::v1::SelfSubjectRulesReview,
        authorization::v1::SubjectAccessReview,
        authorization::v1::LocalSubjectAccessReview,
    );
    let mut definitions = generator.take_definitions(true);
    for ((group, version, kind), name) in &roots {
        if let Some(schema) = definitions.get_mut(name) {
            schema["x-kubernetes-group-version-kind"] =
                json!([{"group": group, "version": version, "kind": kind}]);
        }
    }
    for schema in definitions.values_mut() {
        annotate_merge_keys(schema);
    }
    Builtins { definitions, roots }
}

/// The name a `$ref` points at (`#/components/schemas/<name>`), looking through `allOf` wrappers.
fn referenced(schema: &Value) -> Option<&str> {
    schema["$ref"]
        .as_str()
        .or_else(|| schema["allOf"][0]["$ref"].as_str())
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
}

/// Adds `x-kubernetes-patch-strategy` and `x-kubernetes-patch-merge-key` to the list fields the
/// sandbox's strategic merge patch merges by key.
fn annotate_merge_keys(schema: &mut Value) {
    let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    for (field, property) in properties.iter_mut() {
        if field == "strategy" || field == "updateStrategy" {
            if referenced(property).is_some_and(|r| r.ends_with("DeploymentStrategy")) {
                property["x-kubernetes-patch-strategy"] = json!("retainKeys");
            }
            continue;
        }
        if property["type"] != "array" {
            continue;
        }
        if field == "finalizers" {
            property["x-kubernetes-patch-strategy"] = json!("merge");
            continue;
        }
        let item = referenced(&property["items"]).unwrap_or_default();
        // The merge key of `ports` depends on the item: containerPort or port.
        let sample = if item.ends_with(".ContainerPort") {
            json!({"containerPort": 0})
        } else {
            json!({})
        };
        if field == "ports" && !(item.ends_with(".ContainerPort") || item.ends_with(".ServicePort"))
        {
            continue;
        }
        if let Some(key) = crate::patch::merge_key(field, &sample) {
            let strategy = if field == "volumes" {
                "merge,retainKeys"
            } else {
                "merge"
            };
            property["x-kubernetes-patch-merge-key"] = json!(key);
            property["x-kubernetes-patch-strategy"] = json!(strategy);
        }
    }
}

/// Every schema `roots` reach through `$ref`s, by name.
pub fn closure(definitions: &Map<String, Value>, roots: &[String]) -> Map<String, Value> {
    let mut wanted: Vec<String> = roots.to_vec();
    let mut seen = BTreeSet::new();
    let mut out = Map::new();
    while let Some(name) = wanted.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let Some(schema) = definitions.get(&name) else {
            continue;
        };
        collect_refs(schema, &mut wanted);
        out.insert(name, schema.clone());
    }
    out
}

fn collect_refs(value: &Value, into: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(name) = map
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
            {
                into.push(name.to_string());
            }
            map.values().for_each(|v| collect_refs(v, into));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, into)),
        _ => {}
    }
}

/// Drops from a custom resource's `metadata` what ObjectMeta does not declare, as decoding it
/// does, and returns the paths (relative to `metadata`).
pub fn prune_object_meta(metadata: &mut Value) -> Vec<String> {
    let mut walker = Walker {
        definitions: &BUILTINS.definitions,
        prune: true,
        unknown: Vec::new(),
    };
    walker.walk(
        &json!({"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}),
        metadata,
        "",
    );
    walker.unknown
}

/// The fields of `object`, a built-in `group/version` `kind`, its schema does not declare (dropped
/// when `prune`), as JSON paths; kinds without a built-in schema report nothing.
pub fn check_fields(
    (group, version, kind): (&str, &str, &str),
    object: &mut Value,
    prune: bool,
) -> Vec<String> {
    let builtins = &*BUILTINS;
    let key = (group.to_string(), version.to_string(), kind.to_string());
    let Some(root) = builtins.roots.get(&key) else {
        return Vec::new();
    };
    let mut walker = Walker {
        definitions: &builtins.definitions,
        prune,
        unknown: Vec::new(),
    };
    walker.walk(
        &json!({"$ref": format!("#/components/schemas/{root}")}),
        object,
        "",
    );
    walker.unknown
}

struct Walker<'a> {
    definitions: &'a Map<String, Value>,
    prune: bool,
    unknown: Vec<String>,
}

impl Walker<'_> {
    fn walk(&mut self, schema: &Value, value: &mut Value, path: &str) {
        if let Some(name) = referenced(schema) {
            if let Some(target) = self.definitions.get(name) {
                self.walk(target, value, path);
            }
            return;
        }
        if schema["x-kubernetes-preserve-unknown-fields"] == true {
            return;
        }
        match value {
            Value::Object(fields) => {
                let properties = schema["properties"].as_object();
                let additional = schema.get("additionalProperties").filter(|a| a.is_object());
                if properties.is_none() && additional.is_none() {
                    // A free-form object (RawExtension, FieldsV1, JSON): anything goes.
                    return;
                }
                let mut dropped = Vec::new();
                for (field, item) in fields.iter_mut() {
                    // `$` keys are strategic merge directives; a null removes a field in a
                    // patch, which is how a client cleans up a field it once sent.
                    if field.starts_with('$') || item.is_null() {
                        continue;
                    }
                    let at = if path.is_empty() {
                        field.clone()
                    } else {
                        format!("{path}.{field}")
                    };
                    match (properties.and_then(|p| p.get(field)), additional) {
                        (Some(property), _) => self.walk(property, item, &at),
                        (None, Some(additional)) => self.walk(additional, item, &at),
                        (None, None) => {
                            self.unknown.push(at);
                            dropped.push(field.clone());
                        }
                    }
                }
                if self.prune {
                    for field in dropped {
                        fields.remove(&field);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(item_schema) = schema.get("items") {
                    for (index, item) in items.iter_mut().enumerate() {
                        self.walk(item_schema, item, &format!("{path}[{index}]"));
                    }
                }
            }
            _ => {}
        }
    }
}
