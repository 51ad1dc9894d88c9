//! What every metric query's HTTP shares, whatever the provider: Flagger's timeout and the error
//! text that keeps a failure's causes.

use std::time::Duration;

/// Flagger's timeout for one query.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long connecting may take within the query timeout.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The error and its causes, which reqwest keeps apart (`error sending request` → `certificate ...`).
pub(crate) fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
