//! The Gateway API router (`provider: gatewayapi:v1`, or `gatewayapi:v1beta1`): an HTTPRoute
//! `<apex>` attached to the Canary's `service.gatewayRefs` whose managed rules send traffic to
//! `<apex>-primary` and `<apex>-canary` by weight (A/B matches, mirroring and session affinity as
//! in the Istio router). Rules and filters the user put in an HTTPRoute that Serin adopts are
//! kept: Serin owns only the rules that route to the primary and canary Services. Weights are read
//! back only once every parent Gateway has accepted the route's current generation.

use crate::istio::merge_matches;
use crate::managed::{ActiveRoute, active_routes, istio_matches};
use crate::{Names, RouterError, custom_metadata, owner_reference};
use serde_json::{Map, Value, json};
use serin_core::plan::Routes;

/// Whether `canary` (its JSON form, with its provider filled in) routes with an HTTPRoute.
pub fn routes_by_http_route(canary: &Value) -> bool {
    canary["spec"]["provider"]
        .as_str()
        .is_some_and(|provider| provider.starts_with("gatewayapi"))
}

/// The Gateway API version a provider writes: `gatewayapi:v1beta1` keeps v1beta1, anything else v1.
pub fn api_version(canary: &Value) -> &'static str {
    match canary["spec"]["provider"].as_str() {
        Some("gatewayapi:v1beta1") => "gateway.networking.k8s.io/v1beta1",
        _ => "gateway.networking.k8s.io/v1",
    }
}

/// Translates one Istio-style string match (`exact`, `regex`) into a Gateway API header or query
/// parameter match; a `prefix` has no Gateway API form.
fn value_match(name: &str, condition: &Value, field: &str) -> Result<Value, RouterError> {
    if let Some(exact) = condition["exact"].as_str() {
        Ok(json!({"type": "Exact", "name": name, "value": exact}))
    } else if let Some(regex) = condition["regex"].as_str() {
        Ok(json!({"type": "RegularExpression", "name": name, "value": regex}))
    } else {
        Err(RouterError::UnsupportedMatch {
            field: format!("{field}.{name}"),
        })
    }
}

/// An Istio-style `HTTPMatchRequest` (`uri`, `headers`, `queryParams`, `method`) as an
/// `HTTPRouteMatch`.
fn route_match(condition: &Value) -> Result<Value, RouterError> {
    let mut translated = Map::new();
    let uri = &condition["uri"];
    let path = [
        ("exact", "Exact"),
        ("prefix", "PathPrefix"),
        ("regex", "RegularExpression"),
    ]
    .iter()
    .find_map(|(istio, gateway)| uri[*istio].as_str().map(|value| (*gateway, value)));
    if let Some((kind, value)) = path {
        translated.insert("path".into(), json!({"type": kind, "value": value}));
    }
    for (field, key) in [("headers", "headers"), ("queryParams", "queryParams")] {
        if let Some(conditions) = condition[field].as_object() {
            let entries = conditions
                .iter()
                .map(|(name, c)| value_match(name, c, field))
                .collect::<Result<Vec<_>, _>>()?;
            translated.insert(key.into(), json!(entries));
        }
    }
    if let Some(method) = condition["method"]["exact"].as_str() {
        translated.insert("method".into(), json!(method));
    }
    Ok(Value::Object(translated))
}

fn route_matches(conditions: &[Value]) -> Result<Vec<Value>, RouterError> {
    conditions.iter().map(route_match).collect()
}

/// A header modifier filter body (`set`, `add` as name/value lists, `remove`) from an Istio-style
/// header operation block, sorted by name as Flagger writes it.
fn header_modifier(operations: &Value) -> Option<Value> {
    let mut modifier = Map::new();
    for key in ["set", "add"] {
        if let Some(headers) = operations[key].as_object() {
            let mut list: Vec<Value> = headers
                .iter()
                .map(|(name, value)| json!({"name": name, "value": value}))
                .collect();
            list.sort_by_key(|entry| entry["name"].as_str().unwrap_or_default().to_string());
            modifier.insert(key.into(), json!(list));
        }
    }
    if let Some(remove) = operations["remove"].as_array() {
        modifier.insert("remove".into(), json!(remove));
    }
    (!modifier.is_empty()).then_some(Value::Object(modifier))
}

/// The filters of a managed rule: header modifiers, the rewrite, the service's mirrors and, while
/// the analysis mirrors, a copy of every request to the canary.
fn filters(canary: &Value, mirrored: bool) -> Vec<Value> {
    let names = Names::of(canary);
    let service = &canary["spec"]["service"];
    let mut filters = Vec::new();
    if let Some(request) = header_modifier(&service["headers"]["request"]) {
        filters.push(json!({"type": "RequestHeaderModifier", "requestHeaderModifier": request}));
    }
    if let Some(response) = header_modifier(&service["headers"]["response"]) {
        filters.push(json!({"type": "ResponseHeaderModifier", "responseHeaderModifier": response}));
    }
    let rewrite = &service["rewrite"];
    if rewrite.is_object() {
        let mut body = Map::new();
        if let Some(authority) = rewrite["authority"].as_str() {
            body.insert("hostname".into(), json!(authority));
        }
        if let Some(uri) = rewrite["uri"].as_str() {
            let path = match rewrite["type"].as_str() {
                Some("ReplaceFullPath") => {
                    json!({"type": "ReplaceFullPath", "replaceFullPath": uri})
                }
                _ => json!({"type": "ReplacePrefixMatch", "replacePrefixMatch": uri}),
            };
            body.insert("path".into(), path);
        }
        filters.push(json!({"type": "URLRewrite", "urlRewrite": body}));
    }
    for mirror in service["mirror"].as_array().into_iter().flatten() {
        filters.push(json!({"type": "RequestMirror", "requestMirror": mirror}));
    }
    if mirrored {
        let port = service["port"].as_i64().unwrap_or(80);
        let mut mirror = json!({"backendRef": {"name": names.canary, "port": port}});
        if let Some(weight) = canary["spec"]["analysis"]["mirrorWeight"].as_i64()
            && weight > 0
        {
            mirror["percent"] = json!(weight);
        }
        filters.push(json!({"type": "RequestMirror", "requestMirror": mirror}));
    }
    filters
}

fn backend(name: &str, port: i64, weight: i64) -> Value {
    json!({"group": "", "kind": "Service", "name": name, "port": port, "weight": weight})
}

/// The `Set-Cookie` response filter a backend carries to hand out `value`.
fn set_cookie_filter(value: String) -> Value {
    json!([{"type": "ResponseHeaderModifier",
            "responseHeaderModifier": {"add": [{"name": "Set-Cookie", "value": value}]}}])
}

/// The rules Serin manages for `routes`: the managed routes in force, then the weighted rules.
fn managed_rules(canary: &Value, routes: Routes) -> Result<Vec<Value>, RouterError> {
    let names = Names::of(canary);
    let service = &canary["spec"]["service"];
    let port = service["port"].as_i64().unwrap_or(80);
    let service_match: Vec<Value> = service["match"].as_array().cloned().unwrap_or_default();
    let mut rules = Vec::new();
    for active in active_routes(canary) {
        let matches = route_matches(&merge_matches(&istio_matches(&active), &service_match))?;
        let mut filters = filters(canary, false);
        let backends = match &active {
            ActiveRoute::Header { .. } => vec![backend(&names.canary, port, 100)],
            ActiveRoute::Mirror { percentage, .. } => {
                filters.push(json!({"type": "RequestMirror", "requestMirror": {
                    "backendRef": {"name": names.canary, "port": port}, "percent": percentage}}));
                vec![
                    backend(&names.primary, port, i64::from(routes.primary)),
                    backend(&names.canary, port, i64::from(routes.canary)),
                ]
            }
        };
        let mut rule = json!({"matches": matches, "backendRefs": backends});
        if !filters.is_empty() {
            rule["filters"] = json!(filters);
        }
        rules.push(rule);
    }
    rules.extend(weighted_rules(canary, routes)?);
    Ok(rules)
}

/// The rules that split traffic by weight (with A/B matches or session affinity).
fn weighted_rules(canary: &Value, routes: Routes) -> Result<Vec<Value>, RouterError> {
    let names = Names::of(canary);
    let service = &canary["spec"]["service"];
    let analysis = &canary["spec"]["analysis"];
    let port = service["port"].as_i64().unwrap_or(80);
    let (primary, canary_weight) = (i64::from(routes.primary), i64::from(routes.canary));
    let service_match: Vec<Value> = service["match"].as_array().cloned().unwrap_or_default();
    let mut timeouts = Map::new();
    for (field, key) in [("timeout", "request"), ("backendTimeout", "backendRequest")] {
        if let Some(value) = service[field].as_str() {
            timeouts.insert(key.into(), json!(value));
        }
    }
    let rule = |matches: &[Value], backends: Vec<Value>, filters: Vec<Value>| {
        let mut rule = Map::new();
        if !matches.is_empty() {
            rule.insert("matches".into(), json!(route_matches(matches)?));
        }
        if !filters.is_empty() {
            rule.insert("filters".into(), json!(filters));
        }
        rule.insert("backendRefs".into(), json!(backends));
        if !timeouts.is_empty() {
            rule.insert("timeouts".into(), Value::Object(timeouts.clone()));
        }
        Ok::<Value, RouterError>(Value::Object(rule))
    };
    let weighted = || {
        vec![
            backend(&names.primary, port, primary),
            backend(&names.canary, port, canary_weight),
        ]
    };
    let analysis_match: Vec<Value> = analysis["match"].as_array().cloned().unwrap_or_default();
    if !analysis_match.is_empty() {
        return Ok(vec![
            rule(
                &merge_matches(&analysis_match, &service_match),
                weighted(),
                filters(canary, false),
            )?,
            rule(
                &service_match,
                vec![backend(&names.primary, port, 100)],
                filters(canary, false),
            )?,
        ]);
    }
    let affinity = &analysis["sessionAffinity"];
    let status = &canary["status"];
    if affinity.is_object()
        && let Some(cookie) = status["sessionAffinityCookie"].as_str()
    {
        let max_age = affinity["maxAge"].as_i64().unwrap_or(86400);
        let mut backends = weighted();
        backends[1]["filters"] =
            set_cookie_filter(crate::istio::set_cookie(cookie, max_age, affinity));
        let mut rules = vec![rule(
            &crate::istio::carrying(cookie, &service_match),
            vec![
                backend(&names.primary, port, 0),
                backend(&names.canary, port, 100),
            ],
            filters(canary, false),
        )?];
        if let Some(primary_cookie) = status["primarySessionAffinityCookie"].as_str() {
            rules.push(rule(
                &crate::istio::carrying(primary_cookie, &service_match),
                vec![
                    backend(&names.primary, port, 100),
                    backend(&names.canary, port, 0),
                ],
                filters(canary, false),
            )?);
            let interval = crate::istio::interval_seconds(analysis);
            backends[0]["filters"] =
                set_cookie_filter(crate::istio::set_cookie(primary_cookie, interval, affinity));
        }
        rules.push(rule(&service_match, backends, filters(canary, false))?);
        return Ok(rules);
    }
    let mut rules = Vec::new();
    if affinity.is_object()
        && let Some(previous) = status["previousSessionAffinityCookie"].as_str()
    {
        let mut expire = filters(canary, false);
        expire.push(
            json!({"type": "ResponseHeaderModifier", "responseHeaderModifier": {
            "add": [{"name": "Set-Cookie", "value": format!("{previous}; Max-Age=-1")}]}}),
        );
        rules.push(rule(
            &crate::istio::carrying(previous, &service_match),
            weighted(),
            expire,
        )?);
    }
    rules.push(rule(
        &service_match,
        weighted(),
        filters(canary, routes.mirrored),
    )?);
    Ok(rules)
}

/// Whether `rule` is one Serin manages: it routes to the primary or the canary Service.
fn is_managed(rule: &Value, names: &Names) -> bool {
    rule["backendRefs"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|backend| {
            backend["name"] == names.primary.as_str() || backend["name"] == names.canary.as_str()
        })
}

/// The HTTPRoute `<apex>` with `routes`, keeping the rules of `existing` (an HTTPRoute the user
/// made, or the live one) that do not route to the primary or canary, after the managed ones.
pub fn http_route(
    canary: &Value,
    routes: Routes,
    existing: Option<&Value>,
) -> Result<Value, RouterError> {
    let names = Names::of(canary);
    let service = &canary["spec"]["service"];
    let parents = service["gatewayRefs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if parents.is_empty() {
        return Err(RouterError::NoGatewayRefs {
            service: names.apex,
            namespace: names.namespace,
        });
    }
    let mut rules = managed_rules(canary, routes)?;
    if let Some(existing) = existing {
        rules.extend(
            existing["spec"]["rules"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|rule| !is_managed(rule, &names))
                .cloned(),
        );
    }
    let mut spec = json!({"parentRefs": parents, "rules": rules});
    if let Some(hosts) = service["hosts"].as_array().filter(|h| !h.is_empty()) {
        spec["hostnames"] = json!(hosts);
    }
    let (labels, annotations) = custom_metadata(&service["apex"]);
    Ok(json!({
        "apiVersion": api_version(canary), "kind": "HTTPRoute",
        "metadata": {"name": names.apex, "namespace": names.namespace, "labels": labels,
                     "annotations": annotations, "ownerReferences": [owner_reference(canary)]},
        "spec": spec,
    }))
}

/// Whether the Gateways have taken the HTTPRoute's current generation.
#[derive(Clone, Debug, PartialEq)]
pub enum Acceptance {
    /// Every parent accepted the current generation: its weights are in force.
    Accepted,
    /// A parent has not reported on the current generation yet; `written` is when the route was
    /// last written (RFC 3339, from its managedFields), to tell a moment's lag from a Gateway that
    /// never answers.
    Pending {
        /// When the route was last written, if known.
        written: Option<String>,
        /// What is awaited, for the Canary's status.
        message: String,
    },
    /// A parent refused the route.
    Refused(String),
}

/// How far the Gateways in `route`'s parentRefs have accepted it.
pub fn acceptance(route: &Value) -> Acceptance {
    let name = route["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = route["metadata"]["namespace"].as_str().unwrap_or_default();
    let generation = route["metadata"]["generation"].as_i64().unwrap_or(0);
    let statuses = route["status"]["parents"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    for parent in route["spec"]["parentRefs"].as_array().into_iter().flatten() {
        let parent_name = parent["name"].as_str().unwrap_or_default();
        let parent_namespace = parent["namespace"].as_str().unwrap_or(namespace);
        // A Service parent (GAMMA) is accepted by the mesh rather than by a Gateway.
        let (parent_kind, question) = match parent["kind"].as_str() {
            Some("Service") => (
                "Service",
                "is the mesh's controller running, and does the Service exist?",
            ),
            _ => (
                "Gateway",
                "is the Gateway's controller running, and does a listener allow the route?",
            ),
        };
        let status = statuses.iter().find(|status| {
            let reference = &status["parentRef"];
            reference["name"] == parent_name
                && reference["namespace"].as_str().unwrap_or(namespace) == parent_namespace
        });
        let accepted = status.and_then(|status| {
            status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|condition| condition["type"] == "Accepted")
        });
        let current =
            |condition: &Value| condition["observedGeneration"].as_i64().unwrap_or(0) >= generation;
        match accepted {
            Some(condition) if condition["status"] == "True" && current(condition) => {}
            Some(condition) if condition["status"] != "True" && current(condition) => {
                return Acceptance::Refused(format!(
                    "HTTPRoute {name}.{namespace} is not accepted by {parent_kind} {parent_name}.{parent_namespace}: {} ({}); fix the {parent_kind} or service.gatewayRefs",
                    condition["message"].as_str().unwrap_or_default(),
                    condition["reason"].as_str().unwrap_or_default(),
                ));
            }
            _ => {
                let written = route["metadata"]["managedFields"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|entry| entry["subresource"].as_str().unwrap_or_default() != "status")
                    .filter_map(|entry| entry["time"].as_str())
                    .max()
                    .map(String::from);
                return Acceptance::Pending {
                    written,
                    message: format!(
                        "HTTPRoute {name}.{namespace} generation {generation} is not accepted by {parent_kind} {parent_name}.{parent_namespace} yet: {question}"
                    ),
                };
            }
        }
    }
    Acceptance::Accepted
}

/// The weights of a live HTTPRoute: the last managed rule with both the primary and the canary
/// backends (the weighted one).
pub fn get_routes(canary: &Value, route: &Value) -> Result<Routes, RouterError> {
    let names = Names::of(canary);
    let weight_of = |rule: &Value, name: &str| {
        rule["backendRefs"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|backend| backend["name"] == name)
            .map(|backend| backend["weight"].as_i64().unwrap_or(1) as i32)
    };
    let found = route["spec"]["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|rule| {
            let primary = weight_of(rule, &names.primary)?;
            let canary = weight_of(rule, &names.canary)?;
            let mirrored = rule["filters"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|filter| {
                    filter["type"] == "RequestMirror"
                        && filter["requestMirror"]["backendRef"]["name"] == names.canary.as_str()
                });
            Some(Routes {
                primary,
                canary,
                mirrored,
            })
        })
        .next_back();
    match found {
        Some(routes) if routes.primary != 0 || routes.canary != 0 => Ok(routes),
        _ => Err(RouterError::NoRoutes {
            service: names.apex,
            namespace: names.namespace,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canary(analysis: Value, service: Value) -> Value {
        let mut object = json!({"apiVersion": "serin.dev/v1beta1", "kind": "Canary",
            "metadata": {"name": "podinfo", "namespace": "test", "uid": "u1"},
            "spec": {"provider": "gatewayapi:v1", "targetRef": {"name": "podinfo"},
                     "service": {"port": 9898, "hosts": ["app.example.com"],
                                 "gatewayRefs": [{"name": "public", "namespace": "istio-system"}]},
                     "analysis": {"interval": "10s", "stepWeight": 10, "maxWeight": 50}}});
        for (key, value) in analysis.as_object().unwrap() {
            object["spec"]["analysis"][key] = value.clone();
        }
        for (key, value) in service.as_object().unwrap() {
            object["spec"]["service"][key] = value.clone();
        }
        object
    }

    fn routes(primary: i32, canary: i32) -> Routes {
        Routes {
            primary,
            canary,
            mirrored: false,
        }
    }

    #[test]
    fn a_weighted_route_attaches_to_the_gateways_with_the_hosts() {
        let object = canary(
            json!({}),
            json!({"timeout": "30s", "backendTimeout": "10s",
            "headers": {"request": {"set": {"x-b": "2", "x-a": "1"}}}}),
        );
        let route = http_route(&object, routes(80, 20), None).unwrap();
        assert_eq!(route["apiVersion"], "gateway.networking.k8s.io/v1");
        let spec = &route["spec"];
        assert_eq!(
            spec["parentRefs"],
            json!([{"name": "public", "namespace": "istio-system"}])
        );
        assert_eq!(spec["hostnames"], json!(["app.example.com"]));
        let rule = &spec["rules"][0];
        assert_eq!(
            rule["backendRefs"],
            json!([{"group": "", "kind": "Service", "name": "podinfo-primary", "port": 9898, "weight": 80},
                   {"group": "", "kind": "Service", "name": "podinfo-canary", "port": 9898, "weight": 20}])
        );
        assert_eq!(
            rule["timeouts"],
            json!({"request": "30s", "backendRequest": "10s"})
        );
        assert_eq!(
            rule["filters"][0]["requestHeaderModifier"]["set"],
            json!([{"name": "x-a", "value": "1"}, {"name": "x-b", "value": "2"}])
        );
        assert_eq!(get_routes(&object, &route).unwrap(), routes(80, 20));
    }

    #[test]
    fn ab_matches_cross_the_service_match_and_keep_a_primary_rule() {
        let object = canary(
            json!({"stepWeight": null, "maxWeight": null, "iterations": 3,
                   "match": [{"headers": {"x-canary": {"exact": "insider"}}}]}),
            json!({"match": [{"uri": {"prefix": "/api"}}]}),
        );
        let route = http_route(&object, routes(0, 100), None).unwrap();
        let rules = route["spec"]["rules"].as_array().unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(
            rules[0]["matches"],
            json!([{"path": {"type": "PathPrefix", "value": "/api"},
                    "headers": [{"type": "Exact", "name": "x-canary", "value": "insider"}]}])
        );
        assert_eq!(rules[1]["backendRefs"][0]["name"], "podinfo-primary");
        assert_eq!(get_routes(&object, &route).unwrap(), routes(0, 100));
        let prefix = canary(
            json!({"match": [{"headers": {"x-canary": {"prefix": "in"}}}]}),
            json!({}),
        );
        assert!(matches!(
            http_route(&prefix, routes(100, 0), None),
            Err(RouterError::UnsupportedMatch { .. })
        ));
    }

    #[test]
    fn the_users_own_rules_and_a_missing_gateway_are_handled() {
        let object = canary(json!({}), json!({}));
        let users = json!({"spec": {"rules": [
            {"matches": [{"path": {"type": "PathPrefix", "value": "/docs"}}],
             "backendRefs": [{"name": "docs", "port": 80}]},
            {"backendRefs": [{"name": "podinfo-primary", "port": 9898, "weight": 100}]}]}});
        let route = http_route(&object, routes(90, 10), Some(&users)).unwrap();
        let rules = route["spec"]["rules"].as_array().unwrap();
        assert_eq!(
            rules.len(),
            2,
            "the user's rule to podinfo-primary is replaced: {rules:?}"
        );
        assert_eq!(rules[1]["backendRefs"][0]["name"], "docs");
        let mut no_gateway = canary(json!({}), json!({}));
        no_gateway["spec"]["service"]["gatewayRefs"] = json!([]);
        let error = http_route(&no_gateway, routes(100, 0), None).unwrap_err();
        assert!(
            error.to_string().contains("set spec.service.gatewayRefs"),
            "{error}"
        );
    }

    #[test]
    fn weights_count_only_once_the_gateways_accepted_the_generation() {
        let object = canary(json!({}), json!({}));
        let mut route = http_route(&object, routes(100, 0), None).unwrap();
        route["metadata"]["generation"] = json!(2);
        route["metadata"]["managedFields"] = json!([
            {"manager": "serin", "operation": "Apply", "time": "2026-11-25T10:00:05Z"},
            {"manager": "gateway", "operation": "Update", "subresource": "status",
             "time": "2026-11-25T10:00:09Z"}]);
        let Acceptance::Pending { written, message } = acceptance(&route) else {
            panic!("pending expected");
        };
        assert_eq!(written.as_deref(), Some("2026-11-25T10:00:05Z"));
        assert!(
            message.contains("generation 2 is not accepted"),
            "{message}"
        );
        let accepted = |status: &str, generation: i64| {
            json!({"parents": [{"parentRef": {"name": "public", "namespace": "istio-system"},
                "conditions": [{"type": "Accepted", "status": status, "observedGeneration": generation,
                                "reason": "NotAllowedByListeners", "message": "no listener allows it"}]}]})
        };
        route["status"] = accepted("True", 1);
        assert!(matches!(acceptance(&route), Acceptance::Pending { .. }));
        route["status"] = accepted("True", 2);
        assert_eq!(acceptance(&route), Acceptance::Accepted);
        route["status"] = accepted("False", 2);
        let Acceptance::Refused(refused) = acceptance(&route) else {
            panic!("refused expected");
        };
        assert!(
            refused.contains("no listener allows it (NotAllowedByListeners)"),
            "{refused}"
        );
    }

    #[test]
    fn session_affinity_and_mirroring_follow_the_istio_router() {
        let object = canary(
            json!({"sessionAffinity": {"cookieName": "canary-cookie"}}),
            json!({}),
        );
        let mut pinned = object.clone();
        pinned["status"] = json!({"sessionAffinityCookie": "canary-cookie=abcdefghij"});
        let rules = http_route(&pinned, routes(70, 30), None).unwrap()["spec"]["rules"].clone();
        assert_eq!(rules.as_array().unwrap().len(), 2);
        assert_eq!(
            rules[0]["matches"][0]["headers"][0],
            json!({"type": "RegularExpression", "name": "Cookie", "value": ".*canary-cookie.*abcdefghij.*"})
        );
        assert_eq!(
            rules[1]["backendRefs"][1]["filters"][0]["responseHeaderModifier"]["add"][0]["value"],
            "canary-cookie=abcdefghij; Max-Age=86400"
        );
        let mut mirrored = routes(100, 0);
        mirrored.mirrored = true;
        let route = http_route(&object, mirrored, None).unwrap();
        assert_eq!(
            route["spec"]["rules"][0]["filters"][0]["requestMirror"]["backendRef"],
            json!({"name": "podinfo-canary", "port": 9898})
        );
        assert!(get_routes(&object, &route).unwrap().mirrored);
    }
}
