//! Request bodies: JSON, YAML and protobuf decoded, and the fields a schema does not declare
//! refused, warned about or dropped (`fieldValidation`).

use super::request::*;
use crate::openapi;
use crate::registry::ResourceInfo;
use crate::status::ApiError;
use crate::store::{DeleteOptions, PatchType};
use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use serde_json::Value;

/// The object a POST or PUT sends: in a format the API server reads, and with the string maps of
/// ConfigMaps and Secrets holding strings only, as their Go types require.
pub(crate) fn parse_object_body(
    info: &ResourceInfo,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Value, ApiError> {
    let media = content_type(headers);
    if !matches!(
        media.as_str(),
        "" | "application/json" | "application/yaml" | crate::protobuf::MEDIA_TYPE
    ) {
        return Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format {media:?} - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf"
        )));
    }
    let object = parse_body(headers, body)?;
    let maps: &[&str] = match (info.group.as_str(), info.plural.as_str()) {
        ("", "configmaps") => &["data", "binaryData"],
        ("", "secrets") => &["data", "stringData"],
        _ => &[],
    };
    for field in maps {
        let Some(map) = object.get(*field).and_then(Value::as_object) else {
            continue;
        };
        if let Some(value) = map.values().find(|v| !v.is_string()) {
            let found = match value {
                Value::Number(_) => "number",
                Value::Bool(_) => "bool",
                Value::Array(_) => "array",
                Value::Object(_) => "object",
                _ => "null",
            };
            if found == "null" {
                continue;
            }
            return Err(ApiError::bad_request(format!(
                "{kind} in version \"v1\" cannot be handled as a {kind}: json: cannot unmarshal {found} into Go struct field {kind}.{field} of type string",
                kind = info.kind
            )));
        }
    }
    Ok(object)
}

pub(crate) fn parse_body(headers: &HeaderMap, body: &Bytes) -> Result<Value, ApiError> {
    let media = content_type(headers);
    if media == crate::protobuf::MEDIA_TYPE {
        return crate::protobuf::decode_object(body)
            .map_err(|e| ApiError::bad_request(e.to_string()));
    }
    if body.is_empty() {
        return Ok(Value::Null);
    }
    match serde_json::from_slice(body) {
        Ok(v) => Ok(v),
        Err(json_error) => {
            let text = std::str::from_utf8(body)
                .map_err(|_| ApiError::bad_request("the body is not UTF-8"))?;
            serde_saphyr::from_str(text).map_err(|_| {
                ApiError::bad_request(format!("the body is not valid JSON or YAML: {json_error}"))
            })
        }
    }
}

/// The `ephemeralcontainers` subresource (`kubectl debug`) may change `spec.ephemeralContainers`
/// and nothing else.
pub(crate) fn only_ephemeral_containers(
    patch: &Value,
    patch_type: PatchType,
) -> Result<(), ApiError> {
    let allowed = match patch_type {
        PatchType::Json => patch.as_array().is_some_and(|ops| {
            ops.iter().all(|op| {
                op["path"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("/spec/ephemeralContainers"))
            })
        }),
        _ => patch.as_object().is_some_and(|top| {
            top.iter().all(|(key, value)| match key.as_str() {
                "spec" => value.as_object().is_some_and(|spec| {
                    spec.keys().all(|k| {
                        k == "ephemeralContainers" || k == "$setElementOrder/ephemeralContainers"
                    })
                }),
                "metadata" | "apiVersion" | "kind" => true,
                _ => false,
            })
        }),
    };
    if allowed {
        return Ok(());
    }
    Err(ApiError::invalid(
        "Pod",
        "",
        "spec",
        "FieldValueForbidden",
        "Forbidden: pod updates through the ephemeralcontainers subresource may only change spec.ephemeralContainers",
    ))
}

/// What a body with unknown fields was meant to become, which decides the API server's wording.
pub(crate) enum Decoding<'a> {
    /// A whole object (create, update).
    Object,
    /// A merge or strategic merge patch.
    Patch,
    /// A server-side apply configuration of the object `ns/name`.
    Apply { ns: &'a str, name: &'a str },
}

/// Applies `fieldValidation` to the unknown fields of a built-in kind's body: `Strict` rejects
/// them, `Warn` (the default) and `Ignore` drop them as decoding into typed objects does, `Warn`
/// with one warning each. Server-side apply rejects them whatever the setting, as on a cluster.
pub(crate) fn check_fields(
    info: &ResourceInfo,
    query: &Query,
    body: &mut Value,
    decoding: Decoding,
) -> Result<Vec<String>, ApiError> {
    let mode = query.get("fieldValidation").unwrap_or("");
    if !matches!(mode, "" | "Ignore" | "Warn" | "Strict") {
        return Err(ApiError::bad_request(format!(
            "fieldValidation: Unsupported value: {mode:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
        )));
    }
    // A custom resource is pruned by the store once the write is resolved (a patch's nulls are
    // deletions, not values), so here its unknown fields are only reported.
    let unknown = match (&info.schema, info.builtin) {
        (_, true) => openapi::unknown_fields(info, body),
        (Some(schema), false) => crate::structural::prune(schema, &mut body.clone()),
        (None, false) => return Ok(Vec::new()),
    };
    let strict = mode == "Strict" || matches!(decoding, Decoding::Apply { .. });
    if strict {
        if unknown.is_empty() {
            return Ok(Vec::new());
        }
        let listed: Vec<String> = unknown
            .iter()
            .map(|path| format!("unknown field \"{path}\""))
            .collect();
        let message = match decoding {
            Decoding::Object => format!(
                "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
                listed.join(", "),
                kind = info.kind,
                version = info.version
            ),
            Decoding::Patch => format!("strict decoding error: {}", listed.join(", ")),
            Decoding::Apply { ns, name } => format!(
                "failed to create typed patch object ({ns}{slash}{name}; {api_version}, Kind={kind}): .{path}: field not declared in schema",
                slash = if ns.is_empty() { "" } else { "/" },
                api_version = info.api_version(),
                kind = info.kind,
                path = unknown[0]
            ),
        };
        return Err(ApiError::bad_request(message));
    }
    let dropped = if info.builtin {
        openapi::prune_unknown_fields(info, body)
    } else {
        unknown
    };
    Ok(if mode == "Ignore" {
        Vec::new()
    } else {
        dropped
            .iter()
            .map(|path| format!("unknown field \"{path}\""))
            .collect()
    })
}

/// Adds one `Warning` header per message, which kubectl prints as `Warning: <message>`.
pub(crate) fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let text = format!("299 - {}", Value::String(warning.clone()));
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

pub(crate) fn delete_options(
    headers: &HeaderMap,
    body: &Bytes,
    query: &Query,
) -> Result<DeleteOptions, ApiError> {
    let options = parse_body(headers, body)?;
    check_propagation(options["propagationPolicy"].as_str())?;
    Ok(DeleteOptions {
        uid: options["preconditions"]["uid"].as_str().map(String::from),
        resource_version: options["preconditions"]["resourceVersion"]
            .as_str()
            .map(String::from),
        propagation: options["propagationPolicy"]
            .as_str()
            .or(query.get("propagationPolicy"))
            .map(String::from),
    })
}
