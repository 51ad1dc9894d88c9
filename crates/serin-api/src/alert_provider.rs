//! The `AlertProvider` resource: a chat service that receives release notifications.

use crate::metric_template::SecretReference;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A notification target (Slack, Microsoft Teams, Discord, Rocket.Chat, Google Chat).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "serin.dev",
    root = "AlertProviderDefinition",
    version = "v1beta1",
    kind = "AlertProvider",
    plural = "alertproviders",
    namespaced,
    status = "AlertProviderStatus",
    category = "all",
    doc = "AlertProvider is a chat webhook that receives the canary's alerts.",
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".spec.type"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AlertProviderSpec {
    /// `slack`, `msteams`, `discord`, `rocket` or `gchat`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Channel to post to (default `general`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// Display name of the sender (default `serin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Webhook URL; a Secret's `address` key overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// HTTP(S) proxy for the webhook calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<String>,
    /// Secret with key `address` (required) and optional `token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
}

/// Observed state of an AlertProvider (kept for Flagger compatibility).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct AlertProviderStatus {
    /// Conditions, currently not written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<crate::CanaryCondition>,
}

/// Alert provider types an AlertProvider may name.
pub const ALERT_PROVIDER_TYPES: [&str; 5] = ["slack", "msteams", "discord", "rocket", "gchat"];

crate::group::served_kind!(
    /// A chat webhook that receives release alerts.
    AlertProvider,
    AlertProviderSpec,
    AlertProviderStatus,
    "AlertProvider",
    "alertproviders"
);
