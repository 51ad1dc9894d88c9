//! Argo Rollouts' managed routes: `setHeaderRoute` sends requests carrying a header to the canary,
//! `setMirrorRoute` copies matching requests to it, while the weighted split goes on. Each names a
//! route listed in `analysis.managedRoutes`, whose order is their precedence.

use crate::mesh::StringMatch;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A route Serin may add to the routing objects during a release; listed first wins.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ManagedRoute {
    /// The route's name, as `setHeaderRoute` and `setMirrorRoute` steps name it.
    pub name: String,
}

/// Sends every request with a matching header to the canary; without `match`, removes the route.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetHeaderRoute {
    /// A name in `analysis.managedRoutes`.
    pub name: String,
    /// Header conditions; a request matching any one of them goes to the canary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#match: Option<Vec<HeaderRouteMatch>>,
}

/// One header condition of a header route.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeaderRouteMatch {
    /// The header's name.
    pub header_name: String,
    /// Its value: `exact`, `prefix` (Istio only) or `regex`.
    pub header_value: StringMatch,
}

/// Copies a percentage of the matching requests to the canary (their answers are dropped);
/// without `match`, removes the route.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetMirrorRoute {
    /// A name in `analysis.managedRoutes`.
    pub name: String,
    /// Percentage of the matching requests copied (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage: Option<i32>,
    /// Request conditions: within one entry all must hold, across entries any one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#match: Option<Vec<MirrorRouteMatch>>,
}

/// One condition of a mirror route.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MirrorRouteMatch {
    /// The request method, e.g. `{exact: GET}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<StringMatch>,
    /// The request path, e.g. `{prefix: /api}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<StringMatch>,
    /// Header conditions by header name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, StringMatch>>,
}
