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
    /// `{{` without a closing `}}`.
    #[error("unclosed {{{{ in the query template")]
    Unclosed,
}

/// Renders `template` for `context`, strictly.
pub fn render(template: &str, context: &QueryContext) -> Result<String, RenderError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or(RenderError::Unclosed)?;
        let expression = after[..end].trim().trim_start_matches('.').trim();
        out.push_str(&value_of(expression, context)?);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

fn value_of(expression: &str, context: &QueryContext) -> Result<String, RenderError> {
    let value = match expression {
        "name" => &context.name,
        "namespace" => &context.namespace,
        "target" => &context.target,
        "service" => &context.service,
        "ingress" => &context.ingress,
        "route" => &context.route,
        "interval" => &context.interval,
        _ => {
            let Some(key) = expression.strip_prefix("variables.") else {
                return Err(RenderError::UnknownPlaceholder(expression.to_string()));
            };
            return context
                .variables
                .get(key)
                .cloned()
                .ok_or_else(|| RenderError::MissingVariable(key.to_string()));
        }
    };
    Ok(value.clone())
}

/// Collapses every run of white space to one space, as Flagger does before sending a query.
pub fn collapse_whitespace(query: &str) -> String {
    let mut out = String::with_capacity(query.len());
    let mut in_space = false;
    for c in query.chars() {
        if c.is_whitespace() {
            if !in_space {
                out.push(' ');
            }
            in_space = true;
        } else {
            out.push(c);
            in_space = false;
        }
    }
    out
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

/// Flagger's query for a builtin Istio metric (`request-success-rate` in percent,
/// `request-duration` as the p99 in milliseconds), rendered and collapsed; `None` for other names.
pub fn builtin_query(metric: &str, context: &QueryContext) -> Option<String> {
    let template = match metric {
        "request-success-rate" => REQUEST_SUCCESS_RATE,
        "request-duration" => REQUEST_DURATION,
        _ => return None,
    };
    let rendered =
        render(template, context).expect("builtin queries use only defined placeholders");
    Some(collapse_whitespace(&rendered))
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
        let query = "histogram_quantile({{ variables.quantile }}, rate(x{ns=\"{{ namespace }}\",w=~\"{{target}}-primary\"}[{{ interval }}])) # {{ .name }}";
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
        assert_eq!(
            render("sum({{ target ", &podinfo()).unwrap_err(),
            RenderError::Unclosed
        );
    }
}
