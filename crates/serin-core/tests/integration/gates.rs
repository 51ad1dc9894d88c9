//! Gating webhooks: confirm-rollout, confirm-traffic-increase, confirm-promotion, rollback, pre-rollout.

use crate::common::*;
use serde_json::json;
use serin_api::{HookType, Phase};
use serin_core::simulation::{World, healthy};
use serin_core::{Check, Outcome, Routes};
use std::cell::Cell;
use std::rc::Rc;

/// A world whose hook `gate` answers from a switch the test flips; other checks are healthy.
fn with_gate(hook_type: &str, extra: serde_json::Value) -> (World, Rc<Cell<bool>>) {
    let mut analysis = json!({
        "interval": "15s", "stepWeight": 10, "maxWeight": 20, "threshold": 2,
        "webhooks": [{"name": "gate", "type": hook_type, "url": "http://loadtester.test/gate/check"}]
    });
    if let (Some(a), Some(e)) = (analysis.as_object_mut(), extra.as_object()) {
        a.extend(e.clone());
    }
    let mut world = initialized(canary(analysis));
    let open = Rc::new(Cell::new(false));
    let switch = open.clone();
    world.respond(move |check, now| match check {
        Check::Hook { name, .. } if name == "gate" => Outcome::Hook(if switch.get() {
            Ok(())
        } else {
            Err("gate closed".into())
        }),
        other => healthy(other, now),
    });
    (world, open)
}

fn gate_calls(world: &World, from: usize) -> Vec<(HookType, Phase)> {
    world.log[from..]
        .iter()
        .flat_map(|t| t.checks.clone())
        .filter_map(|c| match c {
            Check::Hook {
                name,
                hook_type,
                phase,
            } if name == "gate" => Some((hook_type, phase)),
            _ => None,
        })
        .collect()
}

#[test]
fn confirm_rollout_holds_a_new_revision_in_waiting() {
    let (mut world, open) = with_gate("confirm-rollout", json!({}));
    let start = world.log.len();
    world.set_target_image("podinfo:6.0.1");
    let held = world.reconcile().clone();
    assert_eq!(held.phase, Some(Phase::Waiting));
    assert_eq!(
        held.events,
        vec!["Warning: Halt podinfo.test advancement waiting for approval gate"]
    );
    assert!(held.actions.is_empty(), "the target stays at zero replicas");
    for _ in 0..3 {
        let t = world.advance(15).clone();
        assert_eq!(t.phase, Some(Phase::Waiting));
        assert!(t.events.is_empty(), "the halt is announced once");
    }
    assert_eq!(world.target_replicas(), 0);
    open.set(true);
    let go = world.advance(15).clone();
    assert_eq!(go.phase, Some(Phase::Progressing));
    assert_eq!(
        go.events,
        vec![
            "Normal: Confirm-rollout check gate passed",
            "Normal: New revision detected! Scaling up podinfo.test"
        ]
    );
    assert_eq!(world.target_replicas(), 1);
    // Payload phase is the phase the canary was in: Initialized, then Waiting.
    let calls = gate_calls(&world, start);
    assert_eq!(calls[0], (HookType::ConfirmRollout, Phase::Initialized));
    assert!(
        calls[1..]
            .iter()
            .all(|c| *c == (HookType::ConfirmRollout, Phase::Waiting))
    );
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Succeeded)));
}

#[test]
fn confirm_traffic_increase_holds_the_weight_without_failing_checks() {
    let (mut world, open) = with_gate("confirm-traffic-increase", json!({}));
    release(&mut world);
    for _ in 0..4 {
        let t = world.advance(15).clone();
        assert_eq!(t.phase, Some(Phase::Progressing));
        assert_eq!(t.routes, Some(Routes::PRIMARY_ONLY));
    }
    assert_event(
        &world,
        "Warning: Halt podinfo.test advancement waiting for traffic increase approval gate",
    );
    assert_eq!(world.status().failed_checks, 0);
    open.set(true);
    world.advance(15);
    assert_eq!(world.routes.unwrap().canary, 10);
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Succeeded)));
}

#[test]
fn confirm_promotion_waits_with_analysis_running() {
    let (mut world, open) = with_gate(
        "confirm-promotion",
        json!({"metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}}]}),
    );
    let start = release(&mut world);
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::WaitingPromotion)));
    assert_event(
        &world,
        "Warning: Halt podinfo.test advancement waiting for promotion approval gate",
    );
    for _ in 0..3 {
        let t = world.advance(15).clone();
        assert_eq!(t.phase, Some(Phase::WaitingPromotion));
        assert_eq!(
            t.routes.unwrap().canary,
            20,
            "traffic stays at the last step"
        );
        assert_eq!(t.weight, 20, "status shows the real weight");
        assert!(t.checks.contains(&Check::Metric {
            name: "request-success-rate".into()
        }));
    }
    open.set(true);
    let go = world.advance(15).clone();
    assert_eq!(go.phase, Some(Phase::Promoting));
    assert!(
        go.events
            .contains(&"Normal: Confirm-promotion check gate passed".to_string())
    );
    assert!(
        gate_calls(&world, start)
            .iter()
            .all(|c| c.1 == Phase::Progressing)
    );
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Succeeded)));
}

#[test]
fn a_closed_promotion_gate_still_rolls_back_on_failed_checks() {
    let (mut world, _open) = with_gate(
        "confirm-promotion",
        json!({"metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}}]}),
    );
    release(&mut world);
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::WaitingPromotion)));
    world.respond(|check, now| match check {
        Check::Metric { .. } => Outcome::Metric(serin_core::MetricReading::Value(10.0)),
        Check::Hook { name, .. } if name == "gate" => Outcome::Hook(Err("closed".into())),
        other => healthy(other, now),
    });
    assert!(world.run_until(15, 5, |w| w.phase() == Some(Phase::Failed)));
    assert_eq!(world.routes, Some(Routes::PRIMARY_ONLY));
}

#[test]
fn a_rollback_hook_that_answers_success_rolls_back_at_once() {
    let (mut world, open) = with_gate("rollback", json!({}));
    release(&mut world);
    world.advance(15);
    assert_eq!(world.routes.unwrap().canary, 10);
    assert_event(
        &world,
        "Normal: Rollback hook gate not signaling a rollback",
    );
    open.set(true);
    let t = world.advance(15).clone();
    assert_eq!(t.phase, Some(Phase::Failed));
    assert_eq!(t.routes, Some(Routes::PRIMARY_ONLY));
    assert_eq!(
        t.events[..2],
        [
            "Warning: Rollback check gate passed".to_string(),
            "Warning: Rolling back podinfo.test manual webhook invoked".to_string()
        ]
    );
    assert_eq!(world.target_replicas(), 0);
    assert!(t.actions.contains(&serin_core::Action::NotifyHooks {
        hook_type: HookType::PostRollout,
        phase: Phase::Failed
    }));
}

#[test]
fn a_failing_pre_rollout_hook_counts_as_a_failed_check() {
    let (mut world, open) = with_gate("pre-rollout", json!({}));
    release(&mut world);
    let t = world.advance(15).clone();
    assert_eq!(t.routes, Some(Routes::PRIMARY_ONLY));
    assert_eq!(world.status().failed_checks, 1);
    assert!(
        t.events.iter().any(|e| e
            == "Warning: Halt podinfo.test advancement pre-rollout check gate failed gate closed")
    );
    open.set(true);
    let t = world.advance(15).clone();
    assert_eq!(t.routes.unwrap().canary, 10);
    assert!(
        t.events
            .iter()
            .any(|e| e == "Normal: Pre-rollout check gate passed")
    );
}

#[test]
fn a_failing_rollout_hook_halts_before_metrics() {
    let (mut world, _open) = with_gate(
        "rollout",
        json!({"metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}}]}),
    );
    release(&mut world);
    world.advance(15);
    let t = world.advance(15).clone();
    assert_eq!(
        t.checks.len(),
        1,
        "the first failure ends the tick: {:?}",
        t.checks
    );
    assert_eq!(
        t.events,
        vec!["Warning: Halt podinfo.test advancement external check gate failed gate closed"]
    );
    assert!(world.run_until(15, 5, |w| w.phase() == Some(Phase::Failed)));
    assert_event(
        &world,
        "Warning: Rolling back podinfo.test failed checks threshold reached 2",
    );
}

/// A world whose gate `gate` gives no answer (every attempt timed out) until `answer` is set,
/// then answers with it; progressDeadlineSeconds is 60.
fn with_silent_gate(hook_type: &str) -> (World, Rc<Cell<Option<bool>>>) {
    let mut canary = canary(json!({
        "interval": "15s", "stepWeight": 10, "maxWeight": 20, "threshold": 2,
        "webhooks": [{"name": "gate", "type": hook_type, "url": "http://loadtester.test/gate/check"}]
    }));
    canary.spec.progress_deadline_seconds = Some(60);
    let mut world = initialized(canary);
    let answer = Rc::new(Cell::new(None));
    let switch = answer.clone();
    world.respond(move |check, now| match check {
        Check::Hook { name, .. } if name == "gate" => match switch.get() {
            None => Outcome::HookUnanswered(
                "webhook gate: POST http://loadtester.test/gate/check giving up after 1 attempt(s): no answer within 10s".into(),
            ),
            Some(true) => Outcome::Hook(Ok(())),
            Some(false) => Outcome::Hook(Err("gate closed".into())),
        },
        other => healthy(other, now),
    });
    (world, answer)
}

#[test]
fn a_silent_confirm_rollout_gate_holds_then_fails_the_release_at_the_progress_deadline() {
    let (mut world, _answer) = with_silent_gate("confirm-rollout");
    world.set_target_image("podinfo:6.0.1");
    let held = world.reconcile().clone();
    assert_eq!(held.phase, Some(Phase::Waiting));
    assert_eq!(
        held.events,
        vec![
            "Warning: confirm-rollout gate gate gave no answer: webhook gate: POST http://loadtester.test/gate/check giving up after 1 attempt(s): no answer within 10s; the release holds, and is rolled back if the gate stays silent for 60s (spec.progressDeadlineSeconds), 60s from now",
            "Warning: Halt podinfo.test advancement waiting for approval gate",
        ]
    );
    assert!(world.status().message.unwrap().contains("gave no answer"));
    for left in [45, 30, 15] {
        let t = world.advance(15).clone();
        assert_eq!(t.phase, Some(Phase::Waiting));
        assert!(
            t.events[0].ends_with(&format!("{left}s from now")),
            "{:?}",
            t.events
        );
    }
    let failed = world.advance(15).clone();
    assert_eq!(failed.phase, Some(Phase::Failed));
    assert_eq!(
        failed.events[0],
        "Warning: Rolling back podinfo.test: confirm-rollout gate gate gave no answer for 60s (spec.progressDeadlineSeconds): webhook gate: POST http://loadtester.test/gate/check giving up after 1 attempt(s): no answer within 10s"
    );
    assert_eq!(
        world.target_replicas(),
        0,
        "the new revision was never scaled up"
    );
    assert_eq!(world.primary_image(), "ghcr.io/stefanprodan/podinfo:6.0.0");
    assert_eq!(world.status().unanswered_gate_since, None);
    // The failed revision is not started again until it changes.
    for _ in 0..4 {
        assert_eq!(world.advance(15).phase, Some(Phase::Failed));
    }
}

#[test]
fn a_silent_promotion_gate_rolls_back_at_the_progress_deadline() {
    let (mut world, _answer) = with_silent_gate("confirm-promotion");
    release(&mut world);
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::WaitingPromotion)));
    assert_eq!(world.routes.unwrap().canary, 20, "held at the last step");
    let message = world.status().message.unwrap_or_default();
    assert!(message.contains("gave no answer"), "{message:?}");
    world.reconcile();
    assert_eq!(
        world.status().message.unwrap_or_default(),
        message,
        "a tick that is not due (a watch event) keeps the message"
    );
    assert!(world.run_until(15, 10, |w| w.phase() == Some(Phase::Failed)));
    assert_event(
        &world,
        "Warning: Rolling back podinfo.test: confirm-promotion gate gate gave no answer for 60s",
    );
    assert_eq!(world.routes, Some(Routes::PRIMARY_ONLY));
    assert_eq!(world.primary_image(), "ghcr.io/stefanprodan/podinfo:6.0.0");
    assert_eq!(world.status().message, None);
}

#[test]
fn a_gate_that_answers_closed_holds_past_the_progress_deadline() {
    let (mut world, answer) = with_silent_gate("confirm-traffic-increase");
    answer.set(Some(false));
    release(&mut world);
    for _ in 0..12 {
        let t = world.advance(15).clone();
        assert_eq!(t.phase, Some(Phase::Progressing), "{:?}", t.events);
        assert_eq!(t.routes, Some(Routes::PRIMARY_ONLY));
    }
    answer.set(Some(true));
    assert!(world.run_until(15, 20, |w| w.phase() == Some(Phase::Succeeded)));
}

#[test]
fn a_gate_that_answers_again_restarts_the_silence_clock() {
    let (mut world, answer) = with_silent_gate("confirm-traffic-increase");
    release(&mut world);
    for _ in 0..3 {
        world.advance(15);
    }
    assert!(world.status().unanswered_gate_since.is_some());
    answer.set(Some(false));
    world.advance(15);
    assert_eq!(world.status().unanswered_gate_since, None);
    answer.set(None);
    for _ in 0..4 {
        let t = world.advance(15).clone();
        assert_eq!(t.phase, Some(Phase::Progressing), "{:?}", t.events);
    }
    assert!(world.run_until(15, 3, |w| w.phase() == Some(Phase::Failed)));
    assert_eq!(world.routes, Some(Routes::PRIMARY_ONLY));
}
