//! The traffic rule: a side gets more traffic only once it has the available pods to serve it.
//! With `dynamicStableScale` the primary shrinks as the canary gains traffic, so every path that
//! sends traffic back to it (restart, revert, rollback, abort) first scales it back up; a canary
//! made small by `setCanaryScale` or a preview is grown before it takes traffic.

use crate::common::*;
use k8s_openapi::api::apps::v1::Deployment;
use serde_json::json;
use serin_api::{ABORT_ANNOTATION, Phase, RETRY_ANNOTATION};
use serin_core::plan::reason;
use serin_core::simulation::{World, healthy};
use serin_core::{Action, Check, MetricReading, Outcome, Routes};

fn routes(primary: i32, canary: i32) -> Option<Routes> {
    Some(Routes {
        primary,
        canary,
        mirrored: false,
    })
}

/// A dynamicStableScale release of 10 replicas at canary weight 80, where the primary has been
/// scaled down to 4 pods (40%). Scaling up takes 20s.
fn at_weight_80_with_a_shrunk_primary() -> World {
    let mut world = initialized_with_replicas(
        canary(
            json!({"interval": "15s", "stepWeight": 20, "maxWeight": 100, "threshold": 1,
            "dynamicStableScale": true,
            "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}}]}),
        ),
        10,
    );
    world.rollout_seconds = 20;
    release(&mut world);
    assert!(world.run_until(15, 10, |w| w.routes.is_some_and(|r| r.canary == 80)));
    assert_eq!(world.primary_replicas(), 4);
    assert_eq!(world.status().desired_replicas, Some(10));
    world
}

fn scales_primary_to(tick: &serin_core::simulation::TickRecord, n: i32) -> bool {
    tick.actions.contains(&Action::ScalePrimary(n))
}

fn position(tick: &serin_core::simulation::TickRecord, action: &Action) -> usize {
    tick.actions
        .iter()
        .position(|a| a == action)
        .unwrap_or_else(|| panic!("{action:?} not in {:?}", tick.actions))
}

/// Marks a Deployment's rollout observed and complete, with only `available` pods available.
fn rolled_out_with(deployment: &mut Deployment, available: i32) {
    let replicas = deployment.spec.as_ref().and_then(|s| s.replicas);
    let status = deployment.status.get_or_insert_with(Default::default);
    status.observed_generation = deployment.metadata.generation;
    status.replicas = replicas;
    status.updated_replicas = replicas;
    status.available_replicas = Some(available);
    status.ready_replicas = Some(available);
}

#[test]
fn a_new_revision_scales_the_primary_back_up_before_it_gets_all_traffic() {
    let mut world = at_weight_80_with_a_shrunk_primary();
    world.set_target_image("podinfo:6.0.2");

    // The primary's 4 pods can serve 40%: it gets that much now, and is scaled back to 10.
    let first = world.advance(15).clone();
    assert!(scales_primary_to(&first, 10), "{:?}", first.actions);
    assert_eq!(first.routes, routes(40, 60));
    assert_eq!(first.phase, Some(Phase::Progressing));
    assert_eq!(
        first.events,
        vec![
            "Normal: New revision of podinfo.test detected: podinfo-primary.test has 4 of 10 replicas available, canary weight lowered to 60"
        ]
    );
    assert_eq!(first.reasons, vec![reason::NEW_REVISION]);
    assert!(
        first.checks.is_empty(),
        "no analysis while the revision changes"
    );

    // Still scaling: traffic holds, the tick says what it waits for.
    let waiting = world.advance(15).clone();
    assert_eq!(waiting.routes, routes(40, 60));
    assert_eq!(
        waiting.events,
        vec![
            "Normal: New revision of podinfo.test detected: waiting for podinfo-primary.test to have 10 available replicas (4 now) before routing all traffic to it"
        ]
    );
    assert_eq!(waiting.reasons, vec![reason::WAITING]);

    // The primary is ready: all traffic goes to it and the analysis restarts.
    let restarted = world.advance(15).clone();
    assert_eq!(restarted.routes, Some(Routes::PRIMARY_ONLY));
    assert_eq!(
        restarted.events,
        vec!["Normal: New revision detected! Restarting analysis for podinfo.test"]
    );
    assert_eq!(restarted.weight, 0);
    assert!(world.run_until(15, 30, |w| w.phase() == Some(Phase::Succeeded)));
    assert_eq!(world.primary_image(), "podinfo:6.0.2");
    assert_eq!(world.primary_replicas(), 10);
}

#[test]
fn reverting_to_the_promoted_revision_waits_for_the_primary_then_scales_the_canary_down() {
    let mut world = at_weight_80_with_a_shrunk_primary();
    world.set_target_image("ghcr.io/stefanprodan/podinfo:6.0.0");

    let first = world.advance(15).clone();
    assert!(scales_primary_to(&first, 10));
    assert_eq!(first.routes, routes(40, 60));
    assert!(!first.actions.contains(&Action::ScaleTarget(0)));
    assert_eq!(first.phase, Some(Phase::Progressing));
    assert!(first.events[0].starts_with(
        "Normal: Target podinfo.test is back on the promoted revision: podinfo-primary.test has 4 of 10"
    ));

    world.advance(15);
    assert_eq!(world.target_replicas(), 10, "the canary keeps serving");
    let done = world.advance(15).clone();
    assert_eq!(done.phase, Some(Phase::Succeeded));
    assert_eq!(done.routes, Some(Routes::PRIMARY_ONLY));
    // Traffic leaves the canary before it is scaled down.
    assert!(
        position(&done, &Action::SetRoutes(Routes::PRIMARY_ONLY))
            < position(&done, &Action::ScaleTarget(0))
    );
    assert_eq!(world.target_replicas(), 0);
    assert_eq!(world.primary_replicas(), 10);
}

#[test]
fn an_abort_fails_at_once_and_returns_traffic_as_the_primary_grows() {
    let mut world = at_weight_80_with_a_shrunk_primary();
    world.annotate(ABORT_ANNOTATION, "a1");

    let abort = world.advance(1).clone();
    assert_eq!(abort.phase, Some(Phase::Failed));
    assert!(scales_primary_to(&abort, 10));
    assert_eq!(abort.routes, routes(40, 60));
    assert!(!abort.actions.contains(&Action::ScaleTarget(0)));
    assert_eq!(
        abort.events,
        vec![
            "Warning: Rolling back podinfo.test aborted by user",
            "Normal: Rolling back podinfo.test: podinfo-primary.test has 4 of 10 replicas available, canary weight lowered to 60",
        ]
    );
    assert_eq!(
        abort.reasons,
        vec![reason::ROLLED_BACK, reason::ROLLED_BACK]
    );
    assert_eq!(abort.requeue_after.unwrap().as_secs(), 15);
    assert_eq!(
        world.status().handled_requests.unwrap().abort.as_deref(),
        Some("a1"),
        "the abort is recorded when the rollback is decided"
    );
    assert_eq!(world.status().canary_weight, 0);

    // Reconciles while the primary grows change nothing and say nothing; a retry waits its turn.
    world.annotate(RETRY_ANNOTATION, "r1");
    let status = world.canary.status.clone();
    for _ in 0..3 {
        let quiet = world.advance(5).clone();
        assert!(
            quiet.events.is_empty() && quiet.actions.is_empty(),
            "{quiet:?}"
        );
        assert_eq!(quiet.routes, routes(40, 60));
        assert_eq!(quiet.requeue_after.unwrap().as_secs(), 15);
    }
    assert_eq!(
        world.canary.status, status,
        "no status write, so no reconcile loop"
    );
    assert_eq!(world.status().handled_requests.unwrap().retry, None);

    // 20s after the scale-up the primary is ready: all traffic back, then the canary goes.
    let back = world.advance(5).clone();
    assert_eq!(back.routes, Some(Routes::PRIMARY_ONLY));
    assert_eq!(
        back.events,
        vec!["Warning: Canary failed! Scaling down podinfo.test"]
    );
    assert!(
        position(&back, &Action::SetRoutes(Routes::PRIMARY_ONLY))
            < position(&back, &Action::ScaleTarget(0))
    );
    assert_eq!(
        back.requeue_after.unwrap().as_secs(),
        1,
        "the retry is next"
    );
    let retry = world.advance(1).clone();
    assert_eq!(retry.phase, Some(Phase::Progressing));
    assert_eq!(
        retry.events[0],
        "Normal: Retrying the release of podinfo.test"
    );
}

#[test]
fn failed_checks_roll_back_without_overloading_the_primary() {
    let mut world = at_weight_80_with_a_shrunk_primary();
    world.respond(|check, now| match check {
        Check::Metric { .. } => Outcome::Metric(MetricReading::Value(1.0)),
        other => healthy(other, now),
    });
    world.advance(15); // the failing check
    let rollback = world.advance(15).clone();
    assert_eq!(rollback.phase, Some(Phase::Failed));
    assert_eq!(rollback.routes, routes(40, 60));
    // At every reconcile until the primary is back, its share never exceeds what its pods serve.
    while world.routes != Some(Routes::PRIMARY_ONLY) {
        let tick = world.advance(5).clone();
        let primary = world.primary.as_ref().unwrap();
        let available = primary.status.as_ref().unwrap().available_replicas.unwrap();
        assert!(
            tick.routes.unwrap().primary <= available * 10,
            "{} available pods serve {}%",
            available,
            tick.routes.unwrap().primary
        );
        assert!(world.elapsed() < 600);
    }
    assert_eq!(world.target_replicas(), 0);
    assert_event(&world, "Warning: Canary failed! Scaling down podinfo.test");
}

#[test]
fn a_set_weight_that_returns_traffic_scales_the_primary_first() {
    let mut world = initialized_with_replicas(
        canary(json!({"interval": "15s", "dynamicStableScale": true,
            "steps": [{"setWeight": 80}, {"setWeight": 80}, {"setWeight": 20}, {"pause": {}}]})),
        10,
    );
    world.rollout_seconds = 20;
    release(&mut world);
    assert!(world.run_until(15, 5, |w| w.primary_replicas() == 2));
    assert_eq!(world.routes, routes(20, 80));

    // setWeight 20 gives the primary 80%, which needs 8 pods: they come first.
    let scaling = world.advance(15).clone();
    assert_eq!(scaling.routes, routes(20, 80));
    assert!(scales_primary_to(&scaling, 8));
    assert_eq!(
        scaling.events,
        vec![
            "Normal: Scaling podinfo-primary.test to 8 replicas before routing 80% of traffic to it"
        ]
    );
    // While it scales, the primary is not ready and the tick stops there.
    let waiting = world.advance(15).clone();
    assert_eq!(waiting.routes, routes(20, 80));
    assert!(waiting.events[0].starts_with("Warning: podinfo-primary.test not ready"));
    let moved = world.advance(15).clone();
    assert_eq!(moved.routes, routes(80, 20));

    // A primary whose rollout is done but whose pods are not all available holds the traffic too.
    let mut world = initialized_with_replicas(
        canary(
            json!({"interval": "15s", "dynamicStableScale": true, "primaryReadyThreshold": 50,
            "steps": [{"setWeight": 80}, {"setWeight": 80}, {"setWeight": 20}, {"pause": {}}]}),
        ),
        10,
    );
    release(&mut world);
    assert!(world.run_until(15, 5, |w| w.primary_replicas() == 2));
    let scaling = world.advance(15).clone();
    assert!(scales_primary_to(&scaling, 8));
    rolled_out_with(world.primary.as_mut().unwrap(), 5);
    let held = world.advance(15).clone();
    assert_eq!(held.routes, routes(20, 80));
    assert_eq!(
        held.events,
        vec![
            "Normal: Waiting for podinfo-primary.test to have 8 available replicas (5 now) before routing 80% of traffic to it"
        ]
    );
    rolled_out_with(world.primary.as_mut().unwrap(), 8);
    assert_eq!(world.advance(15).routes, routes(80, 20));
}

#[test]
fn a_blue_green_switch_waits_until_every_new_pod_is_available() {
    let mut world = initialized_with_replicas(
        canary(
            json!({"interval": "15s", "iterations": 1, "previewReplicaCount": 1,
            "canaryReadyThreshold": 50}),
        ),
        4,
    );
    release(&mut world);
    assert_eq!(world.target_replicas(), 1);
    assert!(world.run_until(15, 5, |w| w.target_replicas() == 4));
    assert_event(
        &world,
        "Normal: Scaling podinfo.test to 4 replicas before routing all traffic to it",
    );
    assert_eq!(world.routes, Some(Routes::PRIMARY_ONLY));

    // Rolled out with 2 of 4 pods available: ready by the 50% threshold, not enough for all traffic.
    rolled_out_with(&mut world.target, 2);
    let held = world.advance(15).clone();
    assert_eq!(held.routes, Some(Routes::PRIMARY_ONLY));
    assert_eq!(
        held.events,
        vec![
            "Normal: Waiting for podinfo.test to have 4 available replicas (2 now) before routing all traffic to it"
        ]
    );
    rolled_out_with(&mut world.target, 4);
    let switched = world.advance(15).clone();
    assert_eq!(switched.routes, routes(0, 100));
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Succeeded)));
}

#[test]
fn a_failed_promotion_grows_a_small_canary_before_it_takes_all_traffic() {
    let mut world = initialized_with_replicas(
        canary(json!({"interval": "15s",
            "steps": [{"setCanaryScale": {"replicas": 1}}, {"setWeight": 20}]})),
        4,
    );
    world.canary.spec.progress_deadline_seconds = Some(30);
    release(&mut world);
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Promoting)));
    assert_eq!(world.target_replicas(), 1);
    world.failing.insert("primary");
    world.rollout_seconds = 20;
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Failed)));

    // One canary pod can serve 25% of the traffic: it gets that, and the canary is grown to 4.
    let failed = world.log.last().unwrap().clone();
    assert_eq!(failed.routes, routes(75, 25));
    assert!(failed.actions.contains(&Action::ScaleTarget(4)));
    assert_eq!(world.status().canary_weight, 100);
    assert_eq!(
        failed.reasons,
        vec![reason::PROMOTION_FAILED, reason::PROMOTION_FAILED]
    );

    assert!(world.run_until(5, 10, |w| w.routes == routes(0, 100)));
    assert_event(&world, "Normal: Routing all traffic to podinfo.test");
    assert_eq!(world.target_replicas(), 4);
    assert_eq!(world.phase(), Some(Phase::Failed));
    // Settled: later reconciles do nothing.
    assert!(world.advance(30).actions.is_empty());
}

/// A release of stepWeight 20 up to 40 whose promotion failed (the primary never rolled out): all
/// traffic is on the canary, and the primary is still failing.
fn after_a_failed_promotion() -> World {
    let mut world = initialized(canary(
        json!({"interval": "15s", "stepWeight": 20, "maxWeight": 40}),
    ));
    world.canary.spec.progress_deadline_seconds = Some(30);
    release(&mut world);
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Promoting)));
    world.failing.insert("primary");
    world.rollout_seconds = 1;
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Failed)));
    assert!(world.run_until(5, 10, |w| w.routes == routes(0, 100)));
    world
}

/// The canary weights a run records while Progressing, from log entry `from` on, each change once.
fn progressing_weights(world: &World, from: usize) -> Vec<i32> {
    let mut weights: Vec<i32> = Vec::new();
    for tick in &world.log[from..] {
        if tick.phase == Some(Phase::Progressing) && weights.last() != Some(&tick.weight) {
            weights.push(tick.weight);
        }
    }
    weights
}

#[test]
fn a_new_revision_after_a_failed_promotion_starts_from_the_primary_and_walks_the_whole_ladder() {
    let mut world = after_a_failed_promotion();
    world.recover("primary");
    world.advance(30);
    let from = world.log.len();
    world.set_target_image("podinfo:6.0.2");
    let start = world.reconcile().clone();
    assert_eq!(start.phase, Some(Phase::Progressing));
    assert_eq!(
        start.routes,
        routes(100, 0),
        "traffic back on the primary first"
    );
    assert_eq!(
        start.events[0],
        "Normal: Routing all traffic of podinfo.test back to podinfo-primary.test before a new run"
    );
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Succeeded)));
    assert_eq!(progressing_weights(&world, from), vec![0, 20, 40]);
}

#[test]
fn a_retry_after_a_failed_promotion_waits_for_the_primary_then_walks_the_whole_ladder() {
    let mut world = after_a_failed_promotion();
    world.annotate(RETRY_ANNOTATION, "t1");
    let held = world.advance(15).clone();
    assert_eq!(held.phase, Some(Phase::Failed));
    assert_eq!(held.routes, routes(0, 100), "the canary keeps the traffic");
    assert!(
        held.events[0].starts_with(
            "Warning: A new run of podinfo.test waits: all traffic is on the canary since a failed promotion, and podinfo-primary.test is not ready to take it back ("
        ),
        "{:?}",
        held.events
    );
    assert!(
        world
            .status()
            .message
            .unwrap()
            .contains("kubectl rollout status deployment/podinfo-primary")
    );
    for _ in 0..3 {
        let t = world.advance(15).clone();
        assert_eq!(t.phase, Some(Phase::Failed));
        assert!(t.events.is_empty(), "said once: {:?}", t.events);
    }

    world.recover("primary");
    let from = world.log.len();
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Succeeded)));
    assert_event(&world, "Normal: Retrying the release of podinfo.test");
    assert_eq!(progressing_weights(&world, from), vec![0, 20, 40]);
    assert_eq!(world.routes, Some(Routes::PRIMARY_ONLY));
}
