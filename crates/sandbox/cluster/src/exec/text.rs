//! The text commands of the sandbox's images: `echo`, `grep`, `cat`, `head`, `tail`, `wc`, `sleep`.

use super::context::*;
use std::time::Duration;

/// `echo [-n] [-e] WORDS`.
pub(crate) fn echo(args: &[String]) -> Outcome {
    let (mut newline, mut escapes) = (true, false);
    let mut rest = args;
    while let Some((first, others)) = rest.split_first() {
        let Some(flags) = first.strip_prefix('-') else {
            break;
        };
        if flags.is_empty() || !flags.chars().all(|c| matches!(c, 'n' | 'e' | 'E')) {
            break;
        }
        for flag in flags.chars() {
            match flag {
                'n' => newline = false,
                'e' => escapes = true,
                _ => escapes = false,
            }
        }
        rest = others;
    }
    let mut text = rest.join(" ");
    if escapes {
        text = unescape(&text);
    }
    if newline {
        text.push('\n');
    }
    Outcome::out(text)
}

/// Backslash escapes of `echo -e` and curl's `-w`: `\n`, `\t`, `\r`, `\\`.
pub(crate) fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// The lines of a text, without their line ends.
pub(crate) fn lines(text: &str) -> Vec<&str> {
    let text = text.strip_suffix('\n').unwrap_or(text);
    if text.is_empty() {
        Vec::new()
    } else {
        text.split('\n').collect()
    }
}

/// Input files of a command: standard input for none or `-`, empty for `/dev/null`; the
/// sandbox's images have no other files to read.
pub(crate) fn read_inputs(program: &str, files: &[String], stdin: &str) -> Result<String, String> {
    if files.is_empty() {
        return Ok(stdin.to_string());
    }
    let mut text = String::new();
    for file in files {
        match file.as_str() {
            "-" => text.push_str(stdin),
            "/dev/null" => {}
            other => {
                return Err(format!(
                    "{program}: {other}: No such file or directory (the sandbox's images have no files to read)\n"
                ));
            }
        }
    }
    Ok(text)
}

/// A basic (BRE, `grep`) or extended (ERE, `grep -E`) regular expression as the `regex` crate
/// writes it: `\<` and `\>` are word boundaries, bracket expressions keep POSIX's rules (a
/// backslash is literal), and in a BRE `+ ? | ( ) { }` are literal unless escaped, `*` at the
/// start is literal, and `^`/`$` anchor only at the ends.
pub(crate) fn posix_regex(pattern: &str, extended: bool) -> String {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::new();
    let mut index = 0;
    while index < chars.len() {
        let c = chars[index];
        let at_start = index == 0 || (!extended && out.ends_with("(?:"));
        match c {
            '\\' if index + 1 < chars.len() => {
                let next = chars[index + 1];
                index += 1;
                match next {
                    '<' | '>' => out.push_str("\\b"),
                    '+' | '?' | '|' | '{' | '}' if !extended => out.push(next),
                    '(' if !extended => out.push_str("(?:"),
                    ')' if !extended => out.push(')'),
                    _ => {
                        out.push('\\');
                        out.push(next);
                    }
                }
            }
            '[' => {
                // A bracket expression: copied up to its closing `]` (a `]` first is literal).
                let mut end = index + 1;
                if chars.get(end) == Some(&'^') {
                    end += 1;
                }
                if chars.get(end) == Some(&']') {
                    end += 1;
                }
                let mut class = String::from("[");
                let mut inner = index + 1;
                let mut closed = false;
                while inner < chars.len() {
                    let k = chars[inner];
                    if k == ']' && inner >= end {
                        closed = true;
                        break;
                    }
                    if k == '[' && chars.get(inner + 1) == Some(&':') {
                        // A POSIX class such as [:alpha:], which the regex crate also reads.
                        if let Some(stop) = (inner + 2..chars.len().saturating_sub(1))
                            .find(|&i| chars[i] == ':' && chars[i + 1] == ']')
                        {
                            class.extend(&chars[inner..stop + 2]);
                            inner = stop + 2;
                            continue;
                        }
                    }
                    if inner == index + 1 && k == '^' {
                        class.push('^');
                    } else if matches!(k, '\\' | '[' | '&' | '~')
                        || (k == '-' && chars.get(inner + 1) == Some(&'-'))
                    {
                        class.push('\\');
                        class.push(k);
                    } else {
                        class.push(k);
                    }
                    inner += 1;
                }
                if closed {
                    class.push(']');
                    out.push_str(&class);
                    index = inner;
                } else {
                    // No closing bracket: an error, as in grep.
                    out.push('[');
                }
            }
            '+' | '?' | '|' | '(' | ')' | '{' | '}' if !extended => {
                out.push('\\');
                out.push(c);
            }
            '*' if at_start && !extended => out.push_str("\\*"),
            '^' if !extended && !at_start => out.push_str("\\^"),
            '$' if !extended
                && index + 1 < chars.len()
                && !(chars[index + 1] == '\\'
                    && matches!(chars.get(index + 2), Some(')' | '|'))) =>
            {
                out.push_str("\\$")
            }
            _ => out.push(c),
        }
        index += 1;
    }
    out
}

/// `grep` over standard input: `-q -v -i -c -n -o -w -x -s`, `-E` (extended), `-F` (fixed
/// strings), plain basic regular expressions, `-e PATTERN`; exit 0 when a line was selected, 1
/// when none, 2 on an error.
pub(crate) fn grep(program: &str, args: &[String], stdin: &str) -> Outcome {
    let (mut quiet, mut invert, mut ignore_case, mut count) = (false, false, false, false);
    let (mut number, mut only, mut word, mut line) = (false, false, false, false);
    let mut no_messages = false;
    let mut extended = program == "egrep";
    let mut fixed = program == "fgrep";
    let mut patterns: Vec<String> = Vec::new();
    let mut operands: Vec<String> = Vec::new();
    let mut words = args.iter();
    let mut options_done = false;
    while let Some(arg) = words.next() {
        if options_done || !arg.starts_with('-') || arg == "-" {
            operands.push(arg.clone());
            continue;
        }
        if arg == "--" {
            options_done = true;
            continue;
        }
        if let Some(long) = arg.strip_prefix("--") {
            match long {
                "quiet" | "silent" => quiet = true,
                "invert-match" => invert = true,
                "ignore-case" => ignore_case = true,
                "count" => count = true,
                "line-number" => number = true,
                "only-matching" => only = true,
                "word-regexp" => word = true,
                "line-regexp" => line = true,
                "no-messages" => no_messages = true,
                "extended-regexp" => extended = true,
                "fixed-strings" => fixed = true,
                "basic-regexp" => (extended, fixed) = (false, false),
                _ => match long.split_once('=') {
                    Some(("regexp", pattern)) => patterns.push(pattern.to_string()),
                    _ => {
                        return Outcome::failed(
                            2,
                            format!("grep: unrecognized option '{arg}' (the sandbox's grep)\n"),
                        );
                    }
                },
            }
            continue;
        }
        let flags: Vec<char> = arg[1..].chars().collect();
        for (at, flag) in flags.iter().enumerate() {
            match flag {
                'q' => quiet = true,
                's' => no_messages = true,
                'v' => invert = true,
                'i' | 'y' => ignore_case = true,
                'c' => count = true,
                'n' => number = true,
                'o' => only = true,
                'w' => word = true,
                'x' => line = true,
                'E' => extended = true,
                'F' => fixed = true,
                'G' => (extended, fixed) = (false, false),
                'e' => {
                    let inline: String = flags[at + 1..].iter().collect();
                    let pattern = if inline.is_empty() {
                        match words.next() {
                            Some(pattern) => pattern.clone(),
                            None => {
                                return Outcome::failed(
                                    2,
                                    "grep: option requires an argument -- 'e'\n".into(),
                                );
                            }
                        }
                    } else {
                        inline
                    };
                    patterns.push(pattern);
                    break;
                }
                other => {
                    return Outcome::failed(
                        2,
                        format!("grep: invalid option -- '{other}' (the sandbox's grep)\n"),
                    );
                }
            }
        }
    }
    if patterns.is_empty() {
        if operands.is_empty() {
            return Outcome::failed(2, "Usage: grep [OPTION]... PATTERNS [FILE]...\n".into());
        }
        patterns.push(operands.remove(0));
    }
    let input = match read_inputs("grep", &operands, stdin) {
        Ok(input) => input,
        Err(message) => {
            let message = if no_messages { String::new() } else { message };
            return Outcome::failed(2, message);
        }
    };
    let alternatives: Vec<String> = patterns
        .iter()
        .flat_map(|p| p.split('\n'))
        .map(|p| {
            let body = if fixed {
                regex::escape(p)
            } else {
                posix_regex(p, extended)
            };
            match (word, line) {
                (_, true) => format!("^(?:{body})$"),
                (true, false) => format!(r"\b(?:{body})\b"),
                _ => format!("(?:{body})"),
            }
        })
        .collect();
    let regex = match regex::RegexBuilder::new(&alternatives.join("|"))
        .case_insensitive(ignore_case)
        .build()
    {
        Ok(regex) => regex,
        Err(error) => {
            let reason = error.to_string();
            let reason = reason.lines().last().unwrap_or_default().trim().to_string();
            return Outcome::failed(
                2,
                format!(
                    "grep: invalid regular expression {:?}: {reason}\n",
                    patterns.join("\n")
                ),
            );
        }
    };
    let mut out = String::new();
    let mut selected = 0;
    for (index, text) in lines(&input).into_iter().enumerate() {
        if regex.is_match(text) == invert {
            continue;
        }
        selected += 1;
        if quiet {
            break;
        }
        if count {
            continue;
        }
        let prefix = if number {
            format!("{}:", index + 1)
        } else {
            String::new()
        };
        if only && !invert {
            for found in regex.find_iter(text).filter(|m| !m.as_str().is_empty()) {
                out.push_str(&format!("{prefix}{}\n", found.as_str()));
            }
        } else {
            out.push_str(&format!("{prefix}{text}\n"));
        }
    }
    if count && !quiet {
        out = format!("{selected}\n");
    }
    Outcome {
        stdout: out,
        stderr: String::new(),
        exit_code: if selected > 0 { 0 } else { 1 },
    }
}

/// `cat` of standard input (no operand, or `-`).
pub(crate) fn cat(args: &[String], stdin: &str) -> Outcome {
    if let Some(flag) = args.iter().find(|a| a.starts_with('-') && *a != "-") {
        return Outcome::failed(
            1,
            format!("cat: unrecognized option '{flag}' (the sandbox's cat)\n"),
        );
    }
    match read_inputs("cat", args, stdin) {
        Ok(text) => Outcome::out(text),
        Err(message) => Outcome::failed(1, message),
    }
}

/// `head`/`tail` of standard input: `-n N`, `-nN`, `-N` (10 lines by default), `tail -n +N`,
/// and `-c N` bytes.
pub(crate) fn head_or_tail(program: &str, args: &[String], stdin: &str) -> Outcome {
    let mut count: Option<String> = None;
    let mut bytes = false;
    let mut operands = Vec::new();
    let mut words = args.iter();
    while let Some(arg) = words.next() {
        let value = if let Some(rest) = arg
            .strip_prefix("-n")
            .or_else(|| arg.strip_prefix("--lines="))
        {
            rest
        } else if let Some(rest) = arg
            .strip_prefix("-c")
            .or_else(|| arg.strip_prefix("--bytes="))
        {
            bytes = true;
            rest
        } else if arg.len() > 1
            && arg.starts_with('-')
            && arg[1..].chars().all(|c| c.is_ascii_digit())
        {
            &arg[1..]
        } else if arg.starts_with('-') && arg != "-" {
            return Outcome::failed(
                1,
                format!("{program}: invalid option '{arg}' (the sandbox's {program}: -n, -c)\n"),
            );
        } else {
            operands.push(arg.clone());
            continue;
        };
        count = Some(if value.is_empty() {
            match words.next() {
                Some(value) => value.clone(),
                None => {
                    return Outcome::failed(1, format!("{program}: option requires an argument\n"));
                }
            }
        } else {
            value.to_string()
        });
    }
    let text = match read_inputs(program, &operands, stdin) {
        Ok(text) => text,
        Err(message) => return Outcome::failed(1, message),
    };
    let count = count.unwrap_or_else(|| "10".into());
    let from_start = program == "tail" && count.starts_with('+');
    let Ok(number) = count.trim_start_matches(['+', '-']).parse::<usize>() else {
        return Outcome::failed(1, format!("{program}: invalid number '{count}'\n"));
    };
    if bytes {
        let data = text.as_bytes();
        let slice = match (program, from_start) {
            ("head", _) => &data[..number.min(data.len())],
            (_, true) => &data[number.saturating_sub(1).min(data.len())..],
            _ => &data[data.len().saturating_sub(number)..],
        };
        return Outcome::out(String::from_utf8_lossy(slice).into_owned());
    }
    let all = lines(&text);
    let kept: &[&str] = match (program, from_start) {
        ("head", _) => &all[..number.min(all.len())],
        (_, true) => &all[number.saturating_sub(1).min(all.len())..],
        _ => &all[all.len().saturating_sub(number)..],
    };
    Outcome::out(kept.iter().map(|l| format!("{l}\n")).collect())
}

/// `wc -l`, `-w`, `-c`, `-m` of standard input (all three without a flag).
pub(crate) fn wc(args: &[String], stdin: &str) -> Outcome {
    let mut wanted = Vec::new();
    let mut operands = Vec::new();
    for arg in args {
        match arg.strip_prefix('-').filter(|f| !f.is_empty()) {
            Some(flags) => {
                for flag in flags.chars() {
                    match flag {
                        'l' | 'w' | 'c' | 'm' => wanted.push(flag),
                        other => {
                            return Outcome::failed(
                                1,
                                format!(
                                    "wc: invalid option -- '{other}' (the sandbox's wc: -l, -w, -c, -m)\n"
                                ),
                            );
                        }
                    }
                }
            }
            None => operands.push(arg.clone()),
        }
    }
    let text = match read_inputs("wc", &operands, stdin) {
        Ok(text) => text,
        Err(message) => return Outcome::failed(1, message),
    };
    if wanted.is_empty() {
        wanted = vec!['l', 'w', 'c'];
    }
    let counts: Vec<usize> = ['l', 'w', 'c', 'm']
        .into_iter()
        .filter(|flag| wanted.contains(flag))
        .map(|flag| match flag {
            'l' => text.matches('\n').count(),
            'w' => text.split_whitespace().count(),
            'c' => text.len(),
            _ => text.chars().count(),
        })
        .collect();
    let line = if counts.len() == 1 {
        counts[0].to_string()
    } else {
        counts
            .iter()
            .map(|n| format!("{n:>7}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    Outcome::out(format!("{line}\n"))
}

/// `sleep N` (seconds, fractions and the `s`, `m`, `h` suffixes), at most [`MAX_SLEEP`] in all.
pub(crate) async fn sleep(args: &[String]) -> Outcome {
    if args.is_empty() {
        return Outcome::failed(1, "sleep: missing operand\n".into());
    }
    let mut total = 0.0;
    for arg in args {
        let (number, unit) = match arg.char_indices().last() {
            Some((at, 's')) => (&arg[..at], 1.0),
            Some((at, 'm')) => (&arg[..at], 60.0),
            Some((at, 'h')) => (&arg[..at], 3600.0),
            _ => (arg.as_str(), 1.0),
        };
        match number.parse::<f64>() {
            Ok(value) if value.is_finite() && value >= 0.0 => total += value * unit,
            _ => return Outcome::failed(1, format!("sleep: invalid time interval '{arg}'\n")),
        }
    }
    if total > MAX_SLEEP.as_secs_f64() {
        return Outcome::failed(
            1,
            format!(
                "sleep: {total}s is longer than the sandbox's shell waits (at most {} s)\n",
                MAX_SLEEP.as_secs()
            ),
        );
    }
    tokio::time::sleep(Duration::from_secs_f64(total)).await;
    Outcome::default()
}
