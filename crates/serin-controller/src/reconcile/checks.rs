//! The checks decide asks for: a metric read from Prometheus (the operator's metrics server, the
//! Canary's `metricsServer`, or a MetricTemplate's provider) or a webhook call.

use super::Tick;
use kube::ResourceExt;
use serin_api::Canary;
use serin_core::plan::{Check, MetricReading, Outcome};
use serin_metrics::{ClientOptions, MetricInputs, QueryContext};
use serin_router::Names;

impl Tick<'_> {
    fn query_context(&self) -> QueryContext {
        let names = Names::of(&self.canary);
        let target = self.canary["spec"]["targetRef"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let or_target = |field: &str| {
            self.canary["spec"][field]["name"]
                .as_str()
                .map_or_else(|| target.clone(), String::from)
        };
        QueryContext {
            name: self.canary["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .into(),
            namespace: self.namespace.clone(),
            service: names.apex,
            ingress: or_target("ingressRef"),
            route: or_target("routeRef"),
            target,
            ..QueryContext::default()
        }
    }

    /// Runs one check and returns its outcome for decide.
    pub(super) async fn run_check(&self, canary: &Canary, check: &Check) -> Outcome {
        match check {
            Check::Metric { name } => {
                let metric = canary
                    .spec
                    .analysis()
                    .and_then(|a| a.every_metric().find(|m| &m.name == name));
                let Some(metric) = metric else {
                    return Outcome::Metric(MetricReading::Error(format!(
                        "metric {name} is not in analysis.metrics"
                    )));
                };
                let template = metric.template_ref.as_ref().and_then(|reference| {
                    self.caches
                        .metric_template(reference.namespace_or(&self.namespace), &reference.name)
                });
                let secret = template.as_ref().and_then(|template| {
                    let reference = template.spec.provider.secret_ref.as_ref()?;
                    let namespace = template.namespace().unwrap_or(self.namespace.clone());
                    self.caches.secret_text(&namespace, &reference.name)
                });
                let own_server = match canary.spec.metrics_server.as_deref() {
                    Some(address) => match self
                        .ctx
                        .prometheus_clients
                        .client(address, ClientOptions::default())
                    {
                        Ok(client) => Some(client),
                        Err(error) => {
                            return Outcome::Metric(MetricReading::Error(format!(
                                "spec.metricsServer: {error}"
                            )));
                        }
                    },
                    None => None,
                };
                let inputs = MetricInputs {
                    context: self.query_context(),
                    template: template.as_deref(),
                    secret: secret.as_ref(),
                    metrics_server: own_server.as_ref().unwrap_or(&self.ctx.metrics_server),
                    clients: &self.ctx.prometheus_clients,
                    provider: self.canary["spec"]["provider"].as_str().unwrap_or("istio"),
                };
                Outcome::Metric(serin_metrics::read(metric, inputs).await)
            }
            Check::Hook { name, .. } => match self.ctx.webhooks.run_check(canary, check).await {
                Some(verdict) => verdict.outcome,
                None => Outcome::Hook(Err(format!("webhook {name} could not be run"))),
            },
        }
    }
}
