//! The operator's controller against the sandbox with its mesh and Debian's Prometheus: a healthy
//! release is promoted step by step; a faulty one fails its success-rate check and is rolled back.
//! Traffic is real (through the mesh proxy), and so are the metrics.

use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Config};
use serde_json::{Value, json};
use serin_api::{Canary, Phase};
use serin_controller::Context;
use serin_metrics::PrometheusClient;
use serin_sandbox::mesh_proxy::MeshClient;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod common;
use common::{PODINFO, kubectl, sandbox_with_crds, set_podinfo_image};

/// The Canary of `common::PODINFO`.
const CANARY: &str = r#"
apiVersion: serin.dev/v1beta1
kind: Canary
metadata: {name: podinfo, namespace: test}
spec:
  provider: istio
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: podinfo}
  progressDeadlineSeconds: 60
  service: {port: 9898, targetPort: 9898}
  analysis:
    interval: 4s
    threshold: 2
    stepWeight: 20
    maxWeight: 40
    metrics:
    - name: request-success-rate
      thresholdRange: {min: 99}
      interval: 8s
    - name: request-duration
      thresholdRange: {max: 500}
      interval: 8s
    webhooks:
    - name: load-test
      type: rollout
      url: http://HOOK_ADDRESS/
      metadata: {cmd: "hey -z 1m -q 10 -c 2 http://podinfo-canary.test:9898/"}
"#;

/// Sends ~40 requests a second to podinfo.test through the mesh until `stop` (at most 4 minutes).
async fn traffic(proxy: std::net::SocketAddr, stop: Arc<AtomicBool>) {
    let started = Instant::now();
    while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(240) {
        let Ok(mut client) = MeshClient::connect(proxy).await else {
            return;
        };
        while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(240) {
            if client.get("http://podinfo.test:9898/", &[]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

struct Seen {
    phases: Vec<Phase>,
    weights: Vec<i32>,
}

/// Polls the Canary until `done` or `limit`, recording every phase and weight it goes through.
async fn follow(canaries: &Api<Canary>, limit: Duration, done: impl Fn(Phase) -> bool) -> Seen {
    let started = Instant::now();
    let mut seen = Seen {
        phases: Vec::new(),
        weights: Vec::new(),
    };
    loop {
        if let Ok(canary) = canaries.get("podinfo").await
            && let Some(status) = canary.status
        {
            if let Some(phase) = status.phase
                && seen.phases.last() != Some(&phase)
            {
                seen.phases.push(phase);
            }
            if seen.weights.last() != Some(&status.canary_weight) {
                seen.weights.push(status.canary_weight);
            }
            if status.phase.is_some_and(&done) {
                return seen;
            }
        }
        assert!(
            started.elapsed() < limit,
            "gave up after {limit:?}: phases {:?}, weights {:?}",
            seen.phases,
            seen.weights
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn image(deployment: &Value) -> &str {
    deployment["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_release_is_promoted_and_a_faulty_one_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox_with_crds(dir.path(), true).await;
    // A webhook receiver on loopback: the rollout hook is called at every analysis tick.
    let hooks = Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let received = hooks.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_address = listener.local_addr().unwrap();
    let receiver = axum::Router::new().route(
        "/",
        axum::routing::post(move |body: axum::body::Bytes| {
            let received = received.clone();
            async move {
                received
                    .lock()
                    .unwrap()
                    .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
                "ok"
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, receiver).await });
    let manifests = format!("{PODINFO}{CANARY}").replace("HOOK_ADDRESS", &hook_address.to_string());
    kubectl(&sandbox, &["apply", "-f", "-"], Some(&manifests));

    let client = Client::try_from(Config::new(sandbox.url.parse().unwrap())).unwrap();
    let metrics_server = PrometheusClient::new(&sandbox.prometheus.as_ref().unwrap().url).unwrap();
    let ctx = Arc::new(Context::new(client.clone(), metrics_server));
    let controller = tokio::spawn(serin_controller::run(ctx, Some("test".into())));
    let canaries: Api<Canary> = Api::namespaced(client.clone(), "test");
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), "test");

    let init = follow(&canaries, Duration::from_secs(60), |p| {
        p == Phase::Initialized
    })
    .await;
    assert_eq!(
        init.phases.last(),
        Some(&Phase::Initialized),
        "{:?}",
        init.phases
    );
    let primary = serde_json::to_value(deployments.get("podinfo-primary").await.unwrap()).unwrap();
    assert_eq!(image(&primary), "ghcr.io/stefanprodan/podinfo:6.0.0");

    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(traffic(
        sandbox.mesh.as_ref().unwrap().address,
        stop.clone(),
    ));

    // (1) A new version: weights 20 → 40, then promotion.
    set_podinfo_image(&sandbox, "6.0.1");
    let release = follow(&canaries, Duration::from_secs(120), |p| {
        p == Phase::Succeeded || p == Phase::Failed
    })
    .await;
    assert_eq!(
        release.phases.last(),
        Some(&Phase::Succeeded),
        "phases {:?}",
        release.phases
    );
    for phase in [Phase::Progressing, Phase::Promoting, Phase::Finalising] {
        assert!(
            release.phases.contains(&phase),
            "{phase:?} missing from {:?}",
            release.phases
        );
    }
    for weight in [20, 40] {
        assert!(
            release.weights.contains(&weight),
            "weight {weight} missing from {:?}",
            release.weights
        );
    }
    let primary = serde_json::to_value(deployments.get("podinfo-primary").await.unwrap()).unwrap();
    assert_eq!(
        image(&primary),
        "ghcr.io/stefanprodan/podinfo:6.0.1",
        "the primary runs the new version"
    );
    let calls = hooks.lock().unwrap().clone();
    assert!(
        calls.len() >= 2,
        "the rollout hook runs at each analysis tick: {calls:?}"
    );
    assert_eq!(calls[0]["name"], "podinfo");
    assert_eq!(calls[0]["namespace"], "test");
    assert_eq!(calls[0]["phase"], "Progressing");
    assert_eq!(
        calls[0]["metadata"]["cmd"],
        "hey -z 1m -q 10 -c 2 http://podinfo-canary.test:9898/"
    );

    // (2) A faulty version: half its requests fail, the checks fail twice, traffic goes back.
    kubectl(
        &sandbox,
        &[
            "-n",
            "test",
            "set",
            "env",
            "deploy/podinfo",
            "ERROR_RATE=0.5",
        ],
        None,
    );
    follow(&canaries, Duration::from_secs(60), |p| {
        p == Phase::Progressing
    })
    .await;
    let failed = follow(&canaries, Duration::from_secs(120), |p| {
        p == Phase::Failed || p == Phase::Succeeded
    })
    .await;
    assert_eq!(
        failed.phases.last(),
        Some(&Phase::Failed),
        "phases {:?}",
        failed.phases
    );
    assert!(
        failed.phases.contains(&Phase::Progressing),
        "{:?}",
        failed.phases
    );
    let vs_api: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "test",
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("networking.istio.io", "v1beta1", "VirtualService"),
            "virtualservices",
        ),
    );
    let vs = serde_json::to_value(vs_api.get("podinfo").await.unwrap()).unwrap();
    assert_eq!(
        vs["spec"]["http"][0]["route"][0]["weight"], 100,
        "all traffic back on the primary: {vs}"
    );
    assert_eq!(vs["spec"]["http"][0]["route"][1]["weight"], 0);
    let target = deployments.get("podinfo").await.unwrap();
    assert_eq!(
        target.spec.unwrap().replicas,
        Some(0),
        "the faulty version is scaled to zero"
    );
    let primary = serde_json::to_value(deployments.get("podinfo-primary").await.unwrap()).unwrap();
    assert_eq!(
        image(&primary),
        "ghcr.io/stefanprodan/podinfo:6.0.1",
        "the primary kept the good version"
    );
    let events = kubectl(
        &sandbox,
        &[
            "-n",
            "test",
            "get",
            "events",
            "--field-selector",
            "involvedObject.kind=Canary",
            "-o",
            "jsonpath={.items[*].message}",
        ],
        None,
    );
    assert!(events.contains("Promotion completed"), "{events}");
    assert!(
        events.contains("Halt") || events.contains("Rolling back"),
        "{events}"
    );

    stop.store(true, Ordering::Relaxed);
    let _ = load.await;
    controller.abort();
    let _ = canaries
        .patch("podinfo", &PatchParams::default(), &Patch::Merge(json!({})))
        .await;
    sandbox.stop().await;
}
