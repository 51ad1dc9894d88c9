//! The durations a Canary is written with: Go durations (Flagger's intervals and timeouts,
//! Kubernetes' `metav1.Duration`) read by kube's parser, and Argo-style pause durations.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::time::Duration;

/// Go's longest duration: `time.Duration` counts nanoseconds in an i64 (about 292 years).
const GO_MAX_NANOS: u128 = i64::MAX as u128;

/// Why a Go duration cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GoDurationError {
    /// The duration is below zero.
    #[error("{0:?} is negative")]
    Negative(String),
    /// Longer than Go's `time.Duration` holds (2562047h).
    #[error("{0:?} is longer than Go's longest duration, 2562047h")]
    TooLong(String),
    /// Not Go's syntax of numbers with units.
    #[error("cannot parse {text:?}: {reason}")]
    Syntax {
        /// The text as written.
        text: String,
        /// kube's parser's explanation.
        reason: String,
    },
}

/// Parses a Go duration such as `30s`, `1m30s`, `1.5h` or `500ms` (units `ns`, `us`, `ms`, `s`,
/// `m`, `h`; a bare `0` is zero) with kube's `metav1.Duration` parser, refusing negative values.
pub fn parse_go_duration(text: &str) -> Result<Duration, GoDurationError> {
    let syntax = |reason: &str| GoDurationError::Syntax {
        text: text.to_string(),
        reason: reason.to_string(),
    };
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    // Go allows a sign only in front; kube's parser would read "1h-5m" and then panic on the
    // negative term, and it reads "" and "+" as zero, which Go refuses.
    if unsigned.is_empty() {
        return Err(syntax("empty duration"));
    }
    if unsigned.contains(['+', '-']) {
        return Err(syntax("a sign is allowed only at the start"));
    }
    // kube's parser panics instead of failing when a term overflows std's Duration (u64
    // seconds). The numbers stand between the letters and an hour is the largest unit, so numbers
    // summing to at most 10^15 stay far below that; more is refused even in nanoseconds.
    let magnitude: f64 = unsigned
        .split(char::is_alphabetic)
        .filter_map(|number| number.parse::<f64>().ok())
        .sum();
    if magnitude > 1e15 {
        return Err(GoDurationError::TooLong(text.to_string()));
    }
    let parsed = text
        .parse::<kube::core::Duration>()
        .map_err(|e| syntax(&e.to_string()))?;
    if parsed.is_negative() {
        return Err(GoDurationError::Negative(text.to_string()));
    }
    let duration = Duration::from(parsed);
    if duration.as_nanos() > GO_MAX_NANOS {
        return Err(GoDurationError::TooLong(text.to_string()));
    }
    Ok(duration)
}

/// Why a pause duration cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PauseDurationError {
    /// The value is below zero.
    #[error("must not be negative: write 0 or more seconds, e.g. 30 or \"30s\"")]
    Negative,
    /// More seconds than Argo Rollouts' 32-bit pause duration holds (about 68 years).
    #[error(
        "{0:?} is longer than 2147483647 seconds: write a shorter pause, e.g. \"1h\", or use pause: {{}} to wait for a promote"
    )]
    TooLong(String),
    /// The string has neither a plain number nor s/m/h units.
    #[error(
        "cannot parse {0:?}: write seconds as a number (30) or a string with s/m/h units (\"30s\", \"5m\", \"1h30m\")"
    )]
    Unparseable(String),
}

/// Parses a pause duration: an integer number of seconds, or a string of seconds or a Go duration
/// (`90s`, `5m`, `1h30m`, `1.5h`, `500ms` truncated to whole seconds), as Argo Rollouts does.
/// Like Argo's 32-bit duration, more than `i32::MAX` seconds is rejected rather than accepted or wrapped.
pub fn parse_pause_duration(value: &IntOrString) -> Result<u64, PauseDurationError> {
    let text = match value {
        IntOrString::Int(n) => return u64::try_from(*n).map_err(|_| PauseDurationError::Negative),
        IntOrString::String(s) => s,
    };
    let too_long = || PauseDurationError::TooLong(text.to_string());
    let trimmed = text.trim();
    if trimmed.starts_with('-') {
        return Err(PauseDurationError::Negative);
    }
    // Argo reads a unit-less string as an int32 and rejects anything larger.
    let seconds = match trimmed.parse::<u64>() {
        Ok(seconds) => seconds,
        Err(_) if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) => {
            return Err(too_long());
        }
        Err(_) => match parse_go_duration(trimmed) {
            Ok(duration) => duration.as_secs(),
            Err(GoDurationError::Negative(_)) => return Err(PauseDurationError::Negative),
            Err(GoDurationError::TooLong(_)) => return Err(too_long()),
            Err(GoDurationError::Syntax { .. }) => {
                return Err(PauseDurationError::Unparseable(text.to_string()));
            }
        },
    };
    if seconds > i32::MAX as u64 {
        return Err(too_long());
    }
    Ok(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_follow_kubernetes_metav1_duration() {
        let ok = |text: &str| parse_go_duration(text).unwrap();
        assert_eq!(ok("30s"), Duration::from_secs(30));
        assert_eq!(ok("1m"), Duration::from_secs(60));
        assert_eq!(ok("2h"), Duration::from_secs(7200));
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok("1.5h"), Duration::from_secs(5400));
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("0.5s"), Duration::from_millis(500));
        assert_eq!(ok("0"), Duration::ZERO);
        for bad in [
            "", "+", "m", "10", "10d", "1 minute", "1h-5m", "+-5s", "--5s",
        ] {
            assert!(
                matches!(parse_go_duration(bad), Err(GoDurationError::Syntax { .. })),
                "{bad:?}"
            );
        }
        assert_eq!(
            parse_go_duration("-1m"),
            Err(GoDurationError::Negative("-1m".into()))
        );
        // Go's limit is 2562047h47m16.854775807s; beyond it (and far beyond std's Duration,
        // where kube's parser would panic) is an error.
        assert_eq!(ok("2562047h"), Duration::from_secs(2_562_047 * 3600));
        assert_eq!(ok("10000000000ms"), Duration::from_secs(10_000_000));
        for long in [
            "2562048h",
            "99999999999999999999h",
            "1000000000000000000000000s",
        ] {
            assert_eq!(
                parse_go_duration(long),
                Err(GoDurationError::TooLong(long.into()))
            );
        }
    }

    #[test]
    fn pause_durations_follow_argo_vectors() {
        let s = |v: &str| parse_pause_duration(&IntOrString::String(v.into()));
        assert_eq!(parse_pause_duration(&IntOrString::Int(10)), Ok(10));
        assert_eq!(s("10"), Ok(10));
        assert_eq!(s("10s"), Ok(10));
        assert_eq!(s("1h"), Ok(3600));
        assert_eq!(s("1h30m"), Ok(5400));
        assert_eq!(s("1ms"), Ok(0));
        assert!(matches!(s("1z"), Err(PauseDurationError::Unparseable(_))));
        assert_eq!(s("-5s"), Err(PauseDurationError::Negative));
        // Argo parses a unit-less string as an int32: 20000000000 is rejected, not read as 634 years.
        assert!(matches!(
            s("20000000000"),
            Err(PauseDurationError::TooLong(_))
        ));
        assert_eq!(s("2147483647"), Ok(2_147_483_647));
        assert!(matches!(s("1000000h"), Err(PauseDurationError::TooLong(_))));
        assert_eq!(
            parse_pause_duration(&IntOrString::Int(-1)),
            Err(PauseDurationError::Negative)
        );
    }
}
