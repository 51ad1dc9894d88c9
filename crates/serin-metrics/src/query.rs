//! Building the PromQL of a canary metric: Flagger's builtin queries and MetricTemplate rendering.
//!
//! Templates use Flagger's placeholders — `{{ name }}`, `{{ namespace }}`, `{{ target }}`,
//! `{{ service }}`, `{{ ingress }}`, `{{ route }}`, `{{ interval }}` and `{{ variables.KEY }}`, and
//! Argo Rollouts' `{{ args.NAME }}` (also written `{{args.NAME}}`) —
//! and, as in Flagger (`missingkey=error`), anything else is an error rather than an empty string.
//! Only placeholders are filled in: templates are written by tenants, and a template language with
//! loops and expressions would let one of them spend the operator's memory and threads.

use serin_api::limits::{MAX_QUERY_TEMPLATE_BYTES, MAX_RENDERED_QUERY_BYTES, bytes, quoted};
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
    /// The analysis step's `args`, resolved to their values.
    pub args: BTreeMap<String, String>,
}

/// Why a template could not be rendered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RenderError {
    /// `{{ variables.KEY }}` with no such key in `templateVariables`.
    #[error(
        "template variable {0:?} is not set: add it to the metric's templateVariables ({0}: <value>)"
    )]
    MissingVariable(String),
    /// `{{ args.NAME }}` with no such arg in the analysis step.
    #[error(
        "analysis arg {0:?} is not set: add it to the step's analysis.args (- name: {0}, value: <value>)"
    )]
    MissingArg(String),
    /// A placeholder Flagger does not define.
    #[error(
        "unknown placeholder {{{{ {0} }}}}: use name, namespace, target, service, ingress, route, interval, variables.<key> or args.<name>"
    )]
    UnknownPlaceholder(String),
    /// Something between `{{` and `}}` that is not a placeholder (an expression, a filter), or a
    /// template statement (`{% for %}`).
    #[error(
        "{0:?} is not a placeholder: a query takes only {{{{ name }}}}, {{{{ namespace }}}}, {{{{ target }}}}, {{{{ service }}}}, {{{{ ingress }}}}, {{{{ route }}}}, {{{{ interval }}}}, {{{{ variables.<key> }}}} and {{{{ args.<name> }}}}; write the rest of the query as plain text"
    )]
    NotAPlaceholder(String),
    /// The template is not valid template syntax (e.g. `{{` without `}}`).
    #[error("the query template is invalid ({0}): write placeholders as {{{{ name }}}}")]
    Invalid(String),
    /// The template itself is longer than [`MAX_QUERY_TEMPLATE_BYTES`].
    #[error("the query is {} long, over the limit of {}: shorten it", bytes(*.0), bytes(MAX_QUERY_TEMPLATE_BYTES))]
    TemplateTooLong(usize),
    /// Filling in the placeholders would make the query longer than [`MAX_RENDERED_QUERY_BYTES`].
    #[error(
        "the rendered query would be over the limit of {}: shorten the query or the templateVariables it repeats",
        bytes(MAX_RENDERED_QUERY_BYTES)
    )]
    RenderedTooLong,
}

/// Renders `template` for `context`, strictly: each `{{ placeholder }}` (Flagger's names, and Go
/// templates' `{{-`/`-}}` white-space trimming) is replaced by its value, and anything else between
/// `{{` and `}}` is an error. The work is linear in the template and bounded by
/// [`MAX_QUERY_TEMPLATE_BYTES`] and [`MAX_RENDERED_QUERY_BYTES`], since templates come from tenants.
pub fn render(template: &str, context: &QueryContext) -> Result<String, RenderError> {
    if template.len() > MAX_QUERY_TEMPLATE_BYTES {
        return Err(RenderError::TemplateTooLong(template.len()));
    }
    // Jinja's statements and comments are no PromQL: refused rather than sent to Prometheus.
    if let Some(start) = ["{%", "{#"].iter().filter_map(|m| template.find(m)).min() {
        let statement = &template[start..];
        let end = statement.find(['}']).map_or(statement.len(), |i| i + 1);
        return Err(RenderError::NotAPlaceholder(quoted(&statement[..end])));
    }
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    let mut trim_next = false;
    let push = |out: &mut String, piece: &str| {
        if out.len() + piece.len() > MAX_RENDERED_QUERY_BYTES {
            return Err(RenderError::RenderedTooLong);
        }
        out.push_str(piece);
        Ok(())
    };
    while let Some(open) = rest.find("{{") {
        let mut text = &rest[..open];
        if trim_next {
            text = text.trim_start();
        }
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            return Err(RenderError::Invalid(format!(
                "{{{{ at byte {} has no closing }}}}",
                template.len() - rest.len() + open
            )));
        };
        let mut inner = &after[..close];
        // Go's trim markers need white space after `{{-` and before `-}}`.
        let trim_before = inner.starts_with("- ") || inner.starts_with("-\t");
        if trim_before {
            inner = &inner[1..];
            text = text.trim_end();
        }
        trim_next = inner.ends_with(" -") || inner.ends_with("\t-");
        if trim_next {
            inner = &inner[..inner.len() - 1];
        }
        push(&mut out, text)?;
        push(&mut out, placeholder(inner.trim(), context)?)?;
        rest = &after[close + 2..];
    }
    push(&mut out, if trim_next { rest.trim_start() } else { rest })?;
    Ok(out)
}

/// The value of one placeholder (the text between `{{` and `}}`, trimmed).
fn placeholder<'a>(name: &str, context: &'a QueryContext) -> Result<&'a str, RenderError> {
    let is_word = |text: &str| {
        !text.is_empty() && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    if let Some(key) = name.strip_prefix("variables.")
        && is_word(key)
    {
        return context
            .variables
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| RenderError::MissingVariable(key.to_string()));
    }
    // Argo's arg names are Kubernetes-style: `service-name`, `canary_hash`.
    if let Some(arg) = name.strip_prefix("args.")
        && !arg.is_empty()
        && arg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return context
            .args
            .get(arg)
            .map(String::as_str)
            .ok_or_else(|| RenderError::MissingArg(arg.to_string()));
    }
    Ok(match name {
        "name" => &context.name,
        "namespace" => &context.namespace,
        "target" => &context.target,
        "service" => &context.service,
        "ingress" => &context.ingress,
        "route" => &context.route,
        "interval" => &context.interval,
        _ if is_word(name) => return Err(RenderError::UnknownPlaceholder(name.to_string())),
        _ => {
            return Err(RenderError::NotAPlaceholder(quoted(&format!(
                "{{{{ {name} }}}}"
            ))));
        }
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
            args: BTreeMap::from([("service-name".to_string(), "podinfo-canary".to_string())]),
        }
    }

    #[test]
    fn args_render_with_and_without_spaces_and_a_missing_one_names_the_fix() {
        assert_eq!(
            render(
                "up{service=\"{{args.service-name}}\"} or {{ args.service-name }}",
                &podinfo()
            )
            .unwrap(),
            "up{service=\"podinfo-canary\"} or podinfo-canary"
        );
        let missing = render("{{ args.canary_hash }}", &podinfo()).unwrap_err();
        assert_eq!(missing, RenderError::MissingArg("canary_hash".into()));
        assert!(missing.to_string().contains("analysis.args"), "{missing}");
        assert!(matches!(
            render("{{ args. }}", &podinfo()).unwrap_err(),
            RenderError::NotAPlaceholder(_)
        ));
        assert!(matches!(
            render("{{ args.a b }}", &podinfo()).unwrap_err(),
            RenderError::NotAPlaceholder(_)
        ));
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

    #[test]
    fn go_trim_markers_trim_the_white_space_around_a_placeholder() {
        assert_eq!(
            render(
                "a  {{- target -}}  b {{- name }} {{ interval -}}\n",
                &podinfo()
            )
            .unwrap(),
            "apodinfobpodinfo 1m"
        );
        // Without white space after the dash it is not a marker (and not a placeholder).
        assert!(matches!(
            render("{{-target}}", &podinfo()).unwrap_err(),
            RenderError::NotAPlaceholder(_)
        ));
    }

    #[test]
    fn loops_expressions_and_filters_are_refused_without_being_evaluated() {
        for bomb in [
            r#"{% for i in [0]*20 %}{{ "x"*100000000 }}{% endfor %}"#,
            "sum(up) {% for i in [0]*100000 %}{% for j in [0]*100000 %}x{% endfor %}{% endfor %}",
            "{# a comment #} sum(up)",
            "{{ range(100000) | join }}",
            "{{ name | upper }}",
            "{{ variables.a + variables.b }}",
        ] {
            let error = render(bomb, &podinfo()).unwrap_err();
            assert!(
                matches!(error, RenderError::NotAPlaceholder(_)),
                "{bomb}: {error:?}"
            );
            assert!(
                error.to_string().contains("is not a placeholder"),
                "{error}"
            );
        }
        // A long expression is quoted cut short in the message.
        let long = format!("{{{{ {} }}}}", "x * ".repeat(1000));
        assert!(render(&long, &podinfo()).unwrap_err().to_string().len() < 600);
    }

    #[test]
    fn the_template_may_be_64_kib_and_no_longer() {
        let at_limit = "x".repeat(MAX_QUERY_TEMPLATE_BYTES);
        assert_eq!(
            render(&at_limit, &podinfo()).unwrap().len(),
            MAX_QUERY_TEMPLATE_BYTES
        );
        let over = "x".repeat(MAX_QUERY_TEMPLATE_BYTES + 1);
        let error = render(&over, &podinfo()).unwrap_err();
        assert_eq!(
            error,
            RenderError::TemplateTooLong(MAX_QUERY_TEMPLATE_BYTES + 1)
        );
        assert!(
            error.to_string().contains("65536 bytes (64 KiB)"),
            "{error}"
        );
    }

    #[test]
    fn the_rendered_query_may_be_64_kib_and_no_longer() {
        let mut context = podinfo();
        // 64 placeholders of a 1 KiB value: exactly the limit, then one byte more.
        context.variables.insert("kib".into(), "v".repeat(1024));
        let template = "{{ variables.kib }}".repeat(64);
        assert_eq!(
            render(&template, &context).unwrap().len(),
            MAX_RENDERED_QUERY_BYTES
        );
        let error = render(&format!("{template}!"), &context).unwrap_err();
        assert_eq!(error, RenderError::RenderedTooLong);
        assert!(
            error.to_string().contains("65536 bytes (64 KiB)"),
            "{error}"
        );
        // A template of 3,000 placeholders of a 1 MiB variable stops at the limit, not at 3 GB.
        context
            .variables
            .insert("mib".into(), "v".repeat(1024 * 1024));
        let amplified = "{{ variables.mib }}".repeat(3000);
        assert_eq!(
            render(&amplified, &context).unwrap_err(),
            RenderError::RenderedTooLong
        );
    }
}
