//! Argo Rollouts' `successCondition` and `failureCondition`: expressions in the expr language over
//! the variable `result` (what the metric provider answered), with Argo's helpers `asInt`,
//! `asFloat`, `isNaN`, `isInf`, `isNil` and `default`.
//!
//! Conditions are written by tenants and evaluated inside the operator, so before one runs it is
//! checked against a few bounds that keep its work small: at most [`MAX_CONDITION_BYTES`], brackets
//! nested at most [`MAX_CONDITION_NESTING`] deep, only the functions of [`CONDITION_FUNCTIONS`], no
//! `let` (a variable used twice doubles a value each line), no ranges (`1..1000000000` allocates
//! the whole range), no predicate (`map`, `filter`, `all`, ...) inside another, and `result` named
//! at most [`MAX_RESULT_REFERENCES`] times and never inside a predicate, since each mention copies
//! it. The result itself holds at most [`MAX_RESULT_VALUES`] values. Together these make the work
//! of one evaluation linear in the result's size times the expression's length.

use expr::Value;
use serin_api::AnalysisPhase;
use serin_api::limits::{MAX_MEASUREMENT_TEXT_BYTES, quoted};
use serin_core::plan::Measurement;

/// Longest condition, in bytes. Argo's conditions are one line (`result[0] >= 0.95`); this leaves
/// room for long ones while bounding the work of parsing and evaluating one.
pub const MAX_CONDITION_BYTES: usize = 4096;

/// Deepest nesting of `(`, `[`, `{`, `?` and `if` in a condition: the parser and the evaluator
/// recurse once per level, and the operator's threads have small stacks.
pub const MAX_CONDITION_NESTING: usize = 16;

/// Most operators (arithmetic, comparison, logic, `.` and `[]` access, `?`) a condition may hold:
/// each adds a level to the parser's and the evaluator's recursion.
pub const MAX_CONDITION_OPERATORS: usize = 128;

/// Stack of the thread a condition is parsed and evaluated on. expr recurses once per operator,
/// some 10 KiB a level in a debug build, which a runtime worker's 2 MiB does not hold at the
/// bounds above; the memory is reserved, and touched only as deep as the recursion goes.
const EVALUATION_STACK: usize = 16 * 1024 * 1024;

/// Most times a condition may name `result` (and `#` within one predicate): each mention copies
/// the value it names.
pub const MAX_RESULT_REFERENCES: usize = 8;

/// Most values (numbers, strings, booleans, nulls, arrays and maps, counted one by one) a result
/// may hold to be judged by a condition: a narrower query or `jsonPath` gives what a condition needs.
pub const MAX_RESULT_VALUES: usize = 10_000;

/// The functions a condition may call: Argo's helpers, and those of expr's builtins whose work and
/// output are at most linear in their input. The others (`repeat`, `replace`, `join`, `sortBy`,
/// `reduce`, the JSON, date and bit functions, ...) are refused when the condition is checked.
pub const CONDITION_FUNCTIONS: [&str; 34] = [
    // Argo Rollouts' helpers.
    "asInt", "asFloat", "isNaN", "isInf", "isNil", "default", // expr's builtins.
    "len", "abs", "ceil", "floor", "round", "int", "float", "string", "max", "min", "mean",
    "median", "first", "last", "keys", "values", "lower", "upper", "trim", "all", "any", "none",
    "one", "map", "filter", "count", "sum", "find",
];

/// The functions of [`CONDITION_FUNCTIONS`] that run an expression for every element.
const PREDICATES: [&str; 9] = [
    "all", "any", "none", "one", "map", "filter", "count", "sum", "find",
];

/// Words of the language that a `(` may follow without making them a call.
const KEYWORDS: [&str; 13] = [
    "if",
    "else",
    "not",
    "in",
    "and",
    "or",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "nil",
    "true",
    "false",
];

/// What a metric provider answered, as a condition sees it in `result`.
#[derive(Clone, Debug, PartialEq)]
pub enum MetricResult {
    /// A JSON document or part of one (a `web` metric's answer at its `jsonPath`).
    Json(serde_json::Value),
    /// A Prometheus instant vector: one value per series, NaN and infinities kept.
    Vector(Vec<f64>),
    /// A Prometheus scalar, NaN and infinities kept.
    Scalar(f64),
}

impl MetricResult {
    /// Whether the provider returned nothing: null, an empty array, an empty object or `""`.
    pub fn is_empty(&self) -> bool {
        match self {
            MetricResult::Json(serde_json::Value::Null) => true,
            MetricResult::Json(serde_json::Value::Array(items)) => items.is_empty(),
            MetricResult::Json(serde_json::Value::Object(fields)) => fields.is_empty(),
            MetricResult::Json(serde_json::Value::String(text)) => text.is_empty(),
            MetricResult::Json(_) | MetricResult::Scalar(_) => false,
            MetricResult::Vector(values) => values.is_empty(),
        }
    }

    /// The result written compactly as JSON (`[0.97]`, `42`, `{"ok":true}`), with Prometheus'
    /// spellings `NaN`, `+Inf` and `-Inf` for the floats JSON has no words for.
    pub fn render(&self) -> String {
        match self {
            MetricResult::Json(value) => value.to_string(),
            MetricResult::Scalar(value) => float_text(*value),
            MetricResult::Vector(values) => {
                let items: Vec<String> = values.iter().map(|v| float_text(*v)).collect();
                format!("[{}]", items.join(","))
            }
        }
    }

    /// The result as expr's value, or why it is too large to judge.
    fn to_expr(&self) -> Result<Value, String> {
        let too_large = || {
            format!(
                "the metric result holds more than {MAX_RESULT_VALUES} values: narrow the query (or the web metric's jsonPath) to what the condition needs"
            )
        };
        match self {
            MetricResult::Scalar(value) => Ok(Value::Float(*value)),
            MetricResult::Vector(values) if values.len() > MAX_RESULT_VALUES => Err(too_large()),
            MetricResult::Vector(values) => Ok(Value::Array(
                values.iter().map(|v| Value::Float(*v)).collect(),
            )),
            MetricResult::Json(value) => {
                let mut budget = MAX_RESULT_VALUES;
                json_to_expr(value, &mut budget).ok_or_else(too_large)
            }
        }
    }
}

impl From<serde_json::Value> for MetricResult {
    fn from(value: serde_json::Value) -> Self {
        MetricResult::Json(value)
    }
}

fn float_text(value: f64) -> String {
    match value {
        v if v.is_nan() => "NaN".into(),
        f64::INFINITY => "+Inf".into(),
        f64::NEG_INFINITY => "-Inf".into(),
        v => v.to_string(),
    }
}

/// Converts JSON to expr's value, spending one unit of `budget` per value; `None` past it.
fn json_to_expr(value: &serde_json::Value, budget: &mut usize) -> Option<Value> {
    *budget = budget.checked_sub(1)?;
    Some(match value {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        // Whole numbers stay integers so `result == 1` and `asInt(result)` read naturally; expr
        // compares integers and floats by value, as Go's expr does for Argo's float64s.
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::String(s.clone()),
        serde_json::Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| json_to_expr(item, budget))
                .collect::<Option<_>>()?,
        ),
        serde_json::Value::Object(fields) => Value::Map(
            fields
                .iter()
                .map(|(k, v)| Some((k.clone(), json_to_expr(v, budget)?)))
                .collect::<Option<_>>()?,
        ),
    })
}

/// Cuts `text` to at most [`MAX_MEASUREMENT_TEXT_BYTES`] on a character boundary, for the status.
pub fn cut(mut text: String) -> String {
    if text.len() > MAX_MEASUREMENT_TEXT_BYTES {
        let mut end = MAX_MEASUREMENT_TEXT_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// Judges `result` (a web metric's JSON) by the conditions as Argo Rollouts does; see
/// [`evaluate_result`].
pub fn evaluate(
    result: &serde_json::Value,
    success: Option<&str>,
    failure: Option<&str>,
) -> Measurement {
    evaluate_result(&MetricResult::Json(result.clone()), success, failure)
}

/// Judges `result` by the conditions as Argo Rollouts does: with neither it is Successful; with
/// only `success` Failed when it is false; with only `failure` Failed when it is true; with both
/// Failed when `failure` holds, else Successful when `success` holds, else Inconclusive. A
/// condition that cannot be evaluated, or is not true or false, makes the measurement an Error.
pub fn evaluate_result(
    result: &MetricResult,
    success: Option<&str>,
    failure: Option<&str>,
) -> Measurement {
    let value = Some(cut(result.render()));
    let judged = |phase: AnalysisPhase, message: Option<String>| Measurement {
        phase,
        value: value.clone(),
        message: message.map(cut),
    };
    let (success, failure) = (
        success.filter(|c| !c.trim().is_empty()),
        failure.filter(|c| !c.trim().is_empty()),
    );
    if success.is_none() && failure.is_none() {
        return judged(AnalysisPhase::Successful, None);
    }
    let judge = || {
        let input = match result.to_expr() {
            Ok(input) => input,
            Err(message) => return judged(AnalysisPhase::Error, Some(message)),
        };
        judge(result, &input, success, failure, judged)
    };
    match on_large_stack(judge) {
        Ok(measurement) => measurement,
        Err(message) => judged(AnalysisPhase::Error, Some(message)),
    }
}

/// Runs `work` on a thread of its own with an [`EVALUATION_STACK`]-sized stack.
fn on_large_stack<T: Send>(work: impl FnOnce() -> T + Send) -> Result<T, String> {
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name("serin-condition".into())
            .stack_size(EVALUATION_STACK)
            .spawn_scoped(scope, work)
            .map_err(|e| format!("could not start a thread to evaluate the condition: {e}"))?;
        thread
            .join()
            .map_err(|_| "evaluating the condition failed unexpectedly".to_string())
    })
}

/// The phase of a measurement whose conditions are set, `input` being `result` as expr's value.
fn judge(
    result: &MetricResult,
    input: &Value,
    success: Option<&str>,
    failure: Option<&str>,
    judged: impl Fn(AnalysisPhase, Option<String>) -> Measurement,
) -> Measurement {
    let run = |field: &str, condition: &str| {
        condition_holds(condition, input).map_err(|why| {
            let why = if result.is_empty() {
                "metric result is nil or empty: no data returned from the metric provider"
                    .to_string()
            } else {
                why
            };
            format!("could not evaluate {field} {}: {why}", quoted(condition))
        })
    };
    let failed = match failure.map(|c| run("failureCondition", c)).transpose() {
        Ok(failed) => failed,
        Err(message) => return judged(AnalysisPhase::Error, Some(message)),
    };
    if failed == Some(true) {
        let message = format!("failureCondition {} is true", quoted(failure.unwrap_or("")));
        return judged(AnalysisPhase::Failed, Some(message));
    }
    let Some(success) = success else {
        return judged(AnalysisPhase::Successful, None);
    };
    match run("successCondition", success) {
        Ok(true) => judged(AnalysisPhase::Successful, None),
        Ok(false) if failure.is_some() => judged(
            AnalysisPhase::Inconclusive,
            Some("neither successCondition nor failureCondition is true".into()),
        ),
        Ok(false) => judged(
            AnalysisPhase::Failed,
            Some(format!("successCondition {} is false", quoted(success))),
        ),
        Err(message) => judged(AnalysisPhase::Error, Some(message)),
    }
}

/// Evaluates one condition with `result` bound to `input`: true or false, or why not.
fn condition_holds(condition: &str, input: &Value) -> Result<bool, String> {
    check_bounds(condition)?;
    let program = expr::compile(condition).map_err(|e| describe(&e))?;
    let mut context = expr::Context::default();
    context.insert("result", input.clone());
    match environment().run(&program, &context) {
        Ok(Value::Bool(holds)) => Ok(holds),
        Ok(other) => Err(format!(
            "it gives {} ({}), not true or false: write a comparison, e.g. result[0] >= 0.95",
            quoted(&other.to_string()),
            type_name(&other)
        )),
        Err(e) => Err(describe(&e)),
    }
}

/// Every condition of `analysis`'s Argo-style analyses that the operator cannot evaluate: its
/// field path and why.
pub fn condition_problems(analysis: &serin_api::CanaryAnalysis) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    for (base, spec) in analysis.analyses() {
        for (i, metric) in spec.metrics.iter().enumerate() {
            for (field, condition) in [
                ("successCondition", &metric.success_condition),
                ("failureCondition", &metric.failure_condition),
            ] {
                if let Some(text) = condition
                    && let Err(error) = check_syntax(text)
                {
                    problems.push((format!("{base}.metrics[{i}].{field}"), error));
                }
            }
        }
    }
    problems
}

/// Checks that `expression` is a condition Serin evaluates: within the bounds the module describes
/// and valid expr syntax. Nothing is evaluated.
pub fn check_syntax(expression: &str) -> Result<(), String> {
    check_bounds(expression)?;
    on_large_stack(|| {
        expr::compile(expression)
            .map(drop)
            .map_err(|e| describe(&e))
    })?
}

/// expr's error on one line: a parse error's position and what was expected (pest writes them on
/// several lines around a picture of the input), or the message.
fn describe(error: &expr::Error) -> String {
    let text = error.to_string();
    if !matches!(error, expr::Error::PestError(_)) {
        return text;
    }
    let position = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("--> "))
        .and_then(|at| at.split_once(':'))
        .map(|(line, column)| format!(" at line {line}, column {column}"))
        .unwrap_or_default();
    let expected = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("= "))
        .unwrap_or("invalid syntax");
    format!("syntax error{position}: {expected}")
}

mod bounds;
mod functions;
#[cfg(test)]
mod tests;

use bounds::check_bounds;
use functions::{environment, type_name};
