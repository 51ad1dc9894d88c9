//! Canary metric queries: Flagger's builtin Istio queries, MetricTemplate rendering with strict
//! variables, and a Prometheus client whose answers become the decision core's metric readings.
#![deny(missing_docs)]

pub mod conditions;
pub mod prometheus;
pub mod query;
pub mod read;

pub use conditions::{MetricResult, check_syntax, evaluate, evaluate_result};
pub use prometheus::{Auth, ClientCache, ClientOptions, PrometheusClient, QueryError, result_of};
pub use query::{
    BuiltinQuery, QueryContext, RenderError, builtin_query, builtin_query_for, collapse_whitespace,
    render,
};
pub use read::{MetricInputs, read};
