//! Tokens issued and read, impersonation, owner-reference admission, and each request's
//! authorization, remembered per identity.

use super::identity::*;
use super::rbac::*;
use crate::registry::ResourceInfo;
use crate::status::ApiError;
use crate::store::Store;
use axum::http::HeaderMap;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

    pub(crate) fn token_identity(&self, store: &Store, token: &str) -> Option<Identity> {
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
    pub(crate) fn impersonate(
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

    pub(crate) fn check_impersonation(
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
