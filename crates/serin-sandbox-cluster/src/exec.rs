//! `kubectl exec` over kubectl's WebSocket streaming protocol (`v5.channel.k8s.io`, or `v4`): the
//! command runs "in the pod's context" — the sandbox's images have a small, honest set of commands:
//! `echo`, `true`, `false`, `hostname`, `env`, `curl` and `wget` (HTTP sent through the mesh
//! proxy, as from a pod with a sidecar), `grep`, `cat`, `head`, `tail`, `wc`, `sleep`, `hey` in
//! the load tester image, and `sh -c`/`bash -c` of a small script: pipelines, `&&`, `||`, `;`,
//! `!`, `exit`, `set -e`/`-o pipefail`/`-x`, and redirections to `/dev/null` or between standard
//! output and error. Anything else is not in the image (exit code 127) or not understood by the
//! sandbox's shell (exit code 2), with a message saying which.
//!
//! Short Service names resolve in the pod's namespace, as its DNS search path would
//! (`podinfo-canary` from a pod in `test` is `podinfo-canary.test`), and `localhost` is the pod
//! itself: its declared ports reach its server. The same interpreter runs the bash tasks of
//! Flagger's load tester image ([`PodShell`]).

use axum::extract::ws::{Message, WebSocket};
use serde_json::{Value, json};
use serin_loadtester::proxy::ProxyConfig;
use serin_loadtester::shell::{CommandRunner, RunnerOutput};
use serin_loadtester::words::{Operator, Redirect, ScriptToken};
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

/// The subprotocols the sandbox speaks, in preference order.
pub const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

/// Longest `sleep` the sandbox's shell waits.
pub const MAX_SLEEP: Duration = Duration::from_secs(60);

/// How long curl and wget wait for an answer unless told otherwise (`--max-time`, `-T`).
const DEFAULT_HTTP_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest `--max-time` or `-T` honoured.
const MAX_HTTP_TIMEOUT: Duration = Duration::from_secs(600);

/// What a command printed and how it ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// The exit code.
    pub exit_code: i32,
}

impl Outcome {
    fn out(text: String) -> Self {
        Outcome {
            stdout: text,
            ..Outcome::default()
        }
    }

    fn failed(code: i32, stderr: String) -> Self {
        Outcome {
            stderr,
            exit_code: code,
            ..Outcome::default()
        }
    }

    fn status(code: i32) -> Self {
        Outcome {
            exit_code: code,
            ..Outcome::default()
        }
    }
}

/// Where a command runs: the pod's name and namespace, its container's environment, whether its
/// image is the load tester's, how its HTTP traffic leaves the pod, and which loopback port
/// serves each of the pod's own ports.
#[derive(Clone, Debug)]
pub struct Context {
    /// The pod's name (`hostname`).
    pub pod_name: String,
    /// The pod's namespace: short Service names are searched in it, as the pod's DNS would.
    pub namespace: String,
    /// The container's `env` values.
    pub env: Vec<(String, String)>,
    /// The load tester image (which has `hey`).
    pub load_tester: bool,
    /// The pod's outgoing proxy (the mesh proxy under `serin sandbox up`).
    pub proxy: ProxyConfig,
    /// The pod's ports as `(container port, loopback port)`: `localhost:PORT` in the pod reaches
    /// the loopback port, as inside the pod's network namespace; a port not listed refuses
    /// connections. Empty: the pod's ports are unknown and `localhost` is the host's.
    pub local_ports: Vec<(u16, u16)>,
}

impl Context {
    /// The context of `container` in `pod`, whose HTTP traffic leaves through `proxy`; its local
    /// ports come from the pod's `status.sandboxPorts`.
    pub fn of(pod: &Value, container: &Value, proxy: ProxyConfig) -> Self {
        // As the kubelet resolves it for the container's process (fieldRefs included).
        let env = crate::process::container_env(pod, container);
        let image = container["image"].as_str().unwrap_or_default();
        let local_ports = pod["status"][serin_sandbox_apiserver::services::PORTS_FIELD]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|entry| {
                let port = u16::try_from(entry["containerPort"].as_u64()?).ok()?;
                let host = u16::try_from(entry["hostPort"].as_u64()?).ok()?;
                Some((port, host))
            })
            .collect();
        Context {
            pod_name: pod["metadata"]["name"].as_str().unwrap_or_default().into(),
            namespace: pod["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .into(),
            env,
            load_tester: image.contains("loadtester"),
            proxy,
            local_ports,
        }
    }
}

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
async fn command(words: &[String], stdin: &str, context: &Context) -> Outcome {
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
        other => Outcome::failed(
            127,
            format!("exec: \"{other}\": executable file not found in $PATH\n"),
        ),
    }
}

/// `sh -c LINE` / `bash -c LINE`, with `-e`, `-x`, `-u` and `-o pipefail` before it.
async fn shell_program(program: &str, args: &[String], stdin: &str, context: &Context) -> Outcome {
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
struct ShellOptions {
    errexit: bool,
    pipefail: bool,
    xtrace: bool,
}

/// One simple command: its words and its redirections with their targets.
#[derive(Debug, Default)]
struct Simple {
    words: Vec<String>,
    redirects: Vec<(Redirect, String)>,
}

impl Simple {
    fn is_empty(&self) -> bool {
        self.words.is_empty() && self.redirects.is_empty()
    }
}

/// Commands joined by `|`, possibly negated with `!`.
#[derive(Debug, Default)]
struct Pipeline {
    negated: bool,
    commands: Vec<Simple>,
}

/// A script: pipelines, each with the operator that joins it to the one before (`None` first).
type List = Vec<(Option<Operator>, Pipeline)>;

fn operator_text(operator: Operator) -> &'static str {
    match operator {
        Operator::Pipe => "|",
        Operator::And => "&&",
        Operator::Or => "||",
        Operator::Sequence => ";",
    }
}

fn parse_script(tokens: Vec<ScriptToken>) -> Result<List, String> {
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
struct Ran {
    outcome: Outcome,
    exit: bool,
}

async fn run_script(line: &str, stdin: &str, context: &Context, options: ShellOptions) -> Outcome {
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
enum Sink {
    Out,
    Err,
    Null,
}

async fn run_pipeline(
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
enum Builtin {
    Done(Outcome),
    Exit(i32),
}

/// The shell's own commands: `exit` and `set`.
fn builtin(words: &[String], options: &mut ShellOptions, last_status: i32) -> Option<Builtin> {
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

/// `echo [-n] [-e] WORDS`.
fn echo(args: &[String]) -> Outcome {
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
fn unescape(text: &str) -> String {
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
fn lines(text: &str) -> Vec<&str> {
    let text = text.strip_suffix('\n').unwrap_or(text);
    if text.is_empty() {
        Vec::new()
    } else {
        text.split('\n').collect()
    }
}

/// Input files of a command: standard input for none or `-`, empty for `/dev/null`; the
/// sandbox's images have no other files to read.
fn read_inputs(program: &str, files: &[String], stdin: &str) -> Result<String, String> {
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
fn posix_regex(pattern: &str, extended: bool) -> String {
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
fn grep(program: &str, args: &[String], stdin: &str) -> Outcome {
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
fn cat(args: &[String], stdin: &str) -> Outcome {
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
fn head_or_tail(program: &str, args: &[String], stdin: &str) -> Outcome {
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
fn wc(args: &[String], stdin: &str) -> Outcome {
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
async fn sleep(args: &[String]) -> Outcome {
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

/// Where a URL written in the pod goes.
struct PodUrl {
    /// The URL to request.
    url: reqwest::Url,
    /// The Host header to send when the URL was rewritten (the host as written).
    host_header: Option<String>,
}

/// Resolves `text` as from inside the pod: a short Service name is searched in the pod's
/// namespace (`podinfo-canary` → `podinfo-canary.test`, the Host header keeps the name as
/// written), and `localhost` ports are the pod's own. `Err` is curl's message and exit code.
fn pod_url(text: &str, context: &Context) -> Result<PodUrl, (i32, String)> {
    let with_scheme = if text.contains("://") {
        text.to_string()
    } else {
        format!("http://{text}")
    };
    let mut url =
        reqwest::Url::parse(&with_scheme).map_err(|error| (3, format!("URL rejected: {error}")))?;
    if url.scheme() != "http" {
        return Err((
            1,
            format!(
                "Protocol \"{}\" not supported (the sandbox's pods speak plain HTTP; the mesh adds TLS)",
                url.scheme()
            ),
        ));
    }
    let host = url.host_str().unwrap_or_default().to_string();
    let written = match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.clone(),
    };
    let port = url.port_or_known_default().unwrap_or(80);
    let loopback = matches!(host.as_str(), "localhost" | "127.0.0.1" | "[::1]");
    if loopback && !context.local_ports.is_empty() {
        let Some((_, served)) = context.local_ports.iter().find(|(own, _)| *own == port) else {
            return Err((
                7,
                format!("Failed to connect to {host} port {port}: Connection refused"),
            ));
        };
        let _ = url.set_host(Some("127.0.0.1"));
        let _ = url.set_port(Some(*served));
        return Ok(PodUrl {
            url,
            host_header: Some(written),
        });
    }
    if let Some(name) = serin_loadtester::proxy::search_name(&host, &context.namespace)
        && url.set_host(Some(&name)).is_ok()
    {
        return Ok(PodUrl {
            url,
            host_header: Some(written),
        });
    }
    Ok(PodUrl {
        url,
        host_header: None,
    })
}

fn client(
    context: &Context,
    follow: bool,
    timeout: Duration,
    connect_timeout: Option<Duration>,
) -> reqwest::Result<reqwest::Client> {
    let config = context.proxy.clone();
    let proxy = reqwest::Proxy::custom(move |url| {
        let host = url.host_str()?;
        config
            .proxy_for(host)
            .map(|(proxy_host, port)| format!("http://{proxy_host}:{port}"))
    });
    let mut builder = reqwest::Client::builder()
        .proxy(proxy)
        .timeout(timeout)
        .redirect(if follow {
            reqwest::redirect::Policy::limited(50)
        } else {
            reqwest::redirect::Policy::none()
        });
    if let Some(connect) = connect_timeout {
        builder = builder.connect_timeout(connect);
    }
    builder.build()
}

/// A duration in (fractional) seconds, as curl's `--max-time` and wget's `-T` take it, capped at
/// [`MAX_HTTP_TIMEOUT`].
fn seconds(text: &str) -> Option<Duration> {
    let value: f64 = text.parse().ok()?;
    (value.is_finite() && value >= 0.0)
        .then(|| Duration::from_secs_f64(value).min(MAX_HTTP_TIMEOUT))
}

/// curl's options as the sandbox's curl reads them.
#[derive(Default)]
struct CurlOptions {
    url: Option<String>,
    method: Option<String>,
    headers: Vec<String>,
    data: Vec<String>,
    output: Option<String>,
    write_out: Option<String>,
    fail: bool,
    silent: bool,
    show_error: bool,
    follow: bool,
    include: bool,
    head: bool,
    max_time: Option<Duration>,
    connect_timeout: Option<Duration>,
    user: Option<String>,
}

/// Reads curl's command line: short options alone or combined (`-sd 'x'`, `-sSf`, `-XPOST`),
/// long options, and the URL. `Err` is the message for exit code 2.
fn parse_curl(args: &[String]) -> Result<CurlOptions, String> {
    let mut options = CurlOptions::default();
    let mut words = args.iter();
    // The long name of each short option (the ones that take a value end with `=`).
    let short = |flag: char| -> Option<&'static str> {
        Some(match flag {
            's' => "silent",
            'S' => "show-error",
            'f' => "fail",
            'L' => "location",
            'v' => "verbose",
            'k' => "insecure",
            'i' => "include",
            'I' => "head",
            'd' => "data=",
            'X' => "request=",
            'H' => "header=",
            'o' => "output=",
            'w' => "write-out=",
            'm' => "max-time=",
            'A' => "user-agent=",
            'u' => "user=",
            _ => return None,
        })
    };
    let apply =
        |name: &str, given: Option<String>, options: &mut CurlOptions| -> Result<(), String> {
            let value = || given.clone().unwrap_or_default();
            match name {
                "silent" => options.silent = true,
                "show-error" => options.show_error = true,
                "fail" => options.fail = true,
                "location" => options.follow = true,
                "verbose" | "insecure" => {}
                "include" => options.include = true,
                "head" => options.head = true,
                "data" | "data-ascii" | "data-binary" if value().starts_with('@') => {
                    return Err(format!(
                        "curl: option --{name}: the sandbox's curl reads no files ({})",
                        value()
                    ));
                }
                "data" | "data-ascii" | "data-binary" | "data-raw" => options.data.push(value()),
                "request" => options.method = Some(value()),
                "header" => options.headers.push(value()),
                "output" => options.output = Some(value()),
                "write-out" => options.write_out = Some(value()),
                "user-agent" => options.headers.push(format!("User-Agent: {}", value())),
                "user" => options.user = Some(value()),
                "max-time" | "connect-timeout" => {
                    let Some(duration) = seconds(&value()) else {
                        return Err(format!(
                            "curl: option --{name}: expected a proper numerical parameter"
                        ));
                    };
                    if name == "max-time" {
                        options.max_time = Some(duration);
                    } else {
                        options.connect_timeout = Some(duration);
                    }
                }
                other => {
                    return Err(format!(
                        "curl: option --{other}: is unknown to the sandbox's curl"
                    ));
                }
            }
            Ok(())
        };
    let takes_value = |name: &str| {
        matches!(
            name,
            "data"
                | "data-ascii"
                | "data-binary"
                | "data-raw"
                | "data-urlencode"
                | "request"
                | "header"
                | "output"
                | "write-out"
                | "user-agent"
                | "user"
                | "max-time"
                | "connect-timeout"
        )
    };
    while let Some(word) = words.next() {
        if let Some(long) = word.strip_prefix("--") {
            let value = if takes_value(long) {
                match words.next() {
                    Some(value) => Some(value.clone()),
                    None => return Err(format!("curl: option --{long}: requires parameter")),
                }
            } else {
                None
            };
            apply(long, value, &mut options)?;
        } else if word.len() > 1 && word.starts_with('-') {
            let flags: Vec<char> = word[1..].chars().collect();
            for (at, flag) in flags.iter().enumerate() {
                let Some(name) = short(*flag) else {
                    return Err(format!(
                        "curl: option -{flag}: is unknown to the sandbox's curl"
                    ));
                };
                if let Some(name) = name.strip_suffix('=') {
                    // The rest of the word is the value (`-XPOST`), else the next word.
                    let inline: String = flags[at + 1..].iter().collect();
                    let value = if inline.is_empty() {
                        match words.next() {
                            Some(value) => value.clone(),
                            None => {
                                return Err(format!("curl: option -{flag}: requires parameter"));
                            }
                        }
                    } else {
                        inline
                    };
                    apply(name, Some(value), &mut options)?;
                    break;
                }
                apply(name, None, &mut options)?;
            }
        } else {
            options.url = Some(word.clone());
        }
    }
    Ok(options)
}

/// The response as `-i` and `-I` print it: status line and headers.
fn head_text(response: &reqwest::Response) -> String {
    let status = response.status();
    let mut text = format!(
        "HTTP/1.1 {} {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    for (name, value) in response.headers() {
        text.push_str(&format!(
            "{name}: {}\r\n",
            value.to_str().unwrap_or_default()
        ));
    }
    text.push_str("\r\n");
    text
}

/// curl's `--write-out` variables: `http_code`/`response_code`, `time_total`,
/// `size_download`, `url_effective`, `content_type`.
fn write_out(format: &str, values: &[(&str, String)]) -> (String, String) {
    let format = unescape(format);
    let (mut out, mut warnings) = (String::new(), String::new());
    let mut rest = format.as_str();
    while let Some(start) = rest.find("%{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let name = &after[..end];
        match values.iter().find(|(key, _)| *key == name) {
            Some((_, value)) => out.push_str(value),
            None => warnings.push_str(&format!(
                "curl: unknown --write-out variable: '{name}' (the sandbox's curl)\n"
            )),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    (out.replace("%%", "%"), warnings)
}

/// curl: GET, or POST with `-d`, or `-X METHOD`; the body on standard output unless `-o
/// /dev/null`; `-f` fails on HTTP errors (exit 22); `-s` silences errors unless `-S`; `-i`/`-I`
/// print the headers; `-w` writes out variables; `-m`/`--max-time` and `--connect-timeout`
/// bound the wait (30 s without them); redirects are followed only with `-L`.
async fn curl(args: &[String], context: &Context) -> Outcome {
    let options = match parse_curl(args) {
        Ok(options) => options,
        Err(message) => return Outcome::failed(2, format!("{message}\n")),
    };
    let error = |code: i32, message: String| {
        let stderr = if options.silent && !options.show_error {
            String::new()
        } else {
            format!("curl: ({code}) {message}\n")
        };
        Outcome::failed(code, stderr)
    };
    let Some(url) = &options.url else {
        return Outcome::failed(2, "curl: no URL specified\n".into());
    };
    if let Some(output) = options
        .output
        .as_deref()
        .filter(|o| *o != "/dev/null" && *o != "-")
    {
        return error(
            23,
            format!(
                "Failure writing output to destination: {output}: Read-only file system (the sandbox's curl writes to stdout or /dev/null)"
            ),
        );
    }
    let target = match pod_url(url, context) {
        Ok(target) => target,
        Err((code, message)) => return error(code, message),
    };
    let timeout = options.max_time.unwrap_or(DEFAULT_HTTP_TIMEOUT);
    let client = match client(context, options.follow, timeout, options.connect_timeout) {
        Ok(client) => client,
        Err(problem) => return error(2, problem.to_string()),
    };
    let method = options.method.clone().unwrap_or_else(|| {
        if options.head {
            "HEAD".into()
        } else if options.data.is_empty() {
            "GET".into()
        } else {
            "POST".into()
        }
    });
    let Ok(method) = reqwest::Method::from_bytes(method.as_bytes()) else {
        return error(2, format!("bad method {method}"));
    };
    let mut request = client.request(method, target.url.clone());
    let mut has_content_type = false;
    let mut has_host = false;
    for header in &options.headers {
        if let Some((name, value)) = header.split_once(':') {
            has_content_type |= name.trim().eq_ignore_ascii_case("content-type");
            has_host |= name.trim().eq_ignore_ascii_case("host");
            request = request.header(name.trim(), value.trim());
        }
    }
    if let Some(host) = target.host_header.filter(|_| !has_host) {
        request = request.header("host", host);
    }
    if let Some(user) = &options.user {
        let (name, password) = user.split_once(':').unwrap_or((user, ""));
        request = request.basic_auth(name, Some(password));
    }
    if !options.data.is_empty() {
        if !has_content_type {
            request = request.header("content-type", "application/x-www-form-urlencoded");
        }
        request = request.body(options.data.join("&"));
    }
    let started = Instant::now();
    let timed_out = || {
        format!(
            "Operation timed out after {} milliseconds",
            started.elapsed().as_millis()
        )
    };
    let response = match request.send().await {
        Ok(response) => response,
        Err(problem) if problem.is_timeout() => {
            return error(28, timed_out());
        }
        Err(problem) => {
            return error(
                7,
                format!(
                    "Failed to connect to {}: {problem}",
                    target.url.host_str().unwrap_or_default()
                ),
            );
        }
    };
    let status = response.status().as_u16();
    let head = head_text(&response);
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let effective = response.url().to_string();
    let body = match response.bytes().await {
        Ok(body) => body,
        Err(problem) if problem.is_timeout() => {
            return error(28, timed_out());
        }
        Err(problem) => {
            return error(
                56,
                format!("Failure when receiving data from the peer: {problem}"),
            );
        }
    };
    if options.fail && status >= 400 {
        return error(22, format!("The requested URL returned error: {status}"));
    }
    let mut stdout = String::new();
    if options.output.as_deref() != Some("/dev/null") {
        if options.include || options.head {
            stdout.push_str(&head);
        }
        if !options.head {
            stdout.push_str(&String::from_utf8_lossy(&body));
        }
    }
    let mut stderr = String::new();
    if let Some(format) = &options.write_out {
        let (text, warnings) = write_out(
            format,
            &[
                ("http_code", status.to_string()),
                ("response_code", status.to_string()),
                (
                    "time_total",
                    format!("{:.6}", started.elapsed().as_secs_f64()),
                ),
                ("size_download", body.len().to_string()),
                ("url_effective", effective),
                ("content_type", content_type),
            ],
        );
        stdout.push_str(&text);
        stderr.push_str(&warnings);
    }
    Outcome {
        stdout,
        stderr,
        exit_code: 0,
    }
}

/// wget as in the sandbox's (busybox-like) images: `-q`, `-O -` (standard output), `-O
/// /dev/null`, `--spider`, `-T`/`--timeout`, `--tries`, `--header`, `--post-data`, `-U`. Any
/// failure exits 1.
async fn wget(args: &[String], context: &Context) -> Outcome {
    let (mut quiet, mut spider) = (false, false);
    let mut output: Option<String> = None;
    let mut timeout = DEFAULT_HTTP_TIMEOUT;
    let mut headers = Vec::new();
    let mut post: Option<String> = None;
    let mut url = None;
    let mut words = args.iter();
    let fail = |message: String| Outcome::failed(1, format!("wget: {message}\n"));
    while let Some(word) = words.next() {
        if let Some(long) = word.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value.to_string())),
                None => (long, None),
            };
            let needs_value = matches!(
                name,
                "output-document" | "timeout" | "tries" | "header" | "post-data" | "user-agent"
            );
            let value = match (needs_value, inline) {
                (true, Some(value)) => value,
                (true, None) => match words.next() {
                    Some(value) => value.clone(),
                    None => return fail(format!("option '--{name}' requires an argument")),
                },
                (false, _) => String::new(),
            };
            match name {
                "quiet" => quiet = true,
                "spider" => spider = true,
                "no-check-certificate" | "no-verbose" => {}
                "output-document" => output = Some(value),
                "timeout" => match seconds(&value) {
                    Some(duration) => timeout = duration,
                    None => return fail(format!("invalid number '{value}'")),
                },
                "tries" => {}
                "header" => headers.push(value),
                "post-data" => post = Some(value),
                "user-agent" => headers.push(format!("User-Agent: {value}")),
                other => {
                    return fail(format!(
                        "unrecognized option '--{other}' (the sandbox's wget)"
                    ));
                }
            }
        } else if word.len() > 1 && word.starts_with('-') {
            let flags: Vec<char> = word[1..].chars().collect();
            for (at, flag) in flags.iter().enumerate() {
                match flag {
                    'q' => quiet = true,
                    'O' | 'T' | 't' | 'U' => {
                        let inline: String = flags[at + 1..].iter().collect();
                        let value = if inline.is_empty() {
                            match words.next() {
                                Some(value) => value.clone(),
                                None => {
                                    return fail(format!(
                                        "option requires an argument -- '{flag}'"
                                    ));
                                }
                            }
                        } else {
                            inline
                        };
                        match flag {
                            'O' => output = Some(value),
                            'T' => match seconds(&value) {
                                Some(duration) => timeout = duration,
                                None => return fail(format!("invalid number '{value}'")),
                            },
                            'U' => headers.push(format!("User-Agent: {value}")),
                            _ => {}
                        }
                        break;
                    }
                    other => {
                        return fail(format!("invalid option -- '{other}' (the sandbox's wget)"));
                    }
                }
            }
        } else {
            url = Some(word.clone());
        }
    }
    let Some(url) = url else {
        return fail("missing URL".into());
    };
    let target = match pod_url(&url, context) {
        Ok(target) => target,
        Err((_, message)) => return fail(format!("can't connect to remote host: {message}")),
    };
    let client = match client(context, true, timeout, None) {
        Ok(client) => client,
        Err(problem) => return fail(problem.to_string()),
    };
    let mut request = match &post {
        Some(data) => client
            .post(target.url.clone())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(data.clone()),
        None => client.get(target.url.clone()),
    };
    let mut has_host = false;
    for header in &headers {
        if let Some((name, value)) = header.split_once(':') {
            has_host |= name.trim().eq_ignore_ascii_case("host");
            request = request.header(name.trim(), value.trim());
        }
    }
    if let Some(host) = target.host_header.filter(|_| !has_host) {
        request = request.header("host", host);
    }
    let response = match request.send().await {
        Ok(response) => response,
        Err(problem) if problem.is_timeout() => return fail("download timed out".into()),
        Err(problem) => return fail(format!("can't connect to remote host: {problem}")),
    };
    let status = response.status();
    if status.as_u16() >= 400 {
        return fail(format!(
            "server returned error: HTTP/1.1 {} {}",
            status.as_u16(),
            status.canonical_reason().unwrap_or("")
        ));
    }
    let body = match response.bytes().await {
        Ok(body) => body,
        Err(problem) => return fail(format!("error getting response: {problem}")),
    };
    if spider {
        return Outcome::default();
    }
    let mut outcome = match output.as_deref() {
        Some("-") => Outcome::out(String::from_utf8_lossy(&body).into_owned()),
        Some("/dev/null") => Outcome::default(),
        other => {
            let name = other.map(str::to_string).unwrap_or_else(|| {
                let path = target.url.path().rsplit('/').next().unwrap_or_default();
                if path.is_empty() {
                    "index.html".into()
                } else {
                    path.to_string()
                }
            });
            return fail(format!(
                "can't open '{name}': Read-only file system (the sandbox's wget writes to -O - or -O /dev/null)"
            ));
        }
    };
    if !quiet && output.as_deref() != Some("-") {
        outcome.stderr = format!("Connecting to {}\n", target.url);
    }
    outcome
}

/// `hey` (the load tester image) through the built-in load generator, its target resolved as
/// from the pod; the summary on standard output.
async fn hey(args: &[String], context: &Context) -> Outcome {
    let mut plan = match serin_loadtester::hey::parse_hey_args(args) {
        Ok(plan) => plan,
        Err(error) => return Outcome::failed(1, format!("{error}\n")),
    };
    if let Some(file) = &plan.body_file {
        return Outcome::failed(
            1,
            format!("hey: -D {file}: no such file (the sandbox's images have no files to read)\n"),
        );
    }
    let loopback = matches!(plan.host.as_str(), "localhost" | "127.0.0.1" | "::1");
    if loopback && !context.local_ports.is_empty() {
        match context
            .local_ports
            .iter()
            .find(|(own, _)| *own == plan.port)
        {
            Some((_, served)) => {
                plan.host = "127.0.0.1".into();
                plan.port = *served;
            }
            None => {
                return Outcome::failed(
                    1,
                    format!(
                        "hey: dial tcp {}:{}: connect: connection refused\n",
                        plan.host, plan.port
                    ),
                );
            }
        }
    } else {
        plan.search_in(&context.namespace);
    }
    let report =
        serin_loadtester::load::run_load(&plan, &context.proxy, Duration::from_secs(600)).await;
    Outcome::out(report.summary())
}

/// The Status kubectl reads on the error channel: success, or the exit code as a cause.
pub fn status(outcome: &Outcome) -> Value {
    if outcome.exit_code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({"metadata": {}, "status": "Failure",
        "message": format!("command terminated with non-zero exit code: error executing command, exit status {}", outcome.exit_code),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": outcome.exit_code.to_string()}]}})
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut bytes = Vec::with_capacity(data.len() + 1);
    bytes.push(channel);
    bytes.extend_from_slice(data);
    Message::Binary(bytes.into())
}

/// Runs the command and streams the result over the channel protocol: stdout on channel 1, stderr
/// on 2, then the Status on 3, then the socket closes.
pub async fn serve(mut socket: WebSocket, words: Vec<String>, context: Context) {
    let outcome = run(&words, &context).await;
    if !outcome.stdout.is_empty() {
        let _ = socket.send(frame(1, outcome.stdout.as_bytes())).await;
    }
    if !outcome.stderr.is_empty() {
        let _ = socket.send(frame(2, outcome.stderr.as_bytes())).await;
    }
    let _ = socket
        .send(frame(3, status(&outcome).to_string().as_bytes()))
        .await;
    // A normal closure (1000): kubectl treats a close without a status as a broken stream.
    let close = axum::extract::ws::CloseFrame {
        code: 1000,
        reason: "".into(),
    };
    let _ = socket.send(Message::Close(Some(close))).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

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
