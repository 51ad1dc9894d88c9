//! Amazon CloudWatch's `GetMetricData`, read as Flagger reads it: the template's query is the JSON
//! list of MetricDataQueries, the window reaches back ten times the metric's interval with at most
//! 20 points, and the value is the first value of the first result. The request goes over
//! CloudWatch's JSON protocol and is signed with SigV4 ([`super::aws`]).

use super::Failure;
use super::http::ProviderRequest;
use serde_json::{Map, Value};
use std::time::Duration;

/// How far back the query window reaches, in metric intervals.
pub const WINDOW_INTERVALS: u32 = 10;

/// The most points asked for, as Flagger asks.
pub const MAX_DATAPOINTS: u32 = 20;

/// The name CloudWatch signs requests under.
pub const SIGNING_NAME: &str = "monitoring";

/// The field names of a MetricDataQuery as CloudWatch spells them; the template may spell them in
/// any case, since Flagger's JSON decoding ignores case.
const FIELDS: [&str; 15] = [
    "Id",
    "MetricStat",
    "Metric",
    "Namespace",
    "MetricName",
    "Dimensions",
    "Name",
    "Value",
    "Period",
    "Stat",
    "Unit",
    "Expression",
    "Label",
    "ReturnData",
    "AccountId",
];

/// The API's address in `region` when the template names none.
pub fn default_address(region: &str) -> String {
    format!("https://monitoring.{region}.amazonaws.com")
}

/// The region of the template: `provider.region`, else the one in an address such as
/// `https://monitoring.eu-west-1.amazonaws.com`.
pub fn region_of(region: Option<&str>, address: Option<&str>) -> Result<String, Failure> {
    if let Some(region) = region.map(str::trim).filter(|r| !r.is_empty()) {
        return valid_region(region).map(str::to_string);
    }
    let from_address = address
        .and_then(|a| reqwest::Url::parse(a).ok())
        .and_then(|url| {
            let host = url.host_str()?.to_string();
            let mut labels = host.split('.');
            (labels.next()? == "monitoring").then(|| labels.next().map(str::to_string))?
        });
    match from_address {
        Some(region) => valid_region(&region).map(str::to_string),
        None => Err(Failure::Setting(
            "provider.region is required for cloudwatch, e.g. region: us-east-1".into(),
        )),
    }
}

/// `region` if it is shaped as an AWS region name.
fn valid_region(region: &str) -> Result<&str, Failure> {
    if serin_api::metric_template::is_aws_region(region) {
        Ok(region)
    } else {
        Err(Failure::Setting(format!(
            "provider.region {region:?} is not an AWS region; write one such as us-east-1"
        )))
    }
}

/// The `GetMetricData` request for `query` (rendered already) over the window ending at `now`
/// (Unix seconds), to `address` or the region's own; it is not signed yet.
pub fn request(
    address: Option<&str>,
    region: &str,
    query: &str,
    interval: Duration,
    now: i64,
) -> Result<ProviderRequest, Failure> {
    let address = address.map_or_else(|| default_address(region), str::to_string);
    let url = super::endpoint(&address, "/")?;
    let queries = metric_data_queries(query)?;
    let start = now - (interval * WINDOW_INTERVALS).as_secs() as i64;
    let body = serde_json::json!({
        "MetricDataQueries": queries,
        "StartTime": start,
        "EndTime": now,
        "MaxDatapoints": MAX_DATAPOINTS,
    });
    let mut request = ProviderRequest::get(url);
    request.method = reqwest::Method::POST;
    request.headers = vec![
        ("Content-Type".into(), "application/x-amz-json-1.0".into()),
        (
            "X-Amz-Target".into(),
            "GraniteServiceVersion20100801.GetMetricData".into(),
        ),
    ];
    request.body = Some(body.to_string());
    // CloudWatch throttles with HTTP 400 `Throttling`, which the AWS SDKs (Flagger's included)
    // wait for and retry.
    request.throttled_400 = Some("Throttling");
    Ok(request)
}

/// The template's query as CloudWatch's MetricDataQueries, field names spelled as CloudWatch
/// spells them.
pub fn metric_data_queries(query: &str) -> Result<Value, Failure> {
    let parsed: Value = serde_json::from_str(query).map_err(|e| {
        Failure::Setting(format!(
            "spec.query is not JSON ({e}); write the MetricDataQueries as a JSON list, e.g. [{{\"Id\": \"e1\", \"Expression\": \"m1 / m2\"}}, ...]"
        ))
    })?;
    match &parsed {
        Value::Array(items) if !items.is_empty() => {}
        _ => {
            return Err(Failure::Setting(
                "spec.query must be a non-empty JSON list of MetricDataQueries".into(),
            ));
        }
    }
    canonical_fields(parsed)
}

fn canonical_fields(value: Value) -> Result<Value, Failure> {
    Ok(match value {
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(canonical_fields)
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(fields) => {
            let mut canonical = Map::new();
            for (key, value) in fields {
                let Some(name) = FIELDS.iter().find(|f| f.eq_ignore_ascii_case(&key)) else {
                    return Err(Failure::Setting(format!(
                        "spec.query has the field {key:?}, which a MetricDataQuery does not have; use {}",
                        FIELDS.join(", ")
                    )));
                };
                canonical.insert(name.to_string(), canonical_fields(value)?);
            }
            Value::Object(canonical)
        }
        other => other,
    })
}

/// The value of a `GetMetricData` answer: the first value of the first result. No result or no
/// value is no data.
pub fn value(body: &[u8]) -> Result<f64, Failure> {
    let answer = super::json_answer(body)?;
    if let Some(kind) = answer["__type"].as_str() {
        return Err(Failure::Answer(format!(
            "cloudwatch said: {}: {}",
            kind.rsplit('#').next().unwrap_or(kind),
            answer["message"]
                .as_str()
                .or(answer["Message"].as_str())
                .unwrap_or("")
        )));
    }
    let first = &answer["MetricDataResults"][0];
    if first["StatusCode"].as_str() == Some("Forbidden") {
        return Err(Failure::Answer(format!(
            "cloudwatch did not let the query read {}: {}",
            first["Id"].as_str().unwrap_or("the first result"),
            answer["Messages"]
        )));
    }
    match &first["Values"][0] {
        Value::Number(n) => n.as_f64().ok_or(Failure::NoValues),
        Value::Null => Err(Failure::NoValues),
        other => Err(Failure::Answer(format!("value {other} is not a number"))),
    }
}

/// What an error answer of CloudWatch means for the template's author.
pub fn error_hint(status: u16, body: &[u8]) -> &'static str {
    let text = String::from_utf8_lossy(&body[..body.len().min(400)]);
    if matches!(status, 401 | 403) || text.contains("AccessDenied") {
        ": the operator's AWS identity needs cloudwatch:GetMetricData (or set aws_access_key_id and aws_secret_access_key in the template's Secret)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUERY: &str = r#"[
        {"Id": "e1", "Expression": "m1 / m2", "Label": "Error Rate"},
        {"id": "m1", "metricStat": {"metric": {"namespace": "MyCluster", "metricName": "ErrorCount",
            "dimensions": [{"name": "appName", "value": "podinfo"}]}, "period": 60, "stat": "Sum",
            "unit": "Count"}, "returnData": false}
    ]"#;

    #[test]
    fn the_body_lists_the_queries_over_ten_intervals() {
        let request = request(
            None,
            "eu-west-1",
            QUERY,
            Duration::from_secs(60),
            1_700_000_600,
        )
        .unwrap();
        assert_eq!(
            request.url.as_str(),
            "https://monitoring.eu-west-1.amazonaws.com/"
        );
        assert_eq!(request.method, reqwest::Method::POST);
        let body: Value = serde_json::from_str(request.body.as_deref().unwrap()).unwrap();
        assert_eq!(body["StartTime"], 1_700_000_000);
        assert_eq!(body["EndTime"], 1_700_000_600);
        assert_eq!(body["MaxDatapoints"], 20);
        assert_eq!(
            body["MetricDataQueries"][1]["MetricStat"]["Metric"]["Dimensions"][0]["Value"],
            "podinfo"
        );
        assert_eq!(body["MetricDataQueries"][1]["ReturnData"], false);
        assert!(request.headers.contains(&(
            "X-Amz-Target".into(),
            "GraniteServiceVersion20100801.GetMetricData".into()
        )));
    }

    #[test]
    fn a_bad_query_names_what_to_write() {
        let error = |q: &str| match metric_data_queries(q) {
            Err(Failure::Setting(text)) => text,
            other => panic!("{other:?}"),
        };
        assert!(error("m1 / m2").starts_with("spec.query is not JSON"));
        assert!(error("[]").contains("non-empty JSON list"));
        assert!(error(r#"[{"Id": "e1", "Expresion": "m1"}]"#).contains("\"Expresion\""));
    }

    #[test]
    fn the_region_comes_from_the_field_or_the_address() {
        assert_eq!(region_of(Some("us-east-1"), None), Ok("us-east-1".into()));
        assert_eq!(
            region_of(
                None,
                Some("https://monitoring.ap-southeast-2.amazonaws.com")
            ),
            Ok("ap-southeast-2".into())
        );
        assert_eq!(
            region_of(Some("us-gov-west-1"), None),
            Ok("us-gov-west-1".into())
        );
        assert!(matches!(region_of(None, Some("http://127.0.0.1:4566")),
            Err(Failure::Setting(m)) if m.contains("provider.region is required")));
        assert!(matches!(region_of(Some("../etc"), None),
            Err(Failure::Setting(m)) if m.contains("not an AWS region")));
    }

    #[test]
    fn the_first_value_of_the_first_result_is_read() {
        let answer = br#"{"MetricDataResults": [
            {"Id": "e1", "Label": "Error Rate", "StatusCode": "Complete",
             "Timestamps": [1700000540, 1700000480], "Values": [0.25, 0.5]},
            {"Id": "m1", "Values": [9.0]}], "Messages": []}"#;
        assert_eq!(value(answer), Ok(0.25));
        assert_eq!(
            value(
                br#"{"MetricDataResults": [{"Id": "e1", "Values": [], "StatusCode": "Complete"}]}"#
            ),
            Err(Failure::NoValues)
        );
        assert_eq!(
            value(br#"{"MetricDataResults": []}"#),
            Err(Failure::NoValues)
        );
        assert_eq!(
            value(br#"{"__type": "com.amazonaws.cloudwatch#InvalidParameterValueException", "message": "Period must be 60"}"#),
            Err(Failure::Answer(
                "cloudwatch said: InvalidParameterValueException: Period must be 60".into()
            ))
        );
    }
}
