//! Argo Rollouts' helpers (`asInt`, `asFloat`, `isNaN`, `isInf`, `isNil`, `default`) on expr's
//! environment.

use super::float_text;
use expr::Value;
use serin_api::limits::quoted;

pub(super) fn type_name(value: &Value) -> &'static str {
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
pub(super) fn environment() -> &'static expr::Environment<'static> {
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
