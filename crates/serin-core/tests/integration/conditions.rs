//! The conditions GitOps tools read: `Ready`, `Reconciling` and `Stalled` follow a release tick by
//! tick, exactly one of them `True` at a time, each naming the generation it describes.

use crate::common::*;
use serde_json::json;
use serin_api::{CanaryStatus, Phase};
use serin_core::simulation::World;
use serin_core::{Check, Outcome};

fn analysed() -> serin_api::Canary {
    canary(json!({
        "interval": "15s", "threshold": 2, "maxWeight": 20, "stepWeight": 10,
        "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}}]
    }))
}

/// `(status, reason)` of each kstatus condition, in the order Ready, Reconciling, Stalled.
fn health(status: &CanaryStatus) -> [(String, String); 3] {
    ["Ready", "Reconciling", "Stalled"].map(|type_| {
        let condition = status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("no {type_} condition in {:#?}", status.conditions));
        (condition.status.clone(), condition.reason.clone())
    })
}

fn expect(world: &World, ready: &str, reconciling: &str, stalled: &str, reason: &str) {
    let status = world.status();
    let got = health(&status);
    let wanted = [ready, reconciling, stalled].map(|s| (s.to_string(), reason.to_string()));
    assert_eq!(got, wanted, "in phase {:?}", status.phase);
    for condition in &status.conditions {
        if condition.type_ != "Promoted" {
            assert_eq!(
                condition.observed_generation, world.canary.metadata.generation,
                "{} names the generation it describes",
                condition.type_
            );
        }
    }
}

#[test]
fn a_promoted_release_is_reconciling_then_ready() {
    let mut world = initialized(analysed());
    expect(&world, "True", "False", "False", "Initialized");
    let ready_since = world
        .status()
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .and_then(|c| c.last_transition_time.clone());

    world.set_target_image("ghcr.io/stefanprodan/podinfo:6.0.1");
    world.reconcile();
    assert!(world.run_until(15, 5, |w| w.phase() == Some(Phase::Progressing)));
    expect(&world, "False", "True", "False", "Progressing");
    let reconciling = world
        .status()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Reconciling")
        .expect("Reconciling");
    assert_eq!(
        reconciling.message,
        "New revision detected, progressing canary analysis."
    );

    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Succeeded)));
    expect(&world, "True", "False", "False", "Succeeded");
    let ready = world
        .status()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready");
    assert_ne!(
        ready.last_transition_time, ready_since,
        "Ready went False and True again, so its transition time moved"
    );
}

#[test]
fn a_rolled_back_release_is_stalled_until_the_next_revision() {
    let mut world = initialized(analysed());
    world.respond(|check: &Check, _| match check {
        Check::Metric { .. } => Outcome::Metric(serin_core::MetricReading::Value(80.0)),
        other => serin_core::simulation::healthy(other, k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    });
    world.set_target_image("ghcr.io/stefanprodan/podinfo:6.0.1");
    world.reconcile();
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Failed)));
    expect(&world, "False", "False", "True", "Failed");

    world.respond(serin_core::simulation::healthy);
    world.set_target_image("ghcr.io/stefanprodan/podinfo:6.0.2");
    world.reconcile();
    assert!(world.run_until(15, 5, |w| w.phase() == Some(Phase::Progressing)));
    expect(&world, "False", "True", "False", "Progressing");
}

#[test]
fn an_invalid_spec_stalls_with_its_reason_and_a_fix_clears_it() {
    let mut world = initialized(analysed());
    world.canary.spec.provider = Some("linkerd-but-misspelt".into());
    world.canary.metadata.generation = Some(2);
    world.advance(15);
    expect(&world, "False", "False", "True", "InvalidSpec");
    let stalled = world
        .status()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Stalled")
        .expect("Stalled");
    assert!(
        stalled.message.contains("spec.provider"),
        "the message names the field: {}",
        stalled.message
    );

    world.canary.spec.provider = None;
    world.canary.metadata.generation = Some(3);
    world.advance(15);
    expect(&world, "True", "False", "False", "Initialized");
}

#[test]
fn a_suspended_canary_is_neither_ready_nor_stalled() {
    let mut world = initialized(analysed());
    world.canary.spec.suspend = Some(true);
    world.canary.metadata.generation = Some(2);
    world.advance(15);
    expect(&world, "False", "False", "False", "Suspended");
}

#[test]
fn an_unchanged_canary_keeps_its_conditions_untouched() {
    let mut world = initialized(analysed());
    let before = world.status().conditions;
    world.advance(15);
    world.advance(15);
    assert_eq!(world.status().conditions, before);
}
