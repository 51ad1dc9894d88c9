//! Argo Rollouts' documented conditions and the bounds on a tenant's, against the evaluator.

use super::*;
use AnalysisPhase::{Error, Failed, Inconclusive, Successful};
use serde_json::json;

fn phase(result: MetricResult, success: Option<&str>, failure: Option<&str>) -> AnalysisPhase {
    evaluate_result(&result, success, failure).phase
}

fn vector(values: &[f64]) -> MetricResult {
    MetricResult::Vector(values.to_vec())
}

#[test]
fn argos_prometheus_examples() {
    let ok = vector(&[0.97]);
    let bad = vector(&[0.5]);
    assert_eq!(
        phase(ok.clone(), Some("result[0] >= 0.95"), None),
        Successful
    );
    assert_eq!(phase(bad.clone(), Some("result[0] >= 0.95"), None), Failed);
    assert_eq!(
        phase(ok.clone(), None, Some("result[0] < 0.95")),
        Successful
    );
    assert_eq!(phase(bad.clone(), None, Some("result[0] < 0.95")), Failed);
    let tolerant = "len(result) == 0 || result[0] >= 0.95";
    assert_eq!(phase(vector(&[]), Some(tolerant), None), Successful);
    assert_eq!(phase(bad, Some(tolerant), None), Failed);
    assert_eq!(phase(ok, None, None), Successful, "no condition passes");
}

#[test]
fn nan_and_infinities_from_prometheus_reach_the_helpers() {
    let nan = MetricResult::Scalar(f64::NAN);
    assert_eq!(
        phase(nan.clone(), Some("isNaN(result) || result >= 0.95"), None),
        Successful
    );
    // NaN compares false, as in Go.
    assert_eq!(phase(nan.clone(), Some("result >= 0.95"), None), Failed);
    assert_eq!(
        phase(nan.clone(), Some("default(result, 0) >= 0.95"), None),
        Failed
    );
    assert_eq!(
        phase(nan, Some("default(result, 1) >= 0.95"), None),
        Successful
    );
    assert_eq!(
        phase(
            MetricResult::Scalar(0.97),
            Some("default(result, 0) >= 0.95"),
            None
        ),
        Successful
    );
    assert_eq!(
        phase(
            vector(&[f64::NAN, 1.0]),
            Some("isNaN(result[0]) && !isNaN(result[1])"),
            None
        ),
        Successful
    );
    assert_eq!(
        phase(vector(&[f64::INFINITY]), Some("isInf(result[0])"), None),
        Successful
    );
    let measured = evaluate_result(&vector(&[f64::NAN, f64::NEG_INFINITY, 1.5]), None, None);
    assert_eq!(measured.value.as_deref(), Some("[NaN,-Inf,1.5]"));
    assert_eq!(
        phase(MetricResult::Json(json!(null)), Some("isNil(result)"), None),
        Successful
    );
    assert_eq!(
        phase(
            MetricResult::Json(json!(null)),
            Some("default(result, 2) == 2"),
            None
        ),
        Successful
    );
}

#[test]
fn conversions_from_strings_and_floats() {
    assert_eq!(
        phase(json!(1.0).into(), Some("asInt(result) == 1"), None),
        Successful
    );
    assert_eq!(
        phase(json!("1").into(), Some("asInt(result) == 1"), None),
        Successful
    );
    assert_eq!(
        phase(json!("9.5").into(), Some("asFloat(result) < 10.5"), None),
        Successful
    );
    assert_eq!(
        phase(json!("11").into(), Some("asFloat(result) < 10.5"), None),
        Failed
    );
    let error = evaluate(&json!("abc"), Some("asInt(result) == 1"), None);
    assert_eq!(error.phase, Error);
    let message = error.message.unwrap();
    assert!(
        message.contains("successCondition") && message.contains("\"abc\" is not an integer"),
        "{message}"
    );
}

#[test]
fn web_json_conditions() {
    assert_eq!(
        phase(json!({"ok": true}).into(), Some("result.ok == true"), None),
        Successful
    );
    assert_eq!(
        phase(json!({"ok": false}).into(), Some("result.ok == true"), None),
        Failed
    );
    assert_eq!(
        phase(json!(true).into(), Some("result == true"), None),
        Successful
    );
    let doc = json!({"data": {"successPercent": 0.93}});
    assert_eq!(
        phase(
            doc.clone().into(),
            Some("result.data.successPercent >= 0.9"),
            None
        ),
        Successful
    );
    assert_eq!(
        phase(doc.into(), Some("result.data.successPercent >= 0.95"), None),
        Failed
    );
    let measured = evaluate(&json!({"ok": true}), Some("result.ok"), None);
    assert_eq!(measured.value.as_deref(), Some(r#"{"ok":true}"#));
    assert_eq!(
        evaluate(&json!(42), None, None).value.as_deref(),
        Some("42")
    );
}

#[test]
fn both_conditions_can_be_inconclusive() {
    let (success, failure) = (Some("result[0] >= 0.95"), Some("result[0] < 0.8"));
    assert_eq!(phase(vector(&[0.97]), success, failure), Successful);
    assert_eq!(phase(vector(&[0.5]), success, failure), Failed);
    let measured = evaluate_result(&vector(&[0.9]), success, failure);
    assert_eq!(measured.phase, Inconclusive);
    assert!(measured.message.unwrap().contains("neither"));
    // The failure condition wins when both hold.
    assert_eq!(phase(vector(&[0.5]), Some("true"), Some("true")), Failed);
}

#[test]
fn errors_name_the_condition_and_why() {
    let syntax = evaluate_result(&vector(&[1.0]), Some("result[0] >="), None);
    assert_eq!(syntax.phase, Error);
    let message = syntax.message.unwrap();
    assert!(
        message.starts_with("could not evaluate successCondition"),
        "{message}"
    );
    assert!(message.contains("syntax error at line 1"), "{message}");

    let empty = evaluate_result(&vector(&[]), None, Some("result[0] < 0.95"));
    assert_eq!(empty.phase, Error);
    let message = empty.message.unwrap();
    assert!(message.contains("failureCondition"), "{message}");
    assert!(
        message
            .contains("metric result is nil or empty: no data returned from the metric provider"),
        "{message}"
    );

    let out_of_range = evaluate_result(&vector(&[1.0]), Some("result[3] > 0"), None);
    assert_eq!(out_of_range.phase, Error);

    let not_bool = evaluate_result(&vector(&[1.0]), Some("result[0]"), None);
    assert_eq!(not_bool.phase, Error);
    assert!(not_bool.message.unwrap().contains("not true or false"));

    let unknown = evaluate(&json!(1), Some("resutl == 1"), None);
    assert_eq!(unknown.phase, Error);
    assert!(unknown.message.unwrap().contains("resutl"));
}

#[test]
fn values_and_messages_are_cut_for_the_status() {
    let long: Vec<f64> = (0..500).map(f64::from).collect();
    let measured = evaluate_result(&MetricResult::Vector(long), Some("len(result) > 0"), None);
    assert_eq!(measured.phase, Successful);
    assert!(measured.value.unwrap().len() <= MAX_MEASUREMENT_TEXT_BYTES);
    let text = json!("é".repeat(300));
    let measured = evaluate(
        &text,
        Some(&format!("result == \"{}\"", "é".repeat(60))),
        None,
    );
    assert!(measured.value.unwrap().len() <= MAX_MEASUREMENT_TEXT_BYTES);
    assert!(measured.message.unwrap().len() <= MAX_MEASUREMENT_TEXT_BYTES);
}

#[test]
fn check_syntax_refuses_what_could_run_away() {
    assert_eq!(check_syntax("result[0] >= 0.95"), Ok(()));
    assert_eq!(
        check_syntax("all(result, # > 0.9) && len(filter(result, isNaN(#))) == 0"),
        Ok(())
    );
    assert_eq!(check_syntax("result | map(# * 2) | all(# > 1)"), Ok(()));
    // A predicate may build its collection with another: that runs once, not per element.
    assert_eq!(
        check_syntax("all(filter(result, !isNaN(#)), # > 0.9)"),
        Ok(())
    );
    assert_eq!(
        check_syntax("if len(result) > 0 { result[0] > 1 } else { false }"),
        Ok(())
    );
    assert_eq!(
        check_syntax(r#"result.data["a..b"] == 'x(' // repeat(".."#),
        Ok(())
    );
    for (bomb, why) in [
        (
            "len(repeat('x', 1000000000)) > 0",
            "repeat() is not available",
        ),
        ("len(1..1000000000000) > 0", "ranges"),
        ("let a = result + result; let b = a + a; len(b) > 0", "let"),
        (
            "any(result, any(result, true))",
            "inside the body of another predicate",
        ),
        (
            "any(result, any([1], true))",
            "inside the body of another predicate",
        ),
        (&"1 + ".repeat(129)[..], "more than 128 operators"),
        (
            &format!("result{} == 1", ".a".repeat(129))[..],
            "more than 128 operators",
        ),
        (
            "any(result, map([1], true)[0])",
            "inside the body of another predicate",
        ),
        (
            "result | any(all(result, true))",
            "inside the body of another predicate",
        ),
        ("any(result, len(result) > 0)", "cannot be used in the body"),
        ("'x'.repeat(3) == 'xxx'", "method calls"),
        ("toJSON(result) == ''", "toJSON() is not available"),
        ("result.name matches '^a'", "matches operator"),
        (&"result == ".repeat(9)[..], "more than 8 times"),
        (
            &format!("{}1{}", "(".repeat(17), ")".repeat(17))[..],
            "nested more than 16",
        ),
        (
            &format!("{}{}", "true ? ".repeat(17), "1 : 2".repeat(17))[..],
            "nested",
        ),
        (&"x".repeat(MAX_CONDITION_BYTES + 1)[..], "over the limit"),
    ] {
        let error = check_syntax(bomb).unwrap_err();
        assert!(error.contains(why), "{bomb}: {error}");
        let measured = evaluate_result(&vector(&[1.0]), Some(bomb), None);
        assert_eq!(measured.phase, Error, "{bomb}");
    }
    assert!(check_syntax(&format!("{}1{}", "(".repeat(16), ")".repeat(16))).is_ok());
    assert!(
        check_syntax("result[0] >= ")
            .unwrap_err()
            .contains("syntax error")
    );
}

#[test]
fn the_largest_conditions_run_quickly_whatever_the_callers_stack() {
    // Each at the bounds: the longest operator chain inside the deepest brackets, the longest
    // member chain, and a predicate over the largest result with the most work per element.
    let chain = format!(
        "{}1{}{} == 121",
        "(".repeat(15),
        " + 1".repeat(120),
        ")".repeat(15)
    );
    let members = format!("result{} == 1", ".a".repeat(MAX_CONDITION_OPERATORS - 1));
    let mut nested = json!(1);
    for _ in 0..MAX_CONDITION_OPERATORS - 1 {
        nested = json!({ "a": nested });
    }
    let predicate = format!(
        "all(result, {} > 0)",
        ["# * 2 + # * 2 + # * 2 + # * 2"; 2].join(" + ")
    );
    let largest = MetricResult::Vector(vec![1.0; MAX_RESULT_VALUES]);
    for (condition, result) in [
        (&chain, &largest),
        (&members, &MetricResult::Json(nested)),
        (&predicate, &largest),
    ] {
        let (condition, result) = (condition.clone(), result.clone());
        let started = std::time::Instant::now();
        // A caller with a small stack: the work runs on a thread of its own.
        let measured = std::thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn(move || evaluate_result(&result, Some(&condition), None))
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(measured.phase, Successful, "{:?}", measured.message);
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }
    assert!(check_syntax(&format!("{members} + 1")).is_err());
}

#[test]
fn results_larger_than_the_limit_are_an_error() {
    let many = MetricResult::Vector(vec![1.0; MAX_RESULT_VALUES + 1]);
    let measured = evaluate_result(&many, Some("len(result) > 0"), None);
    assert_eq!(measured.phase, Error);
    assert!(measured.message.unwrap().contains("narrow"));
    let nested = json!({"items": vec![json!({"a": 1}); MAX_RESULT_VALUES / 2]});
    assert_eq!(
        evaluate(&nested, Some("len(result.items) > 0"), None).phase,
        Error
    );
    // Without a condition nothing is converted, so a large answer still passes.
    assert_eq!(evaluate_result(&many, None, None).phase, Successful);
}
