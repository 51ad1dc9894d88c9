//! The `analysis` step, tick by tick: measurements `interval` apart, `count` and `failureLimit`,
//! dry runs, inconclusive results, and the history kept in status.

use crate::common::*;
use serde_json::json;
use serin_api::{AnalysisPhase, PROMOTE_ANNOTATION, Phase};
use serin_core::simulation::healthy;
use serin_core::{Check, Measurement, Outcome};

fn analysis_canary(extra: serde_json::Value) -> serin_api::Canary {
    let mut analysis = json!({
        "metrics": [{
            "name": "errors", "templateRef": {"name": "errors"},
            "count": 3, "interval": "10s", "failureLimit": 1,
            "successCondition": "result[0] <= 0.01"
        }]
    });
    if let (Some(a), Some(e)) = (analysis.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            a.insert(k.clone(), v.clone());
        }
    }
    canary(json!({
        "interval": "15s", "threshold": 2,
        "steps": [
            {"setWeight": 20},
            {"analysis": analysis},
            {"setWeight": 60}
        ]
    }))
}

fn measured(phase: AnalysisPhase, value: &str) -> Outcome {
    Outcome::Measurement(Measurement {
        phase,
        value: Some(value.into()),
        message: None,
    })
}

/// Answers measurements of `errors` with `phase`, and everything else as healthy.
fn errors_measured(
    phase: AnalysisPhase,
) -> impl FnMut(&Check, k8s_openapi::jiff::Timestamp) -> Outcome {
    move |check, now| match check {
        Check::Measure { name, .. } if name == "errors" => measured(phase, "[0.5]"),
        Check::Measure { .. } => measured(AnalysisPhase::Failed, "[1]"),
        other => healthy(other, now),
    }
}

fn measures(record: &serin_core::simulation::TickRecord) -> usize {
    record
        .checks
        .iter()
        .filter(|c| matches!(c, Check::Measure { .. }))
        .count()
}

fn step_run(world: &serin_core::simulation::World) -> serin_api::AnalysisRunStatus {
    world
        .status()
        .analysis_runs
        .iter()
        .rev()
        .find(|r| r.step == Some(1))
        .cloned()
        .expect("the analysis step has a run")
}

#[test]
fn a_faulty_version_fails_at_the_analysis_step_and_never_reaches_the_next_weight() {
    let mut world = initialized_with_replicas(analysis_canary(json!({})), 2);
    world.respond(errors_measured(AnalysisPhase::Failed));
    world.set_target_image("podinfo:6.0.1");
    world.reconcile();

    // t=15: setWeight 20 completes; the analysis step starts and asks to come back at once.
    let entered = world.advance(15).clone();
    assert_eq!(entered.weight, 20);
    assert!(
        entered
            .events
            .iter()
            .any(|e| e.contains("Analysis at step 2/3 of podinfo.test started: measuring errors"))
    );
    assert_eq!(measures(&entered), 0);

    // First measurement: failed (1), within failureLimit 1.
    let first = world.follow_requeue().clone();
    assert_eq!(measures(&first), 1);
    assert_eq!(first.phase, Some(Phase::Progressing));
    assert_eq!(step_run(&world).metrics[0].failed, 1);
    assert_eq!(
        first.requeue_after,
        Some(std::time::Duration::from_secs(10))
    );

    // Five seconds on, nothing is due: no measurement.
    let idle = world.advance(5).clone();
    assert_eq!(measures(&idle), 0);

    // Ten seconds after the first: the second failure passes failureLimit and rolls back.
    let second = world.advance(5).clone();
    assert_eq!(measures(&second), 1);
    assert_eq!(second.phase, Some(Phase::Failed));
    assert!(second.events.iter().any(|e| e.contains(
        "the analysis at step 2/3 failed: metric \"errors\" assessed Failed due to failed (2) > failureLimit (1)"
    )), "{:?}", second.events);
    assert!(
        world.log.iter().all(|t| t.weight <= 20),
        "never past setWeight 20"
    );

    let run = step_run(&world);
    assert_eq!(run.phase, AnalysisPhase::Failed);
    assert_eq!(run.metrics[0].count, 2);
    assert_eq!(run.metrics[0].measurements.len(), 2);
    assert_eq!(
        run.metrics[0].measurements[1].value.as_deref(),
        Some("[0.5]")
    );
}

#[test]
fn a_healthy_version_passes_after_count_measurements_and_goes_on() {
    let mut world = initialized_with_replicas(analysis_canary(json!({})), 2);
    world.respond(errors_measured(AnalysisPhase::Successful));
    world.set_target_image("podinfo:6.0.1");
    world.reconcile();
    world.advance(15);
    let mut taken = 0;
    for _ in 0..10 {
        let tick = world.follow_requeue().clone();
        taken += measures(&tick);
        if tick.weight == 60 {
            break;
        }
    }
    assert_eq!(taken, 3, "count 3");
    assert_eq!(world.status().canary_weight, 60);
    let run = step_run(&world);
    assert_eq!(run.phase, AnalysisPhase::Successful);
    assert_eq!(run.metrics[0].successful, 3);
    let times: Vec<_> = run.metrics[0]
        .measurements
        .iter()
        .map(|m| m.finished_at.clone().unwrap().0)
        .collect();
    assert_eq!(times[1].duration_since(times[0]).as_secs(), 10);
    assert_eq!(times[2].duration_since(times[1]).as_secs(), 10);
}

#[test]
fn a_dry_run_metric_that_always_fails_is_recorded_and_never_blocks() {
    let extra = json!({
        "metrics": [
            {"name": "errors", "templateRef": {"name": "errors"}, "count": 2, "interval": "10s"},
            {"name": "trial", "templateRef": {"name": "trial"}, "count": 2, "interval": "10s"}
        ],
        "dryRun": [{"metricName": "trial"}]
    });
    let mut world = initialized_with_replicas(analysis_canary(extra), 2);
    world.respond(errors_measured(AnalysisPhase::Successful));
    world.set_target_image("podinfo:6.0.1");
    world.reconcile();
    world.advance(15);
    for _ in 0..10 {
        if world.follow_requeue().weight == 60 {
            break;
        }
    }
    assert_eq!(world.status().canary_weight, 60);
    let run = step_run(&world);
    assert_eq!(run.phase, AnalysisPhase::Successful);
    let trial = run.metrics.iter().find(|m| m.name == "trial").unwrap();
    assert!(trial.dry_run);
    assert_eq!(trial.phase, AnalysisPhase::Failed);
    assert!(trial.failed >= 1);
}

#[test]
fn an_inconclusive_analysis_holds_until_promoted() {
    let mut world = initialized_with_replicas(analysis_canary(json!({})), 2);
    world.respond(errors_measured(AnalysisPhase::Inconclusive));
    world.set_target_image("podinfo:6.0.1");
    world.reconcile();
    world.advance(15);
    let held = world.follow_requeue().clone();
    assert_eq!(held.phase, Some(Phase::Progressing));
    assert!(world.status().message.unwrap().contains("is Inconclusive"));
    let later = world.advance(30).clone();
    assert_eq!(later.weight, 20);
    assert_eq!(measures(&later), 0, "an assessed run is not measured again");
    world.annotate(PROMOTE_ANNOTATION, "go");
    let promoted = world.reconcile().clone();
    assert_eq!(promoted.weight, 60);
}

#[test]
fn errors_in_a_row_past_the_limit_end_the_analysis_as_error() {
    let extra = json!({"metrics": [{
        "name": "errors", "templateRef": {"name": "errors"}, "count": 10, "interval": "10s",
        "consecutiveErrorLimit": 1
    }]});
    let mut world = initialized_with_replicas(analysis_canary(extra), 2);
    world.respond(errors_measured(AnalysisPhase::Error));
    world.set_target_image("podinfo:6.0.1");
    world.reconcile();
    world.advance(15);
    world.follow_requeue();
    let second = world.follow_requeue().clone();
    assert_eq!(second.phase, Some(Phase::Failed));
    assert_eq!(step_run(&world).phase, AnalysisPhase::Error);
    assert!(
        second
            .events
            .iter()
            .any(|e| e.contains("consecutiveErrors (2) > consecutiveErrorLimit (1)"))
    );
}

#[test]
fn interval_checks_keep_each_reading_in_the_history() {
    let mut world = initialized_with_replicas(
        canary(json!({
            "interval": "15s", "threshold": 2, "stepWeight": 20, "maxWeight": 60,
            "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}}]
        })),
        2,
    );
    world.set_target_image("podinfo:6.0.1");
    world.reconcile();
    for _ in 0..4 {
        world.advance(15);
    }
    let run = world
        .status()
        .analysis_runs
        .into_iter()
        .find(|r| r.name == "interval")
        .expect("an interval run");
    let metric = &run.metrics[0];
    assert_eq!(metric.name, "request-success-rate");
    assert_eq!(metric.count as usize, metric.measurements.len());
    assert!(metric.count >= 3, "{metric:?}");
    assert!(
        metric
            .measurements
            .iter()
            .all(|m| m.value.as_deref() == Some("100"))
    );
}

fn background_canary() -> serin_api::Canary {
    canary(json!({
        "interval": "15s", "threshold": 2,
        "steps": [{"setWeight": 20}, {"pause": {"duration": "40s"}}, {"setWeight": 60}],
        "backgroundAnalysis": {
            "startingStep": 1,
            "metrics": [{"name": "errors", "templateRef": {"name": "errors"}, "interval": "10s"}]
        }
    }))
}

fn background_run(world: &serin_core::simulation::World) -> Option<serin_api::AnalysisRunStatus> {
    world
        .status()
        .analysis_runs
        .into_iter()
        .rev()
        .find(|r| r.name == "background")
}

#[test]
fn a_background_analysis_starts_at_its_step_and_a_failure_rolls_back() {
    let mut world = initialized_with_replicas(background_canary(), 2);
    world.respond(errors_measured(AnalysisPhase::Failed));
    world.set_target_image("podinfo:6.0.1");
    world.reconcile();
    let first = world.advance(15).clone();
    assert_eq!(first.weight, 20);
    // Step 0 is before startingStep 1: nothing measured yet.
    assert_eq!(measures(&first), 0);
    assert!(background_run(&world).is_none());
    let failed = world.advance(15).clone();
    assert_eq!(measures(&failed), 1);
    assert_eq!(failed.phase, Some(Phase::Failed));
    assert!(failed.events.iter().any(|e| e.contains(
        "the background analysis failed: metric \"errors\" assessed Failed due to failed (1) > failureLimit (0)"
    )), "{:?}", failed.events);
}

#[test]
fn a_healthy_background_analysis_measures_until_the_promotion() {
    let mut world = initialized_with_replicas(background_canary(), 2);
    world.respond(errors_measured(AnalysisPhase::Successful));
    world.set_target_image("podinfo:6.0.1");
    world.reconcile();
    let mut taken = 0;
    for _ in 0..30 {
        let tick = world.advance(5).clone();
        taken += measures(&tick);
        if tick.phase == Some(Phase::Succeeded) {
            break;
        }
    }
    assert_eq!(world.phase(), Some(Phase::Succeeded));
    // Measured every 10s from step 1 (t=30) while the 40s pause ran, then promoted.
    assert!((4..=7).contains(&taken), "{taken} measurements");
    let run = background_run(&world).unwrap();
    assert_eq!(run.phase, AnalysisPhase::Successful);
    assert_eq!(run.metrics[0].count, taken as i32);
    assert!(run.finished_at.is_some());
}

#[test]
fn a_retry_starts_new_analysis_runs() {
    let mut world = initialized_with_replicas(analysis_canary(json!({})), 2);
    world.respond(errors_measured(AnalysisPhase::Failed));
    world.set_target_image("podinfo:6.0.1");
    world.reconcile();
    world.advance(15);
    world.follow_requeue();
    world.advance(10);
    assert_eq!(world.phase(), Some(Phase::Failed));
    world.respond(errors_measured(AnalysisPhase::Successful));
    world.annotate(serin_api::RETRY_ANNOTATION, "again");
    for _ in 0..20 {
        if world.advance(5).weight == 60 {
            break;
        }
    }
    assert_eq!(
        world.status().canary_weight,
        60,
        "the retry passed the analysis"
    );
    let runs: Vec<_> = world
        .status()
        .analysis_runs
        .into_iter()
        .filter(|r| r.step == Some(1))
        .map(|r| r.phase)
        .collect();
    assert_eq!(runs, [AnalysisPhase::Failed, AnalysisPhase::Successful]);
}

#[test]
fn the_history_is_bounded_by_retention_and_by_the_runs_kept() {
    let extra = json!({"metrics": [{
        "name": "errors", "templateRef": {"name": "errors"}, "count": 12, "interval": "1s"
    }]});
    let mut world = initialized_with_replicas(analysis_canary(extra), 2);
    world.respond(errors_measured(AnalysisPhase::Successful));
    world.set_target_image("podinfo:6.0.1");
    world.reconcile();
    world.advance(15);
    for _ in 0..20 {
        if world.advance(1).weight == 60 {
            break;
        }
    }
    let run = step_run(&world);
    assert_eq!(run.metrics[0].count, 12);
    assert_eq!(
        run.metrics[0].measurements.len(),
        serin_api::limits::DEFAULT_MEASUREMENT_RETENTION,
        "the latest 10 of 12"
    );

    // Failed releases, one after another: the status keeps the latest runs only.
    world.respond(errors_measured(AnalysisPhase::Failed));
    for release in 2..12 {
        world.set_target_image(&format!("podinfo:6.0.{release}"));
        for _ in 0..40 {
            if world.advance(5).phase == Some(Phase::Failed) {
                break;
            }
        }
    }
    let runs = world.status().analysis_runs;
    assert_eq!(runs.len(), serin_api::limits::MAX_ANALYSIS_RUNS_KEPT);
    assert!(runs.iter().all(|r| r.phase == AnalysisPhase::Failed));
}
