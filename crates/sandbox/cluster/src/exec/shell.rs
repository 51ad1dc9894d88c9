//! The shell: one command, a `sh -c` script (pipelines, `&&`, `||`, `;`, `!`, `exit`, `set`,
//! redirections) and the load tester's bash tasks.

use super::context::*;
use super::http::*;
use super::text::*;
use serin_loadtester::shell::{CommandRunner, RunnerOutput};
use serin_loadtester::words::{Operator, Redirect, ScriptToken};
use std::future::Future;
use std::pin::Pin;

/// Runs command lines through the sandbox's shell in a pod's context: the load tester's
/// [`CommandRunner`] for pods of Flagger's image, so their bash tasks run as `bash -c` would there.
#[derive(Clone, Debug)]
pub struct PodShell {
    /// The pod the commands run in.
    pub context: Context,
}

impl CommandRunner for PodShell {
    fn run<'a>(&'a self, line: &'a str) -> Pin<Box<dyn Future<Output = RunnerOutput> + Send + 'a>> {
        Box::pin(async move {
            let outcome = script(line, "", &self.context).await;
            RunnerOutput {
                exit_code: outcome.exit_code,
                stdout: outcome.stdout,
                stderr: outcome.stderr,
            }
        })
    }
}

/// Runs `words` (an exec request's command) in `context`, with no standard input.
pub async fn run(words: &[String], context: &Context) -> Outcome {
    command(words, "", context).await
}

/// Runs one program of the image with `stdin` as its standard input.
pub(crate) async fn command(words: &[String], stdin: &str, context: &Context) -> Outcome {
    let Some((program, args)) = words.split_first() else {
        return Outcome::failed(127, "no command given\n".into());
    };
    let program = program.rsplit('/').next().unwrap_or(program);
    match program {
        "echo" => echo(args),
        "true" | ":" => Outcome::default(),
        "false" => Outcome::status(1),
        "hostname" => Outcome::out(format!("{}\n", context.pod_name)),
        "env" => {
            let mut lines = vec![format!("HOSTNAME={}", context.pod_name)];
            lines.extend(context.env.iter().map(|(k, v)| format!("{k}={v}")));
            Outcome::out(lines.join("\n") + "\n")
        }
        "sh" | "bash" => shell_program(program, args, stdin, context).await,
        "curl" => curl(args, context).await,
        "wget" => wget(args, context).await,
        "grep" | "egrep" | "fgrep" => grep(program, args, stdin),
        "cat" => cat(args, stdin),
        "head" | "tail" => head_or_tail(program, args, stdin),
        "wc" => wc(args, stdin),
        "sleep" => sleep(args).await,
        "hey" if context.load_tester => hey(args, context).await,
        "grpc_health_probe" if context.load_tester => {
            super::grpc::grpc_health_probe(args, context).await
        }
        other => Outcome::failed(
            127,
            format!("exec: \"{other}\": executable file not found in $PATH\n"),
        ),
    }
}

/// `sh -c LINE` / `bash -c LINE`, with `-e`, `-x`, `-u` and `-o pipefail` before it.
pub(crate) async fn shell_program(
    program: &str,
    args: &[String],
    stdin: &str,
    context: &Context,
) -> Outcome {
    let mut options = ShellOptions::default();
    let mut words = args.iter();
    let mut line = None;
    while let Some(word) = words.next() {
        if word == "-o" || word == "+o" {
            match words.next().map(String::as_str) {
                Some("pipefail") => options.pipefail = word == "-o",
                Some("errexit") => options.errexit = word == "-o",
                Some(other) => {
                    return Outcome::failed(2, format!("{program}: -o {other}: invalid option\n"));
                }
                None => {
                    return Outcome::failed(
                        2,
                        format!("{program}: -o: option requires an argument\n"),
                    );
                }
            }
            continue;
        }
        let Some(flags) = word
            .strip_prefix('-')
            .filter(|f| !f.is_empty() && !word.starts_with("--"))
        else {
            break;
        };
        let mut takes_line = false;
        for flag in flags.chars() {
            match flag {
                'c' => takes_line = true,
                'e' => options.errexit = true,
                'x' => options.xtrace = true,
                'u' => {}
                other => {
                    return Outcome::failed(2, format!("{program}: -{other}: invalid option\n"));
                }
            }
        }
        if takes_line {
            line = words.next();
            break;
        }
    }
    match line {
        Some(line) => Box::pin(run_script(line, stdin, context, options)).await,
        None => Outcome::failed(
            2,
            format!("{program}: the sandbox's shell only runs `{program} -c \"<command>\"`\n"),
        ),
    }
}

/// Runs `line` as `sh -c` would in the sandbox's shell, with `stdin` as the script's standard
/// input: pipelines, `&&`, `||`, `;`, newlines, `!`, `exit`, `set -e`, `set -o pipefail`,
/// `set -x`, and redirections to `/dev/null` or between standard output and error.
pub async fn script(line: &str, stdin: &str, context: &Context) -> Outcome {
    run_script(line, stdin, context, ShellOptions::default()).await
}

/// The `set` options of one shell.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ShellOptions {
    pub(crate) errexit: bool,
    pub(crate) pipefail: bool,
    pub(crate) xtrace: bool,
}

/// One simple command: its words and its redirections with their targets.
#[derive(Debug, Default)]
pub(crate) struct Simple {
    pub(crate) words: Vec<String>,
    pub(crate) redirects: Vec<(Redirect, String)>,
}

impl Simple {
    pub(crate) fn is_empty(&self) -> bool {
        self.words.is_empty() && self.redirects.is_empty()
    }
}

/// Commands joined by `|`, possibly negated with `!`.
#[derive(Debug, Default)]
pub(crate) struct Pipeline {
    pub(crate) negated: bool,
    pub(crate) commands: Vec<Simple>,
}

/// A script: pipelines, each with the operator that joins it to the one before (`None` first).
pub(crate) type List = Vec<(Option<Operator>, Pipeline)>;

pub(crate) fn operator_text(operator: Operator) -> &'static str {
    match operator {
        Operator::Pipe => "|",
        Operator::And => "&&",
        Operator::Or => "||",
        Operator::Sequence => ";",
    }
}

pub(crate) fn parse_script(tokens: Vec<ScriptToken>) -> Result<List, String> {
    let mut list = List::new();
    let mut joined_by: Option<Operator> = None;
    let mut pipeline = Pipeline::default();
    let mut simple = Simple::default();
    let mut redirect: Option<Redirect> = None;
    for token in tokens {
        match token {
            ScriptToken::Word { text, quoted } => {
                if let Some(pending) = redirect.take() {
                    simple.redirects.push((pending, text));
                } else if text == "!"
                    && !quoted
                    && simple.is_empty()
                    && pipeline.commands.is_empty()
                {
                    pipeline.negated = !pipeline.negated;
                } else {
                    simple.words.push(text);
                }
            }
            ScriptToken::Redirect(next) => {
                if redirect.is_some() {
                    return Err(format!(
                        "syntax error: unexpected redirection `{}`",
                        next.operator
                    ));
                }
                redirect = Some(next);
            }
            ScriptToken::Operator(operator) => {
                if redirect.is_some() {
                    return Err(format!(
                        "syntax error: unexpected `{}` after a redirection",
                        operator_text(operator)
                    ));
                }
                if simple.is_empty() {
                    // An empty line, or a newline after `&&`, `||` or `|`: nothing to run yet.
                    if operator == Operator::Sequence && !pipeline.negated {
                        continue;
                    }
                    return Err(format!(
                        "syntax error: unexpected `{}`",
                        operator_text(operator)
                    ));
                }
                pipeline.commands.push(std::mem::take(&mut simple));
                if operator != Operator::Pipe {
                    list.push((joined_by, std::mem::take(&mut pipeline)));
                    joined_by = Some(operator);
                }
            }
        }
    }
    if redirect.is_some() {
        return Err("syntax error: a redirection without its target".into());
    }
    if !simple.is_empty() {
        pipeline.commands.push(simple);
        list.push((joined_by, pipeline));
    } else if !pipeline.commands.is_empty() || pipeline.negated {
        return Err("syntax error: unexpected end of the command after `|` or `!`".into());
    } else if matches!(joined_by, Some(Operator::And | Operator::Or)) {
        return Err("syntax error: unexpected end of the command after `&&` or `||`".into());
    }
    Ok(list)
}

/// How a pipeline ended: what it printed, its status, and whether `exit` ended the script.
pub(crate) struct Ran {
    pub(crate) outcome: Outcome,
    pub(crate) exit: bool,
}

pub(crate) async fn run_script(
    line: &str,
    stdin: &str,
    context: &Context,
    options: ShellOptions,
) -> Outcome {
    let tokens = match serin_loadtester::words::split_script(line) {
        Ok(tokens) => tokens,
        Err(error) if error.starts_with("unterminated") => {
            return Outcome::failed(2, format!("sh: syntax error: {error}\n"));
        }
        Err(error) => {
            return Outcome::failed(
                2,
                format!("sh: {error} is not supported by the sandbox's shell\n"),
            );
        }
    };
    let list = match parse_script(tokens) {
        Ok(list) => list,
        Err(error) => return Outcome::failed(2, format!("sh: {error}\n")),
    };
    let mut options = options;
    let mut result = Outcome::default();
    let mut status = 0;
    for (index, (joined_by, pipeline)) in list.iter().enumerate() {
        let runs = match joined_by {
            Some(Operator::And) => status == 0,
            Some(Operator::Or) => status != 0,
            _ => true,
        };
        if !runs {
            continue;
        }
        let ran = run_pipeline(pipeline, stdin, context, &mut options, status).await;
        result.stdout.push_str(&ran.outcome.stdout);
        result.stderr.push_str(&ran.outcome.stderr);
        status = ran.outcome.exit_code;
        if ran.exit {
            break;
        }
        // `set -e`: a failure ends the script unless it is tested (`!`, or followed by && or ||).
        let tested = pipeline.negated
            || matches!(
                list.get(index + 1),
                Some((Some(Operator::And | Operator::Or), _))
            );
        if options.errexit && status != 0 && !tested {
            break;
        }
    }
    result.exit_code = status;
    result
}

/// Where a command's standard output or error goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sink {
    Out,
    Err,
    Null,
}

pub(crate) async fn run_pipeline(
    pipeline: &Pipeline,
    stdin: &str,
    context: &Context,
    options: &mut ShellOptions,
    last_status: i32,
) -> Ran {
    let mut input = stdin.to_string();
    let mut stderr = String::new();
    let mut stdout = String::new();
    let mut statuses = Vec::new();
    let alone = pipeline.commands.len() == 1;
    let mut exit = false;
    for (index, simple) in pipeline.commands.iter().enumerate() {
        let last = index + 1 == pipeline.commands.len();
        // Redirections first, in order: `>/dev/null 2>&1` silences both, `2>&1 >/dev/null` only
        // standard output.
        // The sinks of file descriptors 1 and 2.
        let mut sinks = [Sink::Out, Sink::Err];
        let mut command_input = std::mem::take(&mut input);
        let mut refused = None;
        for (redirect, target) in &simple.redirects {
            let slot = match redirect.fd {
                1 => Some(0),
                2 => Some(1),
                _ => None,
            };
            let bad_fd = || {
                Some(format!(
                    "sh: {}: bad file descriptor (the sandbox's shell redirects 1 and 2)\n",
                    redirect.fd
                ))
            };
            match redirect.operator {
                ">" | ">>" if target != "/dev/null" => {
                    refused = Some(format!(
                        "sh: can't create {target}: Read-only file system (the sandbox's shell writes only to /dev/null)\n"
                    ));
                }
                ">" | ">>" if redirect.both => sinks = [Sink::Null, Sink::Null],
                ">" | ">>" => match slot {
                    Some(slot) => sinks[slot] = Sink::Null,
                    None => refused = bad_fd(),
                },
                ">&" => {
                    let to = match target.as_str() {
                        "1" => sinks[0],
                        "2" => sinks[1],
                        _ => {
                            refused = Some(format!(
                                "sh: {target}: bad file descriptor (the sandbox's shell redirects to 1 and 2)\n"
                            ));
                            break;
                        }
                    };
                    match slot {
                        Some(slot) => sinks[slot] = to,
                        None => refused = bad_fd(),
                    }
                }
                "<" if redirect.fd != 0 => refused = bad_fd(),
                "<" if target == "/dev/null" => command_input.clear(),
                _ => {
                    refused = Some(format!(
                        "sh: can't open {target}: no such file (the sandbox's shell reads only /dev/null)\n"
                    ));
                }
            }
            if refused.is_some() {
                break;
            }
        }
        let outcome = if let Some(message) = refused {
            Outcome::failed(1, message)
        } else if simple.words.is_empty() {
            Outcome::default()
        } else {
            if options.xtrace {
                stderr.push_str(&format!("+ {}\n", simple.words.join(" ")));
            }
            match builtin(&simple.words, options, last_status) {
                Some(Builtin::Done(outcome)) => outcome,
                Some(Builtin::Exit(code)) => {
                    // In a pipeline each command runs in its own subshell: `exit` ends only it.
                    exit = alone;
                    Outcome::status(code)
                }
                None => command(&simple.words, &command_input, context).await,
            }
        };
        statuses.push(outcome.exit_code);
        let (mut out, mut err) = (String::new(), String::new());
        for (text, sink) in [(outcome.stdout, sinks[0]), (outcome.stderr, sinks[1])] {
            match sink {
                Sink::Out => out.push_str(&text),
                Sink::Err => err.push_str(&text),
                Sink::Null => {}
            }
        }
        stderr.push_str(&err);
        if last {
            stdout = out;
        } else {
            input = out;
        }
    }
    let last_code = statuses.last().copied().unwrap_or(0);
    let mut code = if options.pipefail {
        statuses
            .iter()
            .rev()
            .copied()
            .find(|c| *c != 0)
            .unwrap_or(0)
    } else {
        last_code
    };
    if pipeline.negated {
        code = i32::from(code == 0);
    }
    Ran {
        outcome: Outcome {
            stdout,
            stderr,
            exit_code: code,
        },
        exit,
    }
}

/// What a shell builtin did.
pub(crate) enum Builtin {
    Done(Outcome),
    Exit(i32),
}

/// The shell's own commands: `exit` and `set`.
pub(crate) fn builtin(
    words: &[String],
    options: &mut ShellOptions,
    last_status: i32,
) -> Option<Builtin> {
    match words[0].as_str() {
        "exit" => Some(match words.get(1) {
            None => Builtin::Exit(last_status),
            Some(code) => match code.parse::<i64>() {
                Ok(code) => Builtin::Exit((code & 0xff) as i32),
                Err(_) => Builtin::Done(Outcome::failed(
                    2,
                    format!("sh: exit: {code}: numeric argument required\n"),
                )),
            },
        }),
        "set" => {
            let mut args = words[1..].iter();
            while let Some(arg) = args.next() {
                let on = arg.starts_with('-');
                let Some(flags) = arg.strip_prefix(['-', '+']) else {
                    return Some(Builtin::Done(Outcome::failed(
                        2,
                        format!(
                            "sh: set: {arg}: the sandbox's shell has no positional parameters\n"
                        ),
                    )));
                };
                for flag in flags.chars() {
                    match flag {
                        'e' => options.errexit = on,
                        'x' => options.xtrace = on,
                        'u' => {}
                        'o' => match args.next().map(String::as_str) {
                            Some("pipefail") => options.pipefail = on,
                            Some("errexit") => options.errexit = on,
                            Some("nounset") => {}
                            other => {
                                return Some(Builtin::Done(Outcome::failed(
                                    2,
                                    format!(
                                        "sh: set: -o {}: not an option of the sandbox's shell (errexit, pipefail, nounset)\n",
                                        other.unwrap_or_default()
                                    ),
                                )));
                            }
                        },
                        other => {
                            return Some(Builtin::Done(Outcome::failed(
                                2,
                                format!(
                                    "sh: set: -{other}: not an option of the sandbox's shell (-e, -x, -u, -o)\n"
                                ),
                            )));
                        }
                    }
                }
            }
            Some(Builtin::Done(Outcome::default()))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serin_loadtester::proxy::ProxyConfig;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    fn context() -> Context {
        Context {
            pod_name: "lt-1".into(),
            namespace: "test".into(),
            env: vec![("A".into(), "1".into())],
            load_tester: true,
            proxy: ProxyConfig::direct(),
            local_ports: Vec::new(),
        }
    }

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    async fn sh(line: &str) -> Outcome {
        script(line, "", &context()).await
    }

    #[tokio::test]
    async fn the_images_commands_answer_as_a_shell_would() {
        assert_eq!(
            run(&words("echo hello there"), &context()).await.stdout,
            "hello there\n"
        );
        assert_eq!(run(&words("hostname"), &context()).await.stdout, "lt-1\n");
        assert!(
            run(&words("env"), &context())
                .await
                .stdout
                .contains("A=1\n")
        );
        let shell = run(
            &["sh".into(), "-c".into(), "echo 'quoted words'".into()],
            &context(),
        )
        .await;
        assert_eq!(shell.stdout, "quoted words\n");
        let missing = run(&words("nc -z db 5432"), &context()).await;
        assert_eq!(missing.exit_code, 127);
        assert_eq!(
            missing.stderr,
            "exec: \"nc\": executable file not found in $PATH\n"
        );
        assert_eq!(status(&missing)["details"]["causes"][0]["message"], "127");
        assert_eq!(status(&Outcome::default())["status"], "Success");
        let piped = run(
            &["bash".into(), "-c".into(), "echo a | wc -l".into()],
            &context(),
        )
        .await;
        assert_eq!((piped.stdout.as_str(), piped.exit_code), ("1\n", 0));
        // `exit` is the shell's, not a program of the image.
        assert_eq!(run(&words("exit 3"), &context()).await.exit_code, 127);
    }

    #[tokio::test]
    async fn a_pipeline_ends_with_its_last_commands_status() {
        let found = sh("echo '{\"token\": \"abc\"}' | grep token").await;
        assert_eq!(found.exit_code, 0);
        assert_eq!(found.stdout, "{\"token\": \"abc\"}\n");
        let missing = sh("echo '{\"token\": \"abc\"}' | grep nosuchword").await;
        assert_eq!((missing.exit_code, missing.stdout.as_str()), (1, ""));
        // Only the last command's status counts, unless pipefail.
        assert_eq!(sh("false | echo x").await.exit_code, 0);
        assert_eq!(sh("set -o pipefail; false | echo x").await.exit_code, 1);
        assert_eq!(sh("bash -o pipefail -c 'false | true'").await.exit_code, 1);
        assert_eq!(sh("! echo a | grep -q b").await.exit_code, 0);
        let counted = sh("printf_missing | wc -l").await;
        assert_eq!(counted.stdout, "0\n");
        assert!(
            counted
                .stderr
                .contains("\"printf_missing\": executable file not found")
        );
        let lines = sh("echo 'a\nb\nc\nd' | head -n 2 | tail -1").await;
        assert_eq!(lines.stdout, "b\n");
        assert_eq!(sh("echo 'a b' | cat | cat -").await.stdout, "a b\n");
        assert_eq!(sh("echo -n abc | wc -c").await.stdout, "3\n");
    }

    #[tokio::test]
    async fn and_or_lists_and_exit_statuses() {
        assert_eq!(sh("true && echo yes || echo no").await.stdout, "yes\n");
        assert_eq!(sh("false && echo yes || echo no").await.stdout, "no\n");
        let skipped = sh("false && echo never").await;
        assert_eq!((skipped.stdout.as_str(), skipped.exit_code), ("", 1));
        assert_eq!(sh("false || true").await.exit_code, 0);
        let sequence = sh("echo one; false; echo two").await;
        assert_eq!(
            (sequence.stdout.as_str(), sequence.exit_code),
            ("one\ntwo\n", 0)
        );
        let exited = sh("echo before; exit 3; echo after").await;
        assert_eq!((exited.stdout.as_str(), exited.exit_code), ("before\n", 3));
        assert_eq!(sh("false || exit").await.exit_code, 1);
        // In a pipeline, `exit` ends only its own subshell.
        assert_eq!(sh("exit 4 | echo x; echo on").await.stdout, "x\non\n");
        let errexit = sh("set -e; echo a; false; echo b").await;
        assert_eq!((errexit.stdout.as_str(), errexit.exit_code), ("a\n", 1));
        assert_eq!(sh("set -e; false || echo tested").await.stdout, "tested\n");
        assert_eq!(sh("bash -ec 'false; echo b'").await.stdout, "");
        let multiline = sh("echo a &&\n  echo b\n# a comment\necho c").await;
        assert_eq!(multiline.stdout, "a\nb\nc\n");
        let traced = sh("set -x; echo hi").await;
        assert_eq!(traced.stderr, "+ echo hi\n");
    }

    #[tokio::test]
    async fn redirections_reach_dev_null_or_the_other_stream() {
        let silenced = sh("nc >/dev/null 2>&1; echo $?x").await;
        assert_eq!(silenced.exit_code, 2, "{silenced:?}");
        assert!(
            silenced.stderr.contains("parameter expansion"),
            "{silenced:?}"
        );
        let quiet = sh("nc > /dev/null 2>&1 || echo failed").await;
        assert_eq!(
            (quiet.stdout.as_str(), quiet.stderr.as_str()),
            ("failed\n", "")
        );
        let joined = sh("nc 2>&1 | grep -c 'not found'").await;
        assert_eq!(joined.stdout, "1\n");
        assert_eq!(sh("echo out >&2").await.stderr, "out\n");
        assert_eq!(sh("echo gone &>/dev/null").await.stdout, "");
        let file = sh("echo x > /tmp/f").await;
        assert_eq!(file.exit_code, 1);
        assert!(file.stderr.contains("Read-only file system"), "{file:?}");
        assert_eq!(sh("cat < /dev/null | wc -l").await.stdout, "0\n");
    }

    #[tokio::test]
    async fn what_the_shell_does_not_understand_is_said() {
        for (line, code, says) in [
            ("echo $HOME", 2, "parameter expansion"),
            ("echo $(date)", 2, "command substitution"),
            ("sleep 1 &", 2, "background jobs"),
            ("echo 'open", 2, "unterminated"),
            ("| grep x", 2, "syntax error"),
            ("echo a &&", 2, "syntax error"),
            ("cat /etc/passwd", 1, "No such file"),
            ("grep x /etc/hosts", 2, "No such file"),
            ("sleep 61", 1, "at most 60 s"),
            ("set -o vi", 2, "not an option"),
            ("grep -P x", 2, "invalid option"),
            ("curl --compressed http://a/", 2, "unknown"),
            ("kubectl get pods", 127, "executable file not found"),
        ] {
            let outcome = sh(line).await;
            assert_eq!(outcome.exit_code, code, "{line}: {outcome:?}");
            assert!(outcome.stderr.contains(says), "{line}: {outcome:?}");
        }
        let started = Instant::now();
        assert_eq!(sh("sleep 0.2 && echo woke").await.stdout, "woke\n");
        assert!(started.elapsed() >= Duration::from_millis(200));
    }

    #[tokio::test]
    async fn grep_selects_lines_as_grep_does() {
        let text = "Alpha 1\nbeta 22\ngamma 333\n";
        let grep = |args: &str| grep("grep", &words(args), text);
        assert_eq!(grep("beta").stdout, "beta 22\n");
        assert_eq!(grep("-v beta").stdout, "Alpha 1\ngamma 333\n");
        assert_eq!(grep("-i alpha").stdout, "Alpha 1\n");
        assert_eq!(grep("-c a").stdout, "3\n");
        assert_eq!(grep("-ci ALPHA").stdout, "1\n");
        let quiet = grep("-q gamma");
        assert_eq!((quiet.stdout.as_str(), quiet.exit_code), ("", 0));
        assert_eq!(grep("-q delta").exit_code, 1);
        assert_eq!(grep("-c delta").stdout, "0\n");
        assert_eq!(grep("-E [0-9]{3}").stdout, "gamma 333\n");
        // In a basic expression braces are literal unless escaped.
        assert_eq!(grep("[0-9]{3}").exit_code, 1);
        assert_eq!(grep(r"[0-9]\{3\}").stdout, "gamma 333\n");
        assert_eq!(grep("^beta").stdout, "beta 22\n");
        assert_eq!(grep("2$").stdout, "beta 22\n");
        assert_eq!(grep("-E a|b").stdout, text);
        assert_eq!(grep("a|b").exit_code, 1);
        assert_eq!(grep("-F a.").exit_code, 1);
        assert_eq!(grep("a.").exit_code, 0);
        assert_eq!(grep("-w 22").stdout, "beta 22\n");
        assert_eq!(grep("-w 2").exit_code, 1);
        assert_eq!(grep("-x beta").exit_code, 1);
        assert_eq!(grep("-o [0-9][0-9]*").stdout, "1\n22\n333\n");
        assert_eq!(grep("-n gamma").stdout, "3:gamma 333\n");
        assert_eq!(grep("-e beta -e gamma").stdout, "beta 22\ngamma 333\n");
        assert_eq!(grep("[[:digit:]]").stdout, text);
        let bad = grep("-E (");
        assert_eq!(bad.exit_code, 2, "{bad:?}");
        assert!(bad.stderr.contains("invalid regular expression"));
    }

    #[test]
    fn short_service_names_resolve_in_the_pods_namespace() {
        let context = context();
        let target = pod_url("http://podinfo-canary:9898/token", &context).unwrap();
        assert_eq!(target.url.as_str(), "http://podinfo-canary.test:9898/token");
        assert_eq!(target.host_header.as_deref(), Some("podinfo-canary:9898"));
        let bare = pod_url("web/healthz", &context).unwrap();
        assert_eq!(bare.url.as_str(), "http://web.test/healthz");
        for kept in [
            "http://podinfo.other:9898/",
            "http://podinfo.test.svc.cluster.local/",
            "http://localhost:8080/healthz",
            "http://127.0.0.1:9/",
        ] {
            let target = pod_url(kept, &context).unwrap();
            assert_eq!(target.url.as_str(), kept);
            assert!(target.host_header.is_none());
        }
        // With the pod's ports known, localhost is the pod itself.
        let pod = Context {
            local_ports: vec![(8080, 40123)],
            ..context
        };
        let own = pod_url("http://localhost:8080/healthz", &pod).unwrap();
        assert_eq!(own.url.as_str(), "http://127.0.0.1:40123/healthz");
        let closed = pod_url("http://localhost:9999/", &pod).err().unwrap();
        assert_eq!(closed.0, 7);
        assert!(closed.1.contains("Connection refused"), "{}", closed.1);
        assert_eq!(pod_url("https://a/", &pod).err().unwrap().0, 1);
    }

    /// A forward proxy standing in for the mesh: records what reaches it and answers podinfo's
    /// `/token`, `/status/404` and `/delay/5`.
    async fn recording_proxy() -> (std::net::SocketAddr, Arc<Mutex<Vec<String>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let record = record.clone();
            async move {
                let host = request
                    .headers()
                    .get("host")
                    .and_then(|h| h.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let (method, uri) = (request.method().to_string(), request.uri().to_string());
                let body = axum::body::to_bytes(request.into_body(), 1 << 20)
                    .await
                    .unwrap_or_default();
                record.lock().unwrap().push(format!(
                    "{method} {uri} host={host} body={}",
                    String::from_utf8_lossy(&body)
                ));
                if uri.ends_with("/status/404") {
                    (axum::http::StatusCode::NOT_FOUND, String::new())
                } else if uri.ends_with("/delay/5") {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    (axum::http::StatusCode::OK, String::new())
                } else {
                    (
                        axum::http::StatusCode::OK,
                        "{\"token\":\"abc\",\"expires_at\":\"2030-01-01T00:00:00Z\"}".into(),
                    )
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (address, seen)
    }

    #[tokio::test]
    async fn flaggers_acceptance_test_runs_through_the_pods_proxy() {
        let (proxy, seen) = recording_proxy().await;
        let shell = PodShell {
            context: Context {
                proxy: ProxyConfig::through(&proxy.to_string(), &["127.0.0.1"]).unwrap(),
                ..context()
            },
        };
        let passed = shell
            .run("curl -sd 'test' http://podinfo-canary:9898/token | grep token")
            .await;
        assert_eq!(passed.exit_code, 0, "{passed:?}");
        assert!(passed.stdout.contains("\"token\":\"abc\""), "{passed:?}");
        assert_eq!(
            seen.lock().unwrap().last().unwrap(),
            "POST http://podinfo-canary.test:9898/token host=podinfo-canary:9898 body=test"
        );
        let failed = shell
            .run("curl -s -d test http://podinfo-canary:9898/token | grep nosuchword")
            .await;
        assert_eq!((failed.exit_code, failed.stdout.as_str()), (1, ""));
        let code = shell
            .run("curl -s -o /dev/null -w '%{http_code}\\n' -X POST -H 'X-A: b' podinfo:9898/status/404")
            .await;
        assert_eq!(code.stdout, "404\n");
        assert!(
            seen.lock()
                .unwrap()
                .last()
                .unwrap()
                .starts_with("POST http://podinfo.test:9898/status/404"),
        );
        let fail = shell.run("curl -sSf http://podinfo:9898/status/404").await;
        assert_eq!(fail.exit_code, 22);
        assert_eq!(
            fail.stderr,
            "curl: (22) The requested URL returned error: 404\n"
        );
        assert_eq!(
            shell
                .run("curl -sf http://podinfo:9898/status/404")
                .await
                .stderr,
            ""
        );
        let slow = shell
            .run("curl -s -m 0.3 http://podinfo:9898/delay/5")
            .await;
        assert_eq!(slow.exit_code, 28);
        let wget = shell
            .run("wget --quiet --tries=1 --timeout=4 --spider http://podinfo:9898/ && wget -qO- podinfo:9898/")
            .await;
        assert_eq!(wget.exit_code, 0, "{wget:?}");
        assert!(wget.stdout.contains("token"), "{wget:?}");
        let missing = shell
            .run("wget -q -O- http://podinfo:9898/status/404")
            .await;
        assert_eq!(missing.exit_code, 1);
        assert!(missing.stderr.contains("404 Not Found"), "{missing:?}");
    }
}
