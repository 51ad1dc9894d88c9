//! The metric providers' integration tests, in one binary: one module per provider or concern,
//! sharing the loopback servers of `support`. One binary links the providers once instead of
//! once per module.

mod support;

mod aws_credentials;
mod bounded_answers;
mod cloudwatch;
mod datadog;
mod https;
mod keptn;
mod measure;
mod prometheus;
mod saas;
mod stackdriver;
mod victoria_metrics;
