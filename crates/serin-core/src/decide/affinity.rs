//! Session-affinity cookies: while the canary takes traffic, a user it served gets a cookie that
//! keeps them on it (and, with `primaryCookieName`, a user the primary served one that keeps them
//! there); once the canary's share is back to 0, its cookie becomes the previous one, which the
//! router expires. The cookies live in the status, so every tick of a run routes with the same ones.

use super::Tick;
use crate::plan::Action;
use sha2::{Digest, Sha256};

/// Ten lowercase letters derived from the run (the Canary's uid and the revision it releases) and
/// the cookie's role: the same on every tick of a run, different across Canaries and revisions.
fn cookie_value(uid: &str, revision: &str, role: &str) -> String {
    Sha256::digest(format!("{uid}/{revision}/{role}").as_bytes())
        .iter()
        .take(10)
        .map(|byte| char::from(b'a' + byte % 26))
        .collect()
}

impl Tick<'_> {
    /// Keeps the status' cookies in step with the traffic this tick leaves: cookies for the run
    /// while the canary has a share, the canary's cookie retired to `previousSessionAffinityCookie`
    /// once it has none.
    pub(super) fn track_affinity_cookies(&mut self) {
        let Some(affinity) = self.analysis.session_affinity.clone() else {
            return;
        };
        let routes = self
            .actions
            .iter()
            .rev()
            .find_map(|action| match action {
                Action::SetRoutes(routes) => Some(*routes),
                _ => None,
            })
            .or(self.obs.routes);
        let Some(routes) = routes else {
            return;
        };
        if routes.canary > 0 {
            let uid = self.canary.metadata.uid.clone().unwrap_or_default();
            let revision = self.status.last_applied_spec.clone().unwrap_or_default();
            if self.status.session_affinity_cookie.is_none() {
                let value = cookie_value(&uid, &revision, "canary");
                self.status.session_affinity_cookie =
                    Some(format!("{}={value}", affinity.cookie_name));
            }
            if let Some(primary) = &affinity.primary_cookie_name
                && self.status.primary_session_affinity_cookie.is_none()
            {
                let value = cookie_value(&uid, &revision, "primary");
                self.status.primary_session_affinity_cookie = Some(format!("{primary}={value}"));
            }
        } else if let Some(current) = self.status.session_affinity_cookie.take() {
            self.status.previous_session_affinity_cookie = Some(current);
            self.status.primary_session_affinity_cookie = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::cookie_value;

    #[test]
    fn cookie_values_are_ten_letters_stable_within_a_run_and_distinct_across_runs() {
        let value = cookie_value("uid-1", "rev-a", "canary");
        assert_eq!(value.len(), 10);
        assert!(value.chars().all(|c| c.is_ascii_lowercase()), "{value}");
        assert_eq!(value, cookie_value("uid-1", "rev-a", "canary"));
        assert_ne!(value, cookie_value("uid-1", "rev-b", "canary"));
        assert_ne!(value, cookie_value("uid-2", "rev-a", "canary"));
        assert_ne!(value, cookie_value("uid-1", "rev-a", "primary"));
    }
}
