//! The patch formats of the Kubernetes API: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and
//! strategic merge patch with the merge keys of the built-in kinds.

use serde_json::{Map, Value};

/// Applies a JSON merge patch: objects merge, `null` removes a key, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let target_map = target.as_object_mut().expect("made an object above");
    for (key, value) in patch_map {
        if value.is_null() {
            target_map.remove(key);
        } else {
            merge_patch(target_map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn tokens(pointer: &str) -> Result<Vec<String>, String> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let rest = pointer
        .strip_prefix('/')
        .ok_or_else(|| format!("invalid JSON pointer {pointer:?}"))?;
    Ok(rest.split('/').map(unescape).collect())
}

fn parent_and_last<'a>(
    doc: &'a mut Value,
    pointer: &str,
) -> Result<(&'a mut Value, String), String> {
    let mut parts = tokens(pointer)?;
    let last = parts
        .pop()
        .ok_or("the root cannot be the target of this operation")?;
    let mut node = doc;
    for part in parts {
        node = match node {
            Value::Object(map) => map.get_mut(&part),
            Value::Array(items) => part.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| format!("path {pointer:?} does not exist"))?;
    }
    Ok((node, last))
}

fn get<'a>(doc: &'a Value, pointer: &str) -> Result<Option<&'a Value>, String> {
    let mut node = doc;
    for part in tokens(pointer)? {
        let next = match node {
            Value::Object(map) => map.get(&part),
            Value::Array(items) => part.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        };
        match next {
            Some(n) => node = n,
            None => return Ok(None),
        }
    }
    Ok(Some(node))
}

fn add(doc: &mut Value, pointer: &str, value: Value) -> Result<(), String> {
    if pointer.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = parent_and_last(doc, pointer)?;
    match parent {
        Value::Object(map) => {
            map.insert(last, value);
            Ok(())
        }
        Value::Array(items) => {
            let index = if last == "-" {
                items.len()
            } else {
                last.parse::<usize>()
                    .map_err(|_| format!("invalid index {last:?}"))?
            };
            if index > items.len() {
                return Err(format!("index {index} is out of bounds"));
            }
            items.insert(index, value);
            Ok(())
        }
        _ => Err(format!("path {pointer:?} has no container to add to")),
    }
}

fn remove(doc: &mut Value, pointer: &str) -> Result<Value, String> {
    let (parent, last) = parent_and_last(doc, pointer)?;
    match parent {
        Value::Object(map) => map
            .remove(&last)
            .ok_or_else(|| format!("path {pointer:?} does not exist")),
        Value::Array(items) => {
            let index: usize = last
                .parse()
                .map_err(|_| format!("invalid index {last:?}"))?;
            if index >= items.len() {
                return Err(format!("path {pointer:?} does not exist"));
            }
            Ok(items.remove(index))
        }
        _ => Err(format!("path {pointer:?} does not exist")),
    }
}

/// Applies a JSON patch. As the Kubernetes API server does, a `test` of a missing path passes when
/// the expected value is `null` (kube-runtime's finalizer helper relies on it).
pub fn json_patch(doc: &mut Value, patch: &Value) -> Result<(), String> {
    let ops = patch
        .as_array()
        .ok_or("a JSON patch is an array of operations")?;
    for op in ops {
        let path = op["path"].as_str().ok_or("every operation needs a path")?;
        match op["op"].as_str().unwrap_or_default() {
            "add" => add(doc, path, op["value"].clone())?,
            "remove" => {
                remove(doc, path)?;
            }
            "replace" => {
                if get(doc, path)?.is_none() {
                    return Err(format!("path {path:?} does not exist"));
                }
                if path.is_empty() {
                    *doc = op["value"].clone();
                } else {
                    remove(doc, path)?;
                    add(doc, path, op["value"].clone())?;
                }
            }
            "move" | "copy" => {
                let from = op["from"].as_str().ok_or("move and copy need from")?;
                let value = if op["op"] == "move" {
                    remove(doc, from)?
                } else {
                    get(doc, from)?
                        .cloned()
                        .ok_or_else(|| format!("path {from:?} does not exist"))?
                };
                add(doc, path, value)?;
            }
            "test" => {
                let expected = &op["value"];
                let actual = get(doc, path)?;
                let passes = match actual {
                    Some(actual) => actual == expected,
                    None => expected.is_null(),
                };
                if !passes {
                    return Err(format!("test of {path:?} failed"));
                }
            }
            other => return Err(format!("unknown operation {other:?}")),
        }
    }
    Ok(())
}

/// Merge key of a list field of a built-in kind, for strategic merge patch, given a sample item.
pub(crate) fn merge_key(field: &str, sample: &Value) -> Option<&'static str> {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "schedulingGates"
        | "resourceClaims"
        | "secrets" => Some("name"),
        "ports" if sample.get("containerPort").is_some() => Some("containerPort"),
        "ports" => Some("port"),
        "volumeMounts" => Some("mountPath"),
        "volumeDevices" => Some("devicePath"),
        "hostAliases" | "podIPs" | "hostIPs" => Some("ip"),
        "topologySpreadConstraints" => Some("topologyKey"),
        "conditions" | "addresses" => Some("type"),
        "ownerReferences" => Some("uid"),
        _ => None,
    }
}

/// Lists whose primitive items merge as a set.
const SET_LISTS: [&str; 2] = ["finalizers", "podCIDRs"];

/// Applies a strategic merge patch to an object of a built-in kind.
pub fn strategic_merge_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    merge_object(target, patch)
}

fn merge_object(target: &mut Value, patch: &Value) -> Result<(), String> {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    if patch_map.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replacement = patch_map.clone();
        replacement.remove("$patch");
        *target = Value::Object(replacement);
        return Ok(());
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let retain: Option<Vec<String>> = patch_map.get("$retainKeys").and_then(|v| {
        v.as_array().map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
    });
    let target_map = target.as_object_mut().expect("made an object above");
    let mut orders: Vec<(String, Vec<Value>)> = Vec::new();
    for (key, value) in patch_map {
        if key == "$retainKeys" || key == "$patch" {
            continue;
        }
        if let Some(field) = key.strip_prefix("$setElementOrder/") {
            orders.push((
                field.to_string(),
                value.as_array().cloned().unwrap_or_default(),
            ));
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let Some(Value::Array(items)) = target_map.get_mut(field) {
                let drop = value.as_array().cloned().unwrap_or_default();
                items.retain(|item| !drop.contains(item));
            }
            continue;
        }
        if value.is_null() {
            target_map.remove(key);
            continue;
        }
        match value {
            Value::Array(patch_items) => {
                let slot = target_map
                    .entry(key.clone())
                    .or_insert(Value::Array(Vec::new()));
                merge_list(key, slot, patch_items)?;
            }
            Value::Object(_) => {
                merge_object(target_map.entry(key.clone()).or_insert(Value::Null), value)?
            }
            scalar => {
                target_map.insert(key.clone(), scalar.clone());
            }
        }
    }
    if let Some(keep) = retain {
        target_map.retain(|k, _| keep.contains(k));
    }
    for (field, order) in orders {
        if let Some(Value::Array(items)) = target_map.get_mut(&field) {
            reorder(&field, items, &order);
        }
    }
    Ok(())
}

fn merge_list(field: &str, target: &mut Value, patch_items: &[Value]) -> Result<(), String> {
    if SET_LISTS.contains(&field) {
        let items = target.as_array_mut().ok_or("expected a list")?;
        for item in patch_items {
            if !items.contains(item) {
                items.push(item.clone());
            }
        }
        return Ok(());
    }
    let sample = patch_items.first().cloned().unwrap_or(Value::Null);
    let key = match (merge_key(field, &sample), sample.is_object()) {
        (Some(key), true) => key,
        _ => {
            // Lists without a merge key are atomic: the patch's list replaces the old one.
            let cleaned: Vec<Value> = patch_items
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .cloned()
                .collect();
            *target = Value::Array(cleaned);
            return Ok(());
        }
    };
    if !target.is_array() {
        *target = Value::Array(Vec::new());
    }
    let items = target.as_array_mut().expect("made a list above");
    if patch_items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *items = patch_items
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .cloned()
            .collect();
        return Ok(());
    }
    for patch_item in patch_items {
        let id = patch_item.get(key).cloned().unwrap_or(Value::Null);
        let position = items.iter().position(|i| i.get(key) == Some(&id));
        if patch_item.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(p) = position {
                items.remove(p);
            }
            continue;
        }
        match position {
            Some(p) => merge_object(&mut items[p], patch_item)?,
            None => {
                let mut fresh = Value::Object(Map::new());
                merge_object(&mut fresh, patch_item)?;
                items.push(fresh);
            }
        }
    }
    Ok(())
}

fn reorder(field: &str, items: &mut [Value], order: &[Value]) {
    let Some(key) = order.first().and_then(|s| merge_key(field, s)) else {
        return;
    };
    let rank = |item: &Value| {
        order
            .iter()
            .position(|o| o.get(key) == item.get(key))
            .unwrap_or(usize::MAX)
    };
    items.sort_by_key(rank);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_rfc7386() {
        let mut doc = json!({"a": {"b": 1, "c": 2}, "list": [1, 2]});
        merge_patch(&mut doc, &json!({"a": {"b": null, "d": 3}, "list": [3]}));
        assert_eq!(doc, json!({"a": {"c": 2, "d": 3}, "list": [3]}));
    }

    #[test]
    fn json_patch_with_the_null_test_quirk() {
        let mut doc = json!({"metadata": {"name": "x"}});
        json_patch(
            &mut doc,
            &json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": ["serin.dev/finalizer"]}
            ]),
        )
        .unwrap();
        assert_eq!(
            doc["metadata"]["finalizers"],
            json!(["serin.dev/finalizer"])
        );
        json_patch(
            &mut doc,
            &json!([
                {"op": "test", "path": "/metadata/finalizers/0", "value": "serin.dev/finalizer"},
                {"op": "remove", "path": "/metadata/finalizers/0"}
            ]),
        )
        .unwrap();
        assert_eq!(doc["metadata"]["finalizers"], json!([]));
        assert!(
            json_patch(
                &mut doc,
                &json!([{"op": "test", "path": "/metadata/name", "value": "y"}])
            )
            .is_err()
        );
        assert!(
            json_patch(
                &mut doc,
                &json!([{"op": "replace", "path": "/spec/x", "value": 1}])
            )
            .is_err()
        );
        json_patch(
            &mut doc,
            &json!([{"op": "add", "path": "/metadata/labels", "value": {"a~b/c": "1"}},
            {"op": "copy", "from": "/metadata/labels/a~0b~1c", "path": "/metadata/copy"}]),
        )
        .unwrap();
        assert_eq!(doc["metadata"]["copy"], json!("1"));
    }

    #[test]
    fn strategic_merge_patch_merges_containers_by_name() {
        let mut deploy = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "a:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
            {"name": "sidecar", "image": "s:1"}
        ]}}}});
        strategic_merge_patch(&mut deploy, &json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "app"}],
            "containers": [{"name": "app", "image": "a:2", "env": [{"name": "B", "$patch": "delete"}, {"name": "C", "value": "3"}]}]
        }}}})).unwrap();
        let containers = &deploy["spec"]["template"]["spec"]["containers"];
        assert_eq!(containers[0]["name"], "sidecar");
        assert_eq!(containers[1]["image"], "a:2");
        assert_eq!(
            containers[1]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "C", "value": "3"}])
        );
    }

    #[test]
    fn strategic_merge_patch_directives() {
        let mut obj = json!({"metadata": {"finalizers": ["a"]}, "spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}, "selector": {"matchLabels": {"x": "1"}}}});
        strategic_merge_patch(&mut obj, &json!({"metadata": {"finalizers": ["b"]},
            "spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}, "selector": {"$patch": "replace", "matchLabels": {"y": "2"}}}})).unwrap();
        assert_eq!(obj["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(obj["spec"]["strategy"], json!({"type": "Recreate"}));
        assert_eq!(obj["spec"]["selector"], json!({"matchLabels": {"y": "2"}}));
    }
}
