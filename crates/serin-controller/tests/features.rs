//! The controller's bookkeeping around a release, against the sandbox (no metrics, so no
//! Prometheus): tracked ConfigMaps copied to `-primary` and a ConfigMap change released as a new
//! revision, the primary's autoscaler, event webhooks and Slack alerts received on loopback, an API
//! failure shown in the Canary's status and events, the operator's metrics, and `revertOnDeletion`
//! giving the target its replicas back and the user's own Service and VirtualService (handed over
//! with `serin.dev/adopt`, adopted, not owned) their original configuration; and a routing object
//! edited while a release waits at a gate put back by its ticks, again and again.

use kube::api::{Api, DeleteParams};
use kube::{Client, Config};
use serde_json::Value;
use serin_api::{Canary, Phase};
use serin_controller::Context;
use serin_metrics::PrometheusClient;
use serin_sandbox::instrument::FaultRule;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::{PODINFO, kubectl, sandbox_with_crds, set_podinfo_image};

/// The user's VirtualService from before the Canary, created without kubectl's last-applied
/// annotation, so only the operator's own record of it can restore it; its owner hands it to the
/// Canary with the adopt annotation.
const USER_VIRTUAL_SERVICE: &str = r#"
apiVersion: networking.istio.io/v1beta1
kind: VirtualService
metadata: {name: podinfo, namespace: test, annotations: {serin.dev/adopt: podinfo}}
spec:
  hosts: [app.example.com, podinfo]
  http:
  - retries: {attempts: 3, perTryTimeout: 1s}
    route:
    - destination: {host: podinfo}
"#;

const MANIFESTS: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: test}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: podinfo-config, namespace: test}
data: {GREETING: hello}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: podinfo, namespace: test, labels: {app: podinfo}}
spec:
  replicas: 2
  selector: {matchLabels: {app: podinfo}}
  template:
    metadata: {labels: {app: podinfo}}
    spec:
      containers:
      - name: podinfod
        image: ghcr.io/stefanprodan/podinfo:6.0.0
        ports: [{name: http, containerPort: 9898}]
        envFrom: [{configMapRef: {name: podinfo-config}}]
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: podinfo, namespace: test}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: podinfo}
  minReplicas: 2
  maxReplicas: 4
---
apiVersion: v1
kind: Service
metadata: {name: podinfo, namespace: test, annotations: {serin.dev/adopt: podinfo}}
spec:
  selector: {app: podinfo}
  ports: [{name: http, port: 9898, targetPort: http}]
---
apiVersion: serin.dev/v1beta1
kind: AlertProvider
metadata: {name: chat, namespace: test}
spec: {type: slack, channel: releases, address: "http://RECEIVER/slack"}
---
apiVersion: serin.dev/v1beta1
kind: Canary
metadata: {name: podinfo, namespace: test}
spec:
  provider: istio
  revertOnDeletion: true
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: podinfo}
  autoscalerRef: {apiVersion: autoscaling/v2, kind: HorizontalPodAutoscaler, name: podinfo}
  progressDeadlineSeconds: 60
  service: {port: 9898}
  analysis:
    interval: 2s
    threshold: 2
    stepWeight: 50
    maxWeight: 50
    webhooks:
    - {name: events, type: event, url: "http://RECEIVER/events"}
    alerts:
    - {name: team, severity: info, providerRef: {name: chat}}
"#;

type Received = Arc<Mutex<Vec<(String, Value)>>>;

/// An HTTP receiver on loopback that keeps every POSTed JSON body with its path.
async fn receiver() -> (std::net::SocketAddr, Received) {
    let received: Received = Arc::default();
    let kept = received.clone();
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri, body: axum::body::Bytes| {
        let kept = kept.clone();
        async move {
            let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
            kept.lock().unwrap().push((uri.path().to_string(), body));
            "ok"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, received)
}

/// Waits until `check` holds (polling every 200 ms), failing with `what` after `limit`.
async fn eventually<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < limit, "gave up after {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn phase(canaries: &Api<Canary>) -> Option<Phase> {
    canaries
        .get_opt("podinfo")
        .await
        .ok()
        .flatten()
        .and_then(|c| c.status)
        .and_then(|s| s.phase)
}

fn texts(received: &Received, path: &str) -> String {
    received
        .lock()
        .unwrap()
        .iter()
        .filter(|(p, _)| p == path)
        .map(|(_, body)| body.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configs_autoscaler_notifications_failures_and_deletion() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox_with_crds(dir.path(), false).await;
    let (address, received) = receiver().await;
    let manifests = MANIFESTS.replace("RECEIVER", &address.to_string());
    let (user_objects, canary) = manifests
        .split_once("---\napiVersion: serin.dev/v1beta1\nkind: Canary")
        .expect("the Canary comes last");
    kubectl(&sandbox, &["apply", "-f", "-"], Some(user_objects));
    kubectl(&sandbox, &["create", "-f", "-"], Some(USER_VIRTUAL_SERVICE));
    kubectl(
        &sandbox,
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: serin.dev/v1beta1\nkind: Canary{canary}"
        )),
    );

    let client = Client::try_from(Config::new(sandbox.url.parse().unwrap())).unwrap();
    // No metric in the analysis: the metrics server is never asked.
    let unused = PrometheusClient::new("http://127.0.0.1:9").unwrap();
    let ctx = Arc::new(Context::new(client.clone(), unused));
    let metrics = ctx.metrics.clone();
    let controller = tokio::spawn(serin_controller::run(ctx, Some("test".into())));
    let canaries: Api<Canary> = Api::namespaced(client.clone(), "test");
    let get = |args: &[&str]| kubectl(&sandbox, &[&["-n", "test", "get"], args].concat(), None);

    eventually(Duration::from_secs(60), "Initialized", || async {
        phase(&canaries).await == Some(Phase::Initialized)
    })
    .await;
    assert_eq!(
        get(&[
            "configmap",
            "podinfo-config-primary",
            "-o",
            "jsonpath={.data.GREETING}"
        ]),
        "hello",
        "the primary runs on a copy of the tracked ConfigMap"
    );
    assert_eq!(
        get(&[
            "deploy",
            "podinfo-primary",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].envFrom[0].configMapRef.name}"
        ]),
        "podinfo-config-primary"
    );
    assert_eq!(
        get(&[
            "hpa",
            "podinfo-primary",
            "-o",
            "jsonpath={.spec.scaleTargetRef.name} {.spec.minReplicas}"
        ]),
        "podinfo-primary 2",
        "the primary has its own autoscaler"
    );
    assert_eq!(
        get(&[
            "vs",
            "podinfo",
            "-o",
            "jsonpath={.spec.http[0].route[*].destination.host}"
        ]),
        "podinfo-primary podinfo-canary",
        "the user's VirtualService routes to the primary and the canary"
    );
    assert_eq!(
        get(&["svc", "podinfo", "-o", "jsonpath={.spec.selector.app}"]),
        "podinfo-primary",
        "the user's Service selects the primary"
    );
    assert_eq!(
        get(&["canary", "podinfo", "-o", "jsonpath={.metadata.finalizers}"]),
        r#"["finalizer.serin.dev"]"#,
        "revertOnDeletion holds the Canary with a finalizer"
    );
    eventually(Duration::from_secs(10), "init event and alert", || async {
        texts(&received, "/events").contains("Initialization done! podinfo.test")
            && texts(&received, "/slack").contains("initialization completed")
    })
    .await;
    let slack = texts(&received, "/slack");
    assert!(slack.contains(r##""channel":"releases""##), "{slack}");
    assert!(
        metrics
            .render()
            .contains("serin_canary_status{name=\"podinfo\",namespace=\"test\"} 1"),
        "{}",
        metrics.render()
    );

    // Only the ConfigMap changes: that is a new revision, analysed and promoted.
    kubectl(
        &sandbox,
        &[
            "-n",
            "test",
            "patch",
            "configmap",
            "podinfo-config",
            "--type=merge",
            "-p",
            r#"{"data":{"GREETING":"bonjour"}}"#,
        ],
        None,
    );
    eventually(Duration::from_secs(30), "Progressing", || async {
        phase(&canaries).await == Some(Phase::Progressing)
    })
    .await;
    eventually(Duration::from_secs(90), "Succeeded", || async {
        phase(&canaries).await == Some(Phase::Succeeded)
    })
    .await;
    assert_eq!(
        get(&[
            "configmap",
            "podinfo-config-primary",
            "-o",
            "jsonpath={.data.GREETING}"
        ]),
        "bonjour",
        "promotion copied the new ConfigMap data to the primary's copy"
    );
    let rendered = metrics.render();
    assert!(
        rendered.contains("serin_canary_successes_total{name=\"podinfo\",namespace=\"test\",deployment_strategy=\"canary\",analysis_status=\"completed\"} 1"),
        "{rendered}"
    );
    eventually(Duration::from_secs(10), "completion alert", || async {
        texts(&received, "/slack").contains("promotion finished")
    })
    .await;

    // The API server refuses VirtualService writes: the release waits, and says why.
    sandbox.faults.set(vec![FaultRule {
        // Server-side apply, which the operator writes routing objects with.
        verb: Some("APPLY".into()),
        resource: Some("virtualservices.networking.istio.io".into()),
        error_rate: 1.0,
        ..FaultRule::default()
    }]);
    set_podinfo_image(&sandbox, "6.0.1");
    eventually(Duration::from_secs(60), "the failure in status", || async {
        canaries
            .get("podinfo")
            .await
            .ok()
            .and_then(|c| c.status?.message)
            .is_some_and(|m| m.starts_with("reconcile failed, retrying: Kubernetes API"))
    })
    .await;
    let warnings = get(&[
        "events",
        "--field-selector",
        "type=Warning",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(
        warnings.contains("reconcile failed, retrying"),
        "{warnings}"
    );
    sandbox.faults.set(Vec::new());
    eventually(
        Duration::from_secs(90),
        "Succeeded after the fault",
        || async {
            let status = canaries.get("podinfo").await.ok().and_then(|c| c.status);
            status.is_some_and(|s| {
                s.phase == Some(Phase::Succeeded) && s.last_applied_spec == s.last_promoted_spec
            })
        },
    )
    .await;

    // Deleting the Canary gives the target (scaled to zero after promotion) its replicas back.
    assert_eq!(
        get(&["deploy", "podinfo", "-o", "jsonpath={.spec.replicas}"]),
        "0"
    );
    canaries
        .delete("podinfo", &DeleteParams::default())
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "the Canary is gone", || async {
        canaries.get_opt("podinfo").await.ok().flatten().is_none()
    })
    .await;
    assert_eq!(
        get(&["deploy", "podinfo", "-o", "jsonpath={.spec.replicas}"]),
        "2",
        "revertOnDeletion scaled the target back to the primary's replicas"
    );
    // Adopted, not owned: the garbage collector leaves them, restored to what the user wrote.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        get(&[
            "vs",
            "podinfo",
            "-o",
            "jsonpath={.spec.hosts} {.spec.http[0].route[*].destination.host} {.spec.http[0].retries.attempts}"
        ]),
        r#"["app.example.com","podinfo"] podinfo 3"#,
        "the user's VirtualService has its original spec back"
    );
    assert_eq!(
        get(&["svc", "podinfo", "-o", "jsonpath={.spec.selector.app}"]),
        "podinfo",
        "the user's Service selects the target's pods again"
    );
    controller.abort();
    sandbox.stop().await;
}

/// A Canary held at its confirm-promotion gate (nothing listens on its URL), ticking every second.
const GATED_CANARY: &str = r#"
apiVersion: serin.dev/v1beta1
kind: Canary
metadata: {name: podinfo, namespace: test}
spec:
  provider: istio
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: podinfo}
  progressDeadlineSeconds: 60
  service: {port: 9898}
  analysis:
    interval: 1s
    threshold: 1
    stepWeight: 50
    maxWeight: 50
    webhooks:
    - {name: gate, type: confirm-promotion, url: "http://127.0.0.1:9/gate"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routing_object_edited_during_a_release_is_put_back_each_time() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox_with_crds(dir.path(), false).await;
    kubectl(
        &sandbox,
        &["apply", "-f", "-"],
        Some(&format!("{PODINFO}{GATED_CANARY}")),
    );
    let client = Client::try_from(Config::new(sandbox.url.parse().unwrap())).unwrap();
    let unused = PrometheusClient::new("http://127.0.0.1:9").unwrap();
    let controller = tokio::spawn(serin_controller::run(
        Arc::new(Context::new(client.clone(), unused)),
        Some("test".into()),
    ));
    let canaries: Api<Canary> = Api::namespaced(client, "test");
    eventually(Duration::from_secs(60), "Initialized", || async {
        phase(&canaries).await == Some(Phase::Initialized)
    })
    .await;
    set_podinfo_image(&sandbox, "6.0.1");
    eventually(Duration::from_secs(60), "WaitingPromotion", || async {
        phase(&canaries).await == Some(Phase::WaitingPromotion)
    })
    .await;
    let selector = || {
        kubectl(
            &sandbox,
            &[
                "-n",
                "test",
                "get",
                "svc",
                "podinfo-primary",
                "-o",
                "jsonpath={.spec.selector.app}",
            ],
            None,
        )
    };
    // The ticks at the gate change nothing, so they find their routing objects as they left
    // them; an edit in between must still be seen and undone, the second time as the first.
    for round in 1..=2 {
        kubectl(
            &sandbox,
            &[
                "-n",
                "test",
                "patch",
                "svc",
                "podinfo-primary",
                "--type=merge",
                "-p",
                r#"{"spec":{"selector":{"app":"edited"}}}"#,
            ],
            None,
        );
        eventually(
            Duration::from_secs(20),
            &format!("the primary Service's selector put back, edit {round}"),
            || async { selector() == "podinfo-primary" },
        )
        .await;
    }
    assert_eq!(phase(&canaries).await, Some(Phase::WaitingPromotion));
    controller.abort();
    sandbox.stop().await;
}
