//! Which providers and strategies use each Canary setting, found by asking the validation itself:
//! every setting, at a sample value, is added to a minimal Canary of each provider and strategy, and
//! counts as used there when the Canary still validates and keeps its strategy. A setting that
//! validation accepts and the operator ignores would be a defect, so this is also what the operator
//! acts on.

use crate::{Canary, validate};
use serde_json::{Value, json};
use std::fmt::Write as _;

/// A minimal valid Canary of one provider and strategy: the columns of the table.
struct Context {
    heading: String,
    provider: &'static str,
    analysis: Value,
}

fn contexts() -> Vec<Context> {
    let canary = || json!({"interval": "1m", "threshold": 5, "stepWeight": 10, "maxWeight": 50});
    let steps =
        || json!({"interval": "1m", "threshold": 5, "steps": [{"setWeight": 20}, {"pause": {}}]});
    let ab = || {
        json!({"interval": "1m", "threshold": 5, "iterations": 10,
               "match": [{"headers": {"x-canary": {"exact": "insider"}}}]})
    };
    let blue_green = || json!({"interval": "1m", "threshold": 5, "iterations": 5});
    let mut out = Vec::new();
    for (provider, name) in [("istio", "Istio"), ("gatewayapi:v1", "Gateway API")] {
        let strategies = [
            ("canary", canary()),
            ("steps", steps()),
            ("A/B", ab()),
            ("blue/green", blue_green()),
        ];
        for (strategy, analysis) in strategies {
            out.push(Context {
                heading: format!("{name} {strategy}"),
                provider,
                analysis,
            });
        }
    }
    for (strategy, analysis) in [("replica ratio", steps()), ("blue/green", blue_green())] {
        out.push(Context {
            heading: format!("kubernetes {strategy}"),
            provider: "kubernetes",
            analysis,
        });
    }
    out
}

fn base(context: &Context) -> Value {
    let mut service = json!({"port": 9898});
    if context.provider.starts_with("gatewayapi") {
        service["gatewayRefs"] = json!([{"name": "public-gateway", "namespace": "istio-system"}]);
    }
    json!({
        "apiVersion": "serin.dev/v1beta1", "kind": "Canary",
        "metadata": {"name": "podinfo", "namespace": "test"},
        "spec": {
            "provider": context.provider,
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo"},
            "service": service,
            "analysis": context.analysis.clone(),
        }
    })
}

fn metric() -> Value {
    json!({"name": "request-success-rate", "thresholdRange": {"min": 99}, "interval": "1m"})
}

/// Each setting probed, with a value that is valid where the setting applies.
pub(super) fn samples() -> Vec<(&'static str, Value)> {
    vec![
        (
            "spec.autoscalerRef",
            json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": "podinfo"}),
        ),
        (
            "spec.ingressRef",
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "name": "podinfo"}),
        ),
        (
            "spec.metricsServer",
            json!("http://prometheus.istio-system:9090"),
        ),
        ("spec.progressDeadlineSeconds", json!(60)),
        ("spec.revertOnDeletion", json!(true)),
        (
            "spec.routeRef",
            json!({"apiVersion": "apisix.apache.org/v2", "kind": "ApisixRoute", "name": "podinfo"}),
        ),
        ("spec.skipAnalysis", json!(true)),
        ("spec.suspend", json!(true)),
        (
            "spec.upstreamRef",
            json!({"apiVersion": "gloo.solo.io/v1", "kind": "Upstream", "name": "podinfo"}),
        ),
        ("spec.analysis.abortScaleDownDelaySeconds", json!(30)),
        (
            "spec.analysis.alerts",
            json!([{"name": "on-call", "severity": "warn", "providerRef": {"name": "on-call"}}]),
        ),
        (
            "spec.analysis.antiAffinity",
            json!({"preferredDuringSchedulingIgnoredDuringExecution": {"weight": 80}}),
        ),
        ("spec.analysis.autoPromotionEnabled", json!(false)),
        ("spec.analysis.autoPromotionSeconds", json!(30)),
        (
            "spec.analysis.backgroundAnalysis",
            json!({"startingStep": 1, "metrics": [
            {"name": "error-ratio", "templateRef": {"name": "error-ratio"}, "interval": "1m",
             "successCondition": "result[0] <= 0.05"}]}),
        ),
        ("spec.analysis.canaryReadyThreshold", json!(100)),
        ("spec.analysis.dynamicStableScale", json!(true)),
        ("spec.analysis.interval", json!("30s")),
        ("spec.analysis.iterations", json!(5)),
        ("spec.analysis.managedRoutes", json!([{"name": "testers"}])),
        (
            "spec.analysis.match",
            json!([{"headers": {"x-canary": {"exact": "insider"}}}]),
        ),
        ("spec.analysis.maxSurge", json!(2)),
        ("spec.analysis.maxUnavailable", json!(1)),
        ("spec.analysis.maxWeight", json!(60)),
        ("spec.analysis.metrics", json!([metric()])),
        ("spec.analysis.mirror", json!(true)),
        ("spec.analysis.mirrorWeight", json!(50)),
        (
            "spec.analysis.postPromotionAnalysis",
            json!({"iterations": 2, "metrics": [metric()]}),
        ),
        (
            "spec.analysis.prePromotionAnalysis",
            json!({"metrics": [metric()]}),
        ),
        ("spec.analysis.previewReplicaCount", json!(1)),
        ("spec.analysis.primaryReadyThreshold", json!(100)),
        ("spec.analysis.scaleDownDelaySeconds", json!(30)),
        (
            "spec.analysis.sessionAffinity",
            json!({"cookieName": "canary-session", "maxAge": 3600}),
        ),
        ("spec.analysis.stepWeight", json!(20)),
        ("spec.analysis.stepWeightPromotion", json!(50)),
        ("spec.analysis.stepWeights", json!([10, 20, 50])),
        (
            "spec.analysis.steps",
            json!([{"setWeight": 40}, {"pause": {"duration": "1m"}}]),
        ),
        ("spec.analysis.threshold", json!(2)),
        (
            "spec.analysis.webhooks",
            json!([{"name": "load-test", "url": "http://flagger-loadtester.test/",
            "metadata": {"cmd": "hey -z 1m -q 10 -c 2 http://podinfo-canary.test:9898/"}}]),
        ),
        ("spec.service.apex", json!({"labels": {"team": "web"}})),
        ("spec.service.appProtocol", json!("http")),
        ("spec.service.backendTimeout", json!("10s")),
        ("spec.service.backends", json!(["backend.test"])),
        ("spec.service.canary", json!({"labels": {"team": "web"}})),
        (
            "spec.service.corsPolicy",
            json!({"allowOrigins": [{"exact": "https://example.com"}], "allowMethods": ["GET"], "maxAge": "24h"}),
        ),
        ("spec.service.delegation", json!(true)),
        (
            "spec.service.gatewayRefs",
            json!([{"name": "public-gateway", "namespace": "istio-system"}]),
        ),
        (
            "spec.service.gateways",
            json!(["istio-system/public-gateway"]),
        ),
        (
            "spec.service.headers",
            json!({"request": {"add": {"x-released-by": "serin"}}}),
        ),
        ("spec.service.headless", json!(true)),
        ("spec.service.hosts", json!(["app.example.com"])),
        ("spec.service.match", json!([{"uri": {"prefix": "/api"}}])),
        ("spec.service.meshName", json!("global")),
        (
            "spec.service.mirror",
            json!([{"backendRef": {"name": "podinfo-shadow", "port": 9898}, "percent": 10}]),
        ),
        ("spec.service.name", json!("web")),
        ("spec.service.portDiscovery", json!(true)),
        ("spec.service.portName", json!("http")),
        ("spec.service.primary", json!({"labels": {"team": "web"}})),
        (
            "spec.service.retries",
            json!({"attempts": 3, "perTryTimeout": "1s"}),
        ),
        ("spec.service.rewrite", json!({"uri": "/"})),
        ("spec.service.targetPort", json!(9898)),
        ("spec.service.timeout", json!("30s")),
        ("spec.service.trafficDistribution", json!("PreferClose")),
        (
            "spec.service.trafficPolicy",
            json!({"tls": {"mode": "ISTIO_MUTUAL"}}),
        ),
        (
            "spec.service.unmanagedMetadata",
            json!({"annotations": ["owner.example.com/team"]}),
        ),
    ]
}

/// Settings that only mean something beside another one, which the probe sets too.
fn companions(path: &str) -> Vec<(&'static str, Value)> {
    match path {
        "spec.analysis.mirrorWeight" => vec![("spec.analysis.mirror", json!(true))],
        // A canary's weights come from one of stepWeight and stepWeights.
        "spec.analysis.stepWeights" => vec![
            ("spec.analysis.stepWeight", Value::Null),
            ("spec.analysis.maxWeight", Value::Null),
        ],
        _ => Vec::new(),
    }
}

/// Sets the object member at a dotted path, creating the objects on the way.
fn set(document: &mut Value, path: &str, value: Value) {
    let mut at = document;
    let mut parts = path.split('.').peekable();
    while let Some(part) = parts.next() {
        if parts.peek().is_none() {
            at[part] = value;
            return;
        }
        if !at[part].is_object() {
            at[part] = json!({});
        }
        at = &mut at[part];
    }
}

/// What validation says once the setting is added to a context's Canary; empty when the setting is
/// used there. Choosing another strategy counts as a refusal too.
fn refusals(context: &Context, path: &str, value: &Value) -> Vec<String> {
    let original = base(context);
    let strategy = |canary: &Canary| canary.spec.analysis().map(|a| a.strategy());
    let mut probe = original.clone();
    for (companion, value) in companions(path) {
        set(&mut probe, companion, value);
    }
    set(&mut probe, path, value.clone());
    let canary = match serde_json::from_value::<Canary>(probe) {
        Ok(canary) => canary,
        Err(e) => return vec![format!("not readable: {e}")],
    };
    // The context's Canary is valid alone, so whatever validation now says comes from the setting,
    // on whichever field it is reported (a conflict may be reported on the other field).
    let mut found: Vec<String> = validate(&canary).iter().map(ToString::to_string).collect();
    let before: Canary = serde_json::from_value(original).expect("every context reads as a Canary");
    if found.is_empty() && strategy(&canary) != strategy(&before) {
        found.push(format!("{path}: selects another strategy"));
    }
    found
}

/// The section of the reference page: one row per setting, a mark per provider and strategy.
pub(super) fn section() -> String {
    let contexts = contexts();
    let mut out = String::from(
        "\n## Where each Canary setting applies\n\n\
         Found by the operator's own validation (what `kubectl serin lint` runs): each setting, at a\n\
         sample value, is added to a minimal valid Canary of each provider and strategy. A mark means\n\
         the Canary is still valid and keeps its strategy, so the operator acts on the setting there;\n\
         elsewhere validation refuses it, with the message the notes below quote once per setting.\n\
         Fields inside a setting follow it.\n\n| setting |",
    );
    for context in &contexts {
        let _ = write!(out, " {} |", context.heading);
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(contexts.len()));
    out.push('\n');
    let mut notes = Vec::new();
    let mut bad_values = Vec::new();
    for (path, value) in samples() {
        let _ = write!(out, "| `{path}` |");
        let mut first_refusal = None;
        let mut used_in = None;
        for context in &contexts {
            let refused = refusals(context, path, &value);
            out.push_str(if refused.is_empty() { " ✓ |" } else { " |" });
            if refused.is_empty() {
                used_in.get_or_insert(context);
            } else if first_refusal.is_none() {
                first_refusal = refused.into_iter().next().map(|m| (&context.heading, m));
            }
        }
        out.push('\n');
        if let Some((heading, message)) = first_refusal {
            notes.push(format!("`{path}`, in {heading}: {message}"));
        }
        if let Some(context) = used_in {
            bad_values.extend(refused_values(context, path, &value));
        }
    }
    out.push_str(
        "\nWhat validation says where a setting does not apply (the first refusal of each):\n\n",
    );
    for note in notes {
        let _ = writeln!(out, "- {}", note.replace('|', "\\|"));
    }
    out.push_str(
        "\n## What validation refuses\n\n\
         Values the schema lets through and the operator's validation refuses, found the same way: in\n\
         each sample above, every number is set to -1 and to 0, every duration to `10x` and every URL\n\
         to `ftp://example.com`, one at a time. A Canary with such a value is not acted on: its status\n\
         and an Event carry the message, and `kubectl serin lint` prints it.\n\n\
         | field | value | message |\n|---|---|---|\n",
    );
    for (field, value, message) in bad_values {
        let _ = writeln!(
            out,
            "| `{field}` | `{value}` | {} |",
            message.replace('|', "\\|")
        );
    }
    out
}

/// The wrong values each leaf of a sample is tried with: numbers below one, a duration without a
/// unit validation knows, a URL of another scheme.
fn wrong_values(value: &Value) -> Vec<Value> {
    match value {
        Value::Number(_) => vec![json!(-1), json!(0)],
        Value::String(s) if s.starts_with("http://") => vec![json!("ftp://example.com")],
        Value::String(s)
            if s.len() > 1
                && s.ends_with(['s', 'm', 'h'])
                && s.trim_end_matches(['s', 'm', 'h'])
                    .chars()
                    .all(|c| c.is_ascii_digit()) =>
        {
            vec![json!("10x")]
        }
        _ => Vec::new(),
    }
}

/// JSON pointers to the leaves of a value, with their values.
fn leaves(value: &Value, pointer: String, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                leaves(child, format!("{pointer}/{key}"), out);
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                leaves(child, format!("{pointer}/{index}"), out);
            }
        }
        leaf => out.push((pointer, leaf.clone())),
    }
}

/// Each wrong value of each leaf of a setting's sample that validation refuses, with its message.
fn refused_values(context: &Context, path: &str, sample: &Value) -> Vec<(String, Value, String)> {
    let mut valid = base(context);
    for (companion, value) in companions(path) {
        set(&mut valid, companion, value);
    }
    set(&mut valid, path, sample.clone());
    let root = format!("/{}", path.replace('.', "/"));
    let mut found = Vec::new();
    leaves(sample, root.clone(), &mut found);
    let mut out = Vec::new();
    for (pointer, value) in found {
        for wrong in wrong_values(&value) {
            let mut probe = valid.clone();
            if let Some(slot) = probe.pointer_mut(&pointer) {
                *slot = wrong.clone();
            }
            let Ok(canary) = serde_json::from_value::<Canary>(probe) else {
                continue;
            };
            let field: String = pointer[1..]
                .split('/')
                .map(|part| {
                    if part.parse::<usize>().is_ok() {
                        "[]".to_string()
                    } else {
                        format!(".{part}")
                    }
                })
                .collect::<String>()
                .trim_start_matches('.')
                .replace(".[]", "[]");
            if let Some(error) = validate(&canary).first()
                && !out.iter().any(|(f, w, _)| *f == field && *w == wrong)
            {
                out.push((field, wrong, error.to_string()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_context_is_valid_on_its_own() {
        for context in contexts() {
            let canary: Canary = serde_json::from_value(base(&context)).unwrap();
            assert_eq!(validate(&canary), Vec::new(), "{}", context.heading);
        }
    }

    /// Every setting of the Canary's schema is probed, so a new one cannot miss the table.
    #[test]
    fn every_setting_of_the_schema_has_a_sample() {
        let crds = crate::crd::crds();
        let schema = crds[0].spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .unwrap();
        let spec = &schema.properties.as_ref().unwrap()["spec"];
        let mut settings = Vec::new();
        let children = |path: &str, schema: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps| {
            schema
                .properties
                .as_ref()
                .unwrap()
                .keys()
                .map(|k| format!("{path}.{k}"))
                .collect::<Vec<_>>()
        };
        let spec_properties = spec.properties.as_ref().unwrap();
        settings.extend(children("spec", spec));
        settings.extend(children("spec.service", &spec_properties["service"]));
        settings.extend(children("spec.analysis", &spec_properties["analysis"]));
        // The containers, the two fields every Canary has, and the provider, which is a column.
        let not_probed = [
            "spec.analysis",
            "spec.canaryAnalysis",
            "spec.service",
            "spec.provider",
            "spec.targetRef",
            "spec.service.port",
        ];
        let probed: Vec<&str> = samples().iter().map(|(path, _)| *path).collect();
        let missing: Vec<&String> = settings
            .iter()
            .filter(|s| !not_probed.contains(&s.as_str()) && !probed.contains(&s.as_str()))
            .collect();
        assert!(missing.is_empty(), "no sample for {missing:?}");
    }

    /// Flagger's fields for the routers Serin does not have: refused everywhere, with that reason.
    const OTHER_ROUTERS: [&str; 5] = [
        "spec.ingressRef",
        "spec.routeRef",
        "spec.upstreamRef",
        "spec.service.backends",
        "spec.service.meshName",
    ];

    #[test]
    fn every_sample_is_used_somewhere_but_the_fields_of_other_routers() {
        let contexts = contexts();
        let mut unused = Vec::new();
        for (path, value) in samples() {
            let all: Vec<Vec<String>> =
                contexts.iter().map(|c| refusals(c, path, &value)).collect();
            if !all.iter().any(Vec::is_empty) {
                unused.push(format!("{path}: {:?}", all[0]));
            }
        }
        let expected: Vec<&str> = OTHER_ROUTERS.to_vec();
        let names: Vec<&str> = unused
            .iter()
            .map(|u| u.split(':').next().unwrap())
            .collect();
        assert_eq!(
            names,
            expected,
            "refused everywhere:\n{}",
            unused.join("\n")
        );
    }
}
