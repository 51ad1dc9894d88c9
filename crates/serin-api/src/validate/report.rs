//! What validation reports: [`FieldError`], and the report the checks fill in, with the field
//! checks (ranges, durations, URLs, request matches) that every block and resource shares.

use crate::duration::parse_go_duration;
use crate::limits::{MAX_QUERY_TEMPLATE_BYTES, MAX_WEBHOOK_TIMEOUT, bytes};
use crate::mesh::{HttpMatchRequest, StringMatch};
use std::collections::BTreeMap;

/// One problem in a resource: where it is and how to fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// JSON path of the field, e.g. `spec.analysis.maxWeight`.
    pub path: String,
    /// What is wrong and what to write instead.
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// The problems found so far, and the checks that many fields share.
#[derive(Default)]
pub(super) struct Report {
    pub(super) errors: Vec<FieldError>,
}

impl Report {
    pub(super) fn add(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(FieldError {
            path: path.into(),
            message: message.into(),
        });
    }

    pub(super) fn range(
        &mut self,
        path: &str,
        value: Option<i32>,
        min: i32,
        max: i32,
        example: &str,
    ) {
        if let Some(v) = value
            && !(min..=max).contains(&v)
        {
            self.add(
                path,
                format!(
                    "{v} is out of range; write a whole number from {min} to {max}, e.g. {example}"
                ),
            );
        }
    }

    pub(super) fn not_negative(&mut self, path: &str, value: Option<i32>) {
        if let Some(v) = value
            && v < 0
        {
            self.add(path, format!("{v} is negative; write 0 or more seconds"));
        }
    }

    pub(super) fn interval(&mut self, path: &str, value: Option<&str>) {
        if let Some(text) = value
            && parse_go_duration(text).is_err()
        {
            self.add(path, interval_hint(text));
        }
    }

    /// A webhook's per-attempt timeout: a duration no longer than [`MAX_WEBHOOK_TIMEOUT`], so that
    /// one Canary's silent hook cannot hold a call for hours.
    pub(super) fn webhook_timeout(&mut self, path: &str, value: Option<&str>) {
        let Some(text) = value else { return };
        match parse_go_duration(text) {
            Err(_) => self.add(path, interval_hint(text)),
            Ok(timeout) if timeout > MAX_WEBHOOK_TIMEOUT => self.add(
                path,
                format!(
                    "{text:?} is above the maximum of {}; a webhook waits at most that long for one answer: write {} or less",
                    humanize(MAX_WEBHOOK_TIMEOUT),
                    humanize(MAX_WEBHOOK_TIMEOUT)
                ),
            ),
            Ok(_) => {}
        }
    }

    /// A query template no longer than [`MAX_QUERY_TEMPLATE_BYTES`].
    pub(super) fn query_length(&mut self, path: &str, query: &str) {
        if query.len() > MAX_QUERY_TEMPLATE_BYTES {
            self.add(
                path,
                format!(
                    "the query is {} long, over the limit of {}: shorten it",
                    bytes(query.len()),
                    bytes(MAX_QUERY_TEMPLATE_BYTES)
                ),
            );
        }
    }

    /// A metric's interval goes into PromQL as a range (`[1m]`), where Prometheus takes whole
    /// numbers with h, m, s or ms but no fractions or smaller units.
    pub(super) fn metric_interval(&mut self, path: &str, value: Option<&str>) {
        if let Some(text) = value
            && (parse_go_duration(text).is_err()
                || !text
                    .bytes()
                    .all(|b| b.is_ascii_digit() || b"hms".contains(&b)))
        {
            self.add(path, interval_hint(text));
        }
    }

    /// A metric's name at `mp`: present (`example` shows one) and not already in `names`.
    pub(super) fn metric_name<'a>(
        &mut self,
        mp: &str,
        name: &'a str,
        names: &mut std::collections::HashSet<&'a str>,
        example: &str,
    ) {
        if name.is_empty() {
            self.add(
                format!("{mp}.name"),
                format!("missing; name the metric, e.g. {example}"),
            );
        } else if !names.insert(name) {
            self.add(
                format!("{mp}.name"),
                format!("duplicate metric name {name:?}; give each metric its own name"),
            );
        }
    }

    /// Where a metric at `mp` reads its value: `templateRef` or `query`, not both, neither empty.
    /// True when it has neither (whether that is allowed depends on the metric).
    pub(super) fn metric_source(
        &mut self,
        mp: &str,
        template_ref: Option<&crate::CrossNamespaceObjectReference>,
        query: Option<&str>,
    ) -> bool {
        match (template_ref, query) {
            (Some(_), Some(_)) => self.add(
                format!("{mp}.query"),
                "both query and templateRef are set; keep templateRef and move the query into the MetricTemplate",
            ),
            (Some(t), None) if t.name.is_empty() => self.add(
                format!("{mp}.templateRef.name"),
                "missing; write the name of a MetricTemplate",
            ),
            (None, Some(q)) if q.trim().is_empty() => self.add(
                format!("{mp}.query"),
                "empty query; write a PromQL query or use templateRef",
            ),
            (None, Some(q)) => self.query_length(&format!("{mp}.query"), q),
            (None, None) => return true,
            (Some(_), None) => {}
        }
        false
    }

    pub(super) fn url(&mut self, path: &str, value: &str) {
        if !is_absolute_http_url(value) {
            self.add(
                path,
                format!("{value:?} is not an absolute URL; write http:// or https:// followed by a host, e.g. \"http://loadtester.test/\""),
            );
        }
    }

    /// A Prometheus URL: absolute http or https.
    pub(super) fn prometheus_address(&mut self, path: &str, value: &str) {
        if !is_absolute_http_url(value) {
            self.add(
                path,
                format!("{value:?} is not an absolute URL; write http:// or https:// followed by a host, e.g. \"http://prometheus.istio-system:9090\""),
            );
        }
    }

    /// A field that is part of Flagger's API but that this operator does not act on yet: accepting it
    /// would let a user believe a setting is in force when it is not.
    pub(super) fn not_supported(&mut self, path: &str, set: bool, instead: &str) {
        if set {
            self.add(
                path,
                format!("is not supported yet, and would be ignored; {instead}"),
            );
        }
    }

    pub(super) fn string_match(&mut self, path: &str, m: &StringMatch) {
        if m.kinds_set() != 1 {
            self.add(
                path,
                "set exactly one of exact, prefix, suffix or regex, e.g. {exact: \"insider\"}",
            );
        }
    }

    pub(super) fn string_matches(
        &mut self,
        path: &str,
        map: Option<&BTreeMap<String, StringMatch>>,
    ) {
        for (key, m) in map.into_iter().flatten() {
            self.string_match(&format!("{path}.{key}"), m);
        }
    }

    pub(super) fn http_matches(&mut self, path: &str, matches: Option<&Vec<HttpMatchRequest>>) {
        for (i, m) in matches.into_iter().flatten().enumerate() {
            let p = format!("{path}[{i}]");
            for (field, sm) in [
                ("uri", &m.uri),
                ("scheme", &m.scheme),
                ("method", &m.method),
                ("authority", &m.authority),
            ] {
                if let Some(sm) = sm {
                    self.string_match(&format!("{p}.{field}"), sm);
                }
            }
            self.string_matches(&format!("{p}.headers"), m.headers.as_ref());
            self.string_matches(&format!("{p}.queryParams"), m.query_params.as_ref());
            self.string_matches(&format!("{p}.withoutHeaders"), m.without_headers.as_ref());
        }
    }
}

/// Whether `text` is an absolute `http://` or `https://` URL with a host.
pub fn is_absolute_http_url(text: &str) -> bool {
    let rest = text
        .strip_prefix("http://")
        .or_else(|| text.strip_prefix("https://"));
    match rest {
        Some(rest) => {
            let host = rest.split(['/', '?', '#']).next().unwrap_or("");
            !host.is_empty() && !host.starts_with(':') && !host.contains(char::is_whitespace)
        }
        None => false,
    }
}

/// A whole number of minutes or seconds as a duration is written: `5m`, `90s`.
fn humanize(duration: std::time::Duration) -> String {
    let seconds = duration.as_secs();
    if seconds.is_multiple_of(60) {
        format!("{}m", seconds / 60)
    } else {
        format!("{seconds}s")
    }
}

fn interval_hint(text: &str) -> String {
    format!(
        "cannot parse {text:?}; write a number followed by s, m or h, e.g. \"30s\", \"1m\" or \"1m30s\""
    )
}
