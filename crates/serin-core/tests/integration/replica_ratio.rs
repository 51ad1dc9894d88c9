//! The canary by replica ratio (provider kubernetes with steps): the pods follow the weight inside
//! the maxSurge/maxUnavailable window, steps wait for them, and aborts and promotions hand the pods
//! back to the primary before the apex Service leaves the canary.

use crate::common::*;
use serde_json::json;
use serin_api::{ABORT_ANNOTATION, PROMOTE_ANNOTATION, Phase};
use serin_core::Routes;
use serin_core::simulation::World;

fn ratio_canary(analysis: serde_json::Value) -> serin_api::Canary {
    let mut canary = canary(analysis);
    canary.spec.provider = Some("kubernetes".into());
    canary
}

fn argo_steps() -> serin_api::Canary {
    ratio_canary(json!({
        "interval": "10s", "threshold": 2,
        "steps": [{"setWeight": 41}, {"pause": {}}, {"setWeight": 100}],
        "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}}]
    }))
}

fn available(world: &World) -> (i32, i32) {
    let of = |d: Option<&k8s_openapi::api::apps::v1::Deployment>| {
        d.and_then(|d| d.status.as_ref())
            .and_then(|s| s.available_replicas)
            .unwrap_or(0)
    };
    (of(Some(&world.target)), of(world.primary.as_ref()))
}

/// Reconciles every second (as the Deployments' own status changes would trigger it) until `done`,
/// checking the window (10 replicas, 25%: at most 13 pods, at least 8 available) after each.
fn run_in_window(world: &mut World, seconds: usize, done: impl Fn(&World) -> bool) {
    for _ in 0..seconds {
        world.advance(1);
        let pods = world.target_replicas() + world.primary_replicas();
        let (canary, primary) = available(world);
        assert!(pods <= 13, "{pods} pods: {:#?}", world.log.last());
        assert!(canary + primary >= 8, "{canary}+{primary} available");
        if done(world) {
            return;
        }
    }
    panic!(
        "not reached in {seconds}s: {:#?}",
        &world.log[world.log.len().saturating_sub(4)..]
    );
}

/// Reconciles every second until Succeeded (at most `seconds`), checking the window (`(most pods,
/// fewest available)`) after each; the status weights seen, each change once.
fn weights_to_success(world: &mut World, (most, fewest): (i32, i32), seconds: usize) -> Vec<i32> {
    let mut weights = Vec::new();
    for _ in 0..seconds {
        world.advance(1);
        let pods = world.target_replicas() + world.primary_replicas();
        let (canary, primary) = available(world);
        assert!(
            pods <= most && canary + primary >= fewest,
            "window left: {:#?}",
            world.log.last()
        );
        let weight = world.status().canary_weight;
        if weights.last() != Some(&weight) {
            weights.push(weight);
        }
        if world.phase() == Some(Phase::Succeeded) {
            return weights;
        }
    }
    panic!("not Succeeded in {seconds}s: {weights:?}");
}

fn paused(world: &World) -> bool {
    world.status().current_step_index == Some(1)
}

#[test]
fn setweight_41_of_10_replicas_pauses_at_4_canary_and_6_primary_pods() {
    let mut world = initialized_with_replicas(argo_steps(), 10);
    // Pods take 12s to become available, so the step outlasts an interval.
    world.rollout_seconds = 12;
    world.set_target_image("ghcr.io/stefanprodan/podinfo:6.0.1");
    run_in_window(&mut world, 60, paused);
    assert_eq!((world.target_replicas(), world.primary_replicas()), (4, 6));
    assert_eq!(available(&world), (4, 6));
    let status = world.status();
    assert_eq!(status.canary_weight, 41);
    let split = status.pod_split.expect("pod split in the status");
    assert_eq!(
        (split.canary, split.primary, split.canary_percent),
        (4, 6, 40)
    );
    let log = events(&world);
    assert!(
        log.iter()
            .any(|e| e.contains("Waiting for the pods of canary weight 41")),
        "{log:#?}"
    );
    assert!(
        log.iter()
            .any(|e| e.contains("Paused podinfo.test at step 2/3 until promoted"))
    );

    world.annotate(PROMOTE_ANNOTATION, "go");
    run_in_window(&mut world, 120, |w| w.phase() == Some(Phase::Succeeded));
    assert_eq!((world.target_replicas(), world.primary_replicas()), (0, 10));
    assert_eq!(world.primary_image(), "ghcr.io/stefanprodan/podinfo:6.0.1");
    assert_eq!(world.routes, Some(Routes::PRIMARY_ONLY));
    let log = events(&world);
    let promoted = log
        .iter()
        .filter(|e| e.contains("Promotion completed"))
        .count();
    assert_eq!(promoted, 1, "{log:#?}");
    // The apex left the canary only after the primary had all ten pods again.
    let routed_back = world
        .log
        .iter()
        .position(|t| {
            t.events
                .iter()
                .any(|e| e.contains("Routing all traffic to primary"))
        })
        .expect("routed back");
    assert!(
        world.log[routed_back]
            .actions
            .iter()
            .all(|a| !matches!(a, serin_core::Action::ScalePrimary(_)))
    );

    // Released, the apex serves the primary alone: a manifest scaling the target is not fought.
    world.target.spec.as_mut().unwrap().replicas = Some(3);
    let after = world.advance(1).clone();
    assert!(
        after
            .actions
            .iter()
            .all(|a| !matches!(a, serin_core::Action::ScaleTarget(_))),
        "{after:#?}"
    );
}

#[test]
fn an_abort_returns_every_pod_to_the_primary_before_the_canary_leaves_the_apex() {
    let mut world = initialized_with_replicas(argo_steps(), 10);
    world.set_target_image("ghcr.io/stefanprodan/podinfo:6.0.1");
    run_in_window(&mut world, 60, paused);
    world.annotate(ABORT_ANNOTATION, "stop");
    let abort = world.advance(1).clone();
    assert_eq!(abort.phase, Some(Phase::Failed));
    // The primary grows before the canary shrinks, and the apex still selects both sides.
    assert!(
        abort
            .actions
            .iter()
            .any(|a| matches!(a, serin_core::Action::ScalePrimary(9))),
        "{abort:#?}"
    );
    assert_ne!(world.routes, Some(Routes::PRIMARY_ONLY));
    run_in_window(&mut world, 30, |w| w.routes == Some(Routes::PRIMARY_ONLY));
    assert_eq!((world.target_replicas(), world.primary_replicas()), (0, 10));
    assert_eq!(world.primary_image(), "ghcr.io/stefanprodan/podinfo:6.0.0");
}

#[test]
fn a_step_weight_canary_steps_only_once_the_pods_are_there() {
    let mut world = initialized_with_replicas(
        ratio_canary(
            json!({"interval": "10s", "stepWeight": 25, "maxWeight": 100,
                            "maxSurge": 1, "maxUnavailable": 0}),
        ),
        4,
    );
    world.set_target_image("ghcr.io/stefanprodan/podinfo:6.0.1");
    let weights = weights_to_success(&mut world, (5, 4), 200);
    assert_eq!(weights, vec![0, 25, 50, 75, 100, 0]);
    assert_eq!((world.target_replicas(), world.primary_replicas()), (0, 4));
}

#[test]
fn without_steps_the_pods_roll_to_the_new_version_like_a_rolling_update() {
    let mut world = initialized_with_replicas(ratio_canary(json!({"interval": "10s"})), 10);
    world.set_target_image("ghcr.io/stefanprodan/podinfo:6.0.1");
    let weights = weights_to_success(&mut world, (13, 8), 300);
    assert_eq!(weights, vec![0, 100, 0]);
    assert_eq!(world.primary_image(), "ghcr.io/stefanprodan/podinfo:6.0.1");
    assert_eq!((world.target_replicas(), world.primary_replicas()), (0, 10));
}
