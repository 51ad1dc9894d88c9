//! Whether this operator process may write to the cluster. With leader election, only the holder of
//! a Lease that has not expired may: every write goes through [`Leadership::write_guard`], which
//! refuses it otherwise, so a process that was paused past its lease (a stopped VM, a long GC, a
//! SIGSTOP) cannot act on a Canary that another replica now runs, even before it notices the loss.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::client::Body;
use kube::runtime::reflector::{ObjectRef, Store};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Time before the lease's expiry at which writes already stop, so a write in flight cannot land
/// after another replica may have taken over.
const EXPIRY_MARGIN: SignedDuration = SignedDuration::from_secs(1);

/// The Lease this process competes for, and what it last saw of it.
struct Election {
    identity: String,
    lease: ObjectRef<Lease>,
    leases: OnceLock<Store<Lease>>,
    leading: AtomicBool,
}

/// Whether this process may write: always without leader election, otherwise only while it leads.
#[derive(Clone, Default)]
pub struct Leadership {
    election: Option<Arc<Election>>,
}

/// Why a write was refused.
#[derive(Debug, thiserror::Error)]
#[error("not the leader (Lease {lease} is not held by {identity} or has expired): write refused")]
pub struct NotLeading {
    lease: String,
    identity: String,
}

impl Leadership {
    /// Leadership for a process without leader election: it may always write.
    pub fn unelected() -> Self {
        Leadership::default()
    }

    /// Leadership decided by the Lease `namespace`/`name` held as `identity`; nothing may be
    /// written until [`Leadership::watch_lease`] and [`Leadership::set_leading`] say so.
    pub fn elected(identity: &str, namespace: &str, name: &str) -> Self {
        Leadership {
            election: Some(Arc::new(Election {
                identity: identity.to_string(),
                lease: ObjectRef::new(name).within(namespace),
                leases: OnceLock::new(),
                leading: AtomicBool::new(false),
            })),
        }
    }

    /// Reads the Lease from `store`, a watch cache kept by the caller.
    pub fn watch_lease(&self, store: Store<Lease>) {
        if let Some(election) = &self.election {
            let _ = election.leases.set(store);
        }
    }

    /// Records what the lease manager last decided.
    pub fn set_leading(&self, leading: bool) {
        if let Some(election) = &self.election {
            election.leading.store(leading, Ordering::SeqCst);
        }
    }

    /// Whether a write may be sent now: without election always; with it, only while the lease
    /// manager says this process leads and the Lease, as last seen, is held by this process and
    /// its last renewal has not expired.
    pub fn may_write(&self) -> bool {
        let Some(election) = &self.election else {
            return true;
        };
        if !election.leading.load(Ordering::SeqCst) {
            return false;
        }
        let Some(lease) = election.leases.get().and_then(|s| s.get(&election.lease)) else {
            return false;
        };
        lease_is_held(&lease, &election.identity, Timestamp::now())
    }

    /// A layer for the operator's kube client that sends reads as they are and refuses every other
    /// request unless [`Leadership::may_write`] holds.
    pub fn write_guard(
        &self,
    ) -> tower::filter::FilterLayer<
        impl Fn(http::Request<Body>) -> Result<http::Request<Body>, NotLeading> + Clone + use<>,
    > {
        let leadership = self.clone();
        tower::filter::FilterLayer::new(move |request: http::Request<Body>| {
            if request.method() == http::Method::GET || leadership.may_write() {
                return Ok(request);
            }
            let (lease, identity) = leadership
                .election
                .as_ref()
                .map(|e| (e.lease.to_string(), e.identity.clone()))
                .unwrap_or_default();
            Err(NotLeading { lease, identity })
        })
    }
}

/// Whether `lease` is held by `identity` at `now`: its holder, and its last renewal plus its
/// duration (less a margin) still ahead. Both times come from this process's clock, since the
/// renewal was written by it.
fn lease_is_held(lease: &Lease, identity: &str, now: Timestamp) -> bool {
    let Some(spec) = &lease.spec else {
        return false;
    };
    if spec.holder_identity.as_deref() != Some(identity) {
        return false;
    }
    let (Some(renewed), Some(seconds)) = (&spec.renew_time, spec.lease_duration_seconds) else {
        return false;
    };
    let expiry = renewed.0 + SignedDuration::from_secs(i64::from(seconds)) - EXPIRY_MARGIN;
    now < expiry
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn lease(holder: &str, renewed: Timestamp, seconds: i32) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(renewed)),
                lease_duration_seconds: Some(seconds),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn a_lease_is_held_by_its_holder_until_its_renewal_expires() {
        let renewed = Timestamp::from_second(1_000).unwrap();
        let at = |s: i64| Timestamp::from_second(1_000 + s).unwrap();
        let held = lease("a", renewed, 15);
        assert!(lease_is_held(&held, "a", at(0)));
        assert!(lease_is_held(&held, "a", at(13)));
        // The last second before expiry is already refused: a write sent then could land late.
        assert!(!lease_is_held(&held, "a", at(14)));
        assert!(!lease_is_held(&held, "a", at(60)));
        assert!(!lease_is_held(&held, "b", at(0)));
        assert!(!lease_is_held(&Lease::default(), "a", at(0)));
    }

    #[test]
    fn without_election_every_write_is_allowed_and_with_it_none_until_leading() {
        assert!(Leadership::unelected().may_write());
        let elected = Leadership::elected("a", "default", "serin-operator");
        assert!(!elected.may_write());
        elected.set_leading(true);
        // Leading, but the Lease has not been seen yet.
        assert!(!elected.may_write());
    }
}
