//! Argo Rollouts' `setHeaderRoute` and `setMirrorRoute` steps as Serin's steps of the same name:
//! the shapes are Argo's, so only what the Canary's router cannot match is rewritten.

use crate::migrate::warnings::Report;
use serde_json::{Map, Value, json};

/// The Serin step body for an Argo `setHeaderRoute` or `setMirrorRoute` body (at `path`). With the
/// Gateway API, which matches headers and methods exactly or by regex only, a prefix becomes the
/// anchored regex matching the same values, with a warning.
pub(super) fn managed_route_step(
    body: &Value,
    gateway_api: bool,
    path: &str,
    report: &mut Report,
) -> Value {
    let mut step = body.clone();
    if !gateway_api {
        return step;
    }
    for (j, condition) in step["match"]
        .as_array_mut()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("{path}.match[{j}]");
        // A header route's value, or a mirror route's method and headers; paths keep prefixes,
        // which the Gateway API matches.
        if let Some(value) = condition.get_mut("headerValue") {
            prefix_as_regex(value, &format!("{at}.headerValue"), report);
        }
        if let Some(method) = condition.get_mut("method") {
            prefix_as_regex(method, &format!("{at}.method"), report);
        }
        for (name, value) in condition
            .get_mut("headers")
            .and_then(Value::as_object_mut)
            .into_iter()
            .flat_map(Map::iter_mut)
        {
            prefix_as_regex(value, &format!("{at}.headers.{name}"), report);
        }
    }
    step
}

fn prefix_as_regex(value: &mut Value, path: &str, report: &mut Report) {
    let Some(prefix) = value["prefix"].as_str().map(str::to_string) else {
        return;
    };
    let regex = format!("^{}.*", regex::escape(&prefix));
    report.field(
        format!("{path}.prefix"),
        format!("the Gateway API matches this with exact or regex only: written as regex {regex:?}, which matches the same values"),
    );
    *value = json!({ "regex": regex });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrate::warnings::Warning;

    #[test]
    fn with_the_gateway_api_a_prefix_becomes_an_anchored_regex() {
        let body = json!({"name": "mirror", "percentage": 35, "match": [
            {"method": {"prefix": "P"}, "path": {"prefix": "/api"}, "headers": {"x-env": {"prefix": "eu.1"}}},
        ]});
        let mut warnings: Vec<Warning> = Vec::new();
        let mut report = Report {
            file: "in.yaml",
            object: "Rollout api".into(),
            warnings: &mut warnings,
        };
        let path = "spec.strategy.canary.steps[1].setMirrorRoute";
        assert_eq!(managed_route_step(&body, false, path, &mut report), body);
        let step = managed_route_step(&body, true, path, &mut report);
        assert_eq!(
            step["match"][0],
            json!({"method": {"regex": "^P.*"}, "path": {"prefix": "/api"}, "headers": {"x-env": {"regex": "^eu\\.1.*"}}})
        );
        let header = json!({"name": "testers", "match": [{"headerName": "agent", "headerValue": {"prefix": "Moz"}}]});
        let step = managed_route_step(&header, true, "h", &mut report);
        assert_eq!(step["match"][0]["headerValue"], json!({"regex": "^Moz.*"}));
        let paths: Vec<_> = warnings.iter().filter_map(|w| w.path.clone()).collect();
        assert_eq!(
            paths,
            [
                format!("{path}.match[0].method.prefix"),
                format!("{path}.match[0].headers.x-env.prefix"),
                "h.match[0].headerValue.prefix".to_string(),
            ]
        );
    }
}
