//! Label and field selectors of list and watch requests.

use crate::status::ApiError;
use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed `labelSelector`: every requirement must hold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Splits on commas that are not inside parentheses.
fn split_terms(text: &str) -> Vec<String> {
    let mut terms = Vec::new();
    let mut depth = 0;
    let mut current = String::new();
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    terms.push(current);
    terms
        .into_iter()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

fn set_values(text: &str) -> Option<Vec<String>> {
    let inner = text.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

impl LabelSelector {
    /// Parses `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` and `!k`, joined by commas.
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        let invalid = || {
            ApiError::bad_request(format!(
                "unable to parse requirement: invalid label selector {text:?}"
            ))
        };
        let mut requirements = Vec::new();
        for term in split_terms(text) {
            let requirement = if let Some((k, v)) = term.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once("==") {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once('=') {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, rest)) = term.split_once(" notin ") {
                Requirement::NotIn(k.trim().into(), set_values(rest).ok_or_else(invalid)?)
            } else if let Some((k, rest)) = term.split_once(" in ") {
                Requirement::In(k.trim().into(), set_values(rest).ok_or_else(invalid)?)
            } else if let Some(k) = term.strip_prefix('!') {
                Requirement::NotExists(k.trim().into())
            } else if term
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            {
                Requirement::Exists(term.clone())
            } else {
                return Err(invalid());
            };
            if !requirement_is_valid(&requirement) {
                return Err(invalid());
            }
            requirements.push(requirement);
        }
        Ok(LabelSelector(requirements))
    }

    /// Reads a structured `metav1.LabelSelector` (`matchLabels` and `matchExpressions`).
    pub fn from_json(selector: &Value) -> Result<Self, ApiError> {
        let mut requirements = Vec::new();
        for (key, value) in selector["matchLabels"].as_object().into_iter().flatten() {
            let value = value.as_str().unwrap_or_default();
            requirements.push(Requirement::Equals(key.clone(), value.into()));
        }
        for expression in selector["matchExpressions"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let key = expression["key"].as_str().unwrap_or_default().to_string();
            let values: Vec<String> = expression["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(String::from))
                .collect();
            requirements.push(match expression["operator"].as_str() {
                Some("In") => Requirement::In(key, values),
                Some("NotIn") => Requirement::NotIn(key, values),
                Some("Exists") => Requirement::Exists(key),
                Some("DoesNotExist") => Requirement::NotExists(key),
                other => {
                    return Err(ApiError::bad_request(format!(
                        "{other:?} is not a valid label selector operator"
                    )));
                }
            });
        }
        Ok(LabelSelector(requirements))
    }

    /// Whether an object's labels satisfy the selector.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        let label = |k: &str| labels.get(k).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => label(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
            Requirement::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Requirement::NotIn(k, vs) => !label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Requirement::Exists(k) => label(k).is_some(),
            Requirement::NotExists(k) => label(k).is_none(),
        })
    }
}

/// A parsed `fieldSelector` (`=`, `==`, `!=`, joined by commas).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Field paths a kind may be selected on, besides `metadata.name` and `metadata.namespace`.
fn supported_fields(kind: &str, group: &str) -> &'static [&'static str] {
    match (group, kind) {
        ("", "Pod") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "Event") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("events.k8s.io", "Event") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "type",
            "reportingController",
        ],
        ("", "Secret") => &["type"],
        ("", "Namespace") => &["status.phase"],
        ("", "Node") => &["spec.unschedulable"],
        ("apps", "ReplicaSet") => &["status.replicas"],
        _ => &[],
    }
}

fn field_value(object: &Value, path: &str) -> String {
    let mut node = object;
    for part in path.split('.') {
        node = &node[part];
    }
    match node {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl FieldSelector {
    /// Parses a field selector for `kind` in `group`, rejecting fields that kind does not support.
    pub fn parse(text: &str, kind: &str, group: &str) -> Result<Self, ApiError> {
        let mut terms = Vec::new();
        for term in split_terms(text) {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!("invalid selector: {text:?}")));
            };
            let field = field.trim();
            let known = ["metadata.name", "metadata.namespace"].contains(&field)
                || supported_fields(kind, group).contains(&field);
            if !known {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            terms.push((field.to_string(), equal, value.trim().to_string()));
        }
        Ok(FieldSelector(terms))
    }

    /// Whether an object satisfies the selector.
    pub fn matches(&self, object: &Value) -> bool {
        self.0
            .iter()
            .all(|(field, equal, value)| (field_value(object, field) == *value) == *equal)
    }

    /// The name a `metadata.name=` term pins, if any.
    pub fn name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(f, eq, _)| f == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }
}

/// Whether a parsed requirement names a valid label key and valid values, as the API server
/// checks them (`app===` or `!!!` are refused, not read as odd keys).
fn requirement_is_valid(requirement: &Requirement) -> bool {
    let (key, values): (&str, Vec<&str>) = match requirement {
        Requirement::Equals(k, v) | Requirement::NotEquals(k, v) => (k, vec![v.as_str()]),
        Requirement::In(k, vs) | Requirement::NotIn(k, vs) => {
            (k, vs.iter().map(String::as_str).collect())
        }
        Requirement::Exists(k) | Requirement::NotExists(k) => (k, Vec::new()),
    };
    is_label_key(key) && values.iter().all(|v| v.is_empty() || is_label_name(v))
}

/// A label name or value: at most 63 characters, alphanumerics, `-`, `_` and `.`, starting and
/// ending with an alphanumeric.
fn is_label_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(b))
}

/// A label key: a name, optionally behind a DNS-subdomain prefix and `/`.
fn is_label_key(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => {
            !prefix.is_empty()
                && prefix.len() <= 253
                && prefix
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.".contains(&b))
                && is_label_name(name)
        }
        None => is_label_name(key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors() {
        let obj = json!({"metadata": {"labels": {"app": "podinfo", "tier": "web"}}});
        for (selector, expected) in [
            ("app=podinfo", true),
            ("app==podinfo,tier=web", true),
            ("app!=podinfo", false),
            ("app in (a, podinfo)", true),
            ("app notin (podinfo)", false),
            ("tier", true),
            ("!tier", false),
            ("missing", false),
            ("", true),
        ] {
            assert_eq!(
                LabelSelector::parse(selector).unwrap().matches(&obj),
                expected,
                "{selector}"
            );
        }
        assert!(LabelSelector::parse("app in podinfo").is_err());
    }

    #[test]
    fn field_selectors() {
        let ev = json!({"metadata": {"name": "e1"}, "involvedObject": {"kind": "Canary", "name": "podinfo"}});
        let s = FieldSelector::parse(
            "involvedObject.name=podinfo,involvedObject.kind=Canary",
            "Event",
            "",
        )
        .unwrap();
        assert!(s.matches(&ev));
        assert!(
            !FieldSelector::parse("metadata.name!=e1", "Event", "")
                .unwrap()
                .matches(&ev)
        );
        let err = FieldSelector::parse("spec.foo=1", "Deployment", "apps").unwrap_err();
        assert_eq!(err.message, "field label not supported: spec.foo");
        assert_eq!(
            FieldSelector::parse("metadata.name=x", "Pod", "")
                .unwrap()
                .name(),
            Some("x")
        );
    }
}
