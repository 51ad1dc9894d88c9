//! The sandbox's integration tests, in one binary: one module per area, sharing `common`.
//! One binary links the sandbox once instead of once per area, which is most of the build's time
//! for these tests.

mod common;

mod authentication;
mod autoscaling;
mod custom_resources;
mod daemonsets;
mod dataplane;
mod exec;
mod flagger_loadtester;
mod gateways;
mod imperative;
mod instrument;
mod jobs;
mod kube_rs;
mod kubectl;
mod layers;
mod leader;
mod list_apply;
mod loadtester_chart;
mod logs;
mod malformed_requests;
mod mesh;
mod nodes_and_proxy;
mod openapi;
mod pod_metrics;
mod pods;
mod portforward;
mod prometheus_targets;
mod rbac;
mod scheduling;
mod workloads;
