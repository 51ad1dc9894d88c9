//! The routing objects Flagger's e2e example expects, and the same objects applied to the sandbox
//! steering real traffic through its mesh.

mod common {
    use serde_json::{Value, json};

    /// The e2e example's Canary: port 9898, portDiscovery, apex metadata, request headers.
    pub fn canary() -> Value {
        json!({
            "apiVersion": "serin.dev/v1beta1", "kind": "Canary",
            "metadata": {"name": "podinfo", "namespace": "test", "uid": "0b5c-uid"},
            "spec": {
                "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo"},
                "service": {
                    "port": 9898, "portDiscovery": true,
                    "apex": {"labels": {"test": "labels-test"}, "annotations": {"test": "annotations-test"}},
                    "headers": {"request": {"add": {"x-envoy-upstream-rq-timeout-ms": "15000"}}}
                },
                "analysis": {"interval": "15s", "threshold": 15, "maxWeight": 30, "stepWeight": 10}
            }
        })
    }

    /// The target Deployment with podinfo's three container ports.
    pub fn target() -> Value {
        json!({
            "metadata": {"name": "podinfo", "namespace": "test"},
            "spec": {"selector": {"matchLabels": {"app": "podinfo"}},
                     "template": {"metadata": {"labels": {"app": "podinfo"}},
                                  "spec": {"containers": [{"name": "podinfod", "image": "ghcr.io/stefanprodan/podinfo:6.0.1",
                                      "ports": [{"name": "http", "containerPort": 9898},
                                                {"name": "http-metrics", "containerPort": 9797},
                                                {"name": "grpc", "containerPort": 9999}]}]}}}
        })
    }
}

use common::{canary, target};
use serde_json::json;
use serin_router::istio::{Routes, destination_rules, get_routes, set_routes, virtual_service};
use serin_router::services::{DEFAULT_SELECTOR_LABELS, services};

#[test]
fn the_e2e_example_gets_flaggers_services_destination_rules_and_virtual_service() {
    let [canary_svc, primary_svc, apex] =
        services(&canary(), &target(), &DEFAULT_SELECTOR_LABELS).unwrap();
    assert_eq!(canary_svc["metadata"]["name"], "podinfo-canary");
    assert_eq!(canary_svc["spec"]["selector"], json!({"app": "podinfo"}));
    assert_eq!(
        primary_svc["spec"]["selector"],
        json!({"app": "podinfo-primary"})
    );
    assert_eq!(apex["spec"]["selector"], json!({"app": "podinfo-primary"}));
    assert_eq!(
        apex["metadata"]["labels"],
        json!({"test": "labels-test", "app": "podinfo"})
    );
    assert_eq!(apex["metadata"]["annotations"]["test"], "annotations-test");
    assert_eq!(
        apex["metadata"]["annotations"]["kustomize.toolkit.fluxcd.io/reconcile"],
        "disabled"
    );
    assert_eq!(apex["metadata"]["ownerReferences"][0]["kind"], "Canary");
    let ports: Vec<(String, i64)> = apex["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["port"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ports,
        [
            ("http".to_string(), 9898),
            ("http-metrics".to_string(), 9797),
            ("grpc".to_string(), 9999)
        ]
    );

    let [canary_dr, primary_dr] = destination_rules(&canary());
    assert_eq!(canary_dr["spec"], json!({"host": "podinfo-canary"}));
    assert_eq!(primary_dr["spec"], json!({"host": "podinfo-primary"}));

    let vs = virtual_service(&canary()).unwrap();
    assert_eq!(vs["spec"]["hosts"], json!(["podinfo"]));
    assert_eq!(vs["spec"]["gateways"], json!(["mesh"]));
    assert_eq!(
        vs["spec"]["http"],
        json!([{"headers": {"request": {"add": {"x-envoy-upstream-rq-timeout-ms": "15000"}}},
                "route": [{"destination": {"host": "podinfo-primary"}, "weight": 100},
                          {"destination": {"host": "podinfo-canary"}, "weight": 0}]}])
    );
    assert_eq!(vs["metadata"]["labels"], json!({"test": "labels-test"}));
    assert_eq!(
        get_routes(&canary(), &vs).unwrap(),
        Routes {
            primary: 100,
            canary: 0,
            mirrored: false
        }
    );
}

#[test]
fn keys_of_unmanaged_metadata_are_left_to_whoever_manages_them() {
    let mut canary = canary();
    canary["spec"]["service"]["unmanagedMetadata"] = json!({
        "labels": ["test"],
        "annotations": ["kustomize.toolkit.fluxcd.io/reconcile", "test"]
    });
    let [canary_svc, _, apex] = services(&canary, &target(), &DEFAULT_SELECTOR_LABELS).unwrap();
    assert_eq!(apex["metadata"]["labels"], json!({"app": "podinfo"}));
    assert_eq!(
        apex["metadata"]["annotations"],
        json!({"helm.toolkit.fluxcd.io/driftDetection": "disabled"})
    );
    assert!(
        canary_svc["metadata"]["annotations"]
            .get("kustomize.toolkit.fluxcd.io/reconcile")
            .is_none()
    );
}

#[test]
fn ab_testing_splits_the_match_and_mirroring_adds_a_mirror() {
    let mut ab = canary();
    ab["spec"]["analysis"]["match"] = json!([{"headers": {"x-canary": {"exact": "insider"}}}]);
    let spec = set_routes(
        &ab,
        Routes {
            primary: 0,
            canary: 100,
            mirrored: false,
        },
    )
    .unwrap();
    assert_eq!(spec["http"].as_array().unwrap().len(), 2);
    assert_eq!(
        spec["http"][0]["match"],
        json!([{"headers": {"x-canary": {"exact": "insider"}}}])
    );
    assert_eq!(spec["http"][0]["route"][1]["weight"], 100);
    assert_eq!(
        spec["http"][1]["route"],
        json!([{"destination": {"host": "podinfo-primary"}, "weight": 0}])
    );

    let mut mirrored = canary();
    mirrored["spec"]["analysis"]["mirrorWeight"] = json!(50);
    let spec = set_routes(
        &mirrored,
        Routes {
            primary: 100,
            canary: 0,
            mirrored: true,
        },
    )
    .unwrap();
    assert_eq!(spec["http"][0]["mirror"], json!({"host": "podinfo-canary"}));
    assert_eq!(spec["http"][0]["mirrorPercentage"], json!({"value": 50}));
    let read = get_routes(&mirrored, &json!({"spec": spec})).unwrap();
    assert!(read.mirrored);

    let none = json!({"spec": {"http": [{"route": [{"destination": {"host": "elsewhere"}}]}]}});
    let error = get_routes(&canary(), &none).unwrap_err();
    assert_eq!(
        error.to_string(),
        "VirtualService podinfo.test does not contain routes for podinfo-primary and podinfo-canary"
    );
    let mut unlabelled = target();
    unlabelled["spec"]["selector"]["matchLabels"] = json!({"tier": "web"});
    let error = services(&canary(), &unlabelled, &DEFAULT_SELECTOR_LABELS).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("must contain one of [app name app.kubernetes.io/name]"),
        "{error}"
    );
}

/// Sends `count` GETs for `url` through the mesh proxy at `proxy`; returns the response bodies.
async fn through_mesh(proxy: std::net::SocketAddr, url: &str, count: usize) -> Vec<String> {
    let mut client = serin_sandbox::mesh_proxy::MeshClient::connect(proxy)
        .await
        .unwrap();
    let mut bodies = Vec::with_capacity(count);
    for _ in 0..count {
        bodies.push(client.get(url, &[]).await.unwrap().body);
    }
    bodies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_objects_steer_real_traffic_in_the_sandbox_mesh() {
    use serin_sandbox::store::{Part, WriteOptions};
    use serin_sandbox::{MeshSettings, Sandbox, SandboxOptions};
    let dir = tempfile::tempdir().unwrap();
    let options = SandboxOptions {
        runtime: Some(std::sync::Arc::new(
            serin_sandbox::runtime::ServingRuntime::new(Default::default()),
        )),
        mesh: Some(MeshSettings {
            prometheus: None,
            ..MeshSettings::default()
        }),
        ..SandboxOptions::default()
    };
    let sandbox = Sandbox::start_with(dir.path(), options).await.unwrap();
    let store = &sandbox.store;
    let write = WriteOptions::by("serin-router-test");
    let create = |group: &str,
                  version: &str,
                  plural: &str,
                  namespace: Option<&str>,
                  mut object: serde_json::Value| {
        // Applied without their Canary, so nothing owns them.
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.remove("ownerReferences");
        }
        let info = store.resource(group, version, plural).unwrap();
        store.create(&info, namespace, object, &write).unwrap()
    };
    create(
        "",
        "v1",
        "namespaces",
        None,
        json!({"metadata": {"name": "test"}}),
    );
    let mut primary = target();
    primary["metadata"]["name"] = json!("podinfo-primary");
    primary["spec"]["selector"]["matchLabels"]["app"] = json!("podinfo-primary");
    primary["spec"]["template"]["metadata"]["labels"]["app"] = json!("podinfo-primary");
    primary["spec"]["template"]["spec"]["containers"][0]["image"] =
        json!("ghcr.io/stefanprodan/podinfo:6.0.0");
    create("apps", "v1", "deployments", Some("test"), target());
    create("apps", "v1", "deployments", Some("test"), primary);
    for service in services(&canary(), &target(), &DEFAULT_SELECTOR_LABELS).unwrap() {
        create("", "v1", "services", Some("test"), service);
    }
    for rule in destination_rules(&canary()) {
        create(
            "networking.istio.io",
            "v1beta1",
            "destinationrules",
            Some("test"),
            rule,
        );
    }
    let mut vs = create(
        "networking.istio.io",
        "v1beta1",
        "virtualservices",
        Some("test"),
        virtual_service(&canary()).unwrap(),
    );

    let proxy = sandbox.mesh.as_ref().unwrap().address;
    let ready = std::time::Instant::now();
    loop {
        let bodies = through_mesh(proxy, "http://podinfo-canary.test:9898/", 1).await;
        let primary_up = through_mesh(proxy, "http://podinfo-primary.test:9898/", 1).await;
        if bodies[0].contains("6.0.1") && primary_up[0].contains("6.0.0") {
            break;
        }
        assert!(
            ready.elapsed() < std::time::Duration::from_secs(20),
            "pods never served: {bodies:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // The apex host routes by the VirtualService once the proxy has read it.
    loop {
        let apex = through_mesh(proxy, "http://podinfo.test:9898/", 1).await;
        if apex[0].contains("\"version\"") {
            break;
        }
        assert!(
            ready.elapsed() < std::time::Duration::from_secs(20),
            "the apex never routed: {apex:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let all_primary = through_mesh(proxy, "http://podinfo.test:9898/", 100).await;
    let to_canary = all_primary
        .iter()
        .filter(|b| b.contains("\"version\":\"6.0.1\""))
        .count();
    let answered = all_primary
        .iter()
        .filter(|b| b.contains("\"version\""))
        .count();
    assert_eq!(to_canary, 0, "weights 100/0 send nothing to the canary");
    assert!(
        answered >= 95,
        "only {answered} of 100 answered: {:?}",
        &all_primary[..2]
    );

    vs["spec"] = set_routes(
        &canary(),
        Routes {
            primary: 70,
            canary: 30,
            mirrored: false,
        },
    )
    .unwrap();
    let info = store
        .resource("networking.istio.io", "v1beta1", "virtualservices")
        .unwrap();
    store
        .update(&info, "test", "podinfo", vs, Part::Main, &write)
        .unwrap();
    let bodies = through_mesh(proxy, "http://podinfo.test:9898/", 1000).await;
    let to_canary = bodies
        .iter()
        .filter(|b| b.contains("\"version\":\"6.0.1\""))
        .count();
    assert!(
        (to_canary as f64 / 10.0 - 30.0).abs() <= 5.0,
        "{to_canary} of 1000 reached the canary"
    );
    let live = store.get(&info, "test", "podinfo").unwrap();
    assert_eq!(
        get_routes(&canary(), &live).unwrap(),
        Routes {
            primary: 70,
            canary: 30,
            mirrored: false
        }
    );
    sandbox.stop().await;
}
