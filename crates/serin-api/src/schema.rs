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

/// Adds `canaryAnalysis`, Flagger's deprecated spelling of `analysis`, to the Canary spec's schema,
/// so an API server keeps the field (the Rust type folds it into `analysis` when it is read).
pub fn with_canary_analysis_alias(schema: &mut Schema) {
    let Some(properties) = schema.get_mut("properties").and_then(|p| p.as_object_mut()) else {
        return;
    };
    let Some(mut alias) = properties.get("analysis").cloned() else {
        return;
    };
    if let Some(fields) = alias.as_object_mut() {
        fields.insert(
            "description".into(),
            "Deprecated alias of `analysis`, used only when `analysis` is absent.".into(),
        );
    }
    properties.insert("canaryAnalysis".into(), alias);
}
