//! `serin lint`: checks Canary and MetricTemplate manifests as the operator would, without a
//! cluster: every field validation refuses, and every analysis condition that does not parse.

use anyhow::Context as _;
use serde_json::Value;
use serin_api::{Canary, MetricTemplate};
use std::path::PathBuf;
use std::process::ExitCode;

/// The analysis conditions of `canary` the operator cannot evaluate, as lint prints them.
fn condition_problems(canary: &Canary) -> Vec<String> {
    canary
        .spec
        .analysis()
        .map(serin_metrics::conditions::condition_problems)
        .unwrap_or_default()
        .into_iter()
        .map(|(field, error)| format!("{field}: {error}"))
        .collect()
}

pub(crate) fn lint(files: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let mut problems = 0;
    let mut canaries = 0;
    for file in files {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        for (index, document) in text.split("\n---").enumerate() {
            let document = document.trim_start_matches("---").trim();
            if document.is_empty() {
                continue;
            }
            let value: Value = serde_saphyr::from_str(document)
                .with_context(|| format!("{} document {}: not YAML", file.display(), index + 1))?;
            let kind = value["kind"].as_str().unwrap_or_default();
            let group = value["apiVersion"].as_str().unwrap_or_default();
            if kind == "MetricTemplate" && group.starts_with("serin.dev/") {
                let name = value["metadata"]["name"]
                    .as_str()
                    .unwrap_or("?")
                    .to_string();
                let found: Vec<String> = match serde_json::from_value::<MetricTemplate>(value) {
                    Ok(template) => serin_api::validate::validate_metric_template(&template)
                        .iter()
                        .map(ToString::to_string)
                        .collect(),
                    Err(error) => vec![format!("does not decode as a MetricTemplate: {error}")],
                };
                for problem in &found {
                    println!("{}: MetricTemplate {name}: {problem}", file.display());
                }
                problems += found.len();
                continue;
            }
            if kind != "Canary" || !group.starts_with("serin.dev/") {
                continue;
            }
            canaries += 1;
            let name = value["metadata"]["name"]
                .as_str()
                .unwrap_or("?")
                .to_string();
            let found = match serde_json::from_value::<Canary>(value) {
                Ok(canary) => serin_api::validate::validate(&canary)
                    .iter()
                    .map(ToString::to_string)
                    .chain(condition_problems(&canary))
                    .collect(),
                Err(error) => vec![format!("does not decode as a Canary: {error}")],
            };
            for problem in &found {
                println!("{}: Canary {name}: {problem}", file.display());
            }
            problems += found.len();
        }
    }
    if problems > 0 {
        println!("{problems} problem(s) in {canaries} Canary manifest(s)");
        return Ok(ExitCode::FAILURE);
    }
    println!("{canaries} Canary manifest(s) valid");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_that_does_not_parse_and_a_broken_template_are_named() {
        let canary = serde_json::from_value::<Canary>(serde_json::json!({
            "apiVersion": "serin.dev/v1beta1", "kind": "Canary",
            "metadata": {"name": "podinfo", "namespace": "test"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo"},
                     "service": {"port": 9898},
                     "analysis": {"interval": "1m", "steps": [{"analysis": {"metrics": [
                         {"name": "ok", "query": "vector(1)", "successCondition": "result[0] >= 0.95"},
                         {"name": "broken", "query": "vector(1)", "successCondition": "result[0] >= "}
                     ]}}]}}
        }))
        .unwrap();
        let problems = condition_problems(&canary);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0]
                .starts_with("spec.analysis.steps[0].analysis.metrics[1].successCondition: "),
            "{problems:?}"
        );

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("template.yaml");
        std::fs::write(
            &file,
            "apiVersion: serin.dev/v1beta1\nkind: MetricTemplate\nmetadata:\n  name: smoke\nspec:\n  provider:\n    type: job\n",
        )
        .unwrap();
        assert_eq!(lint(&[file]).unwrap(), ExitCode::FAILURE);
    }
}
