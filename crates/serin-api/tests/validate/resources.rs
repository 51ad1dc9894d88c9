//! MetricTemplate and AlertProvider, the resources a Canary refers to.

use crate::support::merge;
use serde_json::{Value, json};
use serin_api::validate::{validate_alert_provider, validate_metric_template};
use serin_api::{AlertProvider, MetricTemplate};

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
    // Flagger's providers Serin does not read yet would fail every check at run time and roll
    // healthy releases back.
    assert_eq!(
        template(json!({"provider": {"type": "externalmetrics", "address": null}})),
        ["spec.provider.type"]
    );
    // Keptn reads Kubernetes objects: no address, no Secret, a query naming its resource.
    assert!(
        template(json!({"provider": {"type": "keptn", "address": null},
                        "query": "keptnmetric/{{ namespace }}/errors"}))
        .is_empty()
    );
    assert_eq!(
        template(
            json!({"provider": {"type": "keptn", "address": "http://keptn", "secretRef": {"name": "k"}},
                        "query": "pods/test/x"})
        ),
        [
            "spec.provider.address",
            "spec.provider.secretRef",
            "spec.query"
        ]
    );
    // CloudWatch needs its region, from the field or its address.
    assert!(
        template(
            json!({"provider": {"type": "cloudwatch", "address": null, "region": "eu-west-1"}})
        )
        .is_empty()
    );
    assert!(
        template(json!({"provider": {"type": "cloudwatch",
            "address": "https://monitoring.eu-west-1.amazonaws.com"}}))
        .is_empty()
    );
    assert_eq!(
        template(json!({"provider": {"type": "cloudwatch", "address": null}})),
        ["spec.provider.region"]
    );
    assert_eq!(
        template(json!({"provider": {"type": "cloudwatch", "address": null, "region": "EU West"}})),
        ["spec.provider.region"]
    );
    // Graphite needs graphite-web's address; Datadog has a default address and needs its keys.
    assert!(
        template(
            json!({"provider": {"type": "graphite", "address": "http://graphite.monitoring"}})
        )
        .is_empty()
    );
    assert_eq!(
        template(json!({"provider": {"type": "graphite", "address": null}})),
        ["spec.provider.address"]
    );
    assert!(
        template(json!({"provider": {"type": "datadog", "address": null, "secretRef": {"name": "datadog"}}}))
            .is_empty()
    );
    assert_eq!(
        template(json!({"provider": {"type": "datadog", "address": "api.datadoghq.com"}})),
        ["spec.provider.address", "spec.provider.secretRef"]
    );
    assert_eq!(
        template(json!({"provider": {"region": "eu-west-1"}})),
        ["spec.provider.region"]
    );
    assert_eq!(
        template(json!({"provider": {"type": "dynatrace", "address": null}})),
        ["spec.provider.address", "spec.provider.secretRef"]
    );
    assert!(
        template(
            json!({"provider": {"type": "newrelic", "address": null, "secretRef": {"name": "nr"}}})
        )
        .is_empty()
    );
    assert!(
        template(json!({"provider": {"type": "influxdb", "address": "http://influxdb:8086"}}))
            .is_empty()
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
