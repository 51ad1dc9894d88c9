//! Routes the router has not taken yet (a Gateway that has not accepted the HTTPRoute's
//! generation): a short lag after Serin's own write is waited out in silence; a longer one, or one
//! with no known write, holds the Canary and says why.

use crate::common::*;
use k8s_openapi::jiff::SignedDuration;
use serde_json::json;
use serin_api::PROMOTE_ANNOTATION;
use serin_core::{Decision, Observation, RoutesPending, decide};
use std::time::Duration;

fn observation_with(pending: RoutesPending) -> (Observation, k8s_openapi::jiff::Timestamp) {
    let mut world = initialized(canary(json!({"interval": "10s", "stepWeight": 10})));
    world.annotate(PROMOTE_ANNOTATION, "t1");
    let mut observation = Observation::new(world.canary.clone());
    observation.target = Some(world.target.clone());
    observation.primary = world.primary.clone();
    observation.routes = world.routes;
    observation.routes_pending = Some(pending);
    (observation, world.now)
}

fn plan(observation: &Observation, now: k8s_openapi::jiff::Timestamp) -> serin_core::Plan {
    match decide(observation, now) {
        Decision::Plan(plan) => *plan,
        Decision::Check(check) => panic!("no check expected, got {check:?}"),
    }
}

#[test]
fn a_gateway_lagging_behind_our_write_is_waited_out_without_a_word() {
    let message =
        "HTTPRoute podinfo.test: Gateway istio-system/public has not accepted generation 3"
            .to_string();
    let (observation, now) = observation_with(RoutesPending {
        written: Some(now_minus(10)),
        message: message.clone(),
    });
    let lag = plan(&observation, now);
    assert_eq!(lag.requeue_after, Some(Duration::from_secs(1)));
    assert!(lag.events.is_empty(), "{:?}", lag.events);
    assert!(lag.actions.is_empty());
    assert_eq!(lag.status.message, None);
    assert!(
        lag.status.handled_requests.is_none(),
        "a promote arriving meanwhile is kept for later"
    );

    let (observation, now) = observation_with(RoutesPending {
        written: Some(now_minus(31)),
        message: message.clone(),
    });
    let held = plan(&observation, now);
    assert_eq!(held.status.message.as_deref(), Some(message.as_str()));
    assert!(
        held.events
            .iter()
            .any(|e| e.reason == "Blocked" && e.message.contains("has not accepted")),
        "{:?}",
        held.events
    );
    assert_eq!(held.requeue_after, None);

    let (observation, now) = observation_with(RoutesPending {
        written: None,
        message: message.clone(),
    });
    assert_eq!(
        plan(&observation, now).status.message.as_deref(),
        Some(message.as_str())
    );
}

/// The world's clock starts at 2026-01-01T00:00:00Z and an initialized world is 15 s in.
fn now_minus(seconds: i64) -> k8s_openapi::jiff::Timestamp {
    let start: k8s_openapi::jiff::Timestamp = "2026-01-01T00:00:15Z".parse().unwrap();
    start - SignedDuration::from_secs(seconds)
}
