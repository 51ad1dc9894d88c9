//! The client against Debian's Prometheus scraping Istio telemetry: Flagger's builtin queries,
//! `vector(1)`, empty results, bad queries and an unreachable server.

use serin_core::plan::MetricReading;
use serin_metrics::{PrometheusClient, QueryContext, QueryError, builtin_query};
use serin_sandbox::prometheus::Prometheus;
use serin_sandbox::telemetry::{Reporter, Sample, Telemetry, Workload};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn context(target: &str) -> QueryContext {
    QueryContext {
        name: "podinfo".into(),
        namespace: "test".into(),
        target: target.into(),
        interval: "5s".into(),
        ..QueryContext::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_queries_online_check_and_errors_against_a_real_prometheus() {
    let telemetry = Arc::new(Telemetry::default());
    let address = serin_sandbox::telemetry::serve(telemetry.clone())
        .await
        .unwrap();
    let recorder = telemetry.clone();
    let traffic = tokio::spawn(async move {
        let started = Instant::now();
        let mut sent = 0u64;
        while started.elapsed() < Duration::from_secs(40) {
            sent += 1;
            recorder.record(&Sample {
                reporter: Reporter::Destination,
                source: Workload::unknown(),
                destination: Workload {
                    name: "podinfo".into(),
                    namespace: "test".into(),
                    app: "podinfo".into(),
                    version: "unknown".into(),
                },
                destination_service: "podinfo-canary.test.svc.cluster.local".into(),
                response_code: if sent.is_multiple_of(10) { 503 } else { 200 },
                response_flags: "-".into(),
                duration: Duration::from_millis(30),
            });
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let prometheus = tokio::task::spawn_blocking(move || {
        Prometheus::start("prometheus", &[address], "/stats/prometheus")
            .expect("Debian's prometheus (apt-get install prometheus)")
    })
    .await
    .unwrap();
    let client = PrometheusClient::new(&prometheus.url).unwrap();
    client.is_online().await.expect("vector(1) is 1");

    // Read once Prometheus holds more than one 5 s window of samples.
    let scraping = Instant::now();
    let query = builtin_query("request-success-rate", &context("podinfo")).unwrap();
    let rate = loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let answer = client.query(&query).await;
        match answer {
            Ok(value) if scraping.elapsed() >= Duration::from_secs(7) => break value,
            _ => assert!(
                scraping.elapsed() < Duration::from_secs(30),
                "no success rate: {answer:?}"
            ),
        }
    };
    assert!(
        (rate - 90.0).abs() <= 2.0,
        "success rate {rate}, recorded 90"
    );
    let p99 = client
        .query(&builtin_query("request-duration", &context("podinfo")).unwrap())
        .await
        .unwrap();
    assert!(p99 > 25.0 && p99 <= 50.0, "p99 {p99} ms for 30 ms requests");

    // The primary got nothing: Flagger's "no values found", which the core reads as no data.
    let idle = client
        .query(&builtin_query("request-success-rate", &context("podinfo-primary")).unwrap())
        .await
        .unwrap_err();
    assert_eq!(idle, QueryError::NoValues);
    assert_eq!(idle.reading(), MetricReading::NoData);

    // A query error and no data are different outcomes with different judgements.
    let bad = client.query("sum(rate(x[1m]").await.unwrap_err();
    assert!(
        matches!(&bad, QueryError::Rejected(m) if m.starts_with("bad_data: ") && m.contains("parse error")),
        "{bad}"
    );
    let failed = bad.reading();
    assert!(
        matches!(&failed, MetricReading::Error(m) if m.contains("parse error") && m.contains("fix the metric's query")),
        "{failed:?}"
    );
    let absent = client
        .query("sum(rate(nobody_exports_this_metric_total[1m]))")
        .await
        .unwrap_err();
    assert_eq!(absent, QueryError::NoValues);

    // What a dashboard panel draws: the series with a number, however many.
    let by_code =
        "sum by (response_code) (rate(istio_requests_total{destination_workload=\"podinfo\"}[5s]))";
    assert_eq!(client.count_series(by_code).await, Ok(2), "200 and 503");
    assert_eq!(
        client
            .count_series("sum(rate(nobody_exports_this_metric_total[1m]))")
            .await,
        Ok(0)
    );
    assert_eq!(client.count_series("vector(0) / 0").await, Ok(0), "NaN");
    assert!(matches!(
        client.count_series("sum(rate(x[1m]").await,
        Err(QueryError::Rejected(_))
    ));
    let custom: serin_api::CanaryMetric =
        serde_json::from_value(serde_json::json!({"name": "errors", "query": "x"})).unwrap();
    let judged_failure = serin_core::metrics::judge(&custom, &failed, "podinfo", "podinfo");
    let judged_absent =
        serin_core::metrics::judge(&custom, &absent.reading(), "podinfo", "podinfo");
    assert!(
        judged_failure.message.starts_with(
            "Metric query failed for errors: Prometheus could not run the query (bad_data: "
        ),
        "{}",
        judged_failure.message
    );
    assert_eq!(
        judged_absent.message,
        "Halt advancement no values found for metric: errors"
    );
    assert!(!judged_failure.passed && !judged_absent.passed);

    // Reading metrics as the controller will: builtins, MetricTemplates and their errors.
    let metric = |json: serde_json::Value| -> serin_api::CanaryMetric {
        serde_json::from_value(json).unwrap()
    };
    let template: serin_api::MetricTemplate = serde_json::from_value(serde_json::json!({
        "apiVersion": "serin.dev/v1beta1", "kind": "MetricTemplate",
        "metadata": {"name": "latency", "namespace": "test"},
        "spec": {"provider": {"type": "prometheus", "address": prometheus.url,
                              "secretRef": {"name": "prom-auth"}},
                 "query": "histogram_quantile({{ variables.quantile }}, sum(rate(istio_request_duration_milliseconds_bucket{destination_workload=~\"{{ target }}\"}[{{ interval }}])) by (le))"}
    }))
    .unwrap();
    let secret = std::collections::BTreeMap::from([("token".to_string(), "t0ken".to_string())]);
    let clients = serin_metrics::ClientCache::default();
    let inputs = |template| serin_metrics::MetricInputs {
        context: context("podinfo"),
        template,
        secret: Some(&secret),
        metrics_server: &client,
        clients: &clients,
        provider: "istio",
    };
    let builtin = serin_metrics::read(
        &metric(serde_json::json!({"name": "request-success-rate", "interval": "5s"})),
        inputs(None),
    )
    .await;
    assert!(
        matches!(builtin, MetricReading::Value(v) if (v - 90.0).abs() <= 2.0),
        "{builtin:?}"
    );
    let templated = metric(serde_json::json!({"name": "p95", "interval": "5s",
        "templateRef": {"name": "latency"}, "templateVariables": {"quantile": "0.95"}}));
    let value = serin_metrics::read(&templated, inputs(Some(&template))).await;
    assert!(
        matches!(value, MetricReading::Value(v) if v > 25.0 && v <= 50.0),
        "{value:?}"
    );
    let missing_template = serin_metrics::read(&templated, inputs(None)).await;
    assert_eq!(
        missing_template,
        MetricReading::Error("Metric template latency.test error: not found; create the MetricTemplate or fix templateRef".into())
    );
    let unset = metric(serde_json::json!({"name": "p95", "templateRef": {"name": "latency"}}));
    let render_error = serin_metrics::read(&unset, inputs(Some(&template))).await;
    assert!(
        matches!(&render_error, MetricReading::Error(m) if m.contains("query render error") && m.contains("quantile")),
        "{render_error:?}"
    );
    assert_eq!(
        clients.len(),
        1,
        "reads of one template share one client (and its connections)"
    );

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nowhere = PrometheusClient::new(&format!("http://127.0.0.1:{port}")).unwrap();
    let down = nowhere.is_online().await.unwrap_err();
    assert!(matches!(down, QueryError::Unreachable { .. }), "{down}");
    assert!(down.to_string().contains("--metrics-server"), "{down}");
    traffic.abort();
}
