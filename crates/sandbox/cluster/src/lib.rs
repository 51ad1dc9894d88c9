//! The sandbox's cluster, above the API server: the controllers that make workloads behave as on a
//! cluster (Deployments, ReplicaSets, DaemonSets, Jobs, the HorizontalPodAutoscaler, Endpoints, the
//! scheduler) and the kubelet side that runs pods through a [`pod_runtime::PodRuntime`]: serving
//! processes, podinfo and the load tester, probes, logs, the `kubectl exec` interpreter and
//! port-forward over SPDY. It reads and writes objects only through the API server's store.

#![deny(missing_docs)]

pub mod autoscaling;
pub mod controllers;
pub mod endpoints;
pub mod exec;
pub mod grpc_health;
pub mod http_probe;
pub mod loadtester_pod;
pub mod logs;
pub mod node_kubelet;
pub mod pod_runtime;
pub mod podinfo;
pub mod portforward;
pub mod process;
pub mod runtime;
pub mod scheduler;
pub mod spdy;
