//! Building the PromQL of a canary metric: Flagger's builtin queries and MetricTemplate rendering.
//!
//! Templates use Flagger's placeholders — `{{ name }}`, `{{ namespace }}`, `{{ target }}`,
//! `{{ service }}`, `{{ ingress }}`, `{{ route }}`, `{{ interval }}` and `{{ variables.KEY }}` —
//! and, as in Flagger (`missingkey=error`), anything else is an error rather than an empty string.

use std::collections::BTreeMap;

/// The values a query's placeholders take for one canary and metric.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueryContext {
    /// The Canary's name.
    pub name: String,
    /// The Canary's namespace.
    pub namespace: String,
    /// `targetRef.name`: the canary workload (`podinfo`; the primary is `podinfo-primary`).
    pub target: String,
    /// `service.name`, or the target.
    pub service: String,
    /// `ingressRef.name`, or the target.
    pub ingress: String,
    /// `routeRef.name`, or the target.
    pub route: String,
    /// The metric's `interval` (`1m` when unset).
    pub interval: String,
    /// The metric's `templateVariables`.
    pub variables: BTreeMap<String, String>,
}

/// Why a template could not be rendered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RenderError {
    /// `{{ variables.KEY }}` with no such key in `templateVariables`.
    #[error(
        "template variable {0:?} is not set: add it to the metric's templateVariables ({0}: <value>)"
    )]
    MissingVariable(String),
    /// A placeholder Flagger does not define.
    #[error(
        "unknown placeholder {{{{ {0} }}}}: use name, namespace, target, service, ingress, route, interval or variables.<key>"
    )]
    UnknownPlaceholder(String),
    /// The template is not valid template syntax (e.g. `{{` without `}}`).
    #[error("the query template is invalid ({0}): write placeholders as {{{{ name }}}}")]
    Invalid(String),
}

const PLACEHOLDERS: [&str; 7] = [
    "name",
    "namespace",
    "target",
    "service",
    "ingress",
    "route",
    "interval",
];

/// Renders `template` for `context`, strictly.
pub fn render(template: &str, context: &QueryContext) -> Result<String, RenderError> {
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    // PromQL is not HTML, and the builtin queries' final newline is part of Flagger's text.
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .keep_trailing_newline(true)
        .build()
        .expect("the default delimiters are valid");
    env.set_syntax(syntax);
    let invalid = |e: minijinja::Error| RenderError::Invalid(e.to_string());
    let compiled = env.template_from_str(template).map_err(invalid)?;
    let values = minijinja::context! {
        name => &context.name,
        namespace => &context.namespace,
        target => &context.target,
        service => &context.service,
        ingress => &context.ingress,
        route => &context.route,
        interval => &context.interval,
        variables => context.variables.clone(),
    };
    compiled.render(values).map_err(|e| {
        if e.kind() != minijinja::ErrorKind::UndefinedError {
            return invalid(e);
        }
        // minijinja says only "undefined value"; the template's free names tell which one.
        let mut used: Vec<String> = compiled.undeclared_variables(true).into_iter().collect();
        used.sort();
        used.into_iter()
            .find_map(|used| match used.strip_prefix("variables.") {
                Some(key) if !context.variables.contains_key(key) => {
                    Some(RenderError::MissingVariable(key.to_string()))
                }
                None if !PLACEHOLDERS.contains(&used.as_str()) && used != "variables" => {
                    Some(RenderError::UnknownPlaceholder(used))
                }
                _ => None,
            })
            .unwrap_or_else(|| invalid(e))
    })
}

/// Collapses every run of white space to one space, as Flagger does before sending a query
/// (its `\s+` → `" "`), so a leading or trailing run becomes one space rather than none.
pub fn collapse_whitespace(query: &str) -> String {
    static WHITE_SPACE: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"\s+").expect("a valid pattern"));
    WHITE_SPACE.replace_all(query, " ").into_owned()
}

const REQUEST_SUCCESS_RATE: &str = r#"
    sum(
        rate(
            istio_requests_total{
                reporter="destination",
                destination_workload_namespace="{{ namespace }}",
                destination_workload=~"{{ target }}",
                response_code!~"5.*"
            }[{{ interval }}]
        )
    )
    /
    sum(
        rate(
            istio_requests_total{
                reporter="destination",
                destination_workload_namespace="{{ namespace }}",
                destination_workload=~"{{ target }}"
            }[{{ interval }}]
        )
    )
    * 100
"#;

const REQUEST_DURATION: &str = r#"
    histogram_quantile(
        0.99,
        sum(
            rate(
                istio_request_duration_milliseconds_bucket{
                    reporter="destination",
                    destination_workload_namespace="{{ namespace }}",
                    destination_workload=~"{{ target }}"
                }[{{ interval }}]
            )
        ) by (le)
    )
"#;

/// Flagger's builtin queries for the `kubernetes` provider: the app's own
/// `http_request_duration_seconds` histogram (podinfo's), scraped from the canary's pods, whose
/// names are the target's ReplicaSet's (`<target>-<hash>-<suffix>`, so primary pods do not match).
const HTTP_REQUEST_SUCCESS_RATE: &str = r#"
    sum(
        rate(
            http_request_duration_seconds_count{
                kubernetes_namespace="{{ namespace }}",
                kubernetes_pod_name=~"{{ target }}-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)",
                status!~"5.*"
            }[{{ interval }}]
        )
    )
    /
    sum(
        rate(
            http_request_duration_seconds_count{
                kubernetes_namespace="{{ namespace }}",
                kubernetes_pod_name=~"{{ target }}-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)"
            }[{{ interval }}]
        )
    )
    * 100
"#;

const HTTP_REQUEST_DURATION: &str = r#"
    histogram_quantile(
        0.99,
        sum(
            rate(
                http_request_duration_seconds_bucket{
                    kubernetes_namespace="{{ namespace }}",
                    kubernetes_pod_name=~"{{ target }}-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)"
                }[{{ interval }}]
            )
        ) by (le)
    )
"#;

/// A builtin metric's query and how its result becomes what the analysis judges.
#[derive(Clone, Debug, PartialEq)]
pub struct BuiltinQuery {
    /// The rendered, collapsed PromQL.
    pub query: String,
    /// What the result is multiplied by: 1, or 1000 for a duration measured in seconds, since
    /// `request-duration` is judged in milliseconds.
    pub scale: f64,
}

/// Flagger's query for a builtin metric (`request-success-rate` in percent, `request-duration` as
/// the p99 in milliseconds) for the routing `provider`: the app's own histogram for `kubernetes`
/// and `gatewayapi:*` (as Flagger), Istio's telemetry otherwise; `None` for other names.
pub fn builtin_query_for(
    provider: &str,
    metric: &str,
    context: &QueryContext,
) -> Option<BuiltinQuery> {
    // Flagger reads the app's own histogram for the providers without Istio telemetry of their
    // own: kubernetes, and the Gateway API router.
    let http = provider == "kubernetes" || provider.starts_with("gatewayapi");
    let (template, scale) = match (metric, http) {
        ("request-success-rate", false) => (REQUEST_SUCCESS_RATE, 1.0),
        ("request-duration", false) => (REQUEST_DURATION, 1.0),
        ("request-success-rate", true) => (HTTP_REQUEST_SUCCESS_RATE, 1.0),
        ("request-duration", true) => (HTTP_REQUEST_DURATION, 1000.0),
        _ => return None,
    };
    let rendered =
        render(template, context).expect("builtin queries use only defined placeholders");
    Some(BuiltinQuery {
        query: collapse_whitespace(&rendered),
        scale,
    })
}

/// Flagger's query for a builtin Istio metric (`request-success-rate` in percent,
/// `request-duration` as the p99 in milliseconds), rendered and collapsed; `None` for other names.
pub fn builtin_query(metric: &str, context: &QueryContext) -> Option<String> {
    builtin_query_for("istio", metric, context).map(|builtin| builtin.query)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn podinfo() -> QueryContext {
        QueryContext {
            name: "podinfo".into(),
            namespace: "test".into(),
            target: "podinfo".into(),
            service: "podinfo".into(),
            ingress: "podinfo".into(),
            route: "podinfo".into(),
            interval: "1m".into(),
            variables: BTreeMap::from([("quantile".to_string(), "0.95".to_string())]),
        }
    }

    #[test]
    fn the_kubernetes_provider_reads_the_apps_histogram_in_seconds() {
        let rate = builtin_query_for("kubernetes", "request-success-rate", &podinfo()).unwrap();
        assert_eq!(
            rate.query,
            r#" sum( rate( http_request_duration_seconds_count{ kubernetes_namespace="test", kubernetes_pod_name=~"podinfo-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)", status!~"5.*" }[1m] ) ) / sum( rate( http_request_duration_seconds_count{ kubernetes_namespace="test", kubernetes_pod_name=~"podinfo-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)" }[1m] ) ) * 100 "#
        );
        assert_eq!(rate.scale, 1.0);
        let duration = builtin_query_for("kubernetes", "request-duration", &podinfo()).unwrap();
        assert!(
            duration
                .query
                .contains("http_request_duration_seconds_bucket{")
        );
        assert_eq!(duration.scale, 1000.0);
        assert_eq!(
            builtin_query_for("istio", "request-duration", &podinfo()).map(|b| b.query),
            builtin_query("request-duration", &podinfo())
        );
        assert_eq!(
            builtin_query_for("kubernetes", "error-rate", &podinfo()),
            None
        );
    }

    #[test]
    fn builtin_queries_are_flaggers_to_the_character_after_collapsing() {
        let expected_rate = r#" sum( rate( istio_requests_total{ reporter="destination", destination_workload_namespace="test", destination_workload=~"podinfo", response_code!~"5.*" }[1m] ) ) / sum( rate( istio_requests_total{ reporter="destination", destination_workload_namespace="test", destination_workload=~"podinfo" }[1m] ) ) * 100 "#;
        assert_eq!(
            builtin_query("request-success-rate", &podinfo()).unwrap(),
            expected_rate
        );
        let expected_duration = r#" histogram_quantile( 0.99, sum( rate( istio_request_duration_milliseconds_bucket{ reporter="destination", destination_workload_namespace="test", destination_workload=~"podinfo" }[1m] ) ) by (le) ) "#;
        assert_eq!(
            builtin_query("request-duration", &podinfo()).unwrap(),
            expected_duration
        );
        assert_eq!(builtin_query("error-rate", &podinfo()), None);
    }

    #[test]
    fn templates_render_every_placeholder_and_fail_on_unknown_ones() {
        let query = "histogram_quantile({{ variables.quantile }}, rate(x{ns=\"{{ namespace }}\",w=~\"{{target}}-primary\"}[{{ interval }}])) # {{ name }}";
        assert_eq!(
            render(query, &podinfo()).unwrap(),
            "histogram_quantile(0.95, rate(x{ns=\"test\",w=~\"podinfo-primary\"}[1m])) # podinfo"
        );
        let missing = render("{{ variables.region }}", &podinfo()).unwrap_err();
        assert_eq!(missing, RenderError::MissingVariable("region".into()));
        assert!(
            missing.to_string().contains("templateVariables"),
            "{missing}"
        );
        assert_eq!(
            render("{{ workload }}", &podinfo()).unwrap_err(),
            RenderError::UnknownPlaceholder("workload".into())
        );
        assert!(matches!(
            render("sum({{ target ", &podinfo()).unwrap_err(),
            RenderError::Invalid(_)
        ));
    }
}
