//! A/B testing and blue/green timelines.

use crate::common::*;
use serde_json::json;
use serin_api::{PROMOTE_ANNOTATION, Phase};
use serin_core::{Action, Routes};

#[test]
fn ab_testing_sends_matched_traffic_to_the_canary_for_n_iterations() {
    let mut world = initialized(canary(json!({
        "interval": "15s", "threshold": 2, "iterations": 3,
        "match": [{"headers": {"x-canary": {"exact": "insider"}}}],
        "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}}]
    })));
    let start = release(&mut world);
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Succeeded)));
    assert_eq!(
        distinct_phases(&world, start),
        vec![
            ("Progressing".into(), 0),
            ("Promoting".into(), 0),
            ("Finalising".into(), 0),
            ("Succeeded".into(), 0)
        ]
    );
    let progressing: Vec<_> = world.log[start..]
        .iter()
        .filter(|t| t.phase == Some(Phase::Progressing))
        .collect();
    // detect, pre-rollout (iteration 1), iterations 2 and 3, then the promotion tick.
    assert_eq!(progressing.len(), 4);
    assert_eq!(
        progressing[1].routes,
        Some(Routes {
            primary: 0,
            canary: 100,
            mirrored: false
        })
    );
    for i in 1..=3 {
        assert_event(
            &world,
            &format!("Normal: Advance podinfo.test canary iteration {i}/3"),
        );
    }
    // Metrics run on every tick after the pre-rollout one: iterations 2, 3 and the promotion tick.
    let analysed = world.log[start..]
        .iter()
        .filter(|t| !t.checks.is_empty())
        .count();
    assert_eq!(analysed, 3);
    assert_eq!(world.primary_image(), "podinfo:6.0.1");
}

fn blue_green_ticks(iterations: i32) -> Vec<(String, i32)> {
    let mut world = initialized(canary(json!({"interval": "15s", "iterations": iterations})));
    let start = release(&mut world);
    assert!(world.run_until(15, 30, |w| w.phase() == Some(Phase::Succeeded)));
    assert_event(&world, "Normal: Routing all traffic to canary");
    assert_eq!(world.primary_image(), "podinfo:6.0.1");
    world.log[start..]
        .iter()
        .map(|t| (t.phase.unwrap().to_string(), world_iterations(t)))
        .collect()
}

fn world_iterations(tick: &serin_core::simulation::TickRecord) -> i32 {
    tick.routes.map(|r| r.canary).unwrap_or(0)
}

#[test]
fn blue_green_with_one_iteration() {
    let ticks = blue_green_ticks(1);
    let phases: Vec<&str> = ticks.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        phases,
        [
            "Progressing",
            "Progressing",
            "Progressing",
            "Promoting",
            "Finalising",
            "Succeeded"
        ]
    );
    // Traffic moves to the new (green) pods before the primary is rolled, and back after.
    let canary_share: Vec<i32> = ticks.iter().map(|(_, c)| *c).collect();
    assert_eq!(canary_share, [0, 0, 100, 100, 0, 0]);
}

#[test]
fn blue_green_with_five_iterations() {
    let ticks = blue_green_ticks(5);
    let progressing = ticks.iter().filter(|(p, _)| p == "Progressing").count();
    assert_eq!(progressing, 7, "detect, 5 iterations, traffic switch");
    assert_eq!(ticks.len(), 10);
}

#[test]
fn blue_green_preview_waits_for_a_manual_promote() {
    let mut world = initialized_with_replicas(
        canary(json!({
            "interval": "15s", "iterations": 2, "autoPromotionEnabled": false, "previewReplicaCount": 1
        })),
        3,
    );
    assert_eq!((world.primary_replicas(), world.target_replicas()), (3, 0));
    world.set_target_image("podinfo:6.0.1");
    let detect = world.reconcile().clone();
    assert!(
        detect.actions.contains(&Action::ScaleTarget(1)),
        "the preview runs with 1 replica"
    );

    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::WaitingPromotion)));
    assert_event(&world, "waiting for a manual promote");
    // It keeps waiting, with the preview still small and no traffic on it.
    for _ in 0..4 {
        let t = world.advance(15).clone();
        assert_eq!(t.phase, Some(Phase::WaitingPromotion));
        assert_eq!(t.routes, Some(Routes::PRIMARY_ONLY));
    }
    assert_eq!(world.target_replicas(), 1);

    world.annotate(PROMOTE_ANNOTATION, "2026-01-01T00:05:00Z");
    let promote = world.advance(1).clone();
    assert!(
        promote.actions.contains(&Action::ScaleTarget(3)),
        "scaled to full size before the switch"
    );
    assert_eq!(promote.routes, Some(Routes::PRIMARY_ONLY));
    let switch = world.advance(15).clone();
    assert_eq!(
        switch.routes,
        Some(Routes {
            primary: 0,
            canary: 100,
            mirrored: false
        })
    );
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Succeeded)));
    assert_eq!(world.primary_image(), "podinfo:6.0.1");
    assert_eq!(world.primary_replicas(), 3);
    let handled = world.status().handled_requests.unwrap();
    assert_eq!(handled.promote.as_deref(), Some("2026-01-01T00:05:00Z"));
}

#[test]
fn blue_green_auto_promotion_seconds() {
    let mut world = initialized(canary(json!({
        "interval": "15s", "iterations": 1, "autoPromotionSeconds": 40
    })));
    release(&mut world);
    world.advance(15); // pre-rollout tick, iteration 1/1: the wait starts
    let waiting_since = world.elapsed();
    world.run_until(15, 10, |w| w.routes.is_some_and(|r| r.canary == 100));
    let switched_at = world.elapsed();
    assert!(
        switched_at - waiting_since >= 40 && switched_at - waiting_since < 55,
        "switched {}s after the analysis ended",
        switched_at - waiting_since
    );
    assert_ne!(world.phase(), Some(Phase::WaitingPromotion));
}

#[test]
fn blue_green_with_mirroring_stops_mirroring_at_the_switch() {
    let mut world = initialized(canary(
        json!({"interval": "15s", "iterations": 2, "mirror": true}),
    ));
    release(&mut world);
    world.advance(15);
    world.advance(15);
    assert_eq!(
        world.routes,
        Some(Routes {
            primary: 100,
            canary: 0,
            mirrored: true
        })
    );
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Succeeded)));
    assert_event(
        &world,
        "Normal: Stop traffic mirroring and route all traffic to canary",
    );
}

#[test]
fn scale_down_delay_keeps_the_canary_after_finalising() {
    let mut world = initialized(canary(json!({
        "interval": "15s", "iterations": 1, "scaleDownDelaySeconds": 40
    })));
    release(&mut world);
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Finalising)));
    let finalising_at = world.elapsed();
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Succeeded)));
    assert!(world.elapsed() - finalising_at >= 40);
    assert_eq!(world.target_replicas(), 0);
}
