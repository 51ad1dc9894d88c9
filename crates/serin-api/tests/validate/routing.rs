//! The routers: which providers Serin accepts, and what the kubernetes provider (blue/green, or a
//! canary by replica ratio) and the Gateway API router refuse.

use crate::support::{assert_spec_valid, kubernetes_blue_green, merge, spec_errors, spec_paths};
use serde_json::{Value, json};
use serin_api::validate::{FieldError, PROVIDERS, ROUTING_PROVIDERS};

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

#[test]
fn the_gateway_api_router_needs_gateways_refuses_the_virtual_services_fields_and_pins_sessions() {
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
    // The router writes Flagger's cookie rules and Set-Cookie filters into the HTTPRoute.
    let affinity = spec_errors(
        json!({"provider": "gatewayapi:v1", "service": {"gatewayRefs": parents},
        "analysis": {"interval": "15s", "threshold": 5, "stepWeight": 10, "maxWeight": 50,
                     "sessionAffinity": {"cookieName": "canary-cookie", "primaryCookieName": "primary-cookie"}}}),
    );
    assert!(affinity.is_empty(), "{affinity:?}");
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
fn route_durations_are_go_durations() {
    for (field, patch) in [
        ("spec.service.timeout", json!({"timeout": "10x"})),
        (
            "spec.service.retries.perTryTimeout",
            json!({"retries": {"attempts": 3, "perTryTimeout": "1 s"}}),
        ),
        (
            "spec.service.corsPolicy.maxAge",
            json!({"corsPolicy": {"maxAge": "a day"}}),
        ),
    ] {
        let mut service = json!({"port": 9898});
        merge(&mut service, patch);
        assert_eq!(spec_paths(json!({ "service": service })), [field]);
    }
    let errors = spec_errors(json!({"provider": "gatewayapi:v1",
        "service": {"port": 9898, "backendTimeout": "soon", "gatewayRefs": [{"name": "public-gateway"}]}}));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].path, "spec.service.backendTimeout");
    assert!(
        errors[0].message.contains("cannot parse \"soon\""),
        "{}",
        errors[0].message
    );
    let mut service = json!({"port": 9898});
    merge(
        &mut service,
        json!({"timeout": "1m30s", "retries": {"attempts": 3, "perTryTimeout": "2s"},
        "corsPolicy": {"maxAge": "24h"}}),
    );
    assert_spec_valid(json!({ "service": service }));
}
