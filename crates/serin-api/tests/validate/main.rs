//! One test per rule of `validate`, `validate_metric_template` and `validate_alert_provider`.
//!
//! Each test starts from a valid resource, breaks one thing with a JSON merge patch and asserts the
//! exact list of reported paths, so a rule that stops firing, fires twice or fires elsewhere fails.

mod analysis;
mod checks;
mod resources;
mod routing;
mod spec;
mod step_analysis;
mod support;

use crate::support::{assert_spec_valid, assert_valid};
use serde_json::json;

#[test]
fn the_base_canary_is_valid() {
    assert_valid(json!({}));
    assert_spec_valid(json!({}));
}
