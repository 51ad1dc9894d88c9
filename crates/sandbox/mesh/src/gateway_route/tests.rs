//! Routing at gateways and the status written for their routes, on hand-made tables.

use super::*;
use crate::mesh_route::Forward;

fn request(authority: &str, path: &str, headers: &[(&str, &str)]) -> Request {
    Request {
        method: "GET".into(),
        authority: authority.into(),
        path: path.into(),
        query: String::new(),
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
    }
}

fn forward(decision: Decision) -> Forward {
    match decision {
        Decision::Forward(f) => *f,
        other => panic!("expected a forward, got {other:?}"),
    }
}

fn ingress_labels() -> Map<String, Value> {
    json!({"app": "istio-ingressgateway", "istio": "ingressgateway"})
        .as_object()
        .cloned()
        .unwrap()
}

fn public_gateway() -> Value {
    json!({"metadata": {"name": "public-gateway", "namespace": "istio-system"},
        "spec": {"selector": {"istio": "ingressgateway"}, "servers": [
            {"port": {"number": 80, "name": "http", "protocol": "HTTP"}, "hosts": ["*"]},
            {"port": {"number": 443, "name": "https", "protocol": "HTTPS"}, "hosts": ["*"],
             "tls": {"mode": "SIMPLE"}}]}})
}

fn ingress_table(virtual_services: Vec<Value>) -> RouteTable {
    RouteTable {
        virtual_services,
        istio_gateways: vec![
            public_gateway(),
            json!({"metadata": {"name": "internal", "namespace": "test"},
                "spec": {"selector": {"istio": "internal-gateway"}, "servers": [
                    {"port": {"number": 80, "protocol": "HTTP"}, "hosts": ["*"]}]}}),
        ],
        ..RouteTable::default()
    }
}

fn podinfo_vs() -> Value {
    json!({"metadata": {"name": "podinfo", "namespace": "test"},
        "spec": {"hosts": ["*"], "gateways": ["istio-system/public-gateway"], "http": [
            {"match": [{"headers": {"cookie": {"regex": ".*canary=always.*"}}}],
             "route": [{"destination": {"host": "podinfo-canary"}}]},
            {"route": [
                {"destination": {"host": "podinfo-primary"}, "weight": 100},
                {"destination": {"host": "podinfo-canary"}, "weight": 0,
                 "headers": {"response": {"add": {"Set-Cookie": "canary=always; Max-Age=60"}}}}]}]}})
}

#[test]
fn a_gateway_pod_serves_the_gateways_selecting_it_and_their_http_servers() {
    let table = ingress_table(vec![]);
    let bound = istio_gateways_for(&table, &ingress_labels(), None);
    assert_eq!(
        bound,
        [BoundGateway {
            key: "istio-system/public-gateway".into(),
            namespace: "istio-system".into(),
            hosts: vec!["*".into()],
        }],
        "the HTTPS server is not served; the internal gateway selects other pods"
    );
    let scoped = BoundGateway {
        key: "istio-system/scoped".into(),
        namespace: "istio-system".into(),
        hosts: vec!["test/*.example.com".into(), "./admin.local".into()],
    };
    assert!(server_admits(&scoped, "test", "app.example.com"));
    assert!(!server_admits(&scoped, "other", "app.example.com"));
    assert!(!server_admits(&scoped, "test", "example.org"));
    assert!(server_admits(&scoped, "istio-system", "admin.local"));
    assert!(!server_admits(&scoped, "test", "admin.local"));
}

#[test]
fn ingress_routing_takes_the_virtual_services_bound_to_the_gateway() {
    let mesh_only = json!({"metadata": {"name": "podinfo-mesh", "namespace": "test"},
        "spec": {"hosts": ["*"], "http": [{"route": [{"destination": {"host": "elsewhere"}}]}]}});
    let exact = json!({"metadata": {"name": "app", "namespace": "test"},
        "spec": {"hosts": ["app.example.com"], "gateways": ["istio-system/public-gateway", "mesh"],
                 "http": [{"route": [{"destination": {"host": "app"}}]}]}});
    let table = ingress_table(vec![mesh_only, podinfo_vs(), exact]);
    let gateways = istio_gateways_for(&table, &ingress_labels(), Some(8080));
    let to = |authority: &str, headers: &[(&str, &str)]| {
        forward(istio_ingress_route(
            &table,
            &gateways,
            &request(authority, "/", headers),
            0.5,
        ))
    };
    let f = to("localhost:8080", &[]);
    assert_eq!(f.destination.host, "podinfo-primary.test.svc.cluster.local");
    assert_eq!(
        f.destination.port, None,
        "the gateway's port is not passed on"
    );
    assert_eq!(f.routed_by.as_deref(), Some("test/podinfo"));
    assert_eq!(
        to("app.example.com", &[]).destination.host,
        "app.test.svc.cluster.local",
        "an exact host beats *"
    );
    let sticky = to("localhost", &[("cookie", "a=1; canary=always")]);
    assert_eq!(
        sticky.destination.host,
        "podinfo-canary.test.svc.cluster.local"
    );

    // Gateways of other pods, and bindings by the short name in another namespace, do not count.
    let internal = istio_gateways_for(
        &table,
        &json!({"istio": "internal-gateway"})
            .as_object()
            .cloned()
            .unwrap(),
        None,
    );
    assert!(matches!(
        istio_ingress_route(&table, &internal, &request("localhost", "/", &[]), 0.5),
        Decision::Respond { status: 404, .. }
    ));
}

#[test]
fn a_destinations_response_headers_apply_at_the_gateway() {
    let mut vs = podinfo_vs();
    vs["spec"]["http"][1]["route"][0]["weight"] = json!(0);
    vs["spec"]["http"][1]["route"][1]["weight"] = json!(100);
    let table = ingress_table(vec![vs]);
    let gateways = istio_gateways_for(&table, &ingress_labels(), None);
    let f = forward(istio_ingress_route(
        &table,
        &gateways,
        &request("localhost", "/", &[]),
        0.5,
    ));
    assert_eq!(f.destination.host, "podinfo-canary.test.svc.cluster.local");
    assert_eq!(
        f.response_headers[1].add,
        [(
            "set-cookie".to_string(),
            "canary=always; Max-Age=60".to_string()
        )]
    );
}

fn root_vs() -> Value {
    json!({"metadata": {"name": "root", "namespace": "istio-system"},
        "spec": {"hosts": ["*"], "gateways": ["public-gateway"], "http": [
            {"match": [{"uri": {"prefix": "/podinfo/"}}],
             "rewrite": {"uri": "/"},
             "headers": {"request": {"set": {"x-root": "yes"}}},
             "delegate": {"name": "podinfo-delegate", "namespace": "test"}},
            {"route": [{"destination": {"host": "fallback.test.svc.cluster.local"}}]}]}})
}

fn delegate_vs() -> Value {
    json!({"metadata": {"name": "podinfo-delegate", "namespace": "test"},
        "spec": {"http": [
            {"match": [{"headers": {"x-canary": {"exact": "insider"}}}],
             "route": [{"destination": {"host": "podinfo-canary"}}]},
            {"match": [{"uri": {"prefix": "/podinfo/api/"}}],
             "rewrite": {"uri": "/api/"},
             "route": [{"destination": {"host": "podinfo-primary"}}]},
            {"match": [{"uri": {"prefix": "/other"}}],
             "route": [{"destination": {"host": "never"}}]},
            {"route": [{"destination": {"host": "podinfo-primary"}}]}]}})
}

#[test]
fn delegation_merges_the_root_match_and_rewrite_into_the_delegates_routes() {
    let root = &root_vs()["spec"]["http"][0];
    let delegate = delegate_vs();
    let leaf = |i: usize| &delegate["spec"]["http"][i];
    let merged = merge_delegate_checked(root, leaf(0));
    assert_eq!(
        merged["match"],
        json!([{"uri": {"prefix": "/podinfo/"}, "headers": {"x-canary": {"exact": "insider"}}}])
    );
    assert_eq!(merged["rewrite"], json!({"uri": "/"}), "the root's rewrite");
    assert_eq!(merged["headers"], root["headers"]);
    assert!(merged.get("delegate").is_none());
    let own = merge_delegate_checked(root, leaf(1));
    assert_eq!(
        own["rewrite"],
        json!({"uri": "/api/"}),
        "the delegate's own rewrite wins"
    );
    assert_eq!(own["match"], json!([{"uri": {"prefix": "/podinfo/api/"}}]));
    assert_eq!(
        mesh_route::merge_delegate(root, leaf(2)),
        None,
        "/other does not narrow /podinfo/"
    );
    assert_eq!(
        merge_delegate_checked(root, leaf(3))["match"],
        json!([{"uri": {"prefix": "/podinfo/"}}])
    );
}

fn merge_delegate_checked(root: &Value, leaf: &Value) -> Value {
    mesh_route::merge_delegate(root, leaf).expect("no conflict")
}

#[test]
fn a_root_virtual_service_routes_through_its_delegate() {
    let table = ingress_table(vec![root_vs(), delegate_vs()]);
    let gateways = istio_gateways_for(&table, &ingress_labels(), None);
    let to = |path: &str, headers: &[(&str, &str)]| {
        forward(istio_ingress_route(
            &table,
            &gateways,
            &request("podinfo.example.com", path, headers),
            0.5,
        ))
    };
    let insider = to("/podinfo/version", &[("x-canary", "insider")]);
    assert_eq!(
        insider.destination.host, "podinfo-canary.test.svc.cluster.local",
        "delegate destinations are expanded in the delegate's namespace"
    );
    assert_eq!(
        insider.path_and_query, "/version",
        "the root's rewrite applied"
    );
    assert_eq!(
        insider.request_headers[0].set,
        [("x-root".into(), "yes".into())]
    );
    assert_eq!(insider.routed_by.as_deref(), Some("istio-system/root"));
    let api = to("/podinfo/api/info", &[]);
    assert_eq!(
        api.destination.host,
        "podinfo-primary.test.svc.cluster.local"
    );
    assert_eq!(api.path_and_query, "/api/info");
    assert_eq!(to("/podinfo/", &[]).path_and_query, "/");
    assert_eq!(
        to("/elsewhere", &[]).destination.host,
        "fallback.test.svc.cluster.local",
        "a request outside the root's match skips the delegate"
    );
    // Without the delegate, the delegating route takes nothing.
    let orphan = ingress_table(vec![root_vs()]);
    let f = forward(istio_ingress_route(
        &orphan,
        &gateways,
        &request("localhost", "/podinfo/x", &[]),
        0.5,
    ));
    assert_eq!(f.destination.host, "fallback.test.svc.cluster.local");
}

#[test]
fn delegation_applies_at_sidecars_too() {
    let root = json!({"metadata": {"name": "podinfo", "namespace": "test"},
        "spec": {"hosts": ["podinfo"], "http": [
            {"delegate": {"name": "podinfo-delegate"}}]}});
    let table = RouteTable {
        virtual_services: vec![root, delegate_vs()],
        ..RouteTable::default()
    };
    let f = forward(mesh_route::route(
        &table,
        &request("podinfo.test", "/", &[("x-canary", "insider")]),
        "test",
        0.5,
    ));
    assert_eq!(f.destination.host, "podinfo-canary.test.svc.cluster.local");
}

fn gateway(listeners: Value) -> Value {
    json!({"metadata": {"name": "gateway", "namespace": "istio-ingress", "generation": 2},
        "spec": {"gatewayClassName": "istio", "listeners": listeners}})
}

fn route_in(namespace: &str, hostnames: Value, parent: Value) -> Value {
    json!({"metadata": {"name": "podinfo", "namespace": namespace, "generation": 1},
        "spec": {"parentRefs": [parent], "hostnames": hostnames, "rules": [
            {"backendRefs": [{"name": "podinfo-primary", "port": 9898, "weight": 0},
                             {"name": "podinfo-canary", "port": 9898, "weight": 100}]}]}})
}

#[test]
fn http_routes_attach_to_listeners_by_section_namespace_and_hostname() {
    let gw = gateway(json!([
        {"name": "same", "port": 80, "protocol": "HTTP"},
        {"name": "all", "port": 80, "protocol": "HTTP", "hostname": "*.example.com",
         "allowedRoutes": {"namespaces": {"from": "All"}}},
        {"name": "selected", "port": 8080, "protocol": "HTTP",
         "allowedRoutes": {"namespaces": {"from": "Selector",
            "selector": {"matchLabels": {"shared-gateway-access": "true"}}}}}]));
    let parent = json!({"name": "gateway", "namespace": "istio-ingress"});
    let mut labels = HashMap::new();
    labels.insert(
        "team".to_string(),
        json!({"shared-gateway-access": "true"})
            .as_object()
            .cloned()
            .unwrap(),
    );
    let attach_in = |namespace: &str, hostnames: Value, parent: Value| {
        let route = route_in(namespace, hostnames, parent.clone());
        attach(&gw, &route, &parent, &labels)
    };
    assert_eq!(
        attach_in("istio-ingress", json!([]), parent.clone()),
        Ok(vec![0, 1]),
        "not the Selector listener: istio-ingress lacks the label"
    );
    assert_eq!(
        attach_in("test", json!(["app.example.com"]), parent.clone()),
        Ok(vec![1])
    );
    assert_eq!(attach_in("team", json!([]), parent.clone()), Ok(vec![1, 2]));
    assert_eq!(
        attach_in("test", json!(["app.example.org"]), parent.clone()),
        Err("NoMatchingListenerHostname")
    );
    assert_eq!(
        attach_in(
            "test",
            json!([]),
            json!({"name": "gateway", "namespace": "istio-ingress", "sectionName": "same"})
        ),
        Err("NotAllowedByListeners")
    );
    assert_eq!(
        attach_in(
            "istio-ingress",
            json!([]),
            json!({"name": "gateway", "sectionName": "nope"})
        ),
        Err("NoMatchingParent")
    );
    assert_eq!(
        attach_in(
            "team",
            json!([]),
            json!({"name": "gateway", "namespace": "istio-ingress", "port": 8080})
        ),
        Ok(vec![2])
    );
    assert!(!names_gateway(
        &json!({"name": "gateway", "kind": "Service"}),
        "istio-ingress",
        &gw
    ));
}

#[test]
fn a_gateway_api_gateway_routes_its_attached_routes_and_reports_status() {
    let gw = gateway(json!([{"name": "http", "port": 80, "protocol": "HTTP",
        "allowedRoutes": {"namespaces": {"from": "All"}}}]));
    let attached = route_in(
        "test",
        json!(["app.example.com"]),
        json!({"name": "gateway", "namespace": "istio-ingress"}),
    );
    let mut elsewhere = route_in("test", json!([]), json!({"name": "other-gateway"}));
    elsewhere["metadata"]["name"] = json!("elsewhere");
    let table = RouteTable {
        http_routes: vec![attached.clone(), elsewhere.clone()],
        gateways: vec![gw.clone()],
        ..RouteTable::default()
    };
    let f = forward(gateway_api_route(
        &table,
        &gw,
        &request("app.example.com:80", "/", &[]),
        0.1,
    ));
    assert_eq!(f.destination.host, "podinfo-canary.test.svc.cluster.local");
    assert_eq!(f.destination.port, Some(9898));
    assert!(matches!(
        gateway_api_route(&table, &gw, &request("other.example.com", "/", &[]), 0.1),
        Decision::Respond { status: 404, .. }
    ));

    let status = gateway_status(&gw, &table);
    assert_eq!(
        status["addresses"],
        json!([{"type": "Hostname", "value": "gateway-istio.istio-ingress.svc.cluster.local"}])
    );
    assert_eq!(status["conditions"][1]["type"], "Programmed");
    assert_eq!(status["conditions"][1]["observedGeneration"], 2);
    assert_eq!(status["listeners"][0]["attachedRoutes"], 1);

    let services = vec![
        "test/podinfo-primary".to_string(),
        "test/podinfo-canary".to_string(),
    ];
    let parents = route_parent_statuses(
        &attached,
        &table.gateways,
        &table.namespace_labels,
        &services,
    );
    assert_eq!(parents.len(), 1);
    assert_eq!(parents[0]["controllerName"], CONTROLLER_NAME);
    assert_eq!(parents[0]["conditions"][0]["status"], "True");
    assert_eq!(parents[0]["conditions"][1]["status"], "True");
    assert!(
        route_parent_statuses(
            &elsewhere,
            &table.gateways,
            &table.namespace_labels,
            &services
        )
        .is_empty(),
        "a parent that is not an istio Gateway gets no entry"
    );
    let missing = route_parent_statuses(&attached, &table.gateways, &table.namespace_labels, &[]);
    assert_eq!(missing[0]["conditions"][1]["reason"], "BackendNotFound");

    let mut mesh_route = attached.clone();
    mesh_route["spec"]["parentRefs"] =
        json!([{"group": "core", "kind": "Service", "name": "podinfo", "port": 9898}]);
    let with_apex = [services.clone(), vec!["test/podinfo".to_string()]].concat();
    let mesh = route_parent_statuses(&mesh_route, &[], &table.namespace_labels, &with_apex);
    assert_eq!(mesh.len(), 1);
    assert_eq!(mesh[0]["parentRef"]["kind"], "Service");
    assert_eq!(mesh[0]["conditions"][0]["status"], "True");
    let orphan = route_parent_statuses(&mesh_route, &[], &table.namespace_labels, &services);
    assert_eq!(orphan[0]["conditions"][0]["reason"], "NoMatchingParent");

    let same_only = gateway(json!([{"name": "http", "port": 80, "protocol": "HTTP"}]));
    let refused =
        route_parent_statuses(&attached, &[same_only], &table.namespace_labels, &services);
    assert_eq!(refused[0]["conditions"][0]["status"], "False");
    assert_eq!(
        refused[0]["conditions"][0]["reason"],
        "NotAllowedByListeners"
    );
}
