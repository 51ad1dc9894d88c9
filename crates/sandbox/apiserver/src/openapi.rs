//! OpenAPI schemas of the served kinds, for `kubectl explain`, kubectl's patch computation, kubectl's
//! own validation of a `kind: List`'s items (OpenAPI v2, in protobuf) and the server's field
//! validation (`fieldValidation=Strict|Warn`).
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

/// The media type of the OpenAPI v2 document in protobuf (gnostic's `openapi.v2.Document`), as the
/// API server labels it. kubectl asks for the older spelling, with `@v1.0`, which Go's media type
/// parser cannot read back as a Content-Type.
pub const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// Whether an Accept header asks for the OpenAPI v2 document in protobuf, in either spelling.
pub fn wants_v2_protobuf(accept: &str) -> bool {
    accept.contains("application/com.github.proto-openapi.spec.v2")
}

/// `GET /openapi/v2`: the Swagger 2.0 document of every served kind, with the PATCH operation per
/// kind the v3 documents have and the kinds' `definitions` in Swagger 2.0's form. kubectl reads it
/// to validate the items of a `kind: List` (which no v3 group-version holds) and when the v3
/// documents do not answer.
pub fn v2(store: &Store) -> Value {
    let registry = store.registry();
    let mut definitions = Map::new();
    for (name, schema) in &BUILTINS.definitions {
        definitions.insert(name.clone(), swagger2(schema));
    }
    // k8s-openapi types JSON as an object, but it holds any value (a CRD's `default`, `enum`,
    // `example`): typed, kubectl would refuse a CRD whose enum lists strings.
    if let Some(Value::Object(json)) =
        definitions.get_mut("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON")
    {
        json.remove("type");
    }
    for info in registry.all().filter(|r| !r.builtin) {
        if let Some(schema) = custom_schema(store, info) {
            definitions.insert(custom_schema_name(info), swagger2(&schema));
        }
    }
    let mut paths = Map::new();
    for (group, versions) in registry.groups() {
        for version in versions {
            let Some(document) = discovery::openapi_group_version(&registry, group, version) else {
                continue;
            };
            for (path, item) in document["paths"].as_object().into_iter().flatten() {
                paths.insert(
                    path.clone(),
                    json!({"patch": swagger2_operation(&item["patch"])}),
                );
            }
        }
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.32.5"},
        "paths": paths,
        "definitions": definitions,
    })
}

/// A v3 PATCH operation of [`discovery::openapi_group_version`] in Swagger 2.0's form: its
/// request media types as `consumes`, its query parameters typed in place.
fn swagger2_operation(operation: &Value) -> Value {
    let mut converted = Map::new();
    let consumes: Vec<&String> = operation["requestBody"]["content"]
        .as_object()
        .into_iter()
        .flat_map(Map::keys)
        .collect();
    converted.insert("consumes".into(), json!(consumes));
    converted.insert(
        "produces".into(),
        json!(["application/json", "application/yaml"]),
    );
    let parameters: Vec<Value> = operation["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| json!({"name": p["name"], "in": p["in"], "type": p["schema"]["type"], "uniqueItems": true}))
        .collect();
    converted.insert("parameters".into(), Value::Array(parameters));
    let mut responses = Map::new();
    for (code, response) in operation["responses"].as_object().into_iter().flatten() {
        responses.insert(
            code.clone(),
            json!({"description": response["description"]}),
        );
    }
    converted.insert("responses".into(), Value::Object(responses));
    for (key, value) in operation.as_object().into_iter().flatten() {
        if key.starts_with("x-") {
            converted.insert(key.clone(), value.clone());
        }
    }
    Value::Object(converted)
}

/// One schema in Swagger 2.0's form, as the API server publishes v2 and as kubectl's parser
/// requires (it refuses the whole document over one schema it cannot read): references are
/// `#/definitions/` and bare (a `$ref` with a type or properties is refused), `allOf` wrappers of
/// one reference become that reference, OpenAPI v3's `oneOf`, `anyOf`, `not` and `nullable` go,
/// and, as the API server does for CRDs, nullable and unknown-field-preserving parts lose the
/// types, properties and items kubectl would check values against.
fn swagger2(schema: &Value) -> Value {
    let Value::Object(fields) = schema else {
        return schema.clone();
    };
    let mut converted = Map::new();
    let flag = |name: &str| fields.get(name).and_then(Value::as_bool) == Some(true);
    let reference = |value: &Value| {
        value
            .as_str()
            .map(|r| Value::String(r.replace("#/components/schemas/", "#/definitions/")))
    };
    for (key, value) in fields {
        let value = match key.as_str() {
            "oneOf" | "anyOf" | "not" | "nullable" => continue,
            "$ref" => match reference(value) {
                Some(value) => value,
                None => continue,
            },
            "properties" => Value::Object(
                value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(name, property)| (name.clone(), swagger2(property)))
                    .collect(),
            ),
            "items" | "additionalProperties" if value.is_object() => swagger2(value),
            "items" | "allOf" if value.is_array() => Value::Array(
                value
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(swagger2)
                    .collect(),
            ),
            _ => value.clone(),
        };
        converted.insert(key.clone(), value);
    }
    if let Some(Value::Array(all)) = converted.get("allOf")
        && let [only] = all.as_slice()
        && let Some(target) = only.get("$ref").cloned()
        && only.as_object().is_some_and(|o| o.len() == 1)
    {
        converted.remove("allOf");
        converted.insert("$ref".into(), target);
    }
    if let Some(Value::Array(types)) = converted.get("type") {
        // Swagger 2.0 has one type per schema; a nullable one is that type.
        let types: Vec<&str> = types
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect();
        match types.as_slice() {
            [only] => {
                let only = json!(only);
                converted.insert("type".into(), only);
            }
            _ => {
                converted.remove("type");
            }
        }
    }
    if flag("x-kubernetes-int-or-string") && !converted.contains_key("type") {
        converted.insert("type".into(), json!("string"));
        converted.insert("format".into(), json!("int-or-string"));
    }
    if flag("nullable") {
        for key in ["type", "items", "properties"] {
            converted.remove(key);
        }
    }
    if flag("x-kubernetes-preserve-unknown-fields") {
        converted.remove("items");
        converted.remove("properties");
    }
    if converted.contains_key("$ref") {
        for key in ["type", "properties", "items", "additionalProperties"] {
            converted.remove(key);
        }
    }
    if converted.get("type").and_then(Value::as_str) == Some("array")
        && !converted.get("items").is_some_and(Value::is_object)
    {
        converted.remove("type");
        converted.remove("items");
    }
    // A nullable field may be null, which kubectl's check of required fields would refuse.
    let nullable: Vec<&String> = fields
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(_, p)| p.get("nullable").and_then(Value::as_bool) == Some(true))
        .map(|(name, _)| name)
        .collect();
    if !nullable.is_empty()
        && let Some(Value::Array(required)) = converted.get_mut("required")
    {
        required.retain(|r| !nullable.iter().any(|n| r.as_str() == Some(n.as_str())));
    }
    Value::Object(converted)
}

/// [`v2`]'s document in protobuf: gnostic's `openapi.v2.Document`, the form kubectl decodes. Only
/// the fields the document uses are written; extensions and default, enum and example values are
/// `Any` messages holding their JSON text (JSON is YAML, which is what readers expect there).
pub fn v2_protobuf(document: &Value) -> Vec<u8> {
    let mut out = Message::default();
    out.string(1, document["swagger"].as_str().unwrap_or("2.0"));
    let mut info = Message::default();
    info.string(1, document["info"]["title"].as_str().unwrap_or_default());
    info.string(2, document["info"]["version"].as_str().unwrap_or_default());
    out.message(2, info);
    let mut paths = Message::default();
    for (path, item) in document["paths"].as_object().into_iter().flatten() {
        let mut path_item = Message::default();
        if let Some(patch) = item.get("patch") {
            path_item.message(8, operation_message(patch));
        }
        let mut named = Message::default();
        named.string(1, path);
        named.message(2, path_item);
        paths.message(2, named);
    }
    out.message(8, paths);
    let mut definitions = Message::default();
    for (name, schema) in document["definitions"].as_object().into_iter().flatten() {
        definitions.message(1, named_schema(name, schema));
    }
    out.message(9, definitions);
    out.0
}

/// A protobuf message being written, field after field.
#[derive(Default)]
struct Message(Vec<u8>);

impl Message {
    fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.0.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.0.push(value as u8);
    }

    fn key(&mut self, field: u32, wire_type: u32) {
        self.varint(u64::from(field << 3 | wire_type));
    }

    fn bytes(&mut self, field: u32, bytes: &[u8]) {
        self.key(field, 2);
        self.varint(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
    }

    fn string(&mut self, field: u32, text: &str) {
        self.bytes(field, text.as_bytes());
    }

    fn message(&mut self, field: u32, message: Message) {
        self.bytes(field, &message.0);
    }

    fn bool(&mut self, field: u32, value: bool) {
        self.key(field, 0);
        self.varint(u64::from(value));
    }

    fn int64(&mut self, field: u32, value: i64) {
        self.key(field, 0);
        self.varint(value as u64);
    }

    fn double(&mut self, field: u32, value: f64) {
        self.key(field, 1);
        self.0.extend_from_slice(&value.to_le_bytes());
    }

    /// Every string of a JSON list as a repeated string field.
    fn strings(&mut self, field: u32, list: &Value) {
        for text in list
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            self.string(field, text);
        }
    }

    /// Every `x-` key of a JSON object as a repeated `NamedAny` field.
    fn extensions(&mut self, field: u32, object: &Value) {
        for (name, value) in object.as_object().into_iter().flatten() {
            if name.starts_with("x-") {
                let mut named = Message::default();
                named.string(1, name);
                named.message(2, any(value));
                self.message(field, named);
            }
        }
    }
}

/// gnostic's `Any`: the value as YAML text.
fn any(value: &Value) -> Message {
    let mut message = Message::default();
    message.string(2, &value.to_string());
    message
}

fn named_schema(name: &str, schema: &Value) -> Message {
    let mut named = Message::default();
    named.string(1, name);
    named.message(2, schema_message(schema));
    named
}

/// gnostic's `Schema` of a Swagger 2.0 schema.
fn schema_message(schema: &Value) -> Message {
    let mut out = Message::default();
    let Value::Object(fields) = schema else {
        return out;
    };
    for (key, value) in fields {
        match (key.as_str(), value) {
            ("$ref", Value::String(text)) => out.string(1, text),
            ("format", Value::String(text)) => out.string(2, text),
            ("title", Value::String(text)) => out.string(3, text),
            ("description", Value::String(text)) => out.string(4, text),
            ("default", value) => out.message(5, any(value)),
            ("multipleOf", Value::Number(n)) => out.double(6, n.as_f64().unwrap_or_default()),
            ("maximum", Value::Number(n)) => out.double(7, n.as_f64().unwrap_or_default()),
            ("exclusiveMaximum", Value::Bool(b)) => out.bool(8, *b),
            ("minimum", Value::Number(n)) => out.double(9, n.as_f64().unwrap_or_default()),
            ("exclusiveMinimum", Value::Bool(b)) => out.bool(10, *b),
            ("maxLength", Value::Number(n)) => out.int64(11, n.as_i64().unwrap_or_default()),
            ("minLength", Value::Number(n)) => out.int64(12, n.as_i64().unwrap_or_default()),
            ("pattern", Value::String(text)) => out.string(13, text),
            ("maxItems", Value::Number(n)) => out.int64(14, n.as_i64().unwrap_or_default()),
            ("minItems", Value::Number(n)) => out.int64(15, n.as_i64().unwrap_or_default()),
            ("uniqueItems", Value::Bool(b)) => out.bool(16, *b),
            ("maxProperties", Value::Number(n)) => out.int64(17, n.as_i64().unwrap_or_default()),
            ("minProperties", Value::Number(n)) => out.int64(18, n.as_i64().unwrap_or_default()),
            ("required", list) => out.strings(19, list),
            ("enum", Value::Array(values)) => {
                for value in values {
                    out.message(20, any(value));
                }
            }
            ("additionalProperties", value) => {
                let mut item = Message::default();
                match value {
                    Value::Bool(allowed) => item.bool(2, *allowed),
                    schema => item.message(1, schema_message(schema)),
                }
                out.message(21, item);
            }
            ("type", Value::String(text)) => {
                let mut item = Message::default();
                item.string(1, text);
                out.message(22, item);
            }
            ("items", value) => {
                let mut item = Message::default();
                match value {
                    Value::Array(schemas) => {
                        for schema in schemas {
                            item.message(1, schema_message(schema));
                        }
                    }
                    schema => item.message(1, schema_message(schema)),
                }
                out.message(23, item);
            }
            ("allOf", Value::Array(schemas)) => {
                for schema in schemas {
                    out.message(24, schema_message(schema));
                }
            }
            ("properties", Value::Object(properties)) => {
                let mut item = Message::default();
                for (name, property) in properties {
                    item.message(1, named_schema(name, property));
                }
                out.message(25, item);
            }
            ("discriminator", Value::String(text)) => out.string(26, text),
            ("readOnly", Value::Bool(b)) => out.bool(27, *b),
            ("example", value) => out.message(30, any(value)),
            _ => {}
        }
    }
    out.extensions(31, schema);
    out
}

/// gnostic's `Operation` of a Swagger 2.0 operation whose parameters are all in the query.
fn operation_message(operation: &Value) -> Message {
    let mut out = Message::default();
    out.strings(6, &operation["produces"]);
    out.strings(7, &operation["consumes"]);
    for parameter in operation["parameters"].as_array().into_iter().flatten() {
        let mut query = Message::default();
        query.string(2, parameter["in"].as_str().unwrap_or("query"));
        query.string(4, parameter["name"].as_str().unwrap_or_default());
        query.string(6, parameter["type"].as_str().unwrap_or_default());
        query.bool(20, parameter["uniqueItems"].as_bool().unwrap_or_default());
        let mut non_body = Message::default();
        non_body.message(3, query);
        let mut parameter = Message::default();
        parameter.message(2, non_body);
        let mut item = Message::default();
        item.message(1, parameter);
        out.message(8, item);
    }
    let mut responses = Message::default();
    for (code, response) in operation["responses"].as_object().into_iter().flatten() {
        let mut described = Message::default();
        described.string(1, response["description"].as_str().unwrap_or_default());
        let mut value = Message::default();
        value.message(1, described);
        let mut named = Message::default();
        named.string(1, code);
        named.message(2, value);
        responses.message(1, named);
    }
    out.message(9, responses);
    out.extensions(13, operation);
    out
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

    /// Where `schema` breaks a rule kubectl's OpenAPI v2 parser enforces (it refuses the whole
    /// document over one schema): a `$ref` names a definition and has no type or properties, a
    /// type is one string, an array has one item schema.
    fn v2_parser_problems(definitions: &Value, path: &str, schema: &Value) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(reference) = schema.get("$ref") {
            let name = reference
                .as_str()
                .and_then(|r| r.strip_prefix("#/definitions/"));
            if name.is_none_or(|n| definitions.get(n).is_none()) {
                problems.push(format!("{path}: dangling {reference}"));
            }
            if schema.get("type").is_some() || schema.get("properties").is_some() {
                problems.push(format!("{path}: a $ref with a type or properties"));
            }
        }
        match schema.get("type") {
            None => {}
            Some(Value::String(t)) if t == "array" && !schema["items"].is_object() => {
                problems.push(format!("{path}: an array without one item schema"));
            }
            Some(Value::String(_)) => {}
            Some(other) => problems.push(format!("{path}: type {other}")),
        }
        for (name, property) in schema["properties"].as_object().into_iter().flatten() {
            problems.extend(v2_parser_problems(
                definitions,
                &format!("{path}.{name}"),
                property,
            ));
        }
        for key in ["items", "additionalProperties"] {
            if let Some(sub) = schema.get(key).filter(|s| s.is_object()) {
                problems.extend(v2_parser_problems(
                    definitions,
                    &format!("{path}/{key}"),
                    sub,
                ));
            }
        }
        problems
    }

    #[test]
    fn v2_is_swagger_2_that_kubectl_can_parse() {
        let document = v2(&Store::new());
        let definitions = &document["definitions"];
        let problems: Vec<String> = definitions
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(name, schema)| v2_parser_problems(definitions, name, schema))
            .collect();
        assert!(problems.is_empty(), "{problems:#?}");
        let deployment = &definitions["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(
            deployment["properties"]["spec"],
            json!({"$ref": "#/definitions/io.k8s.api.apps.v1.DeploymentSpec",
                "description": "Specification of the desired behavior of the Deployment."})
        );
        assert_eq!(
            deployment["x-kubernetes-group-version-kind"],
            json!([{"group": "apps", "version": "v1", "kind": "Deployment"}])
        );
        assert_eq!(
            definitions["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["format"],
            "int-or-string"
        );
        let patch =
            &document["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")
        );
        assert!(
            patch["consumes"]
                .as_array()
                .unwrap()
                .contains(&json!("application/strategic-merge-patch+json"))
        );
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "apps", "version": "v1", "kind": "Deployment"})
        );
    }

    #[test]
    fn crd_schemas_in_v2_lose_what_kubectl_would_check_wrongly() {
        let schema = json!({"type": "object", "required": ["size", "note"], "properties": {
            "size": {"type": "integer"},
            "note": {"type": "string", "nullable": true},
            "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                "properties": {"a": {"type": "string"}}},
            "tags": {"type": "array", "x-kubernetes-preserve-unknown-fields": true,
                "items": {"type": "string"}},
            "owner": {"allOf": [{"$ref": "#/components/schemas/Owner"}], "description": "who"},
        }});
        let converted = swagger2(&schema);
        assert_eq!(converted["required"], json!(["size"]));
        let properties = &converted["properties"];
        assert_eq!(properties["note"], json!({}));
        assert_eq!(
            properties["port"],
            json!({"x-kubernetes-int-or-string": true, "type": "string", "format": "int-or-string"})
        );
        assert_eq!(
            properties["extra"],
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
        );
        assert_eq!(
            properties["tags"],
            json!({"x-kubernetes-preserve-unknown-fields": true})
        );
        assert_eq!(
            properties["owner"],
            json!({"$ref": "#/definitions/Owner", "description": "who"})
        );
    }

    /// The fields of one protobuf message: (field number, varint value or bytes).
    fn fields(mut bytes: &[u8]) -> Vec<(u64, Result<u64, Vec<u8>>)> {
        fn varint(bytes: &mut &[u8]) -> u64 {
            let mut value = 0;
            for shift in (0..).step_by(7) {
                let byte = bytes[0];
                *bytes = &bytes[1..];
                value |= u64::from(byte & 0x7f) << shift;
                if byte < 0x80 {
                    break;
                }
            }
            value
        }
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let key = varint(&mut bytes);
            let value = match key & 7 {
                0 => Ok(varint(&mut bytes)),
                2 => {
                    let length = varint(&mut bytes) as usize;
                    let (value, rest) = bytes.split_at(length);
                    bytes = rest;
                    Err(value.to_vec())
                }
                other => panic!("wire type {other}"),
            };
            out.push((key >> 3, value));
        }
        out
    }

    fn field(bytes: &[u8], number: u64) -> Vec<u8> {
        fields(bytes)
            .into_iter()
            .find_map(|(n, v)| (n == number).then_some(v).and_then(Result::err))
            .unwrap_or_else(|| panic!("no field {number}"))
    }

    #[test]
    fn v2_protobuf_is_gnostics_document() {
        let document = json!({
            "swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.32.5"},
            "paths": {"/api/v1/namespaces/{name}": {"patch": {
                "consumes": ["application/merge-patch+json"],
                "parameters": [{"name": "fieldValidation", "in": "query", "type": "string"}],
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-group-version-kind": {"group": "", "version": "v1", "kind": "Namespace"},
            }}},
            "definitions": {"io.k8s.api.core.v1.Namespace": {
                "type": "object", "required": ["spec"],
                "properties": {"spec": {"$ref": "#/definitions/Spec"}},
                "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "Namespace"}],
            }},
        });
        let bytes = v2_protobuf(&document);
        assert_eq!(field(&bytes, 1), b"2.0");
        assert_eq!(field(&field(&bytes, 2), 2), b"v1.32.5");

        let path = field(&field(&bytes, 8), 2);
        assert_eq!(field(&path, 1), b"/api/v1/namespaces/{name}");
        let patch = field(&field(&path, 2), 8);
        assert_eq!(field(&patch, 7), b"application/merge-patch+json");
        let query = field(&field(&field(&field(&patch, 8), 1), 2), 3);
        assert_eq!(
            (field(&query, 2), field(&query, 4)),
            (b"query".to_vec(), b"fieldValidation".to_vec())
        );
        let extension = field(&patch, 13);
        assert_eq!(field(&extension, 1), b"x-kubernetes-group-version-kind");
        let yaml = |any: Vec<u8>| serde_json::from_slice::<Value>(&field(&any, 2)).unwrap();
        assert_eq!(
            yaml(field(&extension, 2)),
            json!({"group": "", "version": "v1", "kind": "Namespace"})
        );

        let named = field(&field(&bytes, 9), 1);
        assert_eq!(field(&named, 1), b"io.k8s.api.core.v1.Namespace");
        let schema = field(&named, 2);
        assert_eq!(field(&schema, 19), b"spec");
        assert_eq!(field(&field(&schema, 22), 1), b"object");
        let property = field(&field(&schema, 25), 1);
        assert_eq!(field(&property, 1), b"spec");
        assert_eq!(field(&field(&property, 2), 1), b"#/definitions/Spec");
        assert_eq!(
            yaml(field(&field(&schema, 31), 2)),
            json!([{"group": "", "version": "v1", "kind": "Namespace"}])
        );
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
