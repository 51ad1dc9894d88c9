//! New Relic's Insights query API, read as Flagger reads it: the NRQL query gets
//! `SINCE <interval> seconds ago` appended, and the value is the `result` of the one result row.

use super::http::ProviderRequest;
use super::{Credentials, Failure};
use serde_json::Value;
use std::time::Duration;

/// Where the API is when the template names no address.
pub const DEFAULT_ADDRESS: &str = "https://insights-api.newrelic.com";

/// The request for the NRQL `query` over the last `interval`.
pub fn request(
    address: Option<&str>,
    query: &str,
    interval: Duration,
    credentials: Option<&Credentials>,
) -> Result<ProviderRequest, Failure> {
    let credentials = super::secret_of(
        credentials,
        "newrelic",
        "newrelic_account_id and newrelic_query_key",
    )?;
    let account = credentials.required("newrelic_account_id")?;
    let key = credentials.required("newrelic_query_key")?;
    let mut url = super::endpoint(
        address.unwrap_or(DEFAULT_ADDRESS),
        &format!("/v1/accounts/{}/query", account.trim()),
    )?;
    url.query_pairs_mut().append_pair(
        "nrql",
        &format!("{query} SINCE {} seconds ago", interval.as_secs()),
    );
    let mut request = ProviderRequest::get(url);
    request.secret_headers = vec![("X-Query-Key".into(), key.to_string())];
    Ok(request)
}

/// The value of an answer: `results` must hold exactly one row, whose `result` is the value; a
/// null `result` is no data.
pub fn value(body: &[u8]) -> Result<f64, Failure> {
    let answer = super::json_answer(body)?;
    let rows = answer["results"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    match rows {
        [row] => match &row["result"] {
            Value::Number(n) => n.as_f64().ok_or(Failure::NoValues),
            Value::Null => Err(Failure::NoValues),
            other => Err(Failure::Answer(format!("result {other} is not a number"))),
        },
        [] => Err(Failure::NoValues),
        rows => Err(Failure::Answer(format!(
            "the query returned {} result rows; write it to return one, named result (SELECT ... AS result)",
            rows.len()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nrql_gets_the_interval_and_the_key_goes_in_a_header() {
        let credentials = Credentials::new(
            "newrelic",
            [
                ("newrelic_account_id", "100"),
                ("newrelic_query_key", "NRIQ-k"),
            ],
        );
        let request = request(
            None,
            "SELECT percentage(count(*), WHERE error IS true) AS result FROM Transaction",
            Duration::from_secs(60),
            Some(&credentials),
        )
        .unwrap();
        assert_eq!(request.url.host_str(), Some("insights-api.newrelic.com"));
        assert_eq!(request.url.path(), "/v1/accounts/100/query");
        let pairs: Vec<(String, String)> = request.url.query_pairs().into_owned().collect();
        assert_eq!(
            pairs,
            [(
                "nrql".to_string(),
                "SELECT percentage(count(*), WHERE error IS true) AS result FROM Transaction SINCE 60 seconds ago".to_string()
            )]
        );
        assert_eq!(
            request.secret_headers,
            [("X-Query-Key".to_string(), "NRIQ-k".to_string())]
        );
    }

    #[test]
    fn one_row_with_a_result_is_the_value() {
        assert_eq!(value(br#"{"results": [{"result": 2.5}]}"#), Ok(2.5));
        assert_eq!(
            value(br#"{"results": [{"result": null}]}"#),
            Err(Failure::NoValues)
        );
        assert_eq!(value(br#"{"results": []}"#), Err(Failure::NoValues));
        assert!(matches!(
            value(br#"{"results": [{"result": 1}, {"result": 2}]}"#),
            Err(Failure::Answer(m)) if m.contains("2 result rows")
        ));
    }
}
