//! The chart's Grafana dashboards (`charts/serin/dashboards`) as data: every panel's PromQL with
//! Grafana's template variables filled in, run against a Prometheus as Grafana would run them.

use serde_json::Value;
use serin_metrics::PrometheusClient;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The dashboards the chart installs, by file name.
const DASHBOARDS: [(&str, &str); 2] = [
    (
        "canary.json",
        include_str!("../../../../charts/serin/dashboards/canary.json"),
    ),
    (
        "operator.json",
        include_str!("../../../../charts/serin/dashboards/operator.json"),
    ),
];

/// One query of a panel.
#[derive(Debug)]
pub struct PanelQuery {
    /// Where it is: `canary.json / Request rate / A`.
    pub panel: String,
    /// Its PromQL, as written (with `$variables`).
    pub expr: String,
}

/// Every panel query of the chart's dashboards, rows' panels included.
pub fn panel_queries() -> Vec<PanelQuery> {
    let mut queries = Vec::new();
    for (file, text) in DASHBOARDS {
        let dashboard: Value = serde_json::from_str(text).expect("the dashboards are JSON");
        for panel in all_panels(&dashboard) {
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str() {
                    queries.push(PanelQuery {
                        panel: format!(
                            "{file} / {} / {}",
                            panel["title"].as_str().unwrap_or("?"),
                            target["refId"].as_str().unwrap_or("?")
                        ),
                        expr: expr.to_string(),
                    });
                }
            }
        }
    }
    queries
}

fn all_panels(dashboard: &Value) -> Vec<&Value> {
    let mut panels = Vec::new();
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        panels.push(panel);
        panels.extend(panel["panels"].as_array().into_iter().flatten());
    }
    panels
}

/// `text` with Grafana's `$name` and `${name}` replaced by `values`; an unknown name is an error.
pub fn substitute(text: &str, values: &BTreeMap<&str, &str>) -> Result<String, String> {
    static VARIABLE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"\$(?:\{(\w+)\}|(\w+))").expect("a valid pattern")
    });
    let mut unknown = None;
    let replaced = VARIABLE.replace_all(text, |captures: &regex::Captures| {
        let name = captures
            .get(1)
            .or(captures.get(2))
            .map_or("", |m| m.as_str());
        match values.get(name) {
            Some(value) => value.to_string(),
            None => {
                unknown.get_or_insert_with(|| name.to_string());
                captures[0].to_string()
            }
        }
    });
    match unknown {
        Some(name) => Err(format!("unknown variable ${name}")),
        None => Ok(replaced.into_owned()),
    }
}

/// What running the panel queries found.
pub struct Checked {
    /// Queries that returned at least one series with a number.
    pub answered: usize,
    /// Queries run.
    pub total: usize,
    /// The others: panel and why.
    pub missing: Vec<String>,
}

/// Runs every panel query with `values` for the template variables (`__rate_interval` included),
/// asking again for at most `patience` while some return nothing: a series can lag a scrape.
pub async fn check(
    prometheus: &PrometheusClient,
    values: &BTreeMap<&str, &str>,
    patience: Duration,
) -> Checked {
    let queries = panel_queries();
    let deadline = Instant::now() + patience;
    let mut outcomes: Vec<Result<usize, String>> = vec![Ok(0); queries.len()];
    loop {
        for (query, outcome) in queries.iter().zip(outcomes.iter_mut()) {
            if matches!(outcome, Ok(0)) {
                *outcome = match substitute(&query.expr, values) {
                    Ok(promql) => prometheus
                        .count_series(&promql)
                        .await
                        .map_err(|e| e.to_string()),
                    Err(error) => Err(error),
                };
            }
        }
        if !outcomes.iter().any(|o| matches!(o, Ok(0))) || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let mut missing = Vec::new();
    for (query, outcome) in queries.iter().zip(&outcomes) {
        match outcome {
            Ok(0) => missing.push(format!("{}: no series", query.panel)),
            Ok(_) => {}
            Err(error) => missing.push(format!("{}: {error}", query.panel)),
        }
    }
    Checked {
        answered: queries.len() - missing.len(),
        total: queries.len(),
        missing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Grafana's built-in variables the dashboards may use, besides their own.
    const BUILT_IN: [&str; 2] = ["__rate_interval", "__interval"];

    fn defined_variables(dashboard: &Value) -> Vec<&str> {
        dashboard["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .chain(BUILT_IN)
            .collect()
    }

    #[test]
    fn every_panel_queries_prometheus_with_variables_the_dashboard_defines() {
        for (file, text) in DASHBOARDS {
            let dashboard: Value = serde_json::from_str(text).unwrap();
            assert!(dashboard["uid"].as_str().unwrap().starts_with("serin-"));
            let defined: BTreeMap<&str, &str> = defined_variables(&dashboard)
                .into_iter()
                .map(|name| (name, "x"))
                .collect();
            for panel in all_panels(&dashboard) {
                if panel["type"] == "row" {
                    continue;
                }
                let title = panel["title"].as_str().unwrap();
                let targets = panel["targets"].as_array();
                assert!(
                    targets
                        .is_some_and(|t| !t.is_empty() && t.iter().all(|t| t["expr"].is_string())),
                    "{file} / {title} has no PromQL"
                );
                assert_eq!(
                    panel["datasource"]["uid"], "${datasource}",
                    "{file} / {title} must use the dashboard's Prometheus"
                );
                for target in targets.unwrap() {
                    let expr = target["expr"].as_str().unwrap();
                    substitute(expr, &defined)
                        .unwrap_or_else(|e| panic!("{file} / {title}: {e} in {expr}"));
                }
            }
            for annotation in dashboard["annotations"]["list"].as_array().unwrap() {
                if let Some(expr) = annotation["expr"].as_str() {
                    substitute(expr, &defined).unwrap_or_else(|e| panic!("{file}: {e} in {expr}"));
                }
            }
        }
        assert!(panel_queries().len() >= 20, "{:?}", panel_queries());
    }

    #[test]
    fn variables_are_substituted_in_both_spellings_and_unknown_ones_named() {
        let values = BTreeMap::from([("namespace", "test"), ("__rate_interval", "1m")]);
        assert_eq!(
            substitute(
                r#"rate(x{namespace="$namespace"}[${__rate_interval}])"#,
                &values
            ),
            Ok(r#"rate(x{namespace="test"}[1m])"#.to_string())
        );
        assert_eq!(
            substitute(r#"x{workload="$target-primary"}"#, &values),
            Err("unknown variable $target".to_string())
        );
    }
}
