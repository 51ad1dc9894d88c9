//! The operator's own Prometheus metrics, named and labelled as Flagger's (`flagger_` becomes
//! `serin_`), so dashboards and alerts carry over.

use serin_api::Phase;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

/// Prometheus' default histogram buckets, as Flagger's duration histogram uses.
const BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

type Labels = Vec<(&'static str, String)>;

#[derive(Default)]
struct Series {
    total: BTreeMap<String, f64>,
    status: BTreeMap<Labels, f64>,
    weight: BTreeMap<Labels, f64>,
    analysis: BTreeMap<Labels, f64>,
    successes: BTreeMap<Labels, f64>,
    failures: BTreeMap<Labels, f64>,
    duration: BTreeMap<Labels, Histogram>,
}

/// The canary metrics the operator serves at `/metrics`.
#[derive(Default)]
pub struct OperatorMetrics {
    series: Mutex<Series>,
    reconciles: std::sync::atomic::AtomicU64,
}

/// `serin_canary_status`'s value for a phase: 0 while progressing, 2 when failed, 1 otherwise.
pub fn status_value(phase: Option<Phase>) -> f64 {
    match phase {
        Some(Phase::Progressing) => 0.0,
        Some(Phase::Failed) => 2.0,
        _ => 1.0,
    }
}

fn name_labels(name: &str, namespace: &str) -> Labels {
    vec![
        ("name", name.to_string()),
        ("namespace", namespace.to_string()),
    ]
}

impl OperatorMetrics {
    /// Sets the number of Canaries per namespace (namespaces no longer listed keep their last
    /// value, as Flagger's do).
    pub fn set_totals(&self, totals: &BTreeMap<String, usize>) {
        let mut series = self.series.lock().unwrap();
        for (namespace, count) in totals {
            series.total.insert(namespace.clone(), *count as f64);
        }
    }

    /// Records a tick's outcome for the canary of `target` in `namespace`: its phase and weights.
    pub fn record_tick(&self, target: &str, namespace: &str, phase: Option<Phase>, weight: i32) {
        let mut series = self.series.lock().unwrap();
        series
            .status
            .insert(name_labels(target, namespace), status_value(phase));
        let canary = weight.clamp(0, 100);
        for (workload, value) in [
            (format!("{target}-primary"), 100 - canary),
            (target.to_string(), canary),
        ] {
            series.weight.insert(
                vec![("workload", workload), ("namespace", namespace.to_string())],
                f64::from(value),
            );
        }
    }

    /// Counts one reconcile of any Canary (`serin_reconcile_total`, for API requests per tick).
    pub fn count_reconcile(&self) {
        self.reconciles
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Sets the last value read for `metric` of the canary of `target`.
    pub fn record_metric(&self, target: &str, namespace: &str, metric: &str, value: f64) {
        let mut labels = name_labels(target, namespace);
        labels.push(("metric", metric.to_string()));
        self.series.lock().unwrap().analysis.insert(labels, value);
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
        let mut labels = name_labels(target, namespace);
        labels.push(("deployment_strategy", strategy.to_string()));
        labels.push(("analysis_status", analysis_status.to_string()));
        let mut series = self.series.lock().unwrap();
        let counter = if succeeded {
            &mut series.successes
        } else {
            &mut series.failures
        };
        *counter.entry(labels).or_default() += 1.0;
    }

    /// Observes how long an analysing tick of the canary of `target` took.
    pub fn observe_duration(&self, target: &str, namespace: &str, seconds: f64) {
        let mut series = self.series.lock().unwrap();
        let histogram = series
            .duration
            .entry(name_labels(target, namespace))
            .or_default();
        for (count, bound) in histogram.counts.iter_mut().zip(BUCKETS) {
            if seconds <= bound {
                *count += 1;
            }
        }
        histogram.count += 1;
        histogram.sum += seconds;
    }

    /// The metrics in Prometheus' text exposition format.
    pub fn render(&self) -> String {
        let series = self.series.lock().unwrap();
        let mut out = String::new();
        let totals: BTreeMap<Labels, f64> = series
            .total
            .iter()
            .map(|(namespace, count)| (vec![("namespace", namespace.clone())], *count))
            .collect();
        let families: [(&str, &str, &str, &BTreeMap<Labels, f64>); 6] = [
            (
                "serin_canary_total",
                "gauge",
                "Canaries per namespace.",
                &totals,
            ),
            (
                "serin_canary_status",
                "gauge",
                "Last phase of each canary: 0 progressing, 1 any other phase, 2 failed.",
                &series.status,
            ),
            (
                "serin_canary_weight",
                "gauge",
                "Traffic weight of the primary and the canary workload.",
                &series.weight,
            ),
            (
                "serin_canary_metric_analysis",
                "gauge",
                "Last value read for each analysis metric.",
                &series.analysis,
            ),
            (
                "serin_canary_successes_total",
                "counter",
                "Releases promoted.",
                &series.successes,
            ),
            (
                "serin_canary_failures_total",
                "counter",
                "Releases rolled back or whose promotion failed.",
                &series.failures,
            ),
        ];
        for (name, kind, help, values) in families {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in values {
                let _ = writeln!(out, "{name}{} {value}", render_labels(labels, None));
            }
        }
        let _ = writeln!(
            out,
            "# HELP serin_reconcile_total Reconciles of Canaries.\n# TYPE serin_reconcile_total counter\nserin_reconcile_total {}",
            self.reconciles.load(std::sync::atomic::Ordering::Relaxed)
        );
        let name = "serin_canary_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Duration of analysing ticks.\n# TYPE {name} histogram"
        );
        for (labels, histogram) in &series.duration {
            for (count, bound) in histogram.counts.iter().zip(BUCKETS) {
                let le = bound.to_string();
                let _ = writeln!(
                    out,
                    "{name}_bucket{} {count}",
                    render_labels(labels, Some(&le))
                );
            }
            let _ = writeln!(
                out,
                "{name}_bucket{} {}",
                render_labels(labels, Some("+Inf")),
                histogram.count
            );
            let _ = writeln!(
                out,
                "{name}_sum{} {}",
                render_labels(labels, None),
                histogram.sum
            );
            let _ = writeln!(
                out,
                "{name}_count{} {}",
                render_labels(labels, None),
                histogram.count
            );
        }
        out
    }
}

fn render_labels(labels: &Labels, le: Option<&str>) -> String {
    let escape = |v: &str| {
        v.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    };
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    format!("{{{}}}", parts.join(","))
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
            "serin_canary_duration_seconds_bucket{name=\"podinfo\",namespace=\"test\",le=\"0.025\"} 0",
            "serin_canary_duration_seconds_bucket{name=\"podinfo\",namespace=\"test\",le=\"0.05\"} 1",
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
