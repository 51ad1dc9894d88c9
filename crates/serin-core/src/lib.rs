//! Serin's decision engine, free of I/O and clocks: an [`Observation`] of one canary and the current
//! time go in, a [`Decision`] comes out — either a check to run (a webhook call or a metric query,
//! whose verdict is fed back in) or the [`Plan`] for the tick: actions, the new status, events,
//! alerts and when to look again.
//!
//! Time lives in the Canary's status (`lastTickTime`, `stepStartTime`), so a restarted operator
//! resumes where it was and a reconcile triggered by the operator's own status write does not
//! advance anything.

pub mod condition;
pub mod decide;
pub mod metrics;
pub mod plan;
pub mod readiness;
pub mod replicas;
pub mod revision;
pub mod simulation;
pub mod weights;

pub use decide::decide;
pub use plan::{
    Action, Alert, Check, Decision, Event, EventType, MetricReading, Observation, Outcome, Plan,
    Routes, Severity, Verdict,
};
