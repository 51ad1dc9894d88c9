//! `serin migrate FILE...`: converts Flagger and Argo Rollouts manifests into Serin's, and says for
//! every field without an equivalent what became of it.
//!
//! - Flagger `v1beta1` objects keep their field names in Serin, so only their `apiVersion` line is
//!   rewritten: comments and layout survive. Serin's validation then reports what it refuses.
//! - Flagger `v1alpha3` Canaries are converted field by field: `canaryAnalysis`,
//!   `service.appendHeaders` and the Istio metric names of 2019 with their single-number thresholds.
//! - An Argo Rollouts `Rollout` becomes a Deployment (or keeps its `workloadRef` Deployment) and a
//!   Canary; AnalysisTemplates with a Prometheus provider become MetricTemplates; an HPA scaling the
//!   Rollout scales the Deployment instead.
//!
//! Every other object passes through as written. The conversion itself is pure (text in, text and
//! warnings out); only [`run`] reads files and prints.

use anyhow::Context as _;
use serde_json::{Map, Number, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const SERIN_API_VERSION: &str = "serin.dev/v1beta1";
const FLAGGER_GROUP: &str = "flagger.app";
const ARGO_GROUP: &str = "argoproj.io";
const ISTIO_GROUP: &str = "networking.istio.io";
/// Serin's operator finds a target's pods by the first of these labels in its selector (Flagger's
/// default `-selector-labels`).
const SELECTOR_LABELS: [&str; 3] = ["app", "name", "app.kubernetes.io/name"];
/// The analysis interval of a converted Rollout when its metrics name none: Flagger's default.
const DEFAULT_INTERVAL: &str = "1m";

/// One input file: the name warnings call it by, and its text.
#[derive(Clone, Debug)]
pub struct Source {
    /// How warnings name the file (its path as given).
    pub name: String,
    /// The file's YAML, one or more `---` separated documents.
    pub text: String,
}

/// A field (or a whole object) without a Serin equivalent, and what the conversion did with it.
#[derive(Clone, Debug, PartialEq)]
pub struct Warning {
    /// The input file.
    pub file: String,
    /// The object, as `Kind name`.
    pub object: String,
    /// The field path inside the object, when the warning is about one field.
    pub path: Option<String>,
    /// What has no equivalent and what happened to it.
    pub message: String,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.path {
            Some(path) => write!(
                f,
                "{}: {}: {path}: {}",
                self.file, self.object, self.message
            ),
            None => write!(f, "{}: {}: {}", self.file, self.object, self.message),
        }
    }
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
    let index = Index::new(&documents);
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

/// One YAML document of an input file, as written and as parsed.
struct Document {
    file: usize,
    text: String,
    value: Value,
}

/// What became of one input document.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Outcome {
    /// Printed as written.
    PassedThrough,
    /// Printed as written but for its apiVersion line.
    Rewritten,
    /// Printed as new objects built from its fields (its comments are lost).
    Converted,
    /// Not printed.
    LeftOut,
}

/// What goes to stdout for one input document.
enum Emitted {
    /// Text as written (with comments), possibly with its apiVersion line rewritten.
    Text(String),
    /// A converted object, serialized on output.
    Object(Value),
}

/// Where warnings go while one object is converted.
struct Report<'a> {
    file: &'a str,
    object: String,
    warnings: &'a mut Vec<Warning>,
}

impl Report<'_> {
    fn field(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.warnings.push(Warning {
            file: self.file.to_string(),
            object: self.object.clone(),
            path: Some(path.into()),
            message: message.into(),
        });
    }

    fn object_warning(&mut self, message: impl Into<String>) {
        self.warnings.push(Warning {
            file: self.file.to_string(),
            object: self.object.clone(),
            path: None,
            message: message.into(),
        });
    }

    /// Serin's own validation of a converted object: each problem is a warning, since the operator
    /// would refuse the object until it is fixed.
    fn validation(&mut self, problems: Vec<serin_api::FieldError>) {
        for problem in problems {
            self.field(
                problem.path,
                format!("Serin refuses this: {}", problem.message),
            );
        }
    }
}

/// Splits a file at its `---` lines. A document holding only comments is kept with the next one,
/// so a file's header comment stays with the first object.
fn split_documents(text: &str) -> Vec<String> {
    let mut documents = Vec::new();
    let mut current = String::new();
    let mut finish = |current: &mut String| {
        let meaningful = current.lines().any(|line| {
            let line = line.trim();
            !line.is_empty() && !line.starts_with('#')
        });
        if meaningful {
            documents.push(std::mem::take(current));
        }
    };
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end();
        if bare == "---" || bare.starts_with("--- ") || bare == "..." {
            finish(&mut current);
            if let Some(rest) = bare.strip_prefix("--- ")
                && !rest.trim_start().starts_with('#')
            {
                current.push_str(rest);
                current.push('\n');
            }
            continue;
        }
        current.push_str(line);
    }
    finish(&mut current);
    documents
}

/// Whether a document has a comment: a `#` at the start of a line or after a space, outside quotes
/// and outside block scalars (where `#` is text, e.g. in a shell command or a query).
fn has_comments(text: &str) -> bool {
    let mut block_indent: Option<usize> = None;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        if let Some(block) = block_indent {
            if line.trim().is_empty() || indent > block {
                continue;
            }
            block_indent = None;
        }
        let (content, comment) = split_comment(line);
        if comment {
            return true;
        }
        let content = content.trim_end();
        if ["|", "|-", "|+", ">", ">-", ">+"]
            .iter()
            .any(|indicator| content.ends_with(indicator) && content.len() > indicator.len())
        {
            block_indent = Some(indent);
        }
    }
    false
}

/// The part of a line before its comment, and whether there was a comment.
fn split_comment(line: &str) -> (&str, bool) {
    let mut quote: Option<char> = None;
    let mut previous = ' ';
    for (at, c) in line.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            // A quote opens a quoted scalar only where one can start, not in `it's`.
            None if (c == '"' || c == '\'')
                && (previous.is_whitespace() || ":[{,-".contains(previous)) =>
            {
                quote = Some(c)
            }
            None if c == '#' && previous.is_whitespace() => return (&line[..at], true),
            None => {}
        }
        previous = c;
    }
    (line, false)
}

/// Lookups across every input document, and what the Rollouts among them refer to.
struct Index<'a> {
    documents: &'a [Document],
    /// Services, VirtualServices and DestinationRules a Rollout routes through: they are left
    /// out of the output, since Serin writes its own.
    replaced: BTreeMap<usize, Replacement>,
    /// HorizontalPodAutoscalers scaling a Rollout, by document.
    rollout_autoscalers: BTreeSet<usize>,
    /// AnalysisTemplates converted ahead of the Rollouts that use them, by document.
    templates: BTreeMap<usize, TemplateConversion>,
}

/// Why an object a Rollout routes through is left out.
struct Replacement {
    rollout: String,
    role: String,
    /// The apex Service name the Canary uses.
    service_name: String,
}

impl<'a> Index<'a> {
    fn new(documents: &'a [Document]) -> Self {
        let mut index = Index {
            documents,
            replaced: BTreeMap::new(),
            rollout_autoscalers: BTreeSet::new(),
            templates: BTreeMap::new(),
        };
        let mut referenced = BTreeSet::new();
        for document in documents {
            if !is_kind(&document.value, ARGO_GROUP, "Rollout") {
                continue;
            }
            let rollout = &document.value;
            let namespace = namespace_of(rollout);
            let service_name = canary_service_name(rollout, &index);
            for (role, kind, name) in routing_references(rollout) {
                let group = if kind == "Service" { "" } else { ISTIO_GROUP };
                let (name, namespace) = match name.split_once('.') {
                    Some((name, namespace)) if kind == "VirtualService" => {
                        (name.to_string(), Some(namespace))
                    }
                    _ => (name, namespace),
                };
                if let Some(found) = index.find(group, kind, &name, namespace) {
                    index.replaced.insert(
                        found,
                        Replacement {
                            rollout: name_of(rollout).to_string(),
                            role,
                            service_name: service_name.clone(),
                        },
                    );
                }
            }
            for reference in analysis_references(rollout) {
                for template in &reference.templates {
                    if let Some(found) = index.find_template(template, namespace) {
                        referenced.insert(found);
                    }
                }
            }
            for (position, candidate) in documents.iter().enumerate() {
                let target = &candidate.value["spec"]["scaleTargetRef"];
                if candidate.value["kind"] == "HorizontalPodAutoscaler"
                    && target["kind"] == "Rollout"
                    && target["name"].as_str() == Some(name_of(rollout))
                    && same_namespace(namespace_of(&candidate.value), namespace)
                {
                    index.rollout_autoscalers.insert(position);
                }
            }
        }
        for (position, document) in documents.iter().enumerate() {
            let value = &document.value;
            if is_kind(value, ARGO_GROUP, "AnalysisTemplate")
                || is_kind(value, ARGO_GROUP, "ClusterAnalysisTemplate")
            {
                let conversion = convert_analysis_template(value, referenced.contains(&position));
                index.templates.insert(position, conversion);
            }
        }
        index
    }

    /// The document of that group, kind and name; a missing namespace on either side matches any.
    fn find(&self, group: &str, kind: &str, name: &str, namespace: Option<&str>) -> Option<usize> {
        self.documents.iter().position(|d| {
            api_group(&d.value) == group
                && d.value["kind"] == kind
                && name_of(&d.value) == name
                && same_namespace(namespace_of(&d.value), namespace)
        })
    }

    fn find_template(
        &self,
        template: &TemplateReference,
        namespace: Option<&str>,
    ) -> Option<usize> {
        if template.cluster_scope {
            self.find(ARGO_GROUP, "ClusterAnalysisTemplate", &template.name, None)
        } else {
            self.find(ARGO_GROUP, "AnalysisTemplate", &template.name, namespace)
        }
    }

    fn value(&self, position: usize) -> &'a Value {
        &self.documents[position].value
    }
}

fn same_namespace(a: Option<&str>, b: Option<&str>) -> bool {
    a.is_none() || b.is_none() || a == b
}

fn api_group(value: &Value) -> &str {
    value["apiVersion"]
        .as_str()
        .and_then(|version| version.rsplit_once('/'))
        .map_or("", |(group, _)| group)
}

fn is_kind(value: &Value, group: &str, kind: &str) -> bool {
    api_group(value) == group && value["kind"] == kind
}

fn name_of(value: &Value) -> &str {
    value["metadata"]["name"].as_str().unwrap_or_default()
}

fn namespace_of(value: &Value) -> Option<&str> {
    value["metadata"]["namespace"].as_str()
}

fn describe(value: &Value) -> String {
    let kind = value["kind"].as_str().unwrap_or("object");
    match value["metadata"]["name"].as_str() {
        Some(name) => format!("{kind} {name}"),
        None => kind.to_string(),
    }
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

// ---------------------------------------------------------------------------------------------
// Flagger

fn convert_flagger(
    document: &Document,
    kind: &str,
    version: &str,
    report: &mut Report,
    emitted: &mut Vec<Emitted>,
) -> Outcome {
    let legacy_canary = kind == "Canary" && version != "flagger.app/v1beta1";
    if !["Canary", "MetricTemplate", "AlertProvider"].contains(&kind) {
        report.object_warning(format!(
            "Flagger has no kind {kind:?} that Serin knows; left unchanged"
        ));
        emitted.push(Emitted::Text(document.text.clone()));
        return Outcome::PassedThrough;
    }
    if !legacy_canary && let Some(text) = rewrite_api_version(&document.text) {
        // The rewritten text is what the user applies, so it is what gets validated.
        match serde_saphyr::from_str::<Value>(&text) {
            Ok(value) if value["apiVersion"] == SERIN_API_VERSION => {
                validate_serin_object(&value, report);
                emitted.push(Emitted::Text(text));
                return Outcome::Rewritten;
            }
            _ => {}
        }
    }
    // A legacy Canary, or one whose apiVersion is not on a line of its own (flow style, JSON).
    let mut value = document.value.clone();
    if legacy_canary {
        convert_legacy_canary(&mut value, report);
    }
    value["apiVersion"] = json!(SERIN_API_VERSION);
    if let Some(fields) = value.as_object_mut() {
        fields.remove("status");
    }
    validate_serin_object(&value, report);
    emitted.push(Emitted::Object(value));
    Outcome::Converted
}

/// The document with its top-level `apiVersion: flagger.app/...` line pointing at Serin's group;
/// `None` when there is no such line.
fn rewrite_api_version(text: &str) -> Option<String> {
    let mut rewritten = String::with_capacity(text.len());
    let mut done = false;
    for line in text.split_inclusive('\n') {
        if !done
            && line.starts_with("apiVersion:")
            && let Some(start) = line.find("flagger.app/")
        {
            let length = line[start..]
                .find(|c: char| c == '"' || c == '\'' || c.is_whitespace())
                .unwrap_or(line.len() - start);
            rewritten.push_str(&line[..start]);
            rewritten.push_str(SERIN_API_VERSION);
            rewritten.push_str(&line[start + length..]);
            done = true;
        } else {
            rewritten.push_str(line);
        }
    }
    done.then_some(rewritten)
}

/// Runs Serin's validation of a Canary, MetricTemplate or AlertProvider.
fn validate_serin_object(value: &Value, report: &mut Report) {
    let problems = match value["kind"].as_str() {
        Some("Canary") => serde_json::from_value::<serin_api::Canary>(value.clone())
            .map(|canary| serin_api::validate::validate(&canary)),
        Some("MetricTemplate") => {
            serde_json::from_value::<serin_api::MetricTemplate>(value.clone())
                .map(|template| serin_api::validate::validate_metric_template(&template))
        }
        Some("AlertProvider") => serde_json::from_value::<serin_api::AlertProvider>(value.clone())
            .map(|provider| serin_api::validate::validate_alert_provider(&provider)),
        _ => return,
    };
    match problems {
        Ok(problems) => report.validation(problems),
        Err(error) => report.object_warning(format!(
            "does not decode as a Serin {}: {error}",
            value["kind"].as_str().unwrap_or_default()
        )),
    }
}

/// Flagger v1alpha3 (2019) to Serin: `canaryAnalysis` becomes `analysis`, `service.appendHeaders`
/// becomes `service.headers.request.add`, and metrics get their current names and a thresholdRange
/// for their single-number threshold.
fn convert_legacy_canary(canary: &mut Value, report: &mut Report) {
    let Some(spec) = canary["spec"].as_object_mut() else {
        return;
    };
    if spec.contains_key("canaryAnalysis") {
        if spec.contains_key("analysis") {
            spec.remove("canaryAnalysis");
            report.field(
                "spec.canaryAnalysis",
                "left out: spec.analysis is set too, and it is the one Flagger used",
            );
        } else {
            rename_key(spec, "canaryAnalysis", "analysis");
        }
    }
    if let Some(service) = spec.get_mut("service").and_then(Value::as_object_mut) {
        move_append_headers(service, report);
    }
    if let Some(scaler) = spec.get_mut("autoscalerRef").and_then(Value::as_object_mut)
        && let Some(version) = scaler.get("apiVersion").and_then(Value::as_str)
        && version.starts_with("autoscaling/v2beta")
    {
        report.field(
            "spec.autoscalerRef.apiVersion",
            format!("{version} is served by no current Kubernetes; written as autoscaling/v2, so convert the HorizontalPodAutoscaler itself to autoscaling/v2 too"),
        );
        scaler.insert("apiVersion".into(), json!("autoscaling/v2"));
    }
    for (field, path) in [
        ("service", "spec.service.match"),
        ("analysis", "spec.analysis.match"),
    ] {
        let matches = spec
            .get_mut(field)
            .and_then(|section| section.get_mut("match"))
            .and_then(Value::as_array_mut);
        for (i, condition) in matches.into_iter().flatten().enumerate() {
            if let Some(fields) = condition.as_object_mut()
                && fields.remove("appendHeaders").is_some()
            {
                report.field(
                    format!("{path}[{i}].appendHeaders"),
                    "not a field of an HTTP match (Flagger ignored it here); left out. Headers to add to routed requests go in spec.service.headers.request.add",
                );
            }
        }
    }
    let metrics = spec
        .get_mut("analysis")
        .and_then(|analysis| analysis.get_mut("metrics"))
        .and_then(Value::as_array_mut);
    for metric in metrics.into_iter().flatten() {
        if let Some(metric) = metric.as_object_mut() {
            convert_legacy_metric(metric);
        }
    }
}

/// `service.appendHeaders` (Flagger, March 2019) is what `service.headers.request.add` replaced.
fn move_append_headers(service: &mut Map<String, Value>, report: &mut Report) {
    let Some(Value::Object(append)) = service.remove("appendHeaders") else {
        return;
    };
    let headers = service
        .entry("headers")
        .or_insert_with(|| json!({}))
        .as_object_mut();
    let Some(headers) = headers else {
        return;
    };
    let request = headers.entry("request").or_insert_with(|| json!({}));
    let Some(request) = request.as_object_mut() else {
        return;
    };
    let add = request.entry("add").or_insert_with(|| json!({}));
    let Some(add) = add.as_object_mut() else {
        return;
    };
    for (name, value) in append {
        if add.contains_key(&name) {
            report.field(
                format!("spec.service.appendHeaders.{name}"),
                "also set in spec.service.headers.request.add, whose value is kept",
            );
        } else {
            // Header values are strings in Istio's API; YAML may have read `10` as a number.
            let text = match value {
                Value::String(text) => text,
                other => other.to_string(),
            };
            add.insert(name, json!(text));
        }
    }
}

/// One v1alpha3 metric in today's spelling. The old Istio names ran the same queries as today's
/// builtins; their `threshold` was the minimum success rate in percent, and the maximum P99 in
/// milliseconds even for the histogram named in seconds (Flagger converted the result to ms).
fn convert_legacy_metric(metric: &mut Map<String, Value>) {
    let name = metric
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let renamed = match name {
        "istio_requests_total" => Some("request-success-rate"),
        "istio_request_duration_seconds_bucket" => Some("request-duration"),
        _ => None,
    };
    if let Some(renamed) = renamed {
        metric.insert("name".into(), json!(renamed));
    }
    let bound = match metric.get("name").and_then(Value::as_str) {
        Some("request-success-rate") => "min",
        // request-duration, and inline queries, which failed when the value was above threshold.
        _ => "max",
    };
    if metric.contains_key("thresholdRange") {
        return;
    }
    if let Some(threshold) = metric.get("threshold").cloned() {
        replace_key(
            metric,
            "threshold",
            "thresholdRange",
            json!({ bound: threshold }),
        );
    }
}

/// Renames a key in place, keeping the order of the map.
fn rename_key(map: &mut Map<String, Value>, from: &str, to: &str) {
    if let Some(value) = map.get(from).cloned() {
        replace_key(map, from, to, value);
    }
}

/// Replaces the entry `from` with `to: value` at the same position.
fn replace_key(map: &mut Map<String, Value>, from: &str, to: &str, value: Value) {
    let entries = std::mem::take(map);
    for (key, old) in entries {
        if key == from {
            map.insert(to.to_string(), value.clone());
        } else if key != to {
            map.insert(key, old);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Argo Rollouts: AnalysisTemplates

/// The MetricTemplates made from one AnalysisTemplate, and what a Canary metric using each needs.
struct TemplateConversion {
    metric_templates: Vec<Value>,
    metrics: Vec<ConvertedMetric>,
    warnings: Vec<(Option<String>, String)>,
}

/// One Prometheus metric of an AnalysisTemplate, as a Canary metric will reference it.
#[derive(Clone, Debug)]
struct ConvertedMetric {
    /// The Argo metric name, which the Canary metric keeps.
    name: String,
    /// The MetricTemplate holding its query.
    template_name: String,
    template_namespace: Option<String>,
    /// Accepted range from successCondition/failureCondition; `None` when they cannot be read.
    range: Option<Range>,
    /// Whether no data (NaN, empty) passes, as an `isNaN(result[0]) || ...` condition says.
    ignores_no_data: bool,
    interval: Option<String>,
    /// Measurements before the metric completes; with `interval`, how long an analysis step lasts.
    count: Option<u64>,
    /// `failureLimit` (default 0); `None` when it is -1 (never fail).
    failure_limit: Option<i64>,
    /// The `{{args.X}}` the query uses: (Argo arg name, Serin templateVariables key).
    variables: Vec<(String, String)>,
    /// Default values the template gives its args.
    defaults: BTreeMap<String, String>,
}

/// An inclusive range of accepted values, as Serin's `thresholdRange`.
#[derive(Clone, Debug, Default, PartialEq)]
struct Range {
    min: Option<Number>,
    max: Option<Number>,
}

impl Range {
    fn to_value(&self) -> Value {
        let mut range = Map::new();
        if let Some(min) = &self.min {
            range.insert("min".into(), Value::Number(min.clone()));
        }
        if let Some(max) = &self.max {
            range.insert("max".into(), Value::Number(max.clone()));
        }
        Value::Object(range)
    }

    /// Narrows this range to the part `other` accepts too.
    fn intersect(&mut self, other: &Range) {
        let value = |n: &Number| n.as_f64().unwrap_or(f64::NAN);
        if let Some(min) = &other.min
            && self.min.as_ref().is_none_or(|m| value(min) > value(m))
        {
            self.min = Some(min.clone());
        }
        if let Some(max) = &other.max
            && self.max.as_ref().is_none_or(|m| value(max) < value(m))
        {
            self.max = Some(max.clone());
        }
    }
}

fn convert_analysis_template(template: &Value, referenced: bool) -> TemplateConversion {
    let mut conversion = TemplateConversion {
        metric_templates: Vec::new(),
        metrics: Vec::new(),
        warnings: Vec::new(),
    };
    let mut warn =
        |path: Option<String>, message: String| conversion.warnings.push((path, message));
    let spec = &template["spec"];
    let cluster = template["kind"] == "ClusterAnalysisTemplate";
    let mut defaults = BTreeMap::new();
    for (i, arg) in spec["args"].as_array().into_iter().flatten().enumerate() {
        let name = arg["name"].as_str().unwrap_or_default();
        if let Some(value) = arg["value"].as_str() {
            defaults.insert(name.to_string(), value.to_string());
        } else if !arg["valueFrom"].is_null() {
            warn(
                Some(format!("spec.args[{i}].valueFrom")),
                "no equivalent: a MetricTemplate's variables are plain strings from the Canary's templateVariables, not read from Secrets; put the value in the Canary metric's templateVariables, or credentials in the MetricTemplate's secretRef".into(),
            );
        }
    }
    for field in ["dryRun", "measurementRetention", "templates"] {
        if !spec[field].is_null() {
            let why = match field {
                "dryRun" => "Serin has no dry-run metrics: every metric of a Canary counts",
                "measurementRetention" => {
                    "Serin keeps only each metric's last result, in status.metricChecks"
                }
                _ => "templates are not composed in Serin; migrate the included templates as well",
            };
            warn(
                Some(format!("spec.{field}")),
                format!("no equivalent ({why}); left out"),
            );
        }
    }
    let metrics = spec["metrics"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut converted_any = false;
    for (i, metric) in metrics.iter().enumerate() {
        let path = format!("spec.metrics[{i}]");
        let metric_name = metric["name"].as_str().unwrap_or_default();
        let provider = &metric["provider"];
        let Some(prometheus) = provider.get("prometheus") else {
            let kind = provider
                .as_object()
                .and_then(|p| p.keys().next().cloned())
                .unwrap_or_else(|| "none".into());
            warn(
                Some(format!("{path}.provider.{kind}")),
                format!(
                    "no equivalent: Serin queries Prometheus only, so metric {metric_name:?} is left out (no MetricTemplate, no Canary metric). A webhook (spec.analysis.webhooks) can run such a check"
                ),
            );
            continue;
        };
        converted_any = true;
        let template_name = metric_template_name(name_of(template), metric_name, metrics.len());
        let (query, used, unknown) =
            convert_placeholders(prometheus["query"].as_str().unwrap_or_default());
        for placeholder in unknown {
            warn(
                Some(format!("{path}.provider.prometheus.query")),
                format!(
                    "placeholder {{{{{placeholder}}}}} has no equivalent (Serin's are name, namespace, target, service, interval and variables.KEY); left in the query, where Serin will refuse to render it"
                ),
            );
        }
        let mut provider = Map::new();
        provider.insert("type".into(), json!("prometheus"));
        match prometheus["address"].as_str() {
            Some(address) => {
                provider.insert("address".into(), json!(address));
            }
            None => warn(
                Some(format!("{path}.provider.prometheus.address")),
                "missing: Argo Rollouts used its controller's default Prometheus, Serin needs the address in the MetricTemplate; add spec.provider.address".into(),
            ),
        }
        if prometheus["insecure"].as_bool() == Some(true) {
            provider.insert("insecureSkipVerify".into(), json!(true));
        }
        if let Some(headers) = prometheus["headers"].as_array() {
            let mut map = Map::new();
            for header in headers {
                if let (Some(key), Some(value)) = (header["key"].as_str(), header["value"].as_str())
                {
                    map.insert(key.into(), json!([value]));
                }
            }
            provider.insert("headers".into(), Value::Object(map));
        }
        for (field, why) in [
            (
                "timeout",
                "Serin waits 5 seconds for every Prometheus query",
            ),
            (
                "authentication",
                "Serin authenticates with a bearer token or basic auth from the MetricTemplate's secretRef (keys token, or username and password); create that Secret and set spec.provider.secretRef",
            ),
            ("rangeQuery", "Serin runs instant queries only"),
        ] {
            if !prometheus[field].is_null() {
                warn(
                    Some(format!("{path}.provider.prometheus.{field}")),
                    format!("no equivalent ({why}); left out"),
                );
            }
        }
        let mut metadata = Map::new();
        metadata.insert("name".into(), json!(template_name));
        if let Some(namespace) = namespace_of(template) {
            metadata.insert("namespace".into(), json!(namespace));
        }
        conversion.metric_templates.push(json!({
            "apiVersion": SERIN_API_VERSION,
            "kind": "MetricTemplate",
            "metadata": metadata,
            "spec": {"provider": provider, "query": query},
        }));

        let (range, ignores_no_data) = read_conditions(metric, &path, &mut warn);
        let failure_limit = match metric["failureLimit"].as_i64() {
            Some(-1) => {
                warn(
                    Some(format!("{path}.failureLimit")),
                    "-1 (never fail) has no equivalent: Serin rolls back after spec.analysis.threshold failed checks of any metric".into(),
                );
                None
            }
            Some(limit) => Some(limit),
            None => Some(0),
        };
        for (field, why) in [
            (
                "initialDelay",
                "Serin checks metrics from the first analysis tick of a release",
            ),
            (
                "consecutiveErrorLimit",
                "a query error is a failed check in Serin, counted towards spec.analysis.threshold",
            ),
            ("inconclusiveLimit", "Serin has no inconclusive results"),
            ("consecutiveSuccessLimit", "Serin counts failed checks only"),
        ] {
            if !metric[field].is_null() {
                warn(
                    Some(format!("{path}.{field}")),
                    format!("no equivalent ({why}); left out"),
                );
            }
        }
        let interval = metric["interval"].as_str().map(str::to_string);
        if let Some(text) = &interval
            && !is_prometheus_duration(text)
        {
            warn(
                Some(format!("{path}.interval")),
                format!(
                    "{text:?} is not a whole number of h, m or s, which Serin's analysis interval needs; the Canary uses {DEFAULT_INTERVAL}"
                ),
            );
        }
        conversion.metrics.push(ConvertedMetric {
            name: metric_name.to_string(),
            template_name,
            template_namespace: if cluster {
                None
            } else {
                namespace_of(template).map(str::to_string)
            },
            range,
            ignores_no_data,
            interval: interval.filter(|text| is_prometheus_duration(text)),
            count: metric["count"]
                .as_u64()
                .or_else(|| metric["count"].as_str().and_then(|c| c.parse().ok())),
            failure_limit,
            variables: used
                .iter()
                .map(|arg| (arg.clone(), variable_name(arg)))
                .collect(),
            defaults: defaults.clone(),
        });
    }
    if cluster && converted_any {
        warn(
            None,
            "a ClusterAnalysisTemplate is cluster-wide but a MetricTemplate lives in a namespace: written without one, so it lands in the namespace you apply it to; Canaries elsewhere reference it with templateRef.namespace".into(),
        );
    }
    if !referenced && converted_any {
        warn(
            None,
            "no Rollout among the files given uses it, so its successCondition, failureCondition and failureLimit have no Canary metric to go to; reference the MetricTemplate from a Canary with a thresholdRange".into(),
        );
    }
    conversion
}

/// A MetricTemplate holds one query: a one-metric template keeps its name, the metrics of a larger
/// one are named `<template>-<metric>`.
fn metric_template_name(template: &str, metric: &str, metrics: usize) -> String {
    let name = if metrics == 1 {
        template.to_string()
    } else {
        format!("{template}-{metric}")
    };
    let name: String = name
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    name.trim_matches('-').to_string()
}

/// `{{args.service-name}}` becomes `{{ variables.service_name }}` (a template variable must be an
/// identifier). Returns the query, the args used (in order, once each) and other placeholders.
fn convert_placeholders(query: &str) -> (String, Vec<String>, Vec<String>) {
    let mut converted = String::with_capacity(query.len());
    let mut used = Vec::new();
    let mut unknown = Vec::new();
    let mut rest = query;
    while let Some(start) = rest.find("{{") {
        let Some(length) = rest[start..].find("}}") else {
            break;
        };
        converted.push_str(&rest[..start]);
        let inner = rest[start + 2..start + length].trim();
        match inner.strip_prefix("args.") {
            Some(arg) => {
                converted.push_str(&format!("{{{{ variables.{} }}}}", variable_name(arg)));
                if !used.iter().any(|u| u == arg) {
                    used.push(arg.to_string());
                }
            }
            None => {
                converted.push_str(&rest[start..start + length + 2]);
                unknown.push(inner.to_string());
            }
        }
        rest = &rest[start + length + 2..];
    }
    converted.push_str(rest);
    (converted, used, unknown)
}

/// A templateVariables key for an Argo arg: letters, digits and `_` (the template language reads
/// `variables.service-name` as a subtraction).
fn variable_name(arg: &str) -> String {
    let mut name: String = arg
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

/// Whether Serin accepts the text as an interval: whole numbers of h, m and s.
fn is_prometheus_duration(text: &str) -> bool {
    serin_api::duration::parse_go_duration(text).is_ok()
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || b"hms".contains(&b))
}

/// The accepted range an Argo metric's conditions describe, and whether no data passes.
fn read_conditions(
    metric: &Value,
    path: &str,
    warn: &mut impl FnMut(Option<String>, String),
) -> (Option<Range>, bool) {
    let success = metric["successCondition"].as_str();
    let failure = metric["failureCondition"].as_str();
    if success.is_none() && failure.is_none() {
        warn(
            Some(path.to_string()),
            "has neither successCondition nor failureCondition, so Argo accepted any value; Serin needs a thresholdRange, which the Canary metric lacks until you add one".into(),
        );
        return (None, false);
    }
    let mut range = Range::default();
    let mut ignores_no_data = false;
    for (field, text, succeeds) in [
        ("successCondition", success, true),
        ("failureCondition", failure, false),
    ] {
        let Some(text) = text else { continue };
        match read_condition(text, succeeds) {
            Some(reading) => {
                range.intersect(&reading.range);
                ignores_no_data |= reading.ignores_no_data;
                for note in reading.inexact {
                    warn(Some(format!("{path}.{field}")), note);
                }
            }
            None => {
                warn(
                    Some(format!("{path}.{field}")),
                    format!(
                        "{text:?} cannot be written as a thresholdRange (a min and/or max on one value); the Canary metric has none until you add it"
                    ),
                );
                return (None, false);
            }
        }
    }
    if success.is_some() && failure.is_some() {
        warn(
            Some(path.to_string()),
            "with both conditions Argo called values that meet neither Inconclusive; Serin has no inconclusive result, so they fail the check".into(),
        );
    }
    (Some(range), ignores_no_data)
}

/// What one condition expression says about accepted values.
#[derive(Debug, Default, PartialEq)]
struct ConditionReading {
    range: Range,
    ignores_no_data: bool,
    /// What the inclusive bounds of a thresholdRange change.
    inexact: Vec<String>,
}

/// Reads a successCondition (`succeeds`) or failureCondition made of comparisons of the result
/// with numbers joined by `&&`, optionally behind a no-data guard (`isNaN(result[0]) || ...`).
/// `None` for anything else.
fn read_condition(text: &str, succeeds: bool) -> Option<ConditionReading> {
    let mut reading = ConditionReading::default();
    let mut comparisons = Vec::new();
    for part in text.split("||") {
        let part = strip_parentheses(part.trim());
        if is_no_data_guard(part) {
            // A guard in a successCondition lets no data pass; in a failureCondition it fails,
            // which is Serin's default.
            reading.ignores_no_data |= succeeds;
        } else {
            comparisons.push(part);
        }
    }
    let [comparison] = comparisons.as_slice() else {
        return None;
    };
    for clause in comparison.split("&&") {
        let (operator, number) = read_comparison(strip_parentheses(clause.trim()))?;
        let exact_text = number_text(&number);
        let (bound_is_min, inclusive_in_argo) = match (succeeds, operator) {
            (true, ">=") => (true, true),
            (true, ">") => (true, false),
            (true, "<=") => (false, true),
            (true, "<") => (false, false),
            (false, "<") => (true, true),
            (false, "<=") => (true, false),
            (false, ">") => (false, true),
            (false, ">=") => (false, false),
            (true, "==") => {
                reading.range.intersect(&Range {
                    min: Some(number.clone()),
                    max: Some(number),
                });
                continue;
            }
            _ => return None,
        };
        let bound = if bound_is_min {
            Range {
                min: Some(number),
                max: None,
            }
        } else {
            Range {
                min: None,
                max: Some(number),
            }
        };
        reading.range.intersect(&bound);
        if !inclusive_in_argo {
            reading.inexact.push(format!(
                "{text:?}: a thresholdRange includes its bounds, so a value of exactly {exact_text} passes in Serin where Argo failed it"
            ));
        }
    }
    Some(reading)
}

fn strip_parentheses(text: &str) -> &str {
    let mut text = text.trim();
    while text.starts_with('(') && text.ends_with(')') {
        text = text[1..text.len() - 1].trim();
    }
    text
}

fn is_no_data_guard(text: &str) -> bool {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    [
        "isNaN(result[0])",
        "isNaN(result)",
        "len(result)==0",
        "isNil(result)",
        "result==nil",
    ]
    .contains(&compact.as_str())
}

/// `result[0] >= 0.95` (or with the number first, or through asFloat/asInt) as the operator seen
/// from the result's side and the number.
fn read_comparison(text: &str) -> Option<(&'static str, Number)> {
    for (operator, flipped) in [
        (">=", "<="),
        ("<=", ">="),
        ("==", "=="),
        (">", "<"),
        ("<", ">"),
    ] {
        let Some((left, right)) = text.split_once(operator) else {
            continue;
        };
        let (left, right) = (left.trim(), right.trim());
        if is_result(left) {
            return parse_number(right).map(|n| (operator, n));
        }
        if is_result(right) {
            return parse_number(left).map(|n| (flipped, n));
        }
        return None;
    }
    None
}

fn is_result(text: &str) -> bool {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let inner = ["asFloat(", "asInt(", "float(", "int("]
        .iter()
        .find_map(|f| {
            compact
                .strip_prefix(f)
                .and_then(|rest| rest.strip_suffix(')'))
        })
        .unwrap_or(&compact);
    inner == "result" || inner == "result[0]"
}

/// A number as written: whole numbers stay integers, so `500` is not printed as `500.0`.
fn parse_number(text: &str) -> Option<Number> {
    if let Ok(whole) = text.parse::<i64>() {
        return Some(Number::from(whole));
    }
    text.parse::<f64>().ok().and_then(Number::from_f64)
}

fn number_text(number: &Number) -> String {
    number.to_string()
}

// ---------------------------------------------------------------------------------------------
// Argo Rollouts: Rollouts

/// An AnalysisTemplate named by a Rollout.
#[derive(Clone, Debug, PartialEq)]
struct TemplateReference {
    name: String,
    cluster_scope: bool,
}

/// A place in a Rollout that runs an analysis.
#[derive(Clone, Debug)]
struct AnalysisReference {
    path: String,
    role: AnalysisRole,
    templates: Vec<TemplateReference>,
    args: Vec<Value>,
    /// Its fields Serin has no use for (dryRun, measurementRetention, analysisRunMetadata, ...).
    unconverted: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum AnalysisRole {
    /// `canary.analysis`, running alongside the steps.
    Background,
    /// `canary.steps[i].analysis`.
    Step,
    /// `blueGreen.prePromotionAnalysis`.
    PrePromotion,
    /// `blueGreen.postPromotionAnalysis`.
    PostPromotion,
}

fn analysis_references(rollout: &Value) -> Vec<AnalysisReference> {
    let strategy = &rollout["spec"]["strategy"];
    let mut references = Vec::new();
    let mut add = |path: String, role: AnalysisRole, analysis: &Value| {
        if analysis.is_null() {
            return;
        }
        let mut templates: Vec<TemplateReference> = analysis["templates"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| TemplateReference {
                name: t["templateName"].as_str().unwrap_or_default().to_string(),
                cluster_scope: t["clusterScope"].as_bool().unwrap_or(false),
            })
            .collect();
        // Argo Rollouts before 1.0 named one template directly.
        if let Some(name) = analysis["templateName"].as_str() {
            templates.push(TemplateReference {
                name: name.to_string(),
                cluster_scope: analysis["clusterScope"].as_bool().unwrap_or(false),
            });
        }
        let known = [
            "templates",
            "templateName",
            "clusterScope",
            "args",
            "startingStep",
        ];
        let unconverted = analysis
            .as_object()
            .into_iter()
            .flat_map(Map::keys)
            .filter(|key| !known.contains(&key.as_str()))
            .cloned()
            .collect();
        references.push(AnalysisReference {
            path,
            role,
            templates,
            args: analysis["args"].as_array().cloned().unwrap_or_default(),
            unconverted,
        });
    };
    let canary = &strategy["canary"];
    add(
        "spec.strategy.canary.analysis".into(),
        AnalysisRole::Background,
        &canary["analysis"],
    );
    for (i, step) in canary["steps"].as_array().into_iter().flatten().enumerate() {
        add(
            format!("spec.strategy.canary.steps[{i}].analysis"),
            AnalysisRole::Step,
            &step["analysis"],
        );
    }
    let blue_green = &strategy["blueGreen"];
    add(
        "spec.strategy.blueGreen.prePromotionAnalysis".into(),
        AnalysisRole::PrePromotion,
        &blue_green["prePromotionAnalysis"],
    );
    add(
        "spec.strategy.blueGreen.postPromotionAnalysis".into(),
        AnalysisRole::PostPromotion,
        &blue_green["postPromotionAnalysis"],
    );
    references
}

/// The Services, VirtualServices and DestinationRules a Rollout names: (role, kind, name).
fn routing_references(rollout: &Value) -> Vec<(String, &'static str, String)> {
    let strategy = &rollout["spec"]["strategy"];
    let mut references = Vec::new();
    let mut add = |role: &str, kind: &'static str, name: &Value| {
        if let Some(name) = name.as_str().filter(|n| !n.is_empty()) {
            references.push((role.to_string(), kind, name.to_string()));
        }
    };
    let canary = &strategy["canary"];
    add("canaryService", "Service", &canary["canaryService"]);
    add("stableService", "Service", &canary["stableService"]);
    let istio = &canary["trafficRouting"]["istio"];
    add(
        "VirtualService",
        "VirtualService",
        &istio["virtualService"]["name"],
    );
    for service in istio["virtualServices"].as_array().into_iter().flatten() {
        add("VirtualService", "VirtualService", &service["name"]);
    }
    add(
        "DestinationRule",
        "DestinationRule",
        &istio["destinationRule"]["name"],
    );
    let blue_green = &strategy["blueGreen"];
    add("activeService", "Service", &blue_green["activeService"]);
    add("previewService", "Service", &blue_green["previewService"]);
    references
}

/// The VirtualServices a Rollout routes through, as `name` or `name.namespace`.
fn virtual_service_names(rollout: &Value) -> Vec<(String, Vec<String>)> {
    let istio = &rollout["spec"]["strategy"]["canary"]["trafficRouting"]["istio"];
    let routes = |reference: &Value| -> Vec<String> {
        reference["routes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r.as_str().map(str::to_string))
            .collect()
    };
    let mut names = Vec::new();
    if let Some(name) = istio["virtualService"]["name"].as_str() {
        names.push((name.to_string(), routes(&istio["virtualService"])));
    }
    for reference in istio["virtualServices"].as_array().into_iter().flatten() {
        if let Some(name) = reference["name"].as_str() {
            names.push((name.to_string(), routes(reference)));
        }
    }
    names
}

/// The apex Service name of the Canary made from a Rollout. Blue/green keeps the activeService's
/// name, which its users call; a canary takes the first VirtualService host that is a plain
/// Service name, else the Rollout's name (Flagger's default, the Deployment's name).
fn canary_service_name(rollout: &Value, index: &Index) -> String {
    let strategy = &rollout["spec"]["strategy"];
    if let Some(active) = strategy["blueGreen"]["activeService"].as_str() {
        return active.to_string();
    }
    if let Some(virtual_service) = find_virtual_service(rollout, index) {
        let hosts = index.value(virtual_service)["spec"]["hosts"].as_array();
        if let Some(host) = hosts
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .find(|h| !h.contains('.') && !h.contains('*'))
        {
            return host.to_string();
        }
    }
    name_of(rollout).to_string()
}

fn find_virtual_service(rollout: &Value, index: &Index) -> Option<usize> {
    let (name, _) = virtual_service_names(rollout).into_iter().next()?;
    let (name, namespace) = match name.split_once('.') {
        Some((name, namespace)) => (name.to_string(), Some(namespace.to_string())),
        None => (name, namespace_of(rollout).map(str::to_string)),
    };
    index.find(ISTIO_GROUP, "VirtualService", &name, namespace.as_deref())
}

/// A Rollout as a Deployment (unless it references one with workloadRef) and a Canary.
fn convert_rollout(rollout: &Value, index: &Index, report: &mut Report) -> Vec<Emitted> {
    let spec = &rollout["spec"];
    let name = name_of(rollout);
    let namespace = namespace_of(rollout);
    let strategy = &spec["strategy"];
    let is_blue_green = !strategy["blueGreen"].is_null();
    let mut emitted = Vec::new();

    let mut canary_spec = Map::new();
    // Without trafficRouting Argo Rollouts routes with Services alone: a blue/green switches the
    // activeService's selector, a canary splits traffic by its pods. Serin's kubernetes provider
    // does both.
    let by_services = is_blue_green || strategy["canary"]["trafficRouting"].is_null();
    canary_spec.insert(
        "provider".into(),
        json!(if by_services { "kubernetes" } else { "istio" }),
    );
    let target = match spec["workloadRef"].as_object() {
        Some(workload) => workload_target(rollout, workload, index, report),
        None => {
            let deployment = deployment_from(rollout, report);
            check_selector(&deployment["spec"]["selector"], "spec.selector", report);
            emitted.push(Emitted::Object(deployment));
            name.to_string()
        }
    };
    canary_spec.insert(
        "targetRef".into(),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": target}),
    );
    if let Some(&autoscaler) = index.rollout_autoscalers.iter().find(|&&position| {
        let value = index.value(position);
        value["spec"]["scaleTargetRef"]["name"].as_str() == Some(name)
            && same_namespace(namespace_of(value), namespace)
    }) {
        let value = index.value(autoscaler);
        canary_spec.insert(
            "autoscalerRef".into(),
            json!({
                "apiVersion": value["apiVersion"],
                "kind": "HorizontalPodAutoscaler",
                "name": name_of(value),
            }),
        );
    }
    if let Some(deadline) = spec["progressDeadlineSeconds"].as_i64() {
        canary_spec.insert("progressDeadlineSeconds".into(), json!(deadline));
    }
    if spec["paused"].as_bool() == Some(true) {
        canary_spec.insert("suspend".into(), json!(true));
    }
    rollout_level_warnings(spec, report);

    canary_spec.insert("service".into(), canary_service(rollout, index, report));
    let analysis = if is_blue_green {
        blue_green_analysis(rollout, index, report)
    } else if strategy["canary"].is_object() {
        canary_analysis(rollout, index, report)
    } else {
        report.field(
            "spec.strategy",
            "neither canary nor blueGreen: the Canary gets one step to 100% of the traffic; write its steps",
        );
        json!({"interval": DEFAULT_INTERVAL, "threshold": 1, "steps": [{"setWeight": 100}]})
    };
    canary_spec.insert("analysis".into(), analysis);

    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(name));
    if let Some(namespace) = namespace {
        metadata.insert("namespace".into(), json!(namespace));
    }
    let canary = json!({
        "apiVersion": SERIN_API_VERSION,
        "kind": "Canary",
        "metadata": metadata,
        "spec": canary_spec,
    });
    let before = report.object.clone();
    report.object = format!("{before} (as Canary {name})");
    validate_serin_object(&canary, report);
    report.object = before;
    emitted.push(Emitted::Object(canary));
    emitted
}

/// Rollout fields that neither the Deployment nor the Canary can hold.
fn rollout_level_warnings(spec: &Value, report: &mut Report) {
    if spec["progressDeadlineAbort"].as_bool() == Some(false) {
        report.field(
            "spec.progressDeadlineAbort",
            "false has no equivalent: Serin always rolls back when progressDeadlineSeconds passes; left out",
        );
    }
    for (field, why) in [
        (
            "rollbackWindow",
            "Serin re-analyses every revision that is not the promoted one; going back to the promoted revision ends a release at once",
        ),
        (
            "restartAt",
            "restart the Deployment's pods with kubectl rollout restart",
        ),
        (
            "analysis",
            "Serin creates no AnalysisRuns, so there is no history to limit",
        ),
    ] {
        if !spec[field].is_null() {
            report.field(
                format!("spec.{field}"),
                format!("no equivalent ({why}); left out"),
            );
        }
    }
    // The fields the Deployment and the Canary take, and those reported above.
    let handled = [
        "replicas",
        "selector",
        "template",
        "workloadRef",
        "strategy",
        "minReadySeconds",
        "revisionHistoryLimit",
        "progressDeadlineSeconds",
        "progressDeadlineAbort",
        "paused",
        "rollbackWindow",
        "restartAt",
        "analysis",
    ];
    for field in spec.as_object().into_iter().flat_map(Map::keys) {
        if !handled.contains(&field.as_str()) {
            report.field(format!("spec.{field}"), "no equivalent in Serin; left out");
        }
    }
}

/// The Deployment a Rollout without workloadRef becomes: the same pod template, selector,
/// replicas and labels.
fn deployment_from(rollout: &Value, report: &mut Report) -> Value {
    let spec = &rollout["spec"];
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(name_of(rollout)));
    if let Some(namespace) = namespace_of(rollout) {
        metadata.insert("namespace".into(), json!(namespace));
    }
    if let Some(labels) = rollout["metadata"]["labels"].as_object() {
        metadata.insert("labels".into(), Value::Object(labels.clone()));
    }
    if let Some(annotations) = rollout["metadata"]["annotations"].as_object() {
        let mut kept = Map::new();
        for (key, value) in annotations {
            if key == "kubectl.kubernetes.io/last-applied-configuration" {
                continue;
            }
            if key.contains("argoproj.io") {
                report.field(
                    format!("metadata.annotations.{key}"),
                    "an Argo annotation, meaningless to Serin; left out (alerts go in the Canary's spec.analysis.alerts through an AlertProvider)",
                );
                continue;
            }
            kept.insert(key.clone(), value.clone());
        }
        if !kept.is_empty() {
            metadata.insert("annotations".into(), Value::Object(kept));
        }
    }
    let mut deployment_spec = Map::new();
    for field in [
        "replicas",
        "selector",
        "template",
        "minReadySeconds",
        "revisionHistoryLimit",
        "progressDeadlineSeconds",
    ] {
        if !spec[field].is_null() {
            deployment_spec.insert(field.into(), spec[field].clone());
        }
    }
    let canary = &spec["strategy"]["canary"];
    let mut rolling = Map::new();
    for field in ["maxSurge", "maxUnavailable"] {
        if !canary[field].is_null() {
            rolling.insert(field.into(), canary[field].clone());
            report.field(
                format!("spec.strategy.canary.{field}"),
                "moved to the Deployment's spec.strategy.rollingUpdate: in Serin it paces the primary's rolling update at promotion, not the canary's scaling between steps",
            );
        }
    }
    if !rolling.is_empty() {
        deployment_spec.insert(
            "strategy".into(),
            json!({"type": "RollingUpdate", "rollingUpdate": rolling}),
        );
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": deployment_spec,
    })
}

/// A workloadRef Rollout keeps its Deployment: the Canary targets it.
fn workload_target(
    rollout: &Value,
    workload: &Map<String, Value>,
    index: &Index,
    report: &mut Report,
) -> String {
    let name = workload
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let kind = workload
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("Deployment");
    if kind != "Deployment" {
        report.field(
            "spec.workloadRef.kind",
            format!("{kind} cannot be a Serin target (Deployments only); the Canary targets a Deployment named {name:?}, which you need to create"),
        );
        return name;
    }
    let replicas = rollout["spec"]["replicas"].as_i64().unwrap_or(1);
    let deployment = index
        .find("apps", "Deployment", &name, namespace_of(rollout))
        .map(|position| index.value(position));
    if let Some(deployment) = deployment {
        check_selector(&deployment["spec"]["selector"], "spec.workloadRef", report);
    } else {
        check_selector(&rollout["spec"]["selector"], "spec.selector", report);
    }
    let scaled_down = deployment.is_some_and(|d| d["spec"]["replicas"].as_i64() == Some(0));
    let scale_down = workload.get("scaleDown").and_then(Value::as_str);
    if scaled_down || matches!(scale_down, Some("onsuccess" | "progressively")) {
        report.field(
            "spec.workloadRef.scaleDown",
            format!("no equivalent: Serin releases Deployment {name}'s own pods, which Argo Rollouts scaled to zero; scale it back up before removing the Rollout (kubectl scale deployment {name} --replicas={replicas}) and set replicas: {replicas} in its manifest"),
        );
    }
    name
}

fn check_selector(selector: &Value, path: &str, report: &mut Report) {
    let labels = &selector["matchLabels"];
    if !SELECTOR_LABELS.iter().any(|key| labels[*key].is_string()) {
        report.field(
            path,
            format!("the selector's matchLabels have none of {}, by which Serin tells the target's pods from the primary's; add one (e.g. app: <name>) to the selector and the pod template", SELECTOR_LABELS.join(", ")),
        );
    }
}

/// The Canary's `service`: port from the Services the Rollout names, hosts, gateways and route
/// settings from its VirtualService, traffic policy from its DestinationRule.
fn canary_service(rollout: &Value, index: &Index, report: &mut Report) -> Value {
    let strategy = &rollout["spec"]["strategy"];
    let namespace = namespace_of(rollout);
    let service_name = canary_service_name(rollout, index);
    let mut service = Map::new();
    if service_name != name_of(rollout) {
        service.insert("name".into(), json!(service_name));
    }
    let mut route_port = None;
    let mut settings = Map::new();
    let virtual_service = find_virtual_service(rollout, index);
    let named = virtual_service_names(rollout);
    for (i, (name, _)) in named.iter().enumerate().skip(1) {
        report.field(
            format!("spec.strategy.canary.trafficRouting.istio.virtualServices[{i}]"),
            format!("Serin routes through one VirtualService per Canary; {name} is not converted"),
        );
    }
    if let Some(position) = virtual_service {
        let routes = named
            .first()
            .map(|(_, routes)| routes.clone())
            .unwrap_or_default();
        route_port = virtual_service_settings(
            index.value(position),
            &service_name,
            &routes,
            &mut settings,
            report,
        );
    } else if let Some((name, _)) = named.first() {
        report.field(
            "spec.strategy.canary.trafficRouting.istio.virtualService",
            format!("VirtualService {name} is not among the files given, so the Canary's hosts and gateways are Serin's defaults (the apex Service, mesh); add its file to carry them over"),
        );
    }
    let candidates: Vec<&str> = [
        &strategy["canary"]["stableService"],
        &strategy["canary"]["canaryService"],
        &strategy["blueGreen"]["activeService"],
        &strategy["blueGreen"]["previewService"],
    ]
    .iter()
    .filter_map(|v| v.as_str())
    .collect();
    let port = candidates.iter().find_map(|name| {
        let position = index.find("", "Service", name, namespace)?;
        let ports = index.value(position)["spec"]["ports"].as_array()?;
        ports
            .iter()
            .find(|p| route_port.is_some() && p["port"].as_i64() == route_port)
            .or_else(|| ports.first())
            .cloned()
    });
    match port {
        Some(port) => {
            service.insert("port".into(), port["port"].clone());
            if !port["targetPort"].is_null() {
                service.insert("targetPort".into(), port["targetPort"].clone());
            }
            if let Some(port_name) = port["name"].as_str().filter(|n| *n != "http") {
                service.insert("portName".into(), json!(port_name));
            }
            if !port["appProtocol"].is_null() {
                service.insert("appProtocol".into(), port["appProtocol"].clone());
            }
        }
        None => {
            let container_port = pod_template(rollout, index)["spec"]["containers"][0]["ports"][0]
                ["containerPort"]
                .as_i64();
            let (port, how) = match container_port {
                Some(port) => (port, "the first container port"),
                None => (80, "80"),
            };
            let looked_for = if candidates.is_empty() {
                "the Rollout names no Service".to_string()
            } else {
                format!(
                    "no Service {} among the files given",
                    candidates.join(" or ")
                )
            };
            report.field(
                "spec.strategy",
                format!(
                    "{looked_for}, so the Canary's spec.service.port is {how} ({port}); check it"
                ),
            );
            service.insert("port".into(), json!(port));
        }
    }
    if let Some(rule) =
        rollout["spec"]["strategy"]["canary"]["trafficRouting"]["istio"]["destinationRule"]["name"]
            .as_str()
        && let Some(position) = index.find(ISTIO_GROUP, "DestinationRule", rule, namespace)
        && let Some(policy) = index.value(position)["spec"].get("trafficPolicy")
    {
        service.insert("trafficPolicy".into(), policy.clone());
    }
    service.extend(settings);
    Value::Object(service)
}

/// The Rollout's pod template, or with workloadRef the referenced Deployment's (when given).
fn pod_template<'a>(rollout: &'a Value, index: &Index<'a>) -> &'a Value {
    let workload = &rollout["spec"]["workloadRef"];
    let referenced = workload["name"]
        .as_str()
        .and_then(|name| index.find("apps", "Deployment", name, namespace_of(rollout)));
    match referenced {
        Some(position) => &index.value(position)["spec"]["template"],
        None => &rollout["spec"]["template"],
    }
}

/// Copies a VirtualService's hosts, gateways and the managed route's settings into `settings`;
/// returns the destination port the route names, if any.
fn virtual_service_settings(
    virtual_service: &Value,
    service_name: &str,
    routes: &[String],
    settings: &mut Map<String, Value>,
    report: &mut Report,
) -> Option<i64> {
    let vs_name = name_of(virtual_service);
    let spec = &virtual_service["spec"];
    let hosts: Vec<Value> = spec["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|h| h.as_str() != Some(service_name))
        .cloned()
        .collect();
    if !hosts.is_empty() {
        settings.insert("hosts".into(), Value::Array(hosts));
    }
    if let Some(gateways) = spec.get("gateways") {
        settings.insert("gateways".into(), gateways.clone());
    }
    let path = format!(
        "spec.strategy.canary.trafficRouting.istio.virtualService (VirtualService {vs_name})"
    );
    for field in spec.as_object().into_iter().flat_map(Map::keys) {
        if !["hosts", "gateways", "http"].contains(&field.as_str()) {
            report.field(
                format!("{path}.spec.{field}"),
                "no equivalent in a Canary's service; left out of the VirtualService Serin writes",
            );
        }
    }
    let http = spec["http"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let managed = match routes.first() {
        Some(route) => http.iter().position(|r| r["name"].as_str() == Some(route)),
        None => (!http.is_empty()).then_some(0),
    };
    for (i, route) in http.iter().enumerate() {
        if Some(i) != managed {
            report.field(
                format!("{path}.spec.http[{i}]"),
                format!("route {:?} is not the one the Rollout shifts; Serin's VirtualService has only its own routes, so it is left out", route["name"].as_str().unwrap_or_default()),
            );
        }
    }
    let route = &http.get(managed?)?;
    for (field, value) in route.as_object().into_iter().flatten() {
        match field.as_str() {
            "timeout" | "retries" | "corsPolicy" | "headers" | "rewrite" | "match" => {
                settings.insert(field.clone(), value.clone());
            }
            "name" | "route" => {}
            other => report.field(
                format!("{path}.spec.http[{}].{other}", managed.unwrap_or_default()),
                "no equivalent in a Canary's service; left out of the VirtualService Serin writes",
            ),
        }
    }
    route["route"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|destination| destination["destination"]["port"]["number"].as_i64())
}

/// Fields of a strategy that map to the Canary's analysis one to one.
const SAME_NAMED: [&str; 3] = [
    "scaleDownDelaySeconds",
    "abortScaleDownDelaySeconds",
    "dynamicStableScale",
];

/// The analysis of a canary Rollout: its steps, and its analyses as metrics.
fn canary_analysis(rollout: &Value, index: &Index, report: &mut Report) -> Value {
    let canary = &rollout["spec"]["strategy"]["canary"];
    let base = "spec.strategy.canary";
    let mut analysis = Map::new();
    let references = analysis_references(rollout);
    let metrics = analysis_metrics(rollout, &references, index, report, Stage::BeforePromotion);
    analysis.insert("interval".into(), json!(analysis_interval(&metrics)));
    analysis.insert(
        "threshold".into(),
        json!(analysis_threshold(&metrics, base, report)),
    );
    let by_pods = canary["trafficRouting"].is_null();

    let mut steps = Vec::new();
    for (i, step) in canary["steps"].as_array().into_iter().flatten().enumerate() {
        let path = format!("{base}.steps[{i}]");
        let Some((kind, body)) = step.as_object().and_then(|s| s.iter().next()) else {
            continue;
        };
        match kind.as_str() {
            "setCanaryScale" if by_pods => report.field(
                format!("{path}.setCanaryScale"),
                "ignored by Argo Rollouts without trafficRouting (every canary pod takes traffic), and refused by Serin's canary by replica ratio; left out",
            ),
            "setWeight" | "pause" | "setCanaryScale" => steps.push(json!({ kind: body })),
            "analysis" => {
                let step_metrics: Vec<&ConvertedMetric> = metrics
                    .iter()
                    .filter(|m| m.steps.contains(&i))
                    .map(|m| &m.metric)
                    .collect();
                match analysis_duration(&step_metrics) {
                    Some(seconds) => {
                        steps.push(json!({"pause": {"duration": duration_text(seconds)}}));
                        report.field(
                            format!("{path}.analysis"),
                            format!("Serin has no analysis step: its metrics are checked at every interval of the release, and the step became a {} pause (their count × interval) during which they gate the release", duration_text(seconds)),
                        );
                    }
                    None => report.field(
                        format!("{path}.analysis"),
                        "Serin has no analysis step: its metrics are checked at every interval of the release, and the step is left out (its metrics have no count and interval to time a pause by)",
                    ),
                }
            }
            "experiment" => report.field(
                format!("{path}.experiment"),
                "no equivalent: Serin runs no extra ReplicaSets; left out",
            ),
            "setHeaderRoute" => report.field(
                format!("{path}.setHeaderRoute"),
                "no equivalent: a Serin canary has no header route beside its weights (A/B testing with analysis.match and iterations is a separate strategy); left out",
            ),
            "setMirrorRoute" => report.field(
                format!("{path}.setMirrorRoute"),
                "no equivalent with steps: Serin mirrors (analysis.mirror) only in stepWeight canaries and blue/green; left out",
            ),
            other => report.field(
                format!("{path}.{other}"),
                "no equivalent step in Serin; left out",
            ),
        }
    }
    if steps.is_empty() {
        report.field(
            format!("{base}.steps"),
            "none to convert: Argo Rollouts then moves all traffic at once; the Canary does it in one step (setWeight: 100) and promotes on the next tick",
        );
        steps.push(json!({"setWeight": 100}));
    }
    analysis.insert("steps".into(), Value::Array(steps));

    for (field, value) in canary.as_object().into_iter().flatten() {
        let path = format!("{base}.{field}");
        match field.as_str() {
            "steps" | "analysis" | "canaryService" | "stableService" => {}
            // Without workloadRef they went to the Deployment's rolling update (deployment_from).
            "maxSurge" | "maxUnavailable" if rollout["spec"]["workloadRef"].is_null() => {}
            // They pace the canary by replica ratio as they paced Argo's.
            "maxSurge" | "maxUnavailable" if by_pods => {
                analysis.insert(field.clone(), value.clone());
            }
            "maxSurge" | "maxUnavailable" => report.field(
                path,
                "left out: the Deployment the Rollout references keeps its own spec.strategy.rollingUpdate, which paces the primary's rolling update at promotion in Serin",
            ),
            "trafficRouting" => traffic_routing_warnings(value, &path, report),
            field if SAME_NAMED.contains(&field) && by_pods => report.field(
                path,
                "needs trafficRouting in Argo Rollouts (ignored or refused without it), and Serin's canary by replica ratio refuses it: every canary pod takes traffic; left out",
            ),
            field if SAME_NAMED.contains(&field) => {
                analysis.insert(field.into(), value.clone());
            }
            "canaryMetadata" | "stableMetadata" => report.field(
                path,
                "no equivalent: Serin labels the generated Services (spec.service.canary / spec.service.primary metadata), not the pods; left out",
            ),
            "scaleDownDelayRevisionLimit" => report.field(
                path,
                "no equivalent: Serin keeps only the primary and the canary Deployment; left out",
            ),
            "antiAffinity" => {
                analysis.insert("antiAffinity".into(), value.clone());
            }
            "pingPong" => report.field(
                path,
                "no equivalent: Serin always promotes by copying the canary's template to the primary; left out",
            ),
            _ => report.field(path, "no equivalent in Serin; left out"),
        }
    }
    if canary["trafficRouting"].is_null() {
        report.field(
            format!("{base}.trafficRouting"),
            "absent: Argo Rollouts split traffic by the ratio of canary to stable pods, and so does the Canary (provider: kubernetes: its apex Service selects both sides' pods, within the Deployment's maxSurge/maxUnavailable)",
        );
    }
    if let Some(reference) = references
        .iter()
        .find(|r| r.role == AnalysisRole::Background)
        && !canary["analysis"]["startingStep"].is_null()
    {
        report.field(
            format!("{}.startingStep", reference.path),
            "no equivalent: Serin checks the metrics from the first step; left out",
        );
    }
    if !metrics.is_empty() {
        analysis.insert("metrics".into(), canary_metrics(&metrics));
    }
    Value::Object(analysis)
}

fn traffic_routing_warnings(routing: &Value, path: &str, report: &mut Report) {
    for (field, value) in routing.as_object().into_iter().flatten() {
        match field.as_str() {
            "istio" => {
                for (key, _) in value.as_object().into_iter().flatten() {
                    if !["virtualService", "virtualServices", "destinationRule"].contains(&key.as_str()) {
                        report.field(format!("{path}.istio.{key}"), "no equivalent in Serin; left out");
                    }
                }
                let references = std::iter::once((
                    format!("{path}.istio.virtualService"),
                    &value["virtualService"],
                ))
                .chain(value["virtualServices"].as_array().into_iter().flatten().enumerate().map(
                    |(i, reference)| (format!("{path}.istio.virtualServices[{i}]"), reference),
                ));
                for (reference_path, reference) in references {
                    for key in reference.as_object().into_iter().flat_map(Map::keys) {
                        if !["name", "routes"].contains(&key.as_str()) {
                            report.field(
                                format!("{reference_path}.{key}"),
                                "no equivalent: Serin's VirtualService routes HTTP only; left out",
                            );
                        }
                    }
                }
                if !value["destinationRule"].is_null() {
                    report.field(
                        format!("{path}.istio.destinationRule"),
                        "subset-level splitting has no equivalent: Serin splits by host, between its Services <service>-primary and <service>-canary, each with its own DestinationRule (the trafficPolicy is carried over)",
                    );
                }
            }
            "managedRoutes" => report.field(
                format!("{path}.managedRoutes"),
                "no equivalent: the header and mirror routes it declares are not converted; left out",
            ),
            "maxTrafficWeight" => report.field(
                format!("{path}.maxTrafficWeight"),
                "no equivalent: Serin's weights are percentages; left out",
            ),
            other => report.field(
                format!("{path}.{other}"),
                "not converted: Serin routes with Istio only, so the Canary shifts traffic with an Istio VirtualService (the pods must be in the mesh)",
            ),
        }
    }
}

/// The analysis of a blue/green Rollout: Serin's blue/green (iterations without match).
fn blue_green_analysis(rollout: &Value, index: &Index, report: &mut Report) -> Value {
    let blue_green = &rollout["spec"]["strategy"]["blueGreen"];
    let base = "spec.strategy.blueGreen";
    let references = analysis_references(rollout);
    let metrics = analysis_metrics(rollout, &references, index, report, Stage::BeforePromotion);
    let mut analysis = Map::new();
    analysis.insert("interval".into(), json!(analysis_interval(&metrics)));
    analysis.insert(
        "threshold".into(),
        json!(analysis_threshold(&metrics, base, report)),
    );
    // The pre-promotion analysis runs its metrics `count` times; without one, a single tick checks
    // the preview before the switch.
    let iterations = metrics
        .iter()
        .filter_map(|m| m.metric.count)
        .max()
        .unwrap_or(1);
    analysis.insert("iterations".into(), json!(iterations));
    report.field(
        base,
        "Argo Rollouts switched the activeService's selector, and so does the Canary (provider: kubernetes switches its apex Service's selector)",
    );
    let auto_promotion = blue_green["autoPromotionEnabled"].as_bool();
    for (field, value) in blue_green.as_object().into_iter().flatten() {
        let path = format!("{base}.{field}");
        match field.as_str() {
            "activeService" | "previewService" | "prePromotionAnalysis" | "postPromotionAnalysis" => {}
            "autoPromotionSeconds" if auto_promotion == Some(false) => report.field(
                path,
                "ignored by Argo Rollouts when autoPromotionEnabled is false; left out",
            ),
            "autoPromotionEnabled" | "autoPromotionSeconds" | "previewReplicaCount" => {
                analysis.insert(field.clone(), value.clone());
            }
            field if SAME_NAMED.contains(&field) && field != "dynamicStableScale" => {
                analysis.insert(field.into(), value.clone());
            }
            "activeMetadata" | "previewMetadata" => report.field(
                path,
                "no equivalent: Serin labels the generated Services (spec.service.primary / spec.service.canary metadata), not the pods; left out",
            ),
            "antiAffinity" => {
                analysis.insert("antiAffinity".into(), value.clone());
            }
            "scaleDownDelayRevisionLimit" => report.field(
                path,
                "no equivalent: Serin keeps only the primary and the canary Deployment; left out",
            ),
            "maxUnavailable" => report.field(
                path,
                "no equivalent: it sized Argo's pod restarts; left out",
            ),
            _ => report.field(path, "no equivalent in Serin; left out"),
        }
    }
    if let Some(preview) = blue_green["previewService"].as_str() {
        let service = canary_service_name(rollout, index);
        report.field(
            format!("{base}.previewService"),
            format!("Serin serves the preview at its Service {service}-canary instead of {preview}; point preview clients and checks there"),
        );
    }
    let mut post = analysis_metrics(rollout, &references, index, report, Stage::AfterSwitch);
    if !post.is_empty() {
        // A check is found by its name across the analysis and its promotion analyses.
        for metric in &mut post {
            if metrics.iter().any(|m| m.canary_name == metric.canary_name) {
                metric.canary_name = format!("post-{}", metric.canary_name);
            }
        }
        let iterations = post
            .iter()
            .filter_map(|m| m.metric.count)
            .max()
            .unwrap_or(1);
        analysis.insert(
            "postPromotionAnalysis".into(),
            json!({"iterations": iterations, "metrics": canary_metrics(&post)}),
        );
    }
    if !metrics.is_empty() {
        analysis.insert("metrics".into(), canary_metrics(&metrics));
    }
    Value::Object(analysis)
}

/// Which analyses of a Rollout a list of metrics is made from.
#[derive(Clone, Copy, PartialEq)]
enum Stage {
    /// Every analysis that runs before promotion (background, steps, pre-promotion).
    BeforePromotion,
    /// Blue/green's post-promotion analysis.
    AfterSwitch,
}

/// A metric a Rollout uses, with the steps that ran it and the Canary metric name it gets.
struct RolloutMetric {
    metric: ConvertedMetric,
    canary_name: String,
    variables: BTreeMap<String, String>,
    /// Indexes of the analysis steps that ran it.
    steps: Vec<usize>,
}

/// The Prometheus metrics of the analyses the Rollout runs at `stage`, once each.
fn analysis_metrics(
    rollout: &Value,
    references: &[AnalysisReference],
    index: &Index,
    report: &mut Report,
    stage: Stage,
) -> Vec<RolloutMetric> {
    let mut metrics: Vec<RolloutMetric> = Vec::new();
    let namespace = namespace_of(rollout);
    for reference in references {
        let after_switch = reference.role == AnalysisRole::PostPromotion;
        if after_switch != (stage == Stage::AfterSwitch) {
            continue;
        }
        for field in &reference.unconverted {
            report.field(
                format!("{}.{field}", reference.path),
                "no equivalent: Serin creates no AnalysisRuns and every metric counts; left out",
            );
        }
        let step = reference
            .path
            .strip_prefix("spec.strategy.canary.steps[")
            .and_then(|rest| rest.split(']').next())
            .and_then(|i| i.parse::<usize>().ok());
        for (t, template) in reference.templates.iter().enumerate() {
            let Some(position) = index.find_template(template, namespace) else {
                report.field(
                    format!("{}.templates[{t}]", reference.path),
                    format!("{} {} is not among the files given, so its metrics are not converted; add its file", if template.cluster_scope { "ClusterAnalysisTemplate" } else { "AnalysisTemplate" }, template.name),
                );
                continue;
            };
            for metric in &index.templates[&position].metrics {
                if let Some(existing) = metrics.iter_mut().find(|m| {
                    m.metric.template_name == metric.template_name
                        && m.metric.template_namespace == metric.template_namespace
                }) {
                    existing.steps.extend(step);
                    continue;
                }
                let variables = template_variables(rollout, reference, metric, report);
                let taken = metrics.iter().any(|m| m.canary_name == metric.name);
                let canary_name = if taken {
                    format!("{}-{}", template.name, metric.name)
                } else {
                    metric.name.clone()
                };
                metrics.push(RolloutMetric {
                    metric: metric.clone(),
                    canary_name,
                    variables,
                    steps: step.into_iter().collect(),
                });
            }
        }
    }
    metrics
}

/// The templateVariables of one metric: the Rollout's args, else the template's defaults.
fn template_variables(
    rollout: &Value,
    reference: &AnalysisReference,
    metric: &ConvertedMetric,
    report: &mut Report,
) -> BTreeMap<String, String> {
    let mut variables = BTreeMap::new();
    for (arg, variable) in &metric.variables {
        let given = reference
            .args
            .iter()
            .enumerate()
            .find(|(_, a)| a["name"].as_str() == Some(arg.as_str()));
        let value = match given {
            Some((_, a)) if !a["value"].is_null() => Some(match &a["value"] {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            }),
            Some((i, a)) => {
                let path = format!("{}.args[{i}].valueFrom", reference.path);
                let from = &a["valueFrom"];
                if let Some(field) = from["fieldRef"]["fieldPath"].as_str() {
                    let resolved = field_of(rollout, field);
                    if resolved.is_none() {
                        report.field(
                            path,
                            format!("{field} cannot be read from the Rollout here; templateVariables.{variable} is left out, and Serin will say so when it renders the query. Write the value"),
                        );
                    }
                    resolved
                } else {
                    report.field(
                        path,
                        format!("no equivalent (Serin's pods carry no rollouts-pod-template-hash; select the canary's pods with {{{{ target }}}} and the primary's with {{{{ target }}}}-primary in the query); templateVariables.{variable} is left out, and Serin will say so when it renders the query"),
                    );
                    None
                }
            }
            None => metric.defaults.get(arg).cloned(),
        };
        match value {
            Some(value) => {
                variables.insert(variable.clone(), value);
            }
            None if given.is_none() => report.field(
                format!("{}.args", reference.path),
                format!("no value for arg {arg} of metric {}; write it in the Canary metric's templateVariables.{variable}", metric.name),
            ),
            None => {}
        }
    }
    variables
}

/// `metadata.name`, `metadata.namespace`, `metadata.labels['x']`, `metadata.annotations['x']` of
/// the Rollout.
fn field_of(rollout: &Value, field: &str) -> Option<String> {
    let metadata = &rollout["metadata"];
    match field {
        "metadata.name" | "metadata.namespace" => {
            metadata[&field[9..]].as_str().map(str::to_string)
        }
        _ => {
            let (map, key) = field.strip_prefix("metadata.")?.split_once('[')?;
            let key = key
                .strip_suffix(']')?
                .trim_matches(|c| c == '\'' || c == '"');
            metadata[map][key].as_str().map(str::to_string)
        }
    }
}

fn canary_metrics(metrics: &[RolloutMetric]) -> Value {
    let list = metrics
        .iter()
        .map(|m| {
            let mut metric = Map::new();
            metric.insert("name".into(), json!(m.canary_name));
            let mut template = Map::new();
            template.insert("name".into(), json!(m.metric.template_name));
            if let Some(namespace) = &m.metric.template_namespace {
                template.insert("namespace".into(), json!(namespace));
            }
            metric.insert("templateRef".into(), Value::Object(template));
            if !m.variables.is_empty() {
                metric.insert("templateVariables".into(), json!(m.variables));
            }
            if let Some(range) = &m.metric.range {
                metric.insert("thresholdRange".into(), range.to_value());
            }
            metric.insert(
                "interval".into(),
                json!(m.metric.interval.as_deref().unwrap_or(DEFAULT_INTERVAL)),
            );
            if m.metric.ignores_no_data {
                metric.insert("noData".into(), json!("ignore"));
            }
            Value::Object(metric)
        })
        .collect();
    Value::Array(list)
}

/// The shortest interval among the metrics: a Serin tick checks every metric.
fn analysis_interval(metrics: &[RolloutMetric]) -> String {
    metrics
        .iter()
        .filter_map(|m| m.metric.interval.as_deref())
        .filter_map(|text| {
            serin_api::duration::parse_go_duration(text)
                .ok()
                .map(|d| (d, text))
        })
        .min_by_key(|(duration, _)| *duration)
        .map_or(DEFAULT_INTERVAL.to_string(), |(_, text)| text.to_string())
}

/// Failed checks before a rollback: the strictest failureLimit + 1, since Argo failed a metric
/// once its failures exceeded the limit.
fn analysis_threshold(metrics: &[RolloutMetric], base: &str, report: &mut Report) -> i64 {
    let limits: BTreeSet<i64> = metrics
        .iter()
        .filter_map(|m| m.metric.failure_limit)
        .collect();
    let strictest = limits.first().copied().unwrap_or(0);
    if limits.len() > 1 {
        report.field(
            base,
            format!("the metrics' failureLimits differ ({}); Serin counts the failed checks of all metrics together, so spec.analysis.threshold is the strictest + 1: {}", limits.iter().map(i64::to_string).collect::<Vec<_>>().join(", "), strictest + 1),
        );
    }
    strictest + 1
}

/// How long an analysis step ran: the longest count × interval of its metrics.
fn analysis_duration(metrics: &[&ConvertedMetric]) -> Option<u64> {
    if metrics.is_empty() {
        return None;
    }
    metrics
        .iter()
        .map(|m| {
            let interval = serin_api::duration::parse_go_duration(m.interval.as_deref()?).ok()?;
            Some(m.count? * interval.as_secs())
        })
        .collect::<Option<Vec<u64>>>()?
        .into_iter()
        .max()
}

fn duration_text(seconds: u64) -> String {
    if seconds.is_multiple_of(3600) && seconds > 0 {
        format!("{}h", seconds / 3600)
    } else if seconds.is_multiple_of(60) && seconds > 0 {
        format!("{}m", seconds / 60)
    } else {
        format!("{seconds}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn migrate_files(files: &[(&str, &str)]) -> Migration {
        let sources: Vec<Source> = files
            .iter()
            .map(|(name, text)| Source {
                name: name.to_string(),
                text: text.to_string(),
            })
            .collect();
        migrate(&sources).unwrap()
    }

    fn migrate_one(text: &str) -> Migration {
        migrate_files(&[("in.yaml", text)])
    }

    /// The output documents, parsed.
    fn documents(migration: &Migration) -> Vec<Value> {
        split_documents(&migration.yaml)
            .iter()
            .map(|text| serde_saphyr::from_str(text).unwrap())
            .collect()
    }

    fn find<'a>(documents: &'a [Value], kind: &str, name: &str) -> &'a Value {
        documents
            .iter()
            .find(|d| d["kind"] == kind && name_of(d) == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in {documents:#?}"))
    }

    /// The one warning whose path is `path`; fails when there is none or several.
    fn warning<'a>(migration: &'a Migration, path: &str) -> &'a Warning {
        let found: Vec<&Warning> = migration
            .warnings
            .iter()
            .filter(|w| w.path.as_deref() == Some(path))
            .collect();
        assert_eq!(
            found.len(),
            1,
            "warnings at {path}: {:#?}",
            migration.warnings
        );
        found[0]
    }

    fn object_warnings(migration: &Migration, object: &str) -> Vec<String> {
        migration
            .warnings
            .iter()
            .filter(|w| w.object == object && w.path.is_none())
            .map(|w| w.message.clone())
            .collect()
    }

    const FLAGGER_CANARY: &str = "\
# podinfo's release
apiVersion: flagger.app/v1beta1   # Flagger's current API
kind: Canary
metadata:
  name: podinfo
  namespace: test
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: podinfo}
  service:
    port: 9898   # ClusterIP port
  analysis:
    interval: 1m
    threshold: 5
    stepWeight: 10
    maxWeight: 50
    metrics:
      - name: request-success-rate
        thresholdRange: {min: 99}
";

    #[test]
    fn flagger_v1beta1_keeps_everything_but_the_api_group() {
        let migration = migrate_one(FLAGGER_CANARY);
        assert_eq!(
            migration.yaml,
            FLAGGER_CANARY.replace("flagger.app/v1beta1", "serin.dev/v1beta1")
        );
        assert_eq!(migration.warnings, vec![]);
        assert_eq!(migration.converted, 1);
    }

    #[test]
    fn flagger_v1beta1_fields_serin_refuses_are_warned_about_and_kept() {
        let text = FLAGGER_CANARY.replace("spec:\n", "spec:\n  provider: linkerd\n");
        let migration = migrate_one(&text);
        assert!(migration.yaml.contains("provider: linkerd"));
        let refused = warning(&migration, "spec.provider");
        assert_eq!(refused.object, "Canary podinfo");
        assert!(
            refused
                .message
                .starts_with("Serin refuses this: \"linkerd\" is not supported yet"),
            "{refused}"
        );
    }

    #[test]
    fn flagger_metric_templates_and_alert_providers_are_rewritten_and_validated() {
        let migration = migrate_one(
            "\
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {name: errors}
spec:
  provider: {type: datadog, address: https://api.datadoghq.com}
  query: avg:errors{*}
---
apiVersion: \"flagger.app/v1beta1\"
kind: AlertProvider
metadata: {name: on-call}
spec: {type: slack, secretRef: {name: slack-url}}
",
        );
        assert!(
            migration
                .yaml
                .contains("apiVersion: serin.dev/v1beta1\nkind: MetricTemplate")
        );
        assert!(
            migration
                .yaml
                .contains("apiVersion: \"serin.dev/v1beta1\"\nkind: AlertProvider")
        );
        let provider = warning(&migration, "spec.provider.type");
        assert_eq!(provider.object, "MetricTemplate errors");
        assert!(provider.message.contains("datadog"), "{provider}");
        assert_eq!(migration.warnings.len(), 1, "{:#?}", migration.warnings);
    }

    #[test]
    fn flagger_objects_without_an_apiversion_line_are_converted_structurally() {
        let migration = migrate_one(
            r#"{"apiVersion": "flagger.app/v1beta1", "kind": "AlertProvider", "metadata": {"name": "chat"}, "spec": {"type": "msteams", "address": "https://chat.example.com/hook"}}"#,
        );
        let output = documents(&migration);
        assert_eq!(output[0]["apiVersion"], "serin.dev/v1beta1");
        assert_eq!(output[0]["spec"]["type"], "msteams");
    }

    #[test]
    fn unknown_flagger_kinds_pass_through_with_a_warning() {
        let text = "apiVersion: flagger.app/v1beta1\nkind: Gate\nmetadata: {name: x}\n";
        let migration = migrate_one(text);
        assert_eq!(migration.yaml, text);
        assert_eq!(
            object_warnings(&migration, "Gate x"),
            ["Flagger has no kind \"Gate\" that Serin knows; left unchanged"]
        );
    }

    const LEGACY_CANARY: &str = "\
apiVersion: flagger.app/v1alpha3
kind: Canary
metadata:
  name: podinfo
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: podinfo}
  service:
    port: 9898
    appendHeaders:
      x-envoy-upstream-rq-timeout-ms: 15000
      x-envoy-max-retries: \"10\"
  canaryAnalysis:
    interval: 1m
    threshold: 10
    maxWeight: 50
    stepWeight: 5
    metrics:
    - name: istio_requests_total
      threshold: 99
      interval: 1m
    - name: istio_request_duration_seconds_bucket
      threshold: 500
      interval: 30s
    - name: not-found-percentage
      threshold: 5
      query: sum(rate(istio_requests_total{response_code=\"404\"}[1m]))
  progressDeadlineSeconds: 60
";

    #[test]
    fn flagger_v1alpha3_canary_analysis_becomes_analysis_in_place() {
        let migration = migrate_one(LEGACY_CANARY);
        let canary = &documents(&migration)[0];
        assert_eq!(canary["apiVersion"], "serin.dev/v1beta1");
        let keys: Vec<&String> = canary["spec"].as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "targetRef",
                "service",
                "analysis",
                "progressDeadlineSeconds"
            ]
        );
        assert_eq!(canary["spec"]["analysis"]["stepWeight"], 5);
        assert_eq!(migration.warnings, vec![], "no comments, nothing lost");
    }

    #[test]
    fn flagger_v1alpha3_append_headers_become_request_header_additions() {
        let migration = migrate_one(LEGACY_CANARY);
        let service = &documents(&migration)[0]["spec"]["service"];
        assert!(service.get("appendHeaders").is_none());
        assert_eq!(
            service["headers"],
            json!({"request": {"add": {
                "x-envoy-upstream-rq-timeout-ms": "15000",
                "x-envoy-max-retries": "10",
            }}})
        );
    }

    #[test]
    fn flagger_v1alpha3_append_headers_do_not_override_header_operations() {
        let text = LEGACY_CANARY.replace(
            "    port: 9898\n",
            "    port: 9898\n    headers:\n      request:\n        add: {x-envoy-max-retries: \"3\"}\n",
        );
        let migration = migrate_one(&text);
        let add = &documents(&migration)[0]["spec"]["service"]["headers"]["request"]["add"];
        assert_eq!(add["x-envoy-max-retries"], "3");
        assert_eq!(add["x-envoy-upstream-rq-timeout-ms"], "15000");
        let conflict = warning(&migration, "spec.service.appendHeaders.x-envoy-max-retries");
        assert!(
            conflict
                .message
                .contains("headers.request.add, whose value is kept")
        );
    }

    #[test]
    fn flagger_v1alpha3_metrics_get_todays_names_and_threshold_ranges() {
        let migration = migrate_one(LEGACY_CANARY);
        let metrics = &documents(&migration)[0]["spec"]["analysis"]["metrics"];
        assert_eq!(
            metrics[0],
            json!({"name": "request-success-rate", "thresholdRange": {"min": 99}, "interval": "1m"})
        );
        // The P99 threshold was milliseconds already, though the histogram was in seconds.
        assert_eq!(
            metrics[1],
            json!({"name": "request-duration", "thresholdRange": {"max": 500}, "interval": "30s"})
        );
        // An inline query failed above its threshold.
        assert_eq!(metrics[2]["thresholdRange"], json!({"max": 5}));
        assert!(metrics[2].get("threshold").is_none());
    }

    #[test]
    fn flagger_v1alpha3_comments_are_reported_lost_once() {
        let text = LEGACY_CANARY
            .replace("  service:\n", "  # the ClusterIP services\n  service:\n")
            .replace(
                "interval: 1m\n    threshold",
                "interval: 1m # a tick\n    threshold",
            );
        let migration = migrate_one(&text);
        assert_eq!(
            object_warnings(&migration, "Canary podinfo"),
            ["its comments were not kept: it was converted field by field, not rewritten in place"]
        );
    }

    #[test]
    fn flagger_v1alpha3_append_headers_in_a_match_are_dropped_with_a_warning() {
        let text = LEGACY_CANARY.replace(
            "    stepWeight: 5\n",
            "    stepWeight: 5\n    match:\n    - headers: {x-canary: {exact: insider}}\n      appendHeaders: {x-debug: \"1\"}\n",
        );
        let migration = migrate_one(&text);
        let canary = &documents(&migration)[0];
        assert_eq!(
            canary["spec"]["analysis"]["match"],
            json!([{"headers": {"x-canary": {"exact": "insider"}}}])
        );
        let dropped = warning(&migration, "spec.analysis.match[0].appendHeaders");
        assert!(dropped.message.contains("not a field of an HTTP match"));
    }

    #[test]
    fn flagger_v1alpha3_with_both_spellings_keeps_analysis() {
        let text = LEGACY_CANARY.replace(
            "  progressDeadlineSeconds: 60\n",
            "  analysis: {interval: 30s, iterations: 5}\n",
        );
        let migration = migrate_one(&text);
        let analysis = &documents(&migration)[0]["spec"]["analysis"];
        assert_eq!(analysis["iterations"], 5);
        assert!(
            warning(&migration, "spec.canaryAnalysis")
                .message
                .starts_with("left out")
        );
    }

    #[test]
    fn flagger_v1alpha3_beta_autoscaler_references_become_autoscaling_v2() {
        let text = LEGACY_CANARY.replace(
            "  service:\n",
            "  autoscalerRef: {apiVersion: autoscaling/v2beta1, kind: HorizontalPodAutoscaler, name: podinfo}\n  service:\n",
        );
        let migration = migrate_one(&text);
        let canary = &documents(&migration)[0];
        assert_eq!(
            canary["spec"]["autoscalerRef"]["apiVersion"],
            "autoscaling/v2"
        );
        assert!(
            warning(&migration, "spec.autoscalerRef.apiVersion")
                .message
                .contains("convert the HorizontalPodAutoscaler itself")
        );
    }

    #[test]
    fn flagger_v1alpha3_problems_serin_refuses_are_warnings() {
        let text = LEGACY_CANARY.replace("  service:\n", "  provider: appmesh\n  service:\n");
        let migration = migrate_one(&text);
        assert!(
            warning(&migration, "spec.provider")
                .message
                .starts_with("Serin refuses this")
        );
    }

    #[test]
    fn other_objects_pass_through_as_written() {
        let text = "\
# the app
apiVersion: v1
kind: ConfigMap   # settings
metadata: {name: settings}
data: {color: blue}
";
        let migration = migrate_one(&format!("{text}---\n{FLAGGER_CANARY}"));
        assert!(migration.yaml.starts_with(&format!("{text}---\n")));
        assert_eq!(migration.converted, 1);
    }

    #[test]
    fn documents_split_at_separator_lines_with_header_comments_kept() {
        let documents = split_documents(
            "# header\n---\na: 1\n--- # second\nb: 2\n---\n# only a comment\n...\nc: |\n  ---x\n",
        );
        assert_eq!(
            documents,
            [
                "# header\na: 1\n",
                "b: 2\n",
                "# only a comment\nc: |\n  ---x\n"
            ]
        );
    }

    #[test]
    fn comments_are_told_from_hashes_in_strings_and_block_scalars() {
        assert!(has_comments("a: 1 # why\n"));
        assert!(has_comments("  # why\na: 1\n"));
        assert!(!has_comments("a: \"x # y\"\nb: 'z #'\nc: d#e\n"));
        assert!(has_comments("a: it's # yours\n"));
        assert!(!has_comments(
            "cmd: |\n  echo 1 # shell comment\n  # another\nnext: 2\n"
        ));
        assert!(has_comments("cmd: |\n  echo 1\n# after the block\n"));
    }

    #[test]
    fn a_file_that_is_not_yaml_is_an_error_naming_it() {
        let sources = [Source {
            name: "broken.yaml".into(),
            text: "a: 1\n---\nkind: [unclosed\n".into(),
        }];
        let error = migrate(&sources).unwrap_err();
        assert_eq!(error.to_string(), "broken.yaml: document 2 is not YAML");
    }

    #[test]
    fn warnings_name_the_file_object_and_field() {
        let warning = Warning {
            file: "rollout.yaml".into(),
            object: "Rollout podinfo".into(),
            path: Some("spec.strategy.canary.steps[2].experiment".into()),
            message: "no equivalent".into(),
        };
        assert_eq!(
            warning.to_string(),
            "rollout.yaml: Rollout podinfo: spec.strategy.canary.steps[2].experiment: no equivalent"
        );
    }

    // Argo Rollouts.

    #[test]
    fn success_conditions_become_threshold_ranges() {
        let read = |text| {
            read_condition(text, true)
                .map(|r| (r.range.to_value(), r.ignores_no_data, r.inexact.len()))
        };
        assert_eq!(
            read("result[0] >= 0.95"),
            Some((json!({"min": 0.95}), false, 0))
        );
        assert_eq!(read("result <= 500"), Some((json!({"max": 500}), false, 0)));
        assert_eq!(
            read("asFloat(result[0]) > 0.9"),
            Some((json!({"min": 0.9}), false, 1))
        );
        assert_eq!(
            read("0.9 <= result[0]"),
            Some((json!({"min": 0.9}), false, 0))
        );
        assert_eq!(
            read("result[0] >= 0.9 && result[0] <= 1.1"),
            Some((json!({"min": 0.9, "max": 1.1}), false, 0))
        );
        assert_eq!(
            read("isNaN(result[0]) || result[0] < 500"),
            Some((json!({"max": 500}), true, 1))
        );
        assert_eq!(
            read("len(result) == 0 || (result[0] >= 99)"),
            Some((json!({"min": 99}), true, 0))
        );
        assert_eq!(read("result.ok == true"), None);
        assert_eq!(read("result[0] >= 1 || result[1] >= 1"), None);
    }

    #[test]
    fn failure_conditions_become_the_complementary_range() {
        let read = |text| {
            read_condition(text, false)
                .map(|r| (r.range.to_value(), r.ignores_no_data, r.inexact.len()))
        };
        assert_eq!(
            read("result[0] < 0.95"),
            Some((json!({"min": 0.95}), false, 0))
        );
        assert_eq!(
            read("result[0] > 500"),
            Some((json!({"max": 500}), false, 0))
        );
        assert_eq!(
            read("result[0] >= 500"),
            Some((json!({"max": 500}), false, 1))
        );
        // A guard in a failureCondition fails on no data, as Serin does by default.
        assert_eq!(
            read("isNaN(result[0]) || result[0] < 0.9"),
            Some((json!({"min": 0.9}), false, 0))
        );
        assert_eq!(read("result[0] == 0"), None);
    }

    #[test]
    fn query_args_become_template_variables() {
        let (query, used, unknown) = convert_placeholders(
            "rate(x{svc=~\"{{args.service-name}}\",q=\"{{ args.quantile }}\"}[1m]) * {{args.service-name}} {{templates.a.podTemplateHash}}",
        );
        assert_eq!(
            query,
            "rate(x{svc=~\"{{ variables.service_name }}\",q=\"{{ variables.quantile }}\"}[1m]) * {{ variables.service_name }} {{templates.a.podTemplateHash}}"
        );
        assert_eq!(used, ["service-name", "quantile"]);
        assert_eq!(unknown, ["templates.a.podTemplateHash"]);
        assert_eq!(variable_name("9-lives.x"), "_9_lives_x");
    }

    #[test]
    fn metric_templates_are_named_after_the_template_and_metric() {
        assert_eq!(
            metric_template_name("success-rate", "success-rate", 1),
            "success-rate"
        );
        assert_eq!(
            metric_template_name("http", "Error Rate", 2),
            "http-error-rate"
        );
    }

    const TEMPLATES: &str = "\
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata: {name: success-rate, namespace: shop}
spec:
  args:
  - name: service-name
  - name: window
    value: 2m
  metrics:
  - name: success-rate
    interval: 1m
    count: 5
    failureLimit: 1
    successCondition: result[0] >= 0.95
    provider:
      prometheus:
        address: http://prometheus.monitoring:9090
        insecure: true
        timeout: 20
        headers: [{key: X-Scope-OrgID, value: shop}]
        query: sum(rate(ok{svc=\"{{args.service-name}}\"}[{{args.window}}])) / sum(rate(all{svc=\"{{args.service-name}}\"}[{{args.window}}]))
---
apiVersion: argoproj.io/v1alpha1
kind: ClusterAnalysisTemplate
metadata: {name: checks}
spec:
  metrics:
  - name: smoke
    provider:
      job:
        spec: {template: {spec: {containers: [{name: t, image: ghcr.io/stefanprodan/podinfo:6.0.0}]}}}
  - name: errors
    interval: 30s
    failureLimit: 3
    failureCondition: result[0] > 5
    provider:
      prometheus:
        address: http://prometheus.monitoring:9090
        query: sum(rate(errors[1m]))
";

    const SERVICES: &str = "\
apiVersion: v1
kind: Service
metadata: {name: shop-stable, namespace: shop}
spec:
  selector: {app: shop}
  ports: [{name: metrics, port: 9797}, {name: web, port: 8080, targetPort: 9898}]
---
apiVersion: v1
kind: Service
metadata: {name: shop-canary, namespace: shop}
spec:
  selector: {app: shop}
  ports: [{name: web, port: 8080, targetPort: 9898}]
---
apiVersion: networking.istio.io/v1beta1
kind: VirtualService
metadata: {name: shop-vsvc, namespace: shop}
spec:
  hosts: [shop, shop.example.com]
  gateways: [mesh, shop-gateway]
  exportTo: [\".\"]
  http:
  - name: debug
    match: [{headers: {x-debug: {exact: \"1\"}}}]
    route: [{destination: {host: shop-canary}}]
  - name: primary
    timeout: 5s
    fault: {delay: {percentage: {value: 1}, fixedDelay: 1s}}
    route:
    - destination: {host: shop-stable, port: {number: 8080}}
      weight: 100
    - destination: {host: shop-canary, port: {number: 8080}}
      weight: 0
---
apiVersion: networking.istio.io/v1beta1
kind: DestinationRule
metadata: {name: shop-destrule, namespace: shop}
spec:
  host: shop
  trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}
  subsets: [{name: canary}, {name: stable}]
";

    const CANARY_ROLLOUT: &str = "\
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata:
  name: shop
  namespace: shop
  labels: {app: shop, team: web}
  annotations:
    notifications.argoproj.io/subscribe.on-rollout-aborted.slack: web-team
    owner: web-team
spec:
  replicas: 5
  revisionHistoryLimit: 4
  progressDeadlineSeconds: 300
  progressDeadlineAbort: false
  selector: {matchLabels: {app: shop}}
  template:
    metadata: {labels: {app: shop}}
    spec:
      containers: [{name: shop, image: ghcr.io/stefanprodan/podinfo:6.0.0, ports: [{containerPort: 9898}]}]
  strategy:
    canary:
      canaryService: shop-canary
      stableService: shop-stable
      maxSurge: 1
      dynamicStableScale: true
      abortScaleDownDelaySeconds: 10
      canaryMetadata: {labels: {role: canary}}
      trafficRouting:
        istio:
          virtualService: {name: shop-vsvc, routes: [primary]}
          destinationRule: {name: shop-destrule, canarySubsetName: canary, stableSubsetName: stable}
      analysis:
        templates: [{templateName: checks, clusterScope: true}]
      steps:
      - setCanaryScale: {weight: 20}
      - setWeight: 20
      - pause: {duration: 10m}
      - analysis:
          templates: [{templateName: success-rate}]
          args:
          - name: service-name
            valueFrom: {fieldRef: {fieldPath: \"metadata.labels['app']\"}}
      - experiment:
          templates: [{name: baseline, specRef: stable}]
      - setMirrorRoute: {name: mirror, percentage: 10}
      - setWeight: 60
      - pause: {}
";

    fn shop() -> Migration {
        migrate_files(&[
            ("templates.yaml", TEMPLATES),
            ("services.yaml", SERVICES),
            ("rollout.yaml", CANARY_ROLLOUT),
        ])
    }

    #[test]
    fn a_rollout_becomes_a_deployment_with_its_template_selector_replicas_and_labels() {
        let migration = shop();
        let output = documents(&migration);
        let deployment = find(&output, "Deployment", "shop");
        assert_eq!(deployment["apiVersion"], "apps/v1");
        assert_eq!(deployment["metadata"]["namespace"], "shop");
        assert_eq!(
            deployment["metadata"]["labels"],
            json!({"app": "shop", "team": "web"})
        );
        assert_eq!(
            deployment["metadata"]["annotations"],
            json!({"owner": "web-team"})
        );
        assert_eq!(deployment["spec"]["replicas"], 5);
        assert_eq!(deployment["spec"]["revisionHistoryLimit"], 4);
        assert_eq!(
            deployment["spec"]["selector"],
            json!({"matchLabels": {"app": "shop"}})
        );
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"][0]["image"],
            "ghcr.io/stefanprodan/podinfo:6.0.0"
        );
        assert_eq!(
            deployment["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}})
        );
        assert!(
            warning(&migration, "spec.strategy.canary.maxSurge")
                .message
                .contains("rollingUpdate")
        );
        assert!(
            warning(
                &migration,
                "metadata.annotations.notifications.argoproj.io/subscribe.on-rollout-aborted.slack"
            )
            .message
            .contains("AlertProvider")
        );
    }

    #[test]
    fn a_canary_rollout_becomes_a_canary_with_steps() {
        let migration = shop();
        let output = documents(&migration);
        let canary = find(&output, "Canary", "shop");
        assert_eq!(canary["apiVersion"], "serin.dev/v1beta1");
        assert_eq!(
            canary["spec"]["targetRef"],
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "shop"})
        );
        assert_eq!(canary["spec"]["provider"], "istio");
        assert_eq!(canary["spec"]["progressDeadlineSeconds"], 300);
        let analysis = &canary["spec"]["analysis"];
        // The success-rate analysis step ran 5 measurements a minute apart.
        assert_eq!(
            analysis["steps"],
            json!([
                {"setCanaryScale": {"weight": 20}},
                {"setWeight": 20},
                {"pause": {"duration": "10m"}},
                {"pause": {"duration": "5m"}},
                {"setWeight": 60},
                {"pause": {}},
            ])
        );
        assert_eq!(analysis["dynamicStableScale"], true);
        assert_eq!(analysis["abortScaleDownDelaySeconds"], 10);
        assert!(
            warning(&migration, "spec.strategy.canary.steps[3].analysis")
                .message
                .contains("became a 5m pause")
        );
        assert!(
            warning(&migration, "spec.strategy.canary.steps[4].experiment")
                .message
                .starts_with("no equivalent")
        );
        assert!(
            warning(&migration, "spec.strategy.canary.steps[5].setMirrorRoute")
                .message
                .starts_with("no equivalent")
        );
        assert!(
            warning(&migration, "spec.strategy.canary.canaryMetadata")
                .message
                .starts_with("no equivalent")
        );
        assert!(
            warning(&migration, "spec.progressDeadlineAbort")
                .message
                .contains("always rolls back")
        );
    }

    #[test]
    fn a_canary_rollouts_routing_comes_from_its_services_virtual_service_and_destination_rule() {
        let migration = shop();
        let output = documents(&migration);
        let service = &find(&output, "Canary", "shop")["spec"]["service"];
        // `shop` is both the Rollout's name and the VirtualService's plain Service host.
        assert_eq!(
            *service,
            json!({
                "port": 8080,
                "targetPort": 9898,
                "portName": "web",
                "trafficPolicy": {"loadBalancer": {"simple": "LEAST_REQUEST"}},
                "hosts": ["shop.example.com"],
                "gateways": ["mesh", "shop-gateway"],
                "timeout": "5s",
            })
        );
        let vs =
            "spec.strategy.canary.trafficRouting.istio.virtualService (VirtualService shop-vsvc)";
        assert!(
            warning(&migration, &format!("{vs}.spec.exportTo"))
                .message
                .starts_with("no equivalent")
        );
        assert!(
            warning(&migration, &format!("{vs}.spec.http[0]"))
                .message
                .contains("\"debug\"")
        );
        assert!(
            warning(&migration, &format!("{vs}.spec.http[1].fault"))
                .message
                .starts_with("no equivalent")
        );
        assert!(
            warning(
                &migration,
                "spec.strategy.canary.trafficRouting.istio.destinationRule"
            )
            .message
            .contains("subset-level")
        );
        for (object, fragment) in [
            (
                "Service shop-stable",
                "the stableService of Rollout shop: left out; Serin routes through its own Services shop,",
            ),
            (
                "Service shop-canary",
                "the canaryService of Rollout shop: left out, since Serin writes this Service itself as the Canary's canary Service",
            ),
            (
                "VirtualService shop-vsvc",
                "Serin writes its own VirtualService shop",
            ),
            (
                "DestinationRule shop-destrule",
                "DestinationRules shop-primary and shop-canary",
            ),
        ] {
            let said = object_warnings(&migration, object);
            assert!(
                said.iter().any(|m| m.contains(fragment)),
                "{object}: {said:?}"
            );
            assert!(
                !output.iter().any(|d| describe(d) == object),
                "{object} is left out"
            );
        }
        assert_eq!(
            object_warnings(&migration, "Service shop-stable")[0],
            "the stableService of Rollout shop: left out; Serin routes through its own Services shop, shop-primary and shop-canary. Delete it from the cluster once nothing calls it"
        );
    }

    #[test]
    fn a_rollouts_analyses_become_canary_metrics_of_converted_metric_templates() {
        let migration = shop();
        let output = documents(&migration);
        let canary = find(&output, "Canary", "shop");
        let analysis = &canary["spec"]["analysis"];
        assert_eq!(analysis["interval"], "30s", "the shortest metric interval");
        // failureLimits 1 and 3: the strictest decides.
        assert_eq!(analysis["threshold"], 2);
        assert!(
            warning(&migration, "spec.strategy.canary")
                .message
                .contains("failureLimits differ (1, 3)")
        );
        assert_eq!(
            analysis["metrics"],
            json!([
                {"name": "errors", "templateRef": {"name": "checks-errors"}, "thresholdRange": {"max": 5}, "interval": "30s"},
                {
                    "name": "success-rate",
                    "templateRef": {"name": "success-rate", "namespace": "shop"},
                    "templateVariables": {"service_name": "shop", "window": "2m"},
                    "thresholdRange": {"min": 0.95},
                    "interval": "1m",
                },
            ])
        );
        let template = find(&output, "MetricTemplate", "success-rate");
        assert_eq!(template["metadata"]["namespace"], "shop");
        assert_eq!(
            template["spec"]["provider"],
            json!({
                "type": "prometheus",
                "address": "http://prometheus.monitoring:9090",
                "insecureSkipVerify": true,
                "headers": {"X-Scope-OrgID": ["shop"]},
            })
        );
        assert_eq!(
            template["spec"]["query"],
            "sum(rate(ok{svc=\"{{ variables.service_name }}\"}[{{ variables.window }}])) / sum(rate(all{svc=\"{{ variables.service_name }}\"}[{{ variables.window }}]))"
        );
        let errors = find(&output, "MetricTemplate", "checks-errors");
        assert!(errors["metadata"].get("namespace").is_none());
        assert!(
            warning(&migration, "spec.metrics[0].provider.prometheus.timeout")
                .message
                .contains("5 seconds")
        );
        assert!(
            warning(&migration, "spec.metrics[0].provider.job")
                .message
                .contains("Prometheus only")
        );
        assert!(
            object_warnings(&migration, "ClusterAnalysisTemplate checks")
                .iter()
                .any(|m| m.contains("written without one"))
        );
        // Serin's validation finds nothing wrong with the Canary.
        assert!(
            !migration
                .warnings
                .iter()
                .any(|w| w.message.starts_with("Serin refuses")),
            "{:#?}",
            migration.warnings
        );
    }

    #[test]
    fn a_blue_green_rollout_becomes_serins_blue_green() {
        let rollout = "\
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: web, namespace: shop}
spec:
  paused: true
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: ghcr.io/stefanprodan/podinfo:6.0.0}]}
  strategy:
    blueGreen:
      activeService: web-active
      previewService: web-preview
      autoPromotionEnabled: false
      autoPromotionSeconds: 60
      previewReplicaCount: 1
      scaleDownDelaySeconds: 45
      abortScaleDownDelaySeconds: 0
      previewMetadata: {labels: {role: preview}}
      prePromotionAnalysis:
        templates: [{templateName: success-rate}]
        args: [{name: service-name, value: web-preview}]
      postPromotionAnalysis:
        templates: [{templateName: success-rate}]
        args: [{name: service-name, value: web-active}]
---
apiVersion: v1
kind: Service
metadata: {name: web-active, namespace: shop}
spec: {selector: {app: web}, ports: [{port: 80, targetPort: 9898}]}
";
        let migration = migrate_files(&[("templates.yaml", TEMPLATES), ("web.yaml", rollout)]);
        let output = documents(&migration);
        let canary = find(&output, "Canary", "web");
        assert_eq!(canary["spec"]["suspend"], true);
        assert_eq!(
            canary["spec"]["service"],
            json!({"name": "web-active", "port": 80, "targetPort": 9898})
        );
        let analysis = &canary["spec"]["analysis"];
        assert_eq!(
            analysis["iterations"], 5,
            "the pre-promotion metric's count"
        );
        assert_eq!(analysis["autoPromotionEnabled"], false);
        assert!(analysis.get("autoPromotionSeconds").is_none());
        assert_eq!(analysis["previewReplicaCount"], 1);
        assert_eq!(analysis["scaleDownDelaySeconds"], 45);
        assert_eq!(analysis["abortScaleDownDelaySeconds"], 0);
        assert_eq!(
            analysis["metrics"][0]["templateVariables"]["service_name"],
            "web-preview"
        );
        assert_eq!(analysis["metrics"].as_array().unwrap().len(), 1);
        // The post-promotion analysis keeps its own metric, its name kept apart from the analysis's.
        let post = &analysis["postPromotionAnalysis"];
        assert_eq!(post["iterations"], 5);
        assert_eq!(post["metrics"][0]["name"], "post-success-rate");
        assert_eq!(
            post["metrics"][0]["templateVariables"]["service_name"],
            "web-active"
        );
        assert_eq!(canary["spec"]["provider"], "kubernetes");
        let base = "spec.strategy.blueGreen";
        assert!(
            warning(&migration, base)
                .message
                .contains("provider: kubernetes")
        );
        assert!(
            warning(&migration, &format!("{base}.previewService"))
                .message
                .contains("web-active-canary instead of web-preview")
        );
        assert!(
            warning(&migration, &format!("{base}.autoPromotionSeconds"))
                .message
                .contains("ignored by Argo")
        );
        assert!(
            warning(&migration, &format!("{base}.previewMetadata"))
                .message
                .starts_with("no equivalent")
        );
        assert!(
            object_warnings(&migration, "Service web-active")[0].contains("Canary's apex Service")
        );
        assert!(
            !migration
                .warnings
                .iter()
                .any(|w| w.message.starts_with("Serin refuses"))
        );
    }

    const WORKLOAD: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata: {name: api}
spec:
  replicas: 0
  selector: {matchLabels: {component: api}}
  template:
    metadata: {labels: {component: api}}
    spec: {containers: [{name: api, image: ghcr.io/stefanprodan/podinfo:6.0.0, ports: [{containerPort: 9898}]}]}
---
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: api}
spec:
  replicas: 3
  selector: {matchLabels: {component: api}}
  workloadRef: {apiVersion: apps/v1, kind: Deployment, name: api}
  strategy:
    canary:
      maxUnavailable: 0
      trafficRouting:
        nginx: {stableIngress: api}
      steps: [{setWeight: 50}, {pause: {duration: 1h}}]
";

    #[test]
    fn a_workload_ref_rollout_targets_its_deployment() {
        let migration = migrate_one(WORKLOAD);
        let output = documents(&migration);
        assert_eq!(
            output.iter().filter(|d| d["kind"] == "Deployment").count(),
            1,
            "only the referenced Deployment, as written"
        );
        assert!(
            migration
                .yaml
                .starts_with(WORKLOAD.split("---").next().unwrap())
        );
        let canary = find(&output, "Canary", "api");
        assert_eq!(canary["spec"]["targetRef"]["name"], "api");
        assert_eq!(
            canary["spec"]["analysis"]["steps"],
            json!([{"setWeight": 50}, {"pause": {"duration": "1h"}}])
        );
        assert!(
            warning(&migration, "spec.workloadRef.scaleDown")
                .message
                .contains("kubectl scale deployment api --replicas=3")
        );
        assert!(
            warning(&migration, "spec.strategy.canary.maxUnavailable")
                .message
                .starts_with("left out")
        );
        assert!(
            warning(&migration, "spec.strategy.canary.trafficRouting.nginx")
                .message
                .contains("Istio only")
        );
        // No label Serin's operator selects pods by.
        assert!(
            warning(&migration, "spec.workloadRef")
                .message
                .contains("app, name, app.kubernetes.io/name")
        );
        // No Service named: the container port, said so.
        assert_eq!(canary["spec"]["service"], json!({"port": 9898}));
        assert!(
            warning(&migration, "spec.strategy")
                .message
                .contains("first container port (9898)")
        );
    }

    #[test]
    fn a_rollouts_autoscaler_scales_the_deployment_and_the_canary_names_it() {
        let hpa = "\
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: shop}
spec:
  scaleTargetRef: {apiVersion: argoproj.io/v1alpha1, kind: Rollout, name: shop}
  minReplicas: 2
  maxReplicas: 6
";
        let migration = migrate_files(&[("rollout.yaml", CANARY_ROLLOUT), ("hpa.yaml", hpa)]);
        let output = documents(&migration);
        let autoscaler = find(&output, "HorizontalPodAutoscaler", "shop");
        assert_eq!(
            autoscaler["spec"]["scaleTargetRef"],
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "shop"})
        );
        assert_eq!(autoscaler["spec"]["maxReplicas"], 6);
        assert_eq!(
            find(&output, "Canary", "shop")["spec"]["autoscalerRef"],
            json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": "shop"})
        );
    }

    #[test]
    fn args_without_a_serin_equivalent_and_missing_templates_are_warned_about() {
        let rollout = CANARY_ROLLOUT.replace(
            "valueFrom: {fieldRef: {fieldPath: \"metadata.labels['app']\"}}",
            "valueFrom: {podTemplateHashValue: Latest}",
        );
        let migration = migrate_files(&[("rollout.yaml", &rollout)]);
        assert!(
            warning(
                &migration,
                "spec.strategy.canary.steps[3].analysis.templates[0]"
            )
            .message
            .contains("AnalysisTemplate success-rate is not among the files given")
        );
        assert!(
            warning(&migration, "spec.strategy.canary.analysis.templates[0]")
                .message
                .contains("ClusterAnalysisTemplate checks")
        );
        let migration = migrate_files(&[("templates.yaml", TEMPLATES), ("rollout.yaml", &rollout)]);
        assert!(
            warning(
                &migration,
                "spec.strategy.canary.steps[3].analysis.args[0].valueFrom"
            )
            .message
            .contains("rollouts-pod-template-hash")
        );
        let canary = find(&documents(&migration), "Canary", "shop").clone();
        assert_eq!(
            canary["spec"]["analysis"]["metrics"][1]["templateVariables"],
            json!({"window": "2m"})
        );
    }

    #[test]
    fn conditions_that_cannot_be_a_threshold_range_leave_the_metric_without_one() {
        let templates = TEMPLATES.replace(
            "successCondition: result[0] >= 0.95",
            "successCondition: result[0] >= 0.95 || result[1] >= 0.95",
        );
        let migration = migrate_files(&[
            ("templates.yaml", &templates),
            ("services.yaml", SERVICES),
            ("rollout.yaml", CANARY_ROLLOUT),
        ]);
        assert!(
            warning(&migration, "spec.metrics[0].successCondition")
                .message
                .contains("cannot be written as a thresholdRange")
        );
        // Serin's validation then says what the Canary lacks.
        let refused = warning(&migration, "spec.analysis.metrics[1].thresholdRange");
        assert_eq!(refused.object, "Rollout shop (as Canary shop)");
        assert!(refused.message.starts_with("Serin refuses this: missing"));
    }

    #[test]
    fn unreferenced_analysis_templates_say_where_their_conditions_go() {
        let migration = migrate_one(TEMPLATES.split("---").next().unwrap());
        let said = object_warnings(&migration, "AnalysisTemplate success-rate");
        assert!(
            said.iter()
                .any(|m| m.contains("no Rollout among the files given uses it")),
            "{said:?}"
        );
        assert_eq!(documents(&migration).len(), 1);
    }

    #[test]
    fn analysis_runs_and_experiments_are_left_out() {
        let migration = migrate_one(
            "apiVersion: argoproj.io/v1alpha1\nkind: AnalysisRun\nmetadata: {name: shop-1}\nspec: {metrics: []}\n---\napiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: shop}\n",
        );
        assert_eq!(
            migration.yaml,
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: shop}\n"
        );
        assert!(object_warnings(&migration, "AnalysisRun shop-1")[0].starts_with("no equivalent"));
    }
}
