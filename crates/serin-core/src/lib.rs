//! Serin's decision engine, free of I/O and clocks: an [`Observation`] of one canary and the current
//! time go in, a [`Decision`] comes out — either a check to run (a webhook call, a metric query or
//! an analysis measurement, whose verdict is fed back in) or the [`Plan`] for the tick: actions, the new status, events,
//! alerts and when to look again.
//!
//! Time lives in the Canary's status (`lastTickTime`, `stepStartTime`), so a restarted operator
//! resumes where it was and a reconcile triggered by the operator's own status write does not
//! advance anything.
//!
//! A controller drives one tick like this:
//!
//! ```
//! use serin_core::{decide, Check, Decision, Measurement, MetricReading, Observation, Outcome, Verdict};
//!
//! # let canary: serin_api::Canary = serde_json::from_value(serde_json::json!({
//! #     "metadata": {"name": "podinfo", "namespace": "test"},
//! #     "spec": {"targetRef": {"kind": "Deployment", "name": "podinfo"}, "service": {"port": 9898},
//! #              "analysis": {"stepWeight": 10}}})).unwrap();
//! let mut observation = Observation::new(canary);
//! // ... fill in the target, primary, routes and configs from the watch caches ...
//! let now = "2026-01-01T00:00:00Z".parse().unwrap();
//! let plan = loop {
//!     match decide(&observation, now) {
//!         Decision::Check(check) => {
//!             // Call the webhook or run the query, then hand the result back.
//!             let outcome = match &check {
//!                 Check::Hook { .. } => Outcome::Hook(Ok(())),
//!                 Check::Metric { .. } => Outcome::Metric(MetricReading::Value(99.9)),
//!                 Check::Measure { .. } => Outcome::Measurement(Measurement {
//!                     phase: serin_api::AnalysisPhase::Successful,
//!                     value: Some("[0.99]".into()),
//!                     message: None,
//!                 }),
//!             };
//!             observation.verdicts.push(Verdict { check, outcome });
//!         }
//!         Decision::Plan(plan) => break plan,
//!     }
//! };
//! // Without a target Deployment there is nothing to do but say so.
//! assert!(plan.actions.is_empty());
//! assert!(plan.status.message.unwrap().contains("Deployment podinfo.test not found"));
//! ```

#![deny(missing_docs)]

pub mod condition;
pub mod decide;
pub mod metrics;
pub mod plan;
pub mod readiness;
pub mod replicas;
pub mod revision;
pub mod simulation;
pub mod stored_status;
pub mod summary;
pub mod weights;

pub use decide::decide;
pub use plan::{
    Action, Alert, Check, Decision, Event, EventType, Measurement, MetricReading, Observation,
    Outcome, Plan, ROUTES_ACCEPTANCE_GRACE, Routes, RoutesPending, Severity, Verdict,
};
