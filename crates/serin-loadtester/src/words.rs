//! Splits a command line into words the way a POSIX shell would for simple commands (quotes and
//! backslashes), and notices when the line needs a real shell (pipes, redirections, expansions).
//! [`split_script`] goes one step further for small scripts: it also returns the control
//! operators (`|`, `&&`, `||`, `;`, newlines) and redirections between the words.

/// A command line split into words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandWords {
    /// The words after quote removal.
    pub words: Vec<String>,
    /// True when the line uses shell syntax this splitter does not interpret (`|`, `&&`, `;`,
    /// `>`, `$VAR`, `` ` ``, `(`), so only a shell can run it faithfully.
    pub needs_shell: bool,
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

/// Reads a single-quoted string, after its opening quote, into `current`: every character is
/// literal up to the closing quote.
fn single_quoted(chars: &mut Chars, current: &mut String) -> Result<(), String> {
    loop {
        match chars.next() {
            Some('\'') => return Ok(()),
            Some(other) => current.push(other),
            None => return Err("unterminated single quote (') in the command".into()),
        }
    }
}

/// Reads a double-quoted string, after its opening quote, into `current`, with the shell's
/// backslash escapes; `expansion` decides what an unescaped `$` or backquote does, given the
/// character after it.
fn double_quoted(
    chars: &mut Chars,
    current: &mut String,
    mut expansion: impl FnMut(char, Option<char>, &mut String) -> Result<(), String>,
) -> Result<(), String> {
    const UNTERMINATED: &str = "unterminated double quote (\") in the command";
    loop {
        match chars.next() {
            Some('"') => return Ok(()),
            Some('\\') => match chars.next() {
                Some(escaped @ ('"' | '\\' | '$' | '`')) => current.push(escaped),
                Some('\n') => {}
                Some(other) => {
                    current.push('\\');
                    current.push(other);
                }
                None => return Err(UNTERMINATED.into()),
            },
            Some(c @ ('$' | '`')) => {
                let next = chars.peek().copied();
                expansion(c, next, current)?;
            }
            Some(other) => current.push(other),
            None => return Err(UNTERMINATED.into()),
        }
    }
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
                single_quoted(&mut chars, &mut current)?;
            }
            '"' => {
                in_word = true;
                double_quoted(&mut chars, &mut current, |c, _, current| {
                    needs_shell = true;
                    current.push(c);
                    Ok(())
                })?;
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

/// A control operator between the commands of a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// `|`: the left command's output is the right command's input.
    Pipe,
    /// `&&`: run the right side when the left succeeded.
    And,
    /// `||`: run the right side when the left failed.
    Or,
    /// `;` or a newline: run the right side after the left.
    Sequence,
}

/// A redirection operator; its target is the next word (`2>&1`: `>&` with the target `1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    /// The file descriptor redirected: the digits written before the operator, else 1 for output
    /// and 0 for input (`&>` redirects both 1 and 2 and is written with `fd` 1 and `both`).
    pub fd: u32,
    /// `>`, `>>`, `<`, `>&` or `<&`.
    pub operator: &'static str,
    /// True for `&>` and `&>>` (standard output and standard error together).
    pub both: bool,
}

/// One token of a script: a word, a control operator or a redirection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScriptToken {
    /// A word after quote removal; `quoted` when any part of it was quoted or escaped, so it is
    /// never a reserved word such as `!`.
    Word {
        /// The word's text.
        text: String,
        /// Whether a quote or backslash appeared in it.
        quoted: bool,
    },
    /// A control operator.
    Operator(Operator),
    /// A redirection operator, followed by its target word.
    Redirect(Redirect),
}

/// Splits a small shell script into words, control operators and redirections, with the quoting
/// rules of [`split_command`]. What it cannot represent is an error naming the construct:
/// parameter expansion (`$VAR`, `${..}`, `$?`), command substitution (`` ` ``, `$(..)`),
/// subshells and groups with parentheses, background jobs (`&`), here-documents (`<<`) and
/// unterminated quotes.
pub fn split_script(line: &str) -> Result<Vec<ScriptToken>, String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut in_word = false;
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    fn flush(
        tokens: &mut Vec<ScriptToken>,
        current: &mut String,
        in_word: &mut bool,
        quoted: &mut bool,
    ) {
        if *in_word {
            tokens.push(ScriptToken::Word {
                text: std::mem::take(current),
                quoted: *quoted,
            });
        }
        *in_word = false;
        *quoted = false;
    }
    let expansion = |next: Option<&char>| -> Option<String> {
        match next {
            Some('(') => Some("command substitution $(...)".into()),
            Some(c) if c.is_ascii_alphanumeric() || "_{?@*#$!-".contains(*c) => {
                Some("parameter expansion ($NAME, ${...}, $?)".into())
            }
            _ => None,
        }
    };
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\r' => flush(&mut tokens, &mut current, &mut in_word, &mut quoted),
            '\n' => {
                flush(&mut tokens, &mut current, &mut in_word, &mut quoted);
                tokens.push(ScriptToken::Operator(Operator::Sequence));
            }
            '\'' => {
                in_word = true;
                quoted = true;
                single_quoted(&mut chars, &mut current)?;
            }
            '"' => {
                in_word = true;
                quoted = true;
                double_quoted(&mut chars, &mut current, |c, next, current| {
                    match (c, expansion(next.as_ref())) {
                        ('`', _) => return Err("command substitution (`...`)".into()),
                        (_, Some(what)) => return Err(what),
                        _ => current.push('$'),
                    }
                    Ok(())
                })?;
            }
            '\\' => {
                in_word = true;
                quoted = true;
                match chars.next() {
                    Some('\n') => {}
                    Some(other) => current.push(other),
                    None => current.push('\\'),
                }
            }
            '$' => match expansion(chars.peek()) {
                Some(what) => return Err(what),
                None => {
                    in_word = true;
                    current.push('$');
                }
            },
            '`' => return Err("command substitution (`...`)".into()),
            '(' | ')' => return Err("subshells and groups with parentheses".into()),
            '|' => {
                flush(&mut tokens, &mut current, &mut in_word, &mut quoted);
                if chars.next_if_eq(&'|').is_some() {
                    tokens.push(ScriptToken::Operator(Operator::Or));
                } else {
                    tokens.push(ScriptToken::Operator(Operator::Pipe));
                }
            }
            ';' => {
                flush(&mut tokens, &mut current, &mut in_word, &mut quoted);
                if chars.peek() == Some(&';') {
                    return Err("case clauses (;;)".into());
                }
                tokens.push(ScriptToken::Operator(Operator::Sequence));
            }
            '&' => {
                flush(&mut tokens, &mut current, &mut in_word, &mut quoted);
                if chars.next_if_eq(&'&').is_some() {
                    tokens.push(ScriptToken::Operator(Operator::And));
                } else if chars.next_if_eq(&'>').is_some() {
                    let operator = if chars.next_if_eq(&'>').is_some() {
                        ">>"
                    } else {
                        ">"
                    };
                    tokens.push(ScriptToken::Redirect(Redirect {
                        fd: 1,
                        operator,
                        both: true,
                    }));
                } else {
                    return Err("background jobs (&)".into());
                }
            }
            '>' | '<' => {
                // Digits written right before the operator name the file descriptor.
                let fd = if in_word
                    && !quoted
                    && !current.is_empty()
                    && current.chars().all(|d| d.is_ascii_digit())
                {
                    let fd = current
                        .parse()
                        .map_err(|_| format!("bad file descriptor {current}"))?;
                    current.clear();
                    in_word = false;
                    Some(fd)
                } else {
                    flush(&mut tokens, &mut current, &mut in_word, &mut quoted);
                    None
                };
                let operator = match (c, chars.peek()) {
                    ('>', Some('>')) => {
                        chars.next();
                        ">>"
                    }
                    ('>', Some('&')) => {
                        chars.next();
                        ">&"
                    }
                    ('<', Some('&')) => {
                        chars.next();
                        "<&"
                    }
                    ('<', Some('<')) => return Err("here-documents (<<)".into()),
                    ('>', _) => ">",
                    _ => "<",
                };
                tokens.push(ScriptToken::Redirect(Redirect {
                    fd: fd.unwrap_or(if c == '>' { 1 } else { 0 }),
                    operator,
                    both: false,
                }));
            }
            '#' if !in_word => {
                // A comment runs to the end of the line.
                while chars.next_if(|next| *next != '\n').is_some() {}
            }
            other => {
                in_word = true;
                current.push(other);
            }
        }
    }
    flush(&mut tokens, &mut current, &mut in_word, &mut quoted);
    Ok(tokens)
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

    fn script(line: &str) -> Vec<ScriptToken> {
        split_script(line).unwrap()
    }

    fn word(text: &str) -> ScriptToken {
        ScriptToken::Word {
            text: text.into(),
            quoted: false,
        }
    }

    #[test]
    fn scripts_split_into_words_operators_and_redirections() {
        assert_eq!(
            script("curl -sd 'test' http://a/token | grep token"),
            vec![
                word("curl"),
                word("-sd"),
                ScriptToken::Word {
                    text: "test".into(),
                    quoted: true
                },
                word("http://a/token"),
                ScriptToken::Operator(Operator::Pipe),
                word("grep"),
                word("token"),
            ]
        );
        assert_eq!(
            script("a&&b||c;d\ne # comment | not a pipe"),
            vec![
                word("a"),
                ScriptToken::Operator(Operator::And),
                word("b"),
                ScriptToken::Operator(Operator::Or),
                word("c"),
                ScriptToken::Operator(Operator::Sequence),
                word("d"),
                ScriptToken::Operator(Operator::Sequence),
                word("e"),
            ]
        );
        assert_eq!(
            script("a 2>&1 >/dev/null"),
            vec![
                word("a"),
                ScriptToken::Redirect(Redirect {
                    fd: 2,
                    operator: ">&",
                    both: false
                }),
                word("1"),
                ScriptToken::Redirect(Redirect {
                    fd: 1,
                    operator: ">",
                    both: false
                }),
                word("/dev/null"),
            ]
        );
        // `$` that starts no expansion is an ordinary character, as in a shell.
        assert_eq!(script("grep token$"), vec![word("grep"), word("token$")]);
        assert_eq!(
            script("echo '$HOME'")[1],
            ScriptToken::Word {
                text: "$HOME".into(),
                quoted: true
            }
        );
    }

    #[test]
    fn scripts_name_what_they_cannot_represent() {
        for (line, what) in [
            ("echo $HOME", "parameter expansion"),
            ("echo \"${A}\"", "parameter expansion"),
            ("echo $(date)", "command substitution"),
            ("echo `date`", "command substitution"),
            ("(cd /; ls)", "parentheses"),
            ("sleep 1 &", "background"),
            ("cat <<EOF", "here-documents"),
            ("echo 'a", "single quote"),
        ] {
            let error = split_script(line).unwrap_err();
            assert!(error.contains(what), "{line}: {error}");
        }
    }
}
