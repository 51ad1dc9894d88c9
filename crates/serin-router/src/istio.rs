//! Istio objects of a Canary: the two DestinationRules and the VirtualService, weights written into
//! its routes and read back (the VirtualService is where the current step lives).

use crate::managed::{ActiveRoute, active_routes, istio_matches};
use crate::{Names, RouterError, custom_metadata, owner_reference};
use serde_json::{Map, Value, json};
pub use serin_core::plan::Routes;

/// The API version Flagger writes Istio objects with (served by every supported Istio).
pub const ISTIO_API_VERSION: &str = "networking.istio.io/v1beta1";

/// `[<svc>-canary, <svc>-primary]` DestinationRules with the service's `trafficPolicy`.
pub fn destination_rules(canary: &Value) -> [Value; 2] {
    let names = Names::of(canary);
    let policy = &canary["spec"]["service"]["trafficPolicy"];
    let rule = |host: &str| {
        let mut spec = json!({"host": host});
        if !policy.is_null() {
            spec["trafficPolicy"] = policy.clone();
        }
        json!({
            "apiVersion": ISTIO_API_VERSION, "kind": "DestinationRule",
            "metadata": {"name": host, "namespace": names.namespace,
                         "ownerReferences": [owner_reference(canary)]},
            "spec": spec,
        })
    };
    [rule(&names.canary), rule(&names.primary)]
}

fn destination(host: &str, weight: i64, port: Option<i64>) -> Value {
    let mut destination = json!({"host": host});
    if let Some(port) = port {
        destination["port"] = json!({"number": port});
    }
    json!({"destination": destination, "weight": weight})
}

/// Flagger's merge of the analysis match into the service match: the analysis conditions alone
/// when the service has none; otherwise each service condition with its `headers` and
/// `sourceLabels` replaced by those of each analysis condition that has them.
pub fn merge_matches(analysis: &[Value], service: &[Value]) -> Vec<Value> {
    if service.is_empty() {
        return analysis.to_vec();
    }
    let mut merged = Vec::new();
    for condition in analysis {
        for base in service {
            let mut copy = base.clone();
            for key in ["headers", "sourceLabels"] {
                if let Some(value) = condition.get(key) {
                    copy[key] = value.clone();
                }
            }
            merged.push(copy);
        }
    }
    merged
}

/// The VirtualService spec with the primary at `primary` and the canary at `canary` percent,
/// mirroring to the canary when `mirrored`.
fn spec(
    canary_object: &Value,
    primary: i64,
    canary: i64,
    mirrored: bool,
) -> Result<Value, RouterError> {
    let names = Names::of(canary_object);
    let service = &canary_object["spec"]["service"];
    let analysis = &canary_object["spec"]["analysis"];
    let delegation = service["delegation"].as_bool() == Some(true);
    let mut hosts: Vec<Value> = service["hosts"].as_array().cloned().unwrap_or_default();
    let gateways: Vec<Value> = service["gateways"]
        .as_array()
        .filter(|g| !g.is_empty())
        .cloned()
        .unwrap_or_else(|| vec![json!("mesh")]);
    if delegation
        && (!hosts.is_empty()
            || service["gateways"]
                .as_array()
                .is_some_and(|g| !g.is_empty()))
    {
        return Err(RouterError::DelegationWithHosts {
            service: names.apex,
            namespace: names.namespace,
        });
    }
    if !hosts.iter().any(|h| h == names.apex.as_str() || h == "*") {
        hosts.push(json!(names.apex));
    }
    let port = (service["portDiscovery"].as_bool() == Some(true)
        && (gateways.first().is_some_and(|g| g != "mesh") || delegation))
        .then(|| service["port"].as_i64())
        .flatten();
    let weighted = vec![
        destination(&names.primary, primary, port),
        destination(&names.canary, canary, port),
    ];
    let service_match: Vec<Value> = service["match"].as_array().cloned().unwrap_or_default();
    let route = |matches: &[Value], destinations: Vec<Value>| {
        let mut http = Map::new();
        if !matches.is_empty() {
            http.insert("match".into(), json!(matches));
        }
        for key in ["rewrite", "timeout", "retries", "corsPolicy", "headers"] {
            if let Some(value) = service.get(key).filter(|v| !v.is_null()) {
                http.insert(key.into(), value.clone());
            }
        }
        http.insert("route".into(), json!(destinations));
        Value::Object(http)
    };
    let analysis_match: Vec<Value> = analysis["match"].as_array().cloned().unwrap_or_default();
    let mut http = if analysis_match.is_empty() {
        vec![route(&service_match, weighted)]
    } else {
        vec![
            route(&merge_matches(&analysis_match, &service_match), weighted),
            route(
                &service_match,
                vec![destination(&names.primary, primary, port)],
            ),
        ]
    };
    if analysis_match.is_empty() && analysis["sessionAffinity"].is_object() {
        http = affinity_routes(
            canary_object,
            &service_match,
            &route,
            [
                destination(&names.primary, primary, port),
                destination(&names.canary, canary, port),
            ],
        )
        .unwrap_or(http);
    }
    if mirrored {
        http[0]["mirror"] = json!({"host": names.canary});
        if let Some(weight) = analysis["mirrorWeight"].as_i64().filter(|w| *w > 0) {
            http[0]["mirrorPercentage"] = json!({"value": weight});
        }
    }
    let managed = active_routes(canary_object);
    let mut routes = Vec::with_capacity(managed.len() + http.len());
    for active in &managed {
        let matches = merge_matches(&istio_matches(active), &service_match);
        let mut rule = match active {
            ActiveRoute::Header { .. } => {
                route(&matches, vec![destination(&names.canary, 100, port)])
            }
            ActiveRoute::Mirror { percentage, .. } => {
                let mut rule = route(
                    &matches,
                    vec![
                        destination(&names.primary, primary, port),
                        destination(&names.canary, canary, port),
                    ],
                );
                let mut mirror = json!({"host": names.canary});
                if let Some(port) = port {
                    mirror["port"] = json!({"number": port});
                }
                rule["mirror"] = mirror;
                rule["mirrorPercentage"] = json!({"value": percentage});
                rule
            }
        };
        rule["name"] = json!(active.name());
        routes.push(rule);
    }
    routes.append(&mut http);
    let http = routes;
    let (hosts, gateways) = if delegation {
        (Vec::new(), Vec::new())
    } else {
        (hosts, gateways)
    };
    Ok(json!({"hosts": hosts, "gateways": gateways, "http": http}))
}

/// `Set-Cookie` for `cookie` (`name=value`) with `max_age` and the attributes of `affinity`, as
/// Flagger writes it.
pub(crate) fn set_cookie(cookie: &str, max_age: i64, affinity: &Value) -> String {
    let mut text = format!("{cookie}; Max-Age={max_age}");
    if let Some(domain) = affinity["domain"].as_str() {
        text.push_str(&format!("; Domain={domain}"));
    }
    if affinity["httpOnly"] == json!(true) {
        text.push_str("; HttpOnly");
    }
    if affinity["partitioned"] == json!(true) {
        text.push_str("; Partitioned");
    }
    if let Some(path) = affinity["path"].as_str() {
        text.push_str(&format!("; Path={path}"));
    }
    if let Some(same_site) = affinity["sameSite"].as_str() {
        text.push_str(&format!("; SameSite={same_site}"));
    }
    if affinity["secure"] == json!(true) {
        text.push_str("; Secure");
    }
    text
}

/// The analysis interval in seconds (a minute when absent or unreadable): how long the primary's
/// cookie lasts, since it is handed out again at every step.
pub(crate) fn interval_seconds(analysis: &Value) -> i64 {
    serin_api::duration::parse_go_duration(analysis["interval"].as_str().unwrap_or("1m"))
        .map_or(60, |interval| interval.as_secs() as i64)
}

/// The match of requests carrying `cookie` (`name=value`), within the service's own match.
pub(crate) fn carrying(cookie: &str, service_match: &[Value]) -> Vec<Value> {
    let (name, value) = cookie.split_once('=').unwrap_or((cookie, ""));
    let condition = json!({"headers": {"Cookie": {"regex": format!(".*{name}.*{value}.*")}}});
    merge_matches(&[condition], service_match)
}

/// The session-affinity rules (Flagger's): while the canary has a cookie, requests carrying it go
/// to the canary and the weighted route hands it out with the canary's responses (and the primary
/// cookie with the primary's); once the run is over, requests still carrying the previous canary
/// cookie get it expired. `None` when there is no cookie to route by.
fn affinity_routes(
    canary_object: &Value,
    service_match: &[Value],
    route: &dyn Fn(&[Value], Vec<Value>) -> Value,
    [mut primary, mut canary]: [Value; 2],
) -> Option<Vec<Value>> {
    let status = &canary_object["status"];
    let analysis = &canary_object["spec"]["analysis"];
    let affinity = &analysis["sessionAffinity"];
    let with_weight = |destination: &Value, weight: i64| {
        let mut destination = destination.clone();
        destination["weight"] = json!(weight);
        if let Some(fields) = destination.as_object_mut() {
            fields.remove("headers");
        }
        destination
    };
    if let Some(cookie) = status["sessionAffinityCookie"].as_str() {
        let max_age = affinity["maxAge"].as_i64().unwrap_or(86400);
        let pinned_to_canary = route(
            &carrying(cookie, service_match),
            vec![with_weight(&primary, 0), with_weight(&canary, 100)],
        );
        canary["headers"] =
            json!({"response": {"add": {"Set-Cookie": set_cookie(cookie, max_age, affinity)}}});
        let mut rules = vec![pinned_to_canary];
        if let Some(primary_cookie) = status["primarySessionAffinityCookie"].as_str() {
            rules.push(route(
                &carrying(primary_cookie, service_match),
                vec![with_weight(&primary, 100), with_weight(&canary, 0)],
            ));
            let interval = interval_seconds(analysis);
            primary["headers"] = json!({"response": {"add": {
                "Set-Cookie": set_cookie(primary_cookie, interval, affinity)}}});
        }
        rules.push(route(service_match, vec![primary, canary]));
        return Some(rules);
    }
    let previous = status["previousSessionAffinityCookie"].as_str()?;
    let mut expire = route(
        &carrying(previous, service_match),
        vec![primary.clone(), canary.clone()],
    );
    expire["headers"]["response"]["add"]["Set-Cookie"] = json!(format!("{previous}; Max-Age=-1"));
    Some(vec![expire, route(service_match, vec![primary, canary])])
}

/// The VirtualService `<svc>` routing everything to the primary (weights 100/0).
pub fn virtual_service(canary: &Value) -> Result<Value, RouterError> {
    let names = Names::of(canary);
    let (labels, annotations) = custom_metadata(&canary["spec"]["service"]["apex"]);
    Ok(json!({
        "apiVersion": ISTIO_API_VERSION, "kind": "VirtualService",
        "metadata": {"name": names.apex, "namespace": names.namespace, "labels": labels,
                     "annotations": annotations, "ownerReferences": [owner_reference(canary)]},
        "spec": spec(canary, 100, 0, false)?,
    }))
}

/// The VirtualService spec for a step: the decision core's weights and mirroring.
pub fn set_routes(canary: &Value, routes: Routes) -> Result<Value, RouterError> {
    spec(
        canary,
        routes.primary.into(),
        routes.canary.into(),
        routes.mirrored,
    )
}

/// Reads the weights back from a live VirtualService (its JSON form): the last http route that
/// sends to the canary.
pub fn get_routes(canary: &Value, virtual_service: &Value) -> Result<Routes, RouterError> {
    let names = Names::of(canary);
    let qualified = |host: &str, short: &str| {
        host == short || host.starts_with(&format!("{short}.{}", names.namespace))
    };
    let mut found = None;
    for http in virtual_service["spec"]["http"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let destinations = http["route"].as_array().map_or(&[][..], Vec::as_slice);
        let weight_of = |short: &str| {
            destinations
                .iter()
                .find(|d| {
                    d["destination"]["host"]
                        .as_str()
                        .is_some_and(|h| qualified(h, short))
                })
                .map(|d| d["weight"].as_i64().unwrap_or(0) as i32)
        };
        if let Some(canary_weight) = weight_of(&names.canary) {
            found = Some(Routes {
                primary: weight_of(&names.primary).unwrap_or(0),
                canary: canary_weight,
                mirrored: http["mirror"]["host"]
                    .as_str()
                    .is_some_and(|h| !h.is_empty()),
            });
        }
    }
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

    fn canary(status: Value) -> Value {
        json!({"apiVersion": "serin.dev/v1beta1", "kind": "Canary",
               "metadata": {"name": "podinfo", "namespace": "test", "uid": "u1"},
               "spec": {"targetRef": {"name": "podinfo"}, "service": {"port": 9898},
                        "analysis": {"interval": "15s", "stepWeight": 10, "maxWeight": 30,
                                     "sessionAffinity": {"cookieName": "canary-flagger-cookie",
                                                         "primaryCookieName": "primary-flagger-cookie",
                                                         "maxAge": 3600, "path": "/", "httpOnly": true}}},
               "status": status})
    }

    fn routes(primary: i32, canary: i32) -> Routes {
        Routes {
            primary,
            canary,
            mirrored: false,
        }
    }

    #[test]
    fn a_virtual_service_built_from_the_routed_status_is_the_one_built_from_the_whole_status() {
        let status: serin_api::CanaryStatus = serde_json::from_value(json!({
            "phase": "Progressing", "currentStepIndex": 1, "canaryWeight": 10,
            "failedChecks": 2, "iterations": 3, "lastTickTime": "2026-01-01T00:00:00Z",
            "sessionAffinityCookie": "canary-flagger-cookie=abcdefghij",
            "primarySessionAffinityCookie": "primary-flagger-cookie=klmnopqrst",
            "previousSessionAffinityCookie": "canary-flagger-cookie=zyxwvutsrq",
            "conditions": [{"type": "Promoted", "status": "Unknown", "reason": "Progressing",
                            "message": "New revision detected"}]}))
        .unwrap();
        let whole = canary(serde_json::to_value(&status).unwrap());
        let routed = canary(crate::routed_status(&status));
        assert_eq!(
            routed["status"].as_object().unwrap().len(),
            5,
            "{}",
            routed["status"]
        );
        assert_eq!(
            set_routes(&routed, routes(90, 10)).unwrap(),
            set_routes(&whole, routes(90, 10)).unwrap()
        );
        assert_eq!(
            virtual_service(&routed).unwrap(),
            virtual_service(&whole).unwrap()
        );
    }

    #[test]
    fn cookies_pin_users_to_the_side_that_served_them_while_weights_move() {
        let object = canary(json!({
            "sessionAffinityCookie": "canary-flagger-cookie=abcdefghij",
            "primarySessionAffinityCookie": "primary-flagger-cookie=klmnopqrst"}));
        let spec = set_routes(&object, routes(90, 10)).unwrap();
        let http = spec["http"].as_array().unwrap();
        assert_eq!(http.len(), 3);
        assert_eq!(
            http[0]["match"],
            json!([{"headers": {"Cookie": {"regex": ".*canary-flagger-cookie.*abcdefghij.*"}}}])
        );
        assert_eq!(http[0]["route"][0]["weight"], 0);
        assert_eq!(http[0]["route"][1]["weight"], 100);
        assert_eq!(http[1]["route"][0]["weight"], 100);
        assert_eq!(http[1]["route"][1]["weight"], 0);
        assert_eq!(
            http[2]["route"][1]["headers"]["response"]["add"]["Set-Cookie"],
            "canary-flagger-cookie=abcdefghij; Max-Age=3600; HttpOnly; Path=/"
        );
        assert_eq!(
            http[2]["route"][0]["headers"]["response"]["add"]["Set-Cookie"],
            "primary-flagger-cookie=klmnopqrst; Max-Age=15; HttpOnly; Path=/"
        );
        // The weights of the step are read from the weighted rule, the last one.
        assert_eq!(
            get_routes(&object, &json!({"spec": spec})).unwrap(),
            routes(90, 10)
        );
    }

    #[test]
    fn after_the_run_the_previous_canary_cookie_is_expired() {
        let object =
            canary(json!({"previousSessionAffinityCookie": "canary-flagger-cookie=abcdefghij"}));
        let spec = set_routes(&object, routes(100, 0)).unwrap();
        let http = spec["http"].as_array().unwrap();
        assert_eq!(http.len(), 2);
        assert_eq!(
            http[0]["headers"]["response"]["add"]["Set-Cookie"],
            "canary-flagger-cookie=abcdefghij; Max-Age=-1"
        );
        assert_eq!(http[0]["route"][0]["weight"], 100);
        assert!(http[1]["match"].is_null());
        assert_eq!(
            get_routes(&object, &json!({"spec": spec})).unwrap(),
            routes(100, 0)
        );
        // Without any cookie yet, the route is the plain weighted one.
        let fresh = set_routes(&canary(json!({})), routes(100, 0)).unwrap();
        assert_eq!(fresh["http"].as_array().unwrap().len(), 1);
    }
}
