//! Canary metric queries: Flagger's builtin Istio queries, MetricTemplate rendering with strict
//! variables, a Prometheus client and the other providers Flagger reads ([`providers`]), whose
//! answers become the decision core's metric readings; and Argo Rollouts' analysis measurements:
//! `web` metrics and conditions in the expr language.
#![deny(missing_docs)]

pub mod conditions;
pub mod measure;
pub mod prometheus;
pub mod providers;
pub mod query;
pub mod read;
pub mod transport;
pub mod web;

pub use conditions::{MetricResult, check_syntax, evaluate, evaluate_result};
pub use measure::measure;
pub use prometheus::{Auth, ClientCache, ClientOptions, PrometheusClient, QueryError, result_of};
pub use query::{
    BuiltinQuery, QueryContext, RenderError, builtin_query, builtin_query_for, collapse_whitespace,
    render,
};
pub use read::{MetricInputs, read};
pub use web::{WebError, WebRequest};
