//! The API group the operator serves: Serin's own `serin.dev`, or Flagger's `flagger.app` so that a
//! running Flagger install (its CRDs, Canaries, finalizers and owner references) carries on.
//!
//! The group is chosen once, when the operator starts, before any Kubernetes client is made; the
//! resource types read it whenever they build a URL or an `apiVersion`.

use std::sync::atomic::{AtomicBool, Ordering};

/// An API group the Canary, MetricTemplate and AlertProvider kinds can be served under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiGroup {
    /// `serin.dev`, with the CRDs Serin's chart installs.
    Serin,
    /// `flagger.app`, with the CRDs Flagger's chart installs.
    Flagger,
}

impl ApiGroup {
    /// The group's name, as in `apiVersion` and URLs.
    pub fn name(self) -> &'static str {
        match self {
            ApiGroup::Serin => "serin.dev",
            ApiGroup::Flagger => "flagger.app",
        }
    }

    /// `<group>/v1beta1`.
    pub fn api_version(self) -> &'static str {
        match self {
            ApiGroup::Serin => "serin.dev/v1beta1",
            ApiGroup::Flagger => "flagger.app/v1beta1",
        }
    }

    /// The finalizer that holds a Canary with `revertOnDeletion` until its target is restored.
    pub fn finalizer(self) -> &'static str {
        match self {
            ApiGroup::Serin => "finalizer.serin.dev",
            ApiGroup::Flagger => "finalizer.flagger.app",
        }
    }

    /// Whether the group's CRDs are Flagger's, whose status schema prunes every field Flagger
    /// does not declare.
    pub fn prunes_status(self) -> bool {
        self == ApiGroup::Flagger
    }
}

impl std::str::FromStr for ApiGroup {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        match name {
            "serin.dev" => Ok(ApiGroup::Serin),
            "flagger.app" => Ok(ApiGroup::Flagger),
            other => Err(format!(
                "unknown API group '{other}': use serin.dev (Serin's CRDs) or flagger.app (Flagger's CRDs)"
            )),
        }
    }
}

static FLAGGER: AtomicBool = AtomicBool::new(false);

/// Serves the kinds under `group` from now on; call it once, before any client is made.
pub fn set_api_group(group: ApiGroup) {
    FLAGGER.store(group == ApiGroup::Flagger, Ordering::SeqCst);
}

/// The group the kinds are served under (`serin.dev` unless [`set_api_group`] said otherwise).
pub fn api_group() -> ApiGroup {
    if FLAGGER.load(Ordering::Relaxed) {
        ApiGroup::Flagger
    } else {
        ApiGroup::Serin
    }
}

/// `apiVersion` of the served kinds, e.g. `serin.dev/v1beta1`.
pub fn api_version() -> &'static str {
    api_group().api_version()
}

/// Defines a served kind's object type (`metadata`, `spec`, `status`) whose API group is the one
/// chosen at start-up. `kube`'s derive fixes the group at compile time, so it makes the CRD of
/// `serin.dev` alone (its `…Definition` type) and the type every client uses is written out here.
macro_rules! served_kind {
    ($(#[$doc:meta])* $root:ident, $spec:ty, $status:ty, $kind:literal, $plural:literal) => {
        $(#[$doc])*
        #[derive(serde::Deserialize, Clone, Debug, Default, PartialEq)]
        pub struct $root {
            /// Standard object metadata.
            pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
            /// The desired state.
            pub spec: $spec,
            /// The observed state, written by the operator.
            #[serde(default)]
            pub status: Option<$status>,
        }

        impl $root {
            /// An object named `name` with `spec` and no status.
            pub fn new(name: &str, spec: $spec) -> Self {
                Self {
                    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                        name: Some(name.to_string()),
                        ..Default::default()
                    },
                    spec,
                    status: None,
                }
            }
        }

        impl serde::Serialize for $root {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeStruct;
                let fields = if self.status.is_some() { 5 } else { 4 };
                let mut object = serializer.serialize_struct(stringify!($root), fields)?;
                object.serialize_field("apiVersion", $crate::group::api_version())?;
                object.serialize_field("kind", $kind)?;
                object.serialize_field("metadata", &self.metadata)?;
                object.serialize_field("spec", &self.spec)?;
                if let Some(status) = &self.status {
                    object.serialize_field("status", status)?;
                }
                object.end()
            }
        }

        impl kube::Resource for $root {
            type DynamicType = ();
            type Scope = kube::core::NamespaceResourceScope;

            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                $crate::group::api_group().name().into()
            }

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }

            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                $crate::VERSION.into()
            }

            fn api_version(_: &()) -> std::borrow::Cow<'_, str> {
                $crate::group::api_version().into()
            }

            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }

            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }

            fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }

        impl kube::core::object::HasSpec for $root {
            type Spec = $spec;

            fn spec(&self) -> &$spec {
                &self.spec
            }

            fn spec_mut(&mut self) -> &mut $spec {
                &mut self.spec
            }
        }

        impl kube::core::object::HasStatus for $root {
            type Status = $status;

            fn status(&self) -> Option<&$status> {
                self.status.as_ref()
            }

            fn status_mut(&mut self) -> &mut Option<$status> {
                &mut self.status
            }
        }
    };
}

pub(crate) use served_kind;
