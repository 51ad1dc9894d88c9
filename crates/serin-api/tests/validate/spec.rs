//! The rest of `spec`: fields Serin would ignore, the metrics server, the target, the autoscaler,
//! the progress deadline and the Service.

use crate::support::{assert_spec_valid, merge, spec_errors, spec_paths};
use serde_json::{Value, json};

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
fn autoscaler_ref_must_be_an_autoscaling_v2_hpa_or_a_keda_scaled_object_with_ordered_bounds() {
    let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": "podinfo"});
    assert_spec_valid(json!({ "autoscalerRef": hpa.clone() }));
    let with = |patch: Value| {
        let mut a = hpa.clone();
        merge(&mut a, patch);
        spec_paths(json!({ "autoscalerRef": a }))
    };
    assert_eq!(with(json!({"name": ""})), ["spec.autoscalerRef.name"]);
    assert_eq!(
        with(json!({"kind": "VerticalPodAutoscaler"})),
        ["spec.autoscalerRef.kind"]
    );
    // A KEDA ScaledObject is keda.sh/v1alpha1, and only it takes primaryScalerQueries.
    assert_eq!(
        with(json!({"kind": "ScaledObject"})),
        ["spec.autoscalerRef.apiVersion"]
    );
    assert!(
        with(
            json!({"kind": "ScaledObject", "apiVersion": "keda.sh/v1alpha1",
                    "primaryScalerQueries": {"requests": "sum(up)"}})
        )
        .is_empty()
    );
    assert_eq!(
        with(json!({"primaryScalerQueries": {"requests": "sum(up)"}})),
        ["spec.autoscalerRef.primaryScalerQueries"]
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
