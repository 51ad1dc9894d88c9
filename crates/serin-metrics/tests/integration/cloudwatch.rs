//! CloudWatch templates with keys in their Secret, against a loopback server that answers as
//! `GetMetricData` over CloudWatch's JSON protocol and verifies each request's SigV4 signature:
//! values, no values, a rejected expression, unknown keys, a bad signature and throttling (HTTP 400
//! `Throttling`, retried as the AWS SDKs retry it).

use serin_core::plan::MetricReading;
use std::collections::BTreeMap;

use crate::support;
use crate::support::cloudwatch as cloudwatch_server;

const QUERY: &str = r#"[
    {"Id": "e1", "Expression": "m1 / m2", "Label": "Error Rate"},
    {"Id": "m1", "MetricStat": {"Metric": {"Namespace": "MyCluster", "MetricName": "ErrorCount",
        "Dimensions": [{"Name": "appName", "Value": "{{ target }}"}]}, "Period": 60, "Stat": "Sum"},
     "ReturnData": false},
    {"id": "m2", "metricStat": {"metric": {"namespace": "MyCluster", "metricName": "RequestCount",
        "dimensions": [{"name": "appName", "value": "{{ target }}"}]}, "period": 60, "stat": "Sum"},
     "returnData": false}
]"#;

fn template(address: &str, query: &str) -> serin_api::MetricTemplate {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "serin.dev/v1beta1", "kind": "MetricTemplate",
        "metadata": {"name": "errors", "namespace": "test"},
        "spec": {"provider": {"type": "cloudwatch", "address": address, "region": "eu-west-1",
                              "secretRef": {"name": "aws"}},
                 "query": query}
    }))
    .unwrap()
}

fn keys(id: &str, secret: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("aws_access_key_id".to_string(), id.to_string()),
        ("aws_secret_access_key".to_string(), secret.to_string()),
        ("aws_session_token".to_string(), "s3ssion".to_string()),
    ])
}

const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

#[tokio::test]
async fn a_signed_get_metric_data_reads_the_first_value_of_the_first_result() {
    let (address, cloudwatch) = cloudwatch_server::serve(&[("AKIDEXAMPLE", SECRET)]).await;
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let reading = support::read_template(
        &template(&address, QUERY),
        Some(&keys("AKIDEXAMPLE", SECRET)),
        "1m",
    )
    .await;
    assert_eq!(reading, MetricReading::Value(0.25));
    let received = cloudwatch.received.lock().unwrap()[0].clone();
    assert_eq!(
        received.target,
        "GraniteServiceVersion20100801.GetMetricData"
    );
    assert_eq!(received.access_key, "AKIDEXAMPLE");
    assert_eq!(
        received.scope,
        ("eu-west-1".to_string(), "monitoring".to_string())
    );
    assert_eq!(received.session_token.as_deref(), Some("s3ssion"));
    let body = &received.body;
    assert_eq!(body["MaxDatapoints"], 20);
    let (start, end) = (
        body["StartTime"].as_i64().unwrap(),
        body["EndTime"].as_i64().unwrap(),
    );
    assert_eq!(end - start, 600, "ten one-minute intervals");
    assert!(end >= before && end <= before + 5, "{end} vs {before}");
    assert_eq!(
        body["MetricDataQueries"][1]["MetricStat"]["Metric"]["Dimensions"][0],
        serde_json::json!({"Name": "appName", "Value": "podinfo"})
    );
    assert_eq!(
        body["MetricDataQueries"][2]["MetricStat"]["Metric"]["MetricName"], "RequestCount",
        "fields are spelled as CloudWatch spells them, whatever the template's case"
    );
}

#[tokio::test]
async fn no_values_is_no_data_and_errors_name_the_template_and_cloudwatchs_words() {
    let (address, _) = cloudwatch_server::serve(&[("AKIDEXAMPLE", SECRET)]).await;
    let good = keys("AKIDEXAMPLE", SECRET);
    let read = |query: &'static str, keys: BTreeMap<String, String>| {
        let template = template(&address, query);
        async move { support::read_template(&template, Some(&keys), "1m").await }
    };
    assert_eq!(
        read(r#"[{"Id": "e1", "Expression": "nodata()"}]"#, good.clone()).await,
        MetricReading::NoData
    );
    let MetricReading::Error(bad) =
        read(r#"[{"Id": "e1", "Expression": "bad(m1)"}]"#, good.clone()).await
    else {
        panic!("a rejected expression is an error");
    };
    assert!(
        bad.starts_with(
            "Metric template errors.test (cloudwatch) query failed: cloudwatch answered HTTP 400: "
        ) && bad.contains("Unrecognized function bad"),
        "{bad}"
    );
    let MetricReading::Error(throttled) = read(
        r#"[{"Id": "e1", "Expression": "throttled()"}]"#,
        good.clone(),
    )
    .await
    else {
        panic!("throttling is an error");
    };
    assert!(
        throttled.contains(
            "cloudwatch rate-limited the query (HTTP 400 Throttling, 3 times; Retry-After 1s)"
        ),
        "{throttled}"
    );
    assert_eq!(
        read(
            r#"[{"Id": "e1", "Expression": "throttled_once()"}]"#,
            good.clone()
        )
        .await,
        MetricReading::Value(0.25),
        "throttling is waited for and the query sent again, as the AWS SDKs do"
    );
    let MetricReading::Error(unknown) = read(
        r#"[{"Id": "e1", "Expression": "m1"}]"#,
        keys("AKIDUNKNOWN", SECRET),
    )
    .await
    else {
        panic!("unknown keys are an error");
    };
    assert!(
        unknown.contains("The security token included in the request is invalid"),
        "{unknown}"
    );
    let MetricReading::Error(forged) = read(
        r#"[{"Id": "e1", "Expression": "m1"}]"#,
        keys("AKIDEXAMPLE", "not-the-secret"),
    )
    .await
    else {
        panic!("a wrong secret is an error");
    };
    assert!(
        forged.contains("HTTP 403: the operator's AWS identity needs cloudwatch:GetMetricData")
            && forged.contains("InvalidSignatureException"),
        "{forged}"
    );
    for message in [&bad, &throttled, &unknown, &forged] {
        assert!(
            !message.contains(SECRET) && !message.contains("s3ssion"),
            "{message}"
        );
    }
    let MetricReading::Error(not_json) = read("m1 / m2", good.clone()).await else {
        panic!("a query that is not JSON is an error");
    };
    assert!(
        not_json.starts_with(
            "Metric template errors.test (cloudwatch) cannot be queried: spec.query is not JSON"
        ),
        "{not_json}"
    );
    let mut partial = good.clone();
    partial.remove("aws_secret_access_key");
    assert_eq!(
        read(QUERY, partial).await,
        MetricReading::Error(
            "Metric template errors.test (cloudwatch) cannot be queried: the Secret aws has no aws_secret_access_key key".into()
        )
    );
}
