//! OpenAPI schemas of the served kinds, for `kubectl explain`, kubectl's patch computation and the
//! server's own field validation (`fieldValidation=Strict|Warn`).
//!
//! Built-in kinds take their schemas from k8s-openapi (Kubernetes' own descriptions and names, such
//! as `io.k8s.api.apps.v1.Deployment`), with the extensions kubectl reads added: the kind's
//! `x-kubernetes-group-version-kind`, and the strategic-merge keys of list fields (the same table
//! the sandbox's strategic merge patch uses), so kubectl's schema-driven patches merge `containers`
//! and `env` by name as on a cluster. Custom resources take the schema of their CRD's version.

use crate::builtin_schemas::{BUILTINS, check_fields, closure};
use crate::discovery;
use crate::registry::ResourceInfo;
use crate::store::Store;
use serde_json::{Map, Value, json};

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
    check_fields((&info.group, &info.version, &info.kind), &mut copy, false)
}

/// Drops the fields [`unknown_fields`] reports, as decoding into the API server's typed objects
/// does, and returns their paths.
pub fn prune_unknown_fields(info: &ResourceInfo, object: &mut Value) -> Vec<String> {
    check_fields((&info.group, &info.version, &info.kind), object, true)
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
