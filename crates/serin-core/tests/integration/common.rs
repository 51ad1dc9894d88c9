//! Shared builders for the timeline tests.

use serin_api::Canary;
use serin_core::simulation::{World, deployment};

pub use serin_core::simulation::canary;

/// A world with `canary` over a one-replica podinfo 6.0.0, initialized (Initialized, primary ready).
pub fn initialized(canary: Canary) -> World {
    initialized_with_replicas(canary, 1)
}

/// A world with `canary` over podinfo 6.0.0 with `replicas`, initialized.
pub fn initialized_with_replicas(canary: Canary, replicas: i32) -> World {
    let target = deployment(
        "podinfo",
        "test",
        "ghcr.io/stefanprodan/podinfo:6.0.0",
        replicas,
    );
    let mut world = World::new(canary, target);
    world.reconcile();
    world.advance(15);
    assert_eq!(
        world.phase(),
        Some(serin_api::Phase::Initialized),
        "{:#?}",
        world.log
    );
    world
}

/// Every event text of the log, in order.
pub fn events(world: &World) -> Vec<String> {
    world.log.iter().flat_map(|t| t.events.clone()).collect()
}

/// (phase, status weight) after each tick from `from` on.
pub fn phases(world: &World, from: usize) -> Vec<(String, i32)> {
    world.log[from..]
        .iter()
        .map(|t| (t.phase.map(|p| p.to_string()).unwrap_or_default(), t.weight))
        .collect()
}

/// Asserts that `needle` occurs in some event of the log.
pub fn assert_event(world: &World, needle: &str) {
    let all = events(world);
    assert!(
        all.iter().any(|e| e.contains(needle)),
        "no event contains {needle:?}; events were:\n{}",
        all.join("\n")
    );
}

/// Starts a release of podinfo 6.0.1 (new image, one reconcile); returns where it starts in the log.
pub fn release(world: &mut World) -> usize {
    let start = world.log.len();
    world.set_target_image("podinfo:6.0.1");
    world.reconcile();
    start
}

/// (phase, weight) after each tick from `from` on, with consecutive repeats folded.
pub fn distinct_phases(world: &World, from: usize) -> Vec<(String, i32)> {
    let mut seen = phases(world, from);
    seen.dedup();
    seen
}

/// The reason of the first event (from tick `from` on) whose text contains `needle`.
pub fn reason_of(world: &World, from: usize, needle: &str) -> &'static str {
    world.log[from..]
        .iter()
        .flat_map(|t| t.events.iter().zip(&t.reasons))
        .find(|(event, _)| event.contains(needle))
        .map(|(_, reason)| *reason)
        .unwrap_or_else(|| {
            panic!(
                "no event contains {needle:?}; events were:\n{}",
                events(world).join("\n")
            )
        })
}

/// Every (reason, event) pair of the log, in order.
pub fn reasoned_events(world: &World) -> Vec<(&'static str, String)> {
    world
        .log
        .iter()
        .flat_map(|t| t.reasons.iter().copied().zip(t.events.iter().cloned()))
        .collect()
}
