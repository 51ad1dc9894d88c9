//! `serin demo`: the whole product on a laptop. Starts the sandbox (API server, pods serving
//! podinfo and the load tester, the mesh and Prometheus) and the controller in this process; the
//! Canary's rollout webhook has the load tester send traffic to the canary, and users' requests go
//! through the mesh to the apex Service. It rolls out a good version (promoted) and a faulty one
//! (rolled back), and prints what a user would watch: phase, weight and each metric's value. The
//! controller's `/metrics` is scraped by the sandbox's Prometheus, and once the healthy release is
//! promoted every query of the chart's Grafana dashboards is run there.

mod dashboards;

use anyhow::{Context as _, bail};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use serin_api::{Canary, Phase};
use serin_controller::metrics::OperatorMetrics;
use serin_metrics::{PrometheusClient, QueryContext, builtin_query};
use serin_sandbox::store::WriteOptions;
use serin_sandbox::{Sandbox, SandboxOptions};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The Prometheus job of the operator's metrics, as the dashboards' `job` variable offers it.
const OPERATOR_JOB: &str = "serin-operator";

/// Serves the in-process controller's metrics at `http://127.0.0.1:PORT/metrics`, as the operator's
/// admin server does, and registers that address with the sandbox's Prometheus.
async fn serve_operator_metrics(
    sandbox: &Sandbox,
    metrics: Arc<OperatorMetrics>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let app = axum::Router::new().route(
        "/metrics",
        serin_controller::metrics::metrics_route(metrics),
    );
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    sandbox
        .register_scrape_target("serin-demo-operator", OPERATOR_JOB, address)
        .context("registering the operator's /metrics with the sandbox's Prometheus")?;
    Ok(server)
}

const CANARY: &str = r#"{
  "apiVersion": "serin.dev/v1beta1", "kind": "Canary",
  "metadata": {"name": "podinfo", "namespace": "test"},
  "spec": {
    "provider": "istio",
    "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo"},
    "progressDeadlineSeconds": 60,
    "service": {"port": 9898, "targetPort": 9898},
    "analysis": {
      "interval": "10s", "threshold": 2, "stepWeight": 20, "maxWeight": 60,
      "metrics": [
        {"name": "request-success-rate", "thresholdRange": {"min": 99}, "interval": "10s"},
        {"name": "request-duration", "thresholdRange": {"max": 500}, "interval": "10s"}
      ],
      "webhooks": [
        {"name": "load-test", "type": "rollout", "url": "http://flagger-loadtester.test/",
         "metadata": {"cmd": "hey -z 2m -q 10 -c 2 http://podinfo-canary.test:9898/"}}
      ]
    }
  }
}"#;

fn podinfo_deployment() -> Value {
    json!({
        "metadata": {"name": "podinfo", "namespace": "test", "labels": {"app": "podinfo"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "podinfo"}},
                 "template": {"metadata": {"labels": {"app": "podinfo"}},
                              "spec": {"containers": [{"name": "podinfod",
                                  "image": "ghcr.io/stefanprodan/podinfo:6.0.0",
                                  "ports": [{"name": "http", "containerPort": 9898}]}]}}}
    })
}

/// Flagger's load tester, as its tutorials install it: a Deployment and a Service on port 80.
fn loadtester() -> [Value; 2] {
    let labels = json!({"app": "flagger-loadtester"});
    [
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "flagger-loadtester", "namespace": "test", "labels": labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "loadtester",
                                      "image": "ghcr.io/fluxcd/flagger-loadtester:0.38.0",
                                      "ports": [{"name": "http", "containerPort": 8080}]}]}}}
        }),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "flagger-loadtester", "namespace": "test"},
            "spec": {"selector": labels, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}
        }),
    ]
}

/// The CRD manifests as JSON objects.
fn crds() -> anyhow::Result<Vec<Value>> {
    let text = include_str!("../../../artifacts/crds/serin.yaml");
    let mut documents = Vec::new();
    for document in text.split("\n---") {
        let document = document.trim_start_matches("---").trim();
        if document.is_empty() {
            continue;
        }
        let parsed: Value = serde_saphyr::from_str(document).context("parsing the CRDs")?;
        // Comment-only documents parse to null.
        if parsed.is_object() {
            documents.push(parsed);
        }
    }
    Ok(documents)
}

/// ~40 requests a second to podinfo.test through the mesh, counting answers and errors, until
/// `stop` (at most ten minutes).
async fn traffic(
    proxy: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
) {
    let started = Instant::now();
    let limit = Duration::from_secs(600);
    while !stop.load(Ordering::Relaxed) && started.elapsed() < limit {
        let Ok(mut client) = serin_sandbox::mesh_proxy::MeshClient::connect(proxy).await else {
            return;
        };
        while !stop.load(Ordering::Relaxed) && started.elapsed() < limit {
            let Ok(response) = client.get("http://podinfo.test:9898/", &[]).await else {
                break;
            };
            sent.fetch_add(1, Ordering::Relaxed);
            if response.status >= 500 {
                failed.fetch_add(1, Ordering::Relaxed);
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

fn metric_line(value: Result<f64, serin_metrics::QueryError>, unit: &str) -> String {
    match value {
        Ok(v) => format!("{v:.1}{unit}"),
        Err(serin_metrics::QueryError::NoValues) => "-".into(),
        Err(e) => format!("error ({e})"),
    }
}

/// Prints progress until the canary reaches one of `ends`; returns the phase it ended in.
async fn watch_release(
    canaries: &Api<Canary>,
    prometheus: &PrometheusClient,
    ends: &[Phase],
    limit: Duration,
) -> anyhow::Result<Phase> {
    // A release ends only after it has started, so the previous release's end does not count;
    // initialization ends as soon as it is done.
    let fresh_start = ends == [Phase::Initialized];
    let started = Instant::now();
    let context = QueryContext {
        name: "podinfo".into(),
        namespace: "test".into(),
        target: "podinfo".into(),
        interval: "10s".into(),
        ..QueryContext::default()
    };
    let mut last = String::new();
    let mut left_start = false;
    loop {
        let canary = canaries.get("podinfo").await?;
        let status = canary.status.unwrap_or_default();
        let phase = status.phase;
        left_start |=
            fresh_start || phase.is_some_and(|p| !ends.contains(&p) && p != Phase::Initialized);
        let success = prometheus
            .query(&builtin_query("request-success-rate", &context).expect("builtin"))
            .await;
        let duration = prometheus
            .query(&builtin_query("request-duration", &context).expect("builtin"))
            .await;
        let line = format!(
            "{:>12} weight {:>3}%  failed checks {}  canary success rate {}  p99 {}",
            phase.map_or("-".to_string(), |p| p.as_str().to_string()),
            status.canary_weight,
            status.failed_checks,
            metric_line(success, "%"),
            metric_line(duration, " ms"),
        );
        if line != last {
            println!("  [{:>5.1}s] {line}", started.elapsed().as_secs_f64());
            last = line;
        }
        if left_start && let Some(end) = phase.filter(|p| ends.contains(p)) {
            return Ok(end);
        }
        if started.elapsed() > limit {
            bail!("the release did not finish within {limit:?}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Runs the demo; returns an error if a release does not end as expected.
pub async fn run() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    println!("starting the sandbox: API server, pods, mesh proxy and Prometheus");
    let options = SandboxOptions::with_data_plane();
    let sandbox = Sandbox::start_with(dir.path(), options).await.context(
        "starting the sandbox (Prometheus comes from Debian: apt-get install prometheus)",
    )?;
    let store = &sandbox.store;
    let write = WriteOptions::by("serin-demo");
    let crd_info = store
        .resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        .expect("built in");
    for crd in crds()? {
        store
            .create(&crd_info, None, crd, &write)
            .map_err(|e| anyhow::anyhow!(e.message))?;
    }
    let namespaces = store.resource("", "v1", "namespaces").expect("built in");
    store
        .create(
            &namespaces,
            None,
            json!({"metadata": {"name": "test"}}),
            &write,
        )
        .map_err(|e| anyhow::anyhow!(e.message))?;
    let deployments_info = store
        .resource("apps", "v1", "deployments")
        .expect("built in");
    store
        .create(
            &deployments_info,
            Some("test"),
            podinfo_deployment(),
            &write,
        )
        .map_err(|e| anyhow::anyhow!(e.message))?;
    let [tester, tester_service] = loadtester();
    store
        .create(&deployments_info, Some("test"), tester, &write)
        .map_err(|e| anyhow::anyhow!(e.message))?;
    let services_info = store.resource("", "v1", "services").expect("built in");
    store
        .create(&services_info, Some("test"), tester_service, &write)
        .map_err(|e| anyhow::anyhow!(e.message))?;
    let canary_info = store
        .resource("serin.dev", "v1beta1", "canaries")
        .context("the Canary CRD is served")?;
    store
        .create(
            &canary_info,
            Some("test"),
            serde_json::from_str(CANARY)?,
            &write,
        )
        .map_err(|e| anyhow::anyhow!(e.message))?;
    println!(
        "kubeconfig: {} (try kubectl -n test get canaries,deploy,pods)",
        sandbox.kubeconfig.display()
    );

    let config = kube::Config::new(sandbox.url.parse()?);
    let client = kube::Client::try_from(config.clone())?;
    // The controller's own client counts its requests for the dashboards; the demo's reads of the
    // Canary go through `client` and are not the operator's.
    let metrics = Arc::new(OperatorMetrics::default());
    metrics.set_info(env!("CARGO_PKG_VERSION"), "istio");
    metrics.set_leader(true);
    let controller_client = kube::client::ClientBuilder::try_from(config)?
        .with_layer(&metrics.kubernetes_api_layer())
        .build();
    let metrics_server = serve_operator_metrics(&sandbox, metrics.clone()).await?;
    let prometheus_url = sandbox
        .prometheus
        .as_ref()
        .expect("started with the mesh")
        .url
        .clone();
    let prometheus = PrometheusClient::new(&prometheus_url).map_err(|e| anyhow::anyhow!("{e}"))?;
    let proxy = sandbox.mesh.as_ref().expect("mesh").address;
    let mut ctx = serin_controller::Context::new(controller_client, prometheus.clone());
    ctx.metrics = metrics;
    // Webhooks reach `flagger-loadtester.test` through the mesh, as an in-cluster operator would
    // through cluster DNS; loopback addresses (Prometheus, the API server) are reached directly.
    ctx.webhooks = serin_webhooks::WebhookClient::new(serin_webhooks::ClientOptions::through(
        &format!("http://{proxy}"),
        "127.0.0.1,localhost",
    )?);
    let ctx = Arc::new(ctx);
    let controller = tokio::spawn(serin_controller::run(ctx, Some("test".into())));
    let canaries: Api<Canary> = Api::namespaced(client.clone(), "test");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "test");

    println!("\ninitializing: podinfo 6.0.0 becomes podinfo-primary");
    let started = Instant::now();
    watch_release(
        &canaries,
        &prometheus,
        &[Phase::Initialized],
        Duration::from_secs(60),
    )
    .await?;
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let load = tokio::spawn(traffic(proxy, stop.clone(), sent.clone(), failed.clone()));

    let release = async |title: &str, container: Value| -> anyhow::Result<Phase> {
        println!("\n{title}");
        let patch = json!({"spec": {"template": {"spec": {"containers": [container]}}}});
        deployments
            .patch(
                "podinfo",
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await?;
        let ends = [Phase::Succeeded, Phase::Failed];
        watch_release(&canaries, &prometheus, &ends, Duration::from_secs(180)).await
    };
    let first = release(
        "release 1: podinfo 6.0.1 (healthy)",
        json!({"name": "podinfod", "image": "ghcr.io/stefanprodan/podinfo:6.0.1"}),
    )
    .await?;
    // The healthy release has just ended: every panel has had traffic, weights, checks and a
    // promotion to show.
    let values = BTreeMap::from([
        ("namespace", "test"),
        ("target", "podinfo"),
        ("primary", "podinfo-primary"),
        ("canary", "podinfo"),
        ("job", OPERATOR_JOB),
        ("__rate_interval", "1m"),
        ("__interval", "1m"),
    ]);
    let checked = dashboards::check(&prometheus, &values, Duration::from_secs(10)).await;
    println!(
        "  dashboards: {}/{} panel queries returned data",
        checked.answered, checked.total
    );
    for missing in &checked.missing {
        println!("    {missing}");
    }
    let second = release(
        "release 2: podinfo 6.0.2 with ERROR_RATE=0.5 (faulty)",
        json!({"name": "podinfod", "image": "ghcr.io/stefanprodan/podinfo:6.0.2",
               "env": [{"name": "ERROR_RATE", "value": "0.5"}]}),
    )
    .await?;

    stop.store(true, Ordering::Relaxed);
    let _ = load.await;
    controller.abort();
    metrics_server.abort();
    let primary = deployments.get("podinfo-primary").await?;
    let primary_image = primary
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.first().and_then(|c| c.image.clone()))
        .unwrap_or_default();
    let (total, errors) = (sent.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    println!("\nsummary");
    println!("  release 1 (6.0.1, healthy): {}", first.as_str());
    println!("  release 2 (6.0.2, faulty):  {}", second.as_str());
    println!("  primary now runs {primary_image}");
    println!(
        "  {total} user requests to podinfo.test through the mesh, {errors} answered 5xx ({:.1}%), in {:.0}s",
        100.0 * errors as f64 / total.max(1) as f64,
        started.elapsed().as_secs_f64()
    );
    sandbox.stop().await;
    if first != Phase::Succeeded || second != Phase::Failed || !primary_image.ends_with(":6.0.1") {
        bail!(
            "the demo did not go as expected: the healthy release must be promoted and the faulty one rolled back"
        );
    }
    println!("  as expected: the healthy version was promoted and the faulty one rolled back");
    Ok(())
}
