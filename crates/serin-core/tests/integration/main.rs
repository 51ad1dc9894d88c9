//! The decision engine's timelines, in one binary: one module per area, sharing `common`'s
//! builders.

mod common;

mod analysis_step;
mod conditions;
mod gates;
mod manual;
mod progressive;
mod promotion_analysis;
mod properties;
mod reasons;
mod replica_ratio;
mod routes_pending;
mod steps;
mod strategies;
mod takeover;
mod traffic_rule;
mod workload_status_waits;
