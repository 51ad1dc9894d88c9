//! Splits a command line into words the way a POSIX shell would for simple commands (quotes and
//! backslashes), and notices when the line needs a real shell (pipes, redirections, expansions).

/// A command line split into words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandWords {
    /// The words after quote removal.
    pub words: Vec<String>,
    /// True when the line uses shell syntax this splitter does not interpret (`|`, `&&`, `;`,
    /// `>`, `$VAR`, `` ` ``, `(`), so only a shell can run it faithfully.
    pub needs_shell: bool,
}

/// Splits `line` into words; an unterminated quote is an error naming the quote.
pub fn split_command(line: &str) -> Result<CommandWords, String> {
    let mut words = Vec::new();
    let mut needs_shell = false;
    let mut current = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' | '\r' => {
                if c == '\n' {
                    // A newline separates commands in a shell script.
                    needs_shell = true;
                }
                if in_word {
                    words.push(std::mem::take(&mut current));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(other) => current.push(other),
                        None => return Err("unterminated single quote (') in the command".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(escaped @ ('"' | '\\' | '$' | '`')) => current.push(escaped),
                            Some('\n') => {}
                            Some(other) => {
                                current.push('\\');
                                current.push(other);
                            }
                            None => {
                                return Err("unterminated double quote (\") in the command".into());
                            }
                        },
                        Some(expansion @ ('$' | '`')) => {
                            needs_shell = true;
                            current.push(expansion);
                        }
                        Some(other) => current.push(other),
                        None => return Err("unterminated double quote (\") in the command".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some('\n') => {}
                    Some(other) => current.push(other),
                    None => current.push('\\'),
                }
            }
            '|' | '&' | ';' | '<' | '>' | '(' | ')' | '$' | '`' => {
                needs_shell = true;
                in_word = true;
                current.push(c);
            }
            '#' if !in_word => {
                // A comment runs to the end of the line.
                needs_shell = true;
                break;
            }
            other => {
                in_word = true;
                current.push(other);
            }
        }
    }
    if in_word {
        words.push(current);
    }
    Ok(CommandWords { words, needs_shell })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        split_command(line).unwrap().words
    }

    #[test]
    fn splits_on_whitespace_and_removes_quotes() {
        assert_eq!(
            words("hey -z 1m  http://a/"),
            ["hey", "-z", "1m", "http://a/"]
        );
        assert_eq!(
            words(r#"hey -H 'X-Canary: insider' -d "{\"a\": 1}" http://a/"#),
            [
                "hey",
                "-H",
                "X-Canary: insider",
                "-d",
                r#"{"a": 1}"#,
                "http://a/"
            ]
        );
        assert_eq!(words(r"hey -H X-A:\ b"), ["hey", "-H", "X-A: b"]);
        assert_eq!(words("''"), [""]);
    }

    #[test]
    fn notices_shell_syntax_outside_single_quotes() {
        // An unquoted `&` would put hey in the background in a shell.
        assert!(split_command("hey http://a/?x=1&y=2").unwrap().needs_shell);
        assert!(
            split_command("hey http://a/ && echo done")
                .unwrap()
                .needs_shell
        );
        assert!(split_command("hey $URL").unwrap().needs_shell);
        assert!(split_command("hey \"$URL\"").unwrap().needs_shell);
        assert!(
            !split_command("hey 'http://a/?x=1&y=2'")
                .unwrap()
                .needs_shell
        );
        assert!(
            !split_command("hey -m POST 'http://a/$x'")
                .unwrap()
                .needs_shell
        );
    }

    #[test]
    fn reports_unterminated_quotes() {
        assert!(
            split_command("hey 'http://a/")
                .unwrap_err()
                .contains("single quote")
        );
        assert!(
            split_command("hey \"http://a/")
                .unwrap_err()
                .contains("double quote")
        );
    }
}
