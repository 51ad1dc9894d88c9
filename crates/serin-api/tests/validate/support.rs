//! The valid resources the tests start from, and the helpers that break one thing in them and
//! return what `validate` reports.

use serde_json::{Value, json};
use serin_api::validate::FieldError;
use serin_api::{Canary, validate};

/// A valid progressive canary for Deployment `test/podinfo`; each test patches it.
pub(crate) fn base() -> Value {
    json!({
        "apiVersion": "serin.dev/v1beta1",
        "kind": "Canary",
        "metadata": {"name": "podinfo", "namespace": "test"},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo"},
            "service": {"port": 9898},
            "analysis": {
                "interval": "1m",
                "threshold": 5,
                "stepWeight": 10,
                "maxWeight": 50,
                "metrics": [
                    {"name": "request-success-rate", "thresholdRange": {"min": 99}, "interval": "1m"}
                ],
                "webhooks": [
                    {"name": "load-test", "url": "http://flagger-loadtester.test/"}
                ]
            }
        }
    })
}

/// JSON merge patch (RFC 7386): objects merge key by key, `null` deletes, anything else replaces.
pub(crate) fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (key, value) in p {
                if value.is_null() {
                    t.remove(&key);
                } else {
                    merge(t.entry(key).or_insert(Value::Null), value);
                }
            }
        }
        (t, p) => *t = p,
    }
}

pub(crate) fn canary_with(patch: Value) -> Canary {
    let mut doc = base();
    merge(&mut doc, patch);
    serde_json::from_value(doc).expect("the patched canary must deserialize")
}

/// Errors after merging `patch` into `spec`.
pub(crate) fn spec_errors(patch: Value) -> Vec<FieldError> {
    validate(&canary_with(json!({ "spec": patch })))
}

/// Reported paths after merging `patch` into `spec`.
pub(crate) fn spec_paths(patch: Value) -> Vec<String> {
    spec_errors(patch).into_iter().map(|e| e.path).collect()
}

/// Errors after merging `patch` into `spec.analysis`.
pub(crate) fn errors(patch: Value) -> Vec<FieldError> {
    spec_errors(json!({ "analysis": patch }))
}

/// Reported paths after merging `patch` into `spec.analysis`.
pub(crate) fn paths(patch: Value) -> Vec<String> {
    errors(patch).into_iter().map(|e| e.path).collect()
}

#[track_caller]
pub(crate) fn assert_valid(patch: Value) {
    let errs = errors(patch.clone());
    assert!(
        errs.is_empty(),
        "analysis patch {patch} should be valid, got {errs:?}"
    );
}

#[track_caller]
pub(crate) fn assert_spec_valid(patch: Value) {
    let errs = spec_errors(patch.clone());
    assert!(
        errs.is_empty(),
        "spec patch {patch} should be valid, got {errs:?}"
    );
}

/// The analysis without its progressive-canary fields, to switch to another strategy.
pub(crate) fn without_canary_fields(mut patch: Value) -> Value {
    let obj = patch.as_object_mut().unwrap();
    obj.entry("stepWeight").or_insert(Value::Null);
    obj.entry("maxWeight").or_insert(Value::Null);
    patch
}

pub(crate) fn blue_green(patch: Value) -> Value {
    let mut p = without_canary_fields(json!({"iterations": 5}));
    merge(&mut p, patch);
    p
}

pub(crate) fn ab_testing(patch: Value) -> Value {
    let mut p = without_canary_fields(
        json!({"iterations": 5, "match": [{"headers": {"x-canary": {"exact": "insider"}}}]}),
    );
    merge(&mut p, patch);
    p
}

pub(crate) fn with_steps(steps: Value) -> Value {
    without_canary_fields(json!({ "steps": steps }))
}

pub(crate) fn metric(extra: Value) -> Value {
    let mut m = json!({"name": "request-success-rate", "thresholdRange": {"min": 99}});
    merge(&mut m, extra);
    m
}

pub(crate) fn hook(extra: Value) -> Value {
    let mut h = json!({"name": "load-test", "url": "http://flagger-loadtester.test/"});
    merge(&mut h, extra);
    h
}

/// A blue/green Canary for the kubernetes provider, as Flagger's docs write it.
pub(crate) fn kubernetes_blue_green(analysis: Value, service: Value) -> Vec<FieldError> {
    let mut doc = base();
    doc["spec"]["provider"] = json!("kubernetes");
    doc["spec"]["analysis"] = json!({
        "interval": "30s", "threshold": 2, "iterations": 10,
        "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}, "interval": "1m"}],
        "webhooks": [{"name": "gate", "type": "confirm-promotion", "url": "http://flagger-loadtester.test/gate/check"}]
    });
    merge(&mut doc["spec"]["analysis"], analysis);
    merge(&mut doc["spec"]["service"], service);
    validate(&serde_json::from_value(doc).expect("a Canary"))
}

/// Small helper so a strategy base can be extended inline: `with_steps(..).tap(json!({..}))`.
pub(crate) trait Tap {
    fn tap(self, patch: Value) -> Value;
}

impl Tap for Value {
    fn tap(mut self, patch: Value) -> Value {
        merge(&mut self, patch);
        self
    }
}
