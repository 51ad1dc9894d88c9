//! Graphite's render API, read as Flagger reads it: the query is the render API's query string
//! (`target=...&from=-5min`), sent to `<address>/render` with `format=json`, and the value is the
//! last non-null datapoint of the last target that has one.

use super::http::ProviderRequest;
use super::{Credentials, Failure};
use serde_json::Value;

/// The request for the render-API query string `query` at `address`, with basic authentication
/// when the template has a Secret.
pub fn request(
    address: &str,
    query: &str,
    credentials: Option<&Credentials>,
) -> Result<ProviderRequest, Failure> {
    let mut url = super::endpoint(address, "/render")?;
    // Flagger collapses white space, reads the text as a query string and sets format=json.
    let collapsed = crate::query::collapse_whitespace(query);
    let parsed = reqwest::Url::parse(&format!("http://query/?{}", collapsed.trim()))
        .map_err(|e| Failure::Setting(format!("spec.query is not a query string: {e}")))?;
    let mut pairs: Vec<(String, String)> = parsed
        .query_pairs()
        .into_owned()
        .filter(|(name, _)| name != "format")
        .collect();
    pairs.push(("format".into(), "json".into()));
    url.query_pairs_mut().clear().extend_pairs(pairs);
    let mut request = ProviderRequest::get(url);
    if let Some(credentials) = credentials {
        let username = credentials.required("username")?;
        let password = credentials.required("password")?;
        request.secret_headers.push((
            "Authorization".into(),
            format!(
                "Basic {}",
                base64::Engine::encode(
                    &base64::engine::general_purpose::STANDARD,
                    format!("{username}:{password}")
                )
            ),
        ));
    }
    Ok(request)
}

/// The value of a render answer: the last non-null datapoint, the targets read in order.
pub fn value(body: &[u8]) -> Result<f64, Failure> {
    let targets: Vec<Value> = serde_json::from_slice(body).map_err(|e| {
        Failure::Answer(format!(
            "the render answer is not a JSON list of targets ({e}): {}",
            super::http::quote(body)
        ))
    })?;
    let mut last = None;
    for target in &targets {
        for point in target["datapoints"].as_array().into_iter().flatten() {
            let value = match &point[0] {
                Value::Number(n) => n.as_f64(),
                Value::String(s) => Some(s.trim().parse::<f64>().map_err(|_| {
                    Failure::Answer(format!("datapoint value {s:?} is not a number"))
                })?),
                Value::Null => None,
                other => {
                    return Err(Failure::Answer(format!(
                        "datapoint value {other} is not a number"
                    )));
                }
            };
            if value.is_some() {
                last = value;
            }
        }
    }
    last.ok_or(Failure::NoValues)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_non_null_point_of_the_last_target_is_read() {
        let body = br#"[{"target": "a", "datapoints": [[1.5, 100], [2.5, 110], [null, 120]]},
                        {"target": "b", "datapoints": [["3.25", 100], [null, 110]]}]"#;
        assert_eq!(value(body), Ok(3.25));
        assert_eq!(
            value(br#"[{"target": "a", "datapoints": [[null, 1]]}]"#),
            Err(Failure::NoValues)
        );
        assert_eq!(value(b"[]"), Err(Failure::NoValues));
        assert!(matches!(value(b"<html>"), Err(Failure::Answer(m)) if m.contains("<html>")));
    }

    #[test]
    fn the_query_string_goes_to_render_with_format_json_and_basic_auth() {
        let request = request(
            "https://graphite.example.com/prefix/",
            "target=sumSeries(app.*.errors)\n  &from=-5min&format=raw",
            None,
        )
        .unwrap();
        assert_eq!(request.url.path(), "/prefix/render");
        let pairs: Vec<(String, String)> = request.url.query_pairs().into_owned().collect();
        assert_eq!(
            pairs,
            [
                ("target".to_string(), "sumSeries(app.*.errors) ".to_string()),
                ("from".into(), "-5min".into()),
                ("format".into(), "json".into())
            ]
        );
        let credentials = Credentials::new("graphite-auth", [("username", "u"), ("password", "p")]);
        let authed = super::request("http://g:8080", "target=a", Some(&credentials)).unwrap();
        assert_eq!(
            authed.secret_headers,
            [("Authorization".to_string(), "Basic dTpw".to_string())]
        );
        let partial = Credentials::new("graphite-auth", [("username", "u")]);
        assert_eq!(
            super::request("http://g:8080", "target=a", Some(&partial)).unwrap_err(),
            Failure::Setting("the Secret graphite-auth has no password key".into())
        );
    }
}
