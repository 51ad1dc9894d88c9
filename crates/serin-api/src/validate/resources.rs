//! The checks of the resources a Canary refers to: MetricTemplate and AlertProvider.

use super::report::{FieldError, Report, is_absolute_http_url};
use crate::{AlertProvider, MetricTemplate};

/// Checks a MetricTemplate and returns every problem found.
pub fn validate_metric_template(template: &MetricTemplate) -> Vec<FieldError> {
    let mut r = Report::default();
    let provider = &template.spec.provider;
    match provider.type_.as_str() {
        "prometheus" => {
            match provider.address.as_deref() {
                Some(address) => r.prometheus_address("spec.provider.address", address),
                None => r.add(
                    "spec.provider.address",
                    "missing; write the Prometheus URL, e.g. http://prometheus.istio-system:9090",
                ),
            }
            if template.spec.query.trim().is_empty() {
                r.add("spec.query", "missing or empty; a prometheus template needs its query, e.g. sum(rate(...{namespace=\"{{ namespace }}\"}[{{ interval }}]))");
            }
            web_fields_unused(&mut r, provider);
        }
        kind if VALUE_PROVIDERS.iter().any(|p| p.kind == kind) => {
            validate_value_provider(&mut r, template, kind);
        }
        "web" => validate_web_provider(&mut r, provider),
        "job" => validate_job_provider(&mut r, template),
        other => {
            let known = crate::metric_template::METRIC_PROVIDER_TYPES.contains(&other);
            r.add(
                "spec.provider.type",
                format!(
                    "{} provider {other:?}; write prometheus, graphite, datadog, newrelic, dynatrace, influxdb, cloudwatch, stackdriver, keptn, splunk, web or job (the metrics providers Serin reads yet)",
                    if known {
                        "not supported yet:"
                    } else {
                        "unknown"
                    },
                ),
            );
            if let Some(address) = provider.address.as_deref() {
                r.prometheus_address("spec.provider.address", address);
            }
        }
    }
    if provider.type_ != "job" && provider.job.is_some() {
        r.add(
            "spec.provider.job",
            "only a job provider runs a Job; remove it, or set provider.type: job",
        );
    }
    r.query_length("spec.query", &template.spec.query);
    r.errors
}

/// What a provider besides Prometheus needs in its template, in Flagger's terms.
struct ValueProvider {
    kind: &'static str,
    /// An example address; `required` when the provider has no default one.
    address: (&'static str, bool),
    /// The Secret's keys, when the provider cannot be queried without them.
    secret_keys: Option<&'static str>,
    /// An example query.
    query: &'static str,
}

const VALUE_PROVIDERS: [ValueProvider; 9] = [
    ValueProvider {
        kind: "graphite",
        address: ("http://graphite.monitoring", true),
        secret_keys: None,
        query: "target=sumSeries(app.{{ target }}.errors)&from=-5min",
    },
    ValueProvider {
        kind: "datadog",
        address: ("https://api.datadoghq.eu", false),
        secret_keys: Some("datadog_api_key and datadog_application_key"),
        query: "sum:trace.http.request.errors{service:{{ target }}}.as_count()",
    },
    ValueProvider {
        kind: "newrelic",
        address: ("https://insights-api.eu.newrelic.com", false),
        secret_keys: Some("newrelic_account_id and newrelic_query_key"),
        query: "SELECT percentage(count(*), WHERE error IS true) AS result FROM Transaction WHERE appName = '{{ target }}'",
    },
    ValueProvider {
        kind: "dynatrace",
        address: ("https://abc12345.live.dynatrace.com", true),
        secret_keys: Some("dynatrace_token"),
        query: "builtin:service.response.time:avg:filter(eq(\"dt.entity.service\",\"{{ target }}\"))",
    },
    ValueProvider {
        kind: "influxdb",
        address: ("http://influxdb.monitoring:8086", true),
        secret_keys: None,
        query: "from(bucket: \"app\") |> range(start: -1m) |> filter(fn: (r) => r.app == \"{{ target }}\") |> count()",
    },
    ValueProvider {
        kind: "cloudwatch",
        address: ("https://monitoring.us-east-1.amazonaws.com", false),
        secret_keys: None,
        query: "[{\"Id\": \"e1\", \"Expression\": \"m1 / m2\"}, {\"Id\": \"m1\", \"MetricStat\": {...}, \"ReturnData\": false}, ...]",
    },
    ValueProvider {
        kind: "splunk",
        address: ("https://api.us1.signalfx.com", true),
        secret_keys: Some("sf_token_key"),
        query: "data('spans.count', filter=filter('sf_service', '{{ target }}') and filter('sf_error', 'true')).sum().publish()",
    },
    ValueProvider {
        kind: "stackdriver",
        address: ("https://monitoring.googleapis.com", false),
        secret_keys: Some(
            "project (and serviceAccountKey, unless the operator has Workload Identity)",
        ),
        query: "fetch k8s_container | metric 'logging.googleapis.com/user/errors' | filter resource.container_name == '{{ target }}' | align rate(1m) | every 1m | group_by [], [value: sum(value.errors)]",
    },
    ValueProvider {
        kind: "keptn",
        address: ("", false),
        secret_keys: None,
        query: "keptnmetric/{{ namespace }}/podinfo-errors, or analysis/{{ namespace }}/podinfo-slo/5m/workload={{ target }}",
    },
];

/// A template of a provider besides Prometheus: its address (when it has no default), its Secret
/// (when its API needs keys), its query, and none of the other providers' fields.
fn validate_value_provider(r: &mut Report, template: &MetricTemplate, kind: &str) {
    let Some(wanted) = VALUE_PROVIDERS.iter().find(|p| p.kind == kind) else {
        return;
    };
    let provider = &template.spec.provider;
    let (example, required) = wanted.address;
    match provider.address.as_deref() {
        // Splunk's stream address may be written as its WebSocket URL, as Flagger allows.
        Some(address) if kind == "splunk" => provider_address(
            r,
            &address
                .replacen("wss://", "https://", 1)
                .replacen("ws://", "http://", 1),
            example,
        ),
        Some(address) => provider_address(r, address, example),
        None if required => r.add(
            "spec.provider.address",
            format!("missing; write the URL of the {kind} API, e.g. {example}"),
        ),
        None => {}
    }
    if let (Some(keys), None) = (wanted.secret_keys, &provider.secret_ref) {
        r.add(
            "spec.provider.secretRef",
            format!("missing; {kind} needs a Secret in the template's namespace with {keys}"),
        );
    }
    if template.spec.query.trim().is_empty() {
        r.add(
            "spec.query",
            format!(
                "missing or empty; write the {kind} query, e.g. {}",
                wanted.query
            ),
        );
    }
    if kind == "cloudwatch" {
        cloudwatch_region(r, provider);
    }
    if kind == "keptn" {
        keptn_fields(r, template);
    }
    web_fields_unused(r, provider);
}

/// Keptn's query names a KeptnMetric or an AnalysisDefinition; the objects are read through the
/// Kubernetes API, so an address or a Secret would be ignored.
fn keptn_fields(r: &mut Report, template: &MetricTemplate) {
    let provider = &template.spec.provider;
    if provider.address.is_some() {
        r.add(
            "spec.provider.address",
            "keptn reads KeptnMetrics and Analyses through the Kubernetes API; remove it",
        );
    }
    if provider.secret_ref.is_some() {
        r.add(
            "spec.provider.secretRef",
            "keptn reads through the operator's Kubernetes access and needs no Secret; remove it",
        );
    }
    let kind = template
        .spec
        .query
        .trim()
        .split('/')
        .next()
        .unwrap_or_default();
    if !template.spec.query.trim().is_empty()
        && !["keptnmetric", "keptnmetrics", "analysis", "analyses"]
            .contains(&kind.to_lowercase().as_str())
    {
        r.add(
            "spec.query",
            format!("{kind:?} is not a Keptn resource; write keptnmetric/<namespace>/<name> or analysis/<namespace>/<analysis definition>/<duration>/<key=value;...>"),
        );
    }
}

/// CloudWatch's region: `provider.region`, or the one its address names.
fn cloudwatch_region(r: &mut Report, provider: &crate::metric_template::MetricProvider) {
    match provider.region.as_deref().map(str::trim) {
        Some(region) if !region.is_empty() => {
            if !crate::metric_template::is_aws_region(region) {
                r.add(
                    "spec.provider.region",
                    format!("{region:?} is not an AWS region; write one such as us-east-1"),
                );
            }
        }
        _ if provider
            .address
            .as_deref()
            .is_some_and(|a| a.contains("://monitoring.")) => {}
        _ => r.add(
            "spec.provider.region",
            "missing; write the AWS region of the metrics, e.g. region: us-east-1",
        ),
    }
}

/// The fields only a `web` provider (or CloudWatch's `region`) reads, refused on the others.
fn web_fields_unused(r: &mut Report, provider: &crate::metric_template::MetricProvider) {
    if provider.region.is_some() && provider.type_ != "cloudwatch" {
        r.add(
            "spec.provider.region",
            "only a cloudwatch provider uses it; remove it",
        );
    }
    for (field, set) in [
        ("method", provider.method.is_some()),
        ("body", provider.body.is_some()),
        ("jsonPath", provider.json_path.is_some()),
        ("timeoutSeconds", provider.timeout_seconds.is_some()),
    ] {
        if set {
            r.add(
                format!("spec.provider.{field}"),
                "only a web provider uses it; remove it, or set provider.type: web",
            );
        }
    }
}

fn provider_address(r: &mut Report, address: &str, example: &str) {
    if !is_absolute_http_url(address) {
        r.add(
            "spec.provider.address",
            format!("{address:?} is not an absolute URL; write http:// or https:// followed by a host, e.g. {example:?}"),
        );
    }
}

/// A `job` provider: a Job spec that decodes as `batch/v1` JobSpec with at least one container,
/// and none of the other providers' fields.
fn validate_job_provider(r: &mut Report, template: &MetricTemplate) {
    let provider = &template.spec.provider;
    match &provider.job {
        None => r.add(
            "spec.provider.job",
            "missing; write the Job to run, e.g. {spec: {backoffLimit: 0, template: {spec: {restartPolicy: Never, containers: [{name: check, image: curlimages/curl, command: [curl, -sf, http://podinfo-canary:9898/healthz]}]}}}}",
        ),
        Some(job) => {
            match serde_json::from_value::<k8s_openapi::api::batch::v1::JobSpec>(job.spec.clone()) {
                Err(e) => r.add(
                    "spec.provider.job.spec",
                    format!("is not a batch/v1 JobSpec: {e}; write it as a Job's spec"),
                ),
                Ok(spec) if spec.template.spec.as_ref().is_none_or(|p| p.containers.is_empty()) => r.add(
                    "spec.provider.job.spec.template.spec.containers",
                    "missing; a Job runs at least one container",
                ),
                Ok(_) => {}
            }
        }
    }
    for (field, set) in [
        ("address", provider.address.is_some()),
        ("method", provider.method.is_some()),
        ("body", provider.body.is_some()),
        ("jsonPath", provider.json_path.is_some()),
        ("timeoutSeconds", provider.timeout_seconds.is_some()),
        ("secretRef", provider.secret_ref.is_some()),
    ] {
        if set {
            r.add(
                format!("spec.provider.{field}"),
                "a job metric runs its Job and uses none of the HTTP fields; remove it",
            );
        }
    }
    if !template.spec.query.trim().is_empty() {
        r.add(
            "spec.query",
            "a job metric passes when its Job completes and has no query; remove it",
        );
    }
}

/// The fields of a `web` provider: an http(s) address (placeholders allowed), GET, POST or PUT,
/// a JSONPath, and a timeout within [`crate::limits::MAX_WEB_METRIC_TIMEOUT`].
fn validate_web_provider(r: &mut Report, provider: &crate::MetricProvider) {
    match provider.address.as_deref() {
        // Placeholders (`{{ args.host }}`) are filled in at run time; any word stands in for them.
        // An address that starts with one (the whole URL from a Secret, as Argo's examples keep
        // it) is checked when it is rendered.
        Some(address)
            if !address.trim_start().starts_with("{{")
                && !is_absolute_http_url(&without_placeholders(address)) =>
        {
            r.add(
                "spec.provider.address",
                format!("{address:?} is not an absolute URL; write http:// or https:// followed by a host, e.g. \"http://checks.test/api/{{{{ args.service }}}}\""),
            );
        }
        Some(_) => {}
        None => r.add(
            "spec.provider.address",
            "missing; a web provider needs the URL to call, e.g. http://checks.test/api/health",
        ),
    }
    if let Some(method) = provider.method.as_deref()
        && !matches!(method, "GET" | "POST" | "PUT")
    {
        r.add(
            "spec.provider.method",
            format!("{method:?} is not supported; write GET, POST or PUT"),
        );
    }
    if let Some(path) = provider.json_path.as_deref() {
        let inner = path
            .trim()
            .strip_prefix('{')
            .and_then(|p| p.strip_suffix('}'))
            .unwrap_or(path.trim());
        if !inner.starts_with('$') {
            r.add(
                "spec.provider.jsonPath",
                format!("{path:?} is not a JSONPath; start it at the document's root, e.g. {{$.data.ok}} or $.data.ok"),
            );
        }
    }
    let max = crate::limits::MAX_WEB_METRIC_TIMEOUT.as_secs();
    if let Some(seconds) = provider.timeout_seconds
        && !(1..=i64::try_from(max).unwrap_or(i64::MAX)).contains(&seconds)
    {
        r.add(
            "spec.provider.timeoutSeconds",
            format!("{seconds} is out of range; write a whole number of seconds from 1 to {max}, e.g. 10"),
        );
    }
}

/// `text` with each `{{ ... }}` replaced by a word, for checks of the text around placeholders.
fn without_placeholders(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        let Some(close) = rest[open..].find("}}") else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push('x');
        rest = &rest[open + close + 2..];
    }
    out.push_str(rest);
    out
}

/// Checks an AlertProvider and returns every problem found.
pub fn validate_alert_provider(provider: &AlertProvider) -> Vec<FieldError> {
    let mut r = Report::default();
    let spec = &provider.spec;
    let types = crate::alert_provider::ALERT_PROVIDER_TYPES;
    if !types.contains(&spec.type_.as_str()) {
        r.add(
            "spec.type",
            format!(
                "unknown type {:?}; write one of {}",
                spec.type_,
                types.join(", ")
            ),
        );
    }
    match (&spec.address, &spec.secret_ref) {
        (Some(address), _) => r.url("spec.address", address),
        (None, None) => r.add(
            "spec.address",
            "missing; write the webhook URL, or set secretRef to a Secret with an address key",
        ),
        (None, Some(_)) => {}
    }
    if let Some(proxy) = spec.proxy.as_deref() {
        r.url("spec.proxy", proxy);
    }
    r.errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(spec: serde_json::Value) -> Vec<String> {
        let template: MetricTemplate = serde_json::from_value(json!({
            "apiVersion": "serin.dev/v1beta1",
            "kind": "MetricTemplate",
            "metadata": {"name": "checks", "namespace": "test"},
            "spec": spec,
        }))
        .unwrap();
        validate_metric_template(&template)
            .into_iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn a_web_template_needs_no_query_and_checks_its_request() {
        let web = |provider: serde_json::Value| {
            let mut base =
                json!({"type": "web", "address": "http://checks.test/api/{{ args.service-name }}"});
            for (key, value) in provider.as_object().unwrap() {
                base[key] = value.clone();
            }
            errors(json!({ "provider": base }))
        };
        assert!(web(json!({})).is_empty(), "{:?}", web(json!({})));
        assert!(
            web(json!({"method": "POST", "body": "{\"q\": 1}", "jsonPath": "{$.data.ok}", "timeoutSeconds": 60}))
                .is_empty()
        );
        assert!(web(json!({"jsonPath": "$.data[0].value"})).is_empty());
        let method = web(json!({"method": "DELETE"}));
        assert!(
            method[0].starts_with("spec.provider.method: ")
                && method[0].contains("GET, POST or PUT"),
            "{method:?}"
        );
        let path = web(json!({"jsonPath": "data.ok"}));
        assert!(
            path[0].starts_with("spec.provider.jsonPath: ") && path[0].contains("$.data.ok"),
            "{path:?}"
        );
        for seconds in [0, 61] {
            let timeout = web(json!({"timeoutSeconds": seconds}));
            assert!(
                timeout[0].starts_with("spec.provider.timeoutSeconds: ")
                    && timeout[0].contains("1 to 60"),
                "{timeout:?}"
            );
        }
        for address in [
            json!("checks.test/api"),
            json!("ftp://checks.test"),
            json!(null),
            json!("http://{{ args.host }} x/"),
        ] {
            let error = web(json!({ "address": address }));
            assert!(error[0].starts_with("spec.provider.address: "), "{error:?}");
        }
        assert!(web(json!({"address": "https://{{ args.host }}:8443/health"})).is_empty());
    }

    #[test]
    fn a_prometheus_template_needs_its_query_and_no_web_fields() {
        let provider = json!({"type": "prometheus", "address": "http://prometheus:9090"});
        assert!(errors(json!({"provider": provider, "query": "up"})).is_empty());
        let missing = errors(json!({ "provider": provider }));
        assert_eq!(missing.len(), 1);
        assert!(missing[0].starts_with("spec.query: missing"), "{missing:?}");
        let mut with_web_fields = provider.clone();
        with_web_fields["jsonPath"] = json!("$.x");
        let extra = errors(json!({"provider": with_web_fields, "query": "up"}));
        assert!(
            extra[0].starts_with("spec.provider.jsonPath: only a web provider"),
            "{extra:?}"
        );
    }
}
