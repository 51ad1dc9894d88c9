//! What follows a write: CRDs established, finalizers finished, garbage collected, namespaces
//! emptied, as the API server's controllers do.

use super::state::*;
use super::types::*;
use crate::registry::{ResourceInfo, resources_of_crd};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

impl Store {
    /// CRD registration: validate names, serve the versions, write the Established status.
    pub(crate) fn establish_crd(&self, inner: &mut Inner, info: &ResourceInfo, crd: &Value) {
        if meta(crd)["deletionTimestamp"].is_string() {
            return;
        }
        let name = name_of(crd).to_string();
        let served = resources_of_crd(crd);
        let expected = format!(
            "{}.{}",
            crd["spec"]["names"]["plural"].as_str().unwrap_or(""),
            crd["spec"]["group"].as_str().unwrap_or("")
        );
        let accepted = !served.is_empty() && expected == name;
        inner
            .registry
            .set_crd(&name, if accepted { served } else { Vec::new() });
        let names = &crd["spec"]["names"];
        let kind = names["kind"].as_str().unwrap_or_default();
        let mut accepted_names = names.clone();
        if accepted_names["singular"].is_null() {
            accepted_names["singular"] = json!(kind.to_lowercase());
        }
        if accepted_names["listKind"].is_null() {
            accepted_names["listKind"] = json!(format!("{kind}List"));
        }
        let time = crd["status"]["conditions"]
            .as_array()
            .and_then(|c| c.first())
            .and_then(|c| c["lastTransitionTime"].as_str())
            .map(String::from)
            .unwrap_or_else(now_rfc3339);
        let storage: Vec<Value> = crd["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| v["storage"].as_bool() == Some(true))
            .map(|v| v["name"].clone())
            .collect();
        let status = if accepted {
            json!({
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": time},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": time}
                ],
                "acceptedNames": accepted_names,
                "storedVersions": storage
            })
        } else {
            json!({
                "conditions": [
                    {"type": "NamesAccepted", "status": "False", "reason": "InvalidName", "message": format!("metadata.name must be {expected:?} and the CRD needs a group, kind, plural and one served version"), "lastTransitionTime": time},
                    {"type": "Established", "status": "False", "reason": "NotAccepted", "message": "not all names are accepted", "lastTransitionTime": time}
                ],
                "acceptedNames": {"plural": "", "kind": ""},
                "storedVersions": storage
            })
        };
        if crd["status"] != status {
            let mut updated = crd.clone();
            updated["status"] = status;
            self.commit(
                inner,
                info,
                ChangeType::Modified,
                updated,
                Some(Arc::new(crd.clone())),
            );
        }
    }

    /// The built-in controllers that react to deletions: namespace and CRD cleanup, garbage
    /// collection of dependents, foreground and orphan propagation. Runs until nothing changes.
    /// Garbage collection and finalization, after a change that may need them: dependents of
    /// deleted owners go, owners waiting on their dependents finish. Only the objects the changes
    /// since the last run concern are read, unless a namespace or CRD is being emptied.
    pub(crate) fn run_controllers(&self, inner: &mut Inner) {
        loop {
            let acted = if inner.gc.clearing_a_scope() {
                inner.gc.pending.clear();
                self.collect_everything(inner)
            } else {
                self.collect_pending(inner)
            };
            if !acted {
                break;
            }
        }
    }

    /// One round of [`Store::run_controllers`] over the objects [`GcIndex`] marked as pending;
    /// whether it changed anything.
    pub(crate) fn collect_pending(&self, inner: &mut Inner) -> bool {
        let pending: Vec<Key> = inner.gc.pending.drain().collect();
        let mut infos: HashMap<String, Option<ResourceInfo>> = HashMap::new();
        let mut acted = false;
        for key in pending {
            let Some(object) = inner.objects.get(&key).map(|o| (**o).clone()) else {
                continue;
            };
            let info = infos
                .entry(key.0.clone())
                .or_insert_with(|| {
                    inner
                        .registry
                        .all()
                        .find(|i| i.storage_key() == key.0)
                        .cloned()
                })
                .clone();
            let Some(info) = info else {
                continue;
            };
            let owners = owner_uids(&object);
            let owner_objects: Vec<&Value> = owners
                .iter()
                .filter_map(|u| inner.gc.keys_by_uid.get(u))
                .filter_map(|k| inner.objects.get(k).map(|o| &**o))
                .collect();
            let marked = meta(&object)["deletionTimestamp"].is_string();
            if !marked {
                let orphaned = !owners.is_empty() && owner_objects.is_empty();
                let owner_foreground = owner_objects
                    .iter()
                    .any(|o| string_set(&meta(o)["finalizers"]).contains("foregroundDeletion"));
                if orphaned || owner_foreground {
                    self.delete_object_quietly(inner, &info, object);
                    acted = true;
                    continue;
                }
            }
            let orphaning: HashSet<String> = owner_objects
                .iter()
                .filter(|o| {
                    meta(o)["deletionTimestamp"].is_string()
                        && string_set(&meta(o)["finalizers"]).contains("orphan")
                })
                .filter_map(|o| uid_of(o).map(String::from))
                .collect();
            if !orphaning.is_empty() {
                let mut updated = object.clone();
                if let Some(refs) = meta_mut(&mut updated)
                    .get_mut("ownerReferences")
                    .and_then(Value::as_array_mut)
                {
                    refs.retain(|r| !r["uid"].as_str().is_some_and(|u| orphaning.contains(u)));
                }
                self.commit(
                    inner,
                    &info,
                    ChangeType::Modified,
                    updated,
                    Some(Arc::new(object)),
                );
                acted = true;
                continue;
            }
            if marked {
                let has_dependents = uid_of(&object)
                    .and_then(|u| inner.gc.dependents.get(u))
                    .is_some_and(|set| !set.is_empty());
                let finalizers = string_set(&meta(&object)["finalizers"]);
                for finalizer in ["foregroundDeletion", "orphan"] {
                    if finalizers.contains(finalizer) && !has_dependents {
                        let current = inner.objects.get(&key).map(|o| (**o).clone());
                        if let Some(current) = current {
                            self.finish_finalizer(inner, &info, current, finalizer);
                            acted = true;
                        }
                    }
                }
            }
        }
        acted
    }

    /// Removes `finalizer` from `object`, deleting it when no finalizer is left.
    pub(crate) fn finish_finalizer(
        &self,
        inner: &mut Inner,
        info: &ResourceInfo,
        object: Value,
        finalizer: &str,
    ) {
        let mut updated = object.clone();
        if let Some(list) = meta_mut(&mut updated)
            .get_mut("finalizers")
            .and_then(Value::as_array_mut)
        {
            list.retain(|f| f != finalizer);
        }
        if info.kind == "Namespace" {
            updated["spec"]["finalizers"] = json!([]);
        }
        if has_finalizers(&updated) {
            self.commit(
                inner,
                info,
                ChangeType::Modified,
                updated,
                Some(Arc::new(object)),
            );
        } else {
            if info.kind == "CustomResourceDefinition" {
                inner.registry.set_crd(name_of(&object), Vec::new());
            }
            self.commit(
                inner,
                info,
                ChangeType::Deleted,
                updated,
                Some(Arc::new(object)),
            );
        }
    }

    /// One round of [`Store::run_controllers`] that reads every object, while a namespace or a
    /// CRD is being emptied; whether it changed anything.
    pub(crate) fn collect_everything(&self, inner: &mut Inner) -> bool {
        {
            let mut acted = false;
            let uids: HashSet<String> = inner
                .objects
                .values()
                .filter_map(|o| meta(o)["uid"].as_str().map(String::from))
                .collect();
            let mut to_delete: Vec<(ResourceInfo, Value)> = Vec::new();
            let mut to_finish: Vec<(ResourceInfo, Value, &'static str)> = Vec::new();
            let infos: BTreeMap<String, ResourceInfo> = inner
                .registry
                .all()
                .map(|i| (i.storage_key(), i.clone()))
                .collect();
            let terminating_namespaces: HashSet<String> = inner
                .objects
                .iter()
                .filter(|((r, _, _), o)| {
                    r == "namespaces" && meta(o)["deletionTimestamp"].is_string()
                })
                .map(|((_, _, n), _)| n.clone())
                .collect();
            let dying_crds: Vec<Value> = inner
                .objects
                .iter()
                .filter(|((r, _, _), o)| {
                    r == "customresourcedefinitions.apiextensions.k8s.io"
                        && meta(o)["deletionTimestamp"].is_string()
                })
                .map(|(_, o)| (**o).clone())
                .collect();
            let dying_crd_keys: HashSet<String> =
                dying_crds.iter().map(|c| name_of(c).to_string()).collect();
            let foreground_owners: HashSet<String> = inner
                .objects
                .values()
                .filter(|o| string_set(&meta(o)["finalizers"]).contains("foregroundDeletion"))
                .filter_map(|o| meta(o)["uid"].as_str().map(String::from))
                .collect();
            let orphaning_owners: HashSet<String> = inner
                .objects
                .values()
                .filter(|o| {
                    string_set(&meta(o)["finalizers"]).contains("orphan")
                        && meta(o)["deletionTimestamp"].is_string()
                })
                .filter_map(|o| meta(o)["uid"].as_str().map(String::from))
                .collect();
            let mut orphan_updates: Vec<(ResourceInfo, Value)> = Vec::new();
            for ((resource, ns, _), object) in &inner.objects {
                let object: &Value = object;
                let Some(info) = infos.get(resource) else {
                    continue;
                };
                let marked = meta(object)["deletionTimestamp"].is_string();
                let owners: Vec<&str> = meta(object)["ownerReferences"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r["uid"].as_str())
                    .collect();
                if !marked {
                    let in_dying_namespace = !ns.is_empty() && terminating_namespaces.contains(ns);
                    let of_dying_crd = dying_crd_keys.contains(resource);
                    let orphaned = !owners.is_empty() && owners.iter().all(|u| !uids.contains(*u));
                    let owner_foreground = owners.iter().any(|u| foreground_owners.contains(*u));
                    if in_dying_namespace || of_dying_crd || orphaned || owner_foreground {
                        to_delete.push((info.clone(), object.clone()));
                        continue;
                    }
                }
                if owners.iter().any(|u| orphaning_owners.contains(*u)) {
                    orphan_updates.push((info.clone(), object.clone()));
                }
            }
            for (info, object) in orphan_updates {
                let mut updated = object.clone();
                if let Some(refs) = meta_mut(&mut updated)
                    .get_mut("ownerReferences")
                    .and_then(Value::as_array_mut)
                {
                    refs.retain(|r| {
                        !r["uid"]
                            .as_str()
                            .is_some_and(|u| orphaning_owners.contains(u))
                    });
                }
                self.commit(
                    inner,
                    &info,
                    ChangeType::Modified,
                    updated,
                    Some(Arc::new(object)),
                );
                acted = true;
            }
            for (info, object) in to_delete {
                self.delete_object_quietly(inner, &info, object);
                acted = true;
            }
            // Owners waiting on their dependents, namespaces and CRDs waiting to be emptied.
            let mut status_updates = Vec::new();
            for ((resource, _, _), object) in &inner.objects {
                let object: &Value = object;
                if !meta(object)["deletionTimestamp"].is_string() {
                    continue;
                }
                let Some(info) = infos.get(resource) else {
                    continue;
                };
                let uid = meta(object)["uid"].as_str().unwrap_or_default();
                let finalizers = string_set(&meta(object)["finalizers"]);
                let has_dependents = inner.objects.values().any(|o| {
                    meta(o)["ownerReferences"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|r| r["uid"] == uid)
                });
                if finalizers.contains("foregroundDeletion") && !has_dependents {
                    to_finish.push((info.clone(), object.clone(), "foregroundDeletion"));
                }
                if finalizers.contains("orphan") && !has_dependents {
                    to_finish.push((info.clone(), object.clone(), "orphan"));
                }
                if resource == "namespaces" {
                    let name = name_of(object);
                    let empty = !inner.objects.keys().any(|(_, ns, _)| ns == name);
                    if empty {
                        to_finish.push((info.clone(), object.clone(), "kubernetes"));
                    } else {
                        let status = terminating_namespace_status(inner, object);
                        if object["status"] != status {
                            let mut updated = object.clone();
                            updated["status"] = status;
                            status_updates.push((info.clone(), object.clone(), updated));
                        }
                    }
                }
                if resource == "customresourcedefinitions.apiextensions.k8s.io" {
                    let name = name_of(object);
                    let empty = !inner.objects.keys().any(|(r, _, _)| r == name);
                    if empty {
                        to_finish.push((
                            info.clone(),
                            object.clone(),
                            "customresourcecleanup.apiextensions.k8s.io",
                        ));
                    }
                }
            }
            for (info, object, updated) in status_updates {
                self.commit(
                    inner,
                    &info,
                    ChangeType::Modified,
                    updated,
                    Some(Arc::new(object)),
                );
            }
            for (info, object, finalizer) in to_finish {
                self.finish_finalizer(inner, &info, object, finalizer);
                acted = true;
            }
            acted
        }
    }

    pub(crate) fn delete_object_quietly(
        &self,
        inner: &mut Inner,
        info: &ResourceInfo,
        object: Value,
    ) {
        if has_finalizers(&object) || (info.group.is_empty() && info.kind == "Namespace") {
            let mut updated = object.clone();
            meta_mut(&mut updated).insert("deletionTimestamp".into(), json!(now_rfc3339()));
            meta_mut(&mut updated).insert("deletionGracePeriodSeconds".into(), json!(0));
            self.commit(
                inner,
                info,
                ChangeType::Modified,
                updated,
                Some(Arc::new(object)),
            );
        } else {
            self.commit(
                inner,
                info,
                ChangeType::Deleted,
                object.clone(),
                Some(Arc::new(object)),
            );
        }
    }
}

/// A Terminating namespace's status as the namespace controller reports it: what is left in it
/// and which finalizers hold it (`kubectl describe ns`).
pub(crate) fn terminating_namespace_status(inner: &Inner, namespace: &Value) -> Value {
    let name = name_of(namespace);
    let mut remaining: BTreeMap<&str, usize> = BTreeMap::new();
    let mut finalizers: BTreeMap<String, usize> = BTreeMap::new();
    for ((resource, ns, _), object) in &inner.objects {
        if ns != name {
            continue;
        }
        *remaining.entry(resource.as_str()).or_default() += 1;
        for finalizer in string_set(&meta(object)["finalizers"]) {
            *finalizers.entry(finalizer).or_default() += 1;
        }
    }
    let since = namespace["status"]["conditions"]
        .as_array()
        .and_then(|c| c.first())
        .and_then(|c| c["lastTransitionTime"].as_str())
        .map(String::from)
        .unwrap_or_else(now_rfc3339);
    let condition = |kind: &str, status: bool, reason: &str, message: String| {
        json!({"type": kind, "status": if status { "True" } else { "False" },
            "reason": reason, "message": message, "lastTransitionTime": since})
    };
    let listed = |counts: Vec<String>| counts.join(", ");
    let content = listed(
        remaining
            .iter()
            .map(|(resource, n)| {
                let resource = if resource.contains('.') {
                    resource.to_string()
                } else {
                    format!("{resource}.")
                };
                format!("{resource} has {n} resource instances")
            })
            .collect(),
    );
    let held = listed(
        finalizers
            .iter()
            .map(|(f, n)| format!("{f} in {n} resource instances"))
            .collect(),
    );
    json!({"phase": "Terminating", "conditions": [
        condition("NamespaceDeletionDiscoveryFailure", false, "ResourcesDiscovered", "All resources successfully discovered".into()),
        condition("NamespaceDeletionGroupVersionParsingFailure", false, "ParsedGroupVersions", "All legacy kube types successfully parsed".into()),
        condition("NamespaceDeletionContentFailure", false, "ContentDeleted", "All content successfully deleted, may be waiting on finalization".into()),
        condition("NamespaceContentRemaining", true, "SomeResourcesRemain", format!("Some resources are remaining: {content}")),
        condition("NamespaceFinalizersRemaining", !finalizers.is_empty(),
            if finalizers.is_empty() { "ContentHasNoFinalizers" } else { "SomeFinalizersRemain" },
            if finalizers.is_empty() { "All content-preserving finalizers finished".into() } else { format!("Some content in the namespace has finalizers remaining: {held}") }),
    ]})
}
