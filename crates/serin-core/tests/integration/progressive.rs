//! Progressive canary timelines (Flagger e2e #1 and its rollback, weight ladders, stepped promotion).

use crate::common::*;
use serde_json::json;
use serin_api::Phase;
use serin_core::simulation::healthy;
use serin_core::{Action, Check, MetricReading, Outcome, Routes};

fn e2e_canary() -> serin_api::Canary {
    canary(json!({
        "interval": "15s", "threshold": 15, "maxWeight": 30, "stepWeight": 10,
        "metrics": [
            {"name": "request-success-rate", "thresholdRange": {"min": 99}, "interval": "1m"},
            {"name": "request-duration", "thresholdRange": {"max": 500}, "interval": "30s"}
        ],
        "webhooks": [{"name": "load-test", "url": "http://flagger-loadtester.test/",
                      "metadata": {"cmd": "hey -z 1m -q 10 -c 2 http://podinfo-canary.test:9898/"}}]
    }))
}

#[test]
fn initialization_creates_primary_then_scales_target_to_zero() {
    let mut world = serin_core::simulation::World::new(
        e2e_canary(),
        serin_core::simulation::deployment("podinfo", "test", "podinfo:6.0.0", 2),
    );
    world.rollout_seconds = 20;
    let first = world.reconcile().clone();
    assert_eq!(first.phase, Some(Phase::Initializing));
    assert!(first.actions.contains(&Action::EnsurePrimary {
        sync_template: true
    }));
    assert!(
        !first.actions.contains(&Action::ScaleTarget(0)),
        "the target keeps serving until the primary is ready"
    );
    assert!(
        first
            .events
            .iter()
            .any(|e| e.contains("podinfo-primary.test not ready"))
    );
    assert_eq!(world.primary_replicas(), 2);

    // A reconcile caused by the status write itself does nothing new.
    let echo = world.advance(1).clone();
    assert!(echo.actions.is_empty() && echo.events.is_empty());

    world.advance(14);
    assert_eq!(world.phase(), Some(Phase::Initializing));
    world.advance(15);
    assert_eq!(world.phase(), Some(Phase::Initialized));
    assert_eq!(world.target_replicas(), 0);
    assert_eq!(world.routes, Some(Routes::PRIMARY_ONLY));
    assert_event(&world, "Normal: Initialization done! podinfo.test");
    let status = world.status();
    assert_eq!(status.last_applied_spec, status.last_promoted_spec);
    assert_eq!(status.conditions[0].status, "True");
    assert_eq!(
        status.conditions[0].message,
        "Deployment initialization completed."
    );
}

#[test]
fn promotion_timeline_matches_flagger_e2e() {
    let mut world = initialized(e2e_canary());
    world.rollout_seconds = 20;
    let start = world.log.len();

    world.set_target_image("ghcr.io/stefanprodan/podinfo:6.0.1");
    let detect = world.reconcile().clone();
    assert_eq!(detect.phase, Some(Phase::Progressing));
    assert_eq!(
        detect.events,
        vec!["Normal: New revision detected! Scaling up podinfo.test"]
    );
    assert!(detect.actions.contains(&Action::ScaleTarget(1)));

    world.run_until(15, 20, |w| w.phase() == Some(Phase::Succeeded));
    assert_eq!(world.primary_image(), "ghcr.io/stefanprodan/podinfo:6.0.1");
    assert_eq!(world.target_replicas(), 0);
    assert_eq!(world.routes, Some(Routes::PRIMARY_ONLY));

    assert_eq!(
        phases(&world, start),
        vec![
            ("Progressing".into(), 0),  // new revision detected, target scaled up
            ("Progressing".into(), 0),  // canary not ready yet
            ("Progressing".into(), 10), // pre-rollout tick: 90/10
            ("Progressing".into(), 20),
            ("Progressing".into(), 30),
            ("Promoting".into(), 30), // copying the template to the primary
            ("Promoting".into(), 30), // primary rolling out
            ("Finalising".into(), 0), // all traffic back on the primary
            ("Succeeded".into(), 0),
        ]
    );
    let texts = events(&world);
    let expected_in_order = [
        "Normal: New revision detected! Scaling up podinfo.test",
        "Warning: canary deployment podinfo.test not ready: waiting for rollout to finish",
        "Normal: Starting canary analysis for podinfo.test",
        "Normal: Advance podinfo.test canary weight 10",
        "Normal: Advance podinfo.test canary weight 20",
        "Normal: Advance podinfo.test canary weight 30",
        "Normal: Copying podinfo.test template spec to podinfo-primary.test",
        "Warning: podinfo-primary.test not ready: waiting for rollout to finish",
        "Normal: Routing all traffic to primary",
        "Normal: Promotion completed! Scaling down podinfo.test",
    ];
    let mut cursor = 0;
    for wanted in expected_in_order {
        let found = texts[cursor..].iter().position(|e| e.starts_with(wanted));
        let Some(offset) = found else {
            panic!(
                "missing {wanted:?} after event #{cursor}; events:\n{}",
                texts.join("\n")
            );
        };
        cursor += offset + 1;
    }
    // The load test runs on analysis ticks only, never on the pre-rollout tick (G2).
    let hook_ticks: Vec<i32> = world.log[start..]
        .iter()
        .filter(|t| {
            t.checks
                .iter()
                .any(|c| matches!(c, Check::Hook { name, .. } if name == "load-test"))
        })
        .map(|t| t.weight)
        .collect();
    assert_eq!(hook_ticks, vec![20, 30, 30]);
    let status = world.canary.status.unwrap();
    assert_eq!(status.last_promoted_spec, status.last_applied_spec);
    assert_eq!(status.metric_checks.len(), 2);
    assert_eq!(
        status.conditions[0].message,
        "Canary analysis completed successfully, promotion finished."
    );
}

#[test]
fn failing_checks_roll_back_at_the_threshold() {
    let mut world = initialized(e2e_canary());
    world.respond(|check, now| match check {
        Check::Metric { name } if name == "request-success-rate" => {
            Outcome::Metric(MetricReading::Value(80.0))
        }
        other => healthy(other, now),
    });
    release(&mut world);
    world.run_until(15, 40, |w| w.phase() == Some(Phase::Failed));
    let status = world.status();
    assert_eq!(status.phase, Some(Phase::Failed));
    assert_eq!(world.routes, Some(Routes::PRIMARY_ONLY));
    assert_eq!(world.target_replicas(), 0);
    assert_eq!(world.primary_image(), "ghcr.io/stefanprodan/podinfo:6.0.0");
    let halts = events(&world)
        .iter()
        .filter(|e| e.contains("Halt podinfo.test advancement success rate 80.00% < 99%"))
        .count();
    assert_eq!(halts, 15, "one failed check per tick until the threshold");
    assert_event(
        &world,
        "Warning: Rolling back podinfo.test failed checks threshold reached 15",
    );
    assert_event(&world, "Warning: Canary failed! Scaling down podinfo.test");
    assert_eq!(status.conditions[0].status, "False");
    // The weight never moved past the first step while checks failed.
    assert!(world.log.iter().all(|t| t.weight <= 10));
    // A failed revision is not retried by itself.
    let quiet = world.advance(60).clone();
    assert!(quiet.actions.is_empty() && quiet.phase == Some(Phase::Failed));
}

/// Runs a release of a new image to the end and returns the primary weights the router went through
/// while Progressing (deduplicated).
fn primary_weights_until_promotion(analysis: serde_json::Value) -> Vec<i32> {
    let mut world = initialized(canary(analysis));
    let start = release(&mut world);
    assert!(world.run_until(15, 30, |w| w.phase() == Some(Phase::Succeeded)));
    let mut weights: Vec<i32> = Vec::new();
    for tick in &world.log[start..] {
        if tick.phase != Some(Phase::Progressing) {
            continue;
        }
        let w = tick.routes.map(|r| r.primary).unwrap_or(100);
        if weights.last() != Some(&w) {
            weights.push(w);
        }
    }
    weights
}

#[test]
fn weight_ladders_match_flagger() {
    assert_eq!(
        primary_weights_until_promotion(
            json!({"interval": "15s", "stepWeight": 20, "maxWeight": 50})
        ),
        vec![100, 80, 60, 40],
        "linear steps overshoot maxWeight"
    );
    assert_eq!(
        primary_weights_until_promotion(
            json!({"interval": "15s", "stepWeight": 50, "maxWeight": 100})
        ),
        vec![100, 50, 0]
    );
    assert_eq!(
        primary_weights_until_promotion(json!({"interval": "15s", "stepWeights": [1, 2, 10, 80]})),
        vec![100, 99, 98, 90, 20]
    );
}

#[test]
fn overflowing_step_weights_stop_at_one_hundred() {
    // Validation rejects weights above 100; the engine still caps them if it meets one.
    let analysis: serin_api::CanaryAnalysis =
        serde_json::from_value(json!({"stepWeights": [1, 2, 10, 110]})).unwrap();
    // From the rung at 10 the next step goes to 100, not 110.
    assert_eq!(serin_core::weights::next_step_weight(&analysis, 10), 90);
    assert_eq!(serin_core::weights::max_weight(&analysis), 100);
}

#[test]
fn stepped_promotion_returns_traffic_gradually() {
    let mut world = initialized(canary(json!({
        "interval": "15s", "stepWeight": 100, "maxWeight": 100, "stepWeightPromotion": 50
    })));
    let start = release(&mut world);
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Succeeded)));
    assert_eq!(
        distinct_phases(&world, start),
        vec![
            ("Progressing".into(), 0),
            ("Progressing".into(), 100),
            ("Promoting".into(), 100),
            ("Promoting".into(), 50),
            ("Finalising".into(), 0),
            ("Succeeded".into(), 0),
        ]
    );
    assert_event(&world, "Normal: Advance podinfo.test primary weight 50");
}

#[test]
fn mirroring_copies_traffic_before_shifting_it() {
    let mut world = initialized(canary(json!({
        "interval": "15s", "stepWeight": 10, "maxWeight": 20, "mirror": true, "mirrorWeight": 100
    })));
    let start = release(&mut world);
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Succeeded)));
    let mut routes: Vec<Routes> = world.log[start..].iter().filter_map(|t| t.routes).collect();
    routes.dedup();
    assert_eq!(
        routes[..4],
        [
            Routes::PRIMARY_ONLY,
            Routes {
                primary: 100,
                canary: 0,
                mirrored: true
            },
            Routes {
                primary: 90,
                canary: 10,
                mirrored: false
            },
            Routes {
                primary: 80,
                canary: 20,
                mirrored: false
            },
        ]
    );
    assert_event(&world, "Normal: Advance podinfo.test canary weight 0");
}

#[test]
fn a_new_revision_mid_analysis_restarts_it() {
    let mut world = initialized(canary(
        json!({"interval": "15s", "stepWeight": 10, "maxWeight": 50}),
    ));
    release(&mut world);
    world.run_until(15, 10, |w| w.routes.is_some_and(|r| r.canary == 20));
    let first_revision = world.status().last_applied_spec;

    world.set_target_image("podinfo:6.0.2");
    let restart = world.advance(15).clone();
    assert_eq!(restart.phase, Some(Phase::Progressing));
    assert_eq!(restart.weight, 0);
    assert_eq!(restart.routes, Some(Routes::PRIMARY_ONLY));
    assert_eq!(
        restart.events,
        vec!["Normal: New revision detected! Restarting analysis for podinfo.test"]
    );
    assert_ne!(world.status().last_applied_spec, first_revision);
    // The analysis starts over with a pre-rollout tick, then promotes the newest revision.
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Succeeded)));
    assert_eq!(world.primary_image(), "podinfo:6.0.2");
    let starts = events(&world)
        .iter()
        .filter(|e| e.contains("Starting canary analysis"))
        .count();
    assert_eq!(starts, 2);
}

#[test]
fn reverting_to_the_promoted_revision_mid_analysis_stops_the_release() {
    let mut world = initialized(canary(
        json!({"interval": "15s", "stepWeight": 10, "maxWeight": 50}),
    ));
    let promoted = world.status().last_promoted_spec;
    release(&mut world);
    world.run_until(15, 10, |w| w.routes.is_some_and(|r| r.canary == 20));

    world.set_target_image("ghcr.io/stefanprodan/podinfo:6.0.0");
    let tick = world.advance(15).clone();
    assert_eq!(tick.phase, Some(Phase::Succeeded));
    assert_eq!(tick.routes, Some(Routes::PRIMARY_ONLY));
    assert!(tick.actions.contains(&Action::ScaleTarget(0)));
    assert!(
        !tick
            .actions
            .iter()
            .any(|a| matches!(a, Action::Promote { .. }))
    );
    assert!(tick.events[0].contains("back on the promoted revision"));
    let status = world.status();
    assert_eq!(status.last_applied_spec, promoted);
    assert_eq!(status.last_promoted_spec, promoted);
    // Nothing further happens: the promoted revision is not a new one.
    assert!(world.advance(60).actions.is_empty());
}

#[test]
fn after_a_rollback_reverting_is_quiet_and_reapplying_retries() {
    let mut world = initialized(canary(
        json!({"interval": "15s", "stepWeight": 10, "threshold": 1,
        "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}}]}),
    ));
    world.respond(|check, now| match check {
        Check::Metric { .. } => Outcome::Metric(MetricReading::Value(50.0)),
        other => healthy(other, now),
    });
    world.set_target_image("podinfo:6.0.2");
    world.reconcile();
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Failed)));

    // Back to the promoted image: no release, status follows the target.
    world.set_target_image("ghcr.io/stefanprodan/podinfo:6.0.0");
    let revert = world.advance(15).clone();
    assert_eq!(revert.phase, Some(Phase::Failed));
    assert!(revert.actions.is_empty());
    let status = world.status();
    assert_eq!(status.last_applied_spec, status.last_promoted_spec);

    // Re-applying the failed version is a new release again.
    world.set_target_image("podinfo:6.0.2");
    let again = world.advance(15).clone();
    assert_eq!(again.phase, Some(Phase::Progressing));
    assert_eq!(
        again.events,
        vec!["Normal: New revision detected! Scaling up podinfo.test"]
    );
}

#[test]
fn a_config_change_starts_a_release() {
    let mut world = initialized(canary(json!({"interval": "15s", "stepWeight": 50})));
    world
        .configs
        .insert("configmap/podinfo-config".into(), "aaaa".into());
    let tick = world.advance(15).clone();
    assert_eq!(tick.phase, Some(Phase::Progressing));
    assert_eq!(
        tick.events,
        vec!["Normal: New revision detected! Scaling up podinfo.test"]
    );
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Succeeded)));
    let tracked = world.status().tracked_configs.unwrap();
    assert_eq!(tracked["configmap/podinfo-config"], "aaaa");
    // The same checksum again is not a new revision.
    assert!(world.advance(60).actions.is_empty());
}

#[test]
fn stepped_promotion_does_not_stall_when_the_router_was_reset() {
    let mut world = initialized(canary(json!({
        "interval": "15s", "stepWeight": 100, "maxWeight": 100, "stepWeightPromotion": 50
    })));
    release(&mut world);
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Promoting)));
    // Someone re-applied the VirtualService: all traffic is back on the primary mid-promotion.
    world.routes = Some(Routes::PRIMARY_ONLY);
    assert!(world.run_until(15, 4, |w| w.phase() == Some(Phase::Succeeded)));
    assert_eq!(world.primary_image(), "podinfo:6.0.1");
}

#[test]
fn a_step_whose_status_write_was_lost_gets_its_full_interval() {
    let mut world = initialized(canary(json!({
        "interval": "15s", "threshold": 2, "maxWeight": 60, "stepWeight": 20,
        "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}}]
    })));
    release(&mut world);
    assert!(world.run_until(15, 5, |w| w.status().canary_weight == 20));
    let before = world.canary.status.clone();
    let advanced = world.advance(15).clone();
    assert_eq!(advanced.routes.map(|r| r.canary), Some(40));
    // The API server failed the status write (or the operator died before it): the routes say 40,
    // the Canary still says 20, and the events of that tick were never written.
    world.canary.status = before;
    let retried = world.advance(1).clone();
    assert_eq!(
        retried.routes.map(|r| r.canary),
        Some(40),
        "no second step at once"
    );
    assert_eq!(world.status().canary_weight, 40);
    assert!(
        retried
            .events
            .contains(&"Normal: Advance podinfo.test canary weight 40".to_string()),
        "{:?}",
        retried.events
    );
    assert_eq!(world.advance(14).routes.map(|r| r.canary), Some(40));
    assert_eq!(world.advance(1).routes.map(|r| r.canary), Some(60));
}

#[test]
fn a_template_hash_kept_by_the_controller_stands_for_the_target() {
    let world = initialized(canary(json!({"interval": "15s", "stepWeight": 50})));
    let now = world.now + k8s_openapi::jiff::SignedDuration::from_secs(15);
    let template = &world.target.spec.as_ref().unwrap().template;
    let mut observation = world.observation();
    let phase_after =
        |observation: &serin_core::Observation| match serin_core::decide(observation, now) {
            serin_core::Decision::Plan(plan) => plan.status.phase,
            serin_core::Decision::Check(check) => panic!("no check expected, got {check:?}"),
        };
    // The hash of the template as it is: nothing new.
    observation.target_hash = Some(serin_core::revision::pod_template_hash(template));
    assert_eq!(phase_after(&observation), Some(Phase::Initialized));
    // Another hash is another revision, whatever the template says.
    observation.target_hash = Some("0".repeat(64));
    assert_eq!(phase_after(&observation), Some(Phase::Progressing));
}
