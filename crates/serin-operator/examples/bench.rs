//! `make bench` for the operator: the release build of `serin-operator` runs against the sandbox
//! with 100 and then 1,000 Canaries (each with its own Deployment). For each size it reports the
//! operator's resident memory idle and while every Canary progresses, and the API requests it
//! makes per reconcile (from the sandbox's request counters and the operator's
//! `serin_reconcile_total`). The bench reads and writes the sandbox's store directly, so every
//! counted request is the operator's.

use serde_json::{Value, json};
use serin_sandbox::selectors::{FieldSelector, LabelSelector};
use serin_sandbox::store::{Part, PatchType, WriteOptions};
use serin_sandbox::{MeshSettings, Sandbox, SandboxOptions};
use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SIZES: [usize; 2] = [100, 1_000];
/// `SERIN_BENCH_SIZES=300,500` runs other sizes; `SERIN_BENCH_LOG=dir` keeps the operator's logs.
fn sizes() -> Vec<usize> {
    std::env::var("SERIN_BENCH_SIZES")
        .ok()
        .map(|list| {
            list.split(',')
                .filter_map(|n| n.trim().parse().ok())
                .collect()
        })
        .filter(|list: &Vec<usize>| !list.is_empty())
        .unwrap_or_else(|| SIZES.to_vec())
}
const IDLE_WINDOW: Duration = Duration::from_secs(30);
const NAMESPACE: &str = "bench";

fn operator_binary() -> std::path::PathBuf {
    // target/release/examples/bench → target/release/serin-operator
    let exe = std::env::current_exe().expect("the bench knows where it runs from");
    exe.parent()
        .and_then(|examples| examples.parent())
        .map(|dir| dir.join("serin-operator"))
        .expect("the bench runs from target/<profile>/examples")
}

fn resident_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0)
        * 1024
}

/// API requests other than watches by verb and resource: what the operator asks for, as opposed
/// to what it is told.
fn request_counts(sandbox: &Sandbox) -> BTreeMap<String, u64> {
    let text = sandbox.metrics.render(0);
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let Some(labels) = line.strip_prefix("sandbox_apiserver_request_total{") else {
            continue;
        };
        if labels.contains("verb=\"WATCH\"") {
            continue;
        }
        let Some((labels, value)) = labels.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|pair| pair.strip_prefix(name)?.strip_prefix("=\""))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let key = format!("{} {}", label("verb"), label("resource"));
        *counts.entry(key).or_default() += value.parse::<u64>().unwrap_or(0);
    }
    counts
}

fn requests(sandbox: &Sandbox) -> u64 {
    request_counts(sandbox).values().sum()
}

/// The requests made since `before`, by verb and resource, largest first.
fn breakdown(sandbox: &Sandbox, before: &BTreeMap<String, u64>) -> String {
    let mut delta: Vec<(String, u64)> = request_counts(sandbox)
        .into_iter()
        .map(|(key, n)| {
            let n = n - before.get(&key).copied().unwrap_or(0);
            (key, n)
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    delta.sort_by_key(|entry| std::cmp::Reverse(entry.1));
    delta
        .iter()
        .map(|(key, n)| format!("{key} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

async fn reconciles(admin: u16) -> u64 {
    let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", admin)).await else {
        return 0;
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if stream.write_all(request.as_bytes()).await.is_err() {
        return 0;
    }
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body).await;
    body.lines()
        .find_map(|line| line.strip_prefix("serin_reconcile_total "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

fn deployment(i: usize, tag: &str) -> Value {
    let name = format!("app-{i:04}");
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                                 "spec": {"containers": [{"name": "app", "image": format!("ghcr.io/stefanprodan/podinfo:{tag}"),
                                                          "ports": [{"name": "http", "containerPort": 9898}]}]}}}})
}

fn canary(i: usize) -> Value {
    let name = format!("app-{i:04}");
    json!({"apiVersion": "serin.dev/v1beta1", "kind": "Canary",
           "metadata": {"name": name, "namespace": NAMESPACE},
           "spec": {"provider": "istio",
                    "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                    "service": {"port": 9898},
                    "analysis": {"interval": "10s", "threshold": 2, "stepWeight": 50, "maxWeight": 50}}})
}

/// Phases of the bench's Canaries, counted.
fn phases(sandbox: &Sandbox) -> BTreeMap<String, usize> {
    let info = sandbox
        .store
        .resource("serin.dev", "v1beta1", "canaries")
        .expect("the CRDs are installed");
    let (items, _) = sandbox.store.list(
        &info,
        Some(NAMESPACE),
        &LabelSelector::default(),
        &FieldSelector::default(),
    );
    let mut counts = BTreeMap::new();
    for item in items {
        let phase = item["status"]["phase"].as_str().unwrap_or("-").to_string();
        *counts.entry(phase).or_insert(0) += 1;
    }
    counts
}

/// Waits until `count` Canaries are in `phase` (at most `limit`), sampling the operator's memory;
/// returns the peak and whether all got there.
async fn wait_for(
    sandbox: &Sandbox,
    operator: &Child,
    phase: &str,
    count: usize,
    limit: Duration,
) -> (u64, bool) {
    let started = Instant::now();
    let mut peak = 0;
    loop {
        peak = peak.max(resident_bytes(operator.id()));
        let seen = phases(sandbox);
        if seen.get(phase).copied().unwrap_or(0) >= count {
            return (peak, true);
        }
        if started.elapsed() > limit {
            eprintln!("  gave up after {limit:?} waiting for {count} {phase}: {seen:?}");
            return (peak, false);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn operator_log(size: usize) -> anyhow::Result<Stdio> {
    Ok(match std::env::var_os("SERIN_BENCH_LOG") {
        Some(dir) => {
            let path = std::path::Path::new(&dir).join(format!("operator-{size}.log"));
            Stdio::from(std::fs::File::create(path)?)
        }
        None => Stdio::null(),
    })
}

async fn run(size: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    // Pods become Ready after the default 300 ms and serve nothing: no traffic is needed without
    // metrics, and the mesh is there for its VirtualService and DestinationRule CRDs.
    let options = SandboxOptions {
        mesh: Some(MeshSettings {
            prometheus: None,
            ..MeshSettings::default()
        }),
        ..SandboxOptions::default()
    };
    let sandbox = Sandbox::start_with(dir.path(), options).await?;
    let store = &sandbox.store;
    let crds = include_str!("../../../artifacts/crds/serin.yaml");
    let crd_info = store
        .resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        .expect("built in");
    for document in crds.split("\n---") {
        let crd: Value = serde_saphyr::from_str(document)?;
        if crd.is_object() {
            store
                .create(&crd_info, None, crd, &WriteOptions::by("bench"))
                .map_err(|e| anyhow::anyhow!(e.message))?;
        }
    }
    let namespaces = store.resource("", "v1", "namespaces").expect("built in");
    store
        .create(
            &namespaces,
            None,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
            &WriteOptions::by("bench"),
        )
        .map_err(|e| anyhow::anyhow!(e.message))?;
    let deployments = store
        .resource("apps", "v1", "deployments")
        .expect("built in");
    let started = Instant::now();
    while store.resource("serin.dev", "v1beta1", "canaries").is_none() {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(10),
            "the Canary CRD was not served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let canaries = store
        .resource("serin.dev", "v1beta1", "canaries")
        .expect("just checked");
    for i in 0..size {
        store
            .create(
                &deployments,
                Some(NAMESPACE),
                deployment(i, "6.0.0"),
                &WriteOptions::by("bench"),
            )
            .map_err(|e| anyhow::anyhow!(e.message))?;
        store
            .create(
                &canaries,
                Some(NAMESPACE),
                canary(i),
                &WriteOptions::by("bench"),
            )
            .map_err(|e| anyhow::anyhow!(e.message))?;
    }

    let admin = free_port();
    let mut operator = Command::new(operator_binary())
        .args([
            "--namespace",
            NAMESPACE,
            "--metrics-server",
            "http://127.0.0.1:9",
            "--admin-address",
            &format!("127.0.0.1:{admin}"),
        ])
        .env("KUBECONFIG", &sandbox.kubeconfig)
        .stdout(Stdio::null())
        .stderr(operator_log(size)?)
        .spawn()
        .map_err(|e| {
            anyhow::anyhow!(
                "starting {}: {e} (make bench builds it)",
                operator_binary().display()
            )
        })?;

    let limit = Duration::from_secs(60 + size as u64 / 2);
    let init_counts = request_counts(&sandbox);
    let init_requests = requests(&sandbox);
    let (init_peak, initialized) = wait_for(&sandbox, &operator, "Initialized", size, limit).await;
    let init_reconciles = reconciles(admin).await;
    println!("operator: {size} canaries");
    println!(
        "  initializing: {} requests over {init_reconciles} reconciles = {:.1} per reconcile, {:.1} per canary; peak resident {:.1} MiB{}",
        requests(&sandbox) - init_requests,
        (requests(&sandbox) - init_requests) as f64 / init_reconciles.max(1) as f64,
        (requests(&sandbox) - init_requests) as f64 / size as f64,
        init_peak as f64 / 1048576.0,
        if initialized {
            ""
        } else {
            " (not all initialized)"
        }
    );
    println!("    by verb: {}", breakdown(&sandbox, &init_counts));

    // Idle: nothing changes; the operator should not need to ask the API server anything.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle_counts = request_counts(&sandbox);
    let (before, reconciles_before) = (requests(&sandbox), reconciles(admin).await);
    tokio::time::sleep(IDLE_WINDOW).await;
    let idle_rss = resident_bytes(operator.id());
    println!(
        "  idle {}s: {} API requests, {} reconciles; resident {:.1} MiB = {:.1} KiB per canary",
        IDLE_WINDOW.as_secs(),
        requests(&sandbox) - before,
        reconciles(admin).await - reconciles_before,
        idle_rss as f64 / 1048576.0,
        idle_rss as f64 / 1024.0 / size as f64
    );
    println!("    by verb: {}", breakdown(&sandbox, &idle_counts));

    // Progressing: a new version of every target at once.
    let progress_counts = request_counts(&sandbox);
    let (before, reconciles_before) = (requests(&sandbox), reconciles(admin).await);
    for i in 0..size {
        store
            .patch(
                &deployments,
                NAMESPACE,
                &format!("app-{i:04}"),
                PatchType::Merge,
                &json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "ghcr.io/stefanprodan/podinfo:6.0.1"}]}}}}),
                Part::Main,
                &WriteOptions::by("bench"),
            )
            .map_err(|e| anyhow::anyhow!(e.message))?;
    }
    let (peak, succeeded) = wait_for(&sandbox, &operator, "Succeeded", size, limit * 2).await;
    let spent = requests(&sandbox) - before;
    let ticks = reconciles(admin).await - reconciles_before;
    println!(
        "  progressing to Succeeded: {spent} API requests over {ticks} reconciles = {:.1} per canary tick; peak resident {:.1} MiB{}",
        spent as f64 / ticks.max(1) as f64,
        peak as f64 / 1048576.0,
        if succeeded {
            ""
        } else {
            " (not all succeeded)"
        }
    );
    println!("    by verb: {}", breakdown(&sandbox, &progress_counts));
    let _ = operator.kill();
    let _ = operator.wait();
    sandbox.stop().await;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    for size in sizes() {
        run(size).await?;
    }
    Ok(())
}
