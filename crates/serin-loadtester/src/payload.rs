//! Flagger's webhook payload, read strictly enough to say exactly what is wrong with a bad one.

use std::collections::BTreeMap;

/// The body Flagger (and Serin) POST to a webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payload {
    /// The canary's name.
    pub name: String,
    /// The canary's namespace.
    pub namespace: String,
    /// The canary's phase when the hook was called, if given.
    pub phase: Option<String>,
    /// The revision checksum, if given.
    pub checksum: Option<String>,
    /// The hook's `metadata`, or `None` when the payload has none.
    pub metadata: Option<BTreeMap<String, String>>,
}

impl Payload {
    /// The key of the canary in gates and task de-duplication: `<name>.<namespace>`.
    pub fn canary(&self) -> String {
        format!("{}.{}", self.name, self.namespace)
    }

    /// A metadata value, if present.
    pub fn meta(&self, key: &str) -> Option<&str> {
        self.metadata.as_ref()?.get(key).map(String::as_str)
    }

    /// Whether a metadata flag such as `logCmdOutput` is set to `"true"`.
    pub fn flag(&self, key: &str) -> bool {
        self.meta(key)
            .is_some_and(|value| value.eq_ignore_ascii_case("true"))
    }
}

const EXPECTED: &str = r#"expected Flagger's webhook payload, e.g. {"name":"podinfo","namespace":"test","phase":"Progressing","metadata":{"type":"cmd","cmd":"hey -z 1m -q 10 -c 2 http://podinfo-canary.test:9898/"}}"#;

/// Reads a payload; the error names the field at fault and what is expected.
pub fn parse_payload(body: &[u8]) -> Result<Payload, String> {
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|error| format!("malformed JSON payload ({error}); {EXPECTED}"))?;
    let serde_json::Value::Object(mut object) = value else {
        return Err(format!("the payload is not a JSON object; {EXPECTED}"));
    };
    let mut required_string = |field: &str, what: &str| match object.remove(field) {
        Some(serde_json::Value::String(text)) if !text.is_empty() => Ok(text),
        Some(serde_json::Value::String(_)) | None => {
            Err(format!("field `{field}` is missing; expected {what}"))
        }
        Some(other) => Err(format!(
            "field `{field}` must be a string ({what}), got {other}"
        )),
    };
    let name = required_string("name", "the canary's name")?;
    let namespace = required_string("namespace", "the canary's namespace")?;
    let optional_string = |value: Option<serde_json::Value>, field: &str| match value {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(text)) => Ok(Some(text)),
        Some(other) => Err(format!("field `{field}` must be a string, got {other}")),
    };
    let phase = optional_string(object.remove("phase"), "phase")?;
    let checksum = optional_string(object.remove("checksum"), "checksum")?;
    let metadata = match object.remove("metadata") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Object(entries)) => {
            let mut metadata = BTreeMap::new();
            for (key, value) in entries {
                // Flagger's metadata is a map of strings; plain numbers and booleans are accepted too.
                let text = match value {
                    serde_json::Value::String(text) => text,
                    serde_json::Value::Bool(flag) => flag.to_string(),
                    serde_json::Value::Number(number) => number.to_string(),
                    // The token's value is never repeated back, not even a wrong one.
                    _ if key == "token" => {
                        return Err("field `metadata.token` must be a string".into());
                    }
                    other => {
                        return Err(format!(
                            "field `metadata.{key}` must be a string, got {other}"
                        ));
                    }
                };
                metadata.insert(key, text);
            }
            Some(metadata)
        }
        Some(other) => {
            return Err(format!(
                "field `metadata` must be an object of strings, got {other}"
            ));
        }
    };
    Ok(Payload {
        name,
        namespace,
        phase,
        checksum,
        metadata,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_flaggers_payload() {
        let payload = parse_payload(
            br#"{"name":"podinfo","namespace":"test","phase":"Progressing","checksum":"abc","metadata":{"cmd":"hey http://a/","logCmdOutput":"true","n":3}}"#,
        )
        .unwrap();
        assert_eq!(payload.canary(), "podinfo.test");
        assert_eq!(payload.phase.as_deref(), Some("Progressing"));
        assert_eq!(payload.meta("cmd"), Some("hey http://a/"));
        assert!(payload.flag("logCmdOutput"));
        assert_eq!(payload.meta("n"), Some("3"));
    }

    #[test]
    fn names_the_field_at_fault() {
        assert!(
            parse_payload(b"{")
                .unwrap_err()
                .starts_with("malformed JSON payload")
        );
        assert!(
            parse_payload(b"[]")
                .unwrap_err()
                .contains("not a JSON object")
        );
        assert!(
            parse_payload(br#"{"namespace":"test"}"#)
                .unwrap_err()
                .contains("field `name` is missing")
        );
        assert!(
            parse_payload(br#"{"name":"a","namespace":1}"#)
                .unwrap_err()
                .contains("field `namespace` must be a string")
        );
        assert!(
            parse_payload(br#"{"name":"a","namespace":"b","metadata":{"cmd":[1]}}"#)
                .unwrap_err()
                .contains("metadata.cmd")
        );
        let token =
            parse_payload(br#"{"name":"a","namespace":"b","metadata":{"token":["s3cret"]}}"#)
                .unwrap_err();
        assert!(
            token.contains("metadata.token") && !token.contains("s3cret"),
            "{token}"
        );
    }
}
