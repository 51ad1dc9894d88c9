//! Parsing of the two duration syntaxes a Canary uses: Flagger intervals and Argo-style pause durations.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Parses a Flagger interval such as `30s`, `1m` or `2h`: digits then one unit of `s`, `m` or `h`.
///
/// Returns the number of seconds, or `None` when the text does not have that form.
pub fn parse_interval(text: &str) -> Option<u64> {
    let unit_at = text.find(|c: char| !c.is_ascii_digit())?;
    let (digits, unit) = text.split_at(unit_at);
    if digits.is_empty() {
        return None;
    }
    let value: u64 = digits.parse().ok()?;
    let factor = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return None,
    };
    value.checked_mul(factor)
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

/// Parses a pause duration: an integer number of seconds, or a string of seconds or with units
/// (`90s`, `5m`, `1h30m`, `1.5h`, `500ms` truncated to whole seconds), as Argo Rollouts does.
/// Like Argo's 32-bit duration, more than `i32::MAX` seconds is rejected rather than accepted or wrapped.
pub fn parse_pause_duration(value: &IntOrString) -> Result<u64, PauseDurationError> {
    match value {
        IntOrString::Int(n) => u64::try_from(*n).map_err(|_| PauseDurationError::Negative),
        IntOrString::String(s) => parse_duration_string(s),
    }
}

fn parse_duration_string(text: &str) -> Result<u64, PauseDurationError> {
    let unparseable = || PauseDurationError::Unparseable(text.to_string());
    let too_long = || PauseDurationError::TooLong(text.to_string());
    let trimmed = text.trim();
    if let Ok(n) = trimmed.parse::<i64>() {
        let seconds = u64::try_from(n).map_err(|_| PauseDurationError::Negative)?;
        // Argo reads a unit-less string as an int32 and rejects anything larger.
        return if seconds > i32::MAX as u64 {
            Err(too_long())
        } else {
            Ok(seconds)
        };
    }
    if trimmed.starts_with('-') {
        return Err(PauseDurationError::Negative);
    }
    // Go duration syntax: one or more <decimal number><unit> pairs.
    let mut rest = trimmed;
    let mut total_nanos: f64 = 0.0;
    if rest.is_empty() {
        return Err(unparseable());
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(unparseable)?;
        if number_len == 0 {
            return Err(unparseable());
        }
        let number: f64 = rest[..number_len].parse().map_err(|_| unparseable())?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per_unit = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(unparseable()),
        };
        total_nanos += number * nanos_per_unit;
        rest = &rest[unit_len..];
    }
    let seconds = (total_nanos / 1e9).floor();
    if seconds > f64::from(i32::MAX) {
        return Err(too_long());
    }
    Ok(seconds as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_take_digits_and_one_unit() {
        assert_eq!(parse_interval("30s"), Some(30));
        assert_eq!(parse_interval("1m"), Some(60));
        assert_eq!(parse_interval("2h"), Some(7200));
        assert_eq!(parse_interval("1m30s"), None);
        assert_eq!(parse_interval("m"), None);
        assert_eq!(parse_interval("10"), None);
        assert_eq!(parse_interval("10d"), None);
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
