//! An in-memory world for replaying releases through [`crate::decide()`] tick by tick, with no cluster:
//! Deployments that finish rolling out after a set time (or never, for an image named `*broken*`),
//! a router holding weights, and scripted answers for webhooks and metric queries.
//!
//! It drives the engine the way the controller does (decide, run the requested checks, decide
//! again, apply the plan) and keeps a log of every tick. The timeline tests and `make demo` use it.

use crate::plan::{
    Action, Check, Decision, EventType, MetricReading, Observation, Outcome, Routes, Verdict,
};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serin_api::{Canary, Phase};
use std::collections::BTreeMap;

/// Answers a check the engine asks for.
pub type Responder = Box<dyn FnMut(&Check, Timestamp) -> Outcome>;

/// One reconcile, as recorded by [`World`].
#[derive(Clone, Debug, PartialEq)]
pub struct TickRecord {
    /// Seconds since the world started.
    pub at: i64,
    /// Phase after the tick.
    pub phase: Option<Phase>,
    /// `status.canaryWeight` after the tick.
    pub weight: i32,
    /// Router weights after the tick.
    pub routes: Option<Routes>,
    /// Events, prefixed `Normal: ` or `Warning: `.
    pub events: Vec<String>,
    /// The reason of each event, in the same order as `events`.
    pub reasons: Vec<&'static str>,
    /// When the plan asked to be reconciled again.
    pub requeue_after: Option<std::time::Duration>,
    /// Whether the plan let the workloads' status wait for that requeue.
    pub workload_status_waits: bool,
    /// Actions carried out.
    pub actions: Vec<Action>,
    /// Checks run, in order.
    pub checks: Vec<Check>,
}

/// A simulated cluster holding one canary, its target, primary and router.
pub struct World {
    /// The Canary, with the status the engine last wrote.
    pub canary: Canary,
    /// The target Deployment.
    pub target: Deployment,
    /// The primary Deployment, once created.
    pub primary: Option<Deployment>,
    /// Router weights, once the routing objects exist.
    pub routes: Option<Routes>,
    /// Checksums of tracked configs the target uses.
    pub configs: BTreeMap<String, String>,
    /// Current time.
    pub now: Timestamp,
    /// How long a Deployment takes to finish a rollout.
    pub rollout_seconds: i64,
    /// Answers for hooks and metrics.
    pub responder: Responder,
    /// Every reconcile so far.
    pub log: Vec<TickRecord>,
    /// Deployments (`"target"`, `"primary"`) whose rollouts never become available, whatever the image.
    pub failing: std::collections::BTreeSet<&'static str>,
    start: Timestamp,
    rollout_started: BTreeMap<String, Timestamp>,
}

/// A Canary `podinfo` in namespace `test` at generation 1, targeting Deployment `podinfo` on port
/// 9898, with `analysis` (JSON).
pub fn canary(analysis: serde_json::Value) -> Canary {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "serin.dev/v1beta1",
        "kind": "Canary",
        "metadata": {"name": "podinfo", "namespace": "test", "generation": 1},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo"},
            "service": {"port": 9898},
            "analysis": analysis
        }
    }))
    .expect("a valid Canary")
}

/// Builds a Deployment named `name` running `image` with `replicas`, already rolled out.
pub fn deployment(name: &str, namespace: &str, image: &str, replicas: i32) -> Deployment {
    let mut d: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": namespace, "generation": 1},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": name, "image": image}]}
            }
        }
    }))
    .expect("a valid Deployment");
    settle(&mut d, None, false);
    d
}

/// The image of a Deployment's first container.
pub fn image_of(d: &Deployment) -> String {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

fn replicas_of(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// Marks a rollout finished: ready, or stuck unavailable since `stuck_since` when `broken`.
fn settle(d: &mut Deployment, stuck_since: Option<Timestamp>, broken: bool) {
    let replicas = replicas_of(d);
    let broken = broken || image_of(d).contains("broken");
    let generation = d.metadata.generation;
    d.status = Some(DeploymentStatus {
        observed_generation: generation,
        replicas: Some(replicas),
        updated_replicas: Some(replicas),
        ready_replicas: Some(if broken { 0 } else { replicas }),
        available_replicas: Some(if broken { 0 } else { replicas }),
        conditions: (broken && replicas > 0).then(|| {
            vec![DeploymentCondition {
                type_: "Available".into(),
                status: "False".into(),
                reason: Some("MinimumReplicasUnavailable".into()),
                last_update_time: stuck_since.map(Time),
                ..Default::default()
            }]
        }),
        ..Default::default()
    });
}

fn bump(d: &mut Deployment) {
    d.metadata.generation = Some(d.metadata.generation.unwrap_or(0) + 1);
}

/// Answers every hook with success and every metric with a healthy value (100% success, 50ms).
pub fn healthy(check: &Check, _now: Timestamp) -> Outcome {
    match check {
        Check::Hook { .. } => Outcome::Hook(Ok(())),
        Check::Metric { name } if name == "request-duration" => {
            Outcome::Metric(MetricReading::Value(50.0))
        }
        Check::Metric { .. } => Outcome::Metric(MetricReading::Value(100.0)),
        Check::Measure { .. } => Outcome::Measurement(crate::plan::Measurement {
            phase: serin_api::AnalysisPhase::Successful,
            value: Some("[1]".into()),
            message: None,
        }),
    }
}

impl World {
    /// A world at `2026-01-01T00:00:00Z` with `canary` targeting a rolled-out `target`.
    pub fn new(canary: Canary, target: Deployment) -> Self {
        let start: Timestamp = "2026-01-01T00:00:00Z".parse().expect("valid time");
        World {
            canary,
            target,
            primary: None,
            routes: None,
            configs: BTreeMap::new(),
            now: start,
            rollout_seconds: 0,
            responder: Box::new(healthy),
            log: Vec::new(),
            failing: Default::default(),
            start,
            rollout_started: BTreeMap::new(),
        }
    }

    /// Replaces the answers for hooks and metrics.
    pub fn respond(&mut self, responder: impl FnMut(&Check, Timestamp) -> Outcome + 'static) {
        self.responder = Box::new(responder);
    }

    /// Seconds since the world started.
    pub fn elapsed(&self) -> i64 {
        self.now.duration_since(self.start).as_secs()
    }

    /// Changes the target's image, as `kubectl set image` would.
    pub fn set_target_image(&mut self, image: &str) {
        if let Some(c) = self
            .target
            .spec
            .as_mut()
            .and_then(|s| s.template.spec.as_mut())
            .and_then(|p| p.containers.first_mut())
        {
            c.image = Some(image.into());
        }
        bump(&mut self.target);
        self.rollout_started.insert("target".into(), self.now);
    }

    /// Sets an annotation on the Canary (how manual promote/abort/retry requests arrive).
    pub fn annotate(&mut self, key: &str, value: &str) {
        self.canary
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(key.into(), value.into());
    }

    fn progress_rollouts(&mut self) {
        let deadline = SignedDuration::from_secs(self.rollout_seconds);
        let now = self.now;
        for (key, d) in [
            ("target", Some(&mut self.target)),
            ("primary", self.primary.as_mut()),
        ] {
            let Some(d) = d else { continue };
            let observed = d.status.as_ref().and_then(|s| s.observed_generation);
            if observed == d.metadata.generation {
                continue;
            }
            let started = self.rollout_started.get(key).copied().unwrap_or(now);
            if now >= started + deadline {
                settle(d, Some(started), self.failing.contains(key));
            }
        }
    }

    /// What failed a Deployment's rollout (`"target"` or `"primary"`) is fixed: the rollout
    /// completes now, as when a full quota is raised on a real cluster.
    pub fn recover(&mut self, key: &'static str) {
        self.failing.remove(key);
        let now = self.now;
        let deployment = match key {
            "target" => Some(&mut self.target),
            _ => self.primary.as_mut(),
        };
        if let Some(d) = deployment {
            settle(d, Some(now), false);
        }
    }

    /// Moves time forward by `seconds`, then reconciles once.
    pub fn advance(&mut self, seconds: i64) -> &TickRecord {
        self.now += SignedDuration::from_secs(seconds);
        self.reconcile()
    }

    /// What the controller would observe now: the Canary, its workloads, configs and routes.
    pub fn observation(&self) -> Observation {
        Observation {
            canary: self.canary.clone(),
            target: Some(self.target.clone()),
            primary: self.primary.clone(),
            target_hash: None,
            configs: Ok(self.configs.clone()),
            routes: self.routes,
            autoscaler_min_replicas: None,
            blocked: None,
            routes_pending: None,
            verdicts: Vec::new(),
        }
    }

    /// Reconciles now: lets rollouts progress, decides (running requested checks), applies the plan.
    pub fn reconcile(&mut self) -> &TickRecord {
        self.progress_rollouts();
        let mut observation = self.observation();
        let mut checks = Vec::new();
        let plan = loop {
            match crate::decide(&observation, self.now) {
                Decision::Check(check) => {
                    let outcome = (self.responder)(&check, self.now);
                    checks.push(check.clone());
                    observation.verdicts.push(Verdict { check, outcome });
                }
                Decision::Plan(plan) => break *plan,
            }
        };
        for action in &plan.actions {
            self.apply(action);
        }
        self.canary.status = Some(plan.status.clone());
        let record = TickRecord {
            at: self.elapsed(),
            phase: plan.status.phase,
            weight: plan.status.canary_weight,
            routes: self.routes,
            events: plan
                .events
                .iter()
                .map(|e| match e.type_ {
                    EventType::Normal => format!("Normal: {}", e.message),
                    EventType::Warning => format!("Warning: {}", e.message),
                })
                .collect(),
            reasons: plan.events.iter().map(|e| e.reason).collect(),
            requeue_after: plan.requeue_after,
            workload_status_waits: plan.workload_status_waits,
            actions: plan.actions.clone(),
            checks,
        };
        self.log.push(record);
        self.log.last().expect("just pushed")
    }

    /// Waits as long as the last plan asked (`requeue_after`, whole seconds), then reconciles, as the
    /// controller does when nothing else happens. Panics when the last plan asked for no requeue.
    pub fn follow_requeue(&mut self) -> &TickRecord {
        let wait = self
            .log
            .last()
            .and_then(|t| t.requeue_after)
            .expect("the last plan asked to be requeued");
        let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        self.advance(seconds as i64)
    }

    /// Reconciles every `interval` seconds until `done` holds or `max_ticks` pass.
    pub fn run_until(
        &mut self,
        interval: i64,
        max_ticks: usize,
        mut done: impl FnMut(&World) -> bool,
    ) -> bool {
        for _ in 0..max_ticks {
            self.advance(interval);
            if done(self) {
                return true;
            }
        }
        false
    }

    fn apply(&mut self, action: &Action) {
        let now = self.now;
        match action {
            Action::EnsurePrimary { sync_template } => match &mut self.primary {
                None => {
                    let mut primary = self.target.clone();
                    let name = format!(
                        "{}-primary",
                        self.target.metadata.name.as_deref().unwrap_or("")
                    );
                    primary.metadata.name = Some(name);
                    primary.metadata.generation = Some(1);
                    primary.status = None;
                    if let Some(spec) = primary.spec.as_mut() {
                        spec.replicas = Some(replicas_of(&self.target).max(1));
                    }
                    self.primary = Some(primary);
                    self.rollout_started.insert("primary".into(), now);
                }
                Some(primary) if *sync_template => {
                    let wanted = self.target.spec.as_ref().map(|s| s.template.clone());
                    if let (Some(spec), Some(template)) = (primary.spec.as_mut(), wanted)
                        && spec.template != template
                    {
                        spec.template = template;
                        bump(primary);
                        self.rollout_started.insert("primary".into(), now);
                    }
                }
                Some(_) => {}
            },
            Action::EnsureRouting => {
                if self.routes.is_none() {
                    self.routes = Some(Routes::PRIMARY_ONLY);
                }
            }
            Action::ScaleTarget(n) => self.scale("target", *n),
            Action::ScalePrimary(n) => self.scale("primary", *n),
            Action::SetRoutes(routes) => self.routes = Some(*routes),
            Action::Promote { replicas } => {
                let template = self.target.spec.as_ref().map(|s| s.template.clone());
                if let Some(primary) = self.primary.as_mut()
                    && let (Some(spec), Some(template)) = (primary.spec.as_mut(), template)
                {
                    spec.template = template;
                    if let Some(n) = replicas {
                        spec.replicas = Some(*n);
                    }
                    bump(primary);
                    self.rollout_started.insert("primary".into(), now);
                }
            }
            Action::SyncPrimaryAutoscaler | Action::NotifyHooks { .. } => {}
        }
    }

    /// Scaling up takes a rollout; scaling down is observed at once, as on a real cluster.
    fn scale(&mut self, key: &'static str, replicas: i32) {
        let now = self.now;
        let failing = self.failing.contains(key);
        let deployment = match key {
            "target" => Some(&mut self.target),
            _ => self.primary.as_mut(),
        };
        let Some(d) = deployment else { return };
        let current = replicas_of(d);
        if current == replicas {
            return;
        }
        if let Some(spec) = d.spec.as_mut() {
            spec.replicas = Some(replicas);
        }
        bump(d);
        let rolled_out = d.status.as_ref().and_then(|s| s.observed_generation)
            == d.metadata.generation.map(|g| g - 1);
        if replicas < current && rolled_out {
            settle(d, Some(now), failing);
        } else {
            self.rollout_started.insert(key.into(), now);
        }
    }

    /// Image the primary runs.
    pub fn primary_image(&self) -> String {
        self.primary.as_ref().map(image_of).unwrap_or_default()
    }

    /// The target's replica count.
    pub fn target_replicas(&self) -> i32 {
        replicas_of(&self.target)
    }

    /// The primary's replica count.
    pub fn primary_replicas(&self) -> i32 {
        self.primary.as_ref().map(replicas_of).unwrap_or(0)
    }

    /// The status the engine last wrote (empty before the first reconcile).
    pub fn status(&self) -> serin_api::CanaryStatus {
        self.canary.status.clone().unwrap_or_default()
    }

    /// The phase in status.
    pub fn phase(&self) -> Option<Phase> {
        self.canary.status.as_ref().and_then(|s| s.phase)
    }
}
