//! Webhook types and when each is called.

/// When a webhook is called during a release (Flagger's hook types).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HookType {
    /// Gate before a new revision is scaled up.
    ConfirmRollout,
    /// Once, before traffic first moves to the canary.
    PreRollout,
    /// Every analysis tick, before the metrics (also the untyped default).
    Rollout,
    /// Gate before each traffic increase.
    ConfirmTrafficIncrease,
    /// Gate before the primary is updated.
    ConfirmPromotion,
    /// After promotion or rollback.
    PostRollout,
    /// A success means: roll back now.
    Rollback,
    /// Notified of every event.
    Event,
}

impl HookType {
    /// Every type, in the order a release meets them.
    pub const ALL: [HookType; 8] = [
        HookType::ConfirmRollout,
        HookType::PreRollout,
        HookType::Rollout,
        HookType::ConfirmTrafficIncrease,
        HookType::ConfirmPromotion,
        HookType::PostRollout,
        HookType::Rollback,
        HookType::Event,
    ];

    /// Reads a `type` value; the empty string means `rollout`.
    pub fn parse(text: &str) -> Option<HookType> {
        if text.is_empty() {
            return Some(HookType::Rollout);
        }
        HookType::ALL.into_iter().find(|t| t.as_str() == text)
    }

    /// The name written in `webhooks[].type`.
    pub fn as_str(self) -> &'static str {
        match self {
            HookType::ConfirmRollout => "confirm-rollout",
            HookType::PreRollout => "pre-rollout",
            HookType::Rollout => "rollout",
            HookType::ConfirmTrafficIncrease => "confirm-traffic-increase",
            HookType::ConfirmPromotion => "confirm-promotion",
            HookType::PostRollout => "post-rollout",
            HookType::Rollback => "rollback",
            HookType::Event => "event",
        }
    }
}

impl std::fmt::Display for HookType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
