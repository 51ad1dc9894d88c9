//! What the API server does to a custom resource with its CRD's structural schema, in the API
//! server's order: pruning of fields the schema does not declare (and of nulls where `nullable` is
//! not set), defaulting from `default:`, then validation, whose failures are a 422 naming each field.

use crate::status::ApiError;
use regex::Regex;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The fields every object has besides what its schema declares.
const OBJECT_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// One CRD version's `openAPIV3Schema`, ready to prune, default and validate with.
#[derive(Debug)]
pub struct Schema {
    root: Value,
    has_defaults: bool,
    patterns: Mutex<HashMap<String, Option<Regex>>>,
}

impl Schema {
    /// The schema of a CRD version (`spec.versions[].schema.openAPIV3Schema`).
    pub fn new(open_api_v3: &Value) -> Arc<Self> {
        Arc::new(Schema {
            root: open_api_v3.clone(),
            has_defaults: mentions(open_api_v3, "default"),
            patterns: Mutex::new(HashMap::new()),
        })
    }

    /// Whether any field has a `default`, so reads need defaulting too.
    pub fn has_defaults(&self) -> bool {
        self.has_defaults
    }

    fn pattern(&self, pattern: &str) -> Option<Regex> {
        let mut patterns = self.patterns.lock().unwrap_or_else(|e| e.into_inner());
        patterns
            .entry(pattern.to_string())
            .or_insert_with(|| Regex::new(pattern).ok())
            .clone()
    }
}

fn mentions(schema: &Value, keyword: &str) -> bool {
    match schema {
        Value::Object(map) => {
            map.contains_key(keyword)
                || map
                    .iter()
                    .filter(|(k, _)| *k != "default" && *k != "enum" && *k != "example")
                    .any(|(_, v)| mentions(v, keyword))
        }
        Value::Array(items) => items.iter().any(|v| mentions(v, keyword)),
        _ => false,
    }
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

/// Drops what `schema` does not declare, and nulls of fields that are not `nullable`; returns the
/// paths of the undeclared fields it dropped. Metadata is pruned to ObjectMeta's fields.
pub fn prune(schema: &Schema, object: &mut Value) -> Vec<String> {
    let mut dropped = Vec::new();
    prune_node(&schema.root, object, "", true, &mut dropped);
    dropped
}

fn prune_node(
    schema: &Value,
    value: &mut Value,
    path: &str,
    resource: bool,
    dropped: &mut Vec<String>,
) {
    match value {
        Value::Object(fields) => {
            let preserve = schema["x-kubernetes-preserve-unknown-fields"] == true;
            let properties = schema["properties"].as_object();
            let additional = &schema["additionalProperties"];
            let mut removed = Vec::new();
            for (field, item) in fields.iter_mut() {
                let at = join(path, field);
                if resource && OBJECT_FIELDS.contains(&field.as_str()) {
                    if field == "metadata" {
                        dropped.extend(
                            crate::builtin_schemas::prune_object_meta(item)
                                .into_iter()
                                .map(|p| join(&at, &p)),
                        );
                    }
                    continue;
                }
                let declared = properties.and_then(|p| p.get(field));
                let item_schema = match declared {
                    Some(schema) => Some(schema),
                    None if additional.is_object() => Some(additional),
                    None => None,
                };
                match item_schema {
                    Some(item_schema) => {
                        if item.is_null() && item_schema["nullable"] != true {
                            removed.push(field.clone());
                        } else {
                            let embedded = item_schema["x-kubernetes-embedded-resource"] == true;
                            prune_node(item_schema, item, &at, embedded, dropped);
                        }
                    }
                    None if preserve || *additional == true => {}
                    None => {
                        // A null is how a patch removes a field, so it is dropped unreported.
                        if !item.is_null() {
                            dropped.push(at);
                        }
                        removed.push(field.clone());
                    }
                }
            }
            for field in removed {
                fields.remove(&field);
            }
        }
        Value::Array(items) => {
            let item_schema = &schema["items"];
            if item_schema.is_object() {
                let embedded = item_schema["x-kubernetes-embedded-resource"] == true;
                for (index, item) in items.iter_mut().enumerate() {
                    prune_node(
                        item_schema,
                        item,
                        &format!("{path}[{index}]"),
                        embedded,
                        dropped,
                    );
                }
            }
        }
        _ => {}
    }
}

/// Fills absent fields that have a `default`, top down, so a defaulted object gets its own
/// fields' defaults too; a field present with `null` (where `nullable`) is left alone.
pub fn default(schema: &Schema, object: &mut Value) {
    default_node(&schema.root, object);
}

fn default_node(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(fields) => {
            if let Some(properties) = schema["properties"].as_object() {
                for (field, property) in properties {
                    if !fields.contains_key(field)
                        && let Some(default) = property.get("default")
                    {
                        fields.insert(field.clone(), default.clone());
                    }
                }
                for (field, item) in fields.iter_mut() {
                    if let Some(property) = properties.get(field) {
                        default_node(property, item);
                    }
                }
            }
            if schema["additionalProperties"].is_object() {
                for item in fields.values_mut() {
                    default_node(&schema["additionalProperties"], item);
                }
            }
        }
        Value::Array(items) if schema["items"].is_object() => {
            for item in items {
                default_node(&schema["items"], item);
            }
        }
        _ => {}
    }
}

/// One way an object breaks its schema, as the API server words it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// The field's path, e.g. `spec.analysis.maxWeight`.
    pub field: String,
    /// Kubernetes' cause reason, e.g. `FieldValueInvalid`.
    pub reason: &'static str,
    /// The message after the path, e.g. `Invalid value: 200: ... should be less than or equal to 100`.
    pub message: String,
}

/// Every way `object` breaks `schema`.
pub fn validate(schema: &Schema, object: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    validate_node(schema, &schema.root, object, "", true, &mut causes);
    causes
}

/// The 422 the API server answers when `causes` is not empty.
pub fn invalid(kind: &str, group: &str, name: &str, causes: &[Cause]) -> ApiError {
    let listed: Vec<String> = causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    let qualified = format!("{kind}.{group}");
    let summary = match listed.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    let mut error = ApiError::invalid(&qualified, name, "", "", "");
    error.message = format!("{qualified} \"{name}\" is invalid: {summary}");
    error.details = Some(json!({
        "name": name, "group": group, "kind": kind,
        "causes": causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field})).collect::<Vec<_>>(),
    }));
    error
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn has_type(value: &Value, wanted: &str) -> bool {
    match wanted {
        "number" => value.is_number(),
        other => type_name(value) == other,
    }
}

/// How a value reads in the API server's messages: strings quoted, the rest as JSON, and whole
/// numbers without a fraction (a bound written `100.0` reads `100`, as Go prints it).
fn shown(value: &Value) -> String {
    match value.as_f64() {
        Some(n) if n.fract() == 0.0 && n.abs() < 1e15 => format!("{}", n as i64),
        _ => value.to_string(),
    }
}

fn validate_node(
    owner: &Schema,
    schema: &Value,
    value: &Value,
    path: &str,
    resource: bool,
    causes: &mut Vec<Cause>,
) {
    let mut invalid = |reason: &'static str, message: String| {
        causes.push(Cause {
            field: path.to_string(),
            reason,
            message,
        });
    };
    if value.is_null() {
        if schema["nullable"] != true && !path.is_empty() && schema.get("type").is_some() {
            invalid(
                "FieldValueInvalid",
                format!(
                    "Invalid value: \"null\": {path} in body must be of type {}: \"null\"",
                    schema["type"].as_str().unwrap_or("object")
                ),
            );
        }
        return;
    }
    if schema["x-kubernetes-int-or-string"] == true {
        if !matches!(type_name(value), "integer" | "string") {
            invalid(
                "FieldValueInvalid",
                format!(
                    "Invalid value: \"{}\": {path} in body must be of type integer,string: \"{}\"",
                    type_name(value),
                    type_name(value)
                ),
            );
            return;
        }
    } else if let Some(wanted) = schema["type"].as_str()
        && !has_type(value, wanted)
    {
        invalid(
            "FieldValueInvalid",
            format!(
                "Invalid value: \"{}\": {path} in body must be of type {wanted}: \"{}\"",
                type_name(value),
                type_name(value)
            ),
        );
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        let listed: Vec<String> = allowed.iter().map(shown).collect();
        invalid(
            "FieldValueNotSupported",
            format!(
                "Unsupported value: {}: supported values: {}",
                shown(value),
                listed.join(", ")
            ),
        );
    }
    if let Some(number) = value.as_f64() {
        // (bound, its exclusive flag, broken when the number is below (or above) it, the words)
        let bounds: [(&str, &str, bool, &str); 2] = [
            ("minimum", "exclusiveMinimum", true, "greater than"),
            ("maximum", "exclusiveMaximum", false, "less than"),
        ];
        for (key, exclusive_key, lower, words) in bounds {
            let Some(bound) = schema[key].as_f64() else {
                continue;
            };
            let exclusive = schema[exclusive_key] == true;
            let broken = match (lower, exclusive) {
                (true, true) => number <= bound,
                (true, false) => number < bound,
                (false, true) => number >= bound,
                (false, false) => number > bound,
            };
            if broken {
                let or_equal = if exclusive { "" } else { " or equal to" };
                invalid(
                    "FieldValueInvalid",
                    format!(
                        "Invalid value: {}: {path} in body should be {words}{or_equal} {}",
                        shown(value),
                        shown(&schema[key])
                    ),
                );
            }
        }
    }
    if let Some(text) = value.as_str() {
        let length = text.chars().count() as u64;
        if let Some(min) = schema["minLength"].as_u64()
            && length < min
        {
            invalid(
                "FieldValueInvalid",
                format!(
                    "Invalid value: {}: {path} in body should be at least {min} chars long",
                    shown(value)
                ),
            );
        }
        if let Some(max) = schema["maxLength"].as_u64()
            && length > max
        {
            invalid(
                "FieldValueTooLong",
                format!("Too long: may not be more than {max} bytes"),
            );
        }
        if let Some(pattern) = schema["pattern"].as_str()
            && let Some(regex) = owner.pattern(pattern)
            && !regex.is_match(text)
        {
            invalid(
                "FieldValueInvalid",
                format!(
                    "Invalid value: {}: {path} in body should match '{pattern}'",
                    shown(value)
                ),
            );
        }
    }
    match value {
        Value::Array(items) => {
            let count = items.len() as u64;
            if let Some(min) = schema["minItems"].as_u64()
                && count < min
            {
                invalid(
                    "FieldValueInvalid",
                    format!(
                        "Invalid value: {count}: {path} in body should have at least {min} items"
                    ),
                );
            }
            if let Some(max) = schema["maxItems"].as_u64()
                && count > max
            {
                invalid(
                    "FieldValueTooMany",
                    format!("Too many: {count}: must have at most {max} items"),
                );
            }
            duplicates(schema, items, path, causes);
            if schema["items"].is_object() {
                let embedded = schema["items"]["x-kubernetes-embedded-resource"] == true;
                for (index, item) in items.iter().enumerate() {
                    validate_node(
                        owner,
                        &schema["items"],
                        item,
                        &format!("{path}[{index}]"),
                        embedded,
                        causes,
                    );
                }
            }
        }
        Value::Object(fields) => {
            for required in schema["required"].as_array().into_iter().flatten() {
                if let Some(name) = required.as_str()
                    && !fields.contains_key(name)
                {
                    causes.push(Cause {
                        field: join(path, name),
                        reason: "FieldValueRequired",
                        message: "Required value".to_string(),
                    });
                }
            }
            let properties = schema["properties"].as_object();
            for (field, item) in fields {
                if resource && OBJECT_FIELDS.contains(&field.as_str()) {
                    continue;
                }
                let item_schema = properties
                    .and_then(|p| p.get(field))
                    .or_else(|| Some(&schema["additionalProperties"]).filter(|a| a.is_object()));
                if let Some(item_schema) = item_schema {
                    let embedded = item_schema["x-kubernetes-embedded-resource"] == true;
                    validate_node(
                        owner,
                        item_schema,
                        item,
                        &join(path, field),
                        embedded,
                        causes,
                    );
                }
            }
        }
        _ => {}
    }
}

/// `x-kubernetes-list-type: set` items, and `map` items by their `x-kubernetes-list-map-keys`,
/// must be unique.
fn duplicates(schema: &Value, items: &[Value], path: &str, causes: &mut Vec<Cause>) {
    let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let identity = |item: &Value| -> Value {
        match schema["x-kubernetes-list-type"].as_str() {
            Some("map") => Value::Object(
                keys.iter()
                    .map(|k| (k.to_string(), item[*k].clone()))
                    .collect::<Map<String, Value>>(),
            ),
            _ => item.clone(),
        }
    };
    if !matches!(
        schema["x-kubernetes-list-type"].as_str(),
        Some("set" | "map")
    ) {
        return;
    }
    let mut seen = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let id = identity(item);
        if seen.contains(&id) {
            causes.push(Cause {
                field: format!("{path}[{index}]"),
                reason: "FieldValueDuplicate",
                message: format!("Duplicate value: {id}"),
            });
        } else {
            seen.push(id);
        }
    }
}

/// Prunes, defaults and validates a custom resource about to be stored; returns the pruned paths,
/// or the 422 that names every broken field.
pub fn admit(
    schema: &Schema,
    kind: &str,
    group: &str,
    object: &mut Value,
) -> Result<Vec<String>, ApiError> {
    let dropped = prune(schema, object);
    default(schema, object);
    let causes = validate(schema, object);
    if causes.is_empty() {
        return Ok(dropped);
    }
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    Err(invalid(kind, group, name, &causes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Arc<Schema> {
        Schema::new(&json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["targetRef"],
                    "properties": {
                        "targetRef": {"type": "object", "properties": {"name": {"type": "string"}}},
                        "provider": {"type": "string", "enum": ["istio", "kubernetes"]},
                        "analysis": {
                            "type": "object",
                            "properties": {
                                "interval": {"type": "string", "default": "1m", "pattern": "^[0-9]+[smh]$"},
                                "maxWeight": {"type": "integer", "minimum": 1.0, "maximum": 100.0, "nullable": true},
                                "metrics": {
                                    "type": "array",
                                    "maxItems": 3,
                                    "x-kubernetes-list-type": "map",
                                    "x-kubernetes-list-map-keys": ["name"],
                                    "items": {"type": "object", "properties": {"name": {"type": "string"}, "threshold": {"type": "number"}}}
                                }
                            }
                        },
                        "port": {"x-kubernetes-int-or-string": true},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "template": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}
                    }
                },
                "status": {"type": "object", "properties": {"phase": {"type": "string"}}}
            }
        }))
    }

    #[test]
    fn undeclared_fields_and_non_nullable_nulls_are_pruned() {
        let mut object = json!({
            "apiVersion": "flagger.app/v1beta1", "kind": "Canary",
            "metadata": {"name": "podinfo", "namespace": "test", "bogus": 1},
            "spec": {
                "targetRef": {"name": "podinfo", "kind": null},
                "unknown": true,
                "provider": null,
                "analysis": {"maxWeight": null, "metrics": [{"name": "a", "extra": 1}]},
                "labels": {"a": "b"},
                "extra": {"anything": {"goes": 1}},
                "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {"x": 1}, "other": 2}
            },
            "status": {"phase": "Progressing", "handledRequests": ["r1"]}
        });
        let dropped = prune(&schema(), &mut object);
        assert_eq!(
            dropped,
            [
                "metadata.bogus",
                "spec.unknown",
                "spec.analysis.metrics[0].extra",
                "spec.template.other",
                "status.handledRequests"
            ]
        );
        assert!(
            object["spec"].get("provider").is_none(),
            "a non-nullable null is dropped"
        );
        assert_eq!(object["spec"]["targetRef"], json!({"name": "podinfo"}));
        assert!(object["spec"]["analysis"]["maxWeight"].is_null());
        assert!(
            object["spec"]["analysis"].get("maxWeight").is_some(),
            "nullable nulls stay"
        );
        assert_eq!(object["spec"]["extra"]["anything"]["goes"], 1);
        assert_eq!(object["spec"]["labels"]["a"], "b");
        assert_eq!(object["spec"]["template"]["metadata"]["name"], "x");
        assert_eq!(object["status"], json!({"phase": "Progressing"}));
    }

    #[test]
    fn defaults_fill_absent_fields_of_present_objects() {
        let schema = schema();
        let mut object = json!({"spec": {"targetRef": {"name": "a"}, "analysis": {}}});
        default(&schema, &mut object);
        assert_eq!(object["spec"]["analysis"]["interval"], "1m");
        let mut without = json!({"spec": {"targetRef": {"name": "a"}}});
        default(&schema, &mut without);
        assert!(
            without["spec"].get("analysis").is_none(),
            "no parent, no default"
        );
        let mut set = json!({"spec": {"analysis": {"interval": "5s"}}});
        default(&schema, &mut set);
        assert_eq!(set["spec"]["analysis"]["interval"], "5s");
        assert!(schema.has_defaults());
    }

    #[test]
    fn violations_name_their_fields_in_the_api_servers_words() {
        let object = json!({
            "metadata": {"name": "podinfo"},
            "spec": {
                "provider": "linkerd",
                "analysis": {
                    "interval": "soon", "maxWeight": 200,
                    "metrics": [{"name": "a"}, {"name": "a"}, {"name": "b"}, {"name": "c"}]
                },
                "port": 1.5,
                "labels": {"a": 1}
            }
        });
        let causes = validate(&schema(), &object);
        let text: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        assert_eq!(
            text,
            [
                "spec.targetRef: Required value",
                "spec.provider: Unsupported value: \"linkerd\": supported values: \"istio\", \"kubernetes\"",
                "spec.analysis.interval: Invalid value: \"soon\": spec.analysis.interval in body should match '^[0-9]+[smh]$'",
                "spec.analysis.maxWeight: Invalid value: 200: spec.analysis.maxWeight in body should be less than or equal to 100",
                "spec.analysis.metrics: Too many: 4: must have at most 3 items",
                "spec.analysis.metrics[1]: Duplicate value: {\"name\":\"a\"}",
                "spec.port: Invalid value: \"number\": spec.port in body must be of type integer,string: \"number\"",
                "spec.labels.a: Invalid value: \"integer\": spec.labels.a in body must be of type string: \"integer\"",
            ]
        );
        let error = invalid("Canary", "flagger.app", "podinfo", &causes[3..4]);
        assert_eq!(error.code, 422);
        assert_eq!(
            error.message,
            "Canary.flagger.app \"podinfo\" is invalid: spec.analysis.maxWeight: Invalid value: 200: spec.analysis.maxWeight in body should be less than or equal to 100"
        );
        let fine = json!({"spec": {"targetRef": {"name": "a"}, "port": "http", "analysis": {"maxWeight": 50}}});
        assert!(validate(&schema(), &fine).is_empty());
    }
}
