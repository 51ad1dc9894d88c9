//! Event reasons: every event says what happened in its reason, while its message keeps Flagger's text.

use crate::common::*;
use serde_json::json;
use serin_api::{ABORT_ANNOTATION, PROMOTE_ANNOTATION, Phase, RETRY_ANNOTATION};
use serin_core::plan::reason;
use serin_core::simulation::{World, deployment, healthy};
use serin_core::{Check, MetricReading, Outcome};

/// Asserts the reason of the first event containing each needle, from tick `from` on.
fn assert_reasons(world: &World, from: usize, expected: &[(&str, &str)]) {
    for (needle, wanted) in expected {
        assert_eq!(
            reason_of(world, from, needle),
            *wanted,
            "reason of the event containing {needle:?}"
        );
    }
}

/// Asserts that every event of the log has one of the documented reasons, and none is `Synced`.
fn assert_every_reason_documented(world: &World) {
    for (r, event) in reasoned_events(world) {
        assert!(
            reason::ALL.contains(&r) && r != "Synced",
            "undocumented reason {r:?} for {event:?}"
        );
    }
}

fn analysed() -> serin_api::Canary {
    canary(json!({
        "interval": "15s", "threshold": 2, "maxWeight": 20, "stepWeight": 10,
        "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}}]
    }))
}

#[test]
fn the_reasons_are_documented_camel_case_words() {
    let mut seen = std::collections::BTreeSet::new();
    for r in reason::ALL {
        assert!(seen.insert(*r), "{r} is listed twice");
        assert!(
            r.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && r.chars().all(|c| c.is_ascii_alphanumeric()),
            "{r} is not CamelCase"
        );
    }
    assert!(!reason::ALL.contains(&"Synced"));
}

#[test]
fn a_promotion_tells_each_stage_by_its_reason() {
    let mut world = World::new(
        analysed(),
        deployment("podinfo", "test", "podinfo:6.0.0", 2),
    );
    world.rollout_seconds = 20;
    world.reconcile();
    assert!(world.run_until(15, 5, |w| w.phase() == Some(Phase::Initialized)));
    world.set_target_image("podinfo:6.0.1");
    world.reconcile();
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Succeeded)));

    assert_reasons(
        &world,
        0,
        &[
            ("podinfo-primary.test not ready", reason::INITIALIZING),
            ("Initialization done! podinfo.test", reason::INITIALIZED),
            (
                "New revision detected! Scaling up podinfo.test",
                reason::NEW_REVISION,
            ),
            ("canary deployment podinfo.test not ready", reason::WAITING),
            (
                "Starting canary analysis for podinfo.test",
                reason::PROGRESSING,
            ),
            ("Advance podinfo.test canary weight 10", reason::PROGRESSING),
            ("Advance podinfo.test canary weight 20", reason::PROGRESSING),
            (
                "Copying podinfo.test template spec to podinfo-primary.test",
                reason::PROMOTING,
            ),
            ("Routing all traffic to primary", reason::PROMOTING),
            (
                "Promotion completed! Scaling down podinfo.test",
                reason::PROMOTED,
            ),
        ],
    );
    // While Promoting, the primary's rolling update is a wait like any other.
    let promoting = world
        .log
        .iter()
        .position(|t| t.phase == Some(Phase::Promoting))
        .unwrap();
    assert_eq!(
        reason_of(&world, promoting, "podinfo-primary.test not ready"),
        reason::WAITING
    );
    assert_every_reason_documented(&world);
}

#[test]
fn a_rollback_tells_the_failed_checks_and_the_rollback_apart() {
    let mut world = initialized(analysed());
    world.respond(|check, now| match check {
        Check::Metric { .. } => Outcome::Metric(MetricReading::Value(80.0)),
        other => healthy(other, now),
    });
    let start = release(&mut world);
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Failed)));
    assert_reasons(
        &world,
        start,
        &[
            (
                "Halt podinfo.test advancement success rate 80.00% < 99%",
                reason::CHECK_FAILED,
            ),
            (
                "Rolling back podinfo.test failed checks threshold reached 2",
                reason::ROLLED_BACK,
            ),
            (
                "Canary failed! Scaling down podinfo.test",
                reason::ROLLED_BACK,
            ),
        ],
    );
    let failed = world.log.last().unwrap();
    assert_eq!(
        failed.reasons,
        vec![reason::ROLLED_BACK, reason::ROLLED_BACK]
    );

    // A retry is a request handled, then a new run; an abort is a rollback.
    world.respond(healthy);
    let retry = world.log.len();
    world.annotate(RETRY_ANNOTATION, "r1");
    world.advance(1);
    world.advance(15);
    world.annotate(ABORT_ANNOTATION, "a1");
    world.advance(1);
    assert_eq!(world.phase(), Some(Phase::Failed));
    assert_reasons(
        &world,
        retry,
        &[
            (
                "Retrying the release of podinfo.test",
                reason::REQUEST_HANDLED,
            ),
            (
                "New revision detected! Scaling up podinfo.test",
                reason::NEW_REVISION,
            ),
            (
                "Rolling back podinfo.test aborted by user",
                reason::ROLLED_BACK,
            ),
        ],
    );
    // An abort with nothing to abort is acknowledged.
    let idle = world.log.len();
    world.annotate(ABORT_ANNOTATION, "a2");
    world.advance(1);
    assert_reasons(
        &world,
        idle,
        &[("Nothing to abort", reason::REQUEST_HANDLED)],
    );
    assert_every_reason_documented(&world);
}

#[test]
fn waits_pauses_gates_skips_and_suspensions_have_their_reasons() {
    // A pause, a manual promote out of it, and a closed confirm-promotion gate.
    let mut world = initialized(canary(json!({
        "interval": "15s",
        "steps": [{"setWeight": 20}, {"pause": {}}],
        "webhooks": [{"name": "gate", "type": "confirm-promotion", "url": "http://gate.test/"}]
    })));
    world.respond(|check, now| match check {
        Check::Hook { name, .. } if name == "gate" => Outcome::Hook(Err("closed".into())),
        other => healthy(other, now),
    });
    let start = release(&mut world);
    world.advance(15);
    world.advance(15);
    world.annotate(PROMOTE_ANNOTATION, "p1");
    world.advance(1);
    assert_eq!(world.phase(), Some(Phase::WaitingPromotion));
    assert_reasons(
        &world,
        start,
        &[
            ("Step 1/2 completed (setWeight: 20)", reason::PROGRESSING),
            ("Paused podinfo.test at step 2/2", reason::WAITING),
            ("leaves the pause at step 2/2", reason::REQUEST_HANDLED),
            (
                "Halt podinfo.test advancement waiting for promotion approval gate",
                reason::WAITING,
            ),
        ],
    );
    assert_every_reason_documented(&world);

    // A failing rollout webhook is a failed check.
    let mut hooked = initialized(canary(json!({
        "interval": "15s", "stepWeight": 10, "threshold": 5,
        "webhooks": [{"name": "smoke", "url": "http://smoke.test/"}]
    })));
    hooked.respond(|check, now| match check {
        Check::Hook { name, .. } if name == "smoke" => Outcome::Hook(Err("503".into())),
        other => healthy(other, now),
    });
    let start = release(&mut hooked);
    hooked.advance(15);
    hooked.advance(15);
    assert_reasons(
        &hooked,
        start,
        &[(
            "Halt podinfo.test advancement external check smoke failed",
            reason::CHECK_FAILED,
        )],
    );

    // skipAnalysis promotes with a reason of its own; suspend says it is suspended.
    let mut skipped = initialized(canary(json!({"interval": "15s", "stepWeight": 10})));
    skipped.canary.spec.skip_analysis = Some(true);
    let start = release(&mut skipped);
    skipped.advance(15);
    assert_reasons(
        &skipped,
        start,
        &[
            ("Canary analysis was skipped", reason::SKIPPED),
            ("Copying podinfo.test template spec", reason::PROMOTING),
        ],
    );
    skipped.canary.spec.suspend = Some(true);
    skipped.advance(15);
    assert_eq!(skipped.log.last().unwrap().reasons, vec![reason::SUSPENDED]);
    assert_every_reason_documented(&skipped);
}

#[test]
fn a_failed_promotion_is_not_called_a_rollback() {
    let mut world = initialized(canary(json!({"interval": "15s", "stepWeight": 50})));
    world.canary.spec.progress_deadline_seconds = Some(30);
    release(&mut world);
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Promoting)));
    world.failing.insert("primary");
    world.rollout_seconds = 1;
    let promoting = world.log.len();
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Failed)));
    assert_reasons(
        &world,
        promoting,
        &[(
            "Promotion of podinfo.test failed, primary not ready",
            reason::PROMOTION_FAILED,
        )],
    );
    assert!(
        !reasoned_events(&world)
            .iter()
            .any(|(r, _)| *r == reason::ROLLED_BACK)
    );
}

#[test]
fn an_invalid_spec_and_a_missing_target_keep_their_reasons() {
    let mut world = initialized(analysed());
    world.canary.spec.analysis.as_mut().unwrap().max_weight = Some(150);
    let tick = world.advance(15).clone();
    assert_eq!(tick.reasons, vec![reason::INVALID_SPEC]);

    let mut observation = serin_core::Observation::new(analysed());
    observation.target = None;
    let serin_core::Decision::Plan(plan) = serin_core::decide(&observation, world.now) else {
        panic!("no check is needed to report a missing target");
    };
    assert_eq!(plan.events[0].reason, reason::TARGET_NOT_FOUND);
}
