//! A reference from a Canary to an object that may live in another namespace (a MetricTemplate,
//! an AlertProvider, an upstream).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Reference to an object that may live in another namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CrossNamespaceObjectReference {
    /// API version of the referent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of the referent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name of the referent.
    pub name: String,
    /// Namespace of the referent (default: the Canary's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl CrossNamespaceObjectReference {
    /// The referent's namespace: its own, else `default` (the Canary's).
    pub fn namespace_or<'a>(&'a self, default: &'a str) -> &'a str {
        self.namespace.as_deref().unwrap_or(default)
    }
}
