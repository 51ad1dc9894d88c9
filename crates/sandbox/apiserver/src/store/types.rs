//! What the store's callers pass and get back: changes, pages, write and delete options.

use crate::managed;
use crate::registry::ResourceInfo;
use crate::status::ApiError;
use serde_json::{Value, json};
use std::sync::Arc;

/// How many changes are kept for watches that resume from a resourceVersion: enough that a
/// client relisting thousands of objects while the controllers write can resume watching from
/// its list (a shorter history sends it back to list again).
pub const HISTORY_LIMIT: usize = 100_000;

/// Kind of a change, as a watch event type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeType {
    /// The object was created.
    Added,
    /// The object was updated.
    Modified,
    /// The object was removed.
    Deleted,
}

impl ChangeType {
    /// The watch event type.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// One committed write.
#[derive(Clone, Debug)]
pub struct Change {
    /// The resourceVersion it created.
    pub rv: u64,
    /// Storage key of the resource (`plural.group`).
    pub resource: String,
    /// What happened.
    pub change: ChangeType,
    /// The object after the change (the last state, for deletions), shared with the store while
    /// it is the stored version.
    pub object: Arc<Value>,
    /// The object before the change, for watchers whose selectors it may have left or entered.
    pub previous: Option<Arc<Value>>,
    /// When it was committed (to the nanosecond, unlike the objects' own timestamps).
    pub at: std::time::SystemTime,
}

/// One page of a paged list.
#[derive(Debug)]
pub struct Page {
    /// The page's objects, in namespace/name order.
    pub items: Vec<Value>,
    /// The resourceVersion every page of this list shows.
    pub rv: u64,
    /// The token for the next page, when more objects follow.
    pub continue_token: Option<String>,
    /// How many objects follow this page.
    pub remaining: Option<u64>,
}

/// Where a paged list resumes: the snapshot's resourceVersion and the last key served, as the
/// API server's token holds them (base64 of `{"v":"meta.k8s.io/v1","rv":N,"start":"ns/name\0"}`).
pub(crate) struct ContinueToken {
    pub(crate) rv: u64,
    pub(crate) namespace: String,
    pub(crate) name: String,
}

impl ContinueToken {
    pub(crate) fn encode(&self) -> String {
        use base64::Engine;
        let start = format!("{}/{}\u{0}", self.namespace, self.name);
        let json = json!({"v": "meta.k8s.io/v1", "rv": self.rv, "start": start});
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json.to_string())
    }

    pub(crate) fn decode(token: &str) -> Result<Self, ApiError> {
        use base64::Engine;
        let invalid = || {
            ApiError::bad_request(
                "continue key is not valid: the token was not issued by this server",
            )
        };
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.trim_end_matches('='))
            .map_err(|_| invalid())?;
        let value: Value = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
        let start = value["start"].as_str().ok_or_else(invalid)?;
        let start = start.strip_suffix('\u{0}').unwrap_or(start);
        let (namespace, name) = start.split_once('/').ok_or_else(invalid)?;
        Ok(ContinueToken {
            rv: value["rv"].as_u64().ok_or_else(invalid)?,
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }
}

/// Which part of an object a write may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The main endpoint: everything but a status subresource's status.
    Main,
    /// The `/status` subresource: only status.
    Status,
}

/// How a PATCH body is interpreted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/json-patch+json`.
    Json,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

/// Options of a delete.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `propagationPolicy`: `Background` (default), `Foreground` or `Orphan`.
    pub propagation: Option<String>,
}

/// Who writes and how: recorded in `metadata.managedFields`.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    /// Validate and answer, but persist nothing (`dryRun=All`).
    pub dry_run: bool,
    /// The field manager; empty means `unknown`.
    pub field_manager: String,
    /// A server-side apply takes fields other managers own instead of failing with a conflict.
    pub force: bool,
}

impl WriteOptions {
    /// A write by `manager`.
    pub fn by(manager: &str) -> Self {
        WriteOptions {
            field_manager: manager.into(),
            ..WriteOptions::default()
        }
    }

    /// The managedFields writer of a write to `part` of an object of `info`.
    pub(crate) fn writer(&self, info: &ResourceInfo, part: Part) -> managed::Writer {
        let manager = if self.field_manager.is_empty() {
            "unknown"
        } else {
            &self.field_manager
        };
        managed::Writer {
            manager: manager.into(),
            api_version: info.api_version(),
            subresource: (part == Part::Status).then_some("status"),
            now: now_rfc3339(),
        }
    }
}

/// The current time as RFC 3339 with second precision, as the API server writes timestamps.
pub fn now_rfc3339() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    k8s_openapi::jiff::Timestamp::from_second(seconds)
        .map(|t| t.to_string())
        .unwrap_or_default()
}
