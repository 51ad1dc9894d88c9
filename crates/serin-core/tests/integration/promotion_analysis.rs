//! Blue/green's pre- and post-promotion analyses (Argo Rollouts'): checks just before the switch,
//! and just after it while the primary still runs the previous version.

use crate::common::*;
use serde_json::json;
use serin_api::Phase;
use serin_core::simulation::healthy;
use serin_core::{Check, MetricReading, Outcome, Routes};

fn blue_green(post_success_rate: f64, pre_success_rate: f64) -> serin_core::simulation::World {
    let canary = canary(json!({
        "interval": "10s", "threshold": 2, "iterations": 2,
        "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}}],
        "prePromotionAnalysis": {
            "metrics": [{"name": "preview-smoke", "thresholdRange": {"min": 99},
                         "query": "preview success rate"}]},
        "postPromotionAnalysis": {
            "iterations": 2,
            "metrics": [{"name": "live-success-rate", "thresholdRange": {"min": 99},
                         "query": "live success rate"}]}
    }));
    let mut world = initialized_with_replicas(canary, 2);
    world.respond(move |check, now| match check {
        Check::Metric { name } if name == "live-success-rate" => {
            Outcome::Metric(MetricReading::Value(post_success_rate))
        }
        Check::Metric { name } if name == "preview-smoke" => {
            Outcome::Metric(MetricReading::Value(pre_success_rate))
        }
        _ => healthy(check, now),
    });
    world.set_target_image("ghcr.io/stefanprodan/podinfo:6.0.1");
    world
}

fn switched_at(world: &serin_core::simulation::World) -> Option<usize> {
    world.log.iter().position(|t| {
        t.events
            .iter()
            .any(|e| e.contains("Routing all traffic to canary"))
    })
}

#[test]
fn a_failing_post_promotion_analysis_returns_traffic_to_the_previous_version_within_one_interval() {
    let mut world = blue_green(50.0, 100.0);
    world.run_until(10, 30, |w| w.phase() == Some(Phase::Failed));
    assert_eq!(world.phase(), Some(Phase::Failed), "{:#?}", world.log);
    let switch = switched_at(&world).expect("the switch happened");
    let failed = world
        .log
        .iter()
        .position(|t| t.phase == Some(Phase::Failed))
        .unwrap();
    assert_eq!(
        failed,
        switch + 1,
        "rolled back at the first interval after the switch"
    );
    assert_eq!(world.log[failed].routes, Some(Routes::PRIMARY_ONLY));
    assert_eq!(world.primary_image(), "ghcr.io/stefanprodan/podinfo:6.0.0");
    let events = events(&world);
    assert!(
        events
            .iter()
            .any(|e| e.contains("the post-promotion analysis failed after the switch")),
        "{events:#?}"
    );
    assert!(events.iter().any(|e| e.contains("live-success-rate")));
    assert!(
        !events.iter().any(|e| e.contains("Copying")),
        "never promoted"
    );
}

#[test]
fn a_passing_post_promotion_analysis_promotes_after_its_iterations() {
    let mut world = blue_green(100.0, 100.0);
    world.run_until(10, 40, |w| w.phase() == Some(Phase::Succeeded));
    assert_eq!(world.phase(), Some(Phase::Succeeded), "{:#?}", world.log);
    assert_eq!(world.primary_image(), "ghcr.io/stefanprodan/podinfo:6.0.1");
    let events = events(&world);
    let position = |needle: &str| {
        events
            .iter()
            .position(|e| e.contains(needle))
            .unwrap_or_else(|| panic!("{needle}: {events:#?}"))
    };
    assert!(
        position("Pre-promotion analysis of podinfo.test passed 1/1")
            < position("Routing all traffic to canary")
    );
    assert!(
        position("Routing all traffic to canary")
            < position("Post-promotion analysis of podinfo.test passed 1/2")
    );
    assert!(position("Post-promotion analysis of podinfo.test passed 2/2") < position("Copying"));
}

#[test]
fn a_failing_pre_promotion_analysis_rolls_back_before_any_traffic_moves() {
    let mut world = blue_green(100.0, 10.0);
    world.run_until(10, 30, |w| w.phase() == Some(Phase::Failed));
    assert_eq!(world.phase(), Some(Phase::Failed));
    assert_eq!(switched_at(&world), None);
    assert!(
        world
            .log
            .iter()
            .all(|t| t.routes.is_none_or(|r| r.canary == 0))
    );
    assert!(
        events(&world)
            .iter()
            .any(|e| e.contains("the pre-promotion analysis failed before the switch"))
    );
}
