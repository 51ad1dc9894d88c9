//! `make bench-operator`: the release build of `serin-operator` against the sandbox with 100,
//! 1,000 and 10,000 (with `SERIN_BENCH_SIZES`, other) Canaries, each with its own Deployment and
//! one 50% step. The bench reads and writes the sandbox's store directly, so every API request counted is
//! the operator's, and it follows every commit to the store (with its commit time) to measure:
//! - memory: the operator's resident memory idle and while every Canary progresses;
//! - step lag: for every tick of every Canary, its status write's commit time minus the moment
//!   the tick was due (the previous tick's `lastTickTime` plus the interval); the operator's
//!   share starts at the later of that moment and the Canary's Deployments last becoming
//!   available, so a rollout the sandbox is slow to finish is not counted against the operator;
//! - detection: from the bench's update of a target to the commit of the Canary's status that
//!   starts the release;
//! - requests per release against the minimum a release needs: one status write per transition
//!   (phase or weight), one route write per weight change, the scale and promote writes; with
//!   Events, one Event per transition is added to the minimum;
//! - CPU: the operator's user + system seconds per 1,000 reconciles and per 1,000 ticks;
//! - the sandbox's own figures, to show it is not what the operator waits for.
//!
//! After the table it prints each target beside its figure, met or missed, and exits non-zero
//! when one is missed.
//!
//! The targets are updated one after another over one interval, as releases arrive in a real
//! cluster; `SERIN_BENCH_INTERVAL` sets the interval (30s by default).

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use serin_sandbox::store::{Change, ChangeType, Part, PatchType, WriteOptions};
use serin_sandbox::{MeshSettings, Sandbox, SandboxOptions};
use std::collections::{BTreeMap, HashMap};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

// In a folder of its own: a file beside this one would be another example.
#[path = "bench/report.rs"]
mod report;
use report::{table, target_lines};

// The sandbox in this process allocates as the operator does: with glibc's malloc, growing its
// arenas (sysmalloc and its mprotect calls) and first touches of new pages took about an eighth of
// the process's CPU at 1,000 Canaries (docs/scale.md, "The sandbox's CPU").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The sizes run by default; 10,000 took 5.5 to 9 minutes in six runs, and the process, which holds
/// the sandbox, peaked at 8.2 GiB resident there.
const SIZES: [usize; 3] = [100, 1_000, 10_000];
const IDLE_WINDOW: Duration = Duration::from_secs(30);
const NAMESPACE: &str = "bench";

/// `SERIN_BENCH_SIZES=300,500` runs other sizes.
fn sizes() -> Vec<usize> {
    std::env::var("SERIN_BENCH_SIZES")
        .ok()
        .map(|list| {
            list.split(',')
                .filter_map(|n| n.trim().replace('_', "").parse().ok())
                .collect()
        })
        .filter(|list: &Vec<usize>| !list.is_empty())
        .unwrap_or_else(|| SIZES.to_vec())
}

/// The Canaries' analysis interval: `SERIN_BENCH_INTERVAL=10s`, 30s by default. The operator runs
/// no Canary faster than every 10 s, so a shorter one is refused: every tick would look late.
fn interval() -> anyhow::Result<Duration> {
    let interval = std::env::var("SERIN_BENCH_INTERVAL")
        .ok()
        .and_then(|text| humantime::parse_duration(&text).ok())
        .unwrap_or(Duration::from_secs(30));
    let shortest = Duration::from_secs(serin_api::canary::MIN_INTERVAL_SECONDS);
    anyhow::ensure!(
        interval >= shortest,
        "SERIN_BENCH_INTERVAL is {interval:?}, shorter than the operator's shortest interval \
         ({shortest:?}); set it to 10s or more"
    );
    Ok(interval)
}

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

/// User + system CPU seconds the process `pid` has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces) start at field 3; utime and stime are 14, 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
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

/// The requests made since `before`, by verb and resource.
fn requests_since(sandbox: &Sandbox, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    request_counts(sandbox)
        .into_iter()
        .map(|(key, n)| {
            let n = n - before.get(&key).copied().unwrap_or(0);
            (key, n)
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The operator's `/metrics` text; empty when it does not answer.
async fn scrape(admin: u16) -> String {
    match reqwest::get(format!("http://127.0.0.1:{admin}/metrics")).await {
        Ok(response) => response.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

async fn reconciles(admin: u16) -> u64 {
    scrape(admin)
        .await
        .lines()
        .find_map(|line| line.strip_prefix("serin_reconcile_total "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// `serin_cache_bytes` over `serin_cache_objects` for each kind the operator caches any of.
fn cached_bytes_per_object(metrics: &str) -> BTreeMap<String, u64> {
    let by_kind = |name: &str| -> BTreeMap<String, u64> {
        metrics
            .lines()
            .filter_map(|line| {
                let rest = line.strip_prefix(name)?.strip_prefix("{kind=\"")?;
                let (kind, value) = rest.split_once("\"} ")?;
                Some((kind.to_string(), value.trim().parse().ok()?))
            })
            .collect()
    };
    let objects = by_kind("serin_cache_objects");
    by_kind("serin_cache_bytes")
        .into_iter()
        .filter_map(|(kind, bytes)| {
            let count = *objects.get(&kind).filter(|n| **n > 0)?;
            Some((kind, bytes / count))
        })
        .collect()
}

fn app(i: usize) -> String {
    format!("app-{i:05}")
}

fn deployment(i: usize, tag: &str) -> Value {
    let name = app(i);
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                                 "spec": {"containers": [{"name": "app", "image": format!("ghcr.io/stefanprodan/podinfo:{tag}"),
                                                          "ports": [{"name": "http", "containerPort": 9898}]}]}}}})
}

fn canary(i: usize, interval: Duration) -> Value {
    let name = app(i);
    json!({"apiVersion": "serin.dev/v1beta1", "kind": "Canary",
           "metadata": {"name": name, "namespace": NAMESPACE},
           "spec": {"provider": "istio",
                    "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                    "service": {"port": 9898},
                    "analysis": {"interval": format!("{}s", interval.as_secs()), "threshold": 2,
                                 "stepWeight": 50, "maxWeight": 50}}})
}

/// What the bench learns from the commits to the store, as they happen.
#[derive(Default)]
struct Log {
    /// Whether the releases have begun: only their commits are counted.
    releasing: bool,
    interval: SignedDuration,
    phases: HashMap<String, String>,
    /// When the bench updated each target, until the Canary's release starts.
    updated_at: HashMap<String, SystemTime>,
    /// Seconds from a tick being due to its status write, for the release's ticks.
    step_lags: Vec<f64>,
    /// Seconds from the later of a tick being due and its Canary's Deployments last becoming
    /// available to its status write: the operator's share of the step lag.
    operator_lags: Vec<f64>,
    /// When each Deployment last became available (all its replicas updated and available for
    /// its current generation).
    available_at: HashMap<String, SystemTime>,
    /// Ticks whose Deployments became available only after the tick was due.
    waited_on_rollout: u64,
    /// Seconds from a target's update to its Canary's release starting.
    detections: Vec<f64>,
    /// Seconds from the operator scaling a target up to the target being available.
    rollouts: Vec<f64>,
    scaled_up_at: HashMap<String, SystemTime>,
    ticks: u64,
    transitions: u64,
    route_writes: u64,
    /// Changes of a Deployment's spec: the bench's update of each target and the operator's
    /// scale and promote writes.
    workload_writes: u64,
    promotions_completed: HashMap<String, u32>,
    /// Commits per second of the run, for the sandbox's peak rate.
    commits_by_second: BTreeMap<u64, u64>,
    /// Commits while releasing, by resource: the changes the operator's watches carry.
    commits_by_resource: BTreeMap<String, u64>,
}

fn seconds_between(earlier: SystemTime, later: SystemTime) -> f64 {
    match later.duration_since(earlier) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

fn timestamp(value: &Value) -> Option<Timestamp> {
    value.as_str()?.parse().ok()
}

impl Log {
    fn observe(&mut self, change: &Change) {
        let second = change
            .at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        *self.commits_by_second.entry(second).or_default() += 1;
        if self.releasing {
            *self
                .commits_by_resource
                .entry(change.resource.clone())
                .or_default() += 1;
        }
        let name = change.object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let empty = Value::Null;
        let previous = change.previous.as_deref().unwrap_or(&empty);
        match change.resource.as_str() {
            "canaries.serin.dev" => self.canary(change, previous, name),
            "virtualservices.networking.istio.io"
                if self.releasing && change.object["spec"] != previous["spec"] =>
            {
                self.route_writes += 1
            }
            "deployments.apps" => self.deployment(change, previous, name),
            "events" if change.change != ChangeType::Deleted => {
                let message = change.object["message"].as_str().unwrap_or_default();
                // A repeat raises the first Event's count: it is counted as a promotion too.
                let count = |event: &Value| event["count"].as_u64().unwrap_or(1);
                let recorded = match change.change {
                    ChangeType::Added => count(&change.object),
                    _ => count(&change.object).saturating_sub(count(previous)),
                };
                if message.starts_with("Promotion completed") && recorded > 0 {
                    let canary = change.object["involvedObject"]["name"]
                        .as_str()
                        .unwrap_or_default();
                    *self
                        .promotions_completed
                        .entry(canary.to_string())
                        .or_default() += recorded as u32;
                }
            }
            _ => {}
        }
    }

    fn canary(&mut self, change: &Change, previous: &Value, name: String) {
        let (old, new) = (&previous["status"], &change.object["status"]);
        let phase = new["phase"].as_str().unwrap_or_default().to_string();
        let old_phase = old["phase"].as_str().unwrap_or_default();
        if self.releasing {
            if old_phase != phase || old["canaryWeight"] != new["canaryWeight"] {
                self.transitions += 1;
            }
            let starts_release =
                matches!(old_phase, "Initialized" | "Succeeded") && phase == "Progressing";
            if starts_release && let Some(updated) = self.updated_at.remove(&name) {
                self.detections.push(seconds_between(updated, change.at));
            }
            let tick = timestamp(&new["lastTickTime"]);
            let old_tick = timestamp(&old["lastTickTime"]);
            if tick.is_some() && tick != old_tick {
                self.ticks += 1;
                if let (false, Some(old_tick)) = (starts_release, old_tick) {
                    let due = SystemTime::from(old_tick + self.interval);
                    self.step_lags.push(seconds_between(due, change.at));
                    let primary = format!("{name}-primary");
                    let ready = [&name, &primary]
                        .iter()
                        .filter_map(|d| self.available_at.get(*d).copied())
                        .fold(due, SystemTime::max);
                    self.operator_lags.push(seconds_between(ready, change.at));
                    if ready > due {
                        self.waited_on_rollout += 1;
                    }
                }
            }
        }
        self.phases.insert(name, phase);
    }

    fn deployment(&mut self, change: &Change, previous: &Value, name: String) {
        let (old, new) = (&previous["spec"], &change.object["spec"]);
        if self.releasing && old != new {
            self.workload_writes += 1;
        }
        if old["replicas"].as_u64() == Some(0) && new["replicas"].as_u64().unwrap_or(0) > 0 {
            self.scaled_up_at.insert(name.clone(), change.at);
        }
        let replicas = new["replicas"].as_u64().unwrap_or(1);
        let settled = |object: &Value| {
            let status = &object["status"];
            status["observedGeneration"] == object["metadata"]["generation"]
                && status["updatedReplicas"].as_u64().unwrap_or(0) >= replicas
                && status["availableReplicas"].as_u64().unwrap_or(0) >= replicas
        };
        if settled(&change.object) && !settled(previous) {
            self.available_at.insert(name.clone(), change.at);
        }
        if replicas > 0
            && settled(&change.object)
            && let Some(scaled) = self.scaled_up_at.remove(&name)
        {
            self.rollouts.push(seconds_between(scaled, change.at));
        }
    }

    fn count(&self, phase: &str) -> usize {
        self.phases.values().filter(|p| p.as_str() == phase).count()
    }
}

/// The p50, p99 and max of a set of seconds, and how many there were.
#[derive(Default, Clone, Copy)]
struct Percentiles {
    p50: f64,
    p99: f64,
    max: f64,
    count: usize,
}

impl Percentiles {
    fn of(values: &[f64]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
        Percentiles {
            p50: at(0.5),
            p99: at(0.99),
            max: sorted[sorted.len() - 1],
            count: sorted.len(),
        }
    }
}

impl std::fmt::Display for Percentiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.count == 0 {
            return f.write_str("-");
        }
        write!(
            f,
            "{:.3} / {:.3} / {:.3} s (n={})",
            self.p50, self.p99, self.max, self.count
        )
    }
}

/// The figures of one size, for the table.
#[derive(Default)]
struct Figures {
    size: usize,
    idle_rss: u64,
    /// Bytes held per cached object, by kind, while idle (compressed JSON for the kinds kept so).
    cached_bytes: BTreeMap<String, u64>,
    peak_rss: u64,
    idle_requests: u64,
    step_lag: Percentiles,
    operator_lag: Percentiles,
    waited_on_rollout: u64,
    detection: Percentiles,
    requests: BTreeMap<String, u64>,
    minimum: u64,
    transitions: u64,
    cpu_per_1000_reconciles: f64,
    cpu_per_1000_ticks: f64,
    /// The operator's CPU seconds per minute while nothing changes, and its reconciles then.
    idle_cpu_per_minute: f64,
    idle_reconciles: u64,
    /// Reconciles while every Canary releases.
    reconciles: u64,
    sandbox_objects: usize,
    /// Objects and their JSON bytes per stored resource, at the end of the release.
    sandbox_by_resource: BTreeMap<String, (usize, usize)>,
    /// Commits while releasing, by resource.
    commits_by_resource: BTreeMap<String, u64>,
    /// The bench process's memory growth (the sandbox, and the bench's own log of commits) per
    /// object stored since the sandbox started.
    sandbox_bytes_per_object: u64,
    commits_peak: u64,
    /// The sandbox controllers' passes during the release, their seconds, and the release's.
    sandbox_passes: (u64, f64, f64),
    rollout: Percentiles,
    succeeded: usize,
    promoted_once: usize,
}

impl Figures {
    fn total(&self) -> u64 {
        self.requests.values().sum()
    }

    /// Events written: new ones, and repeats counted on the first.
    fn events(&self) -> u64 {
        ["CREATE events", "PATCH events"]
            .iter()
            .filter_map(|key| self.requests.get(*key))
            .sum()
    }
}

/// Waits until `count` Canaries are in `phase` (at most `limit`), sampling the operator's memory;
/// returns the peak and whether all got there.
async fn wait_for(
    log: &Mutex<Log>,
    operator: &Operator,
    phase: &str,
    count: usize,
    limit: Duration,
) -> (u64, bool) {
    let started = Instant::now();
    let mut peak = 0;
    loop {
        peak = peak.max(resident_bytes(operator.id()));
        let seen = log.lock().expect("the log").count(phase);
        if seen >= count {
            return (peak, true);
        }
        if started.elapsed() > limit {
            eprintln!("  gave up after {limit:?}: {seen} of {count} {phase}");
            return (peak, false);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The operator's process, stopped when the bench is done with it or gives up.
struct Operator(Child);

impl Operator {
    fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
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

fn create(sandbox: &Sandbox, plural: &str, object: Value) -> anyhow::Result<()> {
    let store = &sandbox.store;
    let api_version = object["apiVersion"].as_str().unwrap_or("v1");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let info = store
        .resource(group, version, plural)
        .ok_or_else(|| anyhow::anyhow!("{plural} are not served"))?;
    let namespace = object["metadata"]["namespace"].as_str().map(str::to_string);
    store
        .create(
            &info,
            namespace.as_deref(),
            object,
            &WriteOptions::by("bench"),
        )
        .map_err(|e| anyhow::anyhow!(e.message))?;
    Ok(())
}

async fn run(size: usize, interval: Duration) -> anyhow::Result<Figures> {
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
    let (base_rss, base_objects) = (
        resident_bytes(std::process::id()),
        sandbox.store.object_count(),
    );
    let log = Arc::new(Mutex::new(Log {
        interval: SignedDuration::try_from(interval)?,
        ..Log::default()
    }));
    let mut commits = sandbox.store.follow();
    let follower = {
        let log = log.clone();
        tokio::spawn(async move {
            while let Some(change) = commits.recv().await {
                log.lock().expect("the log").observe(&change);
            }
        })
    };
    let crds = include_str!("../../../artifacts/crds/serin.yaml");
    for document in crds.split("\n---") {
        let crd: Value = serde_saphyr::from_str(document)?;
        if crd.is_object() {
            create(&sandbox, "customresourcedefinitions", crd)?;
        }
    }
    create(
        &sandbox,
        "namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
    )?;
    let started = Instant::now();
    while sandbox
        .store
        .resource("serin.dev", "v1beta1", "canaries")
        .is_none()
    {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(10),
            "the Canary CRD was not served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for i in 0..size {
        create(&sandbox, "deployments", deployment(i, "6.0.0"))?;
        create(&sandbox, "canaries", canary(i, interval))?;
    }

    let admin = free_port();
    let operator = Command::new(operator_binary())
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
    let operator = Operator(operator);
    let mut figures = Figures {
        size,
        ..Figures::default()
    };
    // Each phase may take a few intervals plus the time to serve every Canary once.
    let limit = interval * 4 + Duration::from_millis(size as u64 * 200);
    let (_, initialized) = wait_for(&log, &operator, "Initialized", size, limit).await;
    anyhow::ensure!(initialized, "{size}: not every Canary initialized");

    // Idle: nothing changes; the operator should not need to ask the API server anything.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle_counts = request_counts(&sandbox);
    let (idle_cpu_before, idle_reconciles_before) =
        (cpu_seconds(operator.id()), reconciles(admin).await);
    tokio::time::sleep(IDLE_WINDOW).await;
    figures.idle_cpu_per_minute =
        (cpu_seconds(operator.id()) - idle_cpu_before) * 60.0 / IDLE_WINDOW.as_secs_f64();
    figures.idle_reconciles = reconciles(admin)
        .await
        .saturating_sub(idle_reconciles_before);
    figures.idle_rss = resident_bytes(operator.id());
    figures.cached_bytes = cached_bytes_per_object(&scrape(admin).await);
    figures.idle_requests = requests_since(&sandbox, &idle_counts).values().sum();

    // Releasing: a new version of every target, one after another over one interval.
    let before = request_counts(&sandbox);
    let (passes_before, pass_seconds_before) = sandbox.metrics.controller_passes();
    let release_started = Instant::now();
    let (cpu_before, reconciles_before) = (cpu_seconds(operator.id()), reconciles(admin).await);
    log.lock().expect("the log").releasing = true;
    let deployments = sandbox
        .store
        .resource("apps", "v1", "deployments")
        .expect("built in");
    let store = sandbox.store.clone();
    let updater_log = log.clone();
    let updater = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        for i in 0..size {
            let at = started + interval.mul_f64(i as f64 / size as f64);
            tokio::time::sleep_until(at).await;
            updater_log
                .lock()
                .expect("the log")
                .updated_at
                .insert(app(i), SystemTime::now());
            let patch = json!({"spec": {"template": {"spec": {"containers": [
                {"name": "app", "image": "ghcr.io/stefanprodan/podinfo:6.0.1"}]}}}});
            if let Err(e) = store.patch(
                &deployments,
                NAMESPACE,
                &app(i),
                PatchType::Merge,
                &patch,
                Part::Main,
                &WriteOptions::by("bench"),
            ) {
                eprintln!("  updating {}: {}", app(i), e.message);
            }
        }
    });
    let (peak, succeeded) =
        wait_for(&log, &operator, "Succeeded", size, limit + interval * 2).await;
    updater.await?;
    figures.peak_rss = peak;
    figures.requests = requests_since(&sandbox, &before);
    let reconciled = reconciles(admin)
        .await
        .saturating_sub(reconciles_before)
        .max(1);
    let cpu = cpu_seconds(operator.id()) - cpu_before;
    let (passes, pass_seconds) = sandbox.metrics.controller_passes();
    figures.sandbox_passes = (
        passes - passes_before,
        pass_seconds - pass_seconds_before,
        release_started.elapsed().as_secs_f64(),
    );
    figures.sandbox_objects = sandbox.store.object_count();
    figures.sandbox_by_resource = sandbox.store.footprint_by_resource();
    figures.sandbox_bytes_per_object = resident_bytes(std::process::id()).saturating_sub(base_rss)
        / (figures.sandbox_objects.saturating_sub(base_objects).max(1) as u64);
    drop(operator);
    {
        let log = log.lock().expect("the log");
        figures.cpu_per_1000_reconciles = cpu * 1000.0 / reconciled as f64;
        figures.reconciles = reconciled;
        figures.cpu_per_1000_ticks = cpu * 1000.0 / log.ticks.max(1) as f64;
        figures.step_lag = Percentiles::of(&log.step_lags);
        figures.operator_lag = Percentiles::of(&log.operator_lags);
        figures.waited_on_rollout = log.waited_on_rollout;
        figures.detection = Percentiles::of(&log.detections);
        figures.rollout = Percentiles::of(&log.rollouts);
        figures.transitions = log.transitions;
        // Less the bench's own update of each target.
        let operator_workload_writes = log.workload_writes.saturating_sub(size as u64);
        figures.minimum = log.transitions + log.route_writes + operator_workload_writes;
        figures.commits_peak = log.commits_by_second.values().copied().max().unwrap_or(0);
        figures.commits_by_resource = log.commits_by_resource.clone();
        figures.succeeded = log.count("Succeeded");
        figures.promoted_once = (0..size)
            .filter(|i| log.promotions_completed.get(&app(*i)) == Some(&1))
            .count();
    }
    if !succeeded {
        eprintln!("  {size}: not every Canary succeeded");
    }
    follower.abort();
    sandbox.stop().await;
    Ok(figures)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let interval = interval()?;
    let mut all = Vec::new();
    for size in sizes() {
        let started = Instant::now();
        all.push(run(size, interval).await?);
        eprintln!("  {size} Canaries measured in {:.0?}", started.elapsed());
    }
    print!("{}", table(&all, interval));
    let (lines, missed) = target_lines(&all);
    print!("{lines}");
    if missed > 0 {
        eprintln!("{missed} target(s) missed");
        std::process::exit(1);
    }
    Ok(())
}
