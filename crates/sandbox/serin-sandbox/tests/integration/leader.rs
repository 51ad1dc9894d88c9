//! Server-side apply ownership as leader election needs it: two kube-lease-manager contenders, one
//! leader at a time, and a take-over when the leader dies without releasing its lease.

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Config};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use serde_json::json;
use serin_sandbox::Sandbox;
use std::time::{Duration, Instant};
use tokio::sync::watch::Receiver;

async fn contender(client: &Client, identity: &str) -> LeaseManager {
    LeaseManagerBuilder::new(client.clone(), "serin-leader")
        .with_namespace("default")
        .with_identity(identity)
        .with_duration(2)
        .with_grace(1)
        .build()
        .await
        .unwrap()
}

/// Waits until `done` holds for the two leadership flags, checking that they never both claim it.
async fn observe(
    a: &Receiver<bool>,
    b: &Receiver<bool>,
    within: Duration,
    done: impl Fn(bool, bool) -> bool,
) -> (bool, bool) {
    let deadline = Instant::now() + within;
    loop {
        let (is_a, is_b) = (*a.borrow(), *b.borrow());
        assert!(!(is_a && is_b), "two leaders at once");
        if done(is_a, is_b) {
            return (is_a, is_b);
        }
        assert!(
            Instant::now() < deadline,
            "leadership did not settle: a={is_a} b={is_b}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_contenders_elect_one_leader_and_the_other_takes_over_when_it_dies() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::start(dir.path()).await.unwrap();
    let client = Client::try_from(Config::new(sandbox.url.parse().unwrap())).unwrap();
    let (a, a_task) = contender(&client, "contender-a").await.watch().await;
    let (b, b_task) = contender(&client, "contender-b").await.watch().await;

    let (a_leads, _) = observe(&a, &b, Duration::from_secs(10), |x, y| x || y).await;
    // Hold for a few renewals: the leader keeps the lease and the other stays out.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (still_a, still_b) = observe(&a, &b, Duration::ZERO, |_, _| true).await;
    assert_eq!(
        (still_a, still_b),
        (a_leads, !a_leads),
        "leadership flapped"
    );
    let leases: Api<Lease> = Api::default_namespaced(client.clone());
    let lease = leases.get("serin-leader").await.unwrap();
    let (leader, follower, leader_task, follower_task) = if a_leads {
        ("contender-a", "contender-b", a_task, b_task)
    } else {
        ("contender-b", "contender-a", b_task, a_task)
    };
    let spec = lease.spec.clone().unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(leader));
    let transitions = spec.lease_transitions.unwrap_or(0);

    // The leader dies without releasing; the lease expires and the follower takes over.
    leader_task.abort();
    let started = Instant::now();
    let follower_rx = if a_leads { &b } else { &a };
    while !*follower_rx.borrow() {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{follower} never took over"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let spec = leases.get("serin-leader").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(follower));
    assert!(spec.lease_transitions.unwrap_or(0) > transitions);
    follower_task.abort();
    sandbox.stop().await;
}

#[tokio::test]
async fn a_second_field_manager_applying_another_holder_gets_a_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::start(dir.path()).await.unwrap();
    let client = Client::try_from(Config::new(sandbox.url.parse().unwrap())).unwrap();
    let leases: Api<Lease> = Api::default_namespaced(client);
    let body = |holder: &str| {
        Patch::Apply(
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}}),
        )
    };
    leases
        .patch("lock", &PatchParams::apply("manager-a"), &body("a"))
        .await
        .unwrap();
    let error = leases
        .patch("lock", &PatchParams::apply("manager-b"), &body("b"))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = error else {
        panic!("expected a 409, got {error}")
    };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status
            .message
            .contains("conflict with \"manager-a\": .spec.holderIdentity"),
        "{}",
        status.message
    );
    // Applying the same values is shared ownership, and force takes the field over.
    leases
        .patch("lock", &PatchParams::apply("manager-b"), &body("a"))
        .await
        .unwrap();
    let taken = leases
        .patch("lock", &PatchParams::apply("manager-b").force(), &body("b"))
        .await
        .unwrap();
    assert_eq!(taken.spec.unwrap().holder_identity.as_deref(), Some("b"));
    let entries = taken.metadata.managed_fields.unwrap_or_default();
    let fields_of = |manager: &str| {
        entries
            .iter()
            .find(|e| e.manager.as_deref() == Some(manager))
            .and_then(|e| e.fields_v1.as_ref())
            .map(|f| f.0.to_string())
            .unwrap_or_default()
    };
    assert!(fields_of("manager-b").contains("f:holderIdentity"));
    assert!(
        !fields_of("manager-a").contains("f:holderIdentity"),
        "the forced field moved"
    );
    assert!(
        fields_of("manager-a").contains("f:leaseDurationSeconds"),
        "the shared field stays shared"
    );
    sandbox.stop().await;
}
