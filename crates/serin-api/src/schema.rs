//! Schema helpers for fields whose shape belongs to another API (Istio, Gateway API).

use schemars::{Schema, SchemaGenerator, json_schema};

/// An object whose fields are kept as given, without a schema of their own.
pub fn free_form_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// A list of objects whose fields are kept as given.
pub fn free_form_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true }
    })
}
