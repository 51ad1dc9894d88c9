//! `serin migrate FILE...`: converts Flagger and Argo Rollouts manifests into Serin's, and says for
//! every field without an equivalent what became of it.
//!
//! - Flagger `v1beta1` objects keep their field names in Serin, so only their `apiVersion` line is
//!   rewritten: comments and layout survive. Serin's validation then reports what it refuses.
//! - Flagger `v1alpha3` Canaries are converted field by field: `canaryAnalysis`,
//!   `service.appendHeaders` and the Istio metric names of 2019 with their single-number thresholds.
//! - An Argo Rollouts `Rollout` becomes a Deployment (or keeps its `workloadRef` Deployment) and a
//!   Canary; AnalysisTemplates with a Prometheus, web or job provider become MetricTemplates (an
//!   analysis step stays an analysis step, and a canary's background analysis Serin's, their
//!   metrics keeping Argo's fields); header and mirror route steps keep their place; an HPA
//!   scaling the Rollout scales the Deployment instead.
//!
//! Every other object passes through as written. The conversion itself is pure (text in, text and
//! warnings out); only [`run`] reads files and prints.

mod analysis_templates;
mod documents;
mod flagger;
mod index;
mod rollouts;
#[cfg(test)]
mod tests;
mod warnings;

pub use warnings::Warning;

use anyhow::Context as _;
use documents::{
    ARGO_GROUP, Document, Emitted, FLAGGER_GROUP, Outcome, api_group, describe, has_comments,
    name_of, split_documents,
};
use flagger::convert_flagger;
use index::{Index, Replacement};
use rollouts::convert_rollout;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use warnings::Report;

/// One input file: the name warnings call it by, and its text.
#[derive(Clone, Debug)]
pub struct Source {
    /// How warnings name the file (its path as given).
    pub name: String,
    /// The file's YAML, one or more `---` separated documents.
    pub text: String,
}

/// The converted manifests and the warnings raised while converting them.
#[derive(Clone, Debug)]
pub struct Migration {
    /// The output documents, `---` separated.
    pub yaml: String,
    /// One entry per field or object without an equivalent, in input order.
    pub warnings: Vec<Warning>,
    /// How many input objects were converted (the rest passed through unchanged).
    pub converted: usize,
}

/// Reads the files (a directory stands for its `.yaml`, `.yml` and `.json` files, recursively),
/// prints the converted manifests on stdout and the warnings on stderr. A file that cannot be read
/// or parsed is an error, and then nothing is printed on stdout.
pub fn run(paths: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let mut files = Vec::new();
    for path in paths {
        collect_files(path, &mut files)?;
    }
    let mut sources = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        sources.push(Source {
            name: file.display().to_string(),
            text,
        });
    }
    let migration = migrate(&sources)?;
    for warning in &migration.warnings {
        eprintln!("warning: {warning}");
    }
    print!("{}", migration.yaml);
    eprintln!(
        "{} object(s) converted, {} warning(s)",
        migration.converted,
        migration.warnings.len()
    );
    Ok(ExitCode::SUCCESS)
}

fn collect_files(path: &Path, files: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    if !path.is_dir() {
        files.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("reading the directory {}", path.display()))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .with_context(|| format!("reading the directory {}", path.display()))?;
    entries.sort();
    for entry in entries {
        let manifest = entry
            .extension()
            .is_some_and(|ext| ext == "yaml" || ext == "yml" || ext == "json");
        if entry.is_dir() || manifest {
            collect_files(&entry, files)?;
        }
    }
    Ok(())
}

/// Converts the documents of `sources`, in order. Fails only when a document is not YAML.
pub fn migrate(sources: &[Source]) -> anyhow::Result<Migration> {
    let mut documents = Vec::new();
    for (file, source) in sources.iter().enumerate() {
        for (number, text) in split_documents(&source.text).into_iter().enumerate() {
            let value: Value = serde_saphyr::from_str(&text)
                .with_context(|| format!("{}: document {} is not YAML", source.name, number + 1))?;
            if !value.is_null() {
                documents.push(Document { file, text, value });
            }
        }
    }
    let index = rollouts::index(&documents);
    let mut warnings = Vec::new();
    let mut emitted = Vec::new();
    let mut converted = 0;
    for (position, document) in documents.iter().enumerate() {
        let mut report = Report {
            file: &sources[document.file].name,
            object: describe(&document.value),
            warnings: &mut warnings,
        };
        match convert_document(position, document, &index, &mut report, &mut emitted) {
            Outcome::PassedThrough | Outcome::LeftOut => {}
            Outcome::Rewritten => converted += 1,
            Outcome::Converted => {
                converted += 1;
                if has_comments(&document.text) {
                    report.object_warning(
                        "its comments were not kept: it was converted field by field, not rewritten in place",
                    );
                }
            }
        }
    }
    Ok(Migration {
        yaml: render(&emitted)?,
        warnings,
        converted,
    })
}

/// Converts one document into `emitted`.
fn convert_document(
    position: usize,
    document: &Document,
    index: &Index,
    report: &mut Report,
    emitted: &mut Vec<Emitted>,
) -> Outcome {
    let value = &document.value;
    let kind = value["kind"].as_str().unwrap_or_default();
    let version = value["apiVersion"].as_str().unwrap_or_default();
    match (api_group(value), kind) {
        (FLAGGER_GROUP, _) => return convert_flagger(document, kind, version, report, emitted),
        (ARGO_GROUP, "Rollout") => {
            emitted.extend(convert_rollout(value, index, report));
            return Outcome::Converted;
        }
        (ARGO_GROUP, "AnalysisTemplate" | "ClusterAnalysisTemplate") => {
            let conversion = &index.templates[&position];
            for (path, message) in &conversion.warnings {
                match path {
                    Some(path) => report.field(path.clone(), message.clone()),
                    None => report.object_warning(message.clone()),
                }
            }
            if conversion.metric_templates.is_empty() {
                return Outcome::LeftOut;
            }
            let before = report.object.clone();
            for template in &conversion.metric_templates {
                report.object = format!("{before} (as MetricTemplate {})", name_of(template));
                warnings::validate_serin_object(template, report);
            }
            report.object = before;
            emitted.extend(
                conversion
                    .metric_templates
                    .iter()
                    .cloned()
                    .map(Emitted::Object),
            );
            return Outcome::Converted;
        }
        (ARGO_GROUP, "AnalysisRun" | "Experiment") => {
            report.object_warning(format!(
                "no equivalent: Argo Rollouts creates {kind}s while it runs a release, and Serin checks metrics within the Canary itself; left out"
            ));
            return Outcome::LeftOut;
        }
        _ => {}
    }
    if let Some(replacement) = index.replaced.get(&position) {
        report.object_warning(replaced_message(value, replacement));
        return Outcome::LeftOut;
    }
    if index.rollout_autoscalers.contains(&position) {
        // The HorizontalPodAutoscaler now scales the Deployment, and the Canary's autoscalerRef
        // names it, so Serin also gives the primary its own copy.
        let mut autoscaler = value.clone();
        autoscaler["spec"]["scaleTargetRef"] = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": value["spec"]["scaleTargetRef"]["name"],
        });
        emitted.push(Emitted::Object(autoscaler));
        return Outcome::Converted;
    }
    emitted.push(Emitted::Text(document.text.clone()));
    Outcome::PassedThrough
}

fn replaced_message(value: &Value, replacement: &Replacement) -> String {
    let kind = value["kind"].as_str().unwrap_or_default();
    let name = name_of(value);
    let service = &replacement.service_name;
    let used_by = format!(
        "the {} of Rollout {}",
        replacement.role, replacement.rollout
    );
    // Serin names its Services and VirtualService after the apex Service; an object of the same
    // name is taken over (adopted) by the operator rather than duplicated.
    let own_services = [
        (
            service.clone(),
            "apex Service (selecting the primary's pods)",
        ),
        (format!("{service}-primary"), "primary Service"),
        (
            format!("{service}-canary"),
            "canary Service (selecting the new version's pods)",
        ),
    ];
    let own_service = own_services.iter().find(|(own, _)| own == name);
    match (kind, own_service) {
        ("Service", Some((_, what))) => format!(
            "{used_by}: left out, since Serin writes this Service itself as the Canary's {what}"
        ),
        ("Service", None) => format!(
            "{used_by}: left out; Serin routes through its own Services {service}, {service}-primary and {service}-canary. Delete it from the cluster once nothing calls it"
        ),
        ("VirtualService", _) if name == service => format!(
            "{used_by}: left out, since Serin writes this VirtualService itself, with its hosts, gateways and route settings carried over"
        ),
        ("VirtualService", _) => format!(
            "{used_by}: left out; Serin writes its own VirtualService {service} with this one's hosts, gateways and route settings. Delete this one from the cluster before the Canary starts, two VirtualServices for one host conflict"
        ),
        _ => format!(
            "{used_by}: left out; Serin writes its own DestinationRules {service}-primary and {service}-canary (with this one's trafficPolicy). Delete it from the cluster after the migration"
        ),
    }
}

/// Renders the output documents, `---` separated.
fn render(emitted: &[Emitted]) -> anyhow::Result<String> {
    let mut parts = Vec::new();
    for item in emitted {
        let text = match item {
            Emitted::Text(text) => text.trim_matches('\n').to_string(),
            Emitted::Object(value) => serde_saphyr::to_string(value)
                .context("writing a converted object as YAML")?
                .trim_matches('\n')
                .to_string(),
        };
        parts.push(format!("{text}\n"));
    }
    Ok(parts.join("---\n"))
}
