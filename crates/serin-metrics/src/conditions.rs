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

/// The bounds of the module's documentation, checked without parsing.
fn check_bounds(expression: &str) -> Result<(), String> {
    if expression.len() > MAX_CONDITION_BYTES {
        return Err(format!(
            "the condition is {} bytes long, over the limit of {MAX_CONDITION_BYTES}: shorten it",
            expression.len()
        ));
    }
    scan(expression)
}

/// An open bracket, `?` or `if` in [`scan`].
struct Open {
    /// Whether it closes at a bracket; `?` and `if` end with the expression that holds them.
    bracket: bool,
    /// Whether it is the argument list of a predicate (`map(`, `all(`, ...).
    predicate: bool,
    /// Whether the predicate's body has begun: after the collection and its comma, or at once
    /// when the collection is piped in (`result | all(# > 0)`).
    body: bool,
    /// How many times `#` was named in the body.
    hashes: usize,
}

impl Open {
    fn plain(bracket: bool) -> Self {
        Open {
            bracket,
            predicate: false,
            body: false,
            hashes: 0,
        }
    }
}

/// Bytes of the operators counted against [`MAX_CONDITION_OPERATORS`].
fn is_operator_byte(b: u8) -> bool {
    b"+-*/%^=!<>&|.[?".contains(&b)
}

/// Walks the condition's tokens (skipping strings and comments) and refuses what the module's
/// bounds exclude, naming it and saying what to write instead.
fn scan(expression: &str) -> Result<(), String> {
    let bytes = expression.as_bytes();
    let mut stack: Vec<Open> = Vec::new();
    let mut results = 0;
    let mut operators = 0;
    let mut i = 0;
    // The last byte that was not white space, a comment or inside a token.
    let mut previous = b' ';
    // Whether the last token was a lone `|` (a pipe, not `||`).
    let mut piped = false;
    let mut predicate_next = None;
    let in_body = |stack: &[Open]| stack.iter().any(|o| o.predicate && o.body);
    let push = |stack: &mut Vec<Open>, open: Open| {
        stack.push(open);
        if stack.len() > MAX_CONDITION_NESTING {
            return Err(format!(
                "brackets, ?: and if are nested more than {MAX_CONDITION_NESTING} deep: simplify the condition"
            ));
        }
        Ok(())
    };
    let mut count_operator = || {
        operators += 1;
        if operators > MAX_CONDITION_OPERATORS {
            return Err(format!(
                "the condition has more than {MAX_CONDITION_OPERATORS} operators: simplify it"
            ));
        }
        Ok(())
    };
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'"' | b'\'' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                (previous, piped) = (b, false);
                continue;
            }
            b'`' => {
                i += 1 + expression[i + 1..]
                    .find('`')
                    .map_or(bytes.len(), |end| end + 1);
                (previous, piped) = (b, false);
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i += expression[i..].find('\n').unwrap_or(bytes.len() - i);
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += expression[i + 2..]
                    .find("*/")
                    .map_or(bytes.len() - i, |end| end + 4);
                continue;
            }
            b'.' if bytes.get(i + 1) == Some(&b'.') => {
                return Err(
                    "ranges (a..b) are not allowed in conditions: compare with >= and <= instead"
                        .into(),
                );
            }
            b'(' | b'[' | b'{' => {
                let mut open = Open::plain(true);
                if b == b'(' {
                    if let Some(was_piped) = predicate_next.take() {
                        open.predicate = true;
                        open.body = was_piped;
                    }
                } else if b == b'[' {
                    count_operator()?;
                }
                push(&mut stack, open)?;
            }
            b')' | b']' | b'}' | b',' => {
                while stack.last().is_some_and(|o| !o.bracket) {
                    stack.pop();
                }
                if b == b',' {
                    if let Some(open) = stack.last_mut().filter(|o| o.predicate) {
                        open.body = true;
                    }
                } else {
                    stack.pop();
                }
            }
            b'?' if bytes.get(i + 1) != Some(&b'.') => {
                count_operator()?;
                push(&mut stack, Open::plain(false))?;
                // `??` is one operator.
                if bytes.get(i + 1) == Some(&b'?') {
                    i += 1;
                }
            }
            _ if is_operator_byte(b) => {
                if !is_operator_byte(previous) || previous == b'?' {
                    count_operator()?;
                }
                let lone_bar = b == b'|' && previous != b'|' && bytes.get(i + 1) != Some(&b'|');
                (previous, piped) = (b, lone_bar);
                i += 1;
                continue;
            }
            b'#' | b'$' | b'_' | b'a'..=b'z' | b'A'..=b'Z' => {
                let start = i;
                i += 1;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                let word = &expression[start..i];
                let member = previous == b'.';
                let called =
                    expression[i..].trim_start().starts_with('(') && !KEYWORDS.contains(&word);
                if member && called {
                    return Err(format!(
                        "method calls (.{word}(...)) are not available in conditions: call one of the functions {}",
                        CONDITION_FUNCTIONS.join(", ")
                    ));
                }
                if !member && called {
                    if !CONDITION_FUNCTIONS.contains(&word) {
                        return Err(format!(
                            "function {word}() is not available in conditions: use one of {}",
                            CONDITION_FUNCTIONS.join(", ")
                        ));
                    }
                    if PREDICATES.contains(&word) {
                        if in_body(&stack) {
                            return Err(format!(
                                "{word}() inside the body of another predicate is not allowed: its work would grow with the square of the result; use one map, filter, all, any, ... at a time"
                            ));
                        }
                        predicate_next = Some(piped);
                    }
                } else if !member {
                    match word {
                        "let" => {
                            return Err(
                                "let is not allowed in conditions: write the value where it is used"
                                    .into(),
                            );
                        }
                        "if" => {
                            count_operator()?;
                            push(&mut stack, Open::plain(false))?;
                        }
                        // Regular expressions are left out of the build (expr's `regex` feature).
                        "matches" => {
                            return Err(
                                "the matches operator is not available in conditions: use contains, startsWith or endsWith"
                                    .into(),
                            );
                        }
                        "and" | "or" | "not" | "in" | "contains" | "startsWith" | "endsWith" => {
                            count_operator()?
                        }
                        "result" | "$env" => {
                            if in_body(&stack) {
                                return Err(format!(
                                    "{word} cannot be used in the body of map, filter, all, any, ...: it would be copied for every element; use # for the element"
                                ));
                            }
                            results += 1;
                            if results > MAX_RESULT_REFERENCES {
                                return Err(format!(
                                    "result is named more than {MAX_RESULT_REFERENCES} times: simplify the condition"
                                ));
                            }
                        }
                        _ if word.starts_with('#') => {
                            let body = stack.iter_mut().rev().find(|o| o.predicate && o.body);
                            if let Some(open) = body {
                                open.hashes += 1;
                                if open.hashes > MAX_RESULT_REFERENCES {
                                    return Err(format!(
                                        "# is named more than {MAX_RESULT_REFERENCES} times in one predicate: simplify it"
                                    ));
                                }
                            }
                        }
                        _ => {}
                    }
                }
                (previous, piped) = (b'a', false);
                continue;
            }
            b' ' | b'\t' | b'\r' | b'\n' => {
                i += 1;
                continue;
            }
            _ => {}
        }
        (previous, piped) = (b, false);
        i += 1;
    }
    Ok(())
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

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Bool(_) => "a boolean",
        Value::Nil => "nil",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Map(_) | Value::KeyedMap(_) => "a map",
        Value::Bytes(_) => "bytes",
    }
}

/// expr's builtins with Argo Rollouts' helpers added. Built once: it is a table of functions.
fn environment() -> &'static expr::Environment<'static> {
    static ENVIRONMENT: std::sync::LazyLock<expr::Environment<'static>> =
        std::sync::LazyLock::new(|| {
            let mut env = expr::Environment::new();
            env.add_function("asInt", |call| {
                one_arg(&call.ident, &call.args).and_then(as_int)
            });
            env.add_function("asFloat", |call| {
                one_arg(&call.ident, &call.args).and_then(as_float)
            });
            env.add_function("isNaN", |call| {
                one_arg(&call.ident, &call.args).and_then(|v| float_test(v, "isNaN", f64::is_nan))
            });
            env.add_function("isInf", |call| {
                one_arg(&call.ident, &call.args)
                    .and_then(|v| float_test(v, "isInf", f64::is_infinite))
            });
            env.add_function("isNil", |call| {
                one_arg(&call.ident, &call.args).map(|v| Value::Bool(matches!(v, Value::Nil)))
            });
            env.add_function("default", |call| match call.args.as_slice() {
                [Value::Nil, fallback] => Ok(fallback.clone()),
                [Value::Float(f), fallback] if f.is_nan() => Ok(fallback.clone()),
                [value, _] => Ok(value.clone()),
                args => Err(expr::Error::ExprError(format!(
                    "default() takes 2 arguments (a value and its fallback), got {}",
                    args.len()
                ))),
            });
            env
        });
    &ENVIRONMENT
}

fn one_arg<'a>(name: &str, args: &'a [Value]) -> expr::Result<&'a Value> {
    match args {
        [value] => Ok(value),
        _ => Err(expr::Error::ExprError(format!(
            "{name}() takes 1 argument, got {}",
            args.len()
        ))),
    }
}

fn as_int(value: &Value) -> expr::Result<Value> {
    let error = |why: String| expr::Error::ExprError(format!("asInt: {why}"));
    match value {
        Value::Integer(i) => Ok(Value::Integer(*i)),
        // Go's conversion truncates toward zero; NaN and the infinities have no integer.
        Value::Float(f) if f.is_finite() && f.abs() < 9.2e18 => {
            Ok(Value::Integer(f.trunc() as i64))
        }
        Value::Float(f) => Err(error(format!("{} has no integer value", float_text(*f)))),
        Value::String(s) => s
            .trim()
            .parse::<i64>()
            .map(Value::Integer)
            .map_err(|_| error(format!("{:?} is not an integer", quoted(s)))),
        other => Err(error(format!("cannot convert {}", type_name(other)))),
    }
}

fn as_float(value: &Value) -> expr::Result<Value> {
    match value {
        Value::Integer(i) => Ok(Value::Float(*i as f64)),
        Value::Float(f) => Ok(Value::Float(*f)),
        // Rust's float syntax, like Go's ParseFloat, accepts `NaN`, `Inf` and exponents.
        Value::String(s) => s.trim().parse::<f64>().map(Value::Float).map_err(|_| {
            expr::Error::ExprError(format!("asFloat: {:?} is not a number", quoted(s)))
        }),
        other => Err(expr::Error::ExprError(format!(
            "asFloat: cannot convert {}",
            type_name(other)
        ))),
    }
}

fn float_test(value: &Value, name: &str, test: fn(f64) -> bool) -> expr::Result<Value> {
    match value {
        Value::Float(f) => Ok(Value::Bool(test(*f))),
        Value::Integer(_) => Ok(Value::Bool(false)),
        other => Err(expr::Error::ExprError(format!(
            "{name}() takes a number, got {}: index the result first, e.g. {name}(result[0])",
            type_name(other)
        ))),
    }
}

#[cfg(test)]
mod tests {
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
            message.contains(
                "metric result is nil or empty: no data returned from the metric provider"
            ),
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
}
