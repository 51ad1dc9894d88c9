//! Splunk Observability (SignalFx) SignalFlow, read as Flagger reads it: the program runs over the
//! window reaching back ten times the metric's interval, immediately, and the value is the last
//! non-null point; a program publishing more than one time series is an error. Serin runs the
//! program through SignalFlow's HTTP interface (`POST /v2/signalflow/execute`), whose answer is a
//! stream of Server-Sent Events carrying the same messages as the WebSocket one.

use super::http::ProviderRequest;
use super::{Credentials, Failure};
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::Duration;

/// How far back the program's window reaches, in metric intervals.
pub const WINDOW_INTERVALS: u32 = 10;

/// How long a program may run (Flagger's timeout for Splunk).
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// The control event after which a computation sends nothing more.
const END_OF_CHANNEL: &str = "END_OF_CHANNEL";

/// The stream address of a Splunk API address: `https://api.us1.signalfx.com` and
/// `wss://stream.us1.signalfx.com` both give `https://stream.us1.signalfx.com`.
pub fn stream_address(address: &str) -> Result<reqwest::Url, Failure> {
    let trimmed = address.trim();
    let as_http = if let Some(rest) = trimmed.strip_prefix("wss://") {
        format!("https://{rest}")
    } else if let Some(rest) = trimmed.strip_prefix("ws://") {
        format!("http://{rest}")
    } else {
        trimmed.to_string()
    };
    let mut url = super::base_url(&as_http)?;
    if let Some(host) = url.host_str()
        && let Some(realm) = host.strip_prefix("api.")
    {
        let stream = format!("stream.{realm}");
        url.set_host(Some(&stream))
            .map_err(|e| Failure::Setting(format!("provider.address {address:?}: {e}")))?;
    }
    Ok(url)
}

/// The request running `program` over the window ending at `now` (Unix milliseconds).
pub fn request(
    address: &str,
    program: &str,
    interval: Duration,
    now: i64,
    credentials: Option<&Credentials>,
) -> Result<ProviderRequest, Failure> {
    let credentials = super::secret_of(credentials, "splunk", "sf_token_key")?;
    let base = stream_address(address)?;
    let mut url = super::endpoint(base.as_str(), "/v2/signalflow/execute")?;
    let start = now - (interval * WINDOW_INTERVALS).as_millis() as i64;
    url.query_pairs_mut()
        .append_pair("start", &start.to_string())
        .append_pair("stop", &now.to_string())
        .append_pair("immediate", "true");
    let mut request = ProviderRequest::get(url);
    request.method = reqwest::Method::POST;
    request.headers = vec![("Content-Type".into(), "text/plain".into())];
    request.secret_headers = vec![(
        "X-SF-Token".into(),
        credentials.required("sf_token_key")?.to_string(),
    )];
    request.body = Some(program.to_string());
    request.timeout = QUERY_TIMEOUT;
    request.end_marker = Some(END_OF_CHANNEL);
    Ok(request)
}

/// The events of a Server-Sent Events stream: each event's name and its data lines joined.
fn events(body: &str) -> Vec<(String, String)> {
    let mut events = Vec::new();
    for block in body.replace("\r\n", "\n").split("\n\n") {
        let mut name = String::from("message");
        let mut data: Vec<&str> = Vec::new();
        for line in block.lines() {
            if let Some(value) = line.strip_prefix("event:") {
                name = value.trim().to_string();
            } else if let Some(value) = line.strip_prefix("data:") {
                data.push(value.strip_prefix(' ').unwrap_or(value));
            }
        }
        if !data.is_empty() {
            events.push((name, data.join("\n")));
        }
    }
    events
}

/// The value of a computation's stream: the last non-null point. No point is no data; points of
/// more than one time series, an error event or an aborted computation are errors.
pub fn value(body: &[u8]) -> Result<f64, Failure> {
    let text = String::from_utf8_lossy(body);
    let mut points: Vec<(String, f64)> = Vec::new();
    for (name, data) in events(&text) {
        let message: Value = serde_json::from_str(&data).map_err(|e| {
            Failure::Answer(format!(
                "a {name} event is not JSON ({e}): {}",
                super::http::quote(data.as_bytes())
            ))
        })?;
        match name.as_str() {
            "data" => {
                for point in message["data"].as_array().into_iter().flatten() {
                    if let Some(value) = point["value"].as_f64() {
                        let series = point["tsId"].as_str().unwrap_or_default().to_string();
                        points.push((series, value));
                    }
                }
            }
            "error" => {
                return Err(Failure::Answer(format!(
                    "splunk said: {}",
                    super::http::quote(data.as_bytes())
                )));
            }
            "control-message" if message["event"] == "CHANNEL_ABORT" => {
                return Err(Failure::Answer(format!(
                    "splunk aborted the computation: {}",
                    super::http::quote(message["abortInfo"].to_string().as_bytes())
                )));
            }
            _ => {}
        }
    }
    let series: BTreeSet<&str> = points.iter().map(|(s, _)| s.as_str()).collect();
    if series.len() > 1 {
        return Err(Failure::Answer(format!(
            "the program published {} time series; make it publish one (sum() or mean() them)",
            series.len()
        )));
    }
    points.last().map(|(_, v)| *v).ok_or(Failure::NoValues)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_address_follows_flaggers_rewrite() {
        for address in [
            "https://api.us1.signalfx.com",
            "wss://stream.us1.signalfx.com",
            "https://stream.us1.signalfx.com/",
        ] {
            assert_eq!(
                stream_address(address).unwrap().as_str(),
                "https://stream.us1.signalfx.com/",
                "{address}"
            );
        }
        let token = Credentials::new("splunk", [("sf_token_key", "t0k")]);
        let request = request(
            "https://api.eu0.signalfx.com",
            "data('errors').sum().publish()",
            Duration::from_secs(60),
            1_700_000_600_000,
            Some(&token),
        )
        .unwrap();
        assert_eq!(
            request.url.as_str(),
            "https://stream.eu0.signalfx.com/v2/signalflow/execute?start=1700000000000&stop=1700000600000&immediate=true"
        );
        assert_eq!(
            request.secret_headers,
            [("X-SF-Token".to_string(), "t0k".to_string())]
        );
        assert_eq!(
            request.body.as_deref(),
            Some("data('errors').sum().publish()")
        );
    }

    #[test]
    fn the_last_point_of_one_series_is_read() {
        let stream = "event: control-message\ndata: {\"event\": \"STREAM_START\", \"timestampMs\": 1}\n\n\
            event: metadata\ndata: {\"tsId\": \"AAAAAA\", \"properties\": {}}\n\n\
            event: data\ndata: {\"logicalTimestampMs\": 1, \"data\": [{\"tsId\": \"AAAAAA\", \"value\": 0.5}]}\n\n\
            event: data\ndata: {\"logicalTimestampMs\": 2, \"data\": [{\"tsId\": \"AAAAAA\", \"value\": 0.75}]}\n\n\
            event: data\ndata: {\"logicalTimestampMs\": 3, \"data\": [{\"tsId\": \"AAAAAA\", \"value\": null}]}\n\n\
            event: control-message\ndata: {\"event\": \"END_OF_CHANNEL\", \"timestampMs\": 4}\n\n";
        assert_eq!(value(stream.as_bytes()), Ok(0.75));
        assert_eq!(
            value(b"event: control-message\ndata: {\"event\": \"END_OF_CHANNEL\"}\n\n"),
            Err(Failure::NoValues)
        );
        let two = "event: data\ndata: {\"data\": [{\"tsId\": \"A\", \"value\": 1}, {\"tsId\": \"B\", \"value\": 2}]}\n\n";
        assert!(matches!(value(two.as_bytes()),
            Err(Failure::Answer(m)) if m.contains("published 2 time series")));
        let error = "event: error\ndata: {\"error\": 400, \"errorType\": \"ANALYTICS_PROGRAM_NAME_ERROR\", \"message\": \"unknown function 'dta'\"}\n\n";
        assert!(matches!(value(error.as_bytes()),
            Err(Failure::Answer(m)) if m.contains("unknown function 'dta'")));
    }
}
