//! The operator's own Prometheus metrics, named and labelled as Flagger's (`flagger_` becomes
//! `serin_`), so dashboards and alerts carry over.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use serin_api::Phase;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

/// The content type of [`OperatorMetrics::render`]'s text, for the `/metrics` response.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Prometheus' default histogram buckets, as Flagger's duration histogram uses.
const BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NamespaceLabels {
    namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CanaryLabels {
    name: String,
    namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkloadLabels {
    workload: String,
    namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AnalysisLabels {
    name: String,
    namespace: String,
    metric: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReleaseLabels {
    name: String,
    namespace: String,
    deployment_strategy: String,
    analysis_status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InfoLabels {
    version: String,
    mesh_provider: String,
}

fn canary_labels(name: &str, namespace: &str) -> CanaryLabels {
    CanaryLabels {
        name: name.to_string(),
        namespace: namespace.to_string(),
    }
}

fn duration_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// The canary metrics the operator serves at `/metrics`.
pub struct OperatorMetrics {
    registry: Registry,
    info: Family<InfoLabels, Gauge>,
    total: Family<NamespaceLabels, Gauge>,
    status: Family<CanaryLabels, Gauge>,
    weight: Family<WorkloadLabels, Gauge>,
    analysis: Family<AnalysisLabels, Gauge<f64, AtomicU64>>,
    successes: Family<ReleaseLabels, Counter>,
    failures: Family<ReleaseLabels, Counter>,
    duration: Family<CanaryLabels, Histogram>,
    reconciles: Counter,
    leader: Gauge,
}

impl Default for OperatorMetrics {
    fn default() -> Self {
        let info = Family::default();
        let total = Family::default();
        let status = Family::default();
        let weight = Family::default();
        let analysis = Family::default();
        let successes = Family::default();
        let failures = Family::default();
        let duration = Family::new_with_constructor(duration_histogram as fn() -> Histogram);
        let reconciles = Counter::default();
        let leader = Gauge::default();
        // A family's clone shares its values, so the registry encodes what the methods below set.
        // Help texts have no final period: the encoder adds one.
        let mut registry = Registry::default();
        registry.register(
            "serin_info",
            "Build and mesh provider of the operator",
            Family::clone(&info),
        );
        registry.register(
            "serin_canary_total",
            "Canaries per namespace",
            Family::clone(&total),
        );
        registry.register(
            "serin_canary_status",
            "Last phase of each canary: 0 progressing, 1 any other phase, 2 failed",
            Family::clone(&status),
        );
        registry.register(
            "serin_canary_weight",
            "Traffic weight of the primary and the canary workload",
            Family::clone(&weight),
        );
        registry.register(
            "serin_canary_metric_analysis",
            "Last value read for each analysis metric",
            Family::clone(&analysis),
        );
        // prometheus-client appends `_total` to counter names.
        registry.register(
            "serin_canary_successes",
            "Releases promoted",
            Family::clone(&successes),
        );
        registry.register(
            "serin_canary_failures",
            "Releases rolled back or whose promotion failed",
            Family::clone(&failures),
        );
        registry.register(
            "serin_reconcile",
            "Reconciles of Canaries",
            reconciles.clone(),
        );
        registry.register(
            "serin_leader",
            "Whether this replica acts: 1 when it holds the Lease or runs without leader election, 0 while it waits",
            leader.clone(),
        );
        registry.register(
            "serin_canary_duration_seconds",
            "Duration of analysing ticks",
            Family::clone(&duration),
        );
        Self {
            registry,
            info,
            total,
            status,
            weight,
            analysis,
            successes,
            failures,
            duration,
            reconciles,
            leader,
        }
    }
}

/// `serin_canary_status`'s value for a phase: 0 while progressing, 2 when failed, 1 otherwise.
pub fn status_value(phase: Option<Phase>) -> i64 {
    match phase {
        Some(Phase::Progressing) => 0,
        Some(Phase::Failed) => 2,
        _ => 1,
    }
}

impl OperatorMetrics {
    /// Sets `serin_info`: the operator's version and the mesh provider it routes with.
    pub fn set_info(&self, version: &str, mesh_provider: &str) {
        self.info
            .get_or_create(&InfoLabels {
                version: version.to_string(),
                mesh_provider: mesh_provider.to_string(),
            })
            .set(1);
    }

    /// Sets `serin_leader`: whether this replica acts (holds the Lease) or waits.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Sets the number of Canaries per namespace (namespaces no longer listed keep their last
    /// value, as Flagger's do).
    pub fn set_totals(&self, totals: &BTreeMap<String, usize>) {
        for (namespace, count) in totals {
            self.total
                .get_or_create(&NamespaceLabels {
                    namespace: namespace.clone(),
                })
                .set(i64::try_from(*count).unwrap_or(i64::MAX));
        }
    }

    /// Records a tick's outcome for the canary of `target` in `namespace`: its phase and weights.
    pub fn record_tick(&self, target: &str, namespace: &str, phase: Option<Phase>, weight: i32) {
        self.status
            .get_or_create(&canary_labels(target, namespace))
            .set(status_value(phase));
        let canary = weight.clamp(0, 100);
        for (workload, value) in [
            (format!("{target}-primary"), 100 - canary),
            (target.to_string(), canary),
        ] {
            self.weight
                .get_or_create(&WorkloadLabels {
                    workload,
                    namespace: namespace.to_string(),
                })
                .set(i64::from(value));
        }
    }

    /// Counts one reconcile of any Canary (`serin_reconcile_total`, for API requests per tick).
    pub fn count_reconcile(&self) {
        self.reconciles.inc();
    }

    /// Sets the last value read for `metric` of the canary of `target`.
    pub fn record_metric(&self, target: &str, namespace: &str, metric: &str, value: f64) {
        self.analysis
            .get_or_create(&AnalysisLabels {
                name: target.to_string(),
                namespace: namespace.to_string(),
                metric: metric.to_string(),
            })
            .set(value);
    }

    /// Counts a finished release: `succeeded` or failed, with its strategy (`canary`, `blue-green`,
    /// `ab-testing`) and whether the analysis ran (`completed`) or was `skipped`.
    pub fn record_release(
        &self,
        target: &str,
        namespace: &str,
        succeeded: bool,
        strategy: &str,
        analysis_status: &str,
    ) {
        let counter = if succeeded {
            &self.successes
        } else {
            &self.failures
        };
        counter
            .get_or_create(&ReleaseLabels {
                name: target.to_string(),
                namespace: namespace.to_string(),
                deployment_strategy: strategy.to_string(),
                analysis_status: analysis_status.to_string(),
            })
            .inc();
    }

    /// Observes how long an analysing tick of the canary of `target` took.
    pub fn observe_duration(&self, target: &str, namespace: &str, seconds: f64) {
        self.duration
            .get_or_create(&canary_labels(target, namespace))
            .observe(seconds);
    }

    /// The metrics in OpenMetrics text, served with [`CONTENT_TYPE`].
    pub fn render(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_progressing_canary_is_rendered_with_flaggers_labels() {
        let metrics = OperatorMetrics::default();
        metrics.set_totals(&BTreeMap::from([("test".to_string(), 2)]));
        metrics.record_tick("podinfo", "test", Some(Phase::Progressing), 20);
        metrics.record_metric("podinfo", "test", "request-success-rate", 99.5);
        metrics.observe_duration("podinfo", "test", 0.03);
        metrics.record_release("podinfo", "test", false, "canary", "completed");
        let text = metrics.render();
        for line in [
            "serin_canary_total{namespace=\"test\"} 2",
            "serin_canary_status{name=\"podinfo\",namespace=\"test\"} 0",
            "serin_canary_weight{workload=\"podinfo\",namespace=\"test\"} 20",
            "serin_canary_weight{workload=\"podinfo-primary\",namespace=\"test\"} 80",
            "serin_canary_metric_analysis{name=\"podinfo\",namespace=\"test\",metric=\"request-success-rate\"} 99.5",
            "serin_canary_failures_total{name=\"podinfo\",namespace=\"test\",deployment_strategy=\"canary\",analysis_status=\"completed\"} 1",
            "serin_canary_duration_seconds_bucket{le=\"0.025\",name=\"podinfo\",namespace=\"test\"} 0",
            "serin_canary_duration_seconds_bucket{le=\"0.05\",name=\"podinfo\",namespace=\"test\"} 1",
            "serin_canary_duration_seconds_count{name=\"podinfo\",namespace=\"test\"} 1",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        metrics.record_tick("podinfo", "test", Some(Phase::Failed), 0);
        assert!(
            metrics
                .render()
                .contains("serin_canary_status{name=\"podinfo\",namespace=\"test\"} 2")
        );
    }
}
