//! Analysis steps (Argo Rollouts' metric fields, args, dry run, retention) and the managed routes
//! that setHeaderRoute and setMirrorRoute steps name.

use crate::support::{assert_valid, errors, paths, spec_paths, with_steps};
use serde_json::json;

fn analysis_step(metric: serde_json::Value) -> serde_json::Value {
    let mut base = json!({
        "name": "errors", "templateRef": {"name": "errors"},
        "count": 3, "interval": "10s", "failureLimit": 1,
        "successCondition": "result[0] <= 0.01"
    });
    crate::support::merge(&mut base, metric);
    with_steps(json!([{"setWeight": 20}, {"analysis": {"metrics": [base]}}]))
}

#[test]
fn an_analysis_step_with_argo_fields_is_valid() {
    assert_valid(analysis_step(json!({})));
    assert_valid(with_steps(json!([{"analysis": {
        "metrics": [{"name": "q", "query": "vector(1)"}, {"name": "t", "templateRef": {"name": "t"}}],
        "args": [
            {"name": "service-name", "value": "podinfo"},
            {"name": "token", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "hash", "valueFrom": {"podTemplateHashValue": "Latest"}}
        ],
        "dryRun": [{"metricName": "t"}],
        "measurementRetention": [{"metricName": "*", "limit": 20}]
    }}])));
}

#[test]
fn each_broken_analysis_field_is_named() {
    assert_eq!(
        paths(analysis_step(
            json!({"count": 0, "failureLimit": -2, "interval": null})
        )),
        [
            "spec.analysis.steps[1].analysis.metrics[0].count",
            "spec.analysis.steps[1].analysis.metrics[0].failureLimit",
        ]
    );
    assert_eq!(
        paths(analysis_step(json!({"interval": null}))),
        ["spec.analysis.steps[1].analysis.metrics[0].interval"],
        "count 3 needs an interval"
    );
    assert_eq!(
        paths(analysis_step(json!({"templateRef": null}))),
        ["spec.analysis.steps[1].analysis.metrics[0].templateRef"]
    );
    assert_eq!(
        paths(analysis_step(json!({"thresholdRange": {"min": 1}}))),
        ["spec.analysis.steps[1].analysis.metrics[0].thresholdRange"],
        "conditions and a range together"
    );
    let long = "result[0] > 1 || ".repeat(300) + "true";
    assert_eq!(
        paths(analysis_step(json!({"successCondition": long}))),
        ["spec.analysis.steps[1].analysis.metrics[0].successCondition"]
    );
    assert_eq!(
        paths(with_steps(json!([{"analysis": {
            "metrics": [{"name": "m", "query": "vector(1)"}],
            "args": [{"name": "a"}, {"name": "b c", "value": "x"},
                     {"name": "h", "valueFrom": {"podTemplateHashValue": "Newest"}}],
            "dryRun": [{"metricName": "other"}],
            "measurementRetention": [{"metricName": "m", "limit": 1000}]
        }}]))),
        [
            "spec.analysis.steps[0].analysis.dryRun[0].metricName",
            "spec.analysis.steps[0].analysis.measurementRetention[0].limit",
            "spec.analysis.steps[0].analysis.args[0].value",
            "spec.analysis.steps[0].analysis.args[1].name",
            "spec.analysis.steps[0].analysis.args[2].valueFrom.podTemplateHashValue",
        ]
    );
    let message = errors(analysis_step(json!({"interval": null})))[0]
        .message
        .clone();
    assert!(message.contains("interval: 30s"), "{message}");
}

#[test]
fn managed_routes_are_named_before_steps_use_them_and_fit_the_router() {
    let header = json!({"setHeaderRoute": {"name": "testers", "match": [
        {"headerName": "x-tester", "headerValue": {"prefix": "y"}}]}});
    let mut steps = with_steps(json!([{"setWeight": 10}, header]));
    assert_eq!(
        paths(steps.clone()),
        ["spec.analysis.steps[1].setHeaderRoute.name"],
        "not in managedRoutes"
    );
    steps["managedRoutes"] = json!([{"name": "testers"}]);
    assert_valid(steps.clone());
    assert_eq!(
        spec_paths(json!({"provider": "gatewayapi:v1",
                          "service": {"gatewayRefs": [{"name": "gw"}]}, "analysis": steps.clone()})),
        ["spec.analysis.steps[1].setHeaderRoute.match[0].headerValue"],
        "the Gateway API has no prefix match"
    );
    assert_eq!(
        spec_paths(json!({"provider": "kubernetes", "analysis": steps})),
        ["spec.analysis.managedRoutes"]
    );
    let mirror = with_steps(
        json!([{"setMirrorRoute": {"name": "copies", "percentage": 150,
                                                      "match": [{}]}}]),
    )
    .tap_managed("copies");
    assert_eq!(
        paths(mirror),
        [
            "spec.analysis.steps[0].setMirrorRoute.percentage",
            "spec.analysis.steps[0].setMirrorRoute.match[0]",
        ]
    );
}

trait Managed {
    fn tap_managed(self, name: &str) -> Self;
}

impl Managed for serde_json::Value {
    fn tap_managed(mut self, name: &str) -> Self {
        self["managedRoutes"] = json!([{ "name": name }]);
        self
    }
}
