//! Hides credentials in command lines before they are logged, recorded or put in an error
//! message: the password of hey's `-a user:password` and curl's `-u user:password`, the value of
//! a header (hey's and curl's `-H`, curl's and wget's `--header`) whose name says it carries a
//! credential, and the password in a URL's `user:password@`. Only the text shown changes; the command runs with the real values.

use std::ops::Range;

/// What replaces a hidden value.
pub const MASK: &str = "***";

/// Whether a header with this name carries a credential: Authorization, Proxy-Authorization,
/// Cookie, Set-Cookie, and any name containing `auth`, `token`, `key`, `secret`, `password`,
/// `session` or `cookie` (case-insensitive).
pub fn is_sensitive_header(name: &str) -> bool {
    let name = name.trim().to_ascii_lowercase();
    [
        "auth", "token", "key", "secret", "password", "session", "cookie",
    ]
    .iter()
    .any(|part| name.contains(part))
}

/// A word of a command line: where it is in the line and its text after quote removal.
struct Word {
    span: Range<usize>,
    text: String,
    /// The word is the first of a command (the line's first, or after `|`, `&`, `;`, a newline).
    starts_command: bool,
}

/// Splits `line` as a shell would for simple commands, keeping each word's place in the line. It
/// never fails: an unterminated quote runs to the end of the line.
fn words(line: &str) -> Vec<Word> {
    let mut words = Vec::new();
    let mut chars = line.char_indices().peekable();
    let mut current: Option<(usize, String)> = None;
    let mut starts_command = true;
    let mut finish = |current: &mut Option<(usize, String)>, end: usize, starts: &mut bool| {
        if let Some((start, text)) = current.take() {
            words.push(Word {
                span: start..end,
                text,
                starts_command: *starts,
            });
            *starts = false;
        }
    };
    while let Some((index, c)) = chars.next() {
        match c {
            ' ' | '\t' | '\r' => finish(&mut current, index, &mut starts_command),
            // `2>&1` is a redirection, not a separator.
            '&' if current
                .as_ref()
                .is_some_and(|(_, text)| text.ends_with(['>', '<'])) =>
            {
                current
                    .get_or_insert_with(|| (index, String::new()))
                    .1
                    .push(c);
            }
            '\n' | '|' | '&' | ';' | '(' | ')' => {
                finish(&mut current, index, &mut starts_command);
                starts_command = true;
            }
            '\'' => {
                let word = current.get_or_insert_with(|| (index, String::new()));
                for (_, quoted) in chars.by_ref() {
                    if quoted == '\'' {
                        break;
                    }
                    word.1.push(quoted);
                }
            }
            '"' => {
                let word = current.get_or_insert_with(|| (index, String::new()));
                while let Some((_, quoted)) = chars.next() {
                    match quoted {
                        '"' => break,
                        '\\' => match chars.peek() {
                            Some((_, escaped @ ('"' | '\\' | '$' | '`'))) => {
                                word.1.push(*escaped);
                                chars.next();
                            }
                            _ => word.1.push('\\'),
                        },
                        other => word.1.push(other),
                    }
                }
            }
            '\\' => {
                let word = current.get_or_insert_with(|| (index, String::new()));
                if let Some((_, escaped)) = chars.next() {
                    word.1.push(escaped);
                }
            }
            other => current
                .get_or_insert_with(|| (index, String::new()))
                .1
                .push(other),
        }
        if current.is_some() && chars.peek().is_none() {
            finish(&mut current, line.len(), &mut starts_command);
        }
    }
    words
}

/// `value` written as a word that reads like `original` did: in the same quotes, bare when it
/// needs none, else in single quotes.
fn written_like(original: &str, value: &str) -> String {
    let bare = !value.is_empty()
        && !value.contains(|c: char| c.is_whitespace() || "'\"\\$`;|&<>()".contains(c));
    match original.chars().next() {
        Some('"') if !value.contains(['"', '\\', '$', '`']) => format!("\"{value}\""),
        Some('\'') if !value.contains('\'') => format!("'{value}'"),
        _ if bare => value.to_string(),
        _ => format!("'{}'", value.replace('\'', "'\\''")),
    }
}

/// `user:password` as `user:***`; without a colon all of it is hidden.
fn mask_user_password(value: &str) -> String {
    match value.split_once(':') {
        Some((user, _)) => format!("{user}:{MASK}"),
        None => MASK.to_string(),
    }
}

/// `Name: value` with the value hidden when the name says it is a credential; a header without
/// a colon is hidden whole, as nothing tells what it is.
fn mask_header(value: &str) -> Option<String> {
    let Some((name, rest)) = value.split_once(':') else {
        return Some(MASK.to_string());
    };
    if !is_sensitive_header(name) {
        return None;
    }
    let spaces = &rest[..rest.len() - rest.trim_start().len()];
    Some(format!("{name}:{spaces}{MASK}"))
}

/// A URL with the password of its `user:password@` hidden, if it has one.
fn mask_url(value: &str) -> Option<String> {
    let (scheme, rest) = value.split_once("://")?;
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (userinfo, host) = rest[..authority_end].rsplit_once('@')?;
    let (user, _) = userinfo.split_once(':')?;
    Some(format!(
        "{scheme}://{user}:{MASK}@{host}{}",
        &rest[authority_end..]
    ))
}

/// The program a command word names, without its directory.
fn program(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// What a flag's value is, when it may hold a credential.
#[derive(Clone, Copy)]
enum Secret {
    UserPassword,
    Header,
}

fn flag_secret(flag: &str, program: &str) -> Option<Secret> {
    match (flag, program) {
        ("-H" | "--H", "hey") | ("-H" | "--header", "curl") | ("--header", "wget") => {
            Some(Secret::Header)
        }
        ("-a" | "--a", "hey") | ("-u" | "--user", "curl") => Some(Secret::UserPassword),
        _ => None,
    }
}

fn masked_value(secret: Secret, value: &str) -> Option<String> {
    match secret {
        Secret::UserPassword => Some(mask_user_password(value)),
        Secret::Header => mask_header(value),
    }
}

/// `line` with its credentials hidden (see the module documentation), e.g.
/// `hey -a user:*** -H "Authorization: ***" http://podinfo-canary.test:9898/`.
pub fn mask_credentials(line: &str) -> String {
    let words = words(line);
    let mut replacements: Vec<(Range<usize>, String)> = Vec::new();
    let mut command = "";
    let mut index = 0;
    while index < words.len() {
        let word = &words[index];
        let original = &line[word.span.clone()];
        if word.starts_command {
            command = program(&word.text);
        }
        if let Some(secret) = flag_secret(&word.text, command) {
            if let Some(value) = words.get(index + 1) {
                let written = &line[value.span.clone()];
                if let Some(masked) = masked_value(secret, &value.text) {
                    replacements.push((value.span.clone(), written_like(written, &masked)));
                }
                index += 2;
                continue;
            }
        } else if let Some((flag, value)) = word.text.split_once('=')
            && let Some(secret) = flag_secret(flag, command)
        {
            if let Some(masked) = masked_value(secret, value) {
                // Keep the quotes where they were: before the flag or after its `=`.
                let shown = match original.strip_prefix(&format!("{flag}=")) {
                    Some(after) => format!("{flag}={}", written_like(after, &masked)),
                    None => written_like(original, &format!("{flag}={masked}")),
                };
                replacements.push((word.span.clone(), shown));
            }
        } else if let Some(masked) = mask_url(&word.text) {
            replacements.push((word.span.clone(), written_like(original, &masked)));
        }
        index += 1;
    }
    let mut shown = String::with_capacity(line.len());
    let mut copied = 0;
    for (span, replacement) in replacements {
        shown.push_str(&line[copied..span.start]);
        shown.push_str(&replacement);
        copied = span.end;
    }
    shown.push_str(&line[copied..]);
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_auth_keeps_the_user() {
        assert_eq!(
            mask_credentials(
                "hey -z 1m -q 10 -c 2 -a admin:s3cr3t http://podinfo-canary.test:9898/"
            ),
            "hey -z 1m -q 10 -c 2 -a admin:*** http://podinfo-canary.test:9898/"
        );
        assert_eq!(
            mask_credentials("/usr/local/bin/hey -a='admin:pa ss' -n 1 http://a/"),
            "/usr/local/bin/hey -a='admin:***' -n 1 http://a/"
        );
        assert_eq!(
            mask_credentials("hey --a \"admin:p@ss:word\" http://a/"),
            "hey --a \"admin:***\" http://a/"
        );
        assert_eq!(
            mask_credentials("hey -a nocolon http://a/"),
            "hey -a *** http://a/"
        );
    }

    #[test]
    fn credential_headers_lose_their_values_quoted_or_not() {
        let line = r#"hey -n 10 -c 1 -H "Authorization: Bearer eyJhbGciOi.abc" -H 'X-Api-Key: k-123' -H X-Canary:insider -H Cookie:session=42 http://podinfo.test:9898/"#;
        assert_eq!(
            mask_credentials(line),
            r#"hey -n 10 -c 1 -H "Authorization: ***" -H 'X-Api-Key: ***' -H X-Canary:insider -H Cookie:*** http://podinfo.test:9898/"#
        );
        assert_eq!(
            mask_credentials(r#"hey -H="proxy-authorization: Basic dXNlcjpwYXNz" http://a/"#),
            r#"hey -H="proxy-authorization: ***" http://a/"#
        );
        assert_eq!(
            mask_credentials(r#"hey "-H=X-Auth-Token: t0k" http://a/"#),
            r#"hey "-H=X-Auth-Token: ***" http://a/"#
        );
        assert_eq!(
            mask_credentials(r"hey -H Authorization:\ Bearer\ abc http://a/"),
            "hey -H 'Authorization: ***' http://a/"
        );
        assert_eq!(
            mask_credentials("hey -H \"X-Client-Secret:\tshh\" http://a/"),
            "hey -H \"X-Client-Secret:\t***\" http://a/"
        );
    }

    #[test]
    fn shell_lines_curl_and_urls_are_masked_too() {
        assert_eq!(
            mask_credentials(
                r#"curl -s -u ops:hunter2 -H "X-Session-Token: abc" http://podinfo-canary:9898/ | grep ok && hey -a a:b http://a/"#
            ),
            r#"curl -s -u ops:*** -H "X-Session-Token: ***" http://podinfo-canary:9898/ | grep ok && hey -a a:*** http://a/"#
        );
        assert_eq!(
            mask_credentials("hey -n 1 http://user:pw@podinfo.test:9898/x?y=1"),
            "hey -n 1 http://user:***@podinfo.test:9898/x?y=1"
        );
    }

    #[test]
    fn other_words_are_left_as_written() {
        for line in [
            "hey -z 1m -q 10 -c 2 http://podinfo-canary.test:9898/",
            "ls -a x:y",
            "grep -H token file 2>&1 | sort",
            "hey -H 'Content-Type: application/json' -d '{\"a\": 1}' http://a/",
            "hey -a",
            "echo 'unterminated",
            "",
        ] {
            assert_eq!(mask_credentials(line), line);
        }
    }

    #[test]
    fn header_names_that_carry_credentials() {
        for name in [
            "Authorization",
            "proxy-authorization",
            "Cookie",
            "Set-Cookie",
            "X-API-KEY",
            "x-auth-token",
            "X-Client-Secret",
        ] {
            assert!(is_sensitive_header(name), "{name}");
        }
        for name in ["Content-Type", "X-Canary", "Accept", "Host"] {
            assert!(!is_sensitive_header(name), "{name}");
        }
    }
}
