//! The bounds Serin puts on what a tenant writes or points it at: one operator serves every
//! namespace, so no Canary, template, webhook or metric backend may make it use unbounded memory,
//! time or connections. docs/security.md lists each bound and what happens past it.

use std::time::Duration;

/// Longest query template (a MetricTemplate's `spec.query`, a Canary metric's `query`), in bytes.
pub const MAX_QUERY_TEMPLATE_BYTES: usize = 64 * 1024;

/// Longest query once its placeholders are filled in, in bytes.
pub const MAX_RENDERED_QUERY_BYTES: usize = 64 * 1024;

/// Longest answer read from a metrics backend, in bytes; a longer one is a failed check.
pub const MAX_METRIC_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// Longest answer read from a webhook or an alert service, in bytes.
pub const MAX_WEBHOOK_ANSWER_BYTES: usize = 1024 * 1024;

/// Largest `webhooks[].timeout` validation accepts: the wait for one attempt.
pub const MAX_WEBHOOK_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// Longest one webhook call may take with all its retries and the waits between them.
pub const MAX_WEBHOOK_CALL: Duration = Duration::from_secs(10 * 60);

/// Checks and notifications (webhook calls, metric queries, alerts) of one namespace that run at
/// once; more wait for a free place, so a namespace whose hooks never answer holds only its own.
pub const MAX_CHECKS_IN_FLIGHT_PER_NAMESPACE: usize = 16;

/// Notifications (event webhooks, post-rollout hooks, alerts) of one namespace that may wait to be
/// sent; past it new ones are dropped and logged.
pub const MAX_NOTIFICATIONS_QUEUED_PER_NAMESPACE: usize = 256;

/// Longest a tick may take from reading the caches to writing the status (API requests included);
/// a tick that takes longer is abandoned and retried.
pub const MAX_TICK: Duration = Duration::from_secs(60);

/// Measurements of one analysis metric the status keeps when `measurementRetention` says nothing.
pub const DEFAULT_MEASUREMENT_RETENTION: usize = 10;

/// Most measurements of one analysis metric the status keeps, whatever `measurementRetention` asks.
pub const MAX_MEASUREMENT_RETENTION: usize = 30;

/// Analysis runs the status keeps: the current release's and the latest of earlier ones.
pub const MAX_ANALYSIS_RUNS_KEPT: usize = 6;

/// Metrics one analysis step may measure.
pub const MAX_ANALYSIS_METRICS: usize = 10;

/// Longest measurement value or message the status keeps, in bytes.
pub const MAX_MEASUREMENT_TEXT_BYTES: usize = 200;

/// Longest answer read from a `web` metric, in bytes; a longer one is a measurement error.
pub const MAX_WEB_METRIC_ANSWER_BYTES: usize = 1024 * 1024;

/// Longest `timeoutSeconds` a `web` metric may set.
pub const MAX_WEB_METRIC_TIMEOUT: Duration = Duration::from_secs(60);

/// How many bytes of a metric provider's answer an error message quotes.
pub const QUOTED_ANSWER_BYTES: usize = 200;

/// How many bytes of a metric provider's own words a check's message carries.
pub const MAX_PROVIDER_ERROR_BYTES: usize = 400;

/// How many bytes of a Canary or template value an error message quotes.
pub const QUOTED_BYTES: usize = 80;

/// Cuts `text` to at most [`QUOTED_BYTES`] bytes on a character boundary, marking the cut with `…`.
pub fn quoted(text: &str) -> String {
    cut_to(text, QUOTED_BYTES)
}

/// Cuts `text` to at most `max` bytes on a character boundary, marking the cut with `…`.
pub fn cut_to(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// A byte count as people write it: `65536 bytes (64 KiB)`.
pub fn bytes(count: usize) -> String {
    if count >= 1024 * 1024 && count.is_multiple_of(1024 * 1024) {
        format!("{count} bytes ({} MiB)", count / (1024 * 1024))
    } else if count >= 1024 && count.is_multiple_of(1024) {
        format!("{count} bytes ({} KiB)", count / 1024)
    } else {
        format!("{count} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_cut_on_a_character_boundary() {
        assert_eq!(quoted("short"), "short");
        let long = "é".repeat(100);
        let cut = quoted(&long);
        assert!(cut.ends_with('…'));
        assert!(cut.len() <= QUOTED_BYTES + '…'.len_utf8());
        assert_eq!(quoted(&"x".repeat(QUOTED_BYTES)), "x".repeat(QUOTED_BYTES));
    }

    #[test]
    fn byte_counts_name_their_unit() {
        assert_eq!(bytes(MAX_QUERY_TEMPLATE_BYTES), "65536 bytes (64 KiB)");
        assert_eq!(bytes(MAX_METRIC_ANSWER_BYTES), "4194304 bytes (4 MiB)");
        assert_eq!(bytes(1000), "1000 bytes");
    }
}
