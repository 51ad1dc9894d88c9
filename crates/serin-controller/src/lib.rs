//! The reconcile loop of the operator: observe a Canary and its workloads, ask serin-core what to
//! do ([`serin_core::decide()`]), act on the cluster (workloads, routing objects, metric checks),
//! and record one status write and the events of the tick.
#![deny(missing_docs)]

pub mod reconcile;
pub mod workloads;

pub use reconcile::{Context, Error, run};
