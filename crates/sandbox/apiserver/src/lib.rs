//! The sandbox's Kubernetes API server, the bottom layer of the sandbox: the object store with its
//! watch history, the registry of served kinds and discovery, schemas (built-in and CRD structural
//! pruning, defaults, conversion), patches and managedFields, authentication and RBAC, OpenAPI,
//! protobuf bodies, server-side tables, and the HTTP front that kubectl and kube-rs talk to. It knows
//! nothing of pods running: it reaches the nodes only through the [`kubelet::Kubelet`] trait.

#![deny(missing_docs)]

pub mod apiproxy;
pub mod auth;
pub mod builtin_schemas;
pub mod convert;
pub mod defaults;
pub mod discovery;
pub mod instrument;
pub mod kubelet;
pub mod managed;
pub mod openapi;
pub mod patch;
pub mod protobuf;
pub mod registry;
pub mod scale;
pub mod selectors;
pub mod server;
pub mod services;
pub mod status;
pub mod store;
pub mod structural;
pub mod tables;
pub mod tls;
