//! kube-rs against the sandbox: client CRUD, conflicts, status writes, server-side apply, a
//! Controller with the finalizer helper, the events Recorder, and a watcher that relists after a
//! compaction.

use crate::common::Kubectl;
use futures::StreamExt;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::watcher;
use kube::{Client, Config, Resource, ResourceExt};
use serde_json::json;
use serin_api::{Canary, Phase};
use serin_sandbox::Sandbox;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

async fn start() -> (Sandbox, Client, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::start(dir.path()).await.unwrap();
    let config = Config::new(sandbox.url.parse().unwrap());
    let client = Client::try_from(config).unwrap();
    (sandbox, client, dir)
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

fn status_code(error: kube::Error) -> u16 {
    match error {
        kube::Error::Api(status) => status.code,
        other => panic!("expected an API error, got {other}"),
    }
}

#[tokio::test]
async fn crud_conflicts_status_and_apply() {
    let (sandbox, client, _dir) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let created = cms
        .create(&PostParams::default(), &config_map("a"))
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    assert_eq!(
        status_code(
            cms.create(&PostParams::default(), &config_map("a"))
                .await
                .unwrap_err()
        ),
        409
    );

    let mut stale = created.clone();
    let mut fresh = cms.get("a").await.unwrap();
    fresh.data = Some([("k".to_string(), "v2".to_string())].into());
    let replaced = cms
        .replace("a", &PostParams::default(), &fresh)
        .await
        .unwrap();
    // Writing the same content again changes nothing, not even the resourceVersion.
    let again = cms
        .replace("a", &PostParams::default(), &replaced)
        .await
        .unwrap();
    assert_eq!(
        again.metadata.resource_version,
        replaced.metadata.resource_version
    );
    stale.data = Some([("k".to_string(), "v3".to_string())].into());
    assert_eq!(
        status_code(
            cms.replace("a", &PostParams::default(), &stale)
                .await
                .unwrap_err()
        ),
        409
    );

    // A kind no built-in controller writes, so the status seen is the test's own.
    let hpas: Api<HorizontalPodAutoscaler> = Api::default_namespaced(client.clone());
    let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
        "metadata": {"name": "podinfo"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo"},
                 "minReplicas": 1, "maxReplicas": 4}
    }))
    .unwrap();
    let h = hpas.create(&PostParams::default(), &hpa).await.unwrap();
    assert_eq!(h.metadata.generation, Some(1));
    let status = json!({"status": {"currentReplicas": 1, "desiredReplicas": 2}});
    let h = hpas
        .patch_status("podinfo", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    assert_eq!(
        h.metadata.generation,
        Some(1),
        "status writes do not bump generation"
    );
    assert_eq!(h.status.unwrap().desired_replicas, 2);
    let h = hpas
        .patch(
            "podinfo",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"maxReplicas": 8}, "status": {"desiredReplicas": 7}})),
        )
        .await
        .unwrap();
    assert_eq!(h.metadata.generation, Some(2));
    assert_eq!(
        h.status.unwrap().desired_replicas,
        2,
        "the main endpoint ignores status"
    );

    let applied = cms
        .patch(
            "applied",
            &PatchParams::apply("serin-test"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"x": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(applied.data.unwrap()["x"], "1");

    let deleted = cms.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(deleted.is_left());
    assert_eq!(status_code(cms.get("a").await.unwrap_err()), 404);
    sandbox.stop().await;
}

/// What the test controller shares with its reconciler.
struct Context {
    canaries: Api<Canary>,
    cleanups: AtomicUsize,
}

async fn reconcile_canary(
    canary: Arc<Canary>,
    ctx: Arc<Context>,
) -> Result<Action, kube::runtime::finalizer::Error<kube::Error>> {
    let api = ctx.canaries.clone();
    finalizer(&api, "serin.dev/finalizer", canary, |event| async {
        match event {
            FinalizerEvent::Apply(canary) => {
                let status = json!({"status": {"phase": "Initialized",
                    "observedGeneration": canary.metadata.generation}});
                api.patch_status(
                    &canary.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&status),
                )
                .await?;
                Ok(Action::await_change())
            }
            FinalizerEvent::Cleanup(_) => {
                ctx.cleanups.fetch_add(1, Ordering::SeqCst);
                Ok(Action::await_change())
            }
        }
    })
    .await
}

async fn eventually<T>(what: &str, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    for _ in 0..200 {
        if let Some(value) = probe().await {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_adds_its_finalizer_writes_status_and_cleans_up_on_delete() {
    let (sandbox, client, _dir) = start().await;
    let kubectl = Kubectl::new(&sandbox);
    let crds = include_str!("../../../../../artifacts/crds/serin.yaml");
    let example = include_str!("../../../../../artifacts/examples/canary-progressive.yaml");
    tokio::task::spawn_blocking(move || {
        kubectl.apply(crds, &[]);
        kubectl.ok(&[
            "wait",
            "--for=condition=Established",
            "crd/canaries.serin.dev",
        ]);
        kubectl.apply(
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: test}\n",
            &[],
        );
        kubectl.apply(example, &[]);
    })
    .await
    .unwrap();

    let canaries: Api<Canary> = Api::namespaced(client.clone(), "test");
    let ctx = Arc::new(Context {
        canaries: canaries.clone(),
        cleanups: AtomicUsize::new(0),
    });
    let controller = Controller::new(canaries.clone(), watcher::Config::default())
        .run(
            reconcile_canary,
            |_, _, _| Action::requeue(Duration::from_millis(200)),
            ctx.clone(),
        )
        .for_each(|_| async {});
    let running = tokio::spawn(controller);

    let reconciled = eventually("the status write", async || {
        let canary = canaries.get("podinfo").await.ok()?;
        let phase = canary.status.as_ref()?.phase?;
        (phase == Phase::Initialized).then_some(canary)
    })
    .await;
    assert_eq!(
        reconciled.metadata.finalizers.unwrap_or_default(),
        ["serin.dev/finalizer"]
    );
    assert_eq!(
        reconciled.status.unwrap().observed_generation,
        reconciled.metadata.generation
    );

    canaries
        .delete("podinfo", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the finalizer to let the canary go", async || {
        canaries.get("podinfo").await.is_err().then_some(())
    })
    .await;
    assert_eq!(ctx.cleanups.load(Ordering::SeqCst), 1, "cleanup ran once");
    running.abort();
    sandbox.stop().await;
}

#[tokio::test]
async fn recorder_events_show_in_both_event_apis_and_kubectl_describe() {
    let (sandbox, client, _dir) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let cm = cms
        .create(&PostParams::default(), &config_map("subject"))
        .await
        .unwrap();
    let recorder = Recorder::new(client.clone(), Reporter::from("serin-test"));
    let event = Event {
        type_: EventType::Normal,
        reason: "Synced".into(),
        note: Some("Advance podinfo.test canary weight 10".into()),
        action: "Advance".into(),
        secondary: None,
    };
    recorder.publish(&event, &cm.object_ref(&())).await.unwrap();
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::default_namespaced(client.clone());
    let list = events.list(&Default::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(
        list.items[0].note.as_deref(),
        Some("Advance podinfo.test canary weight 10")
    );
    assert_eq!(
        list.items[0].regarding.as_ref().unwrap().name.as_deref(),
        Some("subject")
    );

    // The same event through the core API, selected the way kubectl describe selects it.
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(client.clone());
    let selected = core
        .list(
            &kube::api::ListParams::default()
                .fields("involvedObject.name=subject,involvedObject.kind=ConfigMap"),
        )
        .await
        .unwrap();
    assert_eq!(selected.items.len(), 1);
    assert_eq!(
        selected.items[0].message.as_deref(),
        Some("Advance podinfo.test canary weight 10")
    );
    assert_eq!(
        selected.items[0].reporting_component.as_deref(),
        Some("serin-test")
    );

    let kubectl = Kubectl::new(&sandbox);
    let description =
        tokio::task::spawn_blocking(move || kubectl.ok(&["describe", "configmap", "subject"]))
            .await
            .unwrap();
    let events = &description[description.find("Events:").expect("an Events section")..];
    assert!(events.contains("Normal"), "{description}");
    assert!(events.contains("Synced"), "{description}");
    assert!(events.contains("serin-test"), "{description}");
    assert!(
        events.contains("Advance podinfo.test canary weight 10"),
        "{description}"
    );
    sandbox.stop().await;
}

#[tokio::test]
async fn watcher_follows_changes_and_relists_after_compaction() {
    let (sandbox, client, _dir) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &config_map("before"))
        .await
        .unwrap();
    let stream = watcher(cms.clone(), watcher::Config::default()).boxed();
    let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let forward = tokio::spawn(async move {
        let mut stream = stream;
        while let Some(event) = stream.next().await {
            let label = match event {
                Ok(watcher::Event::Init) => "Init".to_string(),
                Ok(watcher::Event::InitApply(o)) => {
                    format!("InitApply {}", o.metadata.name.unwrap())
                }
                Ok(watcher::Event::InitDone) => "InitDone".to_string(),
                Ok(watcher::Event::Apply(o)) => format!("Apply {}", o.metadata.name.unwrap()),
                Ok(watcher::Event::Delete(o)) => format!("Delete {}", o.metadata.name.unwrap()),
                Err(e) => format!("Error {e}"),
            };
            if events_tx.send(label).is_err() {
                return;
            }
        }
    });
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("a watcher event within 10s")
            .unwrap()
    };
    assert_eq!(next().await, "Init");
    assert_eq!(next().await, "InitApply before");
    assert_eq!(next().await, "InitDone");
    cms.create(&PostParams::default(), &config_map("live"))
        .await
        .unwrap();
    assert_eq!(next().await, "Apply live");
    cms.delete("before", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(next().await, "Delete before");

    sandbox.store.compact();
    // The in-stream 410 makes the watcher start over with a fresh list.
    let mut relisted = Vec::new();
    loop {
        let event = next().await;
        let done = event == "InitDone";
        relisted.push(event);
        if done {
            break;
        }
    }
    let relisted: Vec<&str> = relisted
        .iter()
        .map(String::as_str)
        .filter(|e| !e.starts_with("Error"))
        .collect();
    assert_eq!(relisted, ["Init", "InitApply live", "InitDone"]);
    cms.create(&PostParams::default(), &config_map("after"))
        .await
        .unwrap();
    assert_eq!(next().await, "Apply after");
    forward.abort();
    sandbox.stop().await;
}

#[tokio::test]
async fn resuming_from_a_compacted_resource_version_is_an_in_stream_410() {
    let (sandbox, client, _dir) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let first = cms
        .create(&PostParams::default(), &config_map("one"))
        .await
        .unwrap();
    let old_rv = first.metadata.resource_version.unwrap();
    cms.create(&PostParams::default(), &config_map("two"))
        .await
        .unwrap();
    sandbox.store.compact();
    let mut stream = cms
        .watch(&kube::api::WatchParams::default(), &old_rv)
        .await
        .expect("the watch request itself succeeds")
        .boxed();
    match stream.next().await {
        Some(Ok(kube::api::WatchEvent::Error(status))) => {
            assert_eq!(status.code, 410);
            assert_eq!(status.reason, "Expired");
        }
        other => panic!("expected an in-stream 410, got {other:?}"),
    }
    // Resuming from the current version works.
    let now = cms
        .list(&Default::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = cms
        .watch(&kube::api::WatchParams::default(), &now)
        .await
        .unwrap()
        .boxed();
    cms.create(&PostParams::default(), &config_map("three"))
        .await
        .unwrap();
    match tokio::time::timeout(Duration::from_secs(5), stream.next()).await {
        Ok(Some(Ok(kube::api::WatchEvent::Added(cm)))) => {
            assert_eq!(cm.metadata.name.as_deref(), Some("three"))
        }
        other => panic!("expected ADDED three, got {other:?}"),
    }
    sandbox.stop().await;
}

#[tokio::test]
async fn a_bookmark_of_a_quiet_resource_carries_the_latest_version_so_it_resumes_after_compaction()
{
    let dir = tempfile::tempdir().unwrap();
    let options = serin_sandbox::SandboxOptions {
        bookmark_interval: Duration::from_millis(200),
        ..serin_sandbox::SandboxOptions::default()
    };
    let sandbox = Sandbox::start_with(dir.path(), options).await.unwrap();
    let client = Client::try_from(Config::new(sandbox.url.parse().unwrap())).unwrap();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::default_namespaced(client.clone());
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let start = secrets.list(&Default::default()).await.unwrap();
    let start = start.metadata.resource_version.unwrap();
    let mut quiet = secrets
        .watch(&kube::api::WatchParams::default(), &start)
        .await
        .unwrap()
        .boxed();
    // Only ConfigMaps change; the Secrets' watch has nothing to send but bookmarks.
    let mut last = String::new();
    for name in ["busy-1", "busy-2", "busy-3"] {
        let cm = cms.create(&PostParams::default(), &config_map(name)).await;
        last = cm.unwrap().metadata.resource_version.unwrap();
    }
    let last: u64 = last.parse().unwrap();
    let bookmarked = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match quiet.next().await {
                Some(Ok(kube::api::WatchEvent::Bookmark(bookmark))) => {
                    let rv: u64 = bookmark.metadata.resource_version.parse().unwrap();
                    if rv >= last {
                        return rv;
                    }
                }
                Some(Ok(other)) => panic!("the Secrets' watch sent {other:?}"),
                other => panic!("the Secrets' watch ended: {other:?}"),
            }
        }
    })
    .await
    .expect("a bookmark at or past the last ConfigMap's version within 5s");
    drop(quiet);
    // The history before the bookmark is gone, as after a busy stretch; resuming from the
    // bookmark needs none of it.
    sandbox.store.compact();
    let mut resumed = secrets
        .watch(&kube::api::WatchParams::default(), &bookmarked.to_string())
        .await
        .unwrap()
        .boxed();
    let secret: k8s_openapi::api::core::v1::Secret =
        serde_json::from_value(json!({"metadata": {"name": "after"}})).unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    match tokio::time::timeout(Duration::from_secs(5), resumed.next()).await {
        Ok(Some(Ok(kube::api::WatchEvent::Added(s)))) => {
            assert_eq!(s.metadata.name.as_deref(), Some("after"))
        }
        other => panic!("expected ADDED after, got {other:?}"),
    }
    sandbox.stop().await;
}
