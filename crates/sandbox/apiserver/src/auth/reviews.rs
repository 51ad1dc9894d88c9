//! TokenRequests and the access reviews (`kubectl auth can-i`, `kubectl auth whoami`).

use super::identity::*;
use super::rbac::*;
use crate::status::ApiError;
use crate::store::Store;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

/// Answers a TokenRequest (`POST serviceaccounts/<name>/token`) for the ServiceAccount `account`.
pub fn token_request(auth: &Auth, account: &Value, request: &Value) -> Result<Value, ApiError> {
    let metadata = &account["metadata"];
    let (namespace, name, uid) = (
        metadata["namespace"].as_str().unwrap_or_default(),
        metadata["name"].as_str().unwrap_or_default(),
        metadata["uid"].as_str().unwrap_or_default(),
    );
    let spec = &request["spec"];
    let seconds = spec["expirationSeconds"]
        .as_i64()
        .unwrap_or(DEFAULT_TOKEN_SECONDS);
    if seconds < MIN_TOKEN_SECONDS {
        return Err(ApiError::invalid(
            "TokenRequest",
            name,
            "spec.expirationSeconds",
            "FieldValueInvalid",
            "may not specify a duration less than 10 minutes",
        ));
    }
    if seconds > MAX_TOKEN_SECONDS {
        return Err(ApiError::invalid(
            "TokenRequest",
            name,
            "spec.expirationSeconds",
            "FieldValueInvalid",
            "may not specify a duration longer than 48 hours",
        ));
    }
    let audiences: Vec<String> = match strings(&spec["audiences"]).collect::<Vec<_>>() {
        given if given.is_empty() => vec!["https://kubernetes.default.svc.cluster.local".into()],
        given => given.into_iter().map(String::from).collect(),
    };
    let (token, expires) = auth.issue(namespace, name, uid, &audiences, seconds);
    Ok(json!({
        "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": null},
        "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": spec.get("boundObjectRef").cloned().unwrap_or(Value::Null)},
        "status": {"token": token, "expirationTimestamp": Time(expires)},
    }))
}

/// Answers a TokenReview: who the bearer of `spec.token` is, as an authenticating proxy or a
/// dashboard asks the API server. The admin token and the ServiceAccount tokens the sandbox issued
/// authenticate; any other token, or an expired one, does not.
pub fn token_review(auth: &Auth, store: &Store, mut review: Value) -> Value {
    let token = review["spec"]["token"].as_str().unwrap_or_default().trim();
    let identity = match token {
        "" => None,
        ADMIN_TOKEN => Some(Identity::admin()),
        token => auth.token_identity(store, token),
    };
    review["status"] = match identity {
        Some(who) => json!({"authenticated": true, "user": {
            "username": who.username, "groups": who.groups,
            "uid": (!who.uid.is_empty()).then_some(&who.uid),
        }}),
        None => json!({"authenticated": false, "error": "invalid bearer token"}),
    };
    review["metadata"]["creationTimestamp"] = Value::Null;
    review
}

/// Answers the review kinds of `authorization.k8s.io` and `authentication.k8s.io` (they are never
/// stored): access reviews, rules reviews and `kubectl auth whoami`'s SelfSubjectReview.
pub fn review(
    store: &Store,
    caller: &Identity,
    kind: &str,
    namespace: &str,
    mut review: Value,
) -> Result<Value, ApiError> {
    let spec = review["spec"].clone();
    let status = match kind {
        "SelfSubjectReview" => json!({"userInfo": {
            "username": caller.username, "groups": caller.groups,
            "uid": (!caller.uid.is_empty()).then_some(&caller.uid),
        }}),
        "SelfSubjectRulesReview" => {
            let namespace = spec["namespace"].as_str().unwrap_or_default();
            let (resource_rules, non_resource_rules) = rules_of(store, caller, namespace);
            json!({"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": false})
        }
        "SelfSubjectAccessReview" | "SubjectAccessReview" | "LocalSubjectAccessReview" => {
            let subject = if kind == "SelfSubjectAccessReview" {
                caller.clone()
            } else {
                Identity {
                    username: spec["user"].as_str().unwrap_or_default().into(),
                    uid: spec["uid"].as_str().unwrap_or_default().into(),
                    groups: strings(&spec["groups"]).map(String::from).collect(),
                }
            };
            let request = review_request(&spec, namespace)?;
            let decision = authorize(store, &subject, &request);
            let mut status = json!({"allowed": decision.allowed});
            if !decision.reason.is_empty() {
                status["reason"] = json!(decision.reason);
            }
            status
        }
        other => {
            return Err(ApiError::method_not_allowed(format!(
                "{other} cannot be reviewed"
            )));
        }
    };
    review["status"] = status;
    review["metadata"]["creationTimestamp"] = Value::Null;
    Ok(review)
}

pub(crate) fn review_request(spec: &Value, namespace: &str) -> Result<Request, ApiError> {
    let text = |v: &Value, field: &str| v[field].as_str().unwrap_or_default().to_string();
    if let Some(attributes) = spec.get("resourceAttributes").filter(|v| v.is_object()) {
        let mut in_namespace = text(attributes, "namespace");
        if !namespace.is_empty() {
            in_namespace = namespace.to_string();
        }
        return Ok(Request::Resource {
            verb: text(attributes, "verb"),
            group: text(attributes, "group"),
            resource: text(attributes, "resource"),
            subresource: text(attributes, "subresource"),
            namespace: in_namespace,
            name: text(attributes, "name"),
        });
    }
    if let Some(attributes) = spec.get("nonResourceAttributes").filter(|v| v.is_object()) {
        return Ok(Request::NonResource {
            verb: text(attributes, "verb"),
            path: text(attributes, "path"),
        });
    }
    Err(ApiError::invalid(
        "SelfSubjectAccessReview",
        "",
        "spec.resourceAttributes",
        "FieldValueRequired",
        "exactly one of nonResourceAttributes or resourceAttributes must be specified",
    ))
}
