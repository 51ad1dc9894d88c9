//! `make demo`: replays two releases of podinfo through Serin's decision core, tick by tick, in a
//! simulated cluster — a healthy version that is promoted, then a faulty one that is rolled back.

use serde_json::json;
use serin_api::{Canary, Phase};
use serin_core::simulation::{World, deployment, healthy};
use serin_core::{Check, MetricReading, Outcome};

fn main() {
    let canary: Canary = serde_json::from_value(json!({
        "apiVersion": "serin.dev/v1beta1", "kind": "Canary",
        "metadata": {"name": "podinfo", "namespace": "test", "generation": 1},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo"},
            "service": {"port": 9898},
            "analysis": {
                "interval": "15s", "threshold": 3, "maxWeight": 30, "stepWeight": 10,
                "metrics": [
                    {"name": "request-success-rate", "thresholdRange": {"min": 99}, "interval": "1m"},
                    {"name": "request-duration", "thresholdRange": {"max": 500}, "interval": "30s"}
                ]
            }
        }
    }))
    .expect("valid canary");
    let mut world = World::new(canary, deployment("podinfo", "test", "podinfo:6.0.0", 2));
    world.rollout_seconds = 20;

    println!("Serin decision core, simulated cluster (no Kubernetes needed)\n");
    section(&mut world, "Initializing podinfo.test", |w| {
        w.phase() == Some(Phase::Initialized)
    });

    world.set_target_image("podinfo:6.0.1");
    section(&mut world, "Release podinfo:6.0.1 (healthy)", |w| {
        w.phase() == Some(Phase::Succeeded)
    });

    world.respond(|check, now| match check {
        Check::Metric { name } if name == "request-success-rate" => {
            Outcome::Metric(MetricReading::Value(81.5))
        }
        other => healthy(other, now),
    });
    world.set_target_image("podinfo:6.0.2");
    section(&mut world, "Release podinfo:6.0.2 (18.5% errors)", |w| {
        w.phase() == Some(Phase::Failed)
    });

    let ok = world.phase() == Some(Phase::Failed) && world.primary_image() == "podinfo:6.0.1";
    println!(
        "Summary: primary runs {}, target scaled to {}, {} ticks simulated.",
        world.primary_image(),
        world.target_replicas(),
        world.log.len()
    );
    if !ok {
        eprintln!("unexpected final state");
        std::process::exit(1);
    }
}

fn section(world: &mut World, title: &str, done: impl Fn(&World) -> bool) {
    println!("== {title}");
    let start = world.log.len();
    world.reconcile();
    if !done(world) {
        world.run_until(15, 40, &done);
    }
    for tick in &world.log[start..] {
        let routes = tick
            .routes
            .map(|r| {
                format!(
                    "{}/{}{}",
                    r.primary,
                    r.canary,
                    if r.mirrored { " mirrored" } else { "" }
                )
            })
            .unwrap_or_else(|| "-".into());
        let phase = tick.phase.map(|p| p.to_string()).unwrap_or_default();
        println!(
            "t={:>4}s  {:<12} weight {:>3}  routes {:<7}",
            tick.at, phase, tick.weight, routes
        );
        for event in &tick.events {
            println!("          {event}");
        }
    }
    let metrics = world
        .canary
        .status
        .as_ref()
        .map(|s| s.metric_checks.clone())
        .unwrap_or_default();
    for m in metrics {
        println!(
            "          last {}: {} ({})",
            m.name,
            m.value.map(|v| format!("{v:.1}")).unwrap_or("-".into()),
            if m.passed { "passed" } else { "failed" }
        );
    }
    println!();
}
