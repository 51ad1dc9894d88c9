//! Kubernetes `Status` error responses.

use serde_json::{Value, json};

/// An API error: HTTP code, reason and message, rendered as a `Status` object.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// Machine-readable reason, e.g. `NotFound`.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// `details` of the Status (name, group, kind, causes).
    pub details: Option<Value>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// 401 Unauthorized (kubectl: "You must be logged in to the server").
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 403 Forbidden.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// 404 for an unknown path.
    pub fn unknown_path() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// 404 for a missing object of `resource` (`plural` or `plural.group`).
    pub fn not_found(resource: &str, group: &str, plural: &str, name: &str) -> Self {
        let mut e = Self::new(404, "NotFound", format!("{resource} \"{name}\" not found"));
        e.details = Some(json!({"name": name, "group": group, "kind": plural}));
        e
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 409 AlreadyExists.
    pub fn already_exists(resource: &str, group: &str, plural: &str, name: &str) -> Self {
        let mut e = Self::new(
            409,
            "AlreadyExists",
            format!("{resource} \"{name}\" already exists"),
        );
        e.details = Some(json!({"name": name, "group": group, "kind": plural}));
        e
    }

    /// 409 Conflict for a stale resourceVersion.
    pub fn conflict(resource: &str, group: &str, plural: &str, name: &str) -> Self {
        let mut e = Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
        );
        e.details = Some(json!({"name": name, "group": group, "kind": plural}));
        e
    }

    /// 409 Conflict with a message of its own (server-side apply conflicts).
    pub fn conflict_with_causes(message: impl Into<String>) -> Self {
        Self::new(409, "Conflict", message)
    }

    /// 410 Expired (a resourceVersion older than the retained history).
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    /// 422 Invalid with one cause on `field`.
    pub fn invalid(kind: &str, name: &str, field: &str, cause: &str, detail: &str) -> Self {
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{kind} \"{name}\" is invalid: {field}: {detail}"),
        );
        e.details = Some(json!({"name": name, "kind": kind,
            "causes": [{"reason": cause, "message": detail, "field": field}]}));
        e
    }

    /// 422 for a patch that cannot be applied.
    pub fn unprocessable_patch(detail: impl Into<String>) -> Self {
        let mut e = Self::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        );
        e.details =
            Some(json!({"causes": [{"reason": "FieldValueInvalid", "message": detail.into()}]}));
        e
    }

    /// 500 InternalError (also used for injected faults).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The `Status` object sent as the response body.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": self.message, "reason": self.reason, "code": self.code
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}
