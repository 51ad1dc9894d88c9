//! Field ownership for server-side apply: `metadata.managedFields`, apply conflicts, and removal of
//! the fields a manager stopped applying.
//!
//! A pragmatic model of structured-merge-diff: an object is flattened to leaf paths (map fields
//! `f:name`, items of keyed lists of built-in kinds `k:{"name":"c"}` with `.` for the item itself,
//! every other list atomic). Each manager entry owns a set of paths.

use crate::status::ApiError;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// A leaf path as managedFields spell it, e.g. `["f:spec", "f:holderIdentity"]`.
pub type FieldPath = Vec<String>;

/// The annotation client-side `kubectl apply` keeps its last applied manifest in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Metadata fields that are owned; the rest of metadata belongs to the server.
const OWNED_METADATA: [&str; 4] = ["labels", "annotations", "finalizers", "ownerReferences"];

/// The leaves of an object with their values (`Null` for the `.` of a keyed list item).
pub fn leaves(object: &Value, builtin: bool) -> BTreeMap<FieldPath, Value> {
    let mut out = BTreeMap::new();
    let Some(fields) = object.as_object() else {
        return out;
    };
    let mut path = Vec::new();
    for (name, value) in fields {
        match name.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => {
                for owned in OWNED_METADATA {
                    if let Some(v) = value.get(owned) {
                        path.extend(["f:metadata".to_string(), format!("f:{owned}")]);
                        collect(v, owned, builtin, &mut path, &mut out);
                        path.clear();
                    }
                }
            }
            _ => {
                path.push(format!("f:{name}"));
                collect(value, name, builtin, &mut path, &mut out);
                path.clear();
            }
        }
    }
    out
}

fn collect(
    value: &Value,
    field: &str,
    builtin: bool,
    path: &mut FieldPath,
    out: &mut BTreeMap<FieldPath, Value>,
) {
    match value {
        Value::Object(fields) if !fields.is_empty() => {
            for (name, v) in fields {
                path.push(format!("f:{name}"));
                collect(v, name, builtin, path, out);
                path.pop();
            }
        }
        Value::Array(items) if builtin && !items.is_empty() => {
            let key = crate::patch::merge_key(field, &items[0])
                .filter(|key| items.iter().all(|item| item.get(key).is_some()));
            let Some(key) = key else {
                out.insert(path.clone(), value.clone());
                return;
            };
            for item in items {
                path.push(format!("k:{}", json!({ key: item[key] })));
                path.push(".".into());
                out.insert(path.clone(), Value::Null);
                path.pop();
                if let Some(fields) = item.as_object() {
                    for (name, v) in fields {
                        path.push(format!("f:{name}"));
                        collect(v, name, builtin, path, out);
                        path.pop();
                    }
                }
                path.pop();
            }
        }
        _ => {
            out.insert(path.clone(), value.clone());
        }
    }
}

/// A path as conflict messages show it: `.spec.template.spec.containers[name="app"].image`.
pub fn display(path: &FieldPath) -> String {
    let mut out = String::new();
    for step in path {
        if let Some(name) = step.strip_prefix("f:") {
            out.push('.');
            out.push_str(name);
        } else if let Some(key) = step.strip_prefix("k:") {
            let fields: Map<String, Value> = serde_json::from_str(key).unwrap_or_default();
            let inner: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
            out.push_str(&format!("[{}]", inner.join(",")));
        }
    }
    out
}

/// Removes the field or keyed list item at `path`, if present, and the maps and lists that the
/// removal left empty.
pub fn remove_path(object: &mut Value, path: &FieldPath) {
    let steps = match path.split_last() {
        Some((last, parents)) if last == "." => parents,
        _ => path.as_slice(),
    };
    remove_steps(object, steps);
}

/// Removes `steps` below `node`; true when `node` is left empty by it.
fn remove_steps(node: &mut Value, steps: &[String]) -> bool {
    let Some((first, rest)) = steps.split_first() else {
        return false;
    };
    let removed = if rest.is_empty() {
        remove_child(node, first)
    } else {
        let emptied = step_into(node, first).is_some_and(|child| remove_steps(child, rest));
        emptied && remove_child(node, first)
    };
    removed
        && match node {
            Value::Object(fields) => fields.is_empty(),
            Value::Array(items) => items.is_empty(),
            _ => false,
        }
}

fn remove_child(node: &mut Value, step: &str) -> bool {
    if let Some(name) = step.strip_prefix("f:") {
        return node
            .as_object_mut()
            .is_some_and(|fields| fields.remove(name).is_some());
    }
    let (Some(key), Some(items)) = (step.strip_prefix("k:"), node.as_array_mut()) else {
        return false;
    };
    let wanted: Map<String, Value> = serde_json::from_str(key).unwrap_or_default();
    let before = items.len();
    items.retain(|item| !wanted.iter().all(|(k, v)| item.get(k) == Some(v)));
    items.len() < before
}

fn step_into<'a>(node: &'a mut Value, step: &str) -> Option<&'a mut Value> {
    if let Some(name) = step.strip_prefix("f:") {
        return node.get_mut(name);
    }
    let wanted: Map<String, Value> = serde_json::from_str(step.strip_prefix("k:")?).ok()?;
    node.as_array_mut()?
        .iter_mut()
        .find(|item| wanted.iter().all(|(k, v)| item.get(k) == Some(v)))
}

/// One `metadata.managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The field manager.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// The API version the manager wrote with.
    pub api_version: String,
    /// When it last changed its fields.
    pub time: String,
    /// `status` for writes through the status subresource.
    pub subresource: Option<String>,
    /// The paths it owns.
    pub fields: BTreeSet<FieldPath>,
}

impl Entry {
    fn same_owner(&self, manager: &str, operation: &str, subresource: Option<&str>) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
    }

    /// How a conflict message names this owner.
    fn describe(&self) -> String {
        let mut out = format!("{:?}", self.manager);
        if self.operation == "Update" {
            out.push_str(&format!(" using {}", self.api_version));
        }
        if let Some(sub) = &self.subresource {
            out.push_str(&format!(" with subresource {sub:?}"));
        }
        out
    }
}

fn paths_of(trie: &Value, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
    match trie.as_object() {
        Some(children) if !children.is_empty() => {
            for (step, child) in children {
                prefix.push(step.clone());
                paths_of(child, prefix, out);
                prefix.pop();
            }
        }
        _ if !prefix.is_empty() => {
            out.insert(prefix.clone());
        }
        _ => {}
    }
}

fn trie_of(paths: &BTreeSet<FieldPath>) -> Value {
    let mut root = Map::new();
    for path in paths {
        let mut node = &mut root;
        for step in path {
            node = node
                .entry(step.clone())
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .expect("trie nodes are objects");
        }
    }
    Value::Object(root)
}

/// The entries recorded in an object's `metadata.managedFields`.
pub fn entries(object: &Value) -> Vec<Entry> {
    let Some(list) = object["metadata"]["managedFields"].as_array() else {
        return Vec::new();
    };
    list.iter().map(parse_entry).collect()
}

/// One recorded `metadata.managedFields` entry.
fn parse_entry(e: &Value) -> Entry {
    let mut fields = BTreeSet::new();
    paths_of(&e["fieldsV1"], &mut Vec::new(), &mut fields);
    Entry {
        manager: e["manager"].as_str().unwrap_or_default().into(),
        operation: e["operation"].as_str().unwrap_or("Update").into(),
        api_version: e["apiVersion"].as_str().unwrap_or_default().into(),
        time: e["time"].as_str().unwrap_or_default().into(),
        subresource: e["subresource"].as_str().map(String::from),
        fields,
    }
}

/// Writes `entries` (those owning something) to the object's `metadata.managedFields`.
pub fn set_entries(object: &mut Value, entries: Vec<Entry>) {
    let rendered: Vec<Value> = entries
        .into_iter()
        .filter(|e| !e.fields.is_empty())
        .map(render)
        .collect();
    put_entries(object, rendered);
}

/// One entry as `metadata.managedFields` holds it.
fn render(entry: Entry) -> Value {
    let mut rendered = json!({
        "manager": entry.manager, "operation": entry.operation, "apiVersion": entry.api_version,
        "time": entry.time, "fieldsType": "FieldsV1", "fieldsV1": trie_of(&entry.fields),
    });
    if let Some(sub) = entry.subresource {
        rendered["subresource"] = json!(sub);
    }
    rendered
}

/// Sets `metadata.managedFields` to `rendered`, or removes it when there is none.
fn put_entries(object: &mut Value, rendered: Vec<Value>) {
    let Some(metadata) = object["metadata"].as_object_mut() else {
        return;
    };
    if rendered.is_empty() {
        metadata.remove("managedFields");
    } else {
        metadata.insert("managedFields".into(), Value::Array(rendered));
    }
}

/// Who is writing: the manager, its API version and subresource, and the time of the write.
pub struct Writer {
    /// The field manager.
    pub manager: String,
    /// The API version of the request.
    pub api_version: String,
    /// `Some("status")` for status subresource writes.
    pub subresource: Option<&'static str>,
    /// The time recorded for changed entries.
    pub now: String,
}

/// Records a non-apply write: the leaves it changed or set move to the writer's `Update` entry,
/// and removed leaves leave every entry. The ownership before the write is `new`'s own
/// `managedFields` (the stored ones, unless the write sent its own).
pub fn record_update(old: Option<&Value>, new: &mut Value, builtin: bool, writer: &Writer) {
    let mut changed = BTreeSet::new();
    let mut removed = BTreeSet::new();
    match old {
        Some(old) => changed_leaves(old, new, builtin, &mut changed, &mut removed),
        None => changed.extend(leaves(new, builtin).into_keys()),
    }
    if changed.is_empty() && removed.is_empty() {
        // Nothing moves: the recorded ownership stays, normalised only when the write sent its own.
        let stored = old.map(|o| &o["metadata"]["managedFields"]);
        if stored != Some(&new["metadata"]["managedFields"]) {
            let basis = entries(new);
            set_entries(new, basis);
        }
        return;
    }
    // Only the writer's entry and the entries owning a path this write changes or removes are
    // parsed and rendered again; the others keep their recorded JSON.
    let recorded = match new["metadata"].get_mut("managedFields") {
        Some(Value::Array(list)) => std::mem::take(list),
        _ => Vec::new(),
    };
    let mut rendered = Vec::with_capacity(recorded.len() + 1);
    let mut mine: Option<(usize, Entry)> = None;
    for item in recorded {
        let is_mine = mine.is_none()
            && item["manager"].as_str() == Some(writer.manager.as_str())
            && item["operation"].as_str().unwrap_or("Update") == "Update"
            && item["subresource"].as_str() == writer.subresource;
        let trie = &item["fieldsV1"];
        let owns_moved = changed
            .iter()
            .chain(&removed)
            .any(|path| trie_holds(trie, path));
        if !is_mine && !owns_moved {
            if trie.as_object().is_some_and(|t| !t.is_empty()) {
                rendered.push(item);
            }
            continue;
        }
        let mut entry = parse_entry(&item);
        entry
            .fields
            .retain(|p| !changed.contains(p) && !removed.contains(p));
        if is_mine {
            mine = Some((rendered.len(), entry));
            rendered.push(Value::Null);
        } else if !entry.fields.is_empty() {
            rendered.push(render(entry));
        }
    }
    let (at, mut entry) = mine.unwrap_or_else(|| {
        rendered.push(Value::Null);
        let entry = Entry {
            manager: writer.manager.clone(),
            operation: "Update".into(),
            api_version: String::new(),
            time: String::new(),
            subresource: writer.subresource.map(String::from),
            fields: BTreeSet::new(),
        };
        (rendered.len() - 1, entry)
    });
    entry.fields.extend(changed);
    entry.api_version = writer.api_version.clone();
    entry.time = writer.now.clone();
    if entry.fields.is_empty() {
        rendered.remove(at);
    } else {
        rendered[at] = render(entry);
    }
    put_entries(new, rendered);
}

/// Whether the fieldsV1 `trie` owns the leaf `path`.
fn trie_holds(trie: &Value, path: &FieldPath) -> bool {
    let mut node = trie;
    for step in path {
        match node.get(step) {
            Some(child) => node = child,
            None => return false,
        }
    }
    node.as_object().is_none_or(Map::is_empty)
}

/// The leaves of `new` whose value differs from `old`'s (`changed`) and the leaves of `old` that
/// `new` lacks (`removed`), as comparing [`leaves`] of both would give; equal subtrees are
/// skipped without flattening them, so a write that changes one field costs one comparison of
/// the rest.
fn changed_leaves(
    old: &Value,
    new: &Value,
    builtin: bool,
    changed: &mut BTreeSet<FieldPath>,
    removed: &mut BTreeSet<FieldPath>,
) {
    let empty = Map::new();
    let old_fields = old.as_object().unwrap_or(&empty);
    let new_fields = new.as_object().unwrap_or(&empty);
    let mut path = Vec::new();
    let mut diff_field = |prefix: &[String], field: &str, a: Option<&Value>, b: Option<&Value>| {
        path.clear();
        path.extend(prefix.iter().cloned());
        path.push(format!("f:{field}"));
        diff_subtree(a, b, field, builtin, &mut path, changed, removed);
    };
    let top_level = old_fields
        .keys()
        .chain(new_fields.keys().filter(|k| !old_fields.contains_key(*k)));
    for name in top_level {
        match name.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => {
                for owned in OWNED_METADATA {
                    diff_field(
                        &["f:metadata".to_string()],
                        owned,
                        old_fields.get("metadata").and_then(|m| m.get(owned)),
                        new_fields.get("metadata").and_then(|m| m.get(owned)),
                    );
                }
            }
            _ => diff_field(&[], name, old_fields.get(name), new_fields.get(name)),
        }
    }
}

/// [`changed_leaves`] below `path`, the leaf path of `field` whose values are `old` and `new`.
fn diff_subtree(
    old: Option<&Value>,
    new: Option<&Value>,
    field: &str,
    builtin: bool,
    path: &mut FieldPath,
    changed: &mut BTreeSet<FieldPath>,
    removed: &mut BTreeSet<FieldPath>,
) {
    if old == new {
        return;
    }
    match (old, new) {
        (Some(Value::Object(a)), Some(Value::Object(b))) if !a.is_empty() && !b.is_empty() => {
            for name in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                path.push(format!("f:{name}"));
                diff_subtree(
                    a.get(name),
                    b.get(name),
                    name,
                    builtin,
                    path,
                    changed,
                    removed,
                );
                path.pop();
            }
        }
        _ => {
            // Lists (keyed or atomic) and leaves: compare their flattened leaves.
            let mut flat = |value: Option<&Value>| {
                let mut out = BTreeMap::new();
                if let Some(value) = value {
                    collect(value, field, builtin, path, &mut out);
                }
                out
            };
            let before = flat(old);
            let after = flat(new);
            changed.extend(
                after
                    .iter()
                    .filter(|(p, v)| before.get(*p) != Some(*v))
                    .map(|(p, _)| p.clone()),
            );
            removed.extend(before.into_keys().filter(|p| !after.contains_key(p)));
        }
    }
}

/// Records a server-side apply by `writer` of `applied` onto `live`, whose merge is `merged`:
/// fails with a 409 listing the conflicts unless `force`; otherwise transfers what it must, removes
/// the fields the manager applied before but no longer does (unless someone else owns them), and
/// makes the applied paths the manager's `Apply` entry.
pub fn record_apply(
    live: &Value,
    applied: &Value,
    merged: &mut Value,
    builtin: bool,
    force: bool,
    writer: &Writer,
) -> Result<(), ApiError> {
    let live_leaves = leaves(live, builtin);
    let applied_leaves = leaves(applied, builtin);
    let mut entries = entries(live);
    let is_mine = |e: &Entry| e.same_owner(&writer.manager, "Apply", writer.subresource);
    let applied_paths: BTreeSet<FieldPath> = applied_leaves.keys().cloned().collect();
    // Applying again what the manager already applied changes nothing, not even the time of its
    // entry, so the object is not written and keeps its resourceVersion (as the API server does).
    let changes_nothing = applied_leaves
        .iter()
        .all(|(path, value)| live_leaves.get(path) == Some(value));
    if changes_nothing
        && entries
            .iter()
            .any(|e| is_mine(e) && e.fields == applied_paths)
    {
        return Ok(());
    }
    let mut conflicts: Vec<(usize, FieldPath)> = Vec::new();
    for (path, value) in &applied_leaves {
        if path.last().is_some_and(|s| s == ".") || live_leaves.get(path) == Some(value) {
            continue;
        }
        for (i, entry) in entries.iter().enumerate() {
            if !is_mine(entry) && entry.fields.contains(path) {
                conflicts.push((i, path.clone()));
            }
        }
    }
    // Moving from client-side to server-side apply: fields the last client-side apply set are
    // handed over without a conflict, as the real server's last-applied handling does.
    if let Some(last) = live["metadata"]["annotations"][LAST_APPLIED]
        .as_str()
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
    {
        let last_applied = leaves(&last, builtin);
        let mut handed_over = Vec::new();
        conflicts.retain(|(i, path)| {
            let allowed = entries[*i].operation == "Update" && last_applied.contains_key(path);
            if allowed {
                handed_over.push((*i, path.clone()));
            }
            !allowed
        });
        for (i, path) in handed_over {
            entries[i].fields.remove(&path);
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflict_error(&entries, &conflicts));
    }
    for (i, path) in &conflicts {
        entries[*i].fields.remove(path);
    }
    let previous = entries
        .iter()
        .find(|e| is_mine(e))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    for dropped in previous.difference(&applied_paths) {
        let shared = entries
            .iter()
            .any(|e| !is_mine(e) && e.fields.contains(dropped));
        if !shared {
            remove_path(merged, dropped);
        }
    }
    entries.retain(|e| !is_mine(e));
    entries.push(Entry {
        manager: writer.manager.clone(),
        operation: "Apply".into(),
        api_version: writer.api_version.clone(),
        time: writer.now.clone(),
        subresource: writer.subresource.map(String::from),
        fields: applied_paths,
    });
    set_entries(merged, entries);
    Ok(())
}

fn conflict_error(entries: &[Entry], conflicts: &[(usize, FieldPath)]) -> ApiError {
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(i, path)| {
            json!({"reason": "FieldManagerConflict",
                   "message": format!("conflict with {}", entries[*i].describe()),
                   "field": display(path)})
        })
        .collect();
    let message = if let [(i, path)] = conflicts {
        format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            entries[*i].describe(),
            display(path)
        )
    } else {
        let mut by_owner: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (i, path) in conflicts {
            by_owner
                .entry(entries[*i].describe())
                .or_default()
                .push(display(path));
        }
        let mut message = format!("Apply failed with {} conflicts:", conflicts.len());
        for (owner, paths) in by_owner {
            message.push_str(&format!(" conflicts with {owner}:"));
            for path in paths {
                message.push_str(&format!("\n- {path}"));
            }
        }
        message
    };
    let mut error = ApiError::conflict_with_causes(message);
    error.details = Some(json!({ "causes": causes }));
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(manager: &str) -> Writer {
        Writer {
            manager: manager.into(),
            api_version: "coordination.k8s.io/v1".into(),
            subresource: None,
            now: "2026-11-22T00:00:00Z".into(),
        }
    }

    fn apply(live: &Value, applied: Value, manager: &str, force: bool) -> Result<Value, ApiError> {
        apply_as(live, applied, &writer(manager), force)
    }

    fn apply_as(
        live: &Value,
        applied: Value,
        writer: &Writer,
        force: bool,
    ) -> Result<Value, ApiError> {
        let mut merged = live.clone();
        crate::patch::merge_patch(&mut merged, &applied);
        record_apply(live, &applied, &mut merged, true, force, writer)?;
        Ok(merged)
    }

    #[test]
    fn a_second_manager_applying_a_different_value_conflicts_unless_forced() {
        let live = json!({"metadata": {"name": "lock"}, "spec": {}});
        let a = apply(
            &live,
            json!({"spec": {"holderIdentity": "a"}}),
            "mgr-a",
            false,
        )
        .unwrap();
        let error =
            apply(&a, json!({"spec": {"holderIdentity": "b"}}), "mgr-b", false).unwrap_err();
        assert_eq!(error.code, 409);
        assert_eq!(
            error.message,
            "Apply failed with 1 conflict: conflict with \"mgr-a\": .spec.holderIdentity"
        );
        // The same value is shared ownership, not a conflict.
        let shared = apply(&a, json!({"spec": {"holderIdentity": "a"}}), "mgr-b", false).unwrap();
        assert_eq!(entries(&shared).len(), 2);
        let forced = apply(&a, json!({"spec": {"holderIdentity": "b"}}), "mgr-b", true).unwrap();
        assert_eq!(forced["spec"]["holderIdentity"], "b");
        let owners: Vec<String> = entries(&forced).into_iter().map(|e| e.manager).collect();
        assert_eq!(owners, ["mgr-b"], "ownership moved");
    }

    #[test]
    fn applying_the_same_fields_again_leaves_the_entry_and_its_time() {
        let live = json!({"metadata": {"name": "lock"}, "spec": {}});
        let first = apply(
            &live,
            json!({"spec": {"holderIdentity": "a"}}),
            "mgr-a",
            false,
        )
        .unwrap();
        let mut later = writer("mgr-a");
        later.now = "2026-11-22T00:00:09Z".into();
        let reapply = |live: &Value, applied: Value| apply_as(live, applied, &later, false);
        let again = reapply(&first, json!({"spec": {"holderIdentity": "a"}})).unwrap();
        assert_eq!(again, first, "nothing changed, so nothing is written");
        let changed = reapply(&first, json!({"spec": {"holderIdentity": "b"}})).unwrap();
        assert_eq!(entries(&changed)[0].time, "2026-11-22T00:00:09Z");
        let fewer = reapply(&first, json!({"spec": {}})).unwrap();
        assert_eq!(
            fewer["spec"].get("holderIdentity"),
            None,
            "a field no longer applied goes"
        );
    }

    #[test]
    fn fields_a_manager_stops_applying_are_removed_and_keyed_items_have_their_own_paths() {
        let live = json!({"metadata": {"name": "d"}});
        let applied = json!({"metadata": {"labels": {"a": "1", "b": "2"}},
            "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "x:1"}]}}}});
        let first = apply(&live, applied, "kubectl", false).unwrap();
        let owned = &entries(&first)[0].fields;
        assert!(owned.contains(&vec![
            "f:spec".to_string(),
            "f:template".into(),
            "f:spec".into(),
            "f:containers".into(),
            r#"k:{"name":"app"}"#.into(),
            "f:image".into()
        ]));
        let second = apply(
            &first,
            json!({"metadata": {"labels": {"a": "1"}}}),
            "kubectl",
            false,
        )
        .unwrap();
        assert_eq!(second["metadata"]["labels"], json!({"a": "1"}));
        assert_eq!(second["spec"], json!(null), "emptied parents go too");
    }

    /// What `changed_leaves` must agree with: both objects flattened and compared.
    fn flattened_difference(
        old: &Value,
        new: &Value,
    ) -> (BTreeSet<FieldPath>, BTreeSet<FieldPath>) {
        let before = leaves(old, true);
        let after = leaves(new, true);
        let changed = after
            .iter()
            .filter(|(p, v)| before.get(*p) != Some(*v))
            .map(|(p, _)| p.clone())
            .collect();
        let removed = before
            .into_keys()
            .filter(|p| !after.contains_key(p))
            .collect();
        (changed, removed)
    }

    #[test]
    fn the_changed_leaves_are_those_of_comparing_both_objects_flattened() {
        let old = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"app": "web", "gone": "x"}, "resourceVersion": "3",
                "annotations": {"a": "1"}},
            "spec": {"containers": [{"name": "app", "image": "web:1", "ports": [{"containerPort": 80}]},
                {"name": "side", "image": "side:1"}], "nodeName": "n1", "tolerations": [], "extra": {}},
            "status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]}
        });
        let mut variants = Vec::new();
        let mut v = old.clone();
        v["status"]["phase"] = json!("Running");
        variants.push(v);
        let mut v = old.clone();
        v["spec"]["containers"][1]["image"] = json!("side:2");
        v["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("gone");
        variants.push(v);
        let mut v = old.clone();
        v["spec"]["containers"] = json!([{"name": "app", "image": "web:1"}, {"name": "new"}]);
        v["spec"]["extra"] = json!({"now": "set"});
        v["spec"]["tolerations"] = json!([{"key": "k"}]);
        variants.push(v);
        let mut v = old.clone();
        v.as_object_mut().unwrap().remove("status");
        v["metadata"].as_object_mut().unwrap().remove("annotations");
        v["metadata"]["resourceVersion"] = json!("4");
        v["data"] = json!({"k": "v"});
        variants.push(v);
        variants.push(old.clone());
        for (i, new) in variants.iter().enumerate() {
            let mut changed = BTreeSet::new();
            let mut removed = BTreeSet::new();
            changed_leaves(&old, new, true, &mut changed, &mut removed);
            let differs = !changed.is_empty() || !removed.is_empty();
            assert_eq!(differs, i + 1 < variants.len(), "{new}");
            assert_eq!((changed, removed), flattened_difference(&old, new), "{new}");
        }
    }

    /// A write recorded the plain way: every entry parsed, the moved paths taken out of all of
    /// them, the writer's entry given the changed ones, every entry rendered again.
    fn recorded_by_parsing_everything(old: &Value, new: &Value, writer: &Writer) -> Value {
        let (changed, removed) = flattened_difference(old, new);
        let mut basis = entries(new);
        for entry in &mut basis {
            entry
                .fields
                .retain(|p| !changed.contains(p) && !removed.contains(p));
        }
        match basis
            .iter_mut()
            .find(|e| e.same_owner(&writer.manager, "Update", writer.subresource))
        {
            Some(entry) => {
                entry.fields.extend(changed);
                entry.api_version = writer.api_version.clone();
                entry.time = writer.now.clone();
            }
            None => basis.push(Entry {
                manager: writer.manager.clone(),
                operation: "Update".into(),
                api_version: writer.api_version.clone(),
                time: writer.now.clone(),
                subresource: writer.subresource.map(String::from),
                fields: changed,
            }),
        }
        let mut out = new.clone();
        set_entries(&mut out, basis);
        out
    }

    #[test]
    fn an_update_records_what_parsing_every_entry_would() {
        let live = json!({"metadata": {"name": "lock", "labels": {"a": "1"}}, "spec": {}});
        let base = apply(
            &live,
            json!({"metadata": {"labels": {"a": "1"}}, "spec": {"holderIdentity": "a", "size": 1}}),
            "mgr-a",
            false,
        )
        .unwrap();
        let mut owned = base.clone();
        owned["spec"]["renewTime"] = json!("t1");
        record_update(Some(&base), &mut owned, true, &writer("renewer"));
        let status_writer = Writer {
            subresource: Some("status"),
            ..writer("renewer")
        };
        type Edit = Box<dyn Fn(&mut Value)>;
        let edits: Vec<(Edit, Writer)> = vec![
            (
                Box::new(|o| o["spec"]["renewTime"] = json!("t2")),
                writer("renewer"),
            ),
            (
                Box::new(|o| o["spec"]["holderIdentity"] = json!("b")),
                writer("renewer"),
            ),
            (
                Box::new(|o| {
                    o["spec"].as_object_mut().unwrap().remove("size");
                }),
                writer("renewer"),
            ),
            (
                Box::new(|o| o["spec"]["renewTime"] = json!("t3")),
                writer("third"),
            ),
            (
                Box::new(|o| o["status"] = json!({"ok": true})),
                status_writer,
            ),
            (
                Box::new(|o| {
                    o["spec"].as_object_mut().unwrap().remove("renewTime");
                }),
                writer("mgr-a"),
            ),
        ];
        for (i, (edit, who)) in edits.iter().enumerate() {
            let mut written = owned.clone();
            edit(&mut written);
            let expected = recorded_by_parsing_everything(&owned, &written, who);
            record_update(Some(&owned), &mut written, true, who);
            assert_eq!(
                written["metadata"]["managedFields"], expected["metadata"]["managedFields"],
                "edit {i}"
            );
        }
    }

    #[test]
    fn an_update_leaves_the_entries_it_does_not_touch_as_recorded() {
        let live = json!({"metadata": {"name": "lock"}, "spec": {}});
        let applied = apply(
            &live,
            json!({"spec": {"holderIdentity": "a"}}),
            "mgr-a",
            false,
        )
        .unwrap();
        let mut renewed = applied.clone();
        renewed["spec"]["renewTime"] = json!("t1");
        record_update(Some(&applied), &mut renewed, true, &writer("renewer"));
        let mut again = renewed.clone();
        again["spec"]["renewTime"] = json!("t2");
        let later = Writer {
            now: "2026-11-23T00:00:00Z".into(),
            ..writer("renewer")
        };
        record_update(Some(&renewed), &mut again, true, &later);
        let fields = |o: &Value| o["metadata"]["managedFields"].as_array().unwrap().clone();
        assert_eq!(
            fields(&again)[0],
            fields(&applied)[0],
            "mgr-a's entry is untouched"
        );
        assert_eq!(fields(&again)[1]["manager"], "renewer");
        assert_eq!(fields(&again)[1]["time"], "2026-11-23T00:00:00Z");
        assert_eq!(
            fields(&again)[1]["fieldsV1"],
            json!({"f:spec": {"f:renewTime": {}}})
        );
    }

    #[test]
    fn an_update_takes_the_fields_it_changes() {
        let live = json!({"metadata": {"name": "lock"}, "spec": {}});
        let applied = apply(
            &live,
            json!({"spec": {"holderIdentity": "a", "renewTime": "t1"}}),
            "mgr-a",
            false,
        )
        .unwrap();
        let mut renewed = applied.clone();
        renewed["spec"]["renewTime"] = json!("t2");
        record_update(Some(&applied), &mut renewed, true, &writer("renewer"));
        let all = entries(&renewed);
        let renewer = all.iter().find(|e| e.manager == "renewer").unwrap();
        assert_eq!(renewer.operation, "Update");
        assert!(
            renewer
                .fields
                .contains(&vec!["f:spec".to_string(), "f:renewTime".into()])
        );
        let applier = all.iter().find(|e| e.manager == "mgr-a").unwrap();
        assert!(
            !applier
                .fields
                .contains(&vec!["f:spec".to_string(), "f:renewTime".into()])
        );
        assert_eq!(
            display(&vec![
                "f:spec".into(),
                r#"k:{"name":"c"}"#.into(),
                "f:image".into()
            ]),
            ".spec[name=\"c\"].image"
        );
    }
}
