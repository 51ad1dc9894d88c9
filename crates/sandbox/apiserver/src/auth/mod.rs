//! Who is asking and what they may do: bearer tokens, ServiceAccount tokens (TokenRequest),
//! impersonation, and RBAC (`rbac.authorization.k8s.io/v1`) enforced as the API server does.
//!
//! The admin token (`serin-sandbox`, the one in the kubeconfig the sandbox writes) acts as a member
//! of `system:masters`; a ServiceAccount token acts as `system:serviceaccount:<namespace>:<name>`
//! and gets exactly what its bindings grant. Who a request without credentials is depends on the
//! address it came to ([`Unauthenticated`]): on the HTTPS address, as on a cluster's secure port,
//! it is `system:anonymous`; on the plain-HTTP loopback address (kubectl sends no token over plain
//! HTTP) it is the admin, as on kube-apiserver's old insecure port.

mod authenticate;
mod bootstrap;
mod identity;
mod rbac;
mod reviews;

pub use bootstrap::*;
pub use identity::*;
pub use rbac::*;
pub use reviews::*;
