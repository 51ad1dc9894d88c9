//! Webhook calls against real receivers on 127.0.0.1: payloads, the success rule, timeouts,
//! retries, gates through the load tester, proxies, and https with and without `disableTLS`.

mod common;

use common::{Receiver, canary, payload};
use serde_json::json;
use serin_api::{CanaryWebhook, HookType, Phase};
use serin_core::{Check, Event, EventType, Outcome};
use serin_webhooks::{
    ClientOptions, Gate, HookPayload, WebhookClient, WebhookError, canary_checksum,
    signals_rollback,
};
use std::time::{Duration, Instant};

fn client() -> WebhookClient {
    WebhookClient::new(ClientOptions {
        retry_wait_min: Duration::from_millis(20),
        retry_wait_max: Duration::from_millis(100),
        ..ClientOptions::direct()
    })
}

fn hook(name: &str, url: String) -> CanaryWebhook {
    CanaryWebhook {
        name: name.into(),
        url,
        ..CanaryWebhook::default()
    }
}

#[tokio::test]
async fn every_hook_type_posts_flaggers_payload_with_the_phase_the_core_asks_for() {
    let receiver = Receiver::start(200, "ok").await;
    let types = [
        ("confirm-rollout", Phase::Waiting),
        ("pre-rollout", Phase::Progressing),
        ("rollout", Phase::Progressing),
        ("confirm-traffic-increase", Phase::Progressing),
        ("confirm-promotion", Phase::Progressing),
        ("rollback", Phase::WaitingPromotion),
    ];
    let webhooks: Vec<_> = types
        .iter()
        .map(|(t, _)| {
            json!({"name": format!("{t}-hook"), "type": t, "url": receiver.url(&format!("/{t}")),
                   "metadata": {"cmd": "hey -z 1m http://podinfo.test:9898/", "type": "cmd"}})
        })
        .collect();
    let canary = canary(json!({"interval": "1m", "webhooks": webhooks}));
    let expected_checksum = canary_checksum(canary.status.as_ref());
    for (hook_type, phase) in types {
        let check = Check::Hook {
            name: format!("{hook_type}-hook"),
            hook_type: HookType::parse(hook_type).unwrap(),
            phase,
        };
        let verdict = client()
            .run_check(&canary, &check)
            .await
            .expect("a hook check");
        assert_eq!(verdict.check, check);
        assert_eq!(verdict.outcome, Outcome::Hook(Ok(())), "{hook_type}");
        let request = receiver.last();
        assert_eq!(request.path, format!("/{hook_type}"));
        assert_eq!(request.content_type.as_deref(), Some("application/json"));
        assert_eq!(
            request.json(),
            json!({
                "name": "podinfo",
                "namespace": "test",
                "phase": phase.as_str(),
                "checksum": expected_checksum,
                "metadata": {"cmd": "hey -z 1m http://podinfo.test:9898/", "type": "cmd"},
            }),
            "{hook_type}"
        );
    }
    assert_eq!(receiver.seen().len(), types.len());
}

#[tokio::test]
async fn a_hook_without_metadata_sends_no_metadata_key_and_the_untyped_hook_is_a_rollout() {
    let receiver = Receiver::start(202, "").await;
    let canary = canary(json!({"webhooks": [{"name": "plain", "url": receiver.url("/")}]}));
    let check = Check::Hook {
        name: "plain".into(),
        hook_type: HookType::Rollout,
        phase: Phase::Progressing,
    };
    let verdict = client().run_check(&canary, &check).await.unwrap();
    assert_eq!(verdict.outcome, Outcome::Hook(Ok(())));
    let body = receiver.last().json();
    assert_eq!(body.as_object().unwrap().len(), 4, "{body}");
    assert!(body.get("metadata").is_none());
}

#[tokio::test]
async fn post_rollout_hooks_run_in_order_and_stop_at_the_first_failure() {
    let good = Receiver::start(200, "").await;
    let bad = Receiver::start(400, "bad").await;
    let canary = canary(json!({"webhooks": [
        {"name": "first", "type": "post-rollout", "url": good.url("/first")},
        {"name": "second", "type": "post-rollout", "url": bad.url("/second")},
        {"name": "third", "type": "post-rollout", "url": good.url("/third")},
        {"name": "gate", "type": "confirm-rollout", "url": good.url("/gate")},
    ]}));
    let runs = client()
        .notify_hooks(&canary, HookType::PostRollout, Phase::Succeeded)
        .await;
    let names: Vec<_> = runs.iter().map(|r| r.hook.as_str()).collect();
    assert_eq!(names, ["first", "second"]);
    assert!(runs[0].result.is_ok() && runs[1].result.is_err());
    let paths: Vec<_> = good.seen().iter().map(|c| c.path.clone()).collect();
    assert_eq!(paths, ["/first"]);
    assert_eq!(good.last().json()["phase"], "Succeeded");
}

#[tokio::test]
async fn event_hooks_get_the_event_in_metadata_and_keep_their_own_non_colliding_keys() {
    let receiver = Receiver::start(200, "").await;
    let canary = canary(json!({"webhooks": [
        {"name": "events", "type": "event", "url": receiver.url("/events"),
         "metadata": {"team": "web", "eventType": "overridden"}},
        {"name": "load", "type": "rollout", "url": receiver.url("/load")},
    ]}));
    let event = Event {
        type_: EventType::Warning,
        reason: "Synced",
        message: "Halt podinfo.test advancement waiting for approval gate".into(),
    };
    let runs = client()
        .send_event(
            &canary,
            &event,
            1_700_000_000_123,
            Some("http://127.0.0.1:9/unused"),
        )
        .await;
    assert_eq!(runs.len(), 1);
    assert!(runs[0].result.is_ok());
    let request = receiver.last();
    assert_eq!(request.path, "/events");
    let body = request.json();
    assert_eq!(body["phase"], "Progressing");
    assert_eq!(
        body["metadata"],
        json!({
            "eventMessage": "Halt podinfo.test advancement waiting for approval gate",
            "eventType": "Warning",
            "timestamp": "1700000000123",
            "team": "web",
        })
    );
}

#[tokio::test]
async fn without_event_hooks_the_operators_event_webhook_is_called() {
    let receiver = Receiver::start(200, "").await;
    let canary = canary(json!({"webhooks": []}));
    let event = Event {
        type_: EventType::Normal,
        reason: "Synced",
        message: "Advance podinfo.test canary weight 10".into(),
    };
    let url = receiver.url("/global");
    let runs = client().send_event(&canary, &event, 5, Some(&url)).await;
    assert_eq!(runs.len(), 1);
    let body = receiver.last().json();
    assert_eq!(body["metadata"]["eventType"], "Normal");
    assert_eq!(
        body["metadata"]["eventMessage"],
        "Advance podinfo.test canary weight 10"
    );
    assert!(
        client()
            .send_event(&canary, &event, 5, None)
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn the_operators_event_webhook_url_is_shown_by_its_host_only() {
    // The operator's --event-webhook comes from a Secret: a failure names its host, not its path.
    let receiver = Receiver::start(500, "down").await;
    let canary = canary(json!({"webhooks": []}));
    let event = Event {
        type_: EventType::Normal,
        reason: "Synced",
        message: "Advance podinfo.test canary weight 10".into(),
    };
    let url = receiver.url("/hooks/T0SECRET?token=SECRETTOKEN");
    let runs = client().send_event(&canary, &event, 5, Some(&url)).await;
    let error = runs[0].result.as_ref().unwrap_err().to_string();
    assert!(
        error.contains(&format!("http://{}/…", receiver.address)),
        "{error}"
    );
    assert!(!error.contains("SECRET"), "{error}");
    // A Canary's own hook keeps its path, without the query where tokens travel.
    let error = client()
        .call(&hook("gate", url.clone()), &payload())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&format!("http://{}/hooks/T0SECRET?…", receiver.address)),
        "{error}"
    );
    assert!(!error.contains("SECRETTOKEN"), "{error}");
}

#[tokio::test]
async fn an_answer_of_1_mib_is_read_and_one_byte_more_is_refused() {
    let limit = serin_api::limits::MAX_WEBHOOK_ANSWER_BYTES;
    let at_limit = Receiver::start(200, &"a".repeat(limit)).await;
    let response = client()
        .call(&hook("big", at_limit.url("/")), &payload())
        .await
        .unwrap();
    assert_eq!(response.body.len(), limit);
    let over = Receiver::start(200, &"a".repeat(limit + 1)).await;
    let error = client()
        .call(&hook("big", over.url("/")), &payload())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&format!("longer than {limit} bytes")),
        "{error}"
    );
}

#[tokio::test]
async fn retries_of_a_silent_hook_stop_at_the_call_limit() {
    let receiver = Receiver::scripted(&[], 200, "", Duration::from_secs(30)).await;
    let mut silent = hook("silent", receiver.url("/"));
    silent.timeout = Some("400ms".into());
    silent.retries = Some(100);
    let client = WebhookClient::new(ClientOptions {
        retry_wait_min: Duration::from_millis(20),
        retry_wait_max: Duration::from_millis(100),
        call_limit: Duration::from_millis(1500),
        ..ClientOptions::direct()
    });
    let started = Instant::now();
    let error = client.call(&silent, &payload()).await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(1400) && elapsed < Duration::from_millis(2500),
        "{elapsed:?}"
    );
    assert!(error.is_timeout(), "{error:?}");
    let text = error.to_string();
    assert!(
        text.contains("the call ran out of the 1s one webhook call may take")
            && text.contains("lower spec.analysis.webhooks[].retries or timeout"),
        "{text}"
    );
    let attempts = receiver.seen().len();
    assert!((3..=4).contains(&attempts), "{attempts} attempts");
}

#[tokio::test]
async fn only_200_201_and_202_succeed() {
    let payload = payload();
    for status in [200, 201, 202] {
        let receiver = Receiver::start(status, "fine").await;
        let response = client()
            .call(&hook("check", receiver.url("/")), &payload)
            .await
            .unwrap_or_else(|e| panic!("{status}: {e}"));
        assert_eq!(response.status.as_u16(), status);
        assert_eq!(response.attempts, 1);
    }
    for (status, body) in [
        (203, "partial"),
        (204, ""),
        (400, "metadata not found in payload"),
        (403, "Forbidden"),
        (501, "nope"),
    ] {
        let receiver = Receiver::start(status, body).await;
        let url = receiver.url("/hook");
        let error = client()
            .call(&hook("check", url.clone()), &payload)
            .await
            .unwrap_err();
        assert!(
            matches!(error, WebhookError::Rejected { .. }),
            "{status}: {error:?}"
        );
        let text = error.to_string();
        assert!(
            text.contains("webhook check") && text.contains(&url),
            "{text}"
        );
        assert!(
            text.contains(&status.to_string()) && text.contains(body),
            "{text}"
        );
        assert_eq!(receiver.seen().len(), 1, "{status} is not retried");
    }
}

#[tokio::test]
async fn a_5xx_without_retries_gives_up_after_one_attempt_like_flagger() {
    let receiver = Receiver::start(500, "stack trace").await;
    let url = receiver.url("/");
    let error = client()
        .call(&hook("load", url.clone()), &payload())
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "webhook load: POST {url} giving up after 1 attempt(s): unexpected HTTP status 500 Internal Server Error; the hook is failing, or raise spec.analysis.webhooks[].retries"
        )
    );
    assert_eq!(receiver.seen().len(), 1);
}

#[tokio::test]
async fn a_slow_hook_times_out_with_an_error_naming_it() {
    let receiver = Receiver::scripted(&[], 200, "", Duration::from_secs(5)).await;
    let mut slow = hook("slow-gate", receiver.url("/"));
    slow.timeout = Some("1s".into());
    let started = Instant::now();
    let error = client().call(&slow, &payload()).await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(error.is_timeout(), "{error:?}");
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(3),
        "{elapsed:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains("slow-gate")
            && text.contains("no answer within 1s")
            && text.contains("timeout"),
        "{text}"
    );
}

#[tokio::test]
async fn a_gate_that_gives_no_answer_is_told_apart_from_a_gate_that_answers_closed() {
    let silent = Receiver::scripted(&[], 200, "", Duration::from_secs(5)).await;
    let closed = Receiver::scripted(&[], 403, "gate closed", Duration::ZERO).await;
    let canary = canary(json!({"webhooks": [
        {"name": "silent", "type": "confirm-promotion", "url": silent.url("/"), "timeout": "1s"},
        {"name": "closed", "type": "confirm-promotion", "url": closed.url("/")},
    ]}));
    let ask = |name: &str| Check::Hook {
        name: name.into(),
        hook_type: HookType::ConfirmPromotion,
        phase: Phase::Progressing,
    };
    let outcome = client()
        .run_check(&canary, &ask("silent"))
        .await
        .unwrap()
        .outcome;
    let Outcome::HookUnanswered(message) = outcome else {
        panic!("a hook that times out gave no answer: {outcome:?}")
    };
    assert!(message.contains("no answer within 1s"), "{message}");
    let outcome = client()
        .run_check(&canary, &ask("closed"))
        .await
        .unwrap()
        .outcome;
    assert!(
        matches!(&outcome, Outcome::Hook(Err(m)) if m.contains("403")),
        "a 403 is an answer: the gate is closed: {outcome:?}"
    );
}

#[tokio::test]
async fn retries_try_again_on_retryable_statuses_until_one_succeeds() {
    let receiver =
        Receiver::scripted(&[(503, "busy"), (500, "oops")], 200, "done", Duration::ZERO).await;
    let mut flaky = hook("flaky", receiver.url("/"));
    flaky.retries = Some(2);
    let response = client().call(&flaky, &payload()).await.unwrap();
    assert_eq!(response.attempts, 3);
    assert_eq!(&response.body[..], b"done");
    assert_eq!(receiver.seen().len(), 3);
    // Every attempt carries the same payload.
    let bodies: Vec<_> = receiver.seen().iter().map(|c| c.json()).collect();
    assert!(bodies.iter().all(|b| *b == bodies[0]));
}

#[tokio::test]
async fn retries_run_out_with_the_last_status_in_the_error() {
    let receiver = Receiver::scripted(&[(500, ""), (429, "")], 503, "", Duration::ZERO).await;
    let mut flaky = hook("flaky", receiver.url("/"));
    flaky.retries = Some(2);
    let error = client().call(&flaky, &payload()).await.unwrap_err();
    assert!(
        error.to_string().contains(
            "giving up after 3 attempt(s): unexpected HTTP status 503 Service Unavailable"
        ),
        "{error}"
    );
    assert_eq!(receiver.seen().len(), 3);
}

#[tokio::test]
async fn a_refused_connection_is_retried_and_reported_with_the_url() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    drop(listener);
    let mut gone = hook("gone", url.clone());
    gone.retries = Some(1);
    let error = client().call(&gone, &payload()).await.unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("gone")
            && text.contains(&url)
            && text.contains("giving up after 2 attempt(s)"),
        "{text}"
    );
    assert!(text.contains("cannot connect"), "{text}");
}

#[tokio::test]
async fn a_closed_connection_or_a_garbage_answer_is_retried_and_reported_with_the_hook() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let garbage: &[u8] = b"\x00\x01 this is not HTTP\r\n\r\n";
    for (name, reply) in [("closes", &b""[..]), ("garbage", garbage)] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = accepted.clone();
        let reply = reply.to_vec();
        let server = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request).await;
                let _ = stream.write_all(&reply).await;
            }
        });
        let mut broken = hook(name, url.clone());
        broken.retries = Some(1);
        broken.timeout = Some("2s".into());
        let started = Instant::now();
        let error = client().call(&broken, &payload()).await.unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains(name)
                && text.contains(&url)
                && text.contains("giving up after 2 attempt(s)"),
            "{text}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{name}: {:?}",
            started.elapsed()
        );
        assert_eq!(
            accepted.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "{name}: one retry"
        );
        server.abort();
    }
}

#[tokio::test]
async fn bad_urls_and_timeouts_name_the_field_to_fix() {
    let error = client()
        .call(&hook("x", "podinfo.test/".into()), &payload())
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("spec.analysis.webhooks[].url"),
        "{error}"
    );
    let mut bad_timeout = hook("y", "http://127.0.0.1:9/".into());
    bad_timeout.timeout = Some("10 seconds".into());
    let error = client().call(&bad_timeout, &payload()).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("spec.analysis.webhooks[].timeout"),
        "{error}"
    );
}

#[tokio::test]
async fn confirm_rollout_through_the_load_tester_halts_until_the_gate_is_opened() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tester = serin_loadtester::Server::start(
        listener,
        serin_loadtester::Options {
            proxy: serin_loadtester::proxy::ProxyConfig::direct(),
            ..serin_loadtester::Options::default()
        },
    )
    .unwrap();
    let canary = canary(json!({"webhooks": [
        {"name": "approval", "type": "confirm-rollout", "url": format!("{}/gate/check", tester.url())},
        {"name": "abort", "type": "rollback", "url": format!("{}/rollback/check", tester.url())},
    ]}));
    let gate = &canary
        .spec
        .analysis
        .as_ref()
        .unwrap()
        .webhooks
        .as_ref()
        .unwrap()[0];
    let rollback = &canary
        .spec
        .analysis
        .as_ref()
        .unwrap()
        .webhooks
        .as_ref()
        .unwrap()[1];
    let client = client();
    let ask = || HookPayload::for_hook(&canary, gate, Phase::Waiting);

    let halted = Gate::from_result(client.call(gate, &ask()).await);
    let Gate::Halted(reason) = &halted else {
        panic!("the gate starts closed")
    };
    assert!(
        reason.to_string().contains("403") && reason.to_string().contains("Forbidden"),
        "{reason}"
    );
    let check = Check::Hook {
        name: "approval".into(),
        hook_type: HookType::ConfirmRollout,
        phase: Phase::Waiting,
    };
    assert!(matches!(
        client.run_check(&canary, &check).await.unwrap().outcome,
        Outcome::Hook(Err(_))
    ));

    // The load tester's gate API takes the same payload, so the client can open it.
    let opener = hook("open", format!("{}/gate/open", tester.url()));
    assert_eq!(
        client.call(&opener, &ask()).await.unwrap().status.as_u16(),
        202
    );

    assert!(Gate::from_result(client.call(gate, &ask()).await).is_approved());
    assert_eq!(
        client.run_check(&canary, &check).await.unwrap().outcome,
        Outcome::Hook(Ok(()))
    );

    let rollback_payload = HookPayload::for_hook(&canary, rollback, Phase::Progressing);
    assert!(!signals_rollback(
        &client.call(rollback, &rollback_payload).await
    ));
    let open_rollback = hook("open", format!("{}/rollback/open", tester.url()));
    client
        .call(&open_rollback, &rollback_payload)
        .await
        .unwrap();
    assert!(signals_rollback(
        &client.call(rollback, &rollback_payload).await
    ));
    tester.stop().await;
}

#[tokio::test]
async fn http_proxy_gets_absolute_form_requests_and_no_proxy_hosts_are_called_directly() {
    let proxy = Receiver::start(200, "via proxy").await;
    let direct = Receiver::start(200, "direct").await;
    let options = ClientOptions::through(
        &format!("http://{}", proxy.address),
        "localhost,127.0.0.0/8",
    )
    .unwrap();
    let client = WebhookClient::new(options);

    // A mesh name only the proxy can resolve.
    let meshed = hook(
        "load",
        "http://flagger-loadtester.test/gate/check?x=1".into(),
    );
    let response = client.call(&meshed, &payload()).await.unwrap();
    assert_eq!(&response.body[..], b"via proxy");
    let seen = proxy.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].target,
        "http://flagger-loadtester.test/gate/check?x=1"
    );
    assert_eq!(seen[0].json()["name"], "podinfo");

    let local = hook("local", direct.url("/hook"));
    let response = client.call(&local, &payload()).await.unwrap();
    assert_eq!(&response.body[..], b"direct");
    assert_eq!(
        direct.last().target,
        "/hook",
        "origin-form when not proxied"
    );
    assert_eq!(
        proxy.seen().len(),
        1,
        "NO_PROXY kept the loopback call off the proxy"
    );
}

#[tokio::test]
async fn an_https_hook_with_a_self_signed_certificate_fails_verification_and_names_the_problem() {
    let receiver = Receiver::start_tls(200, "ok").await;
    let url = receiver.https_url("/gate");
    let error = client()
        .call(&hook("secure", url.clone()), &payload())
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("webhook secure")
            && text.contains(&url)
            && text.contains(&format!(
                "the certificate of {} is not trusted: invalid peer certificate",
                receiver.address
            )),
        "{text}"
    );
    assert!(
        receiver.seen().is_empty(),
        "no request crossed the TLS handshake"
    );
}

#[tokio::test]
async fn disable_tls_skips_certificate_verification_for_that_hook_only() {
    let receiver = Receiver::start_tls(202, "accepted").await;
    let client = client();
    let mut insecure = hook("insecure", receiver.https_url("/gate"));
    insecure.disable_tls = Some(true);
    let response = client.call(&insecure, &payload()).await.unwrap();
    assert_eq!(response.status.as_u16(), 202);
    assert_eq!(&response.body[..], b"accepted");
    let request = receiver.last();
    assert_eq!(request.path, "/gate");
    assert_eq!(request.content_type.as_deref(), Some("application/json"));
    assert_eq!(request.body, serde_json::to_vec(&payload()).unwrap());

    // The same client still verifies the hooks that do not opt out.
    let verified = hook("verified", receiver.https_url("/gate"));
    assert!(client.call(&verified, &payload()).await.is_err());
    assert_eq!(receiver.seen().len(), 1);
}
