//! InfluxDB 2's query API (`POST /api/v2/query`, Flux), read as Flagger reads it through
//! influxdb-client-go: the answer is annotated CSV, and the value is `_value` of the first record.

use super::http::ProviderRequest;
use super::{Credentials, Failure};
use std::time::Duration;

/// How long a Flux query may run (Flagger's timeout for InfluxDB).
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(15);

/// The request for the Flux `query`, with the Secret's `token` and `org` when the template has one.
pub fn request(
    address: &str,
    query: &str,
    credentials: Option<&Credentials>,
) -> Result<ProviderRequest, Failure> {
    let mut url = super::endpoint(address, "/api/v2/query")?;
    let mut secret_headers = Vec::new();
    if let Some(credentials) = credentials {
        let token = credentials.required("token")?;
        let org = credentials.required("org")?;
        url.query_pairs_mut().append_pair("org", org);
        secret_headers.push(("Authorization".to_string(), format!("Token {token}")));
    }
    let body = serde_json::json!({
        "query": query,
        "type": "flux",
        "dialect": {"header": true, "delimiter": ",", "annotations": ["datatype", "group", "default"],
                    "commentPrefix": "#", "dateTimeFormat": "RFC3339"},
    });
    Ok(ProviderRequest {
        method: reqwest::Method::POST,
        url,
        headers: vec![
            ("Content-Type".into(), "application/json".into()),
            ("Accept".into(), "text/csv".into()),
        ],
        secret_headers,
        body: Some(body.to_string()),
        timeout: QUERY_TIMEOUT,
        end_marker: None,
        throttled_400: None,
    })
}

/// One CSV line's fields, with RFC 4180 quoting (`"a,b"`, `""` for a quote).
fn fields(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut field)),
            (c, _) => field.push(c),
        }
    }
    fields.push(field);
    fields
}

/// The value of an annotated-CSV answer: `_value` of the first record. An answer with no record,
/// or a record whose `_value` is empty, is no data; an error table is the query's error.
pub fn value(body: &[u8]) -> Result<f64, Failure> {
    let text = String::from_utf8_lossy(body);
    let mut datatypes: Vec<String> = Vec::new();
    let mut defaults: Vec<String> = Vec::new();
    let mut header: Option<Vec<String>> = None;
    for line in text.lines().map(|l| l.trim_end_matches('\r')) {
        if line.is_empty() {
            // A blank line ends a table; the next one brings its own annotations and header.
            header = None;
            continue;
        }
        let row = fields(line);
        match row[0].as_str() {
            "#datatype" => datatypes = row,
            "#default" => defaults = row,
            first if first.starts_with('#') => {}
            _ if header.is_none() => header = Some(row),
            _ => {
                let columns = header.as_ref().expect("set above");
                let column = |name: &str| columns.iter().position(|c| c == name);
                if let (Some(error), None) = (column("error"), column("_value")) {
                    return Err(Failure::Answer(format!(
                        "influxdb said: {}",
                        row.get(error).map(String::as_str).unwrap_or_default()
                    )));
                }
                let at = column("_value").ok_or_else(|| {
                    Failure::Answer(
                        "the first table has no _value column: end the Flux query with a table whose _value is the number".into(),
                    )
                })?;
                let mut raw = row.get(at).cloned().unwrap_or_default();
                if raw.is_empty() {
                    raw = defaults.get(at).cloned().unwrap_or_default();
                }
                if raw.is_empty() {
                    return Err(Failure::NoValues);
                }
                let datatype = datatypes.get(at).map(String::as_str).unwrap_or("double");
                return match datatype {
                    "double" | "long" | "unsignedLong" => raw
                        .parse::<f64>()
                        .map_err(|_| Failure::Answer(format!("_value {raw:?} is not a number"))),
                    other => Err(Failure::Answer(format!(
                        "_value is of type {other}, not a number: {raw:?}"
                    ))),
                };
            }
        }
    }
    Err(Failure::NoValues)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flux_goes_as_json_with_the_org_and_the_token() {
        let credentials = Credentials::new("influx", [("token", "t0k"), ("org", "my org")]);
        let request = request(
            "http://influxdb.monitoring:8086",
            "from(bucket: \"app\") |> range(start: -1m)",
            Some(&credentials),
        )
        .unwrap();
        assert_eq!(request.method, reqwest::Method::POST);
        assert_eq!(
            request.url.as_str(),
            "http://influxdb.monitoring:8086/api/v2/query?org=my+org"
        );
        assert_eq!(
            request.secret_headers,
            [("Authorization".to_string(), "Token t0k".to_string())]
        );
        let body: serde_json::Value =
            serde_json::from_str(request.body.as_deref().unwrap()).unwrap();
        assert_eq!(body["query"], "from(bucket: \"app\") |> range(start: -1m)");
        assert_eq!(body["type"], "flux");
        let partial = Credentials::new("influx", [("token", "t0k")]);
        assert_eq!(
            super::request("http://i:8086", "q", Some(&partial)).unwrap_err(),
            Failure::Setting("the Secret influx has no org key".into())
        );
    }

    #[test]
    fn the_first_records_value_is_read_from_annotated_csv() {
        let answer = "#datatype,string,long,dateTime:RFC3339,dateTime:RFC3339,double,string,string\r\n\
#group,false,false,true,true,false,true,true\r\n\
#default,_result,,,,,,\r\n\
,result,table,_start,_stop,_value,_field,_measurement\r\n\
,,0,2026-11-27T09:00:00Z,2026-11-27T09:01:00Z,1.5,errors,\"http,api\"\r\n\
,,0,2026-11-27T09:00:00Z,2026-11-27T09:01:00Z,9,errors,http\r\n\
\r\n";
        assert_eq!(value(answer.as_bytes()), Ok(1.5));
        assert_eq!(value(b""), Err(Failure::NoValues));
        let empty = "#datatype,string,long,double\n#group,false,false,false\n#default,_result,,\n,result,table,_value\n,,0,\n";
        assert_eq!(value(empty.as_bytes()), Err(Failure::NoValues));
        let error = "#datatype,string,string\n#group,true,true\n#default,,\n,error,reference\n,\"failed to execute query: undefined identifier bucke\",897\n";
        assert_eq!(
            value(error.as_bytes()),
            Err(Failure::Answer(
                "influxdb said: failed to execute query: undefined identifier bucke".into()
            ))
        );
        let text = "#datatype,string,long,string\n#group,false,false,false\n#default,_result,,\n,result,table,_value\n,,0,ok\n";
        assert!(
            matches!(value(text.as_bytes()), Err(Failure::Answer(m)) if m.contains("type string"))
        );
    }
}
