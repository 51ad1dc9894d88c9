//! Bad input never crashes the engine: for Canaries built from any mix of valid and invalid fields,
//! in any status, over any workloads and routes, `validate` names a field for every problem and
//! `decide` returns a plan (answering every check it asks for) without panicking.

use proptest::prelude::*;
use serde_json::{Value, json};
use serin_api::Canary;
use serin_core::simulation::deployment;
use serin_core::{Check, Decision, MetricReading, Observation, Outcome, Routes, Verdict};

const PHASES: &[&str] = &[
    "Initializing",
    "Initialized",
    "Waiting",
    "Progressing",
    "WaitingPromotion",
    "Promoting",
    "Finalising",
    "Succeeded",
    "Failed",
    "Terminating",
    "Terminated",
];

fn durations() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!("10s")),
        Just(json!("1m")),
        Just(json!("0s")),
        Just(json!("-5s")),
        Just(json!("soon")),
        Just(json!("")),
        (-5i64..100).prop_map(|n| json!(n)),
    ]
}

fn step() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-10i32..120).prop_map(|w| json!({"setWeight": w})),
        Just(json!({"pause": {}})),
        durations().prop_map(|d| json!({"pause": {"duration": d}})),
        (-1i32..5).prop_map(|r| json!({"setCanaryScale": {"replicas": r}})),
        (-10i32..120).prop_map(|w| json!({"setCanaryScale": {"weight": w}})),
        Just(json!({"setCanaryScale": {"matchTrafficWeight": true}})),
        Just(json!({})),
        (-10i32..120).prop_map(|w| json!({"setWeight": w, "pause": {}})),
    ]
}

fn metric() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec![
            "request-success-rate",
            "request-duration",
            "custom",
            "",
        ]),
        prop::option::of(-10.0f64..1000.0),
        prop::option::of(-10.0f64..1000.0),
        any::<bool>(),
        prop::option::of(durations()),
        prop::sample::select(vec!["", "fail", "ignore", "maybe"]),
    )
        .prop_map(|(name, min, max, templated, interval, no_data)| {
            let mut metric = json!({"name": name, "thresholdRange": {"min": min, "max": max}});
            if templated {
                metric["templateRef"] = json!({"name": "latency"});
            }
            if let Some(interval) = interval {
                metric["interval"] = interval;
            }
            if !no_data.is_empty() {
                metric["noData"] = json!(no_data);
            }
            metric
        })
}

fn webhook() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec![
            "pre-rollout",
            "rollout",
            "confirm-rollout",
            "confirm-traffic-increase",
            "confirm-promotion",
            "post-rollout",
            "rollback",
            "event",
            "bogus",
        ]),
        prop::sample::select(vec!["http://127.0.0.1:9/hook", "not a url", ""]),
        0u8..3,
    )
        .prop_map(|(kind, url, n)| json!({"name": format!("hook-{n}"), "type": kind, "url": url}))
}

/// An `analysis` with any subset of its fields, each valid or not.
fn analysis() -> impl Strategy<Value = Value> {
    (
        prop::option::of(durations()),
        prop::option::of(-5i32..20),
        prop::option::of(-10i32..120),
        prop::option::of(-10i32..120),
        prop::option::of(prop::collection::vec(-10i32..120, 0..5)),
        prop::option::of(prop::collection::vec(step(), 0..6)),
        prop::option::of(-2i32..5),
        prop::collection::vec(metric(), 0..3),
        prop::collection::vec(webhook(), 0..4),
        (any::<bool>(), prop::option::of(-10i32..120), any::<bool>()),
        (prop::option::of(0i32..120), prop::option::of(any::<bool>())),
    )
        .prop_map(
            |(
                interval,
                threshold,
                max_weight,
                step_weight,
                step_weights,
                steps,
                iterations,
                metrics,
                webhooks,
                (mirror, mirror_weight, with_match),
                (ready_threshold, auto_promotion),
            )| {
                let mut a = json!({"metrics": metrics, "webhooks": webhooks, "mirror": mirror});
                let mut set = |key: &str, value: Option<Value>| {
                    if let Some(value) = value {
                        a[key] = value;
                    }
                };
                set("interval", interval);
                set("threshold", threshold.map(|v| json!(v)));
                set("maxWeight", max_weight.map(|v| json!(v)));
                set("stepWeight", step_weight.map(|v| json!(v)));
                set("stepWeights", step_weights.map(|v| json!(v)));
                set("steps", steps.map(|v| json!(v)));
                set("iterations", iterations.map(|v| json!(v)));
                set("mirrorWeight", mirror_weight.map(|v| json!(v)));
                set("primaryReadyThreshold", ready_threshold.map(|v| json!(v)));
                set("autoPromotionEnabled", auto_promotion.map(|v| json!(v)));
                if with_match {
                    a["match"] = json!([{"headers": {"x-canary": {"exact": "insider"}}}]);
                }
                a
            },
        )
}

/// A status in any phase, with counters and step positions in or out of range.
fn status() -> impl Strategy<Value = Option<Value>> {
    prop::option::of(
        (
            prop::option::of(prop::sample::select(PHASES.to_vec())),
            -10i32..120,
            -1i32..5,
            -1i32..5,
            prop::option::of(-2i32..10),
            prop::option::of(prop::sample::select(vec!["", "5d8f7c9b", "other"])),
            any::<bool>(),
        )
            .prop_map(
                |(phase, weight, failed, iterations, step, applied, timed)| {
                    let mut s = json!({"canaryWeight": weight, "failedChecks": failed,
                                       "iterations": iterations});
                    if let Some(phase) = phase {
                        s["phase"] = json!(phase);
                    }
                    if let Some(step) = step {
                        s["currentStepIndex"] = json!(step);
                    }
                    if let Some(applied) = applied {
                        s["lastAppliedSpec"] = json!(applied);
                        s["lastPromotedSpec"] = json!("5d8f7c9b");
                    }
                    if timed {
                        s["lastTickTime"] = json!("2026-01-01T00:00:00Z");
                        s["stepStartTime"] = json!("2026-01-01T00:00:00Z");
                    }
                    s
                },
            ),
    )
}

fn canary() -> impl Strategy<Value = Value> {
    (
        prop::option::of(analysis()),
        prop::sample::select(vec!["", "istio", "kubernetes", "linkerd"]),
        any::<bool>(),
        any::<bool>(),
        prop::option::of(-1i32..100),
        status(),
        prop::sample::select(vec!["", "Deployment", "DaemonSet"]),
    )
        .prop_map(
            |(analysis, provider, skip, suspend, deadline, status, kind)| {
                let mut c = json!({
                    "apiVersion": "serin.dev/v1beta1", "kind": "Canary",
                    "metadata": {"name": "podinfo", "namespace": "test", "generation": 2},
                    "spec": {
                        "targetRef": {"apiVersion": "apps/v1", "kind": kind, "name": "podinfo"},
                        "service": {"port": 9898},
                        "skipAnalysis": skip,
                        "suspend": suspend,
                    }
                });
                if let Some(analysis) = analysis {
                    c["spec"]["analysis"] = analysis;
                }
                if !provider.is_empty() {
                    c["spec"]["provider"] = json!(provider);
                }
                if let Some(deadline) = deadline {
                    c["spec"]["progressDeadlineSeconds"] = json!(deadline);
                }
                if let Some(status) = status {
                    c["status"] = status;
                }
                c
            },
        )
}

/// An answer to a check, chosen by `pick`.
fn answer(check: &Check, pick: u8) -> Outcome {
    match check {
        Check::Hook { .. } if pick.is_multiple_of(3) => Outcome::Hook(Err("refused".into())),
        Check::Hook { .. } if pick % 3 == 1 && pick > 128 => {
            Outcome::HookUnanswered("no answer within 10s".into())
        }
        Check::Hook { .. } => Outcome::Hook(Ok(())),
        Check::Metric { .. } => match pick % 4 {
            0 => Outcome::Metric(MetricReading::NoData),
            1 => Outcome::Metric(MetricReading::Error("connection refused".into())),
            2 => Outcome::Metric(MetricReading::Value(f64::NAN)),
            _ => Outcome::Metric(MetricReading::Value(f64::from(pick))),
        },
        Check::Measure { .. } => Outcome::Measurement(serin_core::Measurement {
            phase: match pick % 4 {
                0 => serin_api::AnalysisPhase::Failed,
                1 => serin_api::AnalysisPhase::Error,
                2 => serin_api::AnalysisPhase::Inconclusive,
                _ => serin_api::AnalysisPhase::Successful,
            },
            value: Some(format!("[{pick}]")),
            message: None,
        }),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_problem_names_a_field(value in canary()) {
        // A Canary the API server would refuse (a type mismatch) never reaches the engine.
        let Ok(canary) = serde_json::from_value::<Canary>(value) else { return Ok(()) };
        for problem in serin_api::validate(&canary) {
            prop_assert!(problem.path.starts_with("spec"), "{problem} names no spec field");
            prop_assert!(!problem.message.trim().is_empty(), "{problem} says nothing");
        }
    }

    #[test]
    fn decide_always_returns_a_plan(
        value in canary(),
        target in prop::option::of(0i32..4),
        primary in prop::option::of(0i32..4),
        routes in prop::option::of((-10i32..120, any::<bool>())),
        answers in prop::collection::vec(any::<u8>(), 64),
        seconds in 0i64..4000,
    ) {
        let Ok(canary) = serde_json::from_value::<Canary>(value) else { return Ok(()) };
        let mut observation = Observation::new(canary);
        observation.target = target.map(|n| deployment("podinfo", "test", "podinfo:6.0.1", n));
        observation.primary =
            primary.map(|n| deployment("podinfo-primary", "test", "podinfo:6.0.0", n));
        observation.routes = routes.map(|(canary, mirrored)| Routes {
            primary: 100 - canary,
            canary,
            mirrored,
        });
        let now = "2026-01-01T00:00:00Z"
            .parse::<k8s_openapi::jiff::Timestamp>()
            .unwrap()
            + k8s_openapi::jiff::SignedDuration::from_secs(seconds);
        let mut planned = false;
        for pick in &answers {
            match serin_core::decide(&observation, now) {
                Decision::Plan(_) => {
                    planned = true;
                    break;
                }
                Decision::Check(check) => {
                    let outcome = answer(&check, *pick);
                    observation.verdicts.push(Verdict { check, outcome });
                }
            }
        }
        prop_assert!(planned, "no plan after {} checks", answers.len());
    }
}
