//! `make bench` for the sandbox: the API server's memory per stored object, list throughput over
//! 10,000 objects and watch fan-out to 1,000 concurrent watchers; then the mesh proxy's throughput
//! and added p99 latency against direct requests to the same backend. Prints counts and ratios
//! measured in one run; absolute times depend on the machine.

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use kube::{Client, Config};
use serde_json::json;
use serin_sandbox::Sandbox;
use serin_sandbox::store::WriteOptions;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const OBJECTS: usize = 10_000;
const LISTS: usize = 20;
const WATCHERS: usize = 1_000;
const WATCHED_WRITES: usize = 200;

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn config_map(i: usize) -> serde_json::Value {
    json!({"metadata": {"name": format!("cm-{i:05}"), "labels": {"app": "bench", "shard": (i % 10).to_string()}},
           "data": {"config.yaml": format!("replicas: {}\nimage: podinfo:6.0.{}\n", i % 7, i % 13)}})
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let sandbox = Sandbox::start(dir.path()).await?;
    let client = Client::try_from(Config::new(sandbox.url.parse()?))?;
    let info = sandbox
        .store
        .resource("", "v1", "configmaps")
        .expect("built in");

    // Memory: resident growth while the store takes 10,000 objects, per object.
    let before = resident_bytes();
    let mut json_bytes = 0;
    for i in 0..OBJECTS {
        let object = config_map(i);
        json_bytes += object.to_string().len();
        sandbox
            .store
            .create(&info, Some("default"), object, &WriteOptions::by("bench"))
            .map_err(|e| anyhow::anyhow!(e.message))?;
    }
    let after = resident_bytes();
    println!("sandbox: memory");
    println!(
        "  {OBJECTS} ConfigMaps: resident +{:.1} MiB = {} bytes per object (request JSON {} bytes; the stored object adds uid, timestamps, managedFields and {} retained watch-history entries)",
        (after.saturating_sub(before)) as f64 / 1048576.0,
        after.saturating_sub(before) / OBJECTS as u64,
        json_bytes / OBJECTS,
        OBJECTS.min(serin_sandbox::store::HISTORY_LIMIT)
    );

    // List: full lists of 10,000 objects through kube-rs, and a label-selected tenth.
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let started = Instant::now();
    let mut listed = 0;
    for _ in 0..LISTS {
        listed += cms.list(&ListParams::default()).await?.items.len();
    }
    let full = started.elapsed();
    let started = Instant::now();
    let mut selected = 0;
    for _ in 0..LISTS {
        selected += cms
            .list(&ListParams::default().labels("shard=3"))
            .await?
            .items
            .len();
    }
    let filtered = started.elapsed();
    println!("sandbox: list");
    println!(
        "  {LISTS} lists of {OBJECTS}: {:.0} objects/s ({:.1} lists/s)",
        listed as f64 / full.as_secs_f64(),
        LISTS as f64 / full.as_secs_f64()
    );
    println!(
        "  {LISTS} label-selected lists (1 in 10 match): {:.0} matching objects/s; a selected list costs {:.2}x a full one",
        selected as f64 / filtered.as_secs_f64(),
        filtered.as_secs_f64() / full.as_secs_f64()
    );

    // Watch: 1,000 watchers from the current resourceVersion, then 200 writes fanned out to all.
    let rv = cms
        .list_metadata(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let delivered = Arc::new(AtomicU64::new(0));
    let mut watchers = Vec::with_capacity(WATCHERS);
    for _ in 0..WATCHERS {
        let api = cms.clone();
        let rv = rv.clone();
        let delivered = delivered.clone();
        watchers.push(tokio::spawn(async move {
            let params = WatchParams::default().timeout(120);
            let Ok(stream) = api.watch(&params, &rv).await else {
                return;
            };
            let mut stream = stream.boxed();
            let mut seen = 0;
            while seen < WATCHED_WRITES {
                match tokio::time::timeout(Duration::from_secs(60), stream.next()).await {
                    Ok(Some(Ok(WatchEvent::Modified(_)))) => {
                        seen += 1;
                        delivered.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Some(Ok(_))) => {}
                    _ => return,
                }
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while (sandbox.metrics.active_watches() as usize) < WATCHERS && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let open = sandbox.metrics.active_watches();
    let started = Instant::now();
    for i in 0..WATCHED_WRITES {
        let patch = json!({"data": {"generation": i.to_string()}});
        cms.patch("cm-00000", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    let writes = started.elapsed();
    for watcher in watchers {
        let _ = watcher.await;
    }
    let fan_out = started.elapsed();
    let total = delivered.load(Ordering::Relaxed);
    let expected = (WATCHERS * WATCHED_WRITES) as u64;
    println!("sandbox: watch");
    println!(
        "  {open} concurrent watchers x {WATCHED_WRITES} writes: {total}/{expected} events delivered ({:.1}%), {:.0} events/s",
        100.0 * total as f64 / expected as f64,
        total as f64 / fan_out.as_secs_f64()
    );
    println!(
        "  writes took {:.0}% of the fan-out time (the rest is delivery to the watchers)",
        100.0 * writes.as_secs_f64() / fan_out.as_secs_f64()
    );
    println!(
        "  API requests served in the run: {} (LIST {}, WATCH {}, PATCH {})",
        sandbox.metrics.total(),
        sandbox.metrics.count("LIST", "configmaps"),
        sandbox.metrics.count("WATCH", "configmaps"),
        sandbox.metrics.count("PATCH", "configmaps")
    );
    mesh_proxy(&sandbox).await?;
    sandbox.stop().await;
    Ok(())
}

const MESH_WORKERS: usize = 8;
const MESH_REQUESTS_PER_WORKER: usize = 2_000;

/// Sends `MESH_REQUESTS_PER_WORKER` requests on each of `MESH_WORKERS` keep-alive connections to
/// `connect_to` with absolute-form `url`; returns requests per second and every latency.
async fn drive(
    connect_to: std::net::SocketAddr,
    url: &'static str,
) -> anyhow::Result<(f64, Vec<Duration>)> {
    use http_body_util::BodyExt;
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..MESH_WORKERS {
        workers.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(connect_to).await?;
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
            tokio::spawn(connection);
            let mut latencies = Vec::with_capacity(MESH_REQUESTS_PER_WORKER);
            for _ in 0..MESH_REQUESTS_PER_WORKER {
                let request = http::Request::get(url)
                    .header("host", "podinfo.test")
                    .body(axum::body::Body::empty())?;
                let sent = Instant::now();
                sender.ready().await?;
                let response = sender.send_request(request).await?;
                anyhow::ensure!(response.status() == 200, "status {}", response.status());
                response.into_body().collect().await?;
                latencies.push(sent.elapsed());
            }
            Ok::<_, anyhow::Error>(latencies)
        }));
    }
    let mut all = Vec::new();
    for worker in workers {
        all.extend(worker.await??);
    }
    let rps = all.len() as f64 / started.elapsed().as_secs_f64();
    all.sort();
    Ok((rps, all))
}

fn p99(sorted: &[Duration]) -> Duration {
    sorted[(sorted.len() * 99 / 100).min(sorted.len() - 1)]
}

async fn mesh_proxy(sandbox: &Sandbox) -> anyhow::Result<()> {
    use serin_sandbox::mesh_proxy::{Endpoint, MeshOptions, MeshProxy};
    use serin_sandbox::telemetry::Workload;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let backend = listener.local_addr()?;
    let app = axum::Router::new().fallback(|| async { "{\"version\":\"6.0.1\"}" });
    tokio::spawn(async move { axum::serve(listener, app).await });
    let endpoint = Endpoint {
        address: backend,
        labels: serde_json::Map::new(),
        workload: Workload {
            name: "podinfo".into(),
            namespace: "test".into(),
            app: "podinfo".into(),
            version: "unknown".into(),
        },
    };
    let upstreams: std::collections::HashMap<String, Vec<Endpoint>> =
        [("podinfo.test.svc.cluster.local".to_string(), vec![endpoint])].into();
    let proxy = MeshProxy::start(
        sandbox.store.clone(),
        Arc::new(upstreams),
        MeshOptions::default(),
    )
    .await?;

    let (direct_rps, direct) = drive(backend, "/").await?;
    let (proxied_rps, proxied) = drive(proxy.address, "http://podinfo.test/").await?;
    let total = MESH_WORKERS * MESH_REQUESTS_PER_WORKER;
    println!("sandbox: mesh proxy");
    println!(
        "  {MESH_WORKERS} connections x {MESH_REQUESTS_PER_WORKER} requests each way: through the proxy {proxied_rps:.0} req/s vs direct {direct_rps:.0} req/s = {:.2} of direct",
        proxied_rps / direct_rps
    );
    println!(
        "  p99 latency: through the proxy {:.2} ms vs direct {:.2} ms = +{:.2} ms added ({total} requests each, all 200)",
        p99(&proxied).as_secs_f64() * 1000.0,
        p99(&direct).as_secs_f64() * 1000.0,
        (p99(&proxied).as_secs_f64() - p99(&direct).as_secs_f64()) * 1000.0
    );
    proxy.stop().await;
    Ok(())
}
