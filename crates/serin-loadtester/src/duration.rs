//! Durations written as Go writes them (`90s`, `1m30s`, `1h`, `500ms`), which is how Flagger's
//! `-timeout` and hey's `-z` are given.

use std::time::Duration;

/// Parses a Go-style duration such as `1h`, `1m30s`, `2.5s` or `500ms`; a bare `0` is zero.
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let expected = "expected a duration such as 30s, 1m30s, 1h or 500ms";
    let trimmed = text.trim();
    if trimmed == "0" {
        return Ok(Duration::ZERO);
    }
    if trimmed.is_empty() {
        return Err(format!("empty duration; {expected}"));
    }
    let mut rest = trimmed;
    let mut total_seconds = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if number_len == 0 {
            return Err(format!("`{text}` is not a duration; {expected}"));
        }
        let value: f64 = rest[..number_len]
            .parse()
            .map_err(|_| format!("`{text}` is not a duration; {expected}"))?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds_per_unit = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(format!("`{text}` has a number without a unit; {expected}")),
            unit => return Err(format!("`{text}` has an unknown unit `{unit}`; {expected}")),
        };
        rest = &rest[unit_len..];
        total_seconds += value * seconds_per_unit;
    }
    Duration::try_from_secs_f64(total_seconds).map_err(|_| format!("`{text}` is too long"))
}

/// Formats a duration the way Go prints it (`1h0m0s`, `1m30s`, `2.5s`, `500ms`).
pub fn format_go_duration(duration: Duration) -> String {
    let total_ms = duration.as_millis();
    if total_ms == 0 {
        return "0s".to_string();
    }
    if total_ms < 1000 {
        return format!("{total_ms}ms");
    }
    let hours = total_ms / 3_600_000;
    let minutes = (total_ms / 60_000) % 60;
    let seconds = (total_ms % 60_000) as f64 / 1000.0;
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&format!("{seconds}s"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_flagger_users_write() {
        assert_eq!(parse_go_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_go_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("2.5s"), Ok(Duration::from_millis(2500)));
        assert_eq!(parse_go_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_numbers_without_units_and_unknown_units() {
        assert!(
            parse_go_duration("10")
                .unwrap_err()
                .contains("without a unit")
        );
        assert!(
            parse_go_duration("10d")
                .unwrap_err()
                .contains("unknown unit `d`")
        );
        assert!(parse_go_duration("").is_err());
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format_go_duration(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(format_go_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_go_duration(Duration::from_millis(2500)), "2.5s");
        assert_eq!(format_go_duration(Duration::from_millis(500)), "500ms");
    }
}
