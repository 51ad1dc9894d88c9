//! The status's timestamps written as k8s-openapi writes `Time` and `MicroTime`, without going
//! through jiff's general strftime: a status holds a dozen of them, each status write encodes two
//! statuses, and strftime took a third of encoding one.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::{Timestamp, tz::Offset};
use serde::Serializer;
use serde::ser::Error as _;

/// Serializes `Some(time)` as `2026-12-03T17:35:29Z`, the text of k8s-openapi's `Time`.
pub fn seconds<S: Serializer>(time: &Option<Time>, serializer: S) -> Result<S::Ok, S::Error> {
    match time {
        Some(time) => serializer.serialize_str(&text(time.0, false).map_err(S::Error::custom)?),
        None => serializer.serialize_none(),
    }
}

/// Serializes `Some(time)` as `2026-12-03T17:35:29.123456Z`, the text of k8s-openapi's
/// `MicroTime`.
pub fn micros<S: Serializer>(time: &Option<MicroTime>, serializer: S) -> Result<S::Ok, S::Error> {
    match time {
        Some(time) => serializer.serialize_str(&text(time.0, true).map_err(S::Error::custom)?),
        None => serializer.serialize_none(),
    }
}

/// `at` in UTC to the second, or to the microsecond with `micros`; an error only where
/// k8s-openapi's own formatting would fail too.
fn text(at: Timestamp, micros: bool) -> Result<String, k8s_openapi::jiff::Error> {
    let civil = Offset::UTC.to_datetime(at);
    let Ok(year) = u32::try_from(civil.year()) else {
        return strftime(at, micros);
    };
    let mut text = String::with_capacity(27);
    push_digits(&mut text, year, 4);
    for (separator, value) in [
        ('-', civil.month()),
        ('-', civil.day()),
        ('T', civil.hour()),
        (':', civil.minute()),
        (':', civil.second()),
    ] {
        text.push(separator);
        push_digits(&mut text, u32::from(value.unsigned_abs()), 2);
    }
    if micros {
        text.push('.');
        push_digits(
            &mut text,
            civil.subsec_nanosecond().unsigned_abs() / 1_000,
            6,
        );
    }
    text.push('Z');
    Ok(text)
}

/// Appends the last `width` decimal digits of `value`, zero-padded.
fn push_digits(text: &mut String, value: u32, width: u32) {
    for place in (0..width).rev() {
        let digit = (value / 10u32.pow(place)) % 10;
        text.push(char::from(b'0' + digit as u8));
    }
}

/// The years before 0 (the latest a `Timestamp` holds is in 9999), as k8s-openapi formats them.
fn strftime(at: Timestamp, micros: bool) -> Result<String, k8s_openapi::jiff::Error> {
    let format = if micros {
        "%Y-%m-%dT%H:%M:%S%.6fZ"
    } else {
        "%Y-%m-%dT%H:%M:%SZ"
    };
    k8s_openapi::jiff::fmt::strtime::format(format, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k8s_text<T: serde::Serialize>(value: &T) -> String {
        serde_json::to_value(value)
            .expect("encodes")
            .as_str()
            .expect("a string")
            .to_string()
    }

    #[test]
    fn a_timestamp_reads_as_k8s_openapi_writes_it() {
        let instants = [
            "2026-12-03T17:35:29Z",
            "2026-12-03T17:35:29.000001Z",
            "2026-01-01T00:00:00.999999999Z",
            "1970-01-01T00:00:00Z",
            "2000-02-29T23:59:59.5Z",
            "0001-01-01T00:00:00.000123Z",
            "9999-12-30T21:59:59.999999Z",
            "-000001-06-15T12:00:00.25Z",
        ];
        for instant in instants {
            let at: Timestamp = instant.parse().expect("a timestamp");
            let time = Some(Time(at));
            let micro = Some(MicroTime(at));
            let ours = seconds(&time, serde_json::value::Serializer).expect("encodes");
            assert_eq!(ours.as_str(), Some(k8s_text(&time).as_str()), "{instant}");
            let ours = micros(&micro, serde_json::value::Serializer).expect("encodes");
            assert_eq!(ours.as_str(), Some(k8s_text(&micro).as_str()), "{instant}");
        }
    }

    #[test]
    fn no_timestamp_is_null() {
        assert_eq!(
            seconds(&None, serde_json::value::Serializer).expect("encodes"),
            serde_json::Value::Null
        );
        assert_eq!(
            micros(&None, serde_json::value::Serializer).expect("encodes"),
            serde_json::Value::Null
        );
    }
}
