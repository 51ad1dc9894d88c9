//! Who is asking and what they may do: bearer tokens, ServiceAccount tokens (TokenRequest),
//! impersonation, and RBAC (`rbac.authorization.k8s.io/v1`) enforced as the API server does.
//!
//! The admin token (`serin-sandbox`, the one in the kubeconfig the sandbox writes) acts as a member
//! of `system:masters`; a ServiceAccount token acts as `system:serviceaccount:<namespace>:<name>`
//! and gets exactly what its bindings grant. Who a request without credentials is depends on the
//! address it came to ([`Unauthenticated`]): on the HTTPS address, as on a cluster's secure port,
//! it is `system:anonymous`; on the plain-HTTP loopback address (kubectl sends no token over plain
//! HTTP) it is the admin, as on kube-apiserver's old insecure port.

use crate::registry::ResourceInfo;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::store::{Store, WriteOptions};
use axum::http::HeaderMap;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The token in the admin kubeconfig the sandbox writes.
pub const ADMIN_TOKEN: &str = "serin-sandbox";

/// The admin's user name, as `kubectl auth whoami` shows it.
pub const ADMIN_USER: &str = "sandbox-admin";

/// The user name of requests without credentials on the HTTPS address.
pub const ANONYMOUS_USER: &str = "system:anonymous";

const MASTERS: &str = "system:masters";
const AUTHENTICATED: &str = "system:authenticated";
const UNAUTHENTICATED: &str = "system:unauthenticated";
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
const AGGREGATE_LABEL: &str = "rbac.authorization.k8s.io/aggregate-to-";

/// The shortest and longest lifetimes a TokenRequest may ask for, and the default.
const MIN_TOKEN_SECONDS: i64 = 600;
const MAX_TOKEN_SECONDS: i64 = 48 * 3600;
const DEFAULT_TOKEN_SECONDS: i64 = 3600;

/// An authenticated user.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Identity {
    /// `system:serviceaccount:<ns>:<name>` for a ServiceAccount.
    pub username: String,
    /// The ServiceAccount's uid, when known.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// Groups, `system:authenticated` included.
    pub groups: Vec<String>,
}

impl Identity {
    /// The sandbox's administrator (`system:masters`).
    pub fn admin() -> Self {
        Identity {
            username: ADMIN_USER.into(),
            uid: String::new(),
            groups: vec![MASTERS.into(), AUTHENTICATED.into()],
        }
    }

    /// `system:anonymous`, who made a request without credentials where credentials are expected.
    pub fn anonymous() -> Self {
        Identity {
            username: ANONYMOUS_USER.into(),
            uid: String::new(),
            groups: vec![UNAUTHENTICATED.into()],
        }
    }

    /// A ServiceAccount, with the groups Kubernetes gives every ServiceAccount.
    pub fn service_account(namespace: &str, name: &str, uid: &str) -> Self {
        Identity {
            username: format!("system:serviceaccount:{namespace}:{name}"),
            uid: uid.into(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                AUTHENTICATED.into(),
            ],
        }
    }

    /// Whether this identity bypasses authorization.
    pub fn is_admin(&self) -> bool {
        self.groups.iter().any(|g| g == MASTERS)
    }

    /// `(namespace, name)` when this is a ServiceAccount.
    fn service_account_of(&self) -> Option<(&str, &str)> {
        let rest = self.username.strip_prefix("system:serviceaccount:")?;
        rest.split_once(':')
    }
}

/// What a request asks to do, in RBAC's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// A request on an API resource.
    Resource {
        /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`, ...
        verb: String,
        /// API group (`""` for core).
        group: String,
        /// Plural resource name.
        resource: String,
        /// Subresource (`status`, `scale`, `token`, ...) or empty.
        subresource: String,
        /// Namespace, empty at the cluster scope.
        namespace: String,
        /// Object name, empty for collections.
        name: String,
    },
    /// A request on a path outside the resource API (`/version`, `/apis`, `/metrics`).
    NonResource {
        /// `get`, `post`, ...
        verb: String,
        /// The URL path.
        path: String,
    },
}

/// Who a request without credentials acts as, which depends on the address it came to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Unauthenticated {
    /// The sandbox's administrator: the plain-HTTP loopback address, which kubectl sends no token
    /// to, like kube-apiserver's old insecure port.
    #[default]
    Admin,
    /// `system:anonymous` in the group `system:unauthenticated`, as on a cluster's secure port.
    Anonymous,
}

/// The issued ServiceAccount tokens and what each identity was allowed to do.
#[derive(Default)]
pub struct Auth {
    tokens: Mutex<HashMap<String, IssuedToken>>,
    access: Mutex<BTreeMap<String, BTreeSet<Access>>>,
}

#[derive(Clone, Debug)]
struct IssuedToken {
    namespace: String,
    name: String,
    uid: String,
    expires: SystemTime,
}

/// One kind of request an identity was allowed to make.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Access {
    /// The RBAC verb.
    pub verb: String,
    /// API group (`""` for core); for a non-resource request, empty.
    pub group: String,
    /// Plural resource, or the path of a non-resource request.
    pub resource: String,
    /// Subresource, or empty.
    pub subresource: String,
}

impl Auth {
    /// Issues a token for a ServiceAccount, valid for `seconds`; returns it with its expiry.
    pub fn issue(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        audiences: &[String],
        seconds: i64,
    ) -> (String, Timestamp) {
        let now = SystemTime::now();
        let expires = now + Duration::from_secs(seconds.max(0) as u64);
        let epoch = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        // Shaped like the API server's tokens (a JWT whose claims name the ServiceAccount), so
        // tools that read the claims work; the sandbox checks tokens by lookup, not signature.
        let header = json!({"alg": "RS256", "kid": "serin-sandbox"});
        let claims = json!({
            "aud": audiences, "exp": epoch(expires), "iat": epoch(now), "nbf": epoch(now),
            "iss": "https://kubernetes.default.svc.cluster.local",
            "jti": uuid::Uuid::new_v4().to_string(),
            "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}},
            "sub": format!("system:serviceaccount:{namespace}:{name}"),
        });
        let signature = [
            uuid::Uuid::new_v4().as_bytes().as_slice(),
            uuid::Uuid::new_v4().as_bytes(),
        ]
        .concat();
        let token = format!(
            "{}.{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string()),
            URL_SAFE_NO_PAD.encode(signature)
        );
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        // Expired tokens authenticate no one: forget them, so issuing many cannot grow the map.
        tokens.retain(|_, issued| issued.expires >= now);
        tokens.insert(
            token.clone(),
            IssuedToken {
                namespace: namespace.into(),
                name: name.into(),
                uid: uid.into(),
                expires,
            },
        );
        let expiry = Timestamp::from_second(epoch(expires) as i64).unwrap_or(Timestamp::UNIX_EPOCH);
        (token, expiry)
    }

    /// The identity behind the request's credentials and impersonation headers; a request without
    /// credentials acts as `unauthenticated` says.
    pub fn authenticate(
        &self,
        store: &Store,
        headers: &HeaderMap,
        unauthenticated: Unauthenticated,
    ) -> Result<Identity, ApiError> {
        let bearer = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let identity = match bearer {
            None => match unauthenticated {
                Unauthenticated::Admin => Identity::admin(),
                Unauthenticated::Anonymous => Identity::anonymous(),
            },
            Some(ADMIN_TOKEN) => Identity::admin(),
            Some(token) => self
                .token_identity(store, token)
                .ok_or_else(ApiError::unauthorized)?,
        };
        self.impersonate(store, identity, headers)
    }

    fn token_identity(&self, store: &Store, token: &str) -> Option<Identity> {
        let issued = self
            .tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(token)
            .cloned()?;
        if issued.expires < SystemTime::now() {
            return None;
        }
        // A token dies with its ServiceAccount: a new account of the same name has another uid.
        let accounts = store.resource("", "v1", "serviceaccounts")?;
        let account = store.get(&accounts, &issued.namespace, &issued.name).ok()?;
        (account["metadata"]["uid"].as_str() == Some(issued.uid.as_str()))
            .then(|| Identity::service_account(&issued.namespace, &issued.name, &issued.uid))
    }

    /// Applies `Impersonate-User` / `Impersonate-Group` (kubectl `--as`, `--as-group`) when the
    /// caller may impersonate.
    fn impersonate(
        &self,
        store: &Store,
        caller: Identity,
        headers: &HeaderMap,
    ) -> Result<Identity, ApiError> {
        let values = |name: &str| -> Vec<String> {
            headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok().map(String::from))
                .collect()
        };
        let groups = values("impersonate-group");
        let Some(user) = values("impersonate-user").into_iter().next() else {
            if groups.is_empty() {
                return Ok(caller);
            }
            return Err(ApiError::internal(
                "requested impersonation is not allowed: impersonating groups requires impersonating a user",
            ));
        };
        let mut target = match user
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
        {
            Some((namespace, name)) => {
                self.check_impersonation(store, &caller, "serviceaccounts", namespace, name)?;
                let mut identity = Identity::service_account(namespace, name, "");
                if !groups.is_empty() {
                    identity.groups.clear();
                }
                identity
            }
            None => {
                self.check_impersonation(store, &caller, "users", "", &user)?;
                Identity {
                    username: user,
                    uid: String::new(),
                    groups: Vec::new(),
                }
            }
        };
        for group in groups {
            self.check_impersonation(store, &caller, "groups", "", &group)?;
            target.groups.push(group);
        }
        // As the API server does: the impersonated anonymous user is unauthenticated, anyone
        // else authenticated unless the caller asked for system:unauthenticated.
        let implied = if target.username == ANONYMOUS_USER {
            UNAUTHENTICATED
        } else {
            AUTHENTICATED
        };
        if !target
            .groups
            .iter()
            .any(|g| g == implied || g == UNAUTHENTICATED)
        {
            target.groups.push(implied.into());
        }
        Ok(target)
    }

    fn check_impersonation(
        &self,
        store: &Store,
        caller: &Identity,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        let request = Request::Resource {
            verb: "impersonate".into(),
            group: String::new(),
            resource: resource.into(),
            subresource: String::new(),
            namespace: namespace.into(),
            name: name.into(),
        };
        if self.authorize(store, caller, &request).allowed {
            return Ok(());
        }
        let mut error = forbidden(caller, &request);
        error.message = format!(
            "{resource} \"{name}\" is forbidden: {}",
            denial(caller, &request)
        );
        Err(error)
    }

    /// The OwnerReferencesPermissionEnforcement admission check (on by default on OpenShift): whoever
    /// changes an object's `ownerReferences` must be allowed to delete the object, and whoever sets
    /// `blockOwnerDeletion` on a reference must be allowed to update the owner's `finalizers`
    /// subresource. `new` is the object as it would be stored, `old` the stored one.
    pub fn admit_owner_references(
        &self,
        store: &Store,
        identity: &Identity,
        info: &ResourceInfo,
        namespace: &str,
        new: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let references = |object: Option<&Value>| {
            object
                .and_then(|o| o["metadata"]["ownerReferences"].as_array())
                .cloned()
                .unwrap_or_default()
        };
        let (now, before) = (references(Some(new)), references(old));
        if identity.is_admin() || now == before {
            return Ok(());
        }
        let name = new["metadata"]["name"].as_str().unwrap_or_default();
        let refuse = |why: &str| {
            let mut error = ApiError::forbidden(format!(
                "{} \"{name}\" is forbidden: {why}: , <nil>",
                info.qualified_plural()
            ));
            error.details = Some(json!({"name": name, "group": info.group, "kind": info.plural}));
            error
        };
        let delete = Request::Resource {
            verb: "delete".into(),
            group: info.group.clone(),
            resource: info.plural.clone(),
            subresource: String::new(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        if !self.authorize(store, identity, &delete).allowed {
            return Err(refuse(
                "cannot set an ownerRef on a resource you can't delete",
            ));
        }
        let blocks = |reference: &Value| reference["blockOwnerDeletion"] == true;
        let registry = store.registry();
        for reference in now.iter().filter(|r| blocks(r)) {
            let already = before
                .iter()
                .any(|b| b["uid"] == reference["uid"] && blocks(b));
            if already {
                continue;
            }
            let api_version = reference["apiVersion"].as_str().unwrap_or_default();
            let kind = reference["kind"].as_str().unwrap_or_default();
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
            let Some(owner) = registry
                .all()
                .find(|r| r.group == group && r.version == version && r.kind == kind)
            else {
                return Err(refuse(&format!(
                    "cannot set blockOwnerDeletion in this case because cannot find RESTMapping for APIVersion {api_version} Kind {kind}"
                )));
            };
            let update = Request::Resource {
                verb: "update".into(),
                group: owner.group.clone(),
                resource: owner.plural.clone(),
                subresource: "finalizers".into(),
                namespace: if owner.namespaced {
                    namespace.to_string()
                } else {
                    String::new()
                },
                name: reference["name"].as_str().unwrap_or_default().to_string(),
            };
            if !self.authorize(store, identity, &update).allowed {
                return Err(refuse(
                    "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on",
                ));
            }
        }
        Ok(())
    }

    /// Decides a request; allowed requests of identities other than the admin are recorded.
    pub fn authorize(&self, store: &Store, identity: &Identity, request: &Request) -> Decision {
        if identity.is_admin() {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
        let decision = authorize(store, identity, request);
        if decision.allowed {
            let access = match request {
                Request::Resource {
                    verb,
                    group,
                    resource,
                    subresource,
                    ..
                } => Access {
                    verb: verb.clone(),
                    group: group.clone(),
                    resource: resource.clone(),
                    subresource: subresource.clone(),
                },
                Request::NonResource { verb, path } => Access {
                    verb: verb.clone(),
                    group: String::new(),
                    resource: path.clone(),
                    subresource: String::new(),
                },
            };
            self.access
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(identity.username.clone())
                .or_default()
                .insert(access);
        }
        decision
    }

    /// What each identity (but the admin) was allowed to do so far, by user name.
    pub fn access(&self) -> BTreeMap<String, BTreeSet<Access>> {
        self.access
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// An authorization verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request may proceed.
    pub allowed: bool,
    /// Which binding allowed it (RBAC's wording), or empty.
    pub reason: String,
}

/// The API server's wording of a denial, without the resource prefix.
fn denial(identity: &Identity, request: &Request) -> String {
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

fn rbac(store: &Store, plural: &str) -> ResourceInfo {
    store
        .resource(RBAC_GROUP, "v1", plural)
        .expect("RBAC kinds are built in")
}

fn list(store: &Store, plural: &str, namespace: Option<&str>) -> Vec<Value> {
    store
        .list(
            &rbac(store, plural),
            namespace,
            &LabelSelector::default(),
            &FieldSelector::default(),
        )
        .0
}

fn subject_matches(subject: &Value, identity: &Identity, binding_namespace: &str) -> bool {
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
fn role_rules(store: &Store, role_ref: &Value, namespace: &str) -> Vec<Value> {
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
fn applicable_rules(
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

fn strings(value: &Value) -> impl Iterator<Item = &str> {
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

fn review_request(spec: &Value, namespace: &str) -> Result<Request, ApiError> {
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

/// Recomputes the rules of every ClusterRole with an `aggregationRule` from the ClusterRoles its
/// selectors match, as Kubernetes' clusterrole-aggregation controller does. Returns whether any
/// role changed.
pub fn aggregate_cluster_roles(store: &Store) -> bool {
    let info = rbac(store, "clusterroles");
    let mut changed = false;
    // Aggregated roles may feed others (view → edit → admin): settle in a few passes.
    for _ in 0..4 {
        let roles = list(store, "clusterroles", None);
        let mut pass_changed = false;
        for role in roles.iter().filter(|r| r["aggregationRule"].is_object()) {
            let mut rules: Vec<Value> = Vec::new();
            for selector in role["aggregationRule"]["clusterRoleSelectors"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let Ok(selector) = LabelSelector::from_json(selector) else {
                    continue;
                };
                for source in roles
                    .iter()
                    .filter(|r| r["metadata"]["name"] != role["metadata"]["name"])
                    .filter(|r| selector.matches(r))
                {
                    for rule in source["rules"].as_array().into_iter().flatten() {
                        if !rules.contains(rule) {
                            rules.push(rule.clone());
                        }
                    }
                }
            }
            if role["rules"].as_array().map(Vec::as_slice).unwrap_or(&[]) == rules.as_slice() {
                continue;
            }
            let mut updated = role.clone();
            updated["rules"] = Value::Array(rules);
            let name = role["metadata"]["name"].as_str().unwrap_or_default();
            if store
                .update(
                    &info,
                    "",
                    name,
                    updated,
                    crate::store::Part::Main,
                    &WriteOptions::by("clusterrole-aggregation-controller"),
                )
                .is_ok()
            {
                pass_changed = true;
            }
        }
        changed |= pass_changed;
        if !pass_changed {
            break;
        }
    }
    changed
}

/// Gives every namespace its `default` ServiceAccount, as the serviceaccounts controller does.
pub fn ensure_default_service_account(store: &Store, namespace: &Value) {
    let Some(name) = namespace["metadata"]["name"].as_str() else {
        return;
    };
    if namespace["metadata"]["deletionTimestamp"].is_string() {
        return;
    }
    let accounts = store
        .resource("", "v1", "serviceaccounts")
        .expect("built in");
    if store.get(&accounts, name, "default").is_err() {
        // AlreadyExists (a race with a client) and a namespace deleted meanwhile are both fine.
        let _ = store.create(
            &accounts,
            Some(name),
            json!({"metadata": {"name": "default"}}),
            &WriteOptions::by("kube-controller-manager"),
        );
    }
}

/// Runs the identity controllers in the background: ClusterRole aggregation and the `default`
/// ServiceAccount of every namespace.
pub fn spawn_controllers(store: Arc<Store>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut changes = store.subscribe();
        let namespaces = store.resource("", "v1", "namespaces").expect("built in");
        let cluster_roles = format!("clusterroles.{RBAC_GROUP}");
        let (existing, _) = store.list(
            &namespaces,
            None,
            &LabelSelector::default(),
            &FieldSelector::default(),
        );
        for namespace in &existing {
            ensure_default_service_account(&store, namespace);
        }
        aggregate_cluster_roles(&store);
        loop {
            let change = match changes.recv().await {
                Ok(change) => change,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    aggregate_cluster_roles(&store);
                    continue;
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            if change.resource == cluster_roles {
                aggregate_cluster_roles(&store);
            } else if change.resource == "namespaces"
                || (change.resource == "serviceaccounts"
                    && change.change == crate::store::ChangeType::Deleted)
            {
                // A deleted `default` account comes back, as on a cluster.
                let namespace = match change.resource.as_str() {
                    "namespaces" => Some(Value::clone(&change.object)),
                    _ => change.object["metadata"]["namespace"]
                        .as_str()
                        .and_then(|ns| store.get(&namespaces, "", ns).ok()),
                };
                if let Some(namespace) = namespace {
                    ensure_default_service_account(&store, &namespace);
                }
            }
        }
    })
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];

/// The bootstrap roles and bindings every cluster starts with: `cluster-admin` for
/// `system:masters`, the aggregated `admin`, `edit` and `view` roles, self-review rights for every
/// authenticated user, and discovery, OpenAPI, version and health for everyone, anonymous included.
pub fn bootstrap(store: &Store) {
    let workloads: &[&str] = &[
        "deployments",
        "deployments/scale",
        "deployments/status",
        "replicasets",
        "replicasets/scale",
        "replicasets/status",
        "daemonsets",
        "daemonsets/status",
        "statefulsets",
        "statefulsets/scale",
    ];
    let core_read: &[&str] = &[
        "configmaps",
        "endpoints",
        "persistentvolumeclaims",
        "pods",
        "pods/log",
        "pods/status",
        "replicationcontrollers",
        "serviceaccounts",
        "services",
        "services/status",
        "events",
        "limitranges",
        "resourcequotas",
        "namespaces",
        "namespaces/status",
    ];
    let core_write: &[&str] = &[
        "configmaps",
        "endpoints",
        "persistentvolumeclaims",
        "pods",
        "pods/attach",
        "pods/exec",
        "pods/portforward",
        "pods/proxy",
        "replicationcontrollers",
        "secrets",
        "serviceaccounts",
        "services",
        "services/proxy",
    ];
    let batch: &[&str] = &["jobs", "cronjobs", "jobs/status", "cronjobs/status"];
    let aggregate = |to: &str| json!({(format!("{AGGREGATE_LABEL}{to}")): "true"});
    let cluster_roles = vec![
        json!({"metadata": {"name": "cluster-admin"}, "rules": [
            rule(&["*"], &["*"], &["*"]),
            {"nonResourceURLs": ["*"], "verbs": ["*"]},
        ]}),
        json!({"metadata": {"name": "system:discovery"}, "rules": [
            {"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez",
                "/openapi", "/openapi/*", "/readyz", "/version", "/version/"], "verbs": ["get"]},
        ]}),
        json!({"metadata": {"name": "system:public-info-viewer"}, "rules": [
            {"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": ["get"]},
        ]}),
        json!({"metadata": {"name": "system:basic-user"}, "rules": [
            rule(&["authorization.k8s.io"], &["selfsubjectaccessreviews", "selfsubjectrulesreviews"], &["create"]),
            rule(&["authentication.k8s.io"], &["selfsubjectreviews"], &["create"]),
        ]}),
        json!({"metadata": {"name": "admin", "labels": {}},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": aggregate("admin")}]}}),
        json!({"metadata": {"name": "edit", "labels": aggregate("admin")},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": aggregate("edit")}]}}),
        json!({"metadata": {"name": "view", "labels": aggregate("edit")},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": aggregate("view")}]}}),
        json!({"metadata": {"name": "system:aggregate-to-view", "labels": aggregate("view")}, "rules": [
            rule(&[""], core_read, READ),
            rule(&["apps"], workloads, READ),
            rule(&["autoscaling"], &["horizontalpodautoscalers", "horizontalpodautoscalers/status"], READ),
            rule(&["batch"], batch, READ),
            rule(&["policy"], &["poddisruptionbudgets", "poddisruptionbudgets/status"], READ),
            rule(&["networking.k8s.io"], &["ingresses", "ingresses/status", "networkpolicies"], READ),
            rule(&["discovery.k8s.io"], &["endpointslices"], READ),
        ]}),
        json!({"metadata": {"name": "system:aggregate-to-edit", "labels": aggregate("edit")}, "rules": [
            rule(&[""], core_write, WRITE),
            rule(&[""], &["secrets"], READ),
            rule(&[""], &["serviceaccounts"], &["impersonate"]),
            rule(&[""], &["serviceaccounts/token"], &["create"]),
            rule(&["apps"], workloads, WRITE),
            rule(&["autoscaling"], &["horizontalpodautoscalers"], WRITE),
            rule(&["batch"], &["jobs", "cronjobs"], WRITE),
            rule(&["policy"], &["poddisruptionbudgets"], WRITE),
            rule(&["networking.k8s.io"], &["ingresses", "networkpolicies"], WRITE),
            rule(&["coordination.k8s.io"], &["leases"], &["get", "list", "watch", "create", "delete", "deletecollection", "patch", "update"]),
        ]}),
        json!({"metadata": {"name": "system:aggregate-to-admin", "labels": aggregate("admin")}, "rules": [
            rule(&["authorization.k8s.io"], &["localsubjectaccessreviews"], &["create"]),
            rule(&[RBAC_GROUP], &["rolebindings", "roles"], &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]),
        ]}),
    ];
    let bind = |name: &str, groups: &[&str]| {
        json!({"metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
            "subjects": groups.iter().map(|g| json!({"apiGroup": RBAC_GROUP, "kind": "Group", "name": g})).collect::<Vec<_>>()})
    };
    let bindings = vec![
        bind("cluster-admin", &[MASTERS]),
        // Anonymous discovery is what clusters before 1.14 bound by default (later ones bind it
        // to authenticated users only): unauthenticated tools may discover what the sandbox serves.
        bind("system:discovery", &[AUTHENTICATED, UNAUTHENTICATED]),
        bind("system:basic-user", &[AUTHENTICATED]),
        bind(
            "system:public-info-viewer",
            &[AUTHENTICATED, UNAUTHENTICATED],
        ),
    ];
    let by = WriteOptions::by("kube-apiserver");
    for (plural, objects) in [
        ("clusterroles", cluster_roles),
        ("clusterrolebindings", bindings),
    ] {
        let info = rbac(store, plural);
        for mut object in objects {
            object["metadata"]["labels"]["kubernetes.io/bootstrapping"] = json!("rbac-defaults");
            object["metadata"]["annotations"] =
                json!({"rbac.authorization.kubernetes.io/autoupdate": "true"});
            store
                .create(&info, None, object, &by)
                .expect("bootstrap RBAC objects are valid");
        }
    }
    aggregate_cluster_roles(store);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Request {
        Request::Resource {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: "team-a".into(),
            name: name.into(),
        }
    }

    #[test]
    fn rules_match_as_rbac_matches_them() {
        let pods = json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]});
        assert!(rule_allows(&pods, &resource("get", "", "pods", "", "p")));
        assert!(!rule_allows(
            &pods,
            &resource("delete", "", "pods", "", "p")
        ));
        // A resource rule does not cover the resource's subresources...
        assert!(!rule_allows(
            &pods,
            &resource("get", "", "pods", "log", "p")
        ));
        // ...but `*/log` and `*` do.
        let logs = json!({"apiGroups": [""], "resources": ["*/log"], "verbs": ["get"]});
        assert!(rule_allows(&logs, &resource("get", "", "pods", "log", "p")));
        let everything = json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]});
        assert!(rule_allows(
            &everything,
            &resource("patch", "apps", "deployments", "scale", "d")
        ));
        let named = json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["settings"]});
        assert!(rule_allows(
            &named,
            &resource("get", "", "configmaps", "", "settings")
        ));
        assert!(!rule_allows(
            &named,
            &resource("get", "", "configmaps", "", "other")
        ));
        assert!(!rule_allows(
            &named,
            &resource("get", "apps", "configmaps", "", "settings")
        ));
        let urls = json!({"nonResourceURLs": ["/healthz", "/apis/*"], "verbs": ["get"]});
        let path = |p: &str| Request::NonResource {
            verb: "get".into(),
            path: p.into(),
        };
        assert!(rule_allows(&urls, &path("/healthz")));
        assert!(rule_allows(&urls, &path("/apis/apps/v1")));
        assert!(!rule_allows(&urls, &path("/metrics")));
    }

    #[test]
    fn denials_read_as_the_api_servers() {
        let robot = Identity::service_account("team-a", "robot", "u");
        let error = forbidden(&robot, &resource("list", "", "pods", "", ""));
        assert_eq!(error.code, 403);
        assert_eq!(
            error.message,
            "pods is forbidden: User \"system:serviceaccount:team-a:robot\" cannot list resource \"pods\" in API group \"\" in the namespace \"team-a\""
        );
        let error = forbidden(
            &robot,
            &resource("patch", "apps", "deployments", "scale", "web"),
        );
        assert_eq!(
            error.message,
            "deployments.apps \"web\" is forbidden: User \"system:serviceaccount:team-a:robot\" cannot patch resource \"deployments/scale\" in API group \"apps\" in the namespace \"team-a\""
        );
        let error = forbidden(
            &robot,
            &Request::NonResource {
                verb: "get".into(),
                path: "/metrics".into(),
            },
        );
        assert_eq!(
            error.message,
            "forbidden: User \"system:serviceaccount:team-a:robot\" cannot get path \"/metrics\""
        );
    }

    #[test]
    fn requests_without_credentials_are_the_admin_or_anonymous_by_address() {
        let store = Store::new();
        bootstrap(&store);
        let auth = Auth::default();
        let none = HeaderMap::new();
        let admin = auth
            .authenticate(&store, &none, Unauthenticated::Admin)
            .unwrap();
        assert!(admin.is_admin());
        let anonymous = auth
            .authenticate(&store, &none, Unauthenticated::Anonymous)
            .unwrap();
        assert_eq!(anonymous, Identity::anonymous());
        let mut with_admin_token = HeaderMap::new();
        with_admin_token.insert(
            axum::http::header::AUTHORIZATION,
            format!("Bearer {ADMIN_TOKEN}").parse().unwrap(),
        );
        assert!(
            auth.authenticate(&store, &with_admin_token, Unauthenticated::Anonymous)
                .unwrap()
                .is_admin()
        );

        let get = |path: &str| Request::NonResource {
            verb: "get".into(),
            path: path.into(),
        };
        for path in [
            "/version",
            "/healthz",
            "/readyz",
            "/api",
            "/apis/apps/v1",
            "/openapi/v2",
        ] {
            assert!(authorize(&store, &anonymous, &get(path)).allowed, "{path}");
        }
        assert!(!authorize(&store, &anonymous, &get("/metrics")).allowed);
        let list_pods = resource("list", "", "pods", "", "");
        assert!(!authorize(&store, &anonymous, &list_pods).allowed);
        assert_eq!(
            forbidden(&anonymous, &list_pods).message,
            "pods is forbidden: User \"system:anonymous\" cannot list resource \"pods\" in API group \"\" in the namespace \"team-a\""
        );
    }

    #[test]
    fn bootstrap_roles_aggregate_view_into_edit_into_admin() {
        let store = Store::new();
        bootstrap(&store);
        let roles = rbac(&store, "clusterroles");
        let rules = |name: &str| {
            store.get(&roles, "", name).unwrap()["rules"]
                .as_array()
                .unwrap()
                .len()
        };
        let view = rules("view");
        assert!(view > 0);
        assert!(rules("edit") > view, "edit holds view's rules and its own");
        assert!(rules("admin") > rules("edit"));
        let viewer = Identity::service_account("team-a", "viewer", "u");
        let namespaces = store.resource("", "v1", "namespaces").unwrap();
        store
            .create(
                &namespaces,
                None,
                json!({"metadata": {"name": "team-a"}}),
                &WriteOptions::by("test"),
            )
            .unwrap();
        store
            .create(
                &rbac(&store, "rolebindings"),
                Some("team-a"),
                json!({"metadata": {"name": "viewer"},
                    "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "view"},
                    "subjects": [{"kind": "ServiceAccount", "name": "viewer"}]}),
                &WriteOptions::by("test"),
            )
            .unwrap();
        let decision = authorize(
            &store,
            &viewer,
            &resource("list", "apps", "deployments", "", ""),
        );
        assert!(decision.allowed);
        assert_eq!(
            decision.reason,
            "RBAC: allowed by RoleBinding \"viewer\" in namespace \"team-a\" of ClusterRole \"view\" to ServiceAccount \"viewer\""
        );
        assert!(!authorize(&store, &viewer, &resource("get", "", "secrets", "", "db")).allowed);
        assert!(!authorize(&store, &viewer, &resource("delete", "", "pods", "", "p")).allowed);
        let mut elsewhere = resource("list", "apps", "deployments", "", "");
        if let Request::Resource { namespace, .. } = &mut elsewhere {
            *namespace = "team-b".into();
        }
        assert!(!authorize(&store, &viewer, &elsewhere).allowed);
    }
}
