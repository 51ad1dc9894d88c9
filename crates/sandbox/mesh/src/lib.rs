//! The sandbox's service mesh, above the API server: a proxy that routes by Istio VirtualServices and
//! DestinationRules and by Gateway API HTTPRoutes (retries, timeouts, mirroring, header rules), the
//! ingress and Gateway API gateways, Istio's standard request metrics, and a Prometheus that scrapes
//! them and the pods that ask for it. It finds pods through the store's Services and Endpoints, not
//! through the cluster crate.

#![deny(missing_docs)]

pub mod gateway_route;
pub mod gateways;
pub mod mesh_crds;
pub mod mesh_proxy;
pub mod mesh_route;
pub mod pod_targets;
pub mod prometheus;
pub mod telemetry;
pub mod upstreams;
