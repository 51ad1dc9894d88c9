//! Request counters for `/metrics`, and fault injection for reliability tests.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Counts of requests and watches, exported in Prometheus text format.
#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    writes_by_client: Mutex<BTreeMap<(String, String, String), u64>>,
    watches_started: AtomicU64,
    watches_active: AtomicU64,
    controller_passes: AtomicU64,
    controller_pass_micros: AtomicU64,
}

impl Metrics {
    /// Counts one request of `verb` (GET, LIST, WATCH, CREATE, UPDATE, PATCH, APPLY, DELETE,
    /// DELETECOLLECTION) on `resource` (`plural` or `plural.group`) answered with `code`.
    pub fn record(&self, verb: &str, resource: &str, code: u16) {
        let mut requests = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        *requests
            .entry((verb.to_string(), resource.to_string(), code))
            .or_insert(0) += 1;
    }

    /// Counts one write (any verb but GET, LIST and WATCH) of `verb` on `resource` sent by `client`
    /// (its User-Agent), so a test can tell which of several processes wrote.
    pub fn record_write(&self, client: &str, verb: &str, resource: &str) {
        if matches!(verb, "GET" | "LIST" | "WATCH") {
            return;
        }
        let mut writes = self
            .writes_by_client
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *writes
            .entry((client.to_string(), verb.to_string(), resource.to_string()))
            .or_insert(0) += 1;
    }

    /// Writes sent by clients whose User-Agent contains `client`, whatever the answer.
    pub fn writes_by(&self, client: &str) -> u64 {
        self.count_writes(|c, _| c.contains(client))
    }

    /// Like [`Metrics::writes_by`], without writes to Leases: what a leader-elected process may
    /// send only while it leads (its lease manager keeps trying to renew after losing the Lease).
    pub fn object_writes_by(&self, client: &str) -> u64 {
        self.count_writes(|c, resource| c.contains(client) && !resource.starts_with("leases"))
    }

    fn count_writes(&self, counted: impl Fn(&str, &str) -> bool) -> u64 {
        let writes = self
            .writes_by_client
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        writes
            .iter()
            .filter(|((client, _, resource), _)| counted(client, resource))
            .map(|(_, n)| n)
            .sum()
    }

    /// A watch stream started.
    pub fn watch_started(&self) {
        self.watches_started.fetch_add(1, Ordering::Relaxed);
        self.watches_active.fetch_add(1, Ordering::Relaxed);
    }

    /// A watch stream ended.
    pub fn watch_ended(&self) {
        self.watches_active.fetch_sub(1, Ordering::Relaxed);
    }

    /// Watch streams open now.
    pub fn active_watches(&self) -> u64 {
        self.watches_active.load(Ordering::Relaxed)
    }

    /// Total requests with this verb and resource, whatever the code.
    pub fn count(&self, verb: &str, resource: &str) -> u64 {
        let requests = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        requests
            .iter()
            .filter(|((v, r, _), _)| v == verb && r == resource)
            .map(|(_, n)| n)
            .sum()
    }

    /// Total requests of every kind.
    pub fn total(&self) -> u64 {
        let requests = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        requests.values().sum()
    }

    /// Counts one pass of the built-in controllers that took `spent`.
    pub fn controller_pass(&self, spent: std::time::Duration) {
        self.controller_passes.fetch_add(1, Ordering::Relaxed);
        self.controller_pass_micros
            .fetch_add(spent.as_micros() as u64, Ordering::Relaxed);
    }

    /// Passes of the built-in controllers so far, and the seconds they took.
    pub fn controller_passes(&self) -> (u64, f64) {
        (
            self.controller_passes.load(Ordering::Relaxed),
            self.controller_pass_micros.load(Ordering::Relaxed) as f64 / 1e6,
        )
    }

    /// The Prometheus text exposition of every counter.
    pub fn render(&self, objects: usize) -> String {
        let mut out = String::from(
            "# HELP sandbox_apiserver_request_total API requests by verb, resource and HTTP code.\n# TYPE sandbox_apiserver_request_total counter\n",
        );
        let requests = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        for ((verb, resource, code), n) in requests.iter() {
            out.push_str(&format!(
                "sandbox_apiserver_request_total{{verb=\"{verb}\",resource=\"{resource}\",code=\"{code}\"}} {n}\n"
            ));
        }
        drop(requests);
        out.push_str("# HELP sandbox_apiserver_client_write_total Write requests by client (User-Agent), verb and resource.\n# TYPE sandbox_apiserver_client_write_total counter\n");
        let writes = self
            .writes_by_client
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for ((client, verb, resource), n) in writes.iter() {
            let client = client.replace('\\', "\\\\").replace('"', "\\\"");
            out.push_str(&format!(
                "sandbox_apiserver_client_write_total{{client=\"{client}\",verb=\"{verb}\",resource=\"{resource}\"}} {n}\n"
            ));
        }
        drop(writes);
        out.push_str(&format!(
            "# HELP sandbox_apiserver_watches_total Watch streams started.\n# TYPE sandbox_apiserver_watches_total counter\nsandbox_apiserver_watches_total {}\n",
            self.watches_started.load(Ordering::Relaxed)
        ));
        out.push_str(&format!(
            "# HELP sandbox_apiserver_watches_active Watch streams open now.\n# TYPE sandbox_apiserver_watches_active gauge\nsandbox_apiserver_watches_active {}\n",
            self.active_watches()
        ));
        let (passes, seconds) = self.controller_passes();
        out.push_str(&format!(
            "# HELP sandbox_controller_passes_total Passes of the built-in controllers.\n# TYPE sandbox_controller_passes_total counter\nsandbox_controller_passes_total {passes}\n# HELP sandbox_controller_pass_seconds_total Time the built-in controllers' passes took.\n# TYPE sandbox_controller_pass_seconds_total counter\nsandbox_controller_pass_seconds_total {seconds}\n"
        ));
        out.push_str(&format!(
            "# HELP sandbox_apiserver_objects Objects stored.\n# TYPE sandbox_apiserver_objects gauge\nsandbox_apiserver_objects {objects}\n"
        ));
        out
    }
}

/// One fault rule: requests matching `verb` and `resource` (absent = any) fail with probability
/// `error_rate`, are delayed by `latency_ms`, and (for watches) are cut after `watch_drop_after_ms`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultRule {
    /// Verb to match, as in the metrics (`LIST`, `PATCH`, ...); absent matches every verb.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verb: Option<String>,
    /// Resource to match (`deployments.apps`, `pods`, `canaries.serin.dev`); absent matches all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// Probability (0 to 1) that a matching request fails with 500 InternalError.
    #[serde(default)]
    pub error_rate: f64,
    /// Milliseconds added before answering a matching request.
    #[serde(default)]
    pub latency_ms: u64,
    /// Milliseconds after which a matching watch stream is closed by the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch_drop_after_ms: Option<u64>,
    /// Probability (0 to 1) that a matching watch resumed from a resourceVersion gets `410 Gone`
    /// (Expired), as when etcd compacted past it, so the client must list again.
    #[serde(default)]
    pub expire_rate: f64,
    /// Only requests whose `User-Agent` starts with this (e.g. `serin-operator`); absent matches
    /// every client, kubectl included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
}

impl FaultRule {
    fn matches(&self, verb: &str, resource: &str, user_agent: &str) -> bool {
        self.verb
            .as_deref()
            .is_none_or(|v| v.eq_ignore_ascii_case(verb))
            && self.resource.as_deref().is_none_or(|r| r == resource)
            && self
                .user_agent
                .as_deref()
                .is_none_or(|prefix| user_agent.starts_with(prefix))
    }
}

/// What the faults decide for one request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultPlan {
    /// Answer with an injected error.
    pub fail: bool,
    /// Wait this long first.
    pub latency: Duration,
    /// Close a watch after this long.
    pub watch_drop_after: Option<Duration>,
    /// Answer a watch resumed from a resourceVersion with 410 Expired.
    pub expire_watch: bool,
}

/// A seeded xorshift64* generator shared across threads: cheap, reproducible from its seed, and
/// good enough to spread injected failures and weighted picks.
pub struct SeededRandom(AtomicU64);

impl Default for SeededRandom {
    fn default() -> Self {
        SeededRandom::new(0x9e37_79b9_7f4a_7c15)
    }
}

impl SeededRandom {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        SeededRandom(AtomicU64::new(seed | 1))
    }

    /// The next number in [0, 1).
    pub fn next_unit(&self) -> f64 {
        let mut x = self.0.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0.store(x, Ordering::Relaxed);
        (x.wrapping_mul(0x2545F4914F6CDD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The fault rules in force, changeable at run time.
#[derive(Default)]
pub struct Faults {
    rules: Mutex<Vec<FaultRule>>,
    random: SeededRandom,
}

impl Faults {
    /// Faults with `rules` in force.
    pub fn new(rules: Vec<FaultRule>) -> Self {
        Faults {
            rules: Mutex::new(rules),
            random: SeededRandom::default(),
        }
    }

    /// Replaces the rules.
    pub fn set(&self, rules: Vec<FaultRule>) {
        *self.rules.lock().unwrap_or_else(|e| e.into_inner()) = rules;
    }

    /// The rules in force.
    pub fn rules(&self) -> Vec<FaultRule> {
        self.rules.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Decides the faults of one request from the client `user_agent`.
    pub fn plan(&self, verb: &str, resource: &str, user_agent: &str) -> FaultPlan {
        let rules = self.rules.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut plan = FaultPlan::default();
        for rule in rules
            .iter()
            .filter(|r| r.matches(verb, resource, user_agent))
        {
            if rule.expire_rate > 0.0 && self.random.next_unit() < rule.expire_rate {
                plan.expire_watch = true;
            }
            plan.latency += Duration::from_millis(rule.latency_ms);
            if rule.error_rate > 0.0 && self.random.next_unit() < rule.error_rate {
                plan.fail = true;
            }
            if let Some(ms) = rule.watch_drop_after_ms {
                let after = Duration::from_millis(ms);
                plan.watch_drop_after = Some(plan.watch_drop_after.map_or(after, |d| d.min(after)));
            }
        }
        plan
    }
}
