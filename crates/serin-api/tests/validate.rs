//! One test per rule of `validate`, `validate_metric_template` and `validate_alert_provider`.
//!
//! Each test starts from a valid resource, breaks one thing with a JSON merge patch and asserts the
//! exact list of reported paths, so a rule that stops firing, fires twice or fires elsewhere fails.

use serde_json::{Value, json};
use serin_api::validate::{
    FieldError, PROVIDERS, ROUTING_PROVIDERS, is_absolute_http_url, validate_alert_provider,
    validate_metric_template,
};
use serin_api::{AlertProvider, Canary, HookType, MetricTemplate, validate};

/// A valid progressive canary for Deployment `test/podinfo`; each test patches it.
fn base() -> Value {
    json!({
        "apiVersion": "serin.dev/v1beta1",
        "kind": "Canary",
        "metadata": {"name": "podinfo", "namespace": "test"},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo"},
            "service": {"port": 9898},
            "analysis": {
                "interval": "1m",
                "threshold": 5,
                "stepWeight": 10,
                "maxWeight": 50,
                "metrics": [
                    {"name": "request-success-rate", "thresholdRange": {"min": 99}, "interval": "1m"}
                ],
                "webhooks": [
                    {"name": "load-test", "url": "http://flagger-loadtester.test/"}
                ]
            }
        }
    })
}

/// JSON merge patch (RFC 7386): objects merge key by key, `null` deletes, anything else replaces.
fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (key, value) in p {
                if value.is_null() {
                    t.remove(&key);
                } else {
                    merge(t.entry(key).or_insert(Value::Null), value);
                }
            }
        }
        (t, p) => *t = p,
    }
}

fn canary_with(patch: Value) -> Canary {
    let mut doc = base();
    merge(&mut doc, patch);
    serde_json::from_value(doc).expect("the patched canary must deserialize")
}

/// Errors after merging `patch` into `spec`.
fn spec_errors(patch: Value) -> Vec<FieldError> {
    validate(&canary_with(json!({ "spec": patch })))
}

/// Reported paths after merging `patch` into `spec`.
fn spec_paths(patch: Value) -> Vec<String> {
    spec_errors(patch).into_iter().map(|e| e.path).collect()
}

/// Errors after merging `patch` into `spec.analysis`.
fn errors(patch: Value) -> Vec<FieldError> {
    spec_errors(json!({ "analysis": patch }))
}

/// Reported paths after merging `patch` into `spec.analysis`.
fn paths(patch: Value) -> Vec<String> {
    errors(patch).into_iter().map(|e| e.path).collect()
}

#[track_caller]
fn assert_valid(patch: Value) {
    let errs = errors(patch.clone());
    assert!(
        errs.is_empty(),
        "analysis patch {patch} should be valid, got {errs:?}"
    );
}

#[track_caller]
fn assert_spec_valid(patch: Value) {
    let errs = spec_errors(patch.clone());
    assert!(
        errs.is_empty(),
        "spec patch {patch} should be valid, got {errs:?}"
    );
}

/// The analysis without its progressive-canary fields, to switch to another strategy.
fn without_canary_fields(mut patch: Value) -> Value {
    let obj = patch.as_object_mut().unwrap();
    obj.entry("stepWeight").or_insert(Value::Null);
    obj.entry("maxWeight").or_insert(Value::Null);
    patch
}

fn blue_green(patch: Value) -> Value {
    let mut p = without_canary_fields(json!({"iterations": 5}));
    merge(&mut p, patch);
    p
}

fn ab_testing(patch: Value) -> Value {
    let mut p = without_canary_fields(
        json!({"iterations": 5, "match": [{"headers": {"x-canary": {"exact": "insider"}}}]}),
    );
    merge(&mut p, patch);
    p
}

fn with_steps(steps: Value) -> Value {
    without_canary_fields(json!({ "steps": steps }))
}

fn metric(extra: Value) -> Value {
    let mut m = json!({"name": "request-success-rate", "thresholdRange": {"min": 99}});
    merge(&mut m, extra);
    m
}

fn hook(extra: Value) -> Value {
    let mut h = json!({"name": "load-test", "url": "http://flagger-loadtester.test/"});
    merge(&mut h, extra);
    h
}

// ---------------------------------------------------------------------------------------------
// The starting point

#[test]
fn the_base_canary_is_valid() {
    assert_valid(json!({}));
    assert_spec_valid(json!({}));
}

// ---------------------------------------------------------------------------------------------
// spec

#[test]
fn provider_is_one_of_the_routers_serin_builds() {
    assert_eq!(spec_paths(json!({"provider": "istiod"})), ["spec.provider"]);
    assert_eq!(spec_paths(json!({"provider": "Istio"})), ["spec.provider"]);
    assert!(
        spec_errors(json!({"provider": "istiod"}))[0]
            .message
            .contains("write one of istio, kubernetes")
    );
    assert_spec_valid(json!({"provider": ""}));
    assert_spec_valid(json!({"provider": "istio"}));
    for provider in PROVIDERS.iter().filter(|p| !ROUTING_PROVIDERS.contains(*p)) {
        let errors = spec_errors(json!({ "provider": provider }));
        assert_eq!(errors.len(), 1, "{provider}: {errors:?}");
        assert_eq!(errors[0].path, "spec.provider");
        assert!(
            errors[0].message.contains("not supported yet")
                && errors[0]
                    .message
                    .contains("istio, kubernetes, gatewayapi:v1"),
            "{}",
            errors[0].message
        );
    }
}

/// A blue/green Canary for the kubernetes provider, as Flagger's docs write it.
fn kubernetes_blue_green(analysis: Value, service: Value) -> Vec<FieldError> {
    let mut doc = base();
    doc["spec"]["provider"] = json!("kubernetes");
    doc["spec"]["analysis"] = json!({
        "interval": "30s", "threshold": 2, "iterations": 10,
        "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}, "interval": "1m"}],
        "webhooks": [{"name": "gate", "type": "confirm-promotion", "url": "http://flagger-loadtester.test/gate/check"}]
    });
    merge(&mut doc["spec"]["analysis"], analysis);
    merge(&mut doc["spec"]["service"], service);
    validate(&serde_json::from_value(doc).expect("a Canary"))
}

#[test]
fn the_kubernetes_provider_runs_blue_green_and_refuses_what_needs_a_mesh() {
    assert_eq!(kubernetes_blue_green(json!({}), json!({})), []);
    assert_eq!(
        kubernetes_blue_green(
            json!({}),
            json!({"portDiscovery": true, "targetPort": "http", "name": "web"})
        ),
        []
    );
    let refused = |analysis: Value, service: Value| -> Vec<String> {
        kubernetes_blue_green(analysis, service)
            .into_iter()
            .map(|e| e.path)
            .collect()
    };
    // Blue/green (iterations) switches all at once: weights are refused one by one, with the reason.
    let weighted = kubernetes_blue_green(json!({"stepWeight": 10, "maxWeight": 50}), json!({}));
    let weighted_paths: Vec<&str> = weighted.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        weighted_paths,
        [
            "spec.analysis.stepWeight",
            "spec.analysis.maxWeight",
            "spec.analysis.iterations"
        ]
    );
    assert!(
        weighted[0]
            .message
            .contains("splits traffic by pods only for a canary with steps"),
        "{}",
        weighted[0].message
    );
    assert_eq!(
        refused(
            json!({"match": [{"headers": {"x-canary": {"exact": "insider"}}}]}),
            json!({})
        ),
        ["spec.analysis.match"]
    );
    assert_eq!(
        refused(json!({"mirror": true}), json!({})),
        ["spec.analysis.mirror"]
    );
    let affinity =
        kubernetes_blue_green(json!({"sessionAffinity": {"cookieName": "c"}}), json!({}));
    assert!(
        affinity
            .iter()
            .any(|e| e.path == "spec.analysis.sessionAffinity"
                && e.message.contains("cannot route by cookie")),
        "{affinity:?}"
    );
    assert_eq!(
        refused(
            json!({}),
            json!({"gateways": ["public-gateway"], "hosts": ["app.example.com"], "timeout": "5s"})
        ),
        [
            "spec.service.gateways",
            "spec.service.hosts",
            "spec.service.timeout"
        ]
    );
    assert!(
        kubernetes_blue_green(json!({}), json!({"retries": {"attempts": 3}}))[0]
            .message
            .contains("use provider: istio")
    );
}

/// Fields of Flagger's API that the operator does not act on yet are refused, each with its path,
/// so nobody believes a setting is in force when it is not.
#[test]
fn fields_the_operator_would_ignore_are_rejected() {
    let cases = [
        (
            json!({"ingressRef": {"name": "podinfo"}}),
            "spec.ingressRef",
        ),
        (json!({"routeRef": {"name": "podinfo"}}), "spec.routeRef"),
        (
            json!({"upstreamRef": {"name": "podinfo"}}),
            "spec.upstreamRef",
        ),
        (
            json!({"service": {"gatewayRefs": [{"name": "public"}]}}),
            "spec.service.gatewayRefs",
        ),
        (
            json!({"service": {"backendTimeout": "30s"}}),
            "spec.service.backendTimeout",
        ),
        (
            json!({"service": {"mirror": [{"backendRef": {"name": "podinfo-canary"}}]}}),
            "spec.service.mirror",
        ),
        (
            json!({"service": {"meshName": "global"}}),
            "spec.service.meshName",
        ),
        (
            json!({"service": {"backends": ["backend.test"]}}),
            "spec.service.backends",
        ),
        (
            json!({"autoscalerRef": {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                   "name": "podinfo", "primaryScalerQueries": {"q": "sum(up)"}}}),
            "spec.autoscalerRef.primaryScalerQueries",
        ),
        (
            json!({"autoscalerRef": {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": "podinfo"},
                   "analysis": {"dynamicStableScale": true}}),
            "spec.analysis.dynamicStableScale",
        ),
    ];
    for (patch, path) in cases {
        let errors = spec_errors(patch.clone());
        assert_eq!(
            errors.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(),
            [path],
            "{patch}"
        );
        assert!(
            errors[0].message.contains("remove") || errors[0].message.contains("use "),
            "{path}: the message says what to do instead: {}",
            errors[0].message
        );
    }
    // disableTLS skips certificate verification for that webhook, as in Flagger.
    for disable_tls in [false, true] {
        assert_spec_valid(
            json!({"analysis": {"webhooks": [{"name": "load-test", "url": "https://loadtester.test/", "disableTLS": disable_tls}]}}),
        );
    }
    assert_spec_valid(json!({"analysis": {"dynamicStableScale": true}}));
}

#[test]
fn metrics_server_must_be_an_absolute_http_url() {
    assert_eq!(
        spec_paths(json!({"metricsServer": "prometheus:9090"})),
        ["spec.metricsServer"]
    );
    assert_spec_valid(json!({"metricsServer": "http://prometheus.istio-system:9090"}));
    // https Prometheus is queried, so it is not refused.
    assert_spec_valid(json!({"metricsServer": "https://prometheus.istio-system:9090"}));
}

#[test]
fn target_ref_must_name_an_apps_v1_deployment_or_daemon_set() {
    assert_eq!(
        spec_paths(json!({"targetRef": {"name": ""}})),
        ["spec.targetRef.name"]
    );
    assert_eq!(
        spec_paths(json!({"targetRef": {"kind": "StatefulSet"}})),
        ["spec.targetRef.kind"]
    );
    assert_spec_valid(json!({"targetRef": {"kind": "DaemonSet"}}));
    // A DaemonSet runs one pod per node: what counts replicas is refused for it.
    let daemon_set = spec_errors(json!({
        "targetRef": {"kind": "DaemonSet"},
        "autoscalerRef": {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": "podinfo"},
        "analysis": {"stepWeight": null, "maxWeight": null,
                     "steps": [{"setWeight": 20}, {"setCanaryScale": {"replicas": 2}}]}}));
    let paths: Vec<&str> = daemon_set.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "spec.autoscalerRef",
            "spec.analysis.steps[1].setCanaryScale"
        ]
    );
    assert!(
        daemon_set[0].message.contains("one pod per node"),
        "{}",
        daemon_set[0].message
    );
    assert_eq!(
        spec_paths(json!({"targetRef": {"kind": null}})),
        ["spec.targetRef.kind"]
    );
    assert_eq!(
        spec_paths(json!({"targetRef": {"apiVersion": "apps/v1beta1"}})),
        ["spec.targetRef.apiVersion"]
    );
    assert_spec_valid(json!({"targetRef": {"apiVersion": null}}));
}

#[test]
fn autoscaler_ref_must_be_an_autoscaling_v2_hpa_with_ordered_bounds() {
    let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": "podinfo"});
    assert_spec_valid(json!({ "autoscalerRef": hpa.clone() }));
    let with = |patch: Value| {
        let mut a = hpa.clone();
        merge(&mut a, patch);
        spec_paths(json!({ "autoscalerRef": a }))
    };
    assert_eq!(with(json!({"name": ""})), ["spec.autoscalerRef.name"]);
    assert_eq!(
        with(json!({"kind": "ScaledObject"})),
        ["spec.autoscalerRef.kind"]
    );
    assert_eq!(
        with(json!({"apiVersion": "autoscaling/v1"})),
        ["spec.autoscalerRef.apiVersion"]
    );
    let p = "spec.autoscalerRef.primaryScalerReplicas";
    assert_eq!(
        with(json!({"primaryScalerReplicas": {"minReplicas": 0, "maxReplicas": 0}})),
        [format!("{p}.minReplicas"), format!("{p}.maxReplicas")]
    );
    assert_eq!(
        with(json!({"primaryScalerReplicas": {"minReplicas": 5, "maxReplicas": 2}})),
        [format!("{p}.minReplicas")]
    );
    assert!(
        with(json!({"primaryScalerReplicas": {"minReplicas": 2, "maxReplicas": 2}})).is_empty()
    );
}

#[test]
fn progress_deadline_must_be_positive() {
    assert_eq!(
        spec_paths(json!({"progressDeadlineSeconds": 0})),
        ["spec.progressDeadlineSeconds"]
    );
    assert_spec_valid(json!({"progressDeadlineSeconds": 1}));
}

#[test]
fn service_ports_must_be_valid_port_numbers_or_names() {
    assert_eq!(
        spec_paths(json!({"service": {"port": 0}})),
        ["spec.service.port"]
    );
    assert_eq!(
        spec_paths(json!({"service": {"port": 65536}})),
        ["spec.service.port"]
    );
    assert_eq!(
        spec_paths(json!({"service": {"targetPort": 70000}})),
        ["spec.service.targetPort"]
    );
    assert_eq!(
        spec_paths(json!({"service": {"targetPort": ""}})),
        ["spec.service.targetPort"]
    );
    assert_spec_valid(json!({"service": {"port": 65535, "targetPort": "http"}}));
    assert_spec_valid(json!({"service": {"port": 1, "targetPort": 9898}}));
}

#[test]
fn traffic_distribution_must_be_a_kubernetes_value() {
    assert_eq!(
        spec_paths(json!({"service": {"trafficDistribution": "PreferNearby"}})),
        ["spec.service.trafficDistribution"]
    );
    for value in ["PreferClose", "PreferSameZone", "PreferSameNode"] {
        assert_spec_valid(json!({"service": {"trafficDistribution": value}}));
    }
}

#[test]
fn a_delegate_virtual_service_has_no_hosts_or_gateways() {
    assert_eq!(
        spec_paths(
            json!({"service": {"delegation": true, "hosts": ["app.example.com"], "gateways": ["public"]}})
        ),
        ["spec.service.hosts", "spec.service.gateways"]
    );
    assert_spec_valid(json!({"service": {"delegation": true}}));
    assert_spec_valid(
        json!({"service": {"delegation": false, "hosts": ["app.example.com"], "gateways": ["public"]}}),
    );
}

#[test]
fn hosts_are_not_blank() {
    assert_eq!(
        spec_paths(json!({"service": {"hosts": ["app.example.com", " "]}})),
        ["spec.service.hosts[1]"]
    );
}

#[test]
fn service_match_string_matches_set_exactly_one_kind() {
    assert_eq!(
        spec_paths(json!({"service": {"match": [
            {"uri": {"exact": "/api", "prefix": "/api"}},
            {"method": {}, "headers": {"x-user": {"exact": "a", "regex": "a.*"}}},
            {"authority": {"prefix": "app"}, "scheme": {"exact": "https"}}
        ]}})),
        [
            "spec.service.match[0].uri",
            "spec.service.match[1].method",
            "spec.service.match[1].headers.x-user",
        ]
    );
}

#[test]
fn retry_attempts_are_not_negative() {
    assert_eq!(
        spec_paths(json!({"service": {"retries": {"attempts": -1}}})),
        ["spec.service.retries.attempts"]
    );
    assert_spec_valid(json!({"service": {"retries": {"attempts": 0, "perTryTimeout": "1s"}}}));
}

// ---------------------------------------------------------------------------------------------
// analysis / canaryAnalysis

#[test]
fn canary_analysis_alias_is_used_when_analysis_is_absent() {
    let alias = base()["spec"]["analysis"].clone();
    let canary = canary_with(json!({"spec": {"analysis": null, "canaryAnalysis": alias}}));
    assert!(validate(&canary).is_empty());
    assert_eq!(canary.spec.analysis().and_then(|a| a.step_weight), Some(10));
    assert!(!canary.spec.skips_analysis());
    // The alias is folded into `analysis` as the object is read, so code that reads the field (the
    // router, the metric checks) sees it, and it is written back under one name only.
    assert_eq!(
        canary.spec.analysis.as_ref().and_then(|a| a.step_weight),
        Some(10)
    );
    let written = serde_json::to_value(&canary).unwrap();
    assert_eq!(written["spec"]["analysis"]["stepWeight"], json!(10));
    assert!(written["spec"].get("canaryAnalysis").is_none());
    // Its problems are reported under its own name.
    assert_eq!(
        spec_paths(
            json!({"analysis": null, "canaryAnalysis": {"interval": "1m", "threshold": 0, "stepWeight": 10}})
        ),
        ["spec.canaryAnalysis.threshold"]
    );
}

#[test]
fn canary_analysis_alias_is_rejected_next_to_analysis() {
    // Only the duplication is reported: the alias is ignored, so its (broken) content is not checked.
    assert_eq!(
        spec_paths(json!({"canaryAnalysis": {"interval": "1 minute", "maxWeight": 150}})),
        ["spec.canaryAnalysis"]
    );
}

#[test]
fn intervals_are_go_durations() {
    for bad in ["1 minute", "-1m", "60", "1d", "m"] {
        assert_eq!(
            paths(json!({ "interval": bad })),
            ["spec.analysis.interval"],
            "interval {bad:?}"
        );
    }
    for good in ["30s", "1m", "2h", "1m30s"] {
        assert_valid(json!({ "interval": good }));
    }
}

#[test]
fn threshold_is_at_least_one() {
    assert_eq!(paths(json!({"threshold": 0})), ["spec.analysis.threshold"]);
    assert_valid(json!({"threshold": 1}));
}

#[test]
fn iterations_are_not_negative() {
    assert_eq!(
        paths(json!({"iterations": -1})),
        ["spec.analysis.iterations"]
    );
    // Reported once, as out of range, not also as "no strategy".
    assert_eq!(
        paths(json!({"stepWeight": null, "iterations": -1})),
        ["spec.analysis.iterations"]
    );
    assert_valid(json!({"iterations": 0}));
}

#[test]
fn max_weight_is_between_1_and_100() {
    for bad in [0, 101] {
        assert_eq!(
            paths(json!({ "maxWeight": bad })),
            ["spec.analysis.maxWeight"]
        );
    }
    for good in [1, 100] {
        assert_valid(json!({ "maxWeight": good }));
    }
}

#[test]
fn step_weight_is_a_percentage() {
    for bad in [-1, 101] {
        assert_eq!(
            paths(json!({ "stepWeight": bad })),
            ["spec.analysis.stepWeight"]
        );
    }
    assert_valid(json!({"stepWeight": 100}));
    // A negative weight is reported once, as out of range, not also as "no strategy".
    let errs = errors(json!({"stepWeight": -1}));
    assert_eq!(errs.len(), 1, "{errs:?}");
}

#[test]
fn percentages_are_between_0_and_100() {
    for field in [
        "stepWeightPromotion",
        "primaryReadyThreshold",
        "canaryReadyThreshold",
    ] {
        for bad in [-1, 101] {
            assert_eq!(
                paths(json!({ field: bad })),
                [format!("spec.analysis.{field}")],
                "{field}: {bad}"
            );
        }
        for good in [0, 100] {
            assert_valid(json!({ field: good }));
        }
    }
    for bad in [-1, 101] {
        assert_eq!(
            paths(json!({"mirror": true, "mirrorWeight": bad})),
            ["spec.analysis.mirrorWeight"]
        );
    }
    assert_valid(json!({"mirror": true, "mirrorWeight": 100}));
}

#[test]
fn delays_are_not_negative() {
    assert_eq!(
        paths(json!({"abortScaleDownDelaySeconds": -1, "scaleDownDelaySeconds": -1})),
        [
            "spec.analysis.abortScaleDownDelaySeconds",
            "spec.analysis.scaleDownDelaySeconds"
        ]
    );
    let errs = errors(json!({"abortScaleDownDelaySeconds": -30}));
    assert!(
        errs[0].message.contains("write 0 or more seconds"),
        "{errs:?}"
    );
    assert_valid(json!({"abortScaleDownDelaySeconds": 0, "scaleDownDelaySeconds": 0}));
}

#[test]
fn blue_green_counts_are_positive() {
    assert_eq!(
        paths(blue_green(
            json!({"autoPromotionSeconds": 0, "previewReplicaCount": 0})
        )),
        [
            "spec.analysis.autoPromotionSeconds",
            "spec.analysis.previewReplicaCount"
        ]
    );
    assert_valid(blue_green(
        json!({"autoPromotionSeconds": 1, "previewReplicaCount": 1}),
    ));
}

#[test]
fn step_weights_ascend_within_1_to_100() {
    let ladder = |weights: Value| paths(without_canary_fields(json!({ "stepWeights": weights })));
    assert!(ladder(json!([1, 5, 10, 25, 50])).is_empty());
    assert_eq!(
        ladder(json!([1, 5, 5, 3, 50])),
        [
            "spec.analysis.stepWeights[2]",
            "spec.analysis.stepWeights[3]"
        ]
    );
    assert_eq!(ladder(json!([0, 10])), ["spec.analysis.stepWeights[0]"]);
    // An out-of-range weight is reported once; it does not make the next one look out of order.
    assert_eq!(
        ladder(json!([10, 150, 20])),
        ["spec.analysis.stepWeights[1]"]
    );
    assert_eq!(ladder(json!([])), ["spec.analysis.stepWeights"]);
}

#[test]
fn a_canary_uses_exactly_one_strategy() {
    let steps = json!([{"setWeight": 10}]);
    assert_eq!(
        paths(json!({"stepWeights": [10, 20]})),
        ["spec.analysis.stepWeights"]
    );
    assert_eq!(
        paths(json!({"iterations": 5})),
        ["spec.analysis.iterations"]
    );
    assert_eq!(
        paths(json!({"maxWeight": null, "steps": steps})),
        ["spec.analysis.steps"]
    );
    assert_eq!(
        paths(json!({"maxWeight": null, "stepWeights": [10], "iterations": 5, "steps": steps})),
        [
            "spec.analysis.stepWeights",
            "spec.analysis.iterations",
            "spec.analysis.steps"
        ]
    );
    let messages: Vec<String> = errors(json!({"iterations": 5}))
        .into_iter()
        .map(|e| e.message)
        .collect();
    assert!(
        messages[0].contains("cannot be combined with stepWeight"),
        "{messages:?}"
    );
}

#[test]
fn an_analysis_without_a_strategy_is_rejected_unless_skipped() {
    assert_eq!(paths(json!({"stepWeight": null})), ["spec.analysis"]);
    assert_eq!(paths(json!({"stepWeight": 0})), ["spec.analysis"]);
    assert_eq!(
        paths(json!({"stepWeight": null, "iterations": 0})),
        ["spec.analysis"]
    );
    assert_spec_valid(json!({"skipAnalysis": true, "analysis": {"stepWeight": null}}));
}

#[test]
fn steps_and_max_weight_exclude_each_other() {
    assert_eq!(
        paths(json!({"stepWeight": null, "maxWeight": 50, "steps": [{"setWeight": 10}]})),
        ["spec.analysis.maxWeight"]
    );
}

#[test]
fn steps_must_not_be_empty() {
    // An empty list would otherwise slip past the "no strategy" check and leave nothing to run.
    assert_eq!(paths(with_steps(json!([]))), ["spec.analysis.steps"]);
}

#[test]
fn mirroring_is_rejected_with_steps_and_ab_testing() {
    assert_eq!(
        paths(with_steps(json!([{"setWeight": 10}])).tap(json!({"mirror": true}))),
        ["spec.analysis.mirror"]
    );
    assert_eq!(
        paths(ab_testing(json!({"mirror": true}))),
        ["spec.analysis.mirror"]
    );
    assert_valid(json!({"mirror": true}));
    assert_valid(without_canary_fields(
        json!({"stepWeights": [10, 50], "mirror": true}),
    ));
    assert_valid(blue_green(json!({"mirror": true})));
}

#[test]
fn mirror_weight_needs_mirror() {
    assert_eq!(
        paths(json!({"mirrorWeight": 50})),
        ["spec.analysis.mirrorWeight"]
    );
    assert_eq!(
        paths(json!({"mirror": false, "mirrorWeight": 50})),
        ["spec.analysis.mirrorWeight"]
    );
}

#[test]
fn step_weight_promotion_needs_weights() {
    assert_eq!(
        paths(blue_green(json!({"stepWeightPromotion": 50}))),
        ["spec.analysis.stepWeightPromotion"]
    );
    assert_eq!(
        paths(ab_testing(json!({"stepWeightPromotion": 50}))),
        ["spec.analysis.stepWeightPromotion"]
    );
    assert_valid(json!({"stepWeightPromotion": 50}));
    assert_valid(with_steps(json!([{"setWeight": 10}])).tap(json!({"stepWeightPromotion": 50})));
}

#[test]
fn blue_green_only_fields_are_rejected_elsewhere() {
    let fields = json!({"autoPromotionEnabled": false, "autoPromotionSeconds": 30, "previewReplicaCount": 1});
    let expected = [
        "spec.analysis.autoPromotionEnabled",
        "spec.analysis.autoPromotionSeconds",
        "spec.analysis.previewReplicaCount",
    ];
    assert_eq!(paths(fields.clone()), expected);
    assert_eq!(paths(ab_testing(fields.clone())), expected);
    assert_eq!(
        paths(with_steps(json!([{"setWeight": 10}])).tap(fields.clone())),
        expected
    );
    assert_valid(blue_green(fields));
}

#[test]
fn dynamic_stable_scale_needs_weights() {
    assert_eq!(
        paths(blue_green(json!({"dynamicStableScale": true}))),
        ["spec.analysis.dynamicStableScale"]
    );
    assert_eq!(
        paths(ab_testing(json!({"dynamicStableScale": true}))),
        ["spec.analysis.dynamicStableScale"]
    );
    assert_valid(blue_green(json!({"dynamicStableScale": false})));
    assert_valid(json!({"dynamicStableScale": true}));
    assert_valid(with_steps(json!([{"setWeight": 10}])).tap(json!({"dynamicStableScale": true})));
}

#[test]
fn analysis_match_string_matches_set_exactly_one_kind() {
    let m = "spec.analysis.match[0]";
    assert_eq!(
        paths(ab_testing(json!({"match": [{
            "headers": {"x-canary": {"exact": "insider", "regex": "ins.*"}},
            "queryParams": {"canary": {}},
            "withoutHeaders": {"x-bot": {"prefix": "a", "suffix": "b"}},
            "uri": {"prefix": "/api"}
        }]}))),
        [
            format!("{m}.headers.x-canary"),
            format!("{m}.queryParams.canary"),
            format!("{m}.withoutHeaders.x-bot")
        ]
    );
}

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
// alerts and session affinity

#[test]
fn alerts_are_named_with_a_known_severity_and_provider() {
    let alert = |extra: Value| {
        let mut a =
            json!({"name": "on-call", "severity": "error", "providerRef": {"name": "on-call"}});
        merge(&mut a, extra);
        a
    };
    assert_eq!(
        paths(json!({"alerts": [
            alert(json!({"name": ""})),
            alert(json!({"severity": "critical"})),
            alert(json!({"providerRef": {"name": ""}})),
            alert(json!({"severity": null, "providerRef": {"namespace": "serin"}})),
            alert(json!({"severity": ""}))
        ]})),
        [
            "spec.analysis.alerts[0].name",
            "spec.analysis.alerts[1].severity",
            "spec.analysis.alerts[2].providerRef.name",
        ]
    );
}

#[test]
fn session_affinity_cookies_are_named_and_distinct() {
    let sa = "spec.analysis.sessionAffinity";
    assert_eq!(
        paths(json!({"sessionAffinity": {"cookieName": ""}})),
        [format!("{sa}.cookieName")]
    );
    assert_eq!(
        paths(
            json!({"sessionAffinity": {"cookieName": "affinity", "primaryCookieName": "affinity"}})
        ),
        [format!("{sa}.primaryCookieName")]
    );
    assert_valid(
        json!({"sessionAffinity": {"cookieName": "canary-affinity", "primaryCookieName": "primary-affinity"}}),
    );
}

#[test]
fn session_affinity_needs_a_weighted_canary_without_mirroring() {
    let sa = "spec.analysis.sessionAffinity";
    let cookie = json!({"cookieName": "canary-affinity"});
    assert_valid(json!({"sessionAffinity": cookie}));
    assert_valid(
        json!({"stepWeight": null, "maxWeight": null, "steps": [{"setWeight": 20}, {"pause": {}}],
                        "sessionAffinity": cookie}),
    );
    let blue_green = errors(
        json!({"stepWeight": null, "maxWeight": null, "iterations": 5, "sessionAffinity": cookie}),
    );
    assert_eq!(blue_green.len(), 1, "{blue_green:?}");
    assert_eq!(blue_green[0].path, sa);
    assert!(
        blue_green[0].message.contains("not with blue-green"),
        "{}",
        blue_green[0].message
    );
    assert_eq!(
        paths(json!({"mirror": true, "sessionAffinity": cookie})),
        [sa]
    );
}

#[test]
fn session_affinity_cookie_attributes_are_valid() {
    let sa = "spec.analysis.sessionAffinity";
    assert_eq!(
        paths(json!({"sessionAffinity": {"cookieName": "c", "sameSite": "lax", "maxAge": -1}})),
        [format!("{sa}.sameSite"), format!("{sa}.maxAge")]
    );
    for same_site in ["Strict", "Lax", "None"] {
        assert_valid(
            json!({"sessionAffinity": {"cookieName": "c", "sameSite": same_site, "maxAge": 0}}),
        );
    }
}

// ---------------------------------------------------------------------------------------------
// MetricTemplate and AlertProvider

fn template(patch: Value) -> Vec<String> {
    let mut doc = json!({
        "apiVersion": "serin.dev/v1beta1",
        "kind": "MetricTemplate",
        "metadata": {"name": "latency", "namespace": "test"},
        "spec": {
            "provider": {"type": "prometheus", "address": "http://prometheus.istio-system:9090"},
            "query": "histogram_quantile(0.99, sum(rate(istio_request_duration_milliseconds_bucket{destination_workload=\"{{ target }}\"}[{{ interval }}])) by (le))"
        }
    });
    merge(&mut doc, json!({ "spec": patch }));
    let template: MetricTemplate = serde_json::from_value(doc).unwrap();
    validate_metric_template(&template)
        .into_iter()
        .map(|e| e.path)
        .collect()
}

#[test]
fn metric_templates_name_a_known_provider_with_an_address_and_a_query() {
    assert!(template(json!({})).is_empty());
    assert_eq!(
        template(json!({"provider": {"type": "prom"}})),
        ["spec.provider.type"]
    );
    assert_eq!(
        template(json!({"provider": {"address": "prometheus:9090"}})),
        ["spec.provider.address"]
    );
    assert_eq!(
        template(json!({"provider": {"address": null}})),
        ["spec.provider.address"]
    );
    // Only Prometheus is queried yet: the other known types would fail every check at run time
    // and roll healthy releases back.
    assert_eq!(
        template(json!({"provider": {"type": "datadog", "address": null}})),
        ["spec.provider.type"]
    );
    // https Prometheus, with or without certificate verification, is queried.
    assert!(
        template(json!({"provider": {"address": "https://prometheus.example:9090", "insecureSkipVerify": true}}))
            .is_empty()
    );
    assert!(template(json!({"provider": {"insecureSkipVerify": false}})).is_empty());
    assert_eq!(template(json!({"query": " \n"})), ["spec.query"]);
    let limit = serin_api::limits::MAX_QUERY_TEMPLATE_BYTES;
    assert!(template(json!({"query": "x".repeat(limit)})).is_empty());
    assert_eq!(
        template(json!({"query": "x".repeat(limit + 1)})),
        ["spec.query"]
    );
}

fn alert_provider(patch: Value) -> Vec<String> {
    let mut doc = json!({
        "apiVersion": "serin.dev/v1beta1",
        "kind": "AlertProvider",
        "metadata": {"name": "on-call", "namespace": "test"},
        "spec": {"type": "slack", "channel": "on-call", "secretRef": {"name": "on-call-slack"}}
    });
    merge(&mut doc, json!({ "spec": patch }));
    let provider: AlertProvider = serde_json::from_value(doc).unwrap();
    validate_alert_provider(&provider)
        .into_iter()
        .map(|e| e.path)
        .collect()
}

#[test]
fn alert_providers_name_a_known_type_and_where_to_post() {
    assert!(alert_provider(json!({})).is_empty());
    assert!(
        alert_provider(json!({"secretRef": null, "address": "https://hooks.slack.com/services/x"}))
            .is_empty()
    );
    for kind in ["slack", "msteams", "discord", "rocket", "gchat"] {
        assert!(alert_provider(json!({ "type": kind })).is_empty(), "{kind}");
    }
    assert_eq!(alert_provider(json!({"type": "pagerduty"})), ["spec.type"]);
    assert_eq!(alert_provider(json!({"secretRef": null})), ["spec.address"]);
    assert_eq!(
        alert_provider(json!({"address": "hooks.slack.com/services/x"})),
        ["spec.address"]
    );
    assert_eq!(
        alert_provider(json!({"proxy": "proxy:3128"})),
        ["spec.proxy"]
    );
    assert!(alert_provider(json!({"proxy": "http://proxy.internal:3128"})).is_empty());
}

// ---------------------------------------------------------------------------------------------

/// Small helper so a strategy base can be extended inline: `with_steps(..).tap(json!({..}))`.
trait Tap {
    fn tap(self, patch: Value) -> Value;
}

impl Tap for Value {
    fn tap(mut self, patch: Value) -> Value {
        merge(&mut self, patch);
        self
    }
}

#[test]
fn the_gateway_api_router_needs_gateways_and_refuses_the_virtual_services_fields() {
    let gateway_api = |service: Value| {
        spec_errors(json!({"provider": "gatewayapi:v1", "service": service}))
            .into_iter()
            .map(|e| e.path)
            .collect::<Vec<_>>()
    };
    let parents = json!([{"name": "public-gateway", "namespace": "istio-system"}]);
    assert!(
        gateway_api(json!({"gatewayRefs": parents, "hosts": ["app.example.com"],
        "backendTimeout": "5s", "timeout": "10s",
        "mirror": [{"backendRef": {"name": "shadow", "port": 80}}]}))
        .is_empty()
    );
    assert_eq!(gateway_api(json!({})), ["spec.service.gatewayRefs"]);
    assert_eq!(
        gateway_api(
            json!({"gatewayRefs": parents, "gateways": ["public-gateway"], "delegation": true})
        ),
        ["spec.service.gateways", "spec.service.delegation"]
    );
    let affinity = spec_errors(
        json!({"provider": "gatewayapi:v1", "service": {"gatewayRefs": parents},
        "analysis": {"sessionAffinity": {"cookieName": "canary-cookie"}}}),
    );
    assert_eq!(affinity.len(), 1, "{affinity:?}");
    assert_eq!(affinity[0].path, "spec.analysis.sessionAffinity");
    assert!(
        affinity[0].message.contains("use provider: istio"),
        "{}",
        affinity[0].message
    );
    // Istio Canaries still refuse the Gateway API's own fields.
    let istio = spec_errors(json!({"service": {"gatewayRefs": parents}}));
    assert!(
        istio[0].message.contains("set provider: gatewayapi:v1"),
        "{}",
        istio[0].message
    );
}

#[test]
fn the_kubernetes_provider_runs_a_canary_by_replica_ratio_with_argo_meanings() {
    let ratio = |analysis: Value| -> Vec<FieldError> {
        let mut analysis_doc = json!({"iterations": null});
        merge(&mut analysis_doc, analysis);
        kubernetes_blue_green(analysis_doc, json!({}))
    };
    let paths =
        |errors: Vec<FieldError>| -> Vec<String> { errors.into_iter().map(|e| e.path).collect() };
    assert_eq!(ratio(json!({"stepWeight": 10, "maxWeight": 50})), []);
    assert_eq!(
        ratio(
            json!({"steps": [{"setWeight": 41}, {"pause": {}}, {"setWeight": 100}],
                     "maxSurge": "20%", "maxUnavailable": 0})
        ),
        []
    );
    assert_eq!(
        ratio(json!({})),
        [],
        "no steps: a rolling update by replica ratio"
    );

    let scaled_apart = ratio(json!({
        "steps": [{"setCanaryScale": {"replicas": 3}}, {"setWeight": 20}],
        "dynamicStableScale": true, "abortScaleDownDelaySeconds": 30}));
    assert_eq!(
        paths(scaled_apart.clone()),
        [
            "spec.analysis.dynamicStableScale",
            "spec.analysis.abortScaleDownDelaySeconds",
            "spec.analysis.steps[0].setCanaryScale"
        ]
    );
    assert!(
        scaled_apart[0]
            .message
            .contains("every canary pod takes its share of traffic")
    );

    let frozen = ratio(json!({"stepWeight": 10, "maxSurge": 0, "maxUnavailable": "0%"}));
    assert_eq!(paths(frozen.clone()), ["spec.analysis.maxUnavailable"]);
    assert!(frozen[0].message.contains("both 0"));
    assert_eq!(
        paths(ratio(json!({"stepWeight": 10, "maxSurge": "lots"}))),
        ["spec.analysis.maxSurge"]
    );

    // maxSurge means nothing to a mesh-routed canary or to blue/green: refused there.
    let blue_green = kubernetes_blue_green(json!({"maxSurge": 1}), json!({}));
    assert_eq!(paths(blue_green.clone()), ["spec.analysis.maxSurge"]);
    assert!(
        blue_green[0]
            .message
            .contains("only a canary by replica ratio")
    );
}

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
