//! Built-in controllers that make workloads behave like a cluster's: a scheduler and kubelet that
//! run pods through a pluggable [`PodRuntime`], a ReplicaSet controller, and a Deployment controller
//! with rolling updates (maxSurge, maxUnavailable, minReadySeconds, progressDeadlineSeconds) and the
//! status and conditions a real cluster reports.

pub use crate::pod_runtime::{
    DelayRuntime, PodHealth, PodRuntime, PodStart, Termination, runs_to_completion,
};

mod daemonsets;
mod deployments;
mod jobs;
mod kubelet;
mod nodes;
mod objects;
mod replicasets;
mod run;
mod scheduling;
mod state;

pub use nodes::*;
pub(crate) use objects::*;
pub use run::*;
pub use state::*;
