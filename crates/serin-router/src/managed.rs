//! The managed routes in force during a release: for each name in `analysis.managedRoutes`, the
//! last `setHeaderRoute` or `setMirrorRoute` step naming it that the release has passed. They are
//! built from the Canary and the status the tick writes, so a promotion or a rollback (a phase
//! other than Progressing or WaitingPromotion) removes them with the same write that moves the
//! weights.

use serde_json::{Value, json};
use serin_api::mesh::StringMatch;
use serin_api::{CanaryStep, HeaderRouteMatch, MirrorRouteMatch};

/// A managed route to put before the weighted route.
#[derive(Clone, Debug, PartialEq)]
pub enum ActiveRoute {
    /// Requests matching any header condition go to the canary.
    Header {
        /// The route's name.
        name: String,
        /// Its header conditions.
        matches: Vec<HeaderRouteMatch>,
    },
    /// Matching requests take the weighted split and a copy of `percentage` of them goes to the canary.
    Mirror {
        /// The route's name.
        name: String,
        /// Percentage copied.
        percentage: i32,
        /// Its request conditions.
        matches: Vec<MirrorRouteMatch>,
    },
}

impl ActiveRoute {
    /// The route's name.
    pub fn name(&self) -> &str {
        match self {
            ActiveRoute::Header { name, .. } | ActiveRoute::Mirror { name, .. } => name,
        }
    }
}

/// The managed routes of `canary` (its JSON form, with the status this tick writes), in the order
/// of `analysis.managedRoutes`.
pub fn active_routes(canary: &Value) -> Vec<ActiveRoute> {
    let status = &canary["status"];
    let in_flight = matches!(
        status["phase"].as_str(),
        Some("Progressing" | "WaitingPromotion")
    );
    let Some(passed) = status["currentStepIndex"].as_u64().filter(|_| in_flight) else {
        return Vec::new();
    };
    let analysis = &canary["spec"]["analysis"];
    let steps: Vec<CanaryStep> =
        serde_json::from_value(analysis["steps"].clone()).unwrap_or_default();
    let passed = &steps[..(passed as usize).min(steps.len())];
    let mut active = Vec::new();
    for route in analysis["managedRoutes"].as_array().into_iter().flatten() {
        let Some(name) = route["name"].as_str() else {
            continue;
        };
        let latest = passed.iter().rev().find_map(|step| {
            if let Some(header) = step.set_header_route.as_ref().filter(|h| h.name == name) {
                let matches = header.r#match.clone().unwrap_or_default();
                return Some((!matches.is_empty()).then(|| ActiveRoute::Header {
                    name: name.to_string(),
                    matches,
                }));
            }
            let mirror = step.set_mirror_route.as_ref().filter(|m| m.name == name)?;
            let matches = mirror.r#match.clone().unwrap_or_default();
            Some((!matches.is_empty()).then(|| ActiveRoute::Mirror {
                name: name.to_string(),
                percentage: mirror.percentage.unwrap_or(100),
                matches,
            }))
        });
        if let Some(Some(route)) = latest {
            active.push(route);
        }
    }
    active
}

fn string_match(m: &StringMatch) -> Value {
    serde_json::to_value(m).unwrap_or(Value::Null)
}

/// The Istio-style match conditions of a route: one per header condition, or one per mirror
/// condition (its method, path as `uri`, and headers together).
pub fn istio_matches(route: &ActiveRoute) -> Vec<Value> {
    match route {
        ActiveRoute::Header { matches, .. } => matches
            .iter()
            .map(|m| json!({"headers": {m.header_name.clone(): string_match(&m.header_value)}}))
            .collect(),
        ActiveRoute::Mirror { matches, .. } => matches
            .iter()
            .map(|m| {
                let mut condition = json!({});
                if let Some(method) = &m.method {
                    condition["method"] = string_match(method);
                }
                if let Some(path) = &m.path {
                    condition["uri"] = string_match(path);
                }
                if let Some(headers) = m.headers.as_ref().filter(|h| !h.is_empty()) {
                    condition["headers"] = json!(
                        headers
                            .iter()
                            .map(|(k, v)| (k.clone(), string_match(v)))
                            .collect::<serde_json::Map<_, _>>()
                    );
                }
                condition
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canary(phase: &str, index: u64) -> Value {
        json!({"spec": {"analysis": {
            "managedRoutes": [{"name": "testers"}, {"name": "copy"}],
            "steps": [
                {"setWeight": 10},
                {"setHeaderRoute": {"name": "testers", "match": [
                    {"headerName": "x-tester", "headerValue": {"exact": "yes"}}]}},
                {"setMirrorRoute": {"name": "copy", "percentage": 50, "match": [
                    {"method": {"exact": "GET"}, "path": {"prefix": "/api"}}]}},
                {"pause": {}},
                {"setHeaderRoute": {"name": "testers"}},
                {"pause": {}}
            ]}},
            "status": {"phase": phase, "currentStepIndex": index}})
    }

    #[test]
    fn a_route_is_in_force_from_its_step_until_a_later_step_removes_it_or_the_release_ends() {
        assert!(active_routes(&canary("Progressing", 1)).is_empty());
        let at_pause = active_routes(&canary("Progressing", 3));
        assert_eq!(
            at_pause.iter().map(ActiveRoute::name).collect::<Vec<_>>(),
            ["testers", "copy"]
        );
        assert_eq!(
            istio_matches(&at_pause[0]),
            vec![json!({"headers": {"x-tester": {"exact": "yes"}}})]
        );
        assert_eq!(
            istio_matches(&at_pause[1]),
            vec![json!({"method": {"exact": "GET"}, "uri": {"prefix": "/api"}})]
        );
        let removed = active_routes(&canary("Progressing", 5));
        assert_eq!(
            removed.iter().map(ActiveRoute::name).collect::<Vec<_>>(),
            ["copy"]
        );
        assert!(active_routes(&canary("Promoting", 3)).is_empty());
        assert!(active_routes(&canary("Failed", 3)).is_empty());
    }

    fn routed(provider: &str) -> Value {
        let mut object = canary("Progressing", 3);
        object["apiVersion"] = json!("serin.dev/v1beta1");
        object["metadata"] = json!({"name": "podinfo", "namespace": "test", "uid": "u1"});
        object["spec"]["provider"] = json!(provider);
        object["spec"]["targetRef"] = json!({"name": "podinfo"});
        object["spec"]["service"] =
            json!({"port": 9898, "gatewayRefs": [{"name": "public", "namespace": "gw"}]});
        object
    }

    #[test]
    fn istio_puts_the_header_and_mirror_routes_before_the_weighted_one() {
        let object = routed("istio");
        let weights = crate::istio::Routes {
            primary: 80,
            canary: 20,
            mirrored: false,
        };
        let spec = crate::istio::set_routes(&object, weights).unwrap();
        let http = spec["http"].as_array().unwrap();
        assert_eq!(http.len(), 3);
        assert_eq!(http[0]["name"], "testers");
        assert_eq!(
            http[0]["match"],
            json!([{"headers": {"x-tester": {"exact": "yes"}}}])
        );
        assert_eq!(
            http[0]["route"],
            json!([{"destination": {"host": "podinfo-canary"}, "weight": 100}])
        );
        assert_eq!(http[1]["name"], "copy");
        assert_eq!(http[1]["mirror"], json!({"host": "podinfo-canary"}));
        assert_eq!(http[1]["mirrorPercentage"], json!({"value": 50}));
        assert_eq!(http[1]["route"][1]["weight"], 20);
        assert!(http[2]["match"].is_null());
        // The step's weights are read back from the weighted route, not from the managed ones.
        assert_eq!(
            crate::istio::get_routes(&object, &json!({"spec": spec})).unwrap(),
            weights
        );
    }

    #[test]
    fn the_gateway_api_gets_the_same_routes_as_rules() {
        let object = routed("gatewayapi:v1");
        let weights = crate::istio::Routes {
            primary: 80,
            canary: 20,
            mirrored: false,
        };
        let route = crate::gateway_api::http_route(&object, weights, None).unwrap();
        let rules = route["spec"]["rules"].as_array().unwrap();
        assert_eq!(rules.len(), 3);
        assert_eq!(
            rules[0]["matches"],
            json!([{"headers": [{"type": "Exact", "name": "x-tester", "value": "yes"}]}])
        );
        assert_eq!(rules[0]["backendRefs"].as_array().unwrap().len(), 1);
        assert_eq!(rules[0]["backendRefs"][0]["name"], "podinfo-canary");
        assert_eq!(rules[1]["matches"][0]["method"], "GET");
        assert_eq!(
            rules[1]["filters"],
            json!([{"type": "RequestMirror", "requestMirror": {
                "backendRef": {"name": "podinfo-canary", "port": 9898}, "percent": 50}}])
        );
        assert_eq!(rules[2]["backendRefs"][1]["weight"], 20);
    }
}
