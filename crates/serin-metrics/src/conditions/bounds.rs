//! The bounds on a tenant's condition, checked before it is parsed: its length, nesting, operators,
//! functions, and where `result` and `#` may appear.

use super::{
    CONDITION_FUNCTIONS, KEYWORDS, MAX_CONDITION_BYTES, MAX_CONDITION_NESTING,
    MAX_CONDITION_OPERATORS, MAX_RESULT_REFERENCES, PREDICATES,
};

/// The bounds of the module's documentation, checked without parsing.
pub(super) fn check_bounds(expression: &str) -> Result<(), String> {
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
