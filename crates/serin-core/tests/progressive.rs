//! Progressive canary timelines (Flagger e2e #1 and its rollback, weight ladders, stepped promotion).

mod common;
use common::*;
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
    let status = world.canary.status.clone().unwrap();
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
    world.set_target_image("podinfo:6.0.1");
    world.reconcile();
    world.run_until(15, 40, |w| w.phase() == Some(Phase::Failed));
    let status = world.canary.status.clone().unwrap();
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
