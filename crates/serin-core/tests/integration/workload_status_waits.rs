//! A plan that lets the workloads' status wait (`workload_status_waits`) is one whose next
//! decision, until its requeue, comes out the same whatever the target's and the primary's status
//! and metadata say: the controller relies on it to let such changes wait for the due tick.

use crate::common::*;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
use serde_json::json;
use serin_core::simulation::World;
use serin_core::{Decision, Observation, Plan, decide};

fn plan(observation: &Observation, now: k8s_openapi::jiff::Timestamp) -> Plan {
    let mut observation = observation.clone();
    loop {
        match decide(&observation, now) {
            Decision::Plan(plan) => return *plan,
            Decision::Check(check) => {
                let outcome = serin_core::simulation::healthy(&check, now);
                observation
                    .verdicts
                    .push(serin_core::plan::Verdict { check, outcome });
            }
        }
    }
}

fn replicas(deployment: &Deployment) -> i32 {
    deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1)
}

/// `deployment` with every pod gone unavailable, a rollout not yet observed, and new labels.
fn unsettled(deployment: &mut Deployment) {
    let replicas = replicas(deployment);
    deployment.status = Some(DeploymentStatus {
        observed_generation: deployment.metadata.generation.map(|g| g - 1),
        replicas: Some(replicas),
        updated_replicas: Some(0),
        ready_replicas: Some(0),
        available_replicas: Some(0),
        unavailable_replicas: Some(replicas),
        ..DeploymentStatus::default()
    });
    deployment
        .metadata
        .labels
        .get_or_insert_default()
        .insert("changed-by".into(), "someone".into());
}

/// `deployment` with every pod updated and available.
fn settled(deployment: &mut Deployment) {
    let replicas = replicas(deployment);
    deployment.status = Some(DeploymentStatus {
        observed_generation: deployment.metadata.generation,
        replicas: Some(replicas),
        updated_replicas: Some(replicas),
        ready_replicas: Some(replicas),
        available_replicas: Some(replicas),
        ..DeploymentStatus::default()
    });
}

/// Follows a release reconcile by reconcile, one second apart; after each plan that lets the
/// workloads' status wait, decides again before its requeue with the workloads as they are and
/// with their status changed both ways. Returns how many plans let it wait.
fn follow(mut world: World, seconds: usize) -> usize {
    let mut waited = 0;
    for _ in 0..seconds {
        world.advance(1);
        let last = world.log.last().expect("one reconcile").clone();
        if !last.workload_status_waits {
            continue;
        }
        waited += 1;
        let requeue = last.requeue_after.expect("a plan that waits has a requeue");
        let before = world.now + k8s_openapi::jiff::SignedDuration::try_from(requeue).unwrap()
            - k8s_openapi::jiff::SignedDuration::from_millis(1);
        let observation = world.observation();
        for when in [world.now, before] {
            let expected = plan(&observation, when);
            for change in [unsettled, settled] {
                let mut changed = observation.clone();
                changed.target.as_mut().map(change);
                changed.primary.as_mut().map(change);
                assert_eq!(
                    plan(&changed, when),
                    expected,
                    "at {}s in {:?}, with the workloads' status changed",
                    world.elapsed(),
                    last.phase
                );
            }
        }
    }
    waited
}

#[test]
fn a_release_in_flight_decides_the_same_whatever_its_workloads_status_until_due() {
    let releases = [
        json!({"interval": "10s", "threshold": 2, "maxWeight": 50, "stepWeight": 10,
               "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}}]}),
        json!({"interval": "10s", "threshold": 2, "iterations": 3,
               "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}}]}),
        json!({"interval": "10s", "threshold": 2,
               "steps": [{"setWeight": 20}, {"pause": {"duration": "25s"}}, {"setWeight": 60}]}),
    ];
    for analysis in releases {
        let mut world = initialized_with_replicas(canary(analysis.clone()), 2);
        world.rollout_seconds = 3;
        release(&mut world);
        let waited = follow(world, 150);
        assert!(
            waited > 20,
            "{analysis}: only {waited} plans let the status wait"
        );
    }
}

#[test]
fn a_release_by_ready_pods_never_lets_the_status_wait() {
    let mut canary = canary(json!({"interval": "10s", "threshold": 2,
        "steps": [{"setWeight": 40}, {"setWeight": 100}]}));
    canary.spec.provider = Some("kubernetes".into());
    let mut world = initialized_with_replicas(canary, 5);
    release(&mut world);
    for _ in 0..120 {
        let tick = world.advance(1);
        assert!(!tick.workload_status_waits, "{tick:?}");
    }
}
