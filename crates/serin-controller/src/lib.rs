//! The reconcile loop of the operator: observe a Canary and its workloads from watch caches, ask
//! serin-core what to do ([`serin_core::decide()`]), act on the cluster (workloads, configs,
//! autoscalers, routing objects, metric checks), and record one status write, the events, alerts
//! and the operator's metrics of the tick.
#![deny(missing_docs)]

pub mod autoscaler;
pub mod budget;
pub mod cache;
pub mod configs;
pub mod daemon_sets;
pub mod event_series;
pub mod job_metric;
pub mod json_store;
pub mod leadership;
pub mod metrics;
pub mod raw_object;
pub mod reconcile;
pub mod telemetry;
#[cfg(test)]
mod troubleshooting_doc;
pub mod workloads;

pub use reconcile::{Context, Error, run};
pub use telemetry::{LogFormat, init_logging};
