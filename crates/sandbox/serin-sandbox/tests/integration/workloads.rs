//! Deployments roll out as on a real cluster: ReplicaSets, pods, surge and unavailability bounds,
//! conditions, kubectl rollout status, and the progress deadline.

use crate::common;

use crate::common::Kubectl;
use serde_json::{Value, json};
use serin_sandbox::controllers::{PodRuntime, PodStart};
use serin_sandbox::selectors::{FieldSelector, LabelSelector};
use serin_sandbox::store::{Part, PatchType, WriteOptions};
use serin_sandbox::{Sandbox, SandboxOptions};
use std::sync::Arc;
use std::time::Duration;

/// Pods whose image contains `broken` never start, as with a bad image on a real cluster.
struct BrokenImages;

impl PodRuntime for BrokenImages {
    fn start(&self, pod: &Value) -> PodStart {
        let image = pod["spec"]["containers"][0]["image"].as_str().unwrap_or("");
        if image.contains("broken") {
            PodStart::Waiting {
                reason: "ErrImagePull".into(),
                message: format!("failed to pull image {image:?}"),
            }
        } else {
            PodStart::ReadyAfter(Duration::from_millis(200))
        }
    }
}

async fn start() -> (Sandbox, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let options = SandboxOptions {
        runtime: Some(Arc::new(BrokenImages)),
        ..SandboxOptions::default()
    };
    (Sandbox::start_with(dir.path(), options).await.unwrap(), dir)
}

fn deployment(replicas: i64, image: &str, progress_deadline: i64) -> Value {
    json!({
        "metadata": {"name": "podinfo"},
        "spec": {
            "replicas": replicas,
            "progressDeadlineSeconds": progress_deadline,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "selector": {"matchLabels": {"app": "podinfo"}},
            "template": {"metadata": {"labels": {"app": "podinfo"}},
                         "spec": {"containers": [{"name": "podinfod", "image": image}]}}
        }
    })
}

async fn wait_for(sandbox: &Sandbox, what: &str, mut done: impl FnMut(&Value) -> bool) -> Value {
    let info = sandbox.store.resource("apps", "v1", "deployments").unwrap();
    for _ in 0..300 {
        if let Ok(d) = sandbox.store.get(&info, "default", "podinfo")
            && done(&d)
        {
            return d;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

fn condition<'a>(d: &'a Value, kind: &str) -> &'a Value {
    d["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_respects_surge_and_unavailability() {
    let (sandbox, _dir) = start().await;
    let deployments = sandbox.store.resource("apps", "v1", "deployments").unwrap();
    let pods = sandbox.store.resource("", "v1", "pods").unwrap();
    sandbox
        .store
        .create(
            &deployments,
            Some("default"),
            deployment(4, "podinfo:6.0.0", 600),
            &WriteOptions::default(),
        )
        .unwrap();
    let d = wait_for(&sandbox, "the first rollout", |d| {
        d["status"]["availableReplicas"] == 4
            && condition(d, "Progressing")["reason"] == "NewReplicaSetAvailable"
    })
    .await;
    assert_eq!(condition(&d, "Available")["status"], "True");

    let mut changes = sandbox.store.subscribe();
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "podinfod", "image": "podinfo:6.0.1"}]}}}});
    sandbox
        .store
        .patch(
            &deployments,
            "default",
            "podinfo",
            PatchType::Strategic,
            &patch,
            Part::Main,
            &WriteOptions::default(),
        )
        .unwrap();
    let mut most_pods = 0;
    let mut fewest_available = usize::MAX;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (all_pods, _) = sandbox.store.list(
            &pods,
            Some("default"),
            &LabelSelector::default(),
            &FieldSelector::default(),
        );
        let ready = all_pods
            .iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .count();
        most_pods = most_pods.max(all_pods.len());
        fewest_available = fewest_available.min(ready);
        let d = sandbox
            .store
            .get(&deployments, "default", "podinfo")
            .unwrap();
        let done = d["status"]["updatedReplicas"] == 4
            && d["status"]["replicas"] == 4
            && d["status"]["availableReplicas"] == 4
            && d["status"]["observedGeneration"] == d["metadata"]["generation"];
        if done {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "rollout did not finish: {}",
            d["status"]
        );
        let _ = tokio::time::timeout(Duration::from_millis(50), changes.recv()).await;
    }
    assert!(
        most_pods <= 5,
        "maxSurge 1 allows at most 5 pods, saw {most_pods}"
    );
    assert!(
        fewest_available >= 4,
        "maxUnavailable 0 keeps 4 pods available, saw {fewest_available}"
    );
    let replicasets = sandbox.store.resource("apps", "v1", "replicasets").unwrap();
    let (rs, _) = sandbox.store.list(
        &replicasets,
        Some("default"),
        &LabelSelector::default(),
        &FieldSelector::default(),
    );
    let mut sizes: Vec<(String, i64)> = rs
        .iter()
        .map(|r| {
            (
                r["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                r["spec"]["replicas"].as_i64().unwrap(),
            )
        })
        .collect();
    sizes.sort();
    assert_eq!(sizes, [("1".to_string(), 0), ("2".to_string(), 4)]);
    let d = sandbox
        .store
        .get(&deployments, "default", "podinfo")
        .unwrap();
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "2"
    );
    sandbox.stop().await;
}

/// A sandbox whose Deployment `podinfo` (2 replicas of podinfo:6.0.0) has rolled out.
async fn rolled_out_podinfo() -> (Sandbox, tempfile::TempDir, Kubectl) {
    let (sandbox, dir) = start().await;
    let kubectl = Kubectl::new(&sandbox);
    let deployments = sandbox.store.resource("apps", "v1", "deployments").unwrap();
    sandbox
        .store
        .create(
            &deployments,
            Some("default"),
            deployment(2, "podinfo:6.0.0", 600),
            &WriteOptions::default(),
        )
        .unwrap();
    let (ok, out) = kubectl.output(&["rollout", "status", "deploy/podinfo", "--timeout=20s"]);
    assert!(ok, "{out}");
    (sandbox, dir, kubectl)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_rollout_status_follows_a_template_change() {
    let (sandbox, _dir, kubectl) = rolled_out_podinfo().await;
    let (ok, _) = kubectl.output(&["set", "image", "deploy/podinfo", "podinfod=podinfo:6.0.1"]);
    assert!(ok);
    // Its progress lines are not checked here: this rollout may end before kubectl's first read
    // (the next test shows them on a rollout that cannot end).
    let (ok, out) = kubectl.output(&["rollout", "status", "deploy/podinfo", "--timeout=20s"]);
    assert!(ok, "{out}");
    assert!(
        out.trim_end()
            .ends_with("deployment \"podinfo\" successfully rolled out"),
        "{out}"
    );
    let (ok, out) = kubectl.output(&[
        "wait",
        "--for=condition=Available",
        "deploy/podinfo",
        "--timeout=5s",
    ]);
    assert!(ok, "{out}");
    let (_, pods) = kubectl.output(&[
        "get",
        "pods",
        "-o",
        "jsonpath={.items[*].spec.containers[0].image}",
    ]);
    assert_eq!(pods, "podinfo:6.0.1 podinfo:6.0.1");

    // The columns a real cluster prints, from server-side tables.
    let (ok, table) = kubectl.output(&["get", "deploy", "podinfo"]);
    assert!(ok, "{table}");
    let rows = common::table_rows(&table);
    assert_eq!(
        rows[0],
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "{table}"
    );
    assert_eq!(rows[1][..4], ["podinfo", "2/2", "2", "2"], "{table}");
    let (_, pods) = kubectl.output(&["get", "pods", "--no-headers"]);
    let statuses: Vec<(&str, &str)> = pods
        .lines()
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            (cells[1], cells[2])
        })
        .collect();
    assert_eq!(statuses, [("1/1", "Running"), ("1/1", "Running")], "{pods}");

    // The controllers' Events, as kubectl shows a rollout on a cluster.
    let (ok, events) = kubectl.output(&["events", "--for", "deploy/podinfo"]);
    assert!(ok, "{events}");
    let scaled: Vec<&str> = events
        .lines()
        .filter(|l| l.contains("ScalingReplicaSet"))
        .collect();
    assert!(
        scaled
            .iter()
            .any(|l| l.contains("Scaled up replica set podinfo-") && l.contains("from 0 to")),
        "{events}"
    );
    assert!(
        scaled
            .iter()
            .any(|l| l.contains("Scaled down replica set podinfo-") && l.ends_with("to 0")),
        "the old ReplicaSet is scaled down to 0: {events}"
    );
    let (ok, description) = kubectl.output(&["describe", "deploy", "podinfo"]);
    assert!(ok, "{description}");
    assert!(
        description.contains("ScalingReplicaSet") && description.contains("deployment-controller"),
        "{description}"
    );
    let (ok, created) = kubectl.output(&[
        "get",
        "events",
        "--field-selector",
        "reason=SuccessfulCreate",
        "-o",
        "jsonpath={range .items[*]}{.involvedObject.kind} {.message}{\"\\n\"}{end}",
    ]);
    assert!(ok, "{created}");
    assert_eq!(
        created
            .lines()
            .filter(|l| l.starts_with("ReplicaSet Created pod: podinfo-"))
            .count(),
        4,
        "two pods per revision: {created}"
    );
    let (ok, scheduled) = kubectl.output(&[
        "get",
        "events",
        "--field-selector",
        "reason=Scheduled,involvedObject.kind=Pod",
        "-o",
        "name",
    ]);
    assert!(ok && scheduled.lines().count() == 4, "{scheduled}");
    sandbox.stop().await;
}

/// A rollout whose new pod never pulls its image cannot end, so `kubectl rollout status` shows its
/// progress every time, until its own timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_rollout_status_shows_the_progress_of_a_rollout_that_cannot_end() {
    let (sandbox, _dir, kubectl) = rolled_out_podinfo().await;
    let (ok, _) = kubectl.output(&["set", "image", "deploy/podinfo", "podinfod=podinfo:broken"]);
    assert!(ok);
    let (ok, out) = kubectl.output(&["rollout", "status", "deploy/podinfo", "--timeout=3s"]);
    assert!(!ok, "the rollout cannot end: {out}");
    assert!(
        out.contains("Waiting for deployment \"podinfo\" rollout to finish: ")
            && out.contains(" out of 2 new replicas have been updated..."),
        "{out}"
    );
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_rollout_undo_brings_the_old_replica_set_back() {
    let (sandbox, _dir, kubectl) = rolled_out_podinfo().await;
    let first = replica_sets(&sandbox);
    assert_eq!(first.len(), 1);
    let (ok, _) = kubectl.output(&["set", "image", "deploy/podinfo", "podinfod=podinfo:6.0.1"]);
    assert!(ok);
    let (ok, out) = kubectl.output(&["rollout", "status", "deploy/podinfo", "--timeout=20s"]);
    assert!(ok, "{out}");
    // kubectl copies the template through Go's types, adding `creationTimestamp: null` and
    // `resources: {}`; the controller still recognises revision 1's ReplicaSet, as a cluster does.
    let (ok, out) = kubectl.output(&["rollout", "undo", "deploy/podinfo", "--to-revision=1"]);
    assert!(ok, "{out}");
    let (ok, out) = kubectl.output(&["rollout", "status", "deploy/podinfo", "--timeout=20s"]);
    assert!(ok, "{out}");
    let now = replica_sets(&sandbox);
    assert_eq!(now.len(), 2, "no third ReplicaSet: {now:?}");
    let reused = now
        .iter()
        .find(|rs| rs["metadata"]["name"] == first[0]["metadata"]["name"])
        .expect("revision 1's ReplicaSet is still there");
    assert_eq!(reused["spec"]["replicas"], 2);
    assert_eq!(
        reused["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "3"
    );
    let (ok, history) = kubectl.output(&["rollout", "history", "deploy/podinfo"]);
    assert!(ok, "{history}");
    let revisions: Vec<&str> = history
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|r| r.chars().all(|c| c.is_ascii_digit()))
        .collect();
    assert_eq!(revisions, ["2", "3"], "{history}");
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_image_exceeds_the_progress_deadline() {
    let (sandbox, _dir) = start().await;
    let deployments = sandbox.store.resource("apps", "v1", "deployments").unwrap();
    sandbox
        .store
        .create(
            &deployments,
            Some("default"),
            deployment(1, "podinfo:6.0.0", 2),
            &WriteOptions::default(),
        )
        .unwrap();
    wait_for(&sandbox, "the first rollout", |d| {
        d["status"]["availableReplicas"] == 1
    })
    .await;
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "podinfod", "image": "ghcr.io/example/podinfo:broken"}]}}}});
    sandbox
        .store
        .patch(
            &deployments,
            "default",
            "podinfo",
            PatchType::Strategic,
            &patch,
            Part::Main,
            &WriteOptions::default(),
        )
        .unwrap();
    let d = wait_for(&sandbox, "the progress deadline", |d| {
        condition(d, "Progressing")["reason"] == "ProgressDeadlineExceeded"
    })
    .await;
    assert_eq!(condition(&d, "Progressing")["status"], "False");
    assert_eq!(
        d["status"]["availableReplicas"], 1,
        "the old pod keeps serving"
    );
    let pods = sandbox.store.resource("", "v1", "pods").unwrap();
    let (all, _) = sandbox.store.list(
        &pods,
        Some("default"),
        &LabelSelector::default(),
        &FieldSelector::default(),
    );
    let waiting: Vec<&Value> = all
        .iter()
        .filter(|p| p["status"]["phase"] == "Pending")
        .collect();
    assert_eq!(waiting.len(), 1);
    assert_eq!(
        waiting[0]["status"]["containerStatuses"][0]["state"]["waiting"]["reason"],
        "ErrImagePull"
    );
    sandbox.stop().await;
}

async fn set_image(sandbox: &Sandbox, image: &str) {
    let deployments = sandbox.store.resource("apps", "v1", "deployments").unwrap();
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "podinfod", "image": image}]}}}});
    sandbox
        .store
        .patch(
            &deployments,
            "default",
            "podinfo",
            PatchType::Strategic,
            &patch,
            Part::Main,
            &WriteOptions::default(),
        )
        .unwrap();
}

fn rolled_out(d: &Value) -> bool {
    d["status"]["observedGeneration"] == d["metadata"]["generation"]
        && condition(d, "Progressing")["reason"] == "NewReplicaSetAvailable"
        && d["status"]["replicas"] == d["spec"]["replicas"]
}

fn replica_sets(sandbox: &Sandbox) -> Vec<Value> {
    let info = sandbox.store.resource("apps", "v1", "replicasets").unwrap();
    sandbox
        .store
        .list(
            &info,
            Some("default"),
            &LabelSelector::default(),
            &FieldSelector::default(),
        )
        .0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_stops_old_pods_before_starting_new_ones() {
    let (sandbox, _dir) = start().await;
    let deployments = sandbox.store.resource("apps", "v1", "deployments").unwrap();
    let mut d = deployment(2, "podinfo:6.0.0", 600);
    d["spec"]["strategy"] = json!({"type": "Recreate"});
    sandbox
        .store
        .create(&deployments, Some("default"), d, &WriteOptions::default())
        .unwrap();
    wait_for(&sandbox, "the first rollout", rolled_out).await;
    let mut changes = sandbox.store.subscribe();
    set_image(&sandbox, "podinfo:6.0.1").await;
    let pods = sandbox.store.resource("", "v1", "pods").unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (all, _) = sandbox.store.list(
            &pods,
            Some("default"),
            &LabelSelector::default(),
            &FieldSelector::default(),
        );
        let images: std::collections::HashSet<&str> = all
            .iter()
            .map(|p| p["spec"]["containers"][0]["image"].as_str().unwrap())
            .collect();
        assert!(
            images.len() <= 1,
            "old and new pods never run together: {images:?}"
        );
        let d = sandbox
            .store
            .get(&deployments, "default", "podinfo")
            .unwrap();
        if rolled_out(&d) && d["status"]["updatedReplicas"] == 2 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{}", d["status"]);
        let _ = tokio::time::timeout(Duration::from_millis(50), changes.recv()).await;
    }
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revision_history_limit_prunes_old_replica_sets() {
    let (sandbox, _dir) = start().await;
    let deployments = sandbox.store.resource("apps", "v1", "deployments").unwrap();
    let mut d = deployment(1, "podinfo:6.0.0", 600);
    d["spec"]["revisionHistoryLimit"] = json!(1);
    sandbox
        .store
        .create(&deployments, Some("default"), d, &WriteOptions::default())
        .unwrap();
    for image in ["podinfo:6.0.1", "podinfo:6.0.2", "podinfo:6.0.3"] {
        wait_for(&sandbox, "a rollout", rolled_out).await;
        set_image(&sandbox, image).await;
    }
    wait_for(&sandbox, "the last rollout", |d| {
        rolled_out(d) && d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "4"
    })
    .await;
    for _ in 0..100 {
        if replica_sets(&sandbox).len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut revisions: Vec<String> = replica_sets(&sandbox)
        .iter()
        .map(|r| {
            r["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    revisions.sort();
    assert_eq!(
        revisions,
        ["3", "4"],
        "the current ReplicaSet and one old one are kept"
    );
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_ready_seconds_delays_availability() {
    let (sandbox, _dir) = start().await;
    let deployments = sandbox.store.resource("apps", "v1", "deployments").unwrap();
    let mut d = deployment(1, "podinfo:6.0.0", 600);
    d["spec"]["minReadySeconds"] = json!(2);
    let created_at = std::time::Instant::now();
    sandbox
        .store
        .create(&deployments, Some("default"), d, &WriteOptions::default())
        .unwrap();
    wait_for(&sandbox, "a ready pod", |d| {
        d["status"]["readyReplicas"] == 1
    })
    .await;
    let d = sandbox
        .store
        .get(&deployments, "default", "podinfo")
        .unwrap();
    assert!(
        d["status"]["availableReplicas"].is_null(),
        "ready but not yet available: {}",
        d["status"]
    );
    wait_for(&sandbox, "availability", |d| {
        d["status"]["availableReplicas"] == 1
    })
    .await;
    assert!(
        created_at.elapsed() >= Duration::from_secs(1),
        "available only after minReadySeconds"
    );
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_and_foreground_deletion() {
    let (sandbox, _dir) = start().await;
    let kubectl = Kubectl::new(&sandbox);
    let deployments = sandbox.store.resource("apps", "v1", "deployments").unwrap();
    sandbox
        .store
        .create(
            &deployments,
            Some("default"),
            deployment(1, "podinfo:6.0.0", 600),
            &WriteOptions::default(),
        )
        .unwrap();
    wait_for(&sandbox, "the first rollout", rolled_out).await;
    let (ok, out) = kubectl.output(&["delete", "deploy", "podinfo", "--cascade=orphan"]);
    assert!(ok, "{out}");
    let (_, out) = kubectl.output(&["get", "deploy"]);
    assert!(out.contains("No resources found"), "{out}");
    let orphans = replica_sets(&sandbox);
    assert_eq!(orphans.len(), 1, "the ReplicaSet survives");
    assert!(
        orphans[0]["metadata"]["ownerReferences"]
            .as_array()
            .is_none_or(|r| r.is_empty())
    );

    let replicasets = sandbox.store.resource("apps", "v1", "replicasets").unwrap();
    let rs_name = orphans[0]["metadata"]["name"].as_str().unwrap().to_string();
    let (ok, out) = kubectl.output(&["delete", "rs", &rs_name, "--cascade=foreground"]);
    assert!(ok, "{out}");
    assert!(
        sandbox
            .store
            .get(&replicasets, "default", &rs_name)
            .is_err()
    );
    let (_, pods) = kubectl.output(&["get", "pods", "-o", "name"]);
    assert_eq!(pods.trim(), "", "its pods went first");
    sandbox.stop().await;
}
