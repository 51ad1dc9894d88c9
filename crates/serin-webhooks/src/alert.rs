//! Alert notifiers: one payload shape per chat service (Slack, Microsoft Teams, Discord, Rocket.Chat,
//! Google Chat), the severity filter of a Canary's `alerts`, and the fields Flagger attaches.

use crate::transport::{PostError, trimmed_body};
use crate::{AlertError, WebhookClient};
use reqwest::Url;
use serde_json::{Value, json};
use serin_api::{AlertProviderSpec, Canary, CanaryAlert};
use serin_core::Severity;
use std::time::Duration;

/// How long one notification may take (Flagger's 5s).
pub const ALERT_TIMEOUT: Duration = Duration::from_secs(5);

/// Channel used when an AlertProvider names none.
pub const DEFAULT_CHANNEL: &str = "general";

/// Sender name used when an AlertProvider names none.
pub const DEFAULT_USERNAME: &str = "serin";

/// The chat service an AlertProvider posts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// Slack incoming webhook.
    Slack,
    /// Microsoft Teams incoming webhook (MessageCard).
    MsTeams,
    /// Discord, through its Slack-compatible endpoint (`<address>/slack`).
    Discord,
    /// Rocket.Chat incoming webhook (Slack-style attachments).
    Rocket,
    /// Google Chat incoming webhook (cards).
    GChat,
}

impl ProviderKind {
    /// Reads `spec.type`.
    pub fn parse(text: &str) -> Option<ProviderKind> {
        Some(match text {
            "slack" => ProviderKind::Slack,
            "msteams" => ProviderKind::MsTeams,
            "discord" => ProviderKind::Discord,
            "rocket" => ProviderKind::Rocket,
            "gchat" => ProviderKind::GChat,
            _ => return None,
        })
    }
}

/// One name/value line attached to an alert (`Target`, `Traffic routing`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The label.
    pub name: String,
    /// The value.
    pub value: String,
}

impl Field {
    fn new(name: &str, value: impl Into<String>) -> Field {
        Field {
            name: name.to_string(),
            value: value.into(),
        }
    }
}

/// An alert ready to post: which canary, the text, how serious, and extra fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertMessage {
    /// The Canary's name.
    pub canary: String,
    /// The Canary's namespace.
    pub namespace: String,
    /// The text, e.g. `Canary is waiting for approval.`.
    pub text: String,
    /// How serious it is; `Error` turns the message red.
    pub severity: Severity,
    /// Fields shown under the text.
    pub fields: Vec<Field>,
}

impl AlertMessage {
    /// Builds the message for one of the decision core's alerts; `cluster` is the operator's
    /// cluster name, shown as the `Cluster` field when set.
    pub fn from_alert(canary: &Canary, alert: &serin_core::Alert, cluster: Option<&str>) -> Self {
        AlertMessage {
            canary: canary.metadata.name.clone().unwrap_or_default(),
            namespace: canary.metadata.namespace.clone().unwrap_or_default(),
            text: alert.message.clone(),
            severity: alert.severity,
            fields: alert_fields(canary, cluster, alert.with_metadata),
        }
    }
}

/// The fields Flagger attaches: `Cluster` when named, and with `with_metadata` also `Target`,
/// `Failed checks threshold`, `Progress deadline` and `Traffic routing`.
pub fn alert_fields(canary: &Canary, cluster: Option<&str>, with_metadata: bool) -> Vec<Field> {
    let mut fields = Vec::new();
    if let Some(cluster) = cluster.filter(|c| !c.is_empty()) {
        fields.push(Field::new("Cluster", cluster));
    }
    if !with_metadata {
        return fields;
    }
    let spec = &canary.spec;
    let kind = if spec.target_ref.kind.is_empty() {
        "Deployment"
    } else {
        &spec.target_ref.kind
    };
    fields.push(Field::new(
        "Target",
        format!(
            "{kind}/{}.{}",
            spec.target_ref.name,
            canary.metadata.namespace.as_deref().unwrap_or_default()
        ),
    ));
    let analysis = spec.analysis();
    fields.push(Field::new(
        "Failed checks threshold",
        analysis.map(|a| a.threshold()).unwrap_or(1).to_string(),
    ));
    fields.push(Field::new(
        "Progress deadline",
        format!("{}s", spec.progress_deadline_seconds()),
    ));
    if let Some(analysis) = analysis {
        let max_weight = analysis.max_weight.unwrap_or(0);
        let step_weights = analysis.step_weights.as_deref().unwrap_or(&[]);
        let routing = if analysis.step_weight.unwrap_or(0) > 0 {
            Some(format!(
                "Weight step: {} max: {max_weight}",
                analysis.step_weight.unwrap_or(0)
            ))
        } else if !step_weights.is_empty() {
            let steps: Vec<String> = step_weights.iter().map(|w| w.to_string()).collect();
            Some(format!(
                "Weight steps: {} max: {max_weight}",
                steps.join(",")
            ))
        } else if analysis.r#match.as_ref().is_some_and(|m| !m.is_empty()) {
            Some("A/B Testing".to_string())
        } else if analysis.iterations() > 0 {
            Some("Blue/Green".to_string())
        } else if !analysis.steps().is_empty() {
            // Serin's explicit steps have no Flagger wording; name the count.
            Some(format!("Steps: {}", analysis.steps().len()))
        } else {
            None
        };
        if let Some(routing) = routing {
            fields.push(Field::new("Traffic routing", routing));
        }
    }
    fields
}

/// Whether an alert entry with `alert_severity` receives a message of `severity`: `info` gets
/// everything, `warn` gets warn and error, `error` only error. An empty or unknown severity gets
/// nothing, as in Flagger's code (its docs claim a default of info).
pub fn severity_accepts(alert_severity: Option<&str>, severity: Severity) -> bool {
    let threshold = match alert_severity.unwrap_or("") {
        "info" => Severity::Info,
        "warn" => Severity::Warn,
        "error" => Severity::Error,
        _ => return false,
    };
    severity >= threshold
}

/// The canary's `alerts` entries that receive a message of `severity`.
pub fn recipients(canary: &Canary, severity: Severity) -> Vec<&CanaryAlert> {
    canary
        .spec
        .analysis()
        .and_then(|a| a.alerts.as_deref())
        .unwrap_or(&[])
        .iter()
        .filter(|alert| severity_accepts(alert.severity.as_deref(), severity))
        .collect()
}

/// An AlertProvider with its address resolved, ready to post to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notifier {
    /// The AlertProvider's name (for error messages).
    pub provider: String,
    /// The chat service.
    pub kind: ProviderKind,
    /// The webhook URL: `spec.address`, or the Secret's `address` key.
    pub address: String,
    /// Channel (Slack, Discord, Rocket.Chat).
    pub channel: String,
    /// Sender name (Slack, Discord, Rocket.Chat).
    pub username: String,
    /// `spec.proxy` (`http://host:port`, or `host:port`), if set.
    pub proxy: Option<String>,
    /// The Secret's `token` key, sent as `Authorization: Bearer <token>`.
    pub token: Option<String>,
}

impl Notifier {
    /// Builds a notifier from an AlertProvider's spec. `secret_address` and `secret_token` are the
    /// `address` and `token` keys of `spec.secretRef`'s Secret, already read by the caller; a
    /// Secret address overrides `spec.address`.
    pub fn from_provider(
        provider: &str,
        spec: &AlertProviderSpec,
        secret_address: Option<&str>,
        secret_token: Option<&str>,
    ) -> Result<Notifier, AlertError> {
        let kind = ProviderKind::parse(&spec.type_).ok_or_else(|| AlertError::UnknownType {
            provider: provider.to_string(),
            type_: spec.type_.clone(),
        })?;
        let address = secret_address
            .or(spec.address.as_deref())
            .filter(|a| !a.is_empty())
            .ok_or_else(|| AlertError::NoAddress {
                provider: provider.to_string(),
            })?;
        let usable = Url::parse(address)
            .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some());
        if !usable {
            let source_field = match secret_address.filter(|a| !a.is_empty()) {
                Some(_) => "the Secret's address key",
                None => "spec.address",
            };
            return Err(AlertError::InvalidAddress {
                provider: provider.to_string(),
                source_field: source_field.into(),
            });
        }
        let proxy = match spec.proxy.as_deref().filter(|p| !p.is_empty()) {
            Some(proxy) if reqwest::Proxy::all(proxy).is_ok() => Some(proxy.to_string()),
            Some(proxy) => {
                return Err(AlertError::InvalidProxy {
                    provider: provider.to_string(),
                    proxy: crate::transport::without_credentials(proxy),
                });
            }
            None => None,
        };
        let non_empty = |value: Option<&String>, default: &str| {
            value
                .filter(|v| !v.is_empty())
                .cloned()
                .unwrap_or_else(|| default.to_string())
        };
        Ok(Notifier {
            provider: provider.to_string(),
            kind,
            address: address.to_string(),
            channel: non_empty(spec.channel.as_ref(), DEFAULT_CHANNEL),
            username: non_empty(spec.username.as_ref(), DEFAULT_USERNAME),
            proxy,
            token: secret_token.filter(|t| !t.is_empty()).map(str::to_string),
        })
    }

    /// Where the message is POSTed: the address, with `/slack` appended for Discord.
    pub fn post_url(&self) -> String {
        match self.kind {
            ProviderKind::Discord => format!("{}/slack", self.address.trim_end_matches('/')),
            _ => self.address.clone(),
        }
    }

    /// The JSON body for `message` in this service's format.
    pub fn payload(&self, message: &AlertMessage) -> Value {
        let subject = format!("{}.{}", message.canary, message.namespace);
        let error = message.severity == Severity::Error;
        match self.kind {
            ProviderKind::Slack | ProviderKind::Discord | ProviderKind::Rocket => {
                let color = match (self.kind, error) {
                    (ProviderKind::Rocket, false) => "#0076D7",
                    (ProviderKind::Rocket, true) => "#FF0000",
                    (_, false) => "good",
                    (_, true) => "danger",
                };
                let fields: Vec<Value> = message
                    .fields
                    .iter()
                    .map(|f| json!({"title": f.name, "value": f.value, "short": false}))
                    .collect();
                json!({
                    "channel": self.channel,
                    "username": self.username,
                    "icon_emoji": ":rocket:",
                    "attachments": [{
                        "color": color,
                        "author_name": subject,
                        "text": message.text,
                        "mrkdwn_in": ["text"],
                        "fields": fields,
                    }],
                })
            }
            ProviderKind::MsTeams => {
                let facts: Vec<Value> = message
                    .fields
                    .iter()
                    .map(|f| json!({"name": f.name, "value": f.value}))
                    .collect();
                json!({
                    "@type": "MessageCard",
                    "@context": "http://schema.org/extensions",
                    "themeColor": if error { "FF0000" } else { "0076D7" },
                    "summary": subject,
                    "sections": [{
                        "activityTitle": message.text,
                        "activitySubtitle": subject,
                        "facts": facts,
                    }],
                })
            }
            ProviderKind::GChat => {
                let paragraph =
                    |text: String| json!({"widgets": [{"textParagraph": {"text": text}}]});
                let mut sections = vec![paragraph(format!(
                    "<font color=#848484><strong>{}</strong></font>",
                    message.text
                ))];
                sections.extend(message.fields.iter().map(|f| {
                    paragraph(format!(
                        "{}<br><font color=#848484><strong>{}</strong></font>",
                        f.name, f.value
                    ))
                }));
                json!({
                    "cards": [{
                        "header": {"title": "Serin", "subtitle": subject},
                        "sections": sections,
                    }],
                })
            }
        }
    }
}

impl WebhookClient {
    /// POSTs `message` through `notifier` within 5s; any status outside 2xx is an error.
    pub async fn post_alert(
        &self,
        notifier: &Notifier,
        message: &AlertMessage,
    ) -> Result<(), AlertError> {
        let url_text = notifier.post_url();
        let url = Url::parse(&url_text).map_err(|_| AlertError::InvalidAddress {
            provider: notifier.provider.clone(),
            source_field: "the provider's address".into(),
        })?;
        let sent = self
            .transport
            .post(
                &url,
                &notifier.payload(message),
                notifier.token.as_deref(),
                ALERT_TIMEOUT,
                true,
                notifier.proxy.as_deref(),
            )
            .await;
        let failed = |reason: String| AlertError::PostFailed {
            provider: notifier.provider.clone(),
            url: crate::transport::host_only(&url_text),
            reason,
        };
        match sent {
            Err(PostError::Timeout) => Err(failed(format!(
                "no answer within {}s",
                ALERT_TIMEOUT.as_secs()
            ))),
            Err(PostError::Transport(error)) => Err(failed(error)),
            Ok(response) if response.status.is_success() => Ok(()),
            Ok(response) => Err(failed(format!(
                "answered {}: {}",
                response.status,
                trimmed_body(&response.body, crate::hook::BODY_EXCERPT_CHARS)
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severity_filter_follows_flagger_code() {
        use Severity::*;
        let cases = [
            (Some("info"), [true, true, true]),
            (Some("warn"), [false, true, true]),
            (Some("error"), [false, false, true]),
            (Some(""), [false, false, false]),
            (None, [false, false, false]),
        ];
        for (alert, expected) in cases {
            let got = [Info, Warn, Error].map(|s| severity_accepts(alert, s));
            assert_eq!(got, expected, "alert severity {alert:?}");
        }
    }

    #[test]
    fn notifier_defaults_and_secret_address_win() {
        let spec = AlertProviderSpec {
            type_: "discord".into(),
            address: Some("https://discord.example/api/webhooks/1".into()),
            ..AlertProviderSpec::default()
        };
        let n =
            Notifier::from_provider("chat", &spec, Some("http://127.0.0.1:1/hook/"), Some("t0k"))
                .unwrap();
        assert_eq!(n.address, "http://127.0.0.1:1/hook/");
        assert_eq!(n.post_url(), "http://127.0.0.1:1/hook/slack");
        assert_eq!(
            (n.channel.as_str(), n.username.as_str()),
            ("general", "serin")
        );
        assert_eq!(n.token.as_deref(), Some("t0k"));
    }

    #[test]
    fn notifier_errors_name_the_provider_and_the_fix() {
        let mut spec = AlertProviderSpec {
            type_: "pagerduty".into(),
            ..AlertProviderSpec::default()
        };
        let error = Notifier::from_provider("ops", &spec, None, None)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("ops")
                && error.contains("pagerduty")
                && error.contains("slack, msteams"),
            "{error}"
        );
        spec.type_ = "slack".into();
        let error = Notifier::from_provider("ops", &spec, None, None)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("ops") && error.contains("spec.address"),
            "{error}"
        );
        spec.address = Some("hooks.slack.com/x".into());
        let error = Notifier::from_provider("ops", &spec, None, None)
            .unwrap_err()
            .to_string();
        // The address is a credential: the message says where it is, not what it is.
        assert!(
            error.contains("the address in spec.address")
                && error.contains("https://")
                && !error.contains("hooks.slack.com/x"),
            "{error}"
        );
    }
}
