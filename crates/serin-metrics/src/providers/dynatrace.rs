//! Dynatrace's metrics API v2 (`GET /api/v2/metrics/query`), read as Flagger reads it: the metric
//! selector over ten times the metric's interval at resolution `Inf`, and the value is the first
//! value of the last series of the first result.

use super::http::ProviderRequest;
use super::{Credentials, Failure};
use serde_json::Value;
use std::time::Duration;

/// How far back the query window reaches, in metric intervals.
pub const WINDOW_INTERVALS: u32 = 10;

/// The request for the metric selector `query` over the window ending at `now_millis`.
pub fn request(
    address: Option<&str>,
    query: &str,
    interval: Duration,
    now_millis: i64,
    credentials: Option<&Credentials>,
) -> Result<ProviderRequest, Failure> {
    let address = address.ok_or_else(|| {
        Failure::Setting(
            "provider.address is required for dynatrace: write the environment's URL, e.g. https://abc12345.live.dynatrace.com".into(),
        )
    })?;
    let token = super::secret_of(credentials, "dynatrace", "dynatrace_token")?
        .required("dynatrace_token")?;
    let mut url = super::endpoint(address, "/api/v2/metrics/query")?;
    let from = now_millis - (interval * WINDOW_INTERVALS).as_millis() as i64;
    url.query_pairs_mut()
        .append_pair("metricSelector", query)
        .append_pair("resolution", "Inf")
        .append_pair("from", &from.to_string())
        .append_pair("to", &now_millis.to_string());
    let mut request = ProviderRequest::get(url);
    request.secret_headers = vec![("Authorization".into(), format!("Api-Token {token}"))];
    Ok(request)
}

/// The value of an answer: the first value of the last series of the first result; no result,
/// no series, no value or a null one is no data.
pub fn value(body: &[u8]) -> Result<f64, Failure> {
    let answer = super::json_answer(body)?;
    let series = answer["result"][0]["data"]
        .as_array()
        .and_then(|data| data.last());
    match series.map(|s| &s["values"][0]) {
        Some(Value::Number(n)) => n.as_f64().ok_or(Failure::NoValues),
        Some(Value::Null) | None => Err(Failure::NoValues),
        Some(other) => Err(Failure::Answer(format!("value {other} is not a number"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_covers_ten_intervals_with_the_token_as_api_token() {
        let credentials = Credentials::new("dynatrace", [("dynatrace_token", "dt0c01.x")]);
        let request = request(
            Some("https://abc.live.dynatrace.com"),
            "builtin:service.response.time:avg",
            Duration::from_secs(30),
            1_700_000_300_000,
            Some(&credentials),
        )
        .unwrap();
        assert_eq!(request.url.path(), "/api/v2/metrics/query");
        let pairs: Vec<(String, String)> = request.url.query_pairs().into_owned().collect();
        assert_eq!(
            pairs,
            [
                (
                    "metricSelector".to_string(),
                    "builtin:service.response.time:avg".to_string()
                ),
                ("resolution".into(), "Inf".into()),
                ("from".into(), "1700000000000".into()),
                ("to".into(), "1700000300000".into())
            ]
        );
        assert_eq!(
            request.secret_headers,
            [(
                "Authorization".to_string(),
                "Api-Token dt0c01.x".to_string()
            )]
        );
        assert!(matches!(
            super::request(None, "q", Duration::from_secs(30), 0, Some(&credentials)),
            Err(Failure::Setting(m)) if m.contains("provider.address is required")
        ));
    }

    #[test]
    fn the_first_value_of_the_last_series_is_read() {
        let body =
            br#"{"totalCount": 2, "resolution": "Inf", "result": [{"metricId": "m", "data": [
            {"dimensions": ["a"], "timestamps": [1], "values": [7.0]},
            {"dimensions": ["b"], "timestamps": [1], "values": [3.5, 9.0]}]}]}"#;
        assert_eq!(value(body), Ok(3.5));
        assert_eq!(
            value(br#"{"result": [{"data": []}]}"#),
            Err(Failure::NoValues)
        );
        assert_eq!(
            value(br#"{"result": [{"data": [{"values": [null]}]}]}"#),
            Err(Failure::NoValues)
        );
        assert_eq!(value(br#"{"result": []}"#), Err(Failure::NoValues));
    }
}
