//! Manual requests (abort, promote, promote --full, retry, restart), skipAnalysis, suspend, and error paths.

use crate::common::*;
use serde_json::json;
use serin_api::{
    ABORT_ANNOTATION, PROMOTE_ANNOTATION, PROMOTE_FULL_ANNOTATION, Phase, RESTART_ANNOTATION,
    RETRY_ANNOTATION,
};
use serin_core::simulation::{World, healthy};
use serin_core::{Action, Check, MetricReading, Outcome, Routes};

fn progressive() -> serin_api::Canary {
    canary(json!({"interval": "15s", "stepWeight": 10, "maxWeight": 50,
        "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}}]}))
}

fn mid_release() -> World {
    let mut world = initialized(progressive());
    release(&mut world);
    assert!(world.run_until(15, 5, |w| w.routes.is_some_and(|r| r.canary == 20)));
    world
}

#[test]
fn abort_rolls_back_at_once_and_only_once() {
    let mut world = mid_release();
    world.annotate(ABORT_ANNOTATION, "2026-01-01T00:02:00Z");
    let abort = world.advance(1).clone();
    assert_eq!(abort.phase, Some(Phase::Failed));
    assert_eq!(abort.routes, Some(Routes::PRIMARY_ONLY));
    assert_eq!(
        abort.events[0],
        "Warning: Rolling back podinfo.test aborted by user"
    );
    assert_eq!(world.target_replicas(), 0);
    let handled = world.status().handled_requests.unwrap();
    assert_eq!(handled.abort.as_deref(), Some("2026-01-01T00:02:00Z"));
    // The same token is not acted on again, and the aborted revision is not retried by itself.
    assert!(world.advance(30).actions.is_empty());

    // retry restarts the release of the same revision.
    world.annotate(RETRY_ANNOTATION, "r1");
    let retry = world.advance(1).clone();
    assert_eq!(retry.phase, Some(Phase::Progressing));
    assert!(
        retry
            .events
            .contains(&"Normal: Retrying the release of podinfo.test".to_string())
    );
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Succeeded)));
    assert_eq!(world.primary_image(), "podinfo:6.0.1");
}

#[test]
fn abort_is_refused_once_promotion_started() {
    let mut world = initialized(canary(json!({"interval": "15s", "stepWeight": 50})));
    world.rollout_seconds = 20;
    release(&mut world);
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Promoting)));
    world.annotate(ABORT_ANNOTATION, "a1");
    let refused = world.advance(1).clone();
    assert_eq!(refused.phase, Some(Phase::Promoting));
    assert!(refused.events[0].starts_with("Warning: Abort refused"));
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Succeeded)));
}

#[test]
fn promote_full_skips_the_rest_of_the_analysis() {
    let mut world = mid_release();
    world.annotate(PROMOTE_FULL_ANNOTATION, "f1");
    let tick = world.advance(1).clone();
    assert_eq!(tick.phase, Some(Phase::Promoting));
    assert!(tick.checks.is_empty(), "no analysis runs");
    assert!(
        tick.actions
            .iter()
            .any(|a| matches!(a, Action::Promote { .. }))
    );
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Succeeded)));
    assert_eq!(world.primary_image(), "podinfo:6.0.1");
}

#[test]
fn promote_without_a_pause_is_acknowledged_and_ignored() {
    let mut world = mid_release();
    let before = world.routes;
    world.annotate(PROMOTE_ANNOTATION, "p1");
    let tick = world.advance(1).clone();
    // A manual request makes the tick run at once; the release goes on normally.
    assert_eq!(tick.phase, Some(Phase::Progressing));
    assert_ne!(tick.routes, before);
    assert!(tick.events.contains(
        &"Normal: Nothing to promote: podinfo.test is not paused (Progressing)".to_string()
    ));
    let handled = world.status().handled_requests.unwrap();
    assert_eq!(handled.promote.as_deref(), Some("p1"));
    // Acknowledged requests do not make later reconciles due: no tick until the interval passes.
    assert!(world.advance(1).checks.is_empty());
}

#[test]
fn requests_while_idle_or_initializing_are_acknowledged() {
    let mut world = initialized(progressive());
    for (key, expected) in [
        (
            ABORT_ANNOTATION,
            "Normal: Nothing to abort: no release of podinfo.test is in progress (Initialized)",
        ),
        (
            PROMOTE_ANNOTATION,
            "Normal: Nothing to promote: podinfo.test is not paused (Initialized)",
        ),
        (
            RETRY_ANNOTATION,
            "Normal: Nothing to retry: only a Failed canary can be retried, podinfo.test is Initialized",
        ),
    ] {
        world.annotate(key, "t1");
        let tick = world.advance(1).clone();
        assert_eq!(tick.events, vec![expected]);
        assert!(tick.actions.is_empty());
        assert!(world.advance(1).events.is_empty());
    }

    let mut fresh = World::new(
        progressive(),
        serin_core::simulation::deployment("podinfo", "test", "podinfo:6.0.0", 1),
    );
    fresh.rollout_seconds = 60;
    fresh.reconcile();
    fresh.annotate(PROMOTE_ANNOTATION, "early");
    assert!(
        fresh
            .advance(1)
            .events
            .iter()
            .any(|e| e.contains("Nothing to promote"))
    );
    let quiet = fresh.advance(1).clone();
    assert!(
        quiet.events.is_empty() && quiet.actions.is_empty(),
        "no tick before the interval"
    );
}

#[test]
fn skip_analysis_promotes_as_soon_as_the_canary_is_ready() {
    let mut world = initialized(canary(json!({"interval": "15s", "stepWeight": 10,
        "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}}]})));
    world.canary.spec.skip_analysis = Some(true);
    world.respond(|check, _| panic!("no check may run when analysis is skipped: {check:?}"));
    world.set_target_image("podinfo:6.0.1");
    assert_eq!(world.reconcile().phase, Some(Phase::Progressing));
    let done = world.advance(15).clone();
    assert_eq!(done.phase, Some(Phase::Succeeded));
    assert_eq!(
        done.events,
        vec![
            "Normal: Copying podinfo.test template spec to podinfo-primary.test",
            "Normal: Promotion completed! Canary analysis was skipped for podinfo.test"
        ]
    );
    assert!(done.actions.contains(&Action::ScaleTarget(0)));
    assert_eq!(world.primary_image(), "podinfo:6.0.1");
}

#[test]
fn suspend_freezes_a_release_where_it_is() {
    let mut world = mid_release();
    world.canary.spec.suspend = Some(true);
    let first = world.advance(15).clone();
    assert_eq!(
        first.events,
        vec!["Normal: skipping canary run as object is suspended"]
    );
    assert!(first.actions.is_empty());
    for _ in 0..3 {
        let t = world.advance(15).clone();
        assert!(t.events.is_empty() && t.actions.is_empty());
        assert_eq!(t.routes.unwrap().canary, 20);
    }
    world.canary.spec.suspend = None;
    world.advance(15);
    assert_eq!(world.routes.unwrap().canary, 30);
    assert_eq!(world.status().message, None);
}

#[test]
fn an_invalid_spec_is_reported_once_and_nothing_is_touched() {
    let mut world = mid_release();
    world.canary.spec.analysis.as_mut().unwrap().max_weight = Some(150);
    let tick = world.advance(15).clone();
    assert!(tick.actions.is_empty());
    assert_eq!(tick.events.len(), 1);
    assert!(
        tick.events[0]
            .starts_with("Warning: invalid spec: spec.analysis.maxWeight: 150 is out of range")
    );
    let message = world.status().message.unwrap();
    assert!(
        message.contains("write a whole number from 1 to 100"),
        "{message}"
    );
    assert!(
        world.advance(15).events.is_empty(),
        "the same problem is not announced twice"
    );
    world.canary.spec.analysis.as_mut().unwrap().max_weight = Some(50);
    world.advance(15);
    assert_eq!(world.routes.unwrap().canary, 30);
}

#[test]
fn a_missing_target_names_the_field_to_fix() {
    let mut world = World::new(
        canary(json!({"interval": "15s", "stepWeight": 10})),
        serin_core::simulation::deployment("podinfo", "test", "podinfo:6.0.0", 1),
    );
    let mut observation = serin_core::Observation::new(world.canary.clone());
    observation.target = None;
    let serin_core::Decision::Plan(plan) = serin_core::decide(&observation, world.now) else {
        panic!("no check is needed to report a missing target");
    };
    assert!(plan.actions.is_empty());
    assert_eq!(
        plan.status.message.as_deref(),
        Some(
            "Deployment podinfo.test not found: create it, or set spec.targetRef.name to an existing Deployment"
        )
    );
    assert_eq!(plan.events[0].reason, "TargetNotFound");
    world.reconcile();
    assert_eq!(world.phase(), Some(Phase::Initializing));
}

#[test]
fn a_canary_that_never_becomes_ready_fails_on_the_progress_deadline() {
    let mut world = initialized(canary(json!({"interval": "15s", "stepWeight": 10})));
    world.canary.spec.progress_deadline_seconds = Some(60);
    world.set_target_image("ghcr.io/example/podinfo:broken");
    world.reconcile();
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Failed)));
    assert_event(
        &world,
        "canary deployment podinfo.test not ready: waiting for rollout to finish: 0 of 1 (readyThreshold 100%) updated replicas are available",
    );
    assert_event(
        &world,
        "Warning: Rolling back podinfo.test progress deadline exceeded",
    );
    assert!(world.elapsed() >= 60 + 30);
    assert_eq!(world.target_replicas(), 0);
    assert_eq!(world.routes, Some(Routes::PRIMARY_ONLY));
}

#[test]
fn a_primary_that_fails_to_roll_out_keeps_traffic_on_the_healthy_canary() {
    let mut world = initialized(canary(json!({"interval": "15s", "stepWeight": 50})));
    world.canary.spec.progress_deadline_seconds = Some(30);
    release(&mut world);
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Promoting)));
    world.failing.insert("primary");
    world.rollout_seconds = 1;
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Failed)));
    let status = world.status();
    assert_eq!(status.canary_weight, 100);
    assert_eq!(
        world.routes,
        Some(Routes {
            primary: 0,
            canary: 100,
            mirrored: false
        })
    );
    assert_eq!(world.target_replicas(), 1, "the canary keeps serving");
    assert_event(
        &world,
        "Warning: Promotion of podinfo.test failed, primary not ready",
    );
}

#[test]
fn abort_scale_down_delay_keeps_the_canary_for_a_while() {
    let mut world = initialized(canary(
        json!({"interval": "15s", "stepWeight": 10, "threshold": 1,
        "abortScaleDownDelaySeconds": 40,
        "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}}]}),
    ));
    world.respond(|check, now| match check {
        Check::Metric { .. } => Outcome::Metric(MetricReading::NoData),
        other => healthy(other, now),
    });
    release(&mut world);
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Failed)));
    assert_event(
        &world,
        "no values found for istio metric request-success-rate",
    );
    let failed_at = world.elapsed();
    assert_eq!(world.target_replicas(), 1);
    let requeue = world.log.last().unwrap().clone();
    assert!(!requeue.actions.contains(&Action::ScaleTarget(0)));
    world.advance(20);
    assert_eq!(world.target_replicas(), 1);
    world.advance(20);
    assert_eq!(world.target_replicas(), 0);
    assert!(world.elapsed() - failed_at >= 40);
}

#[test]
fn abort_scale_down_delay_zero_never_scales_the_canary_down() {
    let mut world = mid_release();
    world
        .canary
        .spec
        .analysis
        .as_mut()
        .unwrap()
        .abort_scale_down_delay_seconds = Some(0);
    world.annotate(ABORT_ANNOTATION, "x");
    world.advance(1);
    assert_eq!(world.phase(), Some(Phase::Failed));
    for _ in 0..5 {
        world.advance(60);
    }
    assert_eq!(world.target_replicas(), 1);
}

#[test]
fn no_data_can_be_ignored_for_idle_services() {
    let mut world = initialized(canary(
        json!({"interval": "15s", "stepWeight": 50, "threshold": 1,
        "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}, "noData": "ignore"}]}),
    ));
    world.respond(|check, now| match check {
        Check::Metric { .. } => Outcome::Metric(MetricReading::NoData),
        other => healthy(other, now),
    });
    release(&mut world);
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Succeeded)));
    let checks = world.status().metric_checks;
    assert!(checks[0].passed && checks[0].value.is_none());
}

#[test]
fn a_reconcile_between_ticks_changes_nothing() {
    let mut world = mid_release();
    let status = world.canary.status.clone();
    for _ in 0..5 {
        let echo = world.advance(2).clone();
        assert!(echo.actions.is_empty() && echo.events.is_empty() && echo.checks.is_empty());
    }
    assert_eq!(world.canary.status, status);
}

#[test]
fn restart_mid_release_starts_the_analysis_over_from_the_primary() {
    let mut world = mid_release();
    world.annotate(RESTART_ANNOTATION, "s1");
    let restart = world.advance(1).clone();
    assert_eq!(restart.phase, Some(Phase::Progressing));
    assert_eq!(restart.routes, Some(Routes::PRIMARY_ONLY));
    assert!(
        restart.events.contains(
            &"Normal: Restart requested! Restarting analysis for podinfo.test".to_string()
        ),
        "{:?}",
        restart.events
    );
    let handled = world.status().handled_requests.unwrap();
    assert_eq!(handled.restart.as_deref(), Some("s1"));
    // The analysis climbs the weights again from the first step, and promotes.
    let weights: Vec<i32> = (0..3).map(|_| world.advance(15).weight).collect();
    assert_eq!(weights, [10, 20, 30]);
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Succeeded)));
    assert_eq!(world.primary_image(), "podinfo:6.0.1");
}

#[test]
fn restart_after_a_promotion_analyses_the_current_revision_again() {
    let mut world = mid_release();
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Succeeded)));
    world.annotate(RESTART_ANNOTATION, "s2");
    let restart = world.advance(1).clone();
    assert_eq!(
        restart.phase,
        Some(Phase::Progressing),
        "{:?}",
        restart.events
    );
    assert!(restart.events.contains(
        &"Normal: Restart requested: running the analysis of podinfo.test's current revision again"
            .to_string()
    ));
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Succeeded)));
    // The token is acted on once.
    assert_eq!(world.advance(30).phase, Some(Phase::Succeeded));
}

#[test]
fn restart_is_refused_once_promotion_started() {
    let mut world = initialized(canary(json!({"interval": "15s", "stepWeight": 50})));
    world.rollout_seconds = 20;
    release(&mut world);
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Promoting)));
    world.annotate(RESTART_ANNOTATION, "s3");
    let refused = world.advance(15).clone();
    assert!(
        refused.events.contains(
            &"Warning: Restart refused: the promotion of podinfo.test has started".to_string()
        ),
        "{:?}",
        refused.events
    );
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Succeeded)));
}
