//! OpenAPI schemas of the served kinds, for `kubectl explain`, kubectl's patch computation and the
//! server's own field validation (`fieldValidation=Strict|Warn`).
//!
//! Built-in kinds take their schemas from k8s-openapi (Kubernetes' own descriptions and names, such
//! as `io.k8s.api.apps.v1.Deployment`), with the extensions kubectl reads added: the kind's
//! `x-kubernetes-group-version-kind`, and the strategic-merge keys of list fields (the same table
//! the sandbox's strategic merge patch uses), so kubectl's schema-driven patches merge `containers`
//! and `env` by name as on a cluster. Custom resources take the schema of their CRD's version.

use crate::discovery;
use crate::registry::ResourceInfo;
use crate::store::Store;
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
struct Builtins {
    definitions: Map<String, Value>,
    roots: BTreeMap<(String, String, String), String>,
}

static BUILTINS: LazyLock<Builtins> = LazyLock::new(builtins);

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
fn closure(definitions: &Map<String, Value>, roots: &[String]) -> Map<String, Value> {
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

/// The schema name of a custom resource kind, as the API server names it (`com.example.v1.Kind`
/// for group `example.com`).
fn custom_schema_name(info: &ResourceInfo) -> String {
    let reversed: Vec<&str> = info.group.split('.').rev().collect();
    format!("{}.{}.{}", reversed.join("."), info.version, info.kind)
}

/// The schema a CRD declares for `info`'s version, with the standard `apiVersion`, `kind` and
/// `metadata` fields the API server adds.
fn custom_schema(store: &Store, info: &ResourceInfo) -> Option<Value> {
    let crds = store.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")?;
    let crd = store
        .get(&crds, "", &format!("{}.{}", info.plural, info.group))
        .ok()?;
    let version = crd["spec"]["versions"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == info.version.as_str())?;
    let mut schema = version["schema"]["openAPIV3Schema"].clone();
    if !schema.is_object() {
        schema = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    }
    if schema.get("properties").is_none() {
        schema["properties"] = json!({});
    }
    schema["properties"]["apiVersion"] = json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."});
    schema["properties"]["kind"] = json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."});
    schema["properties"]["metadata"] = json!({"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}], "description": "Standard object's metadata."});
    schema["x-kubernetes-group-version-kind"] =
        json!([{"group": info.group, "version": info.version, "kind": info.kind}]);
    Some(schema)
}

/// The OpenAPI v3 document of one group-version: its PATCH operations (with `fieldValidation`) and
/// the component schemas of its kinds, with everything they reference.
pub fn group_version(store: &Store, group: &str, version: &str) -> Option<Value> {
    let registry = store.registry();
    let mut document = discovery::openapi_group_version(&registry, group, version)?;
    let builtins = &*BUILTINS;
    let mut roots = Vec::new();
    let mut custom = Map::new();
    for info in registry.in_group_version(group, version) {
        let key = (info.group.clone(), info.version.clone(), info.kind.clone());
        if let Some(name) = builtins.roots.get(&key) {
            roots.push(name.clone());
        } else if let Some(schema) = custom_schema(store, info) {
            custom.insert(custom_schema_name(info), schema);
            roots.push("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta".into());
        }
    }
    let mut schemas = closure(&builtins.definitions, &roots);
    schemas.extend(custom);
    document["components"]["schemas"] = Value::Object(schemas);
    Some(document)
}

/// `GET /openapi/v2` (JSON): the Swagger 2.0 `definitions` of every served kind. Paths are left
/// out: clients read v2 for its definitions, and kubectl reads v3.
pub fn v2(store: &Store) -> Value {
    let registry = store.registry();
    let builtins = &*BUILTINS;
    let mut definitions = builtins.definitions.clone();
    for info in registry.all().filter(|r| !r.builtin) {
        if let Some(schema) = custom_schema(store, info) {
            definitions.insert(custom_schema_name(info), schema);
        }
    }
    let mut text = Value::Object(definitions).to_string();
    text = text.replace("#/components/schemas/", "#/definitions/");
    let definitions: Value = serde_json::from_str(&text).unwrap_or_default();
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.32.5"},
        "paths": {},
        "definitions": definitions,
    })
}

/// `GET /openapi/v3`: one entry per served group-version, whose hash changes with its document.
pub fn index(store: &Store) -> Value {
    let registry = store.registry();
    let mut paths = Map::new();
    for (group, versions) in registry.groups() {
        for version in versions {
            // Hashing the operations and the custom schemas is enough: built-in schemas only
            // change with the binary, and its version is part of the hash.
            let Some(operations) = discovery::openapi_group_version(&registry, group, version)
            else {
                continue;
            };
            let mut text = operations.to_string();
            text.push_str(env!("CARGO_PKG_VERSION"));
            for info in registry.in_group_version(group, version) {
                if !info.builtin
                    && let Some(schema) = custom_schema(store, info)
                {
                    text.push_str(&schema.to_string());
                }
            }
            let hash = text.bytes().fold(0xcbf29ce484222325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
            });
            let key = discovery::gv_path(group, version);
            paths.insert(
                key.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash:016X}")}),
            );
        }
    }
    json!({"paths": paths})
}

/// The fields of a built-in object its schema does not declare, as JSON paths
/// (`spec.template.spec.containers[0].imagee`). Keys starting with `$` (strategic merge patch
/// directives) are not fields. Custom resources and unknown kinds report nothing.
pub fn unknown_fields(info: &ResourceInfo, object: &Value) -> Vec<String> {
    let mut copy = object.clone();
    check_fields(info, &mut copy, false)
}

/// Drops the fields [`unknown_fields`] reports, as decoding into the API server's typed objects
/// does, and returns their paths.
pub fn prune_unknown_fields(info: &ResourceInfo, object: &mut Value) -> Vec<String> {
    check_fields(info, object, true)
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

fn check_fields(info: &ResourceInfo, object: &mut Value, prune: bool) -> Vec<String> {
    let builtins = &*BUILTINS;
    let key = (info.group.clone(), info.version.clone(), info.kind.clone());
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

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment() -> ResourceInfo {
        crate::registry::builtins()
            .into_iter()
            .find(|r| r.kind == "Deployment")
            .unwrap()
    }

    #[test]
    fn unknown_fields_are_named_by_their_paths() {
        let object = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"any": "label"}, "annotations": {"a": "b"}},
            "spec": {"replicass": 2, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
                    {"name": "app", "image": "x", "imagee": "typo",
                     "resources": {"limits": {"cpu": "1"}}, "ports": [{"containerPort": 80}]}
                ]}}}
        });
        assert_eq!(
            unknown_fields(&deployment(), &object),
            ["spec.replicass", "spec.template.spec.containers[0].imagee"]
        );
        let mut pruned = object.clone();
        prune_unknown_fields(&deployment(), &mut pruned);
        assert!(pruned["spec"].get("replicass").is_none());
        assert_eq!(
            pruned["spec"]["template"]["spec"]["containers"][0]["image"],
            "x"
        );
        assert!(unknown_fields(&deployment(), &pruned).is_empty());
    }

    #[test]
    fn kinds_carry_their_gvk_and_lists_their_merge_keys() {
        let definitions = &BUILTINS.definitions;
        assert_eq!(
            definitions["io.k8s.api.apps.v1.Deployment"]["x-kubernetes-group-version-kind"],
            json!([{"group": "apps", "version": "v1", "kind": "Deployment"}])
        );
        let pod_spec = &definitions["io.k8s.api.core.v1.PodSpec"]["properties"];
        assert_eq!(
            pod_spec["containers"]["x-kubernetes-patch-merge-key"],
            "name"
        );
        assert_eq!(
            pod_spec["volumes"]["x-kubernetes-patch-strategy"],
            "merge,retainKeys"
        );
        let container = &definitions["io.k8s.api.core.v1.Container"]["properties"];
        assert_eq!(
            container["ports"]["x-kubernetes-patch-merge-key"],
            "containerPort"
        );
        let service = &definitions["io.k8s.api.core.v1.ServiceSpec"]["properties"];
        assert_eq!(service["ports"]["x-kubernetes-patch-merge-key"], "port");
        let deployment_spec = &definitions["io.k8s.api.apps.v1.DeploymentSpec"]["properties"];
        assert_eq!(
            deployment_spec["strategy"]["x-kubernetes-patch-strategy"],
            "retainKeys"
        );
    }
}
