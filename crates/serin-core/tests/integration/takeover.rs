//! Taking over from Flagger: a status Flagger wrote (its own revision hashes, none of Serin's
//! fields) goes on from where Flagger stopped.

use crate::common;
use crate::common::*;
use serde_json::json;
use serin_api::{CanaryStatus, Phase};
use serin_core::stored_status::split;
use std::collections::BTreeMap;

fn canary() -> serin_api::Canary {
    common::canary(json!({
        "interval": "15s", "threshold": 5, "maxWeight": 50, "stepWeight": 10,
        "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}, "interval": "1m"}]
    }))
}

/// The status as Flagger would have left it: its fields only, with its hashes.
fn as_flagger_wrote(status: &CanaryStatus, applied: &str, promoted: &str) -> CanaryStatus {
    let mut flagger: CanaryStatus =
        serde_json::from_value(split(status, &BTreeMap::new()).status.into()).unwrap();
    flagger.last_applied_spec = Some(applied.into());
    flagger.last_promoted_spec = Some(promoted.into());
    flagger
}

#[test]
fn a_release_flagger_left_at_weight_30_goes_on_through_the_remaining_weights() {
    let mut world = initialized(canary());
    release(&mut world);
    assert!(world.run_until(15, 20, |w| w.status().canary_weight == 30));
    let mut flagger = as_flagger_wrote(&world.status(), "84c4d8b7c9", "7b9c6d5f4d");
    flagger.iterations = 2;
    flagger.failed_checks = 1;
    assert!(flagger.last_tick_time.is_none() && flagger.current_step_index.is_none());
    world.canary.status = Some(flagger);

    // Like Flagger after a restart, the first tick comes at once and steps on from 30.
    let from = world.log.len();
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Succeeded)));
    let weights: Vec<i32> = distinct_phases(&world, from)
        .into_iter()
        .filter(|(phase, _)| phase == "Progressing")
        .map(|(_, weight)| weight)
        .collect();
    assert_eq!(weights, [40, 50], "{:#?}", world.log[from..].to_vec());
    let after: Vec<String> = world.log[from..]
        .iter()
        .flat_map(|t| t.events.clone())
        .collect();
    assert!(
        !after.iter().any(|e| e.contains("New revision detected")),
        "{after:#?}"
    );
    assert_eq!(world.primary_image(), "podinfo:6.0.1");
    // The failed check Flagger counted still counts.
    assert!(
        world.log[from]
            .events
            .iter()
            .all(|e| !e.contains("Rolling back"))
    );
}

#[test]
fn a_canary_flagger_left_succeeded_is_not_released_again() {
    let mut world = initialized(canary());
    release(&mut world);
    assert!(world.run_until(15, 30, |w| w.phase() == Some(Phase::Succeeded)));
    world.canary.status = Some(as_flagger_wrote(
        &world.status(),
        "84c4d8b7c9",
        "84c4d8b7c9",
    ));
    let from = world.log.len();
    world.run_until(15, 8, |_| false);
    assert!(
        world.log[from..]
            .iter()
            .all(|t| t.phase == Some(Phase::Succeeded)
                && t.actions.is_empty()
                && t.events.is_empty()),
        "{:#?}",
        world.log[from..].to_vec()
    );
    assert_eq!(world.target_replicas(), 0);
    // Serin's own hash now stands for the template Flagger knew.
    let status = world.status();
    assert_eq!(status.last_applied_spec, status.last_promoted_spec);
    assert!(!serin_core::revision::is_foreign_hash(
        status.last_applied_spec.as_deref().unwrap()
    ));

    // A new version is released as usual.
    release(&mut world);
    assert!(world.run_until(15, 30, |w| w.phase() == Some(Phase::Succeeded)));
    assert_eq!(world.primary_image(), "podinfo:6.0.1");
}
