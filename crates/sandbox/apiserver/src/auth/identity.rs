//! Who a request comes from, what it asks for, and the issued tokens and access the server keeps.

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::SystemTime;

/// The token in the admin kubeconfig the sandbox writes.
pub const ADMIN_TOKEN: &str = "serin-sandbox";

/// The admin's user name, as `kubectl auth whoami` shows it.
pub const ADMIN_USER: &str = "sandbox-admin";

/// The user name of requests without credentials on the HTTPS address.
pub const ANONYMOUS_USER: &str = "system:anonymous";

pub(crate) const MASTERS: &str = "system:masters";
pub(crate) const AUTHENTICATED: &str = "system:authenticated";
pub(crate) const UNAUTHENTICATED: &str = "system:unauthenticated";
pub(crate) const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
pub(crate) const AGGREGATE_LABEL: &str = "rbac.authorization.k8s.io/aggregate-to-";

/// The shortest and longest lifetimes a TokenRequest may ask for, and the default.
pub(crate) const MIN_TOKEN_SECONDS: i64 = 600;
pub(crate) const MAX_TOKEN_SECONDS: i64 = 48 * 3600;
pub(crate) const DEFAULT_TOKEN_SECONDS: i64 = 3600;

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
    pub(crate) fn service_account_of(&self) -> Option<(&str, &str)> {
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
    pub(crate) tokens: Mutex<HashMap<String, IssuedToken>>,
    pub(crate) access: Mutex<BTreeMap<String, BTreeSet<Access>>>,
}

#[derive(Clone, Debug)]
pub(crate) struct IssuedToken {
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) uid: String,
    pub(crate) expires: SystemTime,
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
