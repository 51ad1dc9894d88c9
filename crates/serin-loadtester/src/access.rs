//! Who may change state: the optional token (`LOADTESTER_TOKEN`) that requests starting work or
//! moving a gate must carry, and the namespace filter (`--namespace-regexp`), which only filters
//! what payloads claim.

use axum::http::HeaderMap;
use regex::Regex;
use subtle::ConstantTimeEq;

/// The environment variable the binary reads its token from (never a flag, which `ps` shows).
pub const TOKEN_ENV: &str = "LOADTESTER_TOKEN";

/// What a caller without the token is told: what to send, never the token itself.
pub const UNAUTHORIZED: &str = "this load tester requires a token to start tasks and open or close gates: send the header `Authorization: Bearer <token>`, or from a Canary webhook set `metadata.token: <token>`; the token is the value of LOADTESTER_TOKEN (in the chart, the Secret named by auth.secretName)";

/// A token as configured: surrounding white space (a Secret written from a file often ends with a
/// newline) is not part of it, and an empty one is refused, so a blank Secret cannot turn the
/// check into one every empty header passes.
pub fn token_from(value: &str) -> Result<String, String> {
    let token = value.trim();
    if token.is_empty() {
        return Err(format!(
            "{TOKEN_ENV} is set but empty; set it to the token callers must send, or unset it to run without one"
        ));
    }
    Ok(token.to_string())
}

/// Whether `given` is `expected`, compared in constant time so the answer's timing does not tell
/// how much of a guess was right.
pub fn same_token(expected: &str, given: &str) -> bool {
    expected.as_bytes().ct_eq(given.trim().as_bytes()).into()
}

/// The token of an `Authorization: Bearer <token>` header, if the request has one.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// The `--namespace-regexp` filter: `pattern` must match the whole namespace (`test` matches
/// `test`, not `test-2`), as it is wrapped in `^(?:...)$`. The pattern is checked on its own first,
/// so an unbalanced parenthesis cannot break out of the anchors.
pub fn namespace_filter(pattern: &str) -> Result<Regex, regex::Error> {
    Regex::new(pattern)?;
    Regex::new(&format!("^(?:{pattern})$"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_namespace_filter_matches_whole_namespaces() {
        let filter = namespace_filter("test").unwrap();
        assert!(filter.is_match("test"));
        for other in ["test-2", "my-test", "prod"] {
            assert!(!filter.is_match(other), "{other}");
        }
        let either = namespace_filter("team-a|team-b").unwrap();
        assert!(either.is_match("team-a") && either.is_match("team-b"));
        assert!(!either.is_match("team-a-prod") && !either.is_match("x-team-b"));
        let prefix = namespace_filter("team-.*").unwrap();
        assert!(prefix.is_match("team-a") && !prefix.is_match("a-team-a"));
        // Already anchored patterns keep working.
        assert!(namespace_filter("^test$").unwrap().is_match("test"));
        // A pattern cannot close the wrapper's group to escape the anchors.
        assert!(namespace_filter("x)|(.*").is_err());
    }

    #[test]
    fn tokens_compare_whole_and_headers_need_the_bearer_scheme() {
        assert!(same_token("s3cret", "s3cret"));
        assert!(same_token("s3cret", "s3cret\n"));
        for wrong in ["", "s3cre", "s3cret2", "S3CRET"] {
            assert!(!same_token("s3cret", wrong), "{wrong:?}");
        }
        assert_eq!(token_from(" s3cret\n").unwrap(), "s3cret");
        assert!(token_from(" \n").unwrap_err().contains("empty"));
        let mut headers = HeaderMap::new();
        headers.insert("authorization", "bearer  s3cret ".parse().unwrap());
        assert_eq!(bearer(&headers), Some("s3cret"));
        headers.insert("authorization", "Basic czNjcmV0".parse().unwrap());
        assert_eq!(bearer(&headers), None);
    }
}
