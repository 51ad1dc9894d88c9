//! Istio routing as a pure function: given the VirtualServices and DestinationRules in force and one
//! HTTP request, which destination gets it and with what rewrite, headers, timeout, retries, fault
//! and mirror. The mesh proxy does the I/O; the choices live here so they can be tested one by one.
//!
//! Semantics follow Istio's (`docs/sandbox.md` lists the subset): hosts with short names expanded in
//! the object's namespace, the `mesh` gateway (gateway pods use [`Scope::Gateways`], see
//! [`crate::gateway_route`]), ordered `http[]` routes where the first matching entry wins (OR
//! across match entries, AND inside one), anchored regexes, weights as shares of their sum with
//! zero-weight destinations dropped, subsets from DestinationRules, and one level of delegation
//! ([`effective_routes`]).

mod http_routes;
mod matching;
mod model;
mod virtual_services;

pub(crate) use http_routes::*;
pub use matching::*;
pub use model::*;
pub use virtual_services::*;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use serde_json::json;
    use std::time::Duration;

    fn request(authority: &str, path: &str, headers: &[(&str, &str)]) -> Request {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        Request {
            method: "GET".into(),
            authority: authority.into(),
            path: path.into(),
            query: query.into(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn flagger_vs(primary: u64, canary: u64) -> Value {
        json!({"metadata": {"name": "podinfo", "namespace": "test"},
            "spec": {"hosts": ["podinfo"], "gateways": ["mesh"], "http": [
                {"match": [{"headers": {"x-canary": {"exact": "insider"}}},
                           {"headers": {"cookie": {"regex": ".*canary=always.*"}}}],
                 "route": [{"destination": {"host": "podinfo-canary"}}]},
                {"route": [
                    {"destination": {"host": "podinfo-primary"}, "weight": primary},
                    {"destination": {"host": "podinfo-canary"}, "weight": canary,
                     "headers": {"response": {"add": {"Set-Cookie": "flagger-cookie=abc; Max-Age=60"}}}}],
                 "retries": {"attempts": 3, "perTryTimeout": "1s", "retryOn": "gateway-error,connect-failure"},
                 "timeout": "5s"}]}})
    }

    #[test]
    fn istio_durations_are_go_durations() {
        assert_eq!(parse_duration("0.5s"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("5"), None);
        assert_eq!(parse_duration("-1s"), None);
    }

    fn forward(decision: Decision) -> Forward {
        match decision {
            Decision::Forward(f) => *f,
            other => panic!("expected a forward, got {other:?}"),
        }
    }

    fn table(vs: Value) -> RouteTable {
        RouteTable {
            virtual_services: vec![vs],
            ..RouteTable::default()
        }
    }

    #[test]
    fn every_spelling_of_a_service_reaches_its_virtual_service() {
        let table = table(flagger_vs(100, 0));
        for authority in [
            "podinfo",
            "podinfo:9898",
            "podinfo.test",
            "podinfo.test:9898",
            "podinfo.test.svc",
            "podinfo.test.svc.cluster.local:9898",
        ] {
            let f = forward(route(&table, &request(authority, "/", &[]), "test", 0.5));
            assert_eq!(
                f.destination.host, "podinfo-primary.test.svc.cluster.local",
                "{authority}"
            );
            assert_eq!(f.routed_by.as_deref(), Some("test/podinfo"));
        }
        // A client in another namespace saying `podinfo` means its own namespace's service.
        let f = forward(route(&table, &request("podinfo", "/", &[]), "other", 0.5));
        assert_eq!(f.destination.host, "podinfo.other.svc.cluster.local");
        assert_eq!(f.routed_by, None);
        assert_eq!(f.retries, RetryPolicy::mesh_default());
    }

    #[test]
    fn weights_split_by_the_pick_and_zero_weight_gets_nothing() {
        let split = table(flagger_vs(80, 20));
        let host_at = |pick: f64| {
            forward(route(
                &split,
                &request("podinfo.test", "/", &[]),
                "test",
                pick,
            ))
            .destination
            .host
        };
        assert_eq!(host_at(0.0), "podinfo-primary.test.svc.cluster.local");
        assert_eq!(host_at(0.79), "podinfo-primary.test.svc.cluster.local");
        assert_eq!(host_at(0.80), "podinfo-canary.test.svc.cluster.local");
        assert_eq!(host_at(0.999), "podinfo-canary.test.svc.cluster.local");
        let all_primary = table(flagger_vs(100, 0));
        let f = forward(route(
            &all_primary,
            &request("podinfo.test", "/", &[]),
            "test",
            0.999,
        ));
        assert_eq!(f.destination.host, "podinfo-primary.test.svc.cluster.local");
        assert_eq!(f.timeout, Some(Duration::from_secs(5)));
        assert_eq!(f.retries.attempts, 3);
        assert!(f.retries.retries(Some(503)) && f.retries.retries(None));
        assert!(!f.retries.retries(Some(500)), "500 is not a gateway error");
        let none = table(flagger_vs(0, 0));
        assert!(matches!(
            route(&none, &request("podinfo.test", "/", &[]), "test", 0.5),
            Decision::Respond { status: 503, .. }
        ));
    }

    #[test]
    fn match_entries_are_ored_and_regexes_anchored() {
        let table = table(flagger_vs(100, 0));
        let canary = "podinfo-canary.test.svc.cluster.local";
        let to = |headers: &[(&str, &str)]| {
            forward(route(
                &table,
                &request("podinfo.test", "/", headers),
                "test",
                0.0,
            ))
            .destination
            .host
        };
        assert_eq!(to(&[("x-canary", "insider")]), canary);
        assert_eq!(to(&[("cookie", "a=b; canary=always; c=d")]), canary);
        assert_ne!(to(&[("x-canary", "insider2")]), canary, "exact is exact");
        assert_ne!(to(&[]), canary);
    }

    #[test]
    fn uri_query_method_and_without_headers_conditions() {
        let vs = json!({"metadata": {"name": "app", "namespace": "test"},
            "spec": {"hosts": ["app"], "http": [
                {"match": [{"uri": {"prefix": "/api"}, "method": {"exact": "POST"},
                            "queryParams": {"debug": {"exact": "1"}},
                            "withoutHeaders": {"x-skip": {}}}],
                 "rewrite": {"uri": "/v2"},
                 "route": [{"destination": {"host": "app-v2"}}]},
                {"match": [{"uri": {"regex": "/items/[0-9]+"}}],
                 "route": [{"destination": {"host": "items"}}]}]}});
        let table = table(vs);
        let mut post = request("app.test", "/api/users?debug=1", &[]);
        post.method = "POST".into();
        let f = forward(route(&table, &post, "test", 0.0));
        assert_eq!(f.destination.host, "app-v2.test.svc.cluster.local");
        assert_eq!(
            f.path_and_query, "/v2/users?debug=1",
            "the matched prefix is replaced"
        );
        post.headers.push(("x-skip".into(), "yes".into()));
        assert!(matches!(
            route(&table, &post, "test", 0.0),
            Decision::Respond { status: 404, .. }
        ));
        let item = forward(route(
            &table,
            &request("app.test", "/items/42", &[]),
            "test",
            0.0,
        ));
        assert_eq!(item.destination.host, "items.test.svc.cluster.local");
        assert!(
            matches!(
                route(
                    &table,
                    &request("app.test", "/items/42/x", &[]),
                    "test",
                    0.0
                ),
                Decision::Respond { status: 404, .. }
            ),
            "a regex must match the whole path"
        );
    }

    #[test]
    fn subsets_mirrors_faults_and_gateway_only_services() {
        let vs = json!({"metadata": {"name": "app", "namespace": "test"},
            "spec": {"hosts": ["app"], "http": [{
                "route": [{"destination": {"host": "app", "subset": "stable", "port": {"number": 8080}}}],
                "mirror": {"host": "app", "subset": "next"}, "mirrorPercentage": {"value": 50.0},
                "fault": {"abort": {"httpStatus": 503, "percentage": {"value": 10.0}},
                          "delay": {"fixedDelay": "250ms"}}}]}});
        let dr = json!({"metadata": {"name": "app", "namespace": "test"},
            "spec": {"host": "app", "subsets": [{"name": "stable", "labels": {"version": "v1"}},
                                                {"name": "next", "labels": {"version": "v2"}}]}});
        let table = RouteTable {
            virtual_services: vec![vs.clone()],
            destination_rules: vec![dr],
            ..RouteTable::default()
        };
        let f = forward(route(&table, &request("app.test", "/", &[]), "test", 0.0));
        assert_eq!(f.destination.subset_labels["version"], "v1");
        assert_eq!(f.destination.port, Some(8080));
        let (mirror, percent) = f.mirror.unwrap();
        assert_eq!(
            (mirror.subset_labels["version"].as_str(), percent),
            (Some("v2"), 50.0)
        );
        assert_eq!(f.fault.abort, Some((503, 10.0)));
        assert_eq!(
            f.fault.delay, None,
            "a delay without a percentage delays nothing"
        );

        let without_dr = RouteTable {
            virtual_services: vec![vs],
            ..RouteTable::default()
        };
        assert!(matches!(
            route(&without_dr, &request("app.test", "/", &[]), "test", 0.0),
            Decision::Respond { status: 503, .. }
        ));
        let gateway_only = table_with_gateway();
        let f = forward(route(
            &gateway_only,
            &request("app.test", "/", &[]),
            "test",
            0.0,
        ));
        assert_eq!(
            f.routed_by, None,
            "sidecars ignore a VirtualService without mesh"
        );
    }

    fn table_with_gateway() -> RouteTable {
        table(json!({"metadata": {"name": "public", "namespace": "test"},
            "spec": {"hosts": ["app"], "gateways": ["public-gateway"],
                     "http": [{"route": [{"destination": {"host": "elsewhere"}}]}]}}))
    }

    fn http_route(name: &str, created: &str, rules: Value) -> Value {
        json!({"metadata": {"name": name, "namespace": "test", "creationTimestamp": created},
               "spec": {"parentRefs": [{"name": "gateway", "namespace": "istio-ingress"}],
                        "hostnames": ["app.example.com"], "rules": rules}})
    }

    #[test]
    fn http_routes_follow_gateway_api_precedence_and_weights() {
        let general = http_route(
            "general",
            "2026-01-01T00:00:00Z",
            json!([
            {"backendRefs": [{"name": "app-primary", "port": 9898, "weight": 90},
                             {"name": "app-canary", "port": 9898, "weight": 10}],
             "filters": [{"type": "ResponseHeaderModifier",
                          "responseHeaderModifier": {"add": [{"name": "X-Route", "value": "general"}]}}]}]),
        );
        // Newer, later in the list, but more specific: it wins for its requests.
        let insiders = http_route(
            "insiders",
            "2026-02-01T00:00:00Z",
            json!([
            {"matches": [{"path": {"type": "PathPrefix", "value": "/api"},
                          "headers": [{"name": "X-Canary", "value": "insider"}]}],
             "backendRefs": [{"name": "app-canary", "port": 9898}],
             "filters": [{"type": "URLRewrite",
                          "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v2"}}}]}]),
        );
        let table = RouteTable {
            http_routes: vec![general, insiders],
            ..RouteTable::default()
        };
        let to = |path: &str, headers: &[(&str, &str)], pick: f64| {
            forward(route(
                &table,
                &request("app.example.com", path, headers),
                "test",
                pick,
            ))
        };
        let insider = to("/api/users", &[("x-canary", "insider")], 0.0);
        assert_eq!(
            insider.destination.host,
            "app-canary.test.svc.cluster.local"
        );
        assert_eq!(insider.path_and_query, "/v2/users");
        let prefix_is_path_separated = to("/apiary", &[("x-canary", "insider")], 0.0);
        assert_eq!(
            prefix_is_path_separated.destination.host,
            "app-primary.test.svc.cluster.local"
        );
        assert_eq!(
            to("/", &[], 0.95).destination.host,
            "app-canary.test.svc.cluster.local"
        );
        assert_eq!(to("/", &[], 0.5).destination.port, Some(9898));
        assert_eq!(
            to("/", &[], 0.5).response_headers[0].add,
            [("x-route".to_string(), "general".to_string())]
        );

        let all_zero = RouteTable {
            http_routes: vec![http_route(
                "zero",
                "2026-01-01T00:00:00Z",
                json!([
                {"backendRefs": [{"name": "a", "weight": 0}, {"name": "b", "weight": 0}]}]),
            )],
            ..RouteTable::default()
        };
        assert!(matches!(
            route(
                &all_zero,
                &request("app.example.com", "/", &[]),
                "test",
                0.5
            ),
            Decision::Respond { status: 500, .. }
        ));
    }

    #[test]
    fn header_operations_set_add_and_remove() {
        let ops = HeaderOps::parse(
            &json!({"set": {"X-Env": "canary"}, "add": {"Set-Cookie": "a=1"},
                                           "remove": ["X-Debug"]}),
        );
        let mut headers = vec![
            ("x-env".to_string(), "prod".to_string()),
            ("x-debug".to_string(), "1".to_string()),
            ("set-cookie".to_string(), "b=2".to_string()),
        ];
        ops.apply(&mut headers);
        assert_eq!(
            headers,
            [
                ("set-cookie".to_string(), "b=2".to_string()),
                ("x-env".to_string(), "canary".to_string()),
                ("set-cookie".to_string(), "a=1".to_string()),
            ]
        );
    }
}
