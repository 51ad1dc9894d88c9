//! Alert notifiers against real receivers on 127.0.0.1: each service's JSON body, Discord's `/slack`
//! path, the bearer token, provider proxies, errors and the severity filter.

mod common;

use common::{Receiver, canary};
use serde_json::json;
use serin_api::AlertProviderSpec;
use serin_core::{Alert, Severity};
use serin_webhooks::{AlertMessage, ClientOptions, Notifier, WebhookClient, recipients};

fn provider(type_: &str, address: String) -> AlertProviderSpec {
    AlertProviderSpec {
        type_: type_.into(),
        address: Some(address),
        channel: Some("releases".into()),
        username: Some("serin-bot".into()),
        ..AlertProviderSpec::default()
    }
}

fn progressive() -> serin_api::Canary {
    canary(
        json!({"interval": "1m", "threshold": 5, "stepWeight": 10, "maxWeight": 30, "alerts": [
            {"name": "all", "severity": "info", "providerRef": {"name": "slack"}},
            {"name": "attention", "severity": "warn", "providerRef": {"name": "teams"}},
            {"name": "failures", "severity": "error", "providerRef": {"name": "pager"}},
            {"name": "unset", "providerRef": {"name": "quiet"}},
        ]}),
    )
}

fn message(severity: Severity, text: &str, with_metadata: bool) -> AlertMessage {
    let alert = Alert {
        severity,
        message: text.into(),
        with_metadata,
    };
    AlertMessage::from_alert(&progressive(), &alert, Some("prod-eu"))
}

async fn post(type_: &str, message: &AlertMessage) -> (Receiver, Notifier) {
    let receiver = Receiver::start(200, "ok").await;
    let notifier =
        Notifier::from_provider("chat", &provider(type_, receiver.url("/hook")), None, None)
            .unwrap();
    WebhookClient::new(ClientOptions::direct())
        .post_alert(&notifier, message)
        .await
        .unwrap();
    (receiver, notifier)
}

#[tokio::test]
async fn slack_gets_an_attachment_with_the_canary_fields_and_a_danger_color_for_errors() {
    let info = message(
        Severity::Info,
        "New revision detected, progressing canary analysis.",
        true,
    );
    let (receiver, _) = post("slack", &info).await;
    let request = receiver.last();
    assert_eq!(request.path, "/hook");
    assert_eq!(request.content_type.as_deref(), Some("application/json"));
    assert_eq!(
        request.json(),
        json!({
            "channel": "releases",
            "username": "serin-bot",
            "icon_emoji": ":rocket:",
            "attachments": [{
                "color": "good",
                "author_name": "podinfo.test",
                "text": "New revision detected, progressing canary analysis.",
                "mrkdwn_in": ["text"],
                "fields": [
                    {"title": "Cluster", "value": "prod-eu", "short": false},
                    {"title": "Target", "value": "Deployment/podinfo.test", "short": false},
                    {"title": "Failed checks threshold", "value": "5", "short": false},
                    {"title": "Progress deadline", "value": "600s", "short": false},
                    {"title": "Traffic routing", "value": "Weight step: 10 max: 30", "short": false},
                ],
            }],
        })
    );
    let error = message(Severity::Error, "Failed checks threshold reached 5", false);
    let (receiver, _) = post("slack", &error).await;
    let body = receiver.last().json();
    assert_eq!(body["attachments"][0]["color"], "danger");
    assert_eq!(
        body["attachments"][0]["fields"],
        json!([{"title": "Cluster", "value": "prod-eu", "short": false}])
    );
}

#[tokio::test]
async fn discord_posts_slack_format_to_the_slack_compatible_path() {
    let (receiver, _) = post(
        "discord",
        &message(Severity::Warn, "Canary is waiting for approval.", false),
    )
    .await;
    let request = receiver.last();
    assert_eq!(request.path, "/hook/slack");
    let body = request.json();
    assert_eq!(body["username"], "serin-bot");
    assert_eq!(body["attachments"][0]["color"], "good");
    assert_eq!(
        body["attachments"][0]["text"],
        "Canary is waiting for approval."
    );
}

#[tokio::test]
async fn rocket_uses_slack_attachments_with_its_own_colors() {
    let (receiver, _) = post("rocket", &message(Severity::Info, "done", false)).await;
    let body = receiver.last().json();
    assert_eq!(body["channel"], "releases");
    assert_eq!(body["attachments"][0]["color"], "#0076D7");
    assert_eq!(body["attachments"][0]["author_name"], "podinfo.test");
    let (receiver, _) = post("rocket", &message(Severity::Error, "failed", false)).await;
    assert_eq!(receiver.last().json()["attachments"][0]["color"], "#FF0000");
}

#[tokio::test]
async fn msteams_gets_a_message_card() {
    let (receiver, _) = post(
        "msteams",
        &message(Severity::Error, "Progress deadline exceeded", true),
    )
    .await;
    let body = receiver.last().json();
    assert_eq!(body["@type"], "MessageCard");
    assert_eq!(body["@context"], "http://schema.org/extensions");
    assert_eq!(body["themeColor"], "FF0000");
    assert_eq!(body["summary"], "podinfo.test");
    assert_eq!(
        body["sections"][0]["activityTitle"],
        "Progress deadline exceeded"
    );
    assert_eq!(body["sections"][0]["activitySubtitle"], "podinfo.test");
    assert_eq!(
        body["sections"][0]["facts"][4],
        json!({"name": "Traffic routing", "value": "Weight step: 10 max: 30"})
    );
    let (receiver, _) = post("msteams", &message(Severity::Info, "ok", false)).await;
    assert_eq!(receiver.last().json()["themeColor"], "0076D7");
}

#[tokio::test]
async fn gchat_gets_a_card_with_one_section_per_field() {
    let (receiver, _) = post(
        "gchat",
        &message(Severity::Info, "promotion finished", true),
    )
    .await;
    let body = receiver.last().json();
    let card = &body["cards"][0];
    assert_eq!(card["header"]["subtitle"], "podinfo.test");
    let sections = card["sections"].as_array().unwrap();
    assert_eq!(sections.len(), 6, "the text, then five fields");
    assert_eq!(
        sections[0]["widgets"][0]["textParagraph"]["text"],
        "<font color=#848484><strong>promotion finished</strong></font>"
    );
    assert_eq!(
        sections[2]["widgets"][0]["textParagraph"]["text"],
        "Target<br><font color=#848484><strong>Deployment/podinfo.test</strong></font>"
    );
}

#[tokio::test]
async fn a_secret_token_is_sent_as_a_bearer_header() {
    let receiver = Receiver::start(200, "").await;
    let spec = provider("slack", "https://hooks.slack.example/ignored".into());
    let notifier =
        Notifier::from_provider("chat", &spec, Some(&receiver.url("/s")), Some("xoxb-1")).unwrap();
    WebhookClient::new(ClientOptions::direct())
        .post_alert(&notifier, &message(Severity::Info, "hi", false))
        .await
        .unwrap();
    let request = receiver.last();
    assert_eq!(request.path, "/s");
    assert_eq!(request.authorization.as_deref(), Some("Bearer xoxb-1"));
}

#[tokio::test]
async fn a_providers_proxy_receives_the_post_in_absolute_form() {
    let proxy = Receiver::start(200, "").await;
    let mut spec = provider("slack", "http://hooks.chat.test/services/T0".into());
    spec.proxy = Some(format!("http://{}", proxy.address));
    let notifier = Notifier::from_provider("chat", &spec, None, None).unwrap();
    WebhookClient::new(ClientOptions::direct())
        .post_alert(&notifier, &message(Severity::Info, "hi", false))
        .await
        .unwrap();
    assert_eq!(proxy.last().target, "http://hooks.chat.test/services/T0");
}

#[tokio::test]
async fn a_failed_post_names_the_provider_host_status_and_body_but_not_the_secret_path() {
    let receiver = Receiver::start(404, "no_team").await;
    // A chat webhook URL is a credential: its path must not reach a log line or a status.
    let url = receiver.url("/services/T0SECRET/B0SECRET/XXSECRETXX");
    let notifier =
        Notifier::from_provider("team-chat", &provider("slack", url.clone()), None, None).unwrap();
    let error = WebhookClient::new(ClientOptions::direct())
        .post_alert(&notifier, &message(Severity::Info, "hi", false))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("team-chat")
            && error.contains(&format!("http://{}/…", receiver.address))
            && error.contains("404")
            && error.contains("no_team"),
        "{error}"
    );
    assert!(!error.contains("SECRET"), "{error}");
    // Unreachable: the transport's error must not name the URL either.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = closed.local_addr().unwrap();
    drop(closed);
    let unreachable = format!("http://{address}/services/T0SECRET");
    let notifier =
        Notifier::from_provider("team-chat", &provider("slack", unreachable), None, None).unwrap();
    let error = WebhookClient::new(ClientOptions::direct())
        .post_alert(&notifier, &message(Severity::Info, "hi", false))
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("cannot connect"), "{error}");
    assert!(!error.contains("SECRET"), "{error}");
}

#[test]
fn an_unusable_address_from_a_secret_is_not_quoted() {
    let error = Notifier::from_provider(
        "team-chat",
        &provider("slack", "https://hooks.slack.com/x".into()),
        Some("hooks.slack.com/services/T0SECRET"),
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("the Secret's address key"), "{error}");
    assert!(!error.contains("SECRET"), "{error}");
    let mut with_proxy = provider("slack", "https://hooks.slack.com/x".into());
    with_proxy.proxy = Some("http://user:pa55SECRET@proxy:3128 nonsense".into());
    let error = Notifier::from_provider("team-chat", &with_proxy, None, None)
        .unwrap_err()
        .to_string();
    assert!(!error.contains("pa55SECRET"), "{error}");
}

#[test]
fn alerts_receive_only_the_severities_they_asked_for() {
    let canary = progressive();
    let names = |severity| -> Vec<String> {
        recipients(&canary, severity)
            .into_iter()
            .map(|a| a.name.clone())
            .collect()
    };
    assert_eq!(names(Severity::Info), ["all"]);
    assert_eq!(names(Severity::Warn), ["all", "attention"]);
    assert_eq!(names(Severity::Error), ["all", "attention", "failures"]);
}

#[test]
fn traffic_routing_names_each_strategy() {
    let routing = |analysis: serde_json::Value| {
        let alert = Alert {
            severity: Severity::Info,
            message: String::new(),
            with_metadata: true,
        };
        AlertMessage::from_alert(&canary(analysis), &alert, None)
            .fields
            .into_iter()
            .find(|f| f.name == "Traffic routing")
            .map(|f| f.value)
    };
    assert_eq!(
        routing(json!({"stepWeights": [1, 2, 10, 80]})).as_deref(),
        Some("Weight steps: 1,2,10,80 max: 0")
    );
    assert_eq!(
        routing(
            json!({"iterations": 10, "match": [{"headers": {"x-canary": {"exact": "insider"}}}]})
        )
        .as_deref(),
        Some("A/B Testing")
    );
    assert_eq!(
        routing(json!({"iterations": 10})).as_deref(),
        Some("Blue/Green")
    );
}
