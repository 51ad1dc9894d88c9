//! RBAC as the API server evaluates it: the rules of the roles bound to a subject, and the denial
//! messages a cluster writes.

use super::identity::*;
use crate::registry::ResourceInfo;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::store::Store;
use serde_json::{Value, json};

/// An authorization verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request may proceed.
    pub allowed: bool,
    /// Which binding allowed it (RBAC's wording), or empty.
    pub reason: String,
}

/// The API server's wording of a denial, without the resource prefix.
pub(crate) fn denial(identity: &Identity, request: &Request) -> String {
    let user = &identity.username;
    match request {
        Request::NonResource { verb, path } => {
            format!("User \"{user}\" cannot {verb} path \"{path}\"")
        }
        Request::Resource {
            verb,
            group,
            resource,
            subresource,
            namespace,
            ..
        } => {
            let resource = if subresource.is_empty() {
                resource.clone()
            } else {
                format!("{resource}/{subresource}")
            };
            let scope = if namespace.is_empty() {
                "at the cluster scope".to_string()
            } else {
                format!("in the namespace \"{namespace}\"")
            };
            format!(
                "User \"{user}\" cannot {verb} resource \"{resource}\" in API group \"{group}\" {scope}"
            )
        }
    }
}

/// The 403 the API server answers a denied request with.
pub fn forbidden(identity: &Identity, request: &Request) -> ApiError {
    let why = denial(identity, request);
    match request {
        Request::NonResource { .. } => ApiError::forbidden(format!("forbidden: {why}")),
        Request::Resource {
            group,
            resource,
            name,
            ..
        } => {
            let qualified = if group.is_empty() {
                resource.clone()
            } else {
                format!("{resource}.{group}")
            };
            let subject = if name.is_empty() {
                qualified
            } else {
                format!("{qualified} \"{name}\"")
            };
            let mut error = ApiError::forbidden(format!("{subject} is forbidden: {why}"));
            error.details = Some(json!({"name": name, "group": group, "kind": resource}));
            error
        }
    }
}

pub(crate) fn rbac(store: &Store, plural: &str) -> ResourceInfo {
    store
        .resource(RBAC_GROUP, "v1", plural)
        .expect("RBAC kinds are built in")
}

pub(crate) fn list(store: &Store, plural: &str, namespace: Option<&str>) -> Vec<Value> {
    store
        .list(
            &rbac(store, plural),
            namespace,
            &LabelSelector::default(),
            &FieldSelector::default(),
        )
        .0
}

pub(crate) fn subject_matches(
    subject: &Value,
    identity: &Identity,
    binding_namespace: &str,
) -> bool {
    let name = subject["name"].as_str().unwrap_or_default();
    match subject["kind"].as_str() {
        Some("User") => identity.username == name,
        Some("Group") => identity.groups.iter().any(|g| g == name),
        Some("ServiceAccount") => {
            let namespace = subject["namespace"]
                .as_str()
                .filter(|ns| !ns.is_empty())
                .unwrap_or(binding_namespace);
            identity.service_account_of() == Some((namespace, name))
        }
        _ => false,
    }
}

/// The rules of a role, an aggregated ClusterRole's included (they are kept up to date by
/// [`aggregate_cluster_roles`], as Kubernetes' aggregation controller does).
pub(crate) fn role_rules(store: &Store, role_ref: &Value, namespace: &str) -> Vec<Value> {
    let name = role_ref["name"].as_str().unwrap_or_default();
    let role = match role_ref["kind"].as_str() {
        Some("ClusterRole") => store.get(&rbac(store, "clusterroles"), "", name),
        Some("Role") => store.get(&rbac(store, "roles"), namespace, name),
        _ => return Vec::new(),
    };
    role.ok()
        .and_then(|r| r["rules"].as_array().cloned())
        .unwrap_or_default()
}

/// The (binding description, rules) that apply to `identity` in `namespace` (cluster-wide
/// bindings always; RoleBindings of the namespace when one is given).
pub(crate) fn applicable_rules(
    store: &Store,
    identity: &Identity,
    namespace: &str,
) -> Vec<(String, Vec<Value>)> {
    let mut found = Vec::new();
    let mut bindings: Vec<(Value, &str)> = list(store, "clusterrolebindings", None)
        .into_iter()
        .map(|b| (b, "ClusterRoleBinding"))
        .collect();
    if !namespace.is_empty() {
        bindings.extend(
            list(store, "rolebindings", Some(namespace))
                .into_iter()
                .map(|b| (b, "RoleBinding")),
        );
    }
    for (binding, kind) in bindings {
        let binding_namespace = binding["metadata"]["namespace"]
            .as_str()
            .unwrap_or(namespace);
        let matched = binding["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| subject_matches(s, identity, binding_namespace));
        let Some(subject) = matched else {
            continue;
        };
        let role = &binding["roleRef"];
        let described = format!(
            "{kind} \"{}\"{} of {} \"{}\" to {} \"{}\"",
            binding["metadata"]["name"].as_str().unwrap_or_default(),
            if kind == "RoleBinding" {
                format!(" in namespace \"{binding_namespace}\"")
            } else {
                String::new()
            },
            role["kind"].as_str().unwrap_or_default(),
            role["name"].as_str().unwrap_or_default(),
            subject["kind"].as_str().unwrap_or_default(),
            subject["name"].as_str().unwrap_or_default(),
        );
        found.push((described, role_rules(store, role, binding_namespace)));
    }
    found
}

pub(crate) fn strings(value: &Value) -> impl Iterator<Item = &str> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// Whether one PolicyRule allows the request, by RBAC's matching rules.
pub fn rule_allows(rule: &Value, request: &Request) -> bool {
    let any = |field: &str, wanted: &str| strings(&rule[field]).any(|v| v == "*" || v == wanted);
    match request {
        Request::NonResource { verb, path } => {
            any("verbs", verb)
                && strings(&rule["nonResourceURLs"]).any(|url| {
                    url == "*"
                        || url == path
                        || url
                            .strip_suffix('*')
                            .is_some_and(|prefix| path.starts_with(prefix))
                })
        }
        Request::Resource {
            verb,
            group,
            resource,
            subresource,
            name,
            ..
        } => {
            let combined = if subresource.is_empty() {
                resource.clone()
            } else {
                format!("{resource}/{subresource}")
            };
            let resource_matches = strings(&rule["resources"]).any(|r| {
                r == "*"
                    || r == combined
                    || (!subresource.is_empty() && r.strip_prefix("*/") == Some(subresource))
            });
            let mut names = strings(&rule["resourceNames"]).peekable();
            let name_matches = names.peek().is_none() || names.any(|n| n == name);
            any("verbs", verb) && any("apiGroups", group) && resource_matches && name_matches
        }
    }
}

/// RBAC's verdict on `request` by `identity` (no shortcut for the admin).
pub fn authorize(store: &Store, identity: &Identity, request: &Request) -> Decision {
    let namespace = match request {
        Request::Resource { namespace, .. } => namespace.as_str(),
        Request::NonResource { .. } => "",
    };
    if identity.is_admin() {
        return Decision {
            allowed: true,
            reason: format!("{MASTERS} may do anything"),
        };
    }
    for (binding, rules) in applicable_rules(store, identity, namespace) {
        if rules.iter().any(|rule| rule_allows(rule, request)) {
            return Decision {
                allowed: true,
                reason: format!("RBAC: allowed by {binding}"),
            };
        }
    }
    Decision {
        allowed: false,
        reason: String::new(),
    }
}

/// Every rule that applies to `identity` in `namespace`, split into resource and non-resource
/// rules, as a SelfSubjectRulesReview reports them.
pub fn rules_of(store: &Store, identity: &Identity, namespace: &str) -> (Vec<Value>, Vec<Value>) {
    let rules: Vec<Value> = if identity.is_admin() {
        vec![
            json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
            json!({"verbs": ["*"], "nonResourceURLs": ["*"]}),
        ]
    } else {
        applicable_rules(store, identity, namespace)
            .into_iter()
            .flat_map(|(_, rules)| rules)
            .collect()
    };
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for rule in rules {
        let pick = |fields: &[&str]| -> Value {
            let mut picked = serde_json::Map::new();
            for field in fields {
                if let Some(value) = rule.get(*field).filter(|v| !v.is_null()) {
                    picked.insert((*field).into(), value.clone());
                }
            }
            Value::Object(picked)
        };
        if rule.get("nonResourceURLs").is_some_and(|v| !v.is_null()) {
            non_resource_rules.push(pick(&["verbs", "nonResourceURLs"]));
        } else {
            resource_rules.push(pick(&["verbs", "apiGroups", "resources", "resourceNames"]));
        }
    }
    (resource_rules, non_resource_rules)
}
