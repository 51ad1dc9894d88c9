//! The verbs on a resource: get, list, create, update, patch, apply, delete and deletecollection,
//! with the scale and status subresources.

use super::body::*;
use super::pods::*;
use super::request::*;
use super::watch::*;
use crate::auth::{self, Identity};
use crate::instrument::FaultPlan;
use crate::registry::Verbs;
use crate::scale;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::store::{Part, PatchType, Store, WriteOptions};
use crate::tables;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use serde_json::json;

/// Serves the resources that are actions rather than stored objects: the access and identity
/// reviews, ServiceAccount TokenRequests and pod evictions. `None` for every other request.
pub(crate) fn serve_actions(
    state: &AppState,
    identity: &Identity,
    method: &Method,
    headers: &HeaderMap,
    target: &Target,
    body: &Bytes,
) -> Option<Result<Response, ApiError>> {
    let info = &target.info;
    let token = target.subresource.as_deref() == Some("token");
    let eviction = target.subresource.as_deref() == Some("eviction");
    let create_only = info.verbs == Verbs::CreateOnly;
    if !create_only && !token && !eviction {
        return None;
    }
    if *method != Method::POST || (create_only && target.name.is_some()) {
        return Some(Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )));
    }
    let namespace = target.namespace.as_deref().unwrap_or("");
    Some(parse_body(headers, body).and_then(|request| {
        let name = target.name.as_deref().unwrap_or("");
        if eviction {
            return evict(state, namespace, name, &request);
        }
        let answer = if token {
            let account = state
                .store
                .get(info, namespace, target.name.as_deref().unwrap_or(""))?;
            auth::token_request(&state.auth, &account, &request)?
        } else if info.kind == "TokenReview" {
            auth::token_review(&state.auth, &state.store, request)
        } else {
            auth::review(&state.store, identity, &info.kind, namespace, request)?
        };
        Ok(json_response(201, &answer))
    }))
}

#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve(
    state: &AppState,
    identity: &Identity,
    method: &Method,
    headers: &HeaderMap,
    query: &Query,
    target: Target,
    body: Bytes,
    faults: &FaultPlan,
) -> Result<Response, ApiError> {
    let store = &state.store;
    let info = &target.info;
    let ns = target.namespace.as_deref().unwrap_or("");
    query.check_options()?;
    let dry_run = query.dry_run()?;
    let write = WriteOptions {
        dry_run,
        field_manager: field_manager(query, headers),
        force: query.flag("force"),
    };
    let part = match target.subresource.as_deref() {
        Some("status") => Part::Status,
        _ => Part::Main,
    };
    match (method, &target.name, target.subresource.as_deref()) {
        (&Method::GET, None, _) => {
            let labels = LabelSelector::parse(query.get("labelSelector").unwrap_or(""))?;
            let fields = FieldSelector::parse(
                query.get("fieldSelector").unwrap_or(""),
                &info.kind,
                &info.group,
            )?;
            if target.watch_path || query.flag("watch") {
                let table = table_request(headers, query);
                return watch(state, &target, query, (labels, fields), table, faults);
            }
            let page = list_page(store, &target, query, &labels, &fields)?;
            let mut metadata = json!({"resourceVersion": page.rv.to_string()});
            if let Some(token) = &page.continue_token {
                metadata["continue"] = json!(token);
            }
            if let Some(remaining) = page
                .remaining
                .filter(|_| labels.is_empty() && fields.is_empty())
            {
                metadata["remainingItemCount"] = json!(remaining);
            }
            if let Some(include) = table_request(headers, query) {
                let mut table =
                    tables::table(info, &page.items, &page.rv.to_string(), include, true);
                if let Some(token) = &page.continue_token {
                    table["metadata"]["continue"] = json!(token);
                }
                return Ok(table_response(&table));
            }
            Ok(json_response(
                200,
                &json!({
                    "kind": format!("{}List", info.kind), "apiVersion": info.api_version(),
                    "metadata": metadata, "items": page.items
                }),
            ))
        }
        (&Method::GET, Some(name), Some("scale")) => {
            let object = store.get(info, ns, name)?;
            Ok(json_response(200, &scale::scale_of(info, &object)))
        }
        (&Method::GET, Some(name), _) => {
            let object = store.get(info, ns, name)?;
            match table_request(headers, query) {
                Some(include) if part == Part::Main => {
                    let rv = object["metadata"]["resourceVersion"].as_str().unwrap_or("");
                    Ok(table_response(&tables::table(
                        info,
                        std::slice::from_ref(&object),
                        rv,
                        include,
                        true,
                    )))
                }
                _ => Ok(json_response(200, &object)),
            }
        }
        (&Method::POST, None, None) => {
            let mut body = parse_object_body(info, headers, &body)?;
            let warnings = check_fields(info, query, &mut body, Decoding::Object)?;
            state
                .auth
                .admit_owner_references(store, identity, info, ns, &body, None)?;
            let created = store.create(info, target.namespace.as_deref(), body, &write)?;
            Ok(with_warnings(json_response(201, &created), &warnings))
        }
        (&Method::POST, _, _) => Err(ApiError::method_not_allowed(
            "POST is only allowed on a collection",
        )),
        (&Method::PUT, Some(name), Some("scale")) => {
            let scale = parse_body(headers, &body)?;
            let updated = scale::set_scale(store, info, ns, name, &scale, &write)?;
            Ok(json_response(200, &scale::scale_of(info, &updated)))
        }
        (&Method::PUT, Some(name), _) => {
            let mut body = parse_object_body(info, headers, &body)?;
            let warnings = check_fields(info, query, &mut body, Decoding::Object)?;
            if part == Part::Main {
                let old = store.get(info, ns, name).ok();
                state.auth.admit_owner_references(
                    store,
                    identity,
                    info,
                    ns,
                    &body,
                    old.as_ref(),
                )?;
            }
            let updated = store.update(info, ns, name, body, part, &write)?;
            Ok(with_warnings(json_response(200, &updated), &warnings))
        }
        (&Method::PATCH, Some(name), sub) => {
            let patch_type = match content_type(headers).as_str() {
                "application/merge-patch+json" => PatchType::Merge,
                "application/json-patch+json" => PatchType::Json,
                "application/strategic-merge-patch+json" => PatchType::Strategic,
                "application/apply-patch+yaml" | "application/apply-patch+json" => PatchType::Apply,
                other => {
                    return Err(ApiError::unsupported_media_type(format!(
                        "the body of the request was in an unknown format {other:?} - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json"
                    )));
                }
            };
            if patch_type == PatchType::Apply && query.get("fieldManager").is_none_or(str::is_empty)
            {
                return Err(ApiError::bad_request(
                    "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                ));
            }
            // Only an apply patch may be YAML; the others are JSON, as the API server reads them.
            let mut patch = if patch_type == PatchType::Apply {
                parse_body(headers, &body)?
            } else {
                serde_json::from_slice(&body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?
            };
            if sub == Some("ephemeralcontainers") {
                only_ephemeral_containers(&patch, patch_type)?;
            }
            let warnings = match patch_type {
                PatchType::Json => Vec::new(),
                PatchType::Apply => {
                    check_fields(info, query, &mut patch, Decoding::Apply { ns, name })?
                }
                PatchType::Merge | PatchType::Strategic => {
                    check_fields(info, query, &mut patch, Decoding::Patch)?
                }
            };
            if sub == Some("scale") {
                let object = store.get(info, ns, name)?;
                let mut scale = scale::scale_of(info, &object);
                match patch_type {
                    PatchType::Json => crate::patch::json_patch(&mut scale, &patch)
                        .map_err(ApiError::unprocessable_patch)?,
                    _ => crate::patch::merge_patch(&mut scale, &patch),
                }
                let updated = scale::set_scale(store, info, ns, name, &scale, &write)?;
                return Ok(json_response(200, &scale::scale_of(info, &updated)));
            }
            if patch_type == PatchType::Apply
                && !identity.is_admin()
                && store.get(info, ns, name).is_err()
            {
                // An apply that creates the object needs create as well as patch, as on a cluster.
                let create = auth::Request::Resource {
                    verb: "create".into(),
                    group: info.group.clone(),
                    resource: info.plural.clone(),
                    subresource: String::new(),
                    namespace: ns.to_string(),
                    name: name.to_string(),
                };
                if !state.auth.authorize(store, identity, &create).allowed {
                    return Err(auth::forbidden(identity, &create));
                }
            }
            if part == Part::Main && !identity.is_admin() {
                // The admission check needs the patched object: a dry run computes it.
                let preview = WriteOptions {
                    dry_run: true,
                    ..write.clone()
                };
                let old = store.get(info, ns, name).ok();
                let (patched, _) =
                    store.patch(info, ns, name, patch_type, &patch, part, &preview)?;
                state.auth.admit_owner_references(
                    store,
                    identity,
                    info,
                    ns,
                    &patched,
                    old.as_ref(),
                )?;
            }
            let (object, created) =
                store.patch(info, ns, name, patch_type, &patch, part, &write)?;
            let response = json_response(if created { 201 } else { 200 }, &object);
            Ok(with_warnings(response, &warnings))
        }
        (&Method::DELETE, Some(name), None) => {
            let options = delete_options(headers, &body, query)?;
            Ok(json_response(
                200,
                &store.delete(info, ns, name, &options, dry_run)?,
            ))
        }
        (&Method::DELETE, None, None) => {
            let labels = LabelSelector::parse(query.get("labelSelector").unwrap_or(""))?;
            let fields = FieldSelector::parse(
                query.get("fieldSelector").unwrap_or(""),
                &info.kind,
                &info.group,
            )?;
            let options = delete_options(headers, &body, query)?;
            let (items, _) = store.list(info, target.namespace.as_deref(), &labels, &fields);
            let mut deleted = Vec::new();
            for item in items {
                let name = item["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let item_ns = item["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                deleted.push(store.delete(info, &item_ns, &name, &options, dry_run)?);
            }
            let rv = store.resource_version();
            Ok(json_response(
                200,
                &json!({
                    "kind": format!("{}List", info.kind), "apiVersion": info.api_version(),
                    "metadata": {"resourceVersion": rv.to_string()}, "items": deleted
                }),
            ))
        }
        _ => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource: {method}"
        ))),
    }
}

/// A list request, in pages when it sets `limit` or `continue`. As the API server's watch cache
/// does, `resourceVersion=0` without a token answers everything in one page.
pub(crate) fn list_page(
    store: &Store,
    target: &Target,
    query: &Query,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> Result<crate::store::Page, ApiError> {
    let token = query.get("continue").filter(|t| !t.is_empty());
    let limit = match query.get("limit").filter(|l| !l.is_empty()) {
        None => None,
        Some(text) => Some(text.parse::<i64>().map_err(|_| {
            ApiError::bad_request(format!(
                "limit: Invalid value: {text:?}: must be an integer"
            ))
        })?),
    };
    let from_cache = query.get("resourceVersion") == Some("0") && token.is_none();
    let limit = match limit.filter(|l| *l > 0) {
        Some(limit) if !from_cache => limit as usize,
        _ if token.is_some() => usize::MAX,
        _ => {
            let (items, rv) = store.list(&target.info, target.namespace.as_deref(), labels, fields);
            return Ok(crate::store::Page {
                items,
                rv,
                continue_token: None,
                remaining: None,
            });
        }
    };
    store.list_page(
        &target.info,
        target.namespace.as_deref(),
        labels,
        fields,
        limit,
        token,
    )
}
