//! The mesh proxy routes real HTTP requests by VirtualServices stored in the sandbox: weighted
//! splits, header matches, mirrors, retries, faults, and Istio telemetry for what it did.

use axum::body::Body;
use serde_json::{Map, Value, json};
use serin_sandbox::Sandbox;
use serin_sandbox::mesh_proxy::{Endpoint, MeshClient, MeshOptions, MeshProxy};
use serin_sandbox::store::WriteOptions;
use serin_sandbox::telemetry::{Reporter, Workload};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A backend that answers with its name and counts what it received; `fail_every` makes every
/// n-th request a 503.
struct Backend {
    address: SocketAddr,
    received: Arc<AtomicU64>,
}

async fn backend(name: &'static str, fail_every: u64) -> Backend {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let received = Arc::new(AtomicU64::new(0));
    let counter = received.clone();
    let app = axum::Router::new().fallback(move |request: axum::http::Request<Body>| {
        let counter = counter.clone();
        async move {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            let path = request.uri().path().to_string();
            if fail_every > 0 && n % fail_every == 1 {
                return (
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    format!("{name} failing"),
                );
            }
            (axum::http::StatusCode::OK, format!("{name} {path}"))
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    Backend { address, received }
}

fn endpoint(address: SocketAddr, workload: &str) -> Endpoint {
    let mut labels = Map::new();
    labels.insert("app".into(), json!(workload));
    Endpoint {
        address,
        labels,
        workload: Workload {
            name: workload.into(),
            namespace: "test".into(),
            app: "podinfo".into(),
            version: "unknown".into(),
        },
    }
}

struct Mesh {
    sandbox: Sandbox,
    proxy: MeshProxy,
    _dir: tempfile::TempDir,
}

impl Mesh {
    async fn start(services: Vec<(&str, Vec<Endpoint>)>) -> Mesh {
        let dir = tempfile::tempdir().unwrap();
        let sandbox = Sandbox::start(dir.path()).await.unwrap();
        serin_sandbox::mesh_crds::install(&sandbox.store);
        let namespaces = sandbox.store.resource("", "v1", "namespaces").unwrap();
        sandbox
            .store
            .create(
                &namespaces,
                None,
                json!({"metadata": {"name": "test"}}),
                &WriteOptions::default(),
            )
            .unwrap();
        let upstreams: HashMap<String, Vec<Endpoint>> = services
            .into_iter()
            .map(|(host, endpoints)| (host.to_string(), endpoints))
            .collect();
        let options = MeshOptions {
            client: Workload {
                name: "loadtester".into(),
                namespace: "test".into(),
                app: "loadtester".into(),
                version: "unknown".into(),
            },
            client_namespace: "test".into(),
            ..MeshOptions::default()
        };
        let proxy = MeshProxy::start(sandbox.store.clone(), Arc::new(upstreams), options)
            .await
            .unwrap();
        Mesh {
            sandbox,
            proxy,
            _dir: dir,
        }
    }

    fn apply(&self, plural: &str, object: Value) {
        let info = self
            .sandbox
            .store
            .resource("networking.istio.io", "v1beta1", plural)
            .expect("the Istio CRDs are served");
        self.sandbox
            .store
            .create(&info, Some("test"), object, &WriteOptions::default())
            .unwrap();
    }

    /// A client using the proxy as HTTP_PROXY.
    async fn client(&self) -> MeshClient {
        MeshClient::connect(self.proxy.address).await.unwrap()
    }
}

async fn get(client: &mut MeshClient, url: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let response = client.get(url, headers).await.unwrap();
    (response.status, response.body)
}

fn canary_routes(primary: u64, canary: u64) -> Value {
    json!({"apiVersion": "networking.istio.io/v1beta1", "kind": "VirtualService",
        "metadata": {"name": "podinfo"},
        "spec": {"hosts": ["podinfo"], "gateways": ["mesh"], "http": [
            {"match": [{"headers": {"x-canary": {"exact": "insider"}}}],
             "route": [{"destination": {"host": "podinfo-canary"}}]},
            {"route": [{"destination": {"host": "podinfo-primary"}, "weight": primary},
                       {"destination": {"host": "podinfo-canary"}, "weight": canary}]}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weighted_route_splits_traffic_and_header_matches_pick_the_canary() {
    let primary = backend("primary", 0).await;
    let canary = backend("canary", 0).await;
    let mesh = Mesh::start(vec![
        (
            "podinfo-primary.test.svc.cluster.local",
            vec![endpoint(primary.address, "podinfo-primary")],
        ),
        (
            "podinfo-canary.test.svc.cluster.local",
            vec![endpoint(canary.address, "podinfo")],
        ),
    ])
    .await;
    mesh.apply("virtualservices", canary_routes(80, 20));
    let mut client = mesh.client().await;
    let mut to_canary = 0;
    for _ in 0..2000 {
        let (status, body) = get(&mut client, "http://podinfo.test:9898/", &[]).await;
        assert_eq!(status, 200);
        if body.starts_with("canary") {
            to_canary += 1;
        }
    }
    let share = to_canary as f64 / 2000.0 * 100.0;
    assert!(
        (share - 20.0).abs() <= 3.0,
        "canary share {share}%, expected 20 ± 3"
    );
    assert_eq!(canary.received.load(Ordering::SeqCst), to_canary);
    // Istio's telemetry agrees with what the backends saw.
    let telemetry = &mesh.proxy.telemetry;
    assert_eq!(
        telemetry.count(Reporter::Destination, "podinfo", 200),
        to_canary
    );
    assert_eq!(
        telemetry.count(Reporter::Source, "podinfo-primary", 200),
        2000 - to_canary
    );

    for _ in 0..50 {
        let (_, body) = get(
            &mut client,
            "http://podinfo.test/",
            &[("x-canary", "insider")],
        )
        .await;
        assert!(body.starts_with("canary"), "{body}");
    }
    let (_, body) = get(
        &mut client,
        "http://podinfo.test/",
        &[("x-canary", "outsider")],
    )
    .await;
    assert!(!body.is_empty());

    // A host no VirtualService covers goes straight to its Service; an unknown one has no upstream.
    let (status, body) = get(&mut client, "http://podinfo-primary.test:9898/direct", &[]).await;
    assert_eq!((status, body.as_str()), (200, "primary /direct"));
    let (status, _) = get(&mut client, "http://nowhere.test/", &[]).await;
    assert_eq!(status, 503);
    mesh.proxy.stop().await;
    mesh.sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrors_copy_retries_recover_and_faults_abort() {
    let primary = backend("primary", 0).await;
    let shadow = backend("shadow", 0).await;
    let flaky = backend("flaky", 2).await;
    let mesh = Mesh::start(vec![
        (
            "podinfo-primary.test.svc.cluster.local",
            vec![endpoint(primary.address, "podinfo-primary")],
        ),
        (
            "podinfo-canary.test.svc.cluster.local",
            vec![endpoint(shadow.address, "podinfo")],
        ),
        (
            "flaky.test.svc.cluster.local",
            vec![endpoint(flaky.address, "flaky")],
        ),
        (
            "broken.test.svc.cluster.local",
            vec![endpoint(primary.address, "broken")],
        ),
    ])
    .await;
    mesh.apply(
        "virtualservices",
        json!({"metadata": {"name": "podinfo"},
        "spec": {"hosts": ["podinfo"], "http": [{
            "route": [{"destination": {"host": "podinfo-primary"}, "weight": 100,
                       "headers": {"response": {"add": {"Set-Cookie": "flagger-cookie=abc; Max-Age=60"}}}},
                      {"destination": {"host": "podinfo-canary"}, "weight": 0}],
            "mirror": {"host": "podinfo-canary"}, "mirrorPercentage": {"value": 100.0}}]}}),
    );
    mesh.apply(
        "virtualservices",
        json!({"metadata": {"name": "flaky"},
        "spec": {"hosts": ["flaky"], "http": [{
            "route": [{"destination": {"host": "flaky"}}],
            "retries": {"attempts": 2, "retryOn": "5xx"}}]}}),
    );
    mesh.apply(
        "virtualservices",
        json!({"metadata": {"name": "broken"},
        "spec": {"hosts": ["broken"], "http": [{
            "route": [{"destination": {"host": "broken"}}],
            "fault": {"abort": {"httpStatus": 418, "percentage": {"value": 100.0}}}}]}}),
    );
    let mut client = mesh.client().await;

    for _ in 0..20 {
        let (status, body) = get(&mut client, "http://podinfo.test/", &[]).await;
        assert_eq!(
            (status, body.as_str()),
            (200, "primary /"),
            "the mirror never answers"
        );
    }
    // Copies are fire and forget: wait until all arrived and their samples were recorded.
    for _ in 0..100 {
        let recorded = mesh
            .proxy
            .telemetry
            .count(Reporter::Destination, "podinfo", 200);
        if shadow.received.load(Ordering::SeqCst) == 20 && recorded == 20 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        shadow.received.load(Ordering::SeqCst),
        20,
        "every request was copied"
    );
    assert_eq!(
        mesh.proxy
            .telemetry
            .count(Reporter::Destination, "podinfo", 200),
        20
    );
    assert_eq!(
        mesh.proxy.telemetry.count(Reporter::Source, "podinfo", 200),
        0,
        "copies have no source sample"
    );

    // The flaky backend fails every other request; one retry hides it from the client.
    for _ in 0..10 {
        let (status, body) = get(&mut client, "http://flaky.test/", &[]).await;
        assert_eq!((status, body.as_str()), (200, "flaky /"));
    }
    let telemetry = &mesh.proxy.telemetry;
    assert_eq!(
        telemetry.count(Reporter::Destination, "flaky", 503),
        10,
        "each failed attempt is counted"
    );
    assert_eq!(telemetry.count(Reporter::Destination, "flaky", 200), 10);
    assert_eq!(telemetry.count(Reporter::Source, "flaky", 200), 10);

    let (status, _) = get(&mut client, "http://broken.test/", &[]).await;
    assert_eq!(status, 418);
    assert_eq!(
        primary.received.load(Ordering::SeqCst),
        20,
        "an aborted request never leaves the proxy"
    );
    let text = telemetry.render();
    assert!(
        text.contains("response_code=\"418\",grpc_response_status=\"\",response_flags=\"FI\""),
        "{text}"
    );
    mesh.proxy.stop().await;
    mesh.sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_tunnels_grpc_to_the_service_and_an_unknown_service_is_refused() {
    use serin_sandbox::grpc_health::{CheckError, Route, ServingStatus, check_health};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let health = serin_sandbox::grpc_health::health_router("podinfo".into());
    tokio::spawn(async move { axum::serve(listener, health).await });
    let mesh = Mesh::start(vec![(
        "podinfo-canary.test.svc.cluster.local",
        vec![endpoint(address, "podinfo")],
    )])
    .await;
    let through = |authority: &str| Route {
        authority: authority.into(),
        proxy: Some(("127.0.0.1".into(), mesh.proxy.address.port())),
    };
    let second = std::time::Duration::from_secs(1);
    for service in ["", "podinfo"] {
        assert_eq!(
            check_health(
                &through("podinfo-canary:9999"),
                service,
                "test",
                second,
                second
            )
            .await,
            Ok(ServingStatus::Serving),
            "the short name is searched in the client's namespace"
        );
    }
    let refused = check_health(&through("nowhere:9999"), "", "test", second, second).await;
    assert_eq!(
        refused,
        Err(CheckError::Connect(
            "proxy refused CONNECT nowhere:9999: 503 Service Unavailable no healthy upstream for nowhere.test.svc.cluster.local:9999".into()
        ))
    );
    mesh.proxy.stop().await;
    mesh.sandbox.stop().await;
}
