//! Calling a Canary's webhooks: Flagger's payload, per-attempt timeout, retries and the ≤ 202 rule.

use crate::transport::{PostError, Response, shown_url, trimmed_body};
use crate::{WebhookClient, WebhookError};
use reqwest::{StatusCode, Url};
use serde::{Deserialize, Serialize};
use serin_api::limits::MAX_WEBHOOK_TIMEOUT;
use serin_api::{Canary, CanaryStatus, CanaryWebhook, HookType, Phase};
use serin_core::{Check, EventType, Outcome, Verdict};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::time::Duration;

/// Per-attempt timeout when a webhook sets none (Flagger's 10s).
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest part of a response body quoted in an error message.
pub const BODY_EXCERPT_CHARS: usize = 300;

/// The JSON body POSTed to a webhook, field for field as Flagger sends it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct HookPayload {
    /// The Canary's name.
    pub name: String,
    /// The Canary's namespace.
    pub namespace: String,
    /// The phase the hook is called in (see [`HookPayload::for_hook`]).
    pub phase: String,
    /// Identifies the revision and config combination under test ([`canary_checksum`]).
    pub checksum: String,
    /// The webhook's `metadata`, plus the event fields for event hooks; omitted when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

impl HookPayload {
    /// The payload for calling `hook` of `canary` in `phase` (the phase the decision core names in
    /// its `Check::Hook` or `Action::NotifyHooks`).
    pub fn for_hook(canary: &Canary, hook: &CanaryWebhook, phase: Phase) -> Self {
        HookPayload {
            name: canary.metadata.name.clone().unwrap_or_default(),
            namespace: canary.metadata.namespace.clone().unwrap_or_default(),
            phase: phase.as_str().to_string(),
            checksum: canary_checksum(canary.status.as_ref()),
            metadata: hook.metadata.clone().unwrap_or_default(),
        }
    }

    /// The payload of an event hook: `eventMessage`, `eventType` and `timestamp` (Unix
    /// milliseconds) in `metadata`, plus the hook's own metadata keys that do not collide with them.
    pub fn for_event(
        canary: &Canary,
        hook: &CanaryWebhook,
        phase: Phase,
        event_type: EventType,
        message: &str,
        timestamp_millis: i64,
    ) -> Self {
        let mut payload = HookPayload::for_hook(canary, hook, phase);
        let mut metadata = BTreeMap::from([
            ("eventMessage".to_string(), message.to_string()),
            (
                "eventType".to_string(),
                match event_type {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_string(),
            ),
            ("timestamp".to_string(), timestamp_millis.to_string()),
        ]);
        for (key, value) in payload.metadata {
            metadata.entry(key).or_insert(value);
        }
        payload.metadata = metadata;
        payload
    }
}

/// A short hash of the status' `trackedConfigs` and `lastAppliedSpec`: it changes whenever the
/// revision or one of its tracked ConfigMaps/Secrets does, so a receiver can tell runs apart.
pub fn canary_checksum(status: Option<&CanaryStatus>) -> String {
    let fields = serde_json::json!({
        "trackedConfigs": status.and_then(|s| s.tracked_configs.clone()),
        "lastAppliedSpec": status.and_then(|s| s.last_applied_spec.clone()).unwrap_or_default(),
    });
    let digest = Sha256::digest(fields.to_string().as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// A webhook's per-attempt timeout: its `timeout`, or 10s when unset or shorter than two
/// characters (Flagger's rule), and never more than [`MAX_WEBHOOK_TIMEOUT`] (validation refuses
/// longer ones; a Canary written before that rule still waits no longer).
pub fn hook_timeout(hook: &CanaryWebhook) -> Result<Duration, WebhookError> {
    let text = hook.timeout.as_deref().unwrap_or("");
    if text.chars().count() < 2 {
        return Ok(DEFAULT_HOOK_TIMEOUT);
    }
    serin_api::duration::parse_go_duration(text)
        .ok()
        .filter(|d| !d.is_zero())
        .map(|d| d.min(MAX_WEBHOOK_TIMEOUT))
        .ok_or_else(|| WebhookError::InvalidTimeout {
            hook: hook.name.clone(),
            timeout: text.to_string(),
        })
}

/// A successful call: the receiver answered 200, 201 or 202.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookResponse {
    /// The status (200, 201 or 202).
    pub status: StatusCode,
    /// The response body, e.g. `Approved` from the load tester's gates.
    pub body: Vec<u8>,
    /// How many attempts it took (1 when the first one succeeded).
    pub attempts: u32,
}

/// Why one attempt did not succeed; the last one is reported when the retries run out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptFailure {
    /// No complete answer within the hook's timeout.
    Timeout(Duration),
    /// The connection or the exchange failed.
    Transport(String),
    /// A retryable status (429, or 5xx other than 501).
    Status(StatusCode),
    /// The call with its retries and waits reached its limit (the client's `call_limit`,
    /// [`serin_api::limits::MAX_WEBHOOK_CALL`] by default) before an attempt succeeded.
    CallLimit(Duration),
}

impl std::fmt::Display for AttemptFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttemptFailure::Timeout(t) => write!(f, "no answer within {}s", t.as_secs_f64()),
            AttemptFailure::CallLimit(limit) => write!(
                f,
                "the call ran out of the {}s one webhook call may take with its retries",
                limit.as_secs()
            ),
            AttemptFailure::Transport(error) => f.write_str(error),
            // Flagger (retryablehttp) writes no status suffix for 429.
            AttemptFailure::Status(StatusCode::TOO_MANY_REQUESTS) => {
                f.write_str("too many requests (429)")
            }
            AttemptFailure::Status(status) => write!(
                f,
                "unexpected HTTP status {} {}",
                status.as_u16(),
                status.canonical_reason().unwrap_or("")
            ),
        }
    }
}

/// Whether Flagger's client would try again after this status: 429 and 5xx except 501.
pub fn is_retryable_status(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS
        || (status.is_server_error() && status != StatusCode::NOT_IMPLEMENTED)
}

/// Whether a status counts as success: 200, 201 or 202 (204 and other 2xx fail, as in Flagger).
pub fn is_success_status(status: StatusCode) -> bool {
    status.as_u16() <= 202
}

/// What a gate hook (confirm-rollout, confirm-traffic-increase, confirm-promotion) decided.
#[derive(Debug)]
pub enum Gate {
    /// The hook succeeded: advance.
    Approved,
    /// The hook failed or could not be reached: wait and ask again next tick.
    Halted(WebhookError),
}

impl Gate {
    /// Reads a call's result as a gate decision.
    pub fn from_result(result: Result<HookResponse, WebhookError>) -> Gate {
        match result {
            Ok(_) => Gate::Approved,
            Err(error) => Gate::Halted(error),
        }
    }

    /// Whether the release may advance.
    pub fn is_approved(&self) -> bool {
        matches!(self, Gate::Approved)
    }
}

/// Whether a rollback hook's result asks for a rollback: a success means "roll back now"; any
/// failure (including an unreachable hook) means "carry on".
pub fn signals_rollback(result: &Result<HookResponse, WebhookError>) -> bool {
    result.is_ok()
}

/// One webhook's result when a group of hooks is notified.
#[derive(Debug)]
pub struct HookRun {
    /// The webhook's name.
    pub hook: String,
    /// What happened.
    pub result: Result<HookResponse, WebhookError>,
}

impl WebhookClient {
    /// POSTs `payload` to `hook.url`, retrying as the hook's `retries` allows, and returns the
    /// answer when its status is ≤ 202.
    pub async fn call(
        &self,
        hook: &CanaryWebhook,
        payload: &HookPayload,
    ) -> Result<HookResponse, WebhookError> {
        let url = Url::parse(&hook.url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
            .ok_or_else(|| WebhookError::InvalidUrl {
                hook: hook.name.clone(),
                url: hook.url.clone(),
            })?;
        let timeout = hook_timeout(hook)?;
        // Flagger's disableTLS skips certificate verification (InsecureSkipVerify).
        let verify_tls = hook.disable_tls != Some(true);
        let attempts = u32::try_from(hook.retries.unwrap_or(0).max(0)).unwrap_or(0) + 1;
        let shown = shown_url(&url);
        let gave_up = |attempts: u32, last: AttemptFailure| WebhookError::GaveUp {
            hook: hook.name.clone(),
            url: shown.clone(),
            attempts,
            last,
        };
        // Retries of a long timeout could otherwise keep one call going for hours.
        let limit = self.options.call_limit;
        let deadline = tokio::time::Instant::now() + limit;
        let mut last = AttemptFailure::Transport("not attempted".into());
        for attempt in 1..=attempts {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Err(gave_up(attempt - 1, AttemptFailure::CallLimit(limit)));
            }
            let sent = self
                .transport
                .post(&url, payload, None, timeout.min(left), verify_tls, None)
                .await;
            let mut wait = self.backoff(attempt);
            match sent {
                Ok(Response { status, body, .. }) if is_success_status(status) => {
                    return Ok(HookResponse {
                        status,
                        body,
                        attempts: attempt,
                    });
                }
                Ok(response) if is_retryable_status(response.status) => {
                    if matches!(response.status.as_u16(), 429 | 503)
                        && let Some(seconds) = response.retry_after_seconds
                    {
                        wait = Duration::from_secs(seconds).min(self.options.retry_wait_max);
                    }
                    last = AttemptFailure::Status(response.status);
                }
                Ok(response) => {
                    return Err(WebhookError::Rejected {
                        hook: hook.name.clone(),
                        url: shown,
                        status: response.status,
                        body: trimmed_body(&response.body, BODY_EXCERPT_CHARS),
                    });
                }
                Err(PostError::Transport(error)) => last = AttemptFailure::Transport(error),
                Err(PostError::Timeout) if timeout > left => {
                    return Err(gave_up(attempt, AttemptFailure::CallLimit(limit)));
                }
                Err(PostError::Timeout) => last = AttemptFailure::Timeout(timeout),
            }
            if attempt < attempts {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                tokio::time::sleep(wait.min(left)).await;
            }
        }
        Err(gave_up(attempts, last))
    }

    /// Wait before the attempt after `attempt`: min × 2^(attempt−1), capped at max (retryablehttp's
    /// default backoff).
    fn backoff(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(16));
        self.options
            .retry_wait_min
            .saturating_mul(factor)
            .min(self.options.retry_wait_max)
    }

    /// Runs a `Check::Hook` the decision core asked for and returns the verdict to feed back;
    /// `None` for metric checks, which are not this crate's job.
    pub async fn run_check(&self, canary: &Canary, check: &Check) -> Option<Verdict> {
        let Check::Hook {
            name,
            hook_type,
            phase,
        } = check
        else {
            return None;
        };
        // A check may be one of the pre- or post-promotion analyses' (names are unique across them).
        let hook = canary.spec.analysis().and_then(|a| {
            a.every_webhook().find(|h| {
                &h.name == name && h.hook_type().unwrap_or(HookType::Rollout) == *hook_type
            })
        });
        let outcome = match hook {
            Some(hook) => match self
                .call(hook, &HookPayload::for_hook(canary, hook, *phase))
                .await
            {
                Ok(_) => Outcome::Hook(Ok(())),
                Err(error @ WebhookError::GaveUp { .. }) => {
                    Outcome::HookUnanswered(error.to_string())
                }
                Err(error) => Outcome::Hook(Err(error.to_string())),
            },
            None => Outcome::Hook(Err(format!(
                "webhook {name} of type {hook_type} is not in spec.analysis.webhooks; the Canary changed during the tick"
            ))),
        };
        Some(Verdict {
            check: check.clone(),
            outcome,
        })
    }

    /// Calls every webhook of `hook_type` in list order with `phase` (the core's
    /// `Action::NotifyHooks`), stopping at the first failure as Flagger does.
    pub async fn notify_hooks(
        &self,
        canary: &Canary,
        hook_type: HookType,
        phase: Phase,
    ) -> Vec<HookRun> {
        let mut runs = Vec::new();
        for hook in webhooks(canary)
            .iter()
            .filter(|h| h.hook_type() == Some(hook_type))
        {
            let result = self
                .call(hook, &HookPayload::for_hook(canary, hook, phase))
                .await;
            let failed = result.is_err();
            runs.push(HookRun {
                hook: hook.name.clone(),
                result,
            });
            if failed {
                break;
            }
        }
        runs
    }

    /// Sends one Kubernetes event to the canary's `event` hooks, or, when it has none, to
    /// `fallback_url` (the operator's `-event-webhook`). Every hook is called; failures are
    /// returned for logging only.
    pub async fn send_event(
        &self,
        canary: &Canary,
        event: &serin_core::Event,
        timestamp_millis: i64,
        fallback_url: Option<&str>,
    ) -> Vec<HookRun> {
        let phase = canary
            .status
            .as_ref()
            .and_then(|s| s.phase)
            .unwrap_or(Phase::Initializing);
        let mut hooks: Vec<CanaryWebhook> = webhooks(canary)
            .iter()
            .filter(|h| h.hook_type() == Some(HookType::Event))
            .cloned()
            .collect();
        // The operator's own event webhook URL comes from a Secret: its failures name the host only.
        let mut secret_url = false;
        if hooks.is_empty()
            && let Some(url) = fallback_url.filter(|u| !u.is_empty())
        {
            secret_url = true;
            hooks.push(CanaryWebhook {
                name: "event-webhook".into(),
                type_: Some("event".into()),
                url: url.to_string(),
                ..CanaryWebhook::default()
            });
        }
        let mut runs = Vec::new();
        for hook in &hooks {
            let payload = HookPayload::for_event(
                canary,
                hook,
                phase,
                event.type_,
                &event.message,
                timestamp_millis,
            );
            let mut result = self.call(hook, &payload).await;
            if secret_url {
                result = result.map_err(WebhookError::with_host_only);
            }
            runs.push(HookRun {
                hook: hook.name.clone(),
                result,
            });
        }
        runs
    }
}

fn webhooks(canary: &Canary) -> &[CanaryWebhook] {
    canary.spec.analysis().map(|a| a.webhooks()).unwrap_or(&[])
}

/// Whether [`WebhookClient::send_event`] would call anything for `canary`: an `event` hook of its
/// own, or else a non-empty `fallback_url`.
pub fn sends_events(canary: &Canary, fallback_url: Option<&str>) -> bool {
    webhooks(canary)
        .iter()
        .any(|h| h.hook_type() == Some(HookType::Event))
        || fallback_url.is_some_and(|url| !url.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(timeout: Option<&str>) -> CanaryWebhook {
        CanaryWebhook {
            name: "gate".into(),
            url: "http://x/".into(),
            timeout: timeout.map(str::to_string),
            ..CanaryWebhook::default()
        }
    }

    #[test]
    fn events_are_sent_to_the_canarys_event_hooks_or_else_the_fallback() {
        let with_hooks = |types: &[&str]| -> Canary {
            let hooks: Vec<_> = types
                .iter()
                .map(|t| serde_json::json!({"name": t, "type": t, "url": "http://127.0.0.1:1/"}))
                .collect();
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "podinfo", "namespace": "test"},
                "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo"},
                         "service": {"port": 9898},
                         "analysis": {"interval": "1m", "webhooks": hooks}}
            }))
            .expect("a Canary")
        };
        let fallback = Some("http://127.0.0.1:2/");
        assert!(sends_events(&with_hooks(&["event"]), None));
        assert!(sends_events(&with_hooks(&["pre-rollout", "event"]), None));
        assert!(!sends_events(
            &with_hooks(&["pre-rollout", "rollout"]),
            None
        ));
        assert!(!sends_events(&with_hooks(&[]), Some("")));
        assert!(sends_events(&with_hooks(&["rollout"]), fallback));
    }

    #[test]
    fn timeout_defaults_to_ten_seconds_when_unset_or_too_short() {
        assert_eq!(hook_timeout(&hook(None)).unwrap(), DEFAULT_HOOK_TIMEOUT);
        assert_eq!(
            hook_timeout(&hook(Some("5"))).unwrap(),
            DEFAULT_HOOK_TIMEOUT
        );
        assert_eq!(
            hook_timeout(&hook(Some("30s"))).unwrap(),
            Duration::from_secs(30)
        );
        assert_eq!(
            hook_timeout(&hook(Some("2m"))).unwrap(),
            Duration::from_secs(120)
        );
        // Go durations, as Flagger reads them.
        assert_eq!(
            hook_timeout(&hook(Some("1m30s"))).unwrap(),
            Duration::from_secs(90)
        );
        assert_eq!(
            hook_timeout(&hook(Some("500ms"))).unwrap(),
            Duration::from_millis(500)
        );
        // Validation refuses more than 5m; a Canary written before that still waits no longer.
        assert_eq!(
            hook_timeout(&hook(Some("1000h"))).unwrap(),
            MAX_WEBHOOK_TIMEOUT
        );
        assert_eq!(
            hook_timeout(&hook(Some("5m"))).unwrap(),
            Duration::from_secs(300)
        );
        let error = hook_timeout(&hook(Some("soon"))).unwrap_err().to_string();
        assert!(
            error.contains("gate") && error.contains("\"soon\"") && error.contains("30s"),
            "{error}"
        );
    }

    #[test]
    fn success_and_retry_rules_follow_flagger() {
        for code in [200, 201, 202] {
            assert!(is_success_status(StatusCode::from_u16(code).unwrap()));
        }
        for code in [203, 204, 301, 400, 500] {
            assert!(
                !is_success_status(StatusCode::from_u16(code).unwrap()),
                "{code}"
            );
        }
        for code in [429, 500, 502, 503, 504] {
            assert!(
                is_retryable_status(StatusCode::from_u16(code).unwrap()),
                "{code}"
            );
        }
        for code in [400, 403, 404, 501, 204] {
            assert!(
                !is_retryable_status(StatusCode::from_u16(code).unwrap()),
                "{code}"
            );
        }
    }

    #[test]
    fn checksum_changes_with_the_revision_and_its_configs() {
        let mut status = CanaryStatus {
            last_applied_spec: Some("abc".into()),
            ..CanaryStatus::default()
        };
        let first = canary_checksum(Some(&status));
        assert_eq!(first, canary_checksum(Some(&status.clone())));
        status.tracked_configs = Some(BTreeMap::from([("configmap/app".into(), "1".into())]));
        let with_config = canary_checksum(Some(&status));
        status.last_applied_spec = Some("def".into());
        let next_revision = canary_checksum(Some(&status));
        assert_ne!(first, with_config);
        assert_ne!(with_config, next_revision);
        assert_eq!(first.len(), 16);
    }

    #[test]
    fn failure_texts_match_flagger() {
        assert_eq!(
            AttemptFailure::Status(StatusCode::INTERNAL_SERVER_ERROR).to_string(),
            "unexpected HTTP status 500 Internal Server Error"
        );
        assert_eq!(
            AttemptFailure::Timeout(Duration::from_millis(1500)).to_string(),
            "no answer within 1.5s"
        );
    }
}
