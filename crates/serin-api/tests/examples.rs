//! The manifests in `artifacts/examples` are what users copy, so they must stay correct: every one
//! validates cleanly, survives a typed round trip without losing a field, and selects the strategy its
//! name promises. The deliberately broken canary in `artifacts/examples/broken` is reported field by
//! field, one message per mistake, each saying what to write instead.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serin_api::validate::{validate_alert_provider, validate_metric_template};
use serin_api::{AlertProvider, Canary, FieldError, MetricTemplate, Strategy, validate};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../artifacts/examples")
}

/// The `*.yaml` files directly in `artifacts/examples` (not `broken/`), sorted by name.
fn example_files() -> Vec<PathBuf> {
    let dir = examples_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    files
}

fn file_name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The strategy each canary example must select; a new canary example has to be added here.
fn expected_strategy(file: &str) -> Option<Strategy> {
    match file {
        "canary-progressive.yaml" => Some(Strategy::Canary),
        "canary-stepweights.yaml" => Some(Strategy::Canary),
        "canary-ab-testing.yaml" => Some(Strategy::AbTesting),
        "canary-blue-green.yaml" => Some(Strategy::BlueGreen),
        "canary-mirroring.yaml" => Some(Strategy::Canary),
        "canary-steps.yaml" => Some(Strategy::Steps),
        "canary-analysis-steps.yaml" => Some(Strategy::Steps),
        "canary-replica-ratio.yaml" => Some(Strategy::Steps),
        "canary-blue-green-post-promotion.yaml" => Some(Strategy::BlueGreen),
        "canary-gateway-api.yaml" => Some(Strategy::Canary),
        "canary-daemonset.yaml" => Some(Strategy::Canary),
        "canary-kubernetes-blue-green.yaml" => Some(Strategy::BlueGreen),
        "canary-manual-gates.yaml" => Some(Strategy::Canary),
        _ => None,
    }
}

/// Compares numbers by value: YAML `min: 99` reads as an integer, while the typed `f64` field writes
/// `99.0`. Everything else must be identical.
fn normalize(value: Value) -> Value {
    match value {
        Value::Number(n) => Value::from(n.as_f64().expect("every JSON number has an f64 value")),
        Value::Array(items) => Value::Array(items.into_iter().map(normalize).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, normalize(v))).collect())
        }
        other => other,
    }
}

/// Lists the paths where two JSON documents differ, e.g. `.spec.analysis.mirrorWeight: 100 != (absent)`.
fn differences(path: &str, left: &Value, right: &Value, out: &mut Vec<String>) {
    match (left, right) {
        (Value::Object(l), Value::Object(r)) => {
            let keys: std::collections::BTreeSet<&String> = l.keys().chain(r.keys()).collect();
            for key in keys {
                let p = format!("{path}.{key}");
                match (l.get(key), r.get(key)) {
                    (Some(a), Some(b)) => differences(&p, a, b, out),
                    (Some(a), None) => out.push(format!("{p}: {a} != (absent)")),
                    (None, Some(b)) => out.push(format!("{p}: (absent) != {b}")),
                    (None, None) => unreachable!(),
                }
            }
        }
        (Value::Array(l), Value::Array(r)) if l.len() == r.len() => {
            for (i, (a, b)) in l.iter().zip(r).enumerate() {
                differences(&format!("{path}[{i}]"), a, b, out);
            }
        }
        (a, b) if a != b => out.push(format!("{path}: {a} != {b}")),
        _ => {}
    }
}

/// The document as the typed Canary reads it: the deprecated `spec.canaryAnalysis` becomes
/// `spec.analysis` when that is absent, and is dropped when both are set.
fn fold_canary_analysis(mut document: Value) -> Value {
    if let Some(spec) = document.get_mut("spec").and_then(Value::as_object_mut)
        && let Some(alias) = spec.remove("canaryAnalysis")
        && spec.get("analysis").is_none_or(Value::is_null)
    {
        spec.insert("analysis".into(), alias);
    }
    document
}

/// Parses `text` as `T` and as plain JSON, and checks that `T` serializes back to the same JSON.
/// A field the types do not know would be dropped silently by serde; this makes it a failure.
fn round_trip<T: DeserializeOwned + Serialize>(file: &str, text: &str) -> Result<T, String> {
    let untyped: Value =
        serde_saphyr::from_str(text).map_err(|e| format!("{file}: not valid YAML: {e}"))?;
    let typed: T = serde_saphyr::from_str(text).map_err(|e| {
        format!(
            "{file}: does not deserialize into {}: {e}",
            std::any::type_name::<T>()
        )
    })?;
    let back =
        serde_json::to_value(&typed).map_err(|e| format!("{file}: cannot serialize: {e}"))?;
    let untyped = fold_canary_analysis(untyped);
    let mut diffs = Vec::new();
    differences("", &normalize(back), &normalize(untyped), &mut diffs);
    if diffs.is_empty() {
        Ok(typed)
    } else {
        Err(format!(
            "{file}: the typed round trip changed the document (typed != input):\n  {}",
            diffs.join("\n  ")
        ))
    }
}

fn report(file: &str, errors: &[FieldError]) -> Result<(), String> {
    if errors.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
    Err(format!("{file}: validation failed:\n{}", lines.join("\n")))
}

fn check_canary(file: &str, text: &str) -> Result<(), String> {
    let canary: Canary = round_trip(file, text)?;
    report(file, &validate(&canary))?;
    let spec = &canary.spec;
    let target = (
        canary.metadata.namespace.as_deref(),
        spec.target_ref.api_version.as_str(),
        spec.target_ref.kind.as_str(),
        spec.target_ref.name.as_str(),
        spec.service.port,
    );
    // The DaemonSet example releases a node agent; every other one the podinfo Deployment.
    let expected = match file {
        "canary-daemonset.yaml" => (Some("test"), "apps/v1", "DaemonSet", "agent", 9898),
        _ => (Some("test"), "apps/v1", "Deployment", "podinfo", 9898),
    };
    if target != expected {
        return Err(format!(
            "{file}: the example should release {expected:?}, found {target:?}"
        ));
    }
    let analysis = spec
        .analysis
        .as_ref()
        .ok_or_else(|| format!("{file}: an example canary needs spec.analysis"))?;
    let expected = expected_strategy(file).ok_or_else(|| {
        format!("{file}: unknown canary example; add its strategy to expected_strategy()")
    })?;
    if analysis.strategy() != expected {
        return Err(format!(
            "{file}: selects strategy {:?}, but its name promises {expected:?}",
            analysis.strategy()
        ));
    }
    Ok(())
}

fn check_example(path: &Path) -> Result<(), String> {
    let file = file_name(path);
    let text = read(path);
    let doc: Value =
        serde_saphyr::from_str(&text).map_err(|e| format!("{file}: not valid YAML: {e}"))?;
    if doc["apiVersion"] != "serin.dev/v1beta1" {
        return Err(format!(
            "{file}: apiVersion is {}, expected serin.dev/v1beta1",
            doc["apiVersion"]
        ));
    }
    match doc["kind"].as_str() {
        Some("Canary") => check_canary(&file, &text),
        Some("MetricTemplate") => {
            let template: MetricTemplate = round_trip(&file, &text)?;
            report(&file, &validate_metric_template(&template))
        }
        Some("AlertProvider") => {
            let provider: AlertProvider = round_trip(&file, &text)?;
            report(&file, &validate_alert_provider(&provider))
        }
        other => Err(format!("{file}: unexpected kind {other:?}")),
    }
}

#[test]
fn every_example_is_valid_round_trips_and_selects_its_strategy() {
    let files = example_files();
    let names: Vec<String> = files.iter().map(|p| file_name(p)).collect();
    for required in [
        "canary-progressive.yaml",
        "canary-stepweights.yaml",
        "canary-ab-testing.yaml",
        "canary-blue-green.yaml",
        "canary-mirroring.yaml",
        "canary-steps.yaml",
        "canary-replica-ratio.yaml",
        "canary-blue-green-post-promotion.yaml",
        "metric-template-latency.yaml",
        "alert-provider-slack.yaml",
    ] {
        assert!(
            names.iter().any(|n| n == required),
            "artifacts/examples/{required} is missing; found {names:?}"
        );
    }
    let failures: Vec<String> = files
        .iter()
        .filter_map(|p| check_example(p).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} example(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn load<T: DeserializeOwned + Serialize>(file: &str) -> T {
    let text = read(&examples_dir().join(file));
    round_trip(file, &text).unwrap_or_else(|e| panic!("{e}"))
}

/// The examples carry the settings their comments describe (so an edit cannot quietly change them).
#[test]
fn examples_carry_the_settings_their_comments_describe() {
    let ratio: Canary = load("canary-replica-ratio.yaml");
    assert!(ratio.spec.splits_by_replicas());
    let a = ratio.spec.analysis.as_ref().unwrap();
    let weights: Vec<i32> = a.steps().iter().filter_map(|s| s.set_weight).collect();
    assert_eq!(weights, [41, 100]);
    assert_eq!(
        window_and_anti_affinity(a),
        (Some(2), Some(1), Some(80)),
        "maxSurge, maxUnavailable and the preferred anti-affinity weight"
    );
    let post: Canary = load("canary-blue-green-post-promotion.yaml");
    let a = post.spec.analysis.as_ref().unwrap();
    assert_eq!(a.strategy(), serin_api::Strategy::BlueGreen);
    let stage = a.post_promotion_analysis.as_ref().unwrap();
    assert_eq!(
        (stage.iterations(), stage.metrics()[0].name.as_str()),
        (2, "request-success-rate")
    );
    assert_eq!(
        a.pre_promotion_analysis.as_ref().unwrap().metrics()[0].name,
        "request-duration"
    );

    let gated: Canary = load("canary-analysis-steps.yaml");
    let a = gated.spec.analysis.as_ref().unwrap();
    let step = a.steps()[3].analysis.as_ref().unwrap();
    let errors = &step.metrics[0];
    assert_eq!(
        (
            errors.count,
            errors.interval.as_deref(),
            errors.initial_delay.as_deref(),
            errors.failure_limit
        ),
        (Some(3), Some("30s"), Some("30s"), Some(1)),
        "3 measurements 30s apart after 30s, failing past 1"
    );
    assert!(step.is_dry_run("p99-latency") && !step.is_dry_run("error-ratio"));
    assert_eq!(
        a.steps()[1].set_header_route.as_ref().unwrap().name,
        "testers"
    );
    assert_eq!(
        a.steps()[2].set_mirror_route.as_ref().unwrap().percentage,
        Some(50)
    );
    let background = a.background_analysis.as_ref().unwrap();
    assert_eq!(background.starting_step, Some(1));
    assert_eq!(
        background.metrics[0].effective_count(),
        None,
        "measures until the release ends"
    );
    let job: MetricTemplate = load("metric-template-job.yaml");
    assert_eq!(
        job.spec.provider.job.as_ref().unwrap().spec["backoffLimit"],
        0
    );

    let progressive: Canary = load("canary-progressive.yaml");
    let a = progressive.spec.analysis.as_ref().unwrap();
    assert_eq!(
        (
            a.step_weight,
            a.max_weight,
            a.threshold,
            a.interval_seconds()
        ),
        (Some(10), Some(50), Some(5), 60)
    );
    let ranges: Vec<(&str, Option<f64>, Option<f64>)> = a
        .metrics()
        .iter()
        .map(|m| {
            let r = m.threshold_range.as_ref().unwrap();
            (m.name.as_str(), r.min, r.max)
        })
        .collect();
    assert_eq!(
        ranges,
        [
            ("request-success-rate", Some(99.0), None),
            ("request-duration", None, Some(500.0))
        ]
    );
    let hooks: Vec<(&str, Option<&str>)> = a
        .webhooks()
        .iter()
        .map(|h| (h.name.as_str(), h.type_.as_deref()))
        .collect();
    assert_eq!(
        hooks,
        [
            ("acceptance-test", Some("pre-rollout")),
            ("load-test", Some("rollout"))
        ]
    );
    let load_test = &a.webhooks()[1];
    assert_eq!(load_test.url, "http://flagger-loadtester.test/");
    assert_eq!(
        load_test.metadata.as_ref().unwrap()["cmd"],
        "hey -z 1m -q 10 -c 2 http://podinfo-canary.test:9898/"
    );

    let ladder: Canary = load("canary-stepweights.yaml");
    let a = ladder.spec.analysis.as_ref().unwrap();
    assert_eq!(a.step_weights.as_deref(), Some(&[1, 5, 10, 25, 50][..]));
    assert_eq!(a.step_weight_promotion, Some(50));

    let ab: Canary = load("canary-ab-testing.yaml");
    let a = ab.spec.analysis.as_ref().unwrap();
    assert_eq!(a.iterations, Some(10));
    let matches = a.r#match.as_ref().unwrap();
    assert_eq!(matches.len(), 2, "two alternatives: header OR cookie");
    let header = &matches[0].headers.as_ref().unwrap()["x-canary"];
    assert_eq!(header.exact.as_deref(), Some("insider"));
    let cookie = &matches[1].headers.as_ref().unwrap()["cookie"];
    assert_eq!(
        cookie.regex.as_deref(),
        Some("^(.*?; *)?(canary=always)(;.*)?$")
    );

    let blue_green: Canary = load("canary-blue-green.yaml");
    let a = blue_green.spec.analysis.as_ref().unwrap();
    assert_eq!(a.iterations, Some(5));
    assert!(!a.auto_promotion_enabled());
    assert_eq!(
        (a.preview_replica_count, a.scale_down_delay_seconds),
        (Some(1), Some(30))
    );

    let mirroring: Canary = load("canary-mirroring.yaml");
    let a = mirroring.spec.analysis.as_ref().unwrap();
    assert!(a.mirror());
    assert_eq!(
        (a.mirror_weight, a.step_weight, a.max_weight),
        (Some(100), Some(10), Some(50))
    );

    let steps: Canary = load("canary-steps.yaml");
    let a = steps.spec.analysis.as_ref().unwrap();
    let shape: Vec<String> = a
        .steps()
        .iter()
        .map(|s| match (s.set_weight, &s.pause, &s.set_canary_scale) {
            (Some(w), None, None) => format!("setWeight {w}"),
            (None, Some(p), None) => match &p.duration {
                Some(d) => format!("pause {}", serde_json::to_string(d).unwrap()),
                None => "pause until promoted".to_string(),
            },
            (None, None, Some(scale)) => {
                format!("setCanaryScale {}", serde_json::to_string(scale).unwrap())
            }
            other => panic!("step with several actions: {other:?}"),
        })
        .collect();
    assert_eq!(
        shape,
        [
            "setWeight 10",
            "pause \"1m\"",
            "setCanaryScale {\"weight\":50}",
            "setWeight 50",
            "pause until promoted",
            "setCanaryScale {\"matchTrafficWeight\":true}",
        ]
    );
    assert_eq!(
        (a.dynamic_stable_scale, a.abort_scale_down_delay_seconds),
        (Some(true), Some(30))
    );
    let templated = a
        .metrics()
        .iter()
        .find(|m| m.template_ref.is_some())
        .unwrap();
    assert_eq!(templated.template_ref.as_ref().unwrap().name, "latency");
    assert!(templated.ignores_no_data());

    let template: MetricTemplate = load("metric-template-latency.yaml");
    assert_eq!(
        template.metadata.name.as_deref(),
        Some("latency"),
        "canary-steps.yaml refers to it by this name"
    );
    assert_eq!(template.spec.provider.type_, "prometheus");
    assert_eq!(
        template.spec.provider.address.as_deref(),
        Some("http://prometheus.istio-system:9090")
    );
    for needle in [
        "istio_request_duration_milliseconds_bucket",
        "{{ namespace }}",
        "{{ target }}",
        "{{ interval }}",
    ] {
        assert!(
            template.spec.query.contains(needle),
            "the latency query should use {needle}"
        );
    }

    let slack: AlertProvider = load("alert-provider-slack.yaml");
    assert_eq!(slack.spec.type_, "slack");
    assert!(slack.spec.channel.is_some() && slack.spec.secret_ref.is_some());
    assert_eq!(
        slack.metadata.name.as_deref(),
        Some(
            progressive
                .spec
                .analysis
                .as_ref()
                .unwrap()
                .alerts
                .as_ref()
                .unwrap()[0]
                .provider_ref
                .name
                .as_str()
        ),
        "canary-progressive.yaml sends its alerts to this provider"
    );
}

/// Every mistake in `broken/canary-broken.yaml`, by field path, with words its message must contain:
/// what is wrong and what to write instead.
const BROKEN: &[(&str, &[&str])] = &[
    (
        "spec.provider",
        &[
            "unknown provider \"istiod\"",
            "write one of istio, kubernetes",
        ],
    ),
    (
        "spec.metricsServer",
        &[
            "\"prometheus.istio-system:9090\" is not an absolute URL",
            "write http://",
        ],
    ),
    (
        "spec.targetRef.apiVersion",
        &["\"apps/v1beta1\"", "write apiVersion: apps/v1"],
    ),
    (
        "spec.autoscalerRef.primaryScalerReplicas.minReplicas",
        &[
            "minReplicas 5 is above maxReplicas 2",
            "make minReplicas at most maxReplicas",
        ],
    ),
    (
        "spec.progressDeadlineSeconds",
        &["0 is out of range", "write a whole number from 1"],
    ),
    (
        "spec.service.trafficDistribution",
        &[
            "\"PreferNearby\"",
            "write PreferClose, PreferSameZone or PreferSameNode",
        ],
    ),
    (
        "spec.service.match[0].uri",
        &["set exactly one of exact, prefix, suffix or regex"],
    ),
    (
        "spec.canaryAnalysis",
        &["both are set", "delete canaryAnalysis"],
    ),
    (
        "spec.analysis.interval",
        &[
            "cannot parse \"1 minute\"",
            "write a number followed by s, m or h",
        ],
    ),
    (
        "spec.analysis.threshold",
        &["0 is out of range", "write a whole number from 1"],
    ),
    (
        "spec.analysis.stepWeightPromotion",
        &["150 is out of range", "write a whole number from 0 to 100"],
    ),
    (
        "spec.analysis.abortScaleDownDelaySeconds",
        &["-30 is negative", "write 0 or more seconds"],
    ),
    ("spec.analysis.mirror", &["not with steps", "remove mirror"]),
    (
        "spec.analysis.previewReplicaCount",
        &["only blue/green", "remove it"],
    ),
    (
        "spec.analysis.steps[0]",
        &[
            "exactly one of setWeight, pause, setCanaryScale, analysis, setHeaderRoute or setMirrorRoute",
            "split it into separate steps",
        ],
    ),
    (
        "spec.analysis.steps[1].pause.duration",
        &["cannot parse \"ten\"", "write seconds as a number"],
    ),
    (
        "spec.analysis.steps[2].setWeight",
        &["150 is out of range", "write a whole number from 0 to 100"],
    ),
    (
        "spec.analysis.steps[3].setCanaryScale",
        &["set exactly one of replicas, weight or matchTrafficWeight"],
    ),
    (
        "spec.analysis.steps[4].pause.duration",
        &["must not be negative", "write 0 or more seconds"],
    ),
    (
        "spec.analysis.metrics[0].interval",
        &[
            "cannot parse \"1 minute\"",
            "write a number followed by s, m or h",
        ],
    ),
    (
        "spec.analysis.metrics[1].thresholdRange",
        &["min 500 is above max 100", "make min at most max"],
    ),
    (
        "spec.analysis.metrics[2].name",
        &[
            "duplicate metric name \"request-success-rate\"",
            "give each metric its own name",
        ],
    ),
    (
        "spec.analysis.metrics[3].noData",
        &["unknown value \"skip\"", "write fail", "ignore"],
    ),
    (
        "spec.analysis.metrics[4].query",
        &["both query and templateRef", "keep templateRef"],
    ),
    (
        "spec.analysis.metrics[5].thresholdRange",
        &["missing", "set the accepted range"],
    ),
    (
        "spec.analysis.webhooks[0].type",
        &["unknown type \"pre-rolout\"", "write one of", "pre-rollout"],
    ),
    (
        "spec.analysis.webhooks[1].url",
        &["\"/loadtest\" is not an absolute URL", "write http://"],
    ),
    (
        "spec.analysis.webhooks[2].name",
        &[
            "duplicate webhook name \"load-test\"",
            "give each webhook its own name",
        ],
    ),
    (
        "spec.analysis.webhooks[3].timeout",
        &["cannot parse \"30 seconds\"", "\"30s\""],
    ),
    (
        "spec.analysis.alerts[0].severity",
        &["unknown severity \"critical\"", "write info, warn or error"],
    ),
    (
        "spec.analysis.sessionAffinity.primaryCookieName",
        &[
            "same as cookieName \"canary-affinity\"",
            "write a different name",
        ],
    ),
    (
        "spec.analysis.sessionAffinity.sameSite",
        &["unknown value \"lax\"", "write Strict, Lax or None"],
    ),
];

/// Verbs that tell the user what to do; every validation message contains one.
const INSTRUCTIONS: [&str; 9] = [
    "write", "remove", "set ", "delete", "make", "give", "split", "keep", "use ",
];

#[test]
fn the_broken_canary_gets_one_message_per_broken_field() {
    let file = "broken/canary-broken.yaml";
    let text = read(&examples_dir().join(file));
    // It is well-typed, so every mistake reaches validation instead of being dropped by serde.
    let canary: Canary = round_trip(file, &text).unwrap_or_else(|e| panic!("{e}"));
    let errors = validate(&canary);
    let listing: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
    let listing = listing.join("\n");

    let mut by_path: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for e in &errors {
        by_path
            .entry(e.path.as_str())
            .or_default()
            .push(e.message.as_str());
    }
    let repeated: Vec<_> = by_path.iter().filter(|(_, msgs)| msgs.len() > 1).collect();
    assert!(
        repeated.is_empty(),
        "fields reported more than once: {repeated:?}\nall errors:\n{listing}"
    );

    let expected: BTreeMap<&str, &[&str]> = BROKEN.iter().copied().collect();
    assert_eq!(expected.len(), BROKEN.len(), "BROKEN lists a path twice");
    let missing: Vec<&&str> = expected
        .keys()
        .filter(|p| !by_path.contains_key(*p))
        .collect();
    let unexpected: Vec<&&str> = by_path
        .keys()
        .filter(|p| !expected.contains_key(*p))
        .collect();
    assert!(
        missing.is_empty() && unexpected.is_empty(),
        "missing: {missing:?}\nunexpected: {unexpected:?}\nall errors:\n{listing}"
    );
    assert_eq!(errors.len(), BROKEN.len(), "all errors:\n{listing}");

    for (path, words) in BROKEN {
        let message = by_path[path][0];
        for word in *words {
            assert!(
                message.contains(word),
                "{path}: message {message:?} should contain {word:?}"
            );
        }
        assert!(
            INSTRUCTIONS.iter().any(|verb| message.contains(verb)),
            "{path}: message {message:?} does not say what to write instead"
        );
    }
}

/// The replica-ratio example's window and anti-affinity, as numbers.
fn window_and_anti_affinity(
    a: &serin_api::CanaryAnalysis,
) -> (Option<i32>, Option<i32>, Option<i32>) {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let int = |v: &Option<IntOrString>| match v {
        Some(IntOrString::Int(n)) => Some(*n),
        _ => None,
    };
    let weight = a
        .anti_affinity
        .as_ref()
        .and_then(|anti| {
            anti.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|p| p.weight);
    (int(&a.max_surge), int(&a.max_unavailable), weight)
}

/// The Canary on the README's front page is the first one a user copies: it must validate.
#[test]
fn the_readme_canary_is_valid() {
    let readme = read(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../README.md"));
    let start = readme.find("```yaml\n").expect("the README shows a Canary") + "```yaml\n".len();
    let end = start + readme[start..].find("```").expect("the block ends");
    let canary: Canary = round_trip("README.md", &readme[start..end]).unwrap();
    assert_eq!(validate(&canary), Vec::<FieldError>::new());
}

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every page under `docs/`, as a path relative to `docs/`.
fn docs_pages(dir: &Path, prefix: &str, pages: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = file_name(&path);
        if path.is_dir() {
            docs_pages(&path, &format!("{prefix}{name}/"), pages);
        } else if name.ends_with(".md") {
            pages.push(format!("{prefix}{name}"));
        }
    }
}

/// The docs index lists every page, and each tutorial releases an example file that exists and
/// that the tutorial scenarios (`e2e/tutorials.sh`, run by 53 and 56) apply.
#[test]
fn every_docs_page_is_indexed_and_every_tutorial_runs_an_existing_example() {
    let docs = repository().join("docs");
    let index = read(&docs.join("README.md"));
    let mut pages = Vec::new();
    docs_pages(&docs, "", &mut pages);
    let unlisted: Vec<&String> = pages
        .iter()
        .filter(|page| *page != "README.md" && !index.contains(&format!("]({page})")))
        .collect();
    assert!(
        unlisted.is_empty(),
        "docs/README.md does not link {unlisted:?}"
    );

    let scenario = read(&repository().join("e2e/tutorials.sh"));
    let runs = read(&repository().join("e2e/53-tutorials.sh"))
        + &read(&repository().join("e2e/56-tutorials-more.sh"));
    for defined in scenario.lines().filter_map(|l| l.strip_prefix("tutorial_")) {
        let name = defined.trim_end_matches("() {");
        assert!(
            runs.contains(&format!(" {name}")),
            "neither e2e/53-tutorials.sh nor e2e/56-tutorials-more.sh runs tutorial_{name}"
        );
    }
    let tutorials = docs.join("tutorials");
    let tutorial_index = read(&tutorials.join("README.md"));
    let mut checked = 0;
    for page in pages.iter().filter_map(|p| p.strip_prefix("tutorials/")) {
        if page == "README.md" {
            continue;
        }
        assert!(
            tutorial_index.contains(&format!("]({page})")),
            "docs/tutorials/README.md does not list {page}"
        );
        let text = read(&tutorials.join(page));
        let marker = "](../../artifacts/examples/";
        let start = text
            .find(marker)
            .unwrap_or_else(|| panic!("{page} links no example file"))
            + marker.len();
        let example = &text[start..start + text[start..].find(')').unwrap()];
        assert!(
            examples_dir().join(example).is_file(),
            "{page} links artifacts/examples/{example}, which does not exist"
        );
        assert!(
            scenario.contains(&format!("start_canary {example}")),
            "e2e/tutorials.sh does not run {example}, the file of {page}"
        );
        for (at, _) in text.match_indices("artifacts/examples/") {
            let rest = &text[at + "artifacts/examples/".len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || "-_./".contains(c)))
                .unwrap_or(rest.len());
            let named = rest[..end].trim_end_matches('.');
            if named.ends_with(".yaml") {
                assert!(
                    examples_dir().join(named).is_file(),
                    "{page} names artifacts/examples/{named}, which does not exist"
                );
            }
        }
        checked += 1;
    }
    assert_eq!(checked, 8, "eight tutorials");
}
