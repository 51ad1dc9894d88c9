//! Explicit steps: setWeight, timed and indefinite pauses, setCanaryScale, dynamic stable scale.

use crate::common::*;
use serde_json::json;
use serin_api::{PROMOTE_ANNOTATION, Phase};
use serin_core::simulation::healthy;
use serin_core::{Action, Check, MetricReading, Outcome, Routes};

fn steps_canary() -> serin_api::Canary {
    canary(json!({
        "interval": "15s", "threshold": 2,
        "steps": [
            {"setWeight": 10},
            {"pause": {"duration": "30s"}},
            {"setCanaryScale": {"weight": 50}},
            {"setWeight": 50},
            {"pause": {}}
        ],
        "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}}]
    }))
}

fn step_index(world: &serin_core::simulation::World) -> Option<i32> {
    world
        .canary
        .status
        .as_ref()
        .and_then(|s| s.current_step_index)
}

#[test]
fn steps_with_timed_and_indefinite_pauses() {
    let mut world = initialized_with_replicas(steps_canary(), 4);
    world.set_target_image("podinfo:6.0.1");
    let detect = world.reconcile().clone();
    assert!(detect.actions.contains(&Action::ScaleTarget(4)));
    assert_eq!(step_index(&world), None);

    let first = world.advance(15).clone();
    assert_eq!(
        first.routes,
        Some(Routes {
            primary: 90,
            canary: 10,
            mirrored: false
        })
    );
    assert_eq!(
        first.events,
        vec![
            "Normal: Starting canary analysis for podinfo.test",
            "Normal: Advance podinfo.test canary weight 10",
            "Normal: Step 1/5 completed (setWeight: 10)",
            "Normal: Paused podinfo.test at step 2/5 for 30s",
        ]
    );
    assert_eq!(step_index(&world), Some(1));

    // 15s into a 30s pause: still paused, still analysing.
    let mid = world.advance(15).clone();
    assert_eq!(mid.routes.unwrap().canary, 10);
    assert!(mid.checks.contains(&Check::Metric {
        name: "request-success-rate".into()
    }));
    assert_eq!(step_index(&world), Some(1));

    // The pause ends: the canary is halved, traffic goes to 50%, and the indefinite pause begins.
    let resume = world.advance(15).clone();
    assert_eq!(
        resume.routes,
        Some(Routes {
            primary: 50,
            canary: 50,
            mirrored: false
        })
    );
    assert!(resume.actions.contains(&Action::ScaleTarget(2)));
    assert_eq!(step_index(&world), Some(4));
    assert!(
        resume
            .events
            .iter()
            .any(|e| e.contains("Step 3/5 completed (setCanaryScale{weight: 50})"))
    );
    assert!(
        resume
            .events
            .iter()
            .any(|e| e.contains("at step 5/5 until promoted"))
    );

    for _ in 0..6 {
        let t = world.advance(15).clone();
        assert_eq!(t.phase, Some(Phase::Progressing));
        assert_eq!(t.routes.unwrap().canary, 50);
    }
    assert_eq!(world.target_replicas(), 2);

    world.annotate(PROMOTE_ANNOTATION, "1");
    let promoted = world.advance(1).clone();
    assert_eq!(
        promoted.phase,
        Some(Phase::Promoting),
        "{:?}",
        promoted.events
    );
    assert!(
        promoted
            .actions
            .contains(&Action::Promote { replicas: Some(4) })
    );
    assert_eq!(step_index(&world), Some(5));
    // The same annotation value is not a second promote.
    let again = world.advance(1).clone();
    assert!(again.actions.is_empty());

    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Succeeded)));
    assert_eq!(world.primary_image(), "podinfo:6.0.1");
    assert_eq!(world.primary_replicas(), 4);
    assert_eq!(world.target_replicas(), 0);
}

#[test]
fn failing_checks_during_a_pause_roll_back() {
    let mut world = initialized_with_replicas(steps_canary(), 4);
    release(&mut world);
    world.advance(15);
    world.respond(|check, now| match check {
        Check::Metric { .. } => Outcome::Metric(MetricReading::Value(42.0)),
        other => healthy(other, now),
    });
    assert!(world.run_until(15, 5, |w| w.phase() == Some(Phase::Failed)));
    assert_eq!(world.routes, Some(Routes::PRIMARY_ONLY));
    assert_eq!(
        step_index(&world),
        None,
        "the step index is reset with the run"
    );
}

#[test]
fn set_canary_scale_replicas_and_match_traffic_weight() {
    let mut world = initialized_with_replicas(
        canary(json!({
            "interval": "15s",
            "steps": [
                {"setCanaryScale": {"replicas": 1}},
                {"setWeight": 20},
                {"setCanaryScale": {"matchTrafficWeight": true}},
                {"setWeight": 60},
            ]
        })),
        10,
    );
    release(&mut world);
    // The new revision starts at the size the leading setCanaryScale gives it, never at full size.
    assert_eq!(world.target_replicas(), 1);
    let first = world.advance(15).clone();
    // setCanaryScale then setWeight run in one tick; the next setCanaryScale follows the setWeight.
    assert_eq!(first.routes.unwrap().canary, 20);
    assert!(!first.actions.contains(&Action::ScaleTarget(1)));
    assert!(
        first.actions.contains(&Action::ScaleTarget(2)),
        "{:?}",
        first.actions
    );
    assert_eq!(world.target_replicas(), 2);
    // 60% needs 6 canary pods (matchTrafficWeight): they come first, and traffic holds at 20%.
    let second = world.advance(15).clone();
    assert_eq!(second.routes.unwrap().canary, 20);
    assert!(second.actions.contains(&Action::ScaleTarget(6)));
    assert_eq!(
        second.events,
        vec!["Normal: Scaling podinfo.test to 6 replicas before routing 60% of traffic to it"]
    );
    assert_eq!(second.reasons, vec![serin_core::plan::reason::WAITING]);
    let third = world.advance(15).clone();
    assert_eq!(third.routes.unwrap().canary, 60);
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Succeeded)));
    assert_eq!(world.primary_replicas(), 10);
}

#[test]
fn dynamic_stable_scale_shrinks_the_primary_after_traffic_moves() {
    let mut world = initialized_with_replicas(
        canary(
            json!({"interval": "15s", "stepWeight": 20, "maxWeight": 60, "dynamicStableScale": true}),
        ),
        10,
    );
    release(&mut world);
    let mut seen = Vec::new();
    for _ in 0..4 {
        world.advance(15);
        seen.push((world.routes.unwrap().canary, world.primary_replicas()));
    }
    // The primary keeps the pods for the traffic it had before each step: scale-down lags by a tick.
    // The fourth tick promotes, which gives the primary its full size back for the new version.
    assert_eq!(seen, vec![(20, 10), (40, 8), (60, 6), (60, 10)]);
    assert_eq!(world.phase(), Some(Phase::Promoting));
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Succeeded)));
    assert_eq!(
        world.primary_replicas(),
        10,
        "promotion restores the primary's size"
    );
}

#[test]
fn dynamic_stable_scale_rollback_waits_for_the_primary() {
    let mut world = initialized_with_replicas(
        canary(
            json!({"interval": "15s", "stepWeight": 20, "maxWeight": 80, "threshold": 1,
            "dynamicStableScale": true,
            "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}}]}),
        ),
        10,
    );
    world.rollout_seconds = 20;
    release(&mut world);
    assert!(world.run_until(15, 10, |w| w.routes.is_some_and(|r| r.canary == 60)));
    assert_eq!(world.primary_replicas(), 6);
    world.respond(|check, now| match check {
        Check::Metric { .. } => Outcome::Metric(MetricReading::Value(1.0)),
        other => healthy(other, now),
    });
    world.advance(15); // the failing check
    let first = world.advance(15).clone();
    assert!(
        first.actions.contains(&Action::ScalePrimary(10)),
        "{:?}",
        first.actions
    );
    // 6 primary pods can serve 60%: the canary keeps 40% until the primary has grown.
    assert_eq!(
        first.routes,
        Some(Routes {
            primary: 60,
            canary: 40,
            mirrored: false
        })
    );
    // The release has failed; only the traffic is still on its way back.
    assert_eq!(first.phase, Some(Phase::Failed));
    assert!(!first.actions.contains(&Action::ScaleTarget(0)));
    assert!(world.run_until(15, 5, |w| w.routes == Some(Routes::PRIMARY_ONLY)));
    let back = world.log.last().unwrap().clone();
    assert_eq!(
        back.events,
        vec!["Warning: Canary failed! Scaling down podinfo.test"]
    );
    assert!(back.actions.contains(&Action::ScaleTarget(0)));
    assert_eq!(world.phase(), Some(Phase::Failed));
    assert_eq!(world.primary_replicas(), 10);
    assert_eq!(world.target_replicas(), 0);
}

fn requeue_secs(tick: &serin_core::simulation::TickRecord) -> u64 {
    tick.requeue_after.expect("a requeue").as_secs()
}

#[test]
fn a_timed_pause_ends_when_its_duration_has_passed_not_at_the_next_interval() {
    let mut world = initialized(canary(json!({
        "interval": "10s",
        "steps": [{"setWeight": 20}, {"pause": {"duration": "15s"}}, {"setWeight": 50}, {"pause": {}}]
    })));
    release(&mut world);
    assert_eq!(requeue_secs(world.log.last().unwrap()), 10);

    // The controller comes back when asked: the first tick sets 20% and starts the 15s pause.
    let entered = world.follow_requeue().clone();
    assert_eq!(entered.routes.unwrap().canary, 20);
    let pause_start = world.elapsed();
    assert_eq!(
        requeue_secs(&entered),
        10,
        "the pause ends after the next interval tick"
    );

    // The interval tick inside the pause analyses as usual, then asks to come back when it ends.
    let inside = world.follow_requeue().clone();
    assert_eq!(world.elapsed() - pause_start, 10);
    assert_eq!(inside.routes.unwrap().canary, 20);
    assert_eq!(step_index(&world), Some(1));
    assert_eq!(requeue_secs(&inside), 5, "points at the end of the pause");

    // A reconcile in between (the operator's own status write) changes nothing and keeps aiming there.
    let echo = world.advance(2).clone();
    assert!(echo.actions.is_empty() && echo.events.is_empty() && echo.checks.is_empty());
    assert_eq!(requeue_secs(&echo), 3);

    // At 15s the pause ends and the next step is taken, though only 5s passed since the last tick.
    let resumed = world.follow_requeue().clone();
    assert_eq!(world.elapsed() - pause_start, 15);
    assert_eq!(
        resumed.events,
        vec![
            "Normal: Step 2/4 completed (pause: 15s)",
            "Normal: Advance podinfo.test canary weight 50",
            "Normal: Step 3/4 completed (setWeight: 50)",
            "Normal: Paused podinfo.test at step 4/4 until promoted: annotate the Canary with serin.dev/promote=<new value>",
        ]
    );
    assert_eq!(resumed.routes.unwrap().canary, 50);
    // The interval cadence restarts from that tick; an indefinite pause has no end to aim at.
    assert_eq!(requeue_secs(&resumed), 10);
    let next = world.follow_requeue().clone();
    assert_eq!(world.elapsed() - pause_start, 25);
    assert_eq!(next.phase, Some(Phase::Progressing));
}

#[test]
fn a_pause_shorter_than_the_interval_ends_on_time() {
    let mut world = initialized(canary(json!({
        "interval": "10s",
        "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}}],
        "steps": [{"setWeight": 20}, {"pause": {"duration": "5s"}}, {"setWeight": 40}]
    })));
    release(&mut world);
    let entered = world.follow_requeue().clone();
    let pause_start = world.elapsed();
    assert_eq!(requeue_secs(&entered), 5);
    let resumed = world.follow_requeue().clone();
    assert_eq!(world.elapsed() - pause_start, 5);
    assert_eq!(resumed.routes.unwrap().canary, 40);
    assert!(
        resumed.checks.contains(&Check::Metric {
            name: "request-success-rate".into()
        }),
        "the metrics are checked before the step after the pause"
    );
}

#[test]
fn a_pause_end_that_finds_the_canary_unready_falls_back_to_the_interval() {
    let mut world = initialized(canary(json!({
        "interval": "10s",
        "steps": [{"setWeight": 20}, {"pause": {"duration": "15s"}}, {"setWeight": 50}]
    })));
    release(&mut world);
    world.follow_requeue();
    let pause_start = world.elapsed();
    world.follow_requeue();

    // The canary's pods go unready just before the pause ends.
    world.failing.insert("target");
    let generation = world.target.metadata.generation.unwrap();
    world.target.metadata.generation = Some(generation + 1);
    let blocked = world.follow_requeue().clone();
    assert_eq!(world.elapsed() - pause_start, 15);
    assert!(blocked.events[0].contains("canary deployment podinfo.test not ready"));
    assert_eq!(blocked.routes.unwrap().canary, 20);
    assert_eq!(
        requeue_secs(&blocked),
        10,
        "the ended pause does not make every reconcile due"
    );
    assert!(world.advance(1).checks.is_empty());

    world.failing.remove("target");
    world.target.metadata.generation = Some(generation + 2);
    world.advance(9);
    assert_eq!(world.elapsed() - pause_start, 25);
    assert_eq!(world.routes.unwrap().canary, 50);
}

#[test]
fn a_reconcile_between_ticks_requeues_to_the_millisecond_the_next_tick_is_due() {
    use k8s_openapi::jiff::SignedDuration;
    let mut world = initialized(canary(json!({
        "interval": "10s", "stepWeight": 20, "maxWeight": 60
    })));
    world.now += SignedDuration::from_millis(250);
    release(&mut world);
    let started = world.status().last_tick_time.expect("the release ticked").0;
    assert_eq!(
        started.subsec_millisecond(),
        250,
        "the tick's time is kept below the second"
    );

    // Something else (a Deployment's status, the operator's own write) wakes the Canary 2.4 s
    // later: it waits exactly until one interval after the last tick, not to a whole second.
    world.now += SignedDuration::from_millis(2_400);
    let early = world.reconcile().clone();
    assert!(early.actions.is_empty() && early.events.is_empty());
    assert_eq!(
        early.requeue_after,
        Some(std::time::Duration::from_millis(7_600))
    );
    world.now += SignedDuration::from_millis(7_599);
    assert!(
        world.reconcile().events.is_empty(),
        "1 ms early is too early"
    );
    assert_eq!(
        world.log.last().unwrap().requeue_after,
        Some(std::time::Duration::from_millis(1))
    );
    world.now += SignedDuration::from_millis(1);
    let due = world.reconcile().clone();
    assert_eq!(due.routes.unwrap().canary, 20);
    assert_eq!(
        world.status().last_tick_time.unwrap().0,
        started + SignedDuration::from_secs(10)
    );
}

#[test]
fn route_steps_complete_at_once_and_the_release_goes_on_to_the_next_step() {
    let mut world = initialized_with_replicas(
        canary(json!({
            "interval": "15s", "threshold": 2,
            "managedRoutes": [{"name": "testers"}, {"name": "copies"}],
            "steps": [
                {"setWeight": 10},
                {"setHeaderRoute": {"name": "testers", "match": [
                    {"headerName": "x-tester", "headerValue": {"exact": "yes"}}]}},
                {"setMirrorRoute": {"name": "copies", "match": [{"method": {"exact": "GET"}}]}},
                {"pause": {}}
            ]
        })),
        2,
    );
    world.set_target_image("podinfo:6.0.1");
    world.reconcile();
    let first = world.advance(15).clone();
    assert_eq!(first.weight, 10);
    assert_eq!(step_index(&world), Some(1));
    let routes = world.advance(15).clone();
    assert_eq!(
        routes.events,
        vec![
            "Normal: Step 2/4 completed (setHeaderRoute: testers set)",
            "Normal: Step 3/4 completed (setMirrorRoute: copies set)",
            "Normal: Paused podinfo.test at step 4/4 until promoted: annotate the Canary with serin.dev/promote=<new value>",
        ]
    );
    assert_eq!(step_index(&world), Some(3));
    assert_eq!(routes.weight, 10);
}
