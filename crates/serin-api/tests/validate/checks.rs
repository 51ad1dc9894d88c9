//! What an analysis runs: its steps, metrics and webhooks, and blue/green's pre- and post-promotion
//! analyses.

use crate::support::{
    assert_valid, errors, hook, kubernetes_blue_green, merge, metric, paths, with_steps,
};
use serde_json::{Value, json};
use serin_api::HookType;
use serin_api::validate::{FieldError, is_absolute_http_url};

// ---------------------------------------------------------------------------------------------
// steps

#[test]
fn a_step_does_exactly_one_thing() {
    assert_eq!(
        paths(with_steps(json!([
            {"setWeight": 10, "pause": {}},
            {},
            {"setWeight": 20, "pause": {"duration": 30}, "setCanaryScale": {"replicas": 1}},
            {"setWeight": 30}
        ]))),
        [
            "spec.analysis.steps[0]",
            "spec.analysis.steps[1]",
            "spec.analysis.steps[2]"
        ]
    );
}

#[test]
fn set_weight_is_a_percentage() {
    assert_eq!(
        paths(with_steps(
            json!([{"setWeight": 101}, {"setWeight": -1}, {"setWeight": 0}, {"setWeight": 100}])
        )),
        [
            "spec.analysis.steps[0].setWeight",
            "spec.analysis.steps[1].setWeight"
        ]
    );
}

#[test]
fn pause_durations_are_seconds_or_go_durations() {
    let errs = errors(with_steps(json!([
        {"pause": {}},
        {"pause": {"duration": 30}},
        {"pause": {"duration": "90"}},
        {"pause": {"duration": "1h30m"}},
        {"pause": {"duration": "ten"}},
        {"pause": {"duration": -5}},
        {"pause": {"duration": "-1m"}},
        {"pause": {"duration": "20000000000"}}
    ])));
    let got: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        got,
        [
            "spec.analysis.steps[4].pause.duration",
            "spec.analysis.steps[5].pause.duration",
            "spec.analysis.steps[6].pause.duration",
            "spec.analysis.steps[7].pause.duration",
        ]
    );
    for e in &errs {
        assert!(
            e.message.contains("write"),
            "{e} does not say what to write instead"
        );
    }
}

#[test]
fn set_canary_scale_sets_exactly_one_field() {
    assert_eq!(
        paths(with_steps(json!([
            {"setCanaryScale": {"replicas": 2, "weight": 50}},
            {"setCanaryScale": {}},
            {"setCanaryScale": {"matchTrafficWeight": false}},
            {"setCanaryScale": {"weight": 50, "matchTrafficWeight": true}},
            {"setCanaryScale": {"replicas": 0}},
            {"setCanaryScale": {"weight": 50}},
            {"setCanaryScale": {"matchTrafficWeight": true}}
        ]))),
        [
            "spec.analysis.steps[0].setCanaryScale",
            "spec.analysis.steps[1].setCanaryScale",
            "spec.analysis.steps[2].setCanaryScale",
            "spec.analysis.steps[3].setCanaryScale",
        ]
    );
}

#[test]
fn set_canary_scale_values_are_in_range() {
    assert_eq!(
        paths(with_steps(json!([
            {"setCanaryScale": {"replicas": -1}},
            {"setCanaryScale": {"weight": 101}},
            {"setCanaryScale": {"weight": -1}}
        ]))),
        [
            "spec.analysis.steps[0].setCanaryScale.replicas",
            "spec.analysis.steps[1].setCanaryScale.weight",
            "spec.analysis.steps[2].setCanaryScale.weight",
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// metrics

#[test]
fn metric_names_are_present_and_unique() {
    assert_eq!(
        paths(json!({"metrics": [
            metric(json!({"name": ""})),
            metric(json!({})),
            metric(json!({"name": "request-duration", "thresholdRange": {"max": 500}})),
            metric(json!({}))
        ]})),
        [
            "spec.analysis.metrics[0].name",
            "spec.analysis.metrics[3].name"
        ]
    );
}

#[test]
fn metric_intervals_are_prometheus_ranges() {
    assert_eq!(
        paths(json!({"metrics": [metric(json!({"interval": "1 minute"}))]})),
        ["spec.analysis.metrics[0].interval"]
    );
    // Go reads these, Prometheus' range selector does not.
    for bad in ["1.5m", "500us"] {
        assert_eq!(
            paths(json!({"metrics": [metric(json!({"interval": bad}))]})),
            ["spec.analysis.metrics[0].interval"],
            "{bad:?}"
        );
    }
    for good in ["30s", "1m30s", "500ms"] {
        assert_valid(json!({"metrics": [metric(json!({"interval": good}))]}));
    }
}

#[test]
fn a_metric_has_one_source() {
    let custom = |extra: Value| {
        let mut m = json!({"name": "error-rate", "thresholdRange": {"max": 1}});
        merge(&mut m, extra);
        m
    };
    assert_eq!(
        paths(json!({"metrics": [
            custom(json!({"templateRef": {"name": "error-rate"}, "query": "sum(up)"})),
            custom(json!({"name": "a", "templateRef": {"name": ""}})),
            custom(json!({"name": "b", "query": "  "})),
            custom(json!({"name": "c"})),
            custom(json!({"name": "d", "query": "sum(up)"})),
            custom(json!({"name": "e", "templateRef": {"name": "error-rate", "namespace": "serin"}})),
            metric(json!({}))
        ]})),
        [
            "spec.analysis.metrics[0].query",
            "spec.analysis.metrics[1].templateRef.name",
            "spec.analysis.metrics[2].query",
            "spec.analysis.metrics[3].name",
        ]
    );
}

#[test]
fn threshold_range_min_is_at_most_max() {
    assert_eq!(
        paths(json!({"metrics": [
            metric(json!({"thresholdRange": {"min": 500, "max": 100}})),
            metric(json!({"name": "request-duration", "thresholdRange": {"min": 100, "max": 100}}))
        ]})),
        ["spec.analysis.metrics[0].thresholdRange"]
    );
}

#[test]
fn a_metric_has_an_accepted_range() {
    assert_eq!(
        paths(json!({"metrics": [
            metric(json!({"thresholdRange": {"min": null}})),
            {"name": "request-duration"},
            {"name": "latency", "templateRef": {"name": "latency"}, "threshold": 500}
        ]})),
        [
            "spec.analysis.metrics[0].thresholdRange",
            "spec.analysis.metrics[1].thresholdRange"
        ]
    );
}

#[test]
fn no_data_is_fail_or_ignore() {
    assert_eq!(
        paths(json!({"metrics": [
            metric(json!({"noData": "skip"})),
            metric(json!({"name": "a", "templateRef": {"name": "a"}, "noData": "ignore"})),
            metric(json!({"name": "b", "templateRef": {"name": "b"}, "noData": "fail"}))
        ]})),
        ["spec.analysis.metrics[0].noData"]
    );
}

// ---------------------------------------------------------------------------------------------
// webhooks

#[test]
fn webhook_names_are_present_and_unique() {
    assert_eq!(
        paths(json!({"webhooks": [
            hook(json!({"name": ""})),
            hook(json!({})),
            hook(json!({"name": "gate", "type": "confirm-promotion"})),
            hook(json!({}))
        ]})),
        [
            "spec.analysis.webhooks[0].name",
            "spec.analysis.webhooks[3].name"
        ]
    );
}

#[test]
fn webhook_types_are_known() {
    let mut hooks: Vec<Value> = HookType::ALL
        .iter()
        .map(|t| hook(json!({"name": t.as_str(), "type": t.as_str()})))
        .collect();
    hooks.push(hook(json!({"name": "untyped"})));
    hooks.push(hook(json!({"name": "empty", "type": ""})));
    assert_valid(json!({ "webhooks": hooks }));
    assert_eq!(
        paths(json!({"webhooks": [
            hook(json!({"type": "pre-rolout"})),
            hook(json!({"name": "b", "type": "Rollout"}))
        ]})),
        [
            "spec.analysis.webhooks[0].type",
            "spec.analysis.webhooks[1].type"
        ]
    );
}

#[test]
fn webhook_urls_are_absolute_http() {
    assert_eq!(
        paths(json!({"webhooks": [
            hook(json!({"name": "a", "url": "/loadtest"})),
            hook(json!({"name": "b", "url": "flagger-loadtester.test/"})),
            hook(json!({"name": "c", "url": "ftp://flagger-loadtester.test/"})),
            hook(json!({"name": "d", "url": "http://"})),
            hook(json!({"name": "e", "url": "https://hooks.example.com/gate?x=1"}))
        ]})),
        [
            "spec.analysis.webhooks[0].url",
            "spec.analysis.webhooks[1].url",
            "spec.analysis.webhooks[2].url",
            "spec.analysis.webhooks[3].url",
        ]
    );
}

#[test]
fn absolute_http_url_needs_a_scheme_and_a_host() {
    for good in [
        "http://a",
        "https://a.b:8080/x",
        "http://10.0.0.1:9090",
        "http://a?x",
        "http://a#f",
    ] {
        assert!(is_absolute_http_url(good), "{good}");
    }
    for bad in [
        "",
        "/x",
        "a.b/x",
        "ftp://a",
        "http://",
        "http:///x",
        "http://:80",
        "http://a b/",
        "HTTP//a",
    ] {
        assert!(!is_absolute_http_url(bad), "{bad}");
    }
}

#[test]
fn webhook_timeouts_and_retries_are_in_range() {
    assert_eq!(
        paths(json!({"webhooks": [
            hook(json!({"name": "a", "timeout": "30 seconds"})),
            hook(json!({"name": "b", "retries": -1})),
            hook(json!({"name": "c", "retries": 101})),
            hook(json!({"name": "d", "timeout": "30s", "retries": 100}))
        ]})),
        [
            "spec.analysis.webhooks[0].timeout",
            "spec.analysis.webhooks[1].retries",
            "spec.analysis.webhooks[2].retries",
        ]
    );
}

#[test]
fn a_webhook_waits_at_most_five_minutes_for_an_answer() {
    assert_valid(json!({"webhooks": [hook(json!({"timeout": "5m"}))]}));
    assert_valid(json!({"webhooks": [hook(json!({"timeout": "4m59s"}))]}));
    for too_long in ["5m1s", "301s", "1000h"] {
        let errs = errors(json!({"webhooks": [hook(json!({"timeout": too_long}))]}));
        let [error] = errs.as_slice() else {
            panic!("{too_long}: {errs:?}");
        };
        assert_eq!(error.path, "spec.analysis.webhooks[0].timeout");
        assert!(
            error.message.contains("above the maximum of 5m") && error.message.contains(too_long),
            "{error}"
        );
    }
}

#[test]
fn an_inline_query_may_be_64_kib_and_no_longer() {
    let limit = serin_api::limits::MAX_QUERY_TEMPLATE_BYTES;
    let metric = |query: String| json!({"metrics": [{"name": "custom", "query": query, "thresholdRange": {"max": 1}}]});
    assert_valid(metric("x".repeat(limit)));
    let errs = errors(metric("x".repeat(limit + 1)));
    let [error] = errs.as_slice() else {
        panic!("{errs:?}");
    };
    assert_eq!(error.path, "spec.analysis.metrics[0].query");
    assert!(error.message.contains("65536 bytes (64 KiB)"), "{error}");
}

// ---------------------------------------------------------------------------------------------
// promotion analyses

#[test]
fn promotion_analyses_belong_to_blue_green_and_name_their_checks_once() {
    let post = |extra: Value| {
        let mut analysis = json!({"postPromotionAnalysis": {"metrics": [
            {"name": "live-success-rate", "thresholdRange": {"min": 99}, "query": "q"}]}});
        merge(&mut analysis, extra);
        kubernetes_blue_green(analysis, json!({}))
    };
    assert_eq!(post(json!({})), []);
    let paths =
        |errors: Vec<FieldError>| -> Vec<String> { errors.into_iter().map(|e| e.path).collect() };
    let clash = post(json!({"postPromotionAnalysis": {"metrics": [
        {"name": "request-success-rate", "thresholdRange": {"min": 99}}]}}));
    assert_eq!(
        paths(clash.clone()),
        ["spec.analysis.postPromotionAnalysis.metrics[0].name"]
    );
    assert!(
        clash[0]
            .message
            .contains("already a metric of the analysis")
    );
    let gate = post(json!({"prePromotionAnalysis": {"webhooks": [
        {"name": "approve", "type": "confirm-promotion", "url": "http://gate.test/"}]}}));
    assert_eq!(
        paths(gate),
        ["spec.analysis.prePromotionAnalysis.webhooks[0].type"]
    );
    let empty = post(json!({"prePromotionAnalysis": {"iterations": 0}}));
    assert_eq!(
        paths(empty),
        [
            "spec.analysis.prePromotionAnalysis.iterations",
            "spec.analysis.prePromotionAnalysis"
        ]
    );
    let canary = kubernetes_blue_green(
        json!({"iterations": null, "stepWeight": 10, "postPromotionAnalysis": {"webhooks": [
            {"name": "smoke", "url": "http://smoke.test/"}]}}),
        json!({}),
    );
    assert!(
        canary
            .iter()
            .any(|e| e.path == "spec.analysis.postPromotionAnalysis"
                && e.message.contains("only blue/green")),
        "{canary:?}"
    );
}
