//! Serin's outgoing HTTP: the webhook caller (every Flagger hook type, its payload, per-attempt
//! timeout, retries and the ≤ 202 success rule) and the alert notifiers (Slack, Microsoft Teams,
//! Discord, Rocket.Chat, Google Chat). The controller hands it the decision core's `Check::Hook`,
//! `Action::NotifyHooks`, events and alerts.
//!
//! ```no_run
//! # async fn demo(canary: serin_api::Canary, check: serin_core::Check) {
//! use serin_webhooks::{ClientOptions, WebhookClient};
//! let client = WebhookClient::new(ClientOptions::from_env());
//! if let Some(verdict) = client.run_check(&canary, &check).await {
//!     println!("{verdict:?}"); // feed it back into serin_core::decide
//! }
//! # }
//! ```

#![deny(missing_docs)]

pub mod alert;
pub mod hook;
mod transport;

pub use transport::{host_only, shown_url};

pub use alert::{
    AlertMessage, Field, Notifier, ProviderKind, alert_fields, recipients, severity_accepts,
};
pub use hook::{
    AttemptFailure, Gate, HookPayload, HookResponse, HookRun, canary_checksum, signals_rollback,
};

use reqwest::StatusCode;
use std::time::Duration;

/// Where requests go before they reach their host.
#[derive(Debug, Clone)]
pub enum ProxySetting {
    /// Straight to the host, whatever the environment says.
    Direct,
    /// Through the proxies reqwest reads from HTTP_PROXY, HTTPS_PROXY and ALL_PROXY, except for the
    /// hosts in NO_PROXY (each also in lower case).
    FromEnv,
    /// Through this proxy, e.g. the sandbox's mesh proxy.
    Through(Box<reqwest::Proxy>),
}

/// Settings shared by every call a [`WebhookClient`] makes.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// The proxy requests go through (the sandbox's mesh proxy, the environment's, or none).
    pub proxy: ProxySetting,
    /// Wait before the first retry; doubled for each later one (Flagger: 1s).
    pub retry_wait_min: Duration,
    /// Longest wait between retries, also the cap on `Retry-After` (Flagger: 30s).
    pub retry_wait_max: Duration,
    /// Longest one call may take with its retries and waits
    /// ([`serin_api::limits::MAX_WEBHOOK_CALL`]).
    pub call_limit: Duration,
}

impl ClientOptions {
    /// Flagger's retry waits and no proxy.
    pub fn direct() -> Self {
        ClientOptions {
            proxy: ProxySetting::Direct,
            retry_wait_min: Duration::from_secs(1),
            retry_wait_max: Duration::from_secs(30),
            call_limit: serin_api::limits::MAX_WEBHOOK_CALL,
        }
    }

    /// Flagger's retry waits and the environment's proxies (HTTP_PROXY, HTTPS_PROXY, NO_PROXY, ...),
    /// for the operator binary.
    pub fn from_env() -> Self {
        ClientOptions {
            proxy: ProxySetting::FromEnv,
            ..ClientOptions::direct()
        }
    }

    /// Flagger's retry waits, with every http:// request sent to `proxy` (`http://host:port`)
    /// except those to the hosts in `no_proxy` (NO_PROXY's format: `127.0.0.1,localhost,.svc`).
    pub fn through(proxy: &str, no_proxy: &str) -> Result<Self, reqwest::Error> {
        let proxy = reqwest::Proxy::http(proxy)?.no_proxy(reqwest::NoProxy::from_string(no_proxy));
        Ok(ClientOptions {
            proxy: ProxySetting::Through(Box::new(proxy)),
            ..ClientOptions::direct()
        })
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions::direct()
    }
}

/// Calls webhooks and posts alerts. Cheap to clone; build one per process.
#[derive(Clone)]
pub struct WebhookClient {
    options: ClientOptions,
    transport: transport::Transport,
}

impl WebhookClient {
    /// A client with these options; loads the platform's root certificates for https:// URLs.
    pub fn new(options: ClientOptions) -> Self {
        WebhookClient {
            transport: transport::Transport::new(&options.proxy),
            options,
        }
    }

    /// The options in effect.
    pub fn options(&self) -> &ClientOptions {
        &self.options
    }
}

/// Why a webhook call did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// `url` is not an absolute http(s) URL.
    #[error(
        "webhook {hook}: url {url:?} is not an absolute http:// or https:// URL; fix spec.analysis.webhooks[].url, e.g. http://flagger-loadtester.test/"
    )]
    InvalidUrl {
        /// The webhook's name.
        hook: String,
        /// The URL as written.
        url: String,
    },
    /// `timeout` cannot be read.
    #[error(
        "webhook {hook}: timeout {timeout:?} cannot be read; write numbers with units ms, s, m or h in spec.analysis.webhooks[].timeout, e.g. \"30s\" or \"1m30s\""
    )]
    InvalidTimeout {
        /// The webhook's name.
        hook: String,
        /// The timeout as written.
        timeout: String,
    },
    /// The receiver answered with a status that is neither success nor retryable.
    #[error(
        "webhook {hook}: POST {url} answered {status}{}; only 200, 201 and 202 count as success",
        if body.is_empty() { String::new() } else { format!(": {body}") }
    )]
    Rejected {
        /// The webhook's name.
        hook: String,
        /// The URL called.
        url: String,
        /// The status received.
        status: StatusCode,
        /// The start of the response body, trimmed.
        body: String,
    },
    /// Every attempt timed out, could not connect, or got a retryable status.
    #[error(
        "webhook {hook}: POST {url} giving up after {attempts} attempt(s): {last}{}",
        match last {
            AttemptFailure::Timeout(_) => "; make the hook answer sooner or raise spec.analysis.webhooks[].timeout",
            AttemptFailure::Transport(_) => "; check that the URL is reachable from the operator",
            AttemptFailure::Status(_) => "; the hook is failing, or raise spec.analysis.webhooks[].retries",
            AttemptFailure::CallLimit(_) => "; lower spec.analysis.webhooks[].retries or timeout",
        }
    )]
    GaveUp {
        /// The webhook's name.
        hook: String,
        /// The URL called.
        url: String,
        /// How many attempts were made (`retries` + 1).
        attempts: u32,
        /// Why the last attempt failed.
        last: AttemptFailure,
    },
}

impl WebhookError {
    /// Whether the last attempt, or the call as a whole, ran out of time.
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            WebhookError::GaveUp {
                last: AttemptFailure::Timeout(_) | AttemptFailure::CallLimit(_),
                ..
            }
        )
    }

    /// The same error showing only the scheme and host of the URL called: for addresses that are
    /// themselves secrets (the operator's `--event-webhook`, chat services' webhook URLs).
    pub fn with_host_only(self) -> Self {
        match self {
            WebhookError::Rejected {
                hook,
                url,
                status,
                body,
            } => WebhookError::Rejected {
                hook,
                url: transport::host_only(&url),
                status,
                body,
            },
            WebhookError::GaveUp {
                hook,
                url,
                attempts,
                last,
            } => WebhookError::GaveUp {
                hook,
                url: transport::host_only(&url),
                attempts,
                last,
            },
            WebhookError::InvalidUrl { hook, .. } => WebhookError::InvalidUrl {
                hook,
                url: "(hidden)".into(),
            },
            other => other,
        }
    }
}

/// Why an alert could not be built or posted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AlertError {
    /// `spec.type` is not a known service.
    #[error(
        "AlertProvider {provider}: type {type_:?} is not supported; set spec.type to one of slack, msteams, discord, rocket, gchat"
    )]
    UnknownType {
        /// The AlertProvider's name.
        provider: String,
        /// The type as written.
        type_: String,
    },
    /// Neither `spec.address` nor the Secret's `address` key is set.
    #[error(
        "AlertProvider {provider}: no address; set spec.address, or spec.secretRef to a Secret with an \"address\" key"
    )]
    NoAddress {
        /// The AlertProvider's name.
        provider: String,
    },
    /// The address is not an absolute http(s) URL. The address itself is not shown: a chat
    /// service's webhook URL is a credential.
    #[error(
        "AlertProvider {provider}: the address in {source_field} is not an absolute URL; write the service's webhook URL, e.g. https://hooks.slack.com/services/..."
    )]
    InvalidAddress {
        /// The AlertProvider's name.
        provider: String,
        /// Where the address came from: `spec.address`, or the Secret's `address` key.
        source_field: String,
    },
    /// `spec.proxy` cannot be read (shown without its user and password).
    #[error(
        "AlertProvider {provider}: proxy {proxy:?} cannot be read; write http://host:port in spec.proxy"
    )]
    InvalidProxy {
        /// The AlertProvider's name.
        provider: String,
        /// The proxy as written.
        proxy: String,
    },
    /// The POST failed, timed out, or got a non-2xx answer.
    #[error(
        "AlertProvider {provider}: POST {url} failed: {reason}; check the address and that the service accepts the message"
    )]
    PostFailed {
        /// The AlertProvider's name.
        provider: String,
        /// The scheme and host posted to; the rest of a chat webhook URL is a credential.
        url: String,
        /// What went wrong.
        reason: String,
    },
}
