//! Creates, updates, patches and deletes, with the API server's write rules: names, generation,
//! the status subresource, finalizers, quotas and managedFields.

use super::state::*;
use super::types::*;
use crate::managed;
use crate::patch;
use crate::registry::{GenerationRule, ResourceInfo};
use crate::status::ApiError;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Arc;

impl Store {
    /// Creates an object from a request body (`namespace` from the URL).
    pub fn create(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        body: Value,
        options: &WriteOptions,
    ) -> Result<Value, ApiError> {
        self.create_shared(info, namespace, body, options)
            .map(|created| Self::presented(info, &created))
    }

    /// Like [`Store::create`], returning the stored object shared rather than a presented copy
    /// (for the sandbox's own controllers, which write built-in kinds as stored).
    pub fn create_shared(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        body: Value,
        options: &WriteOptions,
    ) -> Result<Arc<Value>, ApiError> {
        self.create_tracked(info, namespace, body, options, Tracking::Update)
    }

    pub(crate) fn create_tracked(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        body: Value,
        options: &WriteOptions,
        tracking: Tracking,
    ) -> Result<Arc<Value>, ApiError> {
        let dry_run = options.dry_run;
        let mut inner = self.lock();
        let applied = (tracking == Tracking::Applied).then(|| body.clone());
        let mut object = Self::prepare_create(&inner, info, namespace, body)?;
        let writer = options.writer(info, Part::Main);
        match applied {
            None => managed::record_update(None, &mut object, info.builtin, &writer),
            Some(applied) => {
                managed::set_entries(&mut object, Vec::new());
                let empty = json!({"metadata": {}});
                managed::record_apply(&empty, &applied, &mut object, info.builtin, true, &writer)?;
            }
        }
        if info.group.is_empty() && info.plural == "pods" {
            pod_quota_admission(&inner, info, &object)?;
        }
        let key = Self::key(info, namespace_of(&object), name_of(&object));
        if inner.objects.contains_key(&key) {
            return Err(ApiError::already_exists(
                &info.qualified_plural(),
                &info.group,
                &info.plural,
                name_of(&object),
            ));
        }
        if dry_run {
            return Ok(Arc::new(object));
        }
        let created = self.commit(&mut inner, info, ChangeType::Added, object, None);
        self.after_write(&mut inner, info, &created);
        Ok(created)
    }

    pub(crate) fn prepare_create(
        inner: &Inner,
        info: &ResourceInfo,
        namespace: Option<&str>,
        body: Value,
    ) -> Result<Value, ApiError> {
        let Value::Object(_) = body else {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        };
        let mut object = crate::convert::to_storage(info, body);
        if let Some(kind) = object["kind"].as_str()
            && kind != info.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind {kind:?} of the body does not match the resource {:?}",
                info.kind
            )));
        }
        // Stored with both, as the API server keeps them, so a list can share the stored object
        // instead of copying it to add them.
        if object["apiVersion"].is_null() {
            object["apiVersion"] = json!(info.api_version());
        }
        if object["kind"].is_null() {
            object["kind"] = json!(info.kind);
        }
        let meta = meta_mut(&mut object);
        if info.namespaced {
            let ns = namespace.unwrap_or("default");
            if let Some(body_ns) = meta.get("namespace").and_then(Value::as_str)
                && !body_ns.is_empty()
                && body_ns != ns
            {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            meta.insert("namespace".into(), json!(ns));
        } else {
            meta.remove("namespace");
        }
        let name = match meta
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            Some(name) => name.to_string(),
            None => match meta.get("generateName").and_then(Value::as_str) {
                Some(prefix) => format!("{prefix}{}", random_suffix()),
                None => {
                    return Err(ApiError::invalid(
                        &info.kind,
                        "",
                        "metadata.name",
                        "FieldValueRequired",
                        "Required value: name or generateName is required",
                    ));
                }
            },
        };
        if info.group == "rbac.authorization.k8s.io" {
            // RBAC names are path segments (`system:discovery`), not DNS subdomains.
            if name == "." || name == ".." || name.contains(['/', '%']) {
                return Err(ApiError::invalid(
                    &info.kind,
                    &name,
                    "metadata.name",
                    "FieldValueInvalid",
                    &format!(
                        "Invalid value: may not be '.' or '..' and may not contain '/' or '%': {name:?}"
                    ),
                ));
            }
        } else if !valid_name(&name) {
            return Err(ApiError::invalid(
                &info.kind,
                &name,
                "metadata.name",
                "FieldValueInvalid",
                "Invalid value: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            ));
        }
        meta.insert("name".into(), json!(name));
        meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
        for server_owned in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "managedFields",
        ] {
            meta.remove(server_owned);
        }
        if info.generation != GenerationRule::None {
            meta.insert("generation".into(), json!(1));
        } else {
            meta.remove("generation");
        }
        if info.namespaced {
            let ns = namespace_of(&object).to_string();
            match inner
                .objects
                .get(&("namespaces".into(), String::new(), ns.clone()))
            {
                None => return Err(ApiError::not_found("namespaces", "", "namespaces", &ns)),
                Some(n) if n["status"]["phase"] == "Terminating" => {
                    return Err(ApiError::forbidden(format!(
                        "unable to create new content in namespace {ns} because it is being terminated"
                    )));
                }
                Some(_) => {}
            }
        }
        if info.status_subresource
            && drops_status_on_create(info)
            && let Some(map) = object.as_object_mut()
        {
            map.remove("status");
        }
        match (info.group.as_str(), info.kind.as_str()) {
            ("", "Namespace") => {
                object["status"] = json!({"phase": "Active"});
                object["spec"] = json!({"finalizers": ["kubernetes"]});
                // The label every namespace carries, so selectors can name namespaces.
                let name = name_of(&object).to_string();
                meta_mut(&mut object)
                    .entry("labels")
                    .or_insert_with(|| json!({}))["kubernetes.io/metadata.name"] = json!(name);
            }
            ("batch", "Job") if object["spec"]["selector"].is_null() => {
                // As the API server does for Jobs without manualSelector: pods are matched by
                // the Job's uid, and the template carries the labels that say so.
                let uid = object["metadata"]["uid"].clone();
                let name = json!(name_of(&object));
                object["spec"]["selector"] =
                    json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
                let template = &mut object["spec"]["template"];
                if !template["metadata"]["labels"].is_object() {
                    template["metadata"]["labels"] = json!({});
                }
                let labels = &mut template["metadata"]["labels"];
                labels["batch.kubernetes.io/controller-uid"] = uid.clone();
                labels["batch.kubernetes.io/job-name"] = name.clone();
                labels["controller-uid"] = uid;
                labels["job-name"] = name;
            }
            ("", "Pod") if object["status"]["phase"].is_null() => {
                object["status"]["phase"] = json!("Pending");
            }
            _ => {}
        }
        crate::defaults::apply(info, &mut object);
        if let Some(schema) = &info.schema {
            crate::structural::admit(schema, &info.kind, &info.group, &mut object)?;
        }
        Ok(object)
    }

    /// Replaces an object (PUT), or its status with [`Part::Status`].
    pub fn update(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        body: Value,
        part: Part,
        options: &WriteOptions,
    ) -> Result<Value, ApiError> {
        self.update_shared(info, namespace, name, body, part, options)
            .map(|updated| Self::presented(info, &updated))
    }

    /// Like [`Store::update`], returning the stored object shared rather than a presented copy.
    pub fn update_shared(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        body: Value,
        part: Part,
        options: &WriteOptions,
    ) -> Result<Arc<Value>, ApiError> {
        let mut inner = self.lock();
        let old = Self::existing(&inner, info, namespace, name)?;
        self.write_update(&mut inner, info, old, body, part, options, Tracking::Update)
    }

    pub(crate) fn existing(
        inner: &Inner,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<Value>, ApiError> {
        inner
            .objects
            .get(&Self::key(info, namespace, name))
            .cloned()
            .ok_or_else(|| {
                ApiError::not_found(&info.qualified_plural(), &info.group, &info.plural, name)
            })
    }

    /// Applies the update rules to `new` (what the client wants) given the stored `old`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_update(
        &self,
        inner: &mut Inner,
        info: &ResourceInfo,
        old: Arc<Value>,
        new: Value,
        part: Part,
        options: &WriteOptions,
        tracking: Tracking,
    ) -> Result<Arc<Value>, ApiError> {
        let dry_run = options.dry_run;
        let name = name_of(&old).to_string();
        if !new.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        let new = crate::convert::to_storage(info, new);
        if let Some(rv) = meta(&new)["resourceVersion"]
            .as_str()
            .filter(|v| !v.is_empty())
            && Some(rv) != meta(&old)["resourceVersion"].as_str()
        {
            return Err(ApiError::conflict(
                &info.qualified_plural(),
                &info.group,
                &info.plural,
                &name,
            ));
        }
        if let Some(body_name) = meta(&new)["name"].as_str()
            && !body_name.is_empty()
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let mut object = match part {
            Part::Status => {
                // The body is already a copy: it becomes the stored object but for its status,
                // copying from the stored object only the fields that differ.
                let mut object = new;
                let status = object
                    .as_object_mut()
                    .and_then(|fields| fields.remove("status"));
                // The workload controllers record revisions as annotations through /status, which
                // takes annotations for these kinds (and never bumps generation).
                let annotated =
                    info.builtin && matches!(info.kind.as_str(), "Deployment" | "ReplicaSet");
                let annotations = annotated
                    .then(|| meta(&object).get("annotations").cloned())
                    .flatten();
                if let (Some(fields), Some(stored)) = (object.as_object_mut(), old.as_object()) {
                    fields.retain(|key, _| key != "status" && stored.contains_key(key));
                    for (key, value) in stored {
                        if key != "status" && fields.get(key) != Some(value) {
                            fields.insert(key.clone(), value.clone());
                        }
                    }
                }
                object["status"] = status.unwrap_or(Value::Null);
                if annotated {
                    match annotations {
                        Some(a) => meta_mut(&mut object).insert("annotations".into(), a),
                        None => meta_mut(&mut object).remove("annotations"),
                    };
                }
                if object["status"].is_null() {
                    object.as_object_mut().expect("object").remove("status");
                }
                object
            }
            Part::Main => {
                let mut object = new;
                {
                    let m = meta_mut(&mut object);
                    let old_meta = meta(&old);
                    for kept in [
                        "uid",
                        "creationTimestamp",
                        "deletionTimestamp",
                        "deletionGracePeriodSeconds",
                        "namespace",
                        "name",
                        "generation",
                    ] {
                        match old_meta.get(kept) {
                            Some(v) => m.insert(kept.into(), v.clone()),
                            None => m.remove(kept),
                        };
                    }
                    if tracking == Tracking::Update
                        && !m.get("managedFields").is_some_and(Value::is_array)
                    {
                        // A write that does not send managedFields keeps the recorded ones.
                        match old_meta.get("managedFields") {
                            Some(fields) => m.insert("managedFields".into(), fields.clone()),
                            None => m.remove("managedFields"),
                        };
                    }
                }
                if info.status_subresource {
                    match old.get("status") {
                        Some(status) => object["status"] = status.clone(),
                        None => {
                            object.as_object_mut().expect("object").remove("status");
                        }
                    }
                }
                if meta(&old)["deletionTimestamp"].is_string() {
                    let before: HashSet<String> = string_set(&meta(&old)["finalizers"]);
                    let after: HashSet<String> = string_set(&meta(&object)["finalizers"]);
                    if !after.is_subset(&before) {
                        return Err(ApiError::invalid(
                            &info.kind,
                            &name,
                            "metadata.finalizers",
                            "FieldValueForbidden",
                            "Forbidden: no new finalizers can be added if the object is being deleted",
                        ));
                    }
                }
                crate::defaults::apply(info, &mut object);
                object
            }
        };
        if let Some(schema) = &info.schema {
            crate::structural::admit(schema, &info.kind, &info.group, &mut object)?;
        }
        object["apiVersion"] = old["apiVersion"].clone();
        object["kind"] = old["kind"].clone();
        if object["apiVersion"].is_null() {
            object = Self::present(info, object);
        }
        if tracking == Tracking::Update {
            let writer = options.writer(info, part);
            managed::record_update(Some(&old), &mut object, info.builtin, &writer);
        }
        if part == Part::Main && bumps_generation(info.generation, &old, &object) {
            let generation = meta(&old)["generation"].as_i64().unwrap_or(0) + 1;
            meta_mut(&mut object).insert("generation".into(), json!(generation));
        }
        if same_but_version(&object, &old) {
            return Ok(old);
        }
        if dry_run {
            return Ok(Arc::new(object));
        }
        if meta(&object)["deletionTimestamp"].is_string() && !has_finalizers(&object) {
            let removed = self.commit(inner, info, ChangeType::Deleted, object, Some(old));
            self.after_removal(inner);
            return Ok(removed);
        }
        let updated = self.commit(inner, info, ChangeType::Modified, object, Some(old));
        self.after_write(inner, info, &updated);
        Ok(updated)
    }

    /// Patches an object; server-side apply creates it when missing. Returns the object and whether
    /// it was created.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        patch_type: PatchType,
        body: &Value,
        part: Part,
        options: &WriteOptions,
    ) -> Result<(Value, bool), ApiError> {
        self.patch_shared(info, namespace, name, patch_type, body, part, options)
            .map(|(patched, created)| (Self::presented(info, &patched), created))
    }

    /// Like [`Store::patch`], returning the stored object shared rather than a presented copy.
    #[allow(clippy::too_many_arguments)]
    pub fn patch_shared(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        patch_type: PatchType,
        body: &Value,
        part: Part,
        options: &WriteOptions,
    ) -> Result<(Arc<Value>, bool), ApiError> {
        let mut inner = self.lock();
        let old = match Self::existing(&inner, info, namespace, name) {
            Ok(old) => old,
            Err(missing) if patch_type == PatchType::Apply && part == Part::Main => {
                drop(inner);
                let mut object = body.clone();
                meta_mut(&mut object).insert("name".into(), json!(name));
                let ns = info.namespaced.then_some(namespace);
                return self
                    .create_tracked(info, ns, object, options, Tracking::Applied)
                    .map(|o| (o, true))
                    .map_err(|e| if e.code == 404 { missing } else { e });
            }
            Err(missing) => return Err(missing),
        };
        // The patch sees the live resourceVersion (kubectl's JSON patches replace it, which makes
        // them conditional); a patch that leaves it alone is unconditional.
        let mut patched = Self::presented(info, &old);
        match patch_type {
            PatchType::Merge => patch::merge_patch(&mut patched, body),
            PatchType::Json => {
                patch::json_patch(&mut patched, body).map_err(ApiError::unprocessable_patch)?
            }
            PatchType::Strategic => {
                if !info.builtin {
                    return Err(ApiError::unsupported_media_type(
                        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                    ));
                }
                patch::strategic_merge_patch(&mut patched, body)
                    .map_err(ApiError::unprocessable_patch)?
            }
            PatchType::Apply => {
                if info.builtin {
                    patch::strategic_merge_patch(&mut patched, body)
                        .map_err(ApiError::unprocessable_patch)?
                } else {
                    patch::merge_patch(&mut patched, body)
                }
            }
        }
        // A patch whose top level is not an object (`"x"`, `[]`, a JSON patch replacing the root)
        // would leave no object to store: refused, as the API server does, instead of the panic
        // that reading its metadata would be.
        if !patched.is_object() {
            return Err(ApiError::bad_request(format!(
                "the patch would make the object a JSON {}, not an object; send a JSON object (merge, strategic merge) or a list of operations (JSON patch)",
                match &patched {
                    Value::Array(_) => "array",
                    Value::String(_) => "string",
                    Value::Number(_) => "number",
                    Value::Bool(_) => "boolean",
                    _ => "null",
                }
            )));
        }
        if meta(&patched)["resourceVersion"].is_null()
            && let Some(rv) = meta(&old)["resourceVersion"].as_str()
        {
            meta_mut(&mut patched).insert("resourceVersion".into(), json!(rv));
        }
        let tracking = if patch_type == PatchType::Apply {
            let writer = options.writer(info, part);
            let live = Self::present_shared(info, &old);
            managed::record_apply(
                &live,
                body,
                &mut patched,
                info.builtin,
                options.force,
                &writer,
            )?;
            Tracking::Applied
        } else {
            Tracking::Update
        };
        self.write_update(&mut inner, info, old, patched, part, options, tracking)
            .map(|o| (o, false))
    }

    /// Deletes an object: at once without finalizers, otherwise by marking it for deletion.
    pub fn delete(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        options: &DeleteOptions,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let mut inner = self.lock();
        let old = Self::existing(&inner, info, namespace, name)?;
        if info.kind == "Namespace"
            && info.group.is_empty()
            && ["default", "kube-system"].contains(&name)
        {
            return Err(ApiError::forbidden(format!(
                "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
            )));
        }
        if let Some(uid) = &options.uid
            && meta(&old)["uid"].as_str() != Some(uid.as_str())
        {
            return Err(ApiError {
                message: format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta(&old)["uid"].as_str().unwrap_or("")
                ),
                ..ApiError::conflict(&info.qualified_plural(), &info.group, &info.plural, name)
            });
        }
        if let Some(rv) = &options.resource_version
            && meta(&old)["resourceVersion"].as_str() != Some(rv.as_str())
        {
            return Err(ApiError::conflict(
                &info.qualified_plural(),
                &info.group,
                &info.plural,
                name,
            ));
        }
        if dry_run {
            return Ok(Self::presented(info, &old));
        }
        let deleted = self.delete_object(&mut inner, info, old, options.propagation.as_deref());
        Ok(Self::presented(info, &deleted))
    }

    pub(crate) fn delete_object(
        &self,
        inner: &mut Inner,
        info: &ResourceInfo,
        old: Arc<Value>,
        propagation: Option<&str>,
    ) -> Arc<Value> {
        let marked = meta(&old)["deletionTimestamp"].is_string();
        let is_namespace = info.group.is_empty() && info.kind == "Namespace";
        let is_crd = info.kind == "CustomResourceDefinition";
        let mut object = Value::clone(&old);
        let finalizer = match propagation {
            Some("Foreground") => Some("foregroundDeletion"),
            Some("Orphan") => Some("orphan"),
            _ => None,
        };
        if let Some(f) = finalizer
            && !marked
        {
            let m = meta_mut(&mut object);
            let mut list = m
                .get("finalizers")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if !list.contains(&json!(f)) {
                list.push(json!(f));
            }
            m.insert("finalizers".into(), Value::Array(list));
        }
        if has_finalizers(&object) || is_namespace || is_crd {
            if marked {
                return old;
            }
            let m = meta_mut(&mut object);
            m.insert("deletionTimestamp".into(), json!(now_rfc3339()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            if is_namespace {
                object["status"]["phase"] = json!("Terminating");
            }
            let updated = self.commit(inner, info, ChangeType::Modified, object, Some(old));
            self.run_controllers(inner);
            return updated;
        }
        let removed = self.commit(inner, info, ChangeType::Deleted, object, Some(old));
        self.after_removal(inner);
        removed
    }

    pub(crate) fn after_write(&self, inner: &mut Inner, info: &ResourceInfo, object: &Value) {
        if info.kind == "CustomResourceDefinition" && info.group == "apiextensions.k8s.io" {
            self.establish_crd(inner, info, object);
        }
        if meta(object)["deletionTimestamp"].is_string() {
            self.run_controllers(inner);
        }
    }

    pub(crate) fn after_removal(&self, inner: &mut Inner) {
        self.run_controllers(inner);
    }
}

pub(crate) fn bumps_generation(rule: GenerationRule, old: &Value, new: &Value) -> bool {
    match rule {
        GenerationRule::None => false,
        GenerationRule::Spec => old["spec"] != new["spec"],
        GenerationRule::SpecOrAnnotations => {
            old["spec"] != new["spec"] || meta(old)["annotations"] != meta(new)["annotations"]
        }
        GenerationRule::AnythingButMetadata => {
            let strip = |o: &Value| {
                let mut copy = o.clone();
                if let Some(map) = copy.as_object_mut() {
                    map.remove("metadata");
                    map.remove("apiVersion");
                    map.remove("kind");
                }
                copy
            };
            strip(old) != strip(new)
        }
    }
}

/// Kubernetes' ResourceQuota admission for the `pods` count: a new pod is refused (403, "exceeded
/// quota") when a quota of its namespace limits `spec.hard.pods` and the namespace's pods that have
/// not ended already reach the limit, as a full quota stops a rollout in a real cluster.
pub(crate) fn pod_quota_admission(
    inner: &Inner,
    pods: &ResourceInfo,
    pod: &Value,
) -> Result<(), ApiError> {
    let namespace = namespace_of(pod);
    let Some(quotas) = inner.registry.get("", "v1", "resourcequotas") else {
        return Ok(());
    };
    let in_namespace = |storage: String| {
        let start = (storage.clone(), namespace.to_string(), String::new());
        inner
            .objects
            .range(start..)
            .take_while(move |((s, n, _), _)| *s == storage && n == namespace)
            .map(|(_, object)| object)
    };
    // Counted only when the namespace has a quota: a pod's creation must not cost every pod.
    let mut counted = None;
    for quota in in_namespace(quotas.storage_key()) {
        let Some(limit) = quota["spec"]["hard"]["pods"]
            .as_str()
            .and_then(|l| l.parse::<usize>().ok())
            .or_else(|| quota["spec"]["hard"]["pods"].as_u64().map(|l| l as usize))
        else {
            continue;
        };
        let used = *counted.get_or_insert_with(|| {
            in_namespace(pods.storage_key())
                .filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
                .count()
        });
        if used >= limit {
            let meta = &pod["metadata"];
            let shown = meta["generateName"]
                .as_str()
                .filter(|g| !g.is_empty())
                .or(meta["name"].as_str())
                .unwrap_or_default();
            return Err(ApiError::forbidden(format!(
                "pods \"{shown}\" is forbidden: exceeded quota: {}, requested: pods=1, used: pods={used}, limited: pods={limit}",
                name_of(quota)
            )));
        }
    }
    Ok(())
}
