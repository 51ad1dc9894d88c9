//! `/metrics` request counters and fault injection.

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams, WatchParams};
use kube::{Client, Config};
use serde_json::json;
use serin_sandbox::instrument::FaultRule;
use serin_sandbox::{Sandbox, SandboxOptions};
use std::time::{Duration, Instant};

async fn start(faults: Vec<FaultRule>) -> (Sandbox, Client, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    // Frequent bookmarks let the server notice a client that went away (like a real one, only on a write).
    let bookmark_interval = Duration::from_millis(200);
    let options = SandboxOptions {
        faults,
        bookmark_interval,
        ..SandboxOptions::default()
    };
    let sandbox = Sandbox::start_with(dir.path(), options).await.unwrap();
    let client = Client::try_from(Config::new(sandbox.url.parse().unwrap())).unwrap();
    (sandbox, client, dir)
}

async fn metrics_text(client: &Client) -> String {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    client.request_text(request).await.unwrap()
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_by_verb_resource_and_code() {
    let (sandbox, client, _dir) = start(Vec::new()).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    for _ in 0..3 {
        cms.list(&Default::default()).await.unwrap();
    }
    cms.create(&PostParams::default(), &config_map("a"))
        .await
        .unwrap();
    assert!(cms.get("missing").await.is_err());
    let text = metrics_text(&client).await;
    assert!(
        text.contains(
            "sandbox_apiserver_request_total{verb=\"LIST\",resource=\"configmaps\",code=\"200\"} 3"
        ),
        "{text}"
    );
    assert!(text.contains("sandbox_apiserver_request_total{verb=\"CREATE\",resource=\"configmaps\",code=\"201\"} 1"), "{text}");
    assert!(
        text.contains(
            "sandbox_apiserver_request_total{verb=\"GET\",resource=\"configmaps\",code=\"404\"} 1"
        ),
        "{text}"
    );
    assert_eq!(sandbox.metrics.count("LIST", "configmaps"), 3);

    let before = sandbox.metrics.active_watches();
    let stream = cms.watch(&WatchParams::default(), "0").await.unwrap();
    let mut stream = stream.boxed();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.next()).await;
    assert_eq!(sandbox.metrics.active_watches(), before + 1);
    assert!(
        metrics_text(&client)
            .await
            .contains("sandbox_apiserver_watches_total 1")
    );
    drop(stream);
    for _ in 0..100 {
        if sandbox.metrics.active_watches() == before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        sandbox.metrics.active_watches(),
        before,
        "a closed watch is no longer counted"
    );
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_fail_delay_and_drop_what_they_match() {
    let always = FaultRule {
        verb: Some("LIST".into()),
        resource: Some("configmaps".into()),
        error_rate: 1.0,
        ..Default::default()
    };
    let (sandbox, client, _dir) = start(vec![always]).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    match cms.list(&Default::default()).await.unwrap_err() {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 500);
            assert!(
                status.message.contains("injected fault"),
                "{}",
                status.message
            );
        }
        other => panic!("{other}"),
    }
    cms.create(&PostParams::default(), &config_map("unaffected"))
        .await
        .unwrap();

    // Half the requests fail: over 200 attempts, clearly neither none nor all.
    sandbox.set_faults(vec![FaultRule {
        resource: Some("configmaps".into()),
        error_rate: 0.5,
        ..Default::default()
    }]);
    let mut failures = 0;
    for _ in 0..200 {
        if cms.get("unaffected").await.is_err() {
            failures += 1;
        }
    }
    assert!(
        (60..=140).contains(&failures),
        "{failures} of 200 failed at an error rate of 0.5"
    );

    sandbox.set_faults(vec![FaultRule {
        verb: Some("GET".into()),
        latency_ms: 300,
        ..Default::default()
    }]);
    let started = Instant::now();
    cms.get("unaffected").await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "the injected latency is added"
    );

    sandbox.set_faults(vec![FaultRule {
        verb: Some("WATCH".into()),
        watch_drop_after_ms: Some(200),
        ..Default::default()
    }]);
    let mut stream = cms
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while stream.next().await.is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the server closes the watch");

    // A watch resumed from a resourceVersion is told it expired; a fresh one is not.
    sandbox.set_faults(vec![FaultRule {
        verb: Some("WATCH".into()),
        expire_rate: 1.0,
        ..Default::default()
    }]);
    let listed = cms.list(&Default::default()).await.unwrap();
    let version = listed.metadata.resource_version.unwrap();
    let first = cms
        .watch(&WatchParams::default(), &version)
        .await
        .unwrap()
        .boxed()
        .next()
        .await;
    match first {
        Some(Ok(kube::api::WatchEvent::Error(status))) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"))
        }
        other => panic!("expected a 410 Expired event, got {other:?}"),
    }

    // A rule for one client leaves the others alone.
    sandbox.set_faults(vec![FaultRule {
        error_rate: 1.0,
        user_agent: Some("serin-operator".into()),
        ..Default::default()
    }]);
    cms.list(&Default::default()).await.unwrap();
    let mut config = kube::Config::new(sandbox.url.parse().unwrap());
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static("serin-operator/0.1.0 (test)"),
    ));
    let operator: Api<ConfigMap> = Api::default_namespaced(kube::Client::try_from(config).unwrap());
    assert!(operator.list(&Default::default()).await.is_err());

    sandbox.set_faults(Vec::new());
    cms.list(&Default::default()).await.unwrap();
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_change_at_run_time_over_http() {
    let (sandbox, client, _dir) = start(Vec::new()).await;
    let rules = json!([{"verb": "LIST", "resource": "pods", "errorRate": 1.0}]);
    let request = http::Request::put("/sandbox/faults")
        .body(serde_json::to_vec(&rules).unwrap())
        .unwrap();
    client.request_text(request).await.unwrap();
    assert_eq!(sandbox.faults.rules().len(), 1);
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::default_namespaced(client.clone());
    assert!(pods.list(&Default::default()).await.is_err());
    let bad = http::Request::put("/sandbox/faults")
        .body(b"{}".to_vec())
        .unwrap();
    assert!(
        client.request_text(bad).await.is_err(),
        "malformed rules are refused"
    );
    sandbox.stop().await;
}
