//! Datadog's metrics query API (`GET /api/v1/query`), read as Flagger reads it: the window reaches
//! back ten times the metric's interval, and the value is the first point of the first series.

use super::http::ProviderRequest;
use super::{Credentials, Failure};
use serde_json::Value;
use std::time::Duration;

/// Where the API is when the template names no address.
pub const DEFAULT_ADDRESS: &str = "https://api.datadoghq.com";

/// How far back the query window reaches, in metric intervals.
pub const WINDOW_INTERVALS: u32 = 10;

/// The request for `query` over the window ending at `now` (Unix seconds).
pub fn request(
    address: Option<&str>,
    query: &str,
    interval: Duration,
    now: i64,
    credentials: Option<&Credentials>,
) -> Result<ProviderRequest, Failure> {
    let credentials = super::secret_of(
        credentials,
        "datadog",
        "datadog_api_key and datadog_application_key",
    )?;
    let mut url = super::endpoint(address.unwrap_or(DEFAULT_ADDRESS), "/api/v1/query")?;
    let from = now - (interval * WINDOW_INTERVALS).as_secs() as i64;
    url.query_pairs_mut()
        .append_pair("query", query)
        .append_pair("from", &from.to_string())
        .append_pair("to", &now.to_string());
    let mut request = ProviderRequest::get(url);
    request.secret_headers = vec![
        (
            "DD-API-KEY".into(),
            credentials.required("datadog_api_key")?.to_string(),
        ),
        (
            "DD-APPLICATION-KEY".into(),
            credentials.required("datadog_application_key")?.to_string(),
        ),
    ];
    Ok(request)
}

/// The value of a query answer: the first point of the first series. No series, no point or a
/// null value is no data.
pub fn value(body: &[u8]) -> Result<f64, Failure> {
    let answer = super::json_answer(body)?;
    if let Some(error) = answer["error"].as_str().or(answer["errors"][0].as_str()) {
        return Err(Failure::Answer(format!("datadog said: {error}")));
    }
    match &answer["series"][0]["pointlist"][0][1] {
        Value::Number(n) => n.as_f64().ok_or(Failure::NoValues),
        Value::Null => Err(Failure::NoValues),
        other => Err(Failure::Answer(format!(
            "point value {other} is not a number"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Credentials {
        Credentials::new(
            "datadog",
            [
                ("datadog_api_key", "api"),
                ("datadog_application_key", "app"),
            ],
        )
    }

    #[test]
    fn the_window_is_ten_intervals_and_the_keys_go_in_headers() {
        let request = request(
            None,
            "sum:trace.http.request.errors{service:podinfo}.as_count()",
            Duration::from_secs(60),
            1_700_000_600,
            Some(&keys()),
        )
        .unwrap();
        assert_eq!(request.url.host_str(), Some("api.datadoghq.com"));
        assert_eq!(request.url.path(), "/api/v1/query");
        let pairs: Vec<(String, String)> = request.url.query_pairs().into_owned().collect();
        assert_eq!(
            pairs,
            [
                (
                    "query".to_string(),
                    "sum:trace.http.request.errors{service:podinfo}.as_count()".to_string()
                ),
                ("from".into(), "1700000000".into()),
                ("to".into(), "1700000600".into())
            ]
        );
        assert_eq!(
            request.secret_headers,
            [
                ("DD-API-KEY".to_string(), "api".to_string()),
                ("DD-APPLICATION-KEY".into(), "app".into())
            ]
        );
        let missing = Credentials::new("datadog", [("datadog_api_key", "api")]);
        assert_eq!(
            super::request(None, "q", Duration::from_secs(60), 0, Some(&missing)).unwrap_err(),
            Failure::Setting("the Secret datadog has no datadog_application_key key".into())
        );
        assert!(matches!(
            super::request(None, "q", Duration::from_secs(60), 0, None),
            Err(Failure::Setting(m)) if m.contains("secretRef is missing")
        ));
    }

    #[test]
    fn the_first_point_of_the_first_series_is_read() {
        let body = br#"{"status": "ok", "series": [
            {"pointlist": [[1700000000000.0, 0.5], [1700000060000.0, 0.9]]},
            {"pointlist": [[1700000000000.0, 7.0]]}]}"#;
        assert_eq!(value(body), Ok(0.5));
        assert_eq!(
            value(br#"{"status": "ok", "series": []}"#),
            Err(Failure::NoValues)
        );
        assert_eq!(
            value(br#"{"series": [{"pointlist": [[1700000000000.0, null]]}]}"#),
            Err(Failure::NoValues)
        );
        assert_eq!(
            value(br#"{"status": "error", "error": "Rule 'sum:' is invalid"}"#),
            Err(Failure::Answer(
                "datadog said: Rule 'sum:' is invalid".into()
            ))
        );
    }
}
