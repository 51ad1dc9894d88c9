//! The task endpoint's work: deciding what a payload asks for, de-duplicating `cmd` tasks per
//! canary and command while they run, and running them under the task timeout.

use crate::hey::{LoadPlan, is_hey, parse_hey_args};
use crate::load::{LoadReport, run_load};
use crate::payload::Payload;
use crate::shell::{CommandResult, run_command, run_with_runner};
use crate::words::split_command;
use crate::{Options, Shared, TASK_HISTORY_LIMIT};
use std::sync::Arc;

/// The task types this load tester runs.
pub const SUPPORTED_TYPES: &str = "cmd, bash, helm, helmv3, kubectl";

/// What one task did, kept for [`crate::Server::task_history`].
#[derive(Clone, Debug)]
pub struct TaskRecord {
    /// The canary that asked, `<name>.<namespace>`.
    pub canary: String,
    /// The command as given in `metadata.cmd`.
    pub command: String,
    /// How it ended.
    pub outcome: TaskOutcome,
}

/// How a task ended.
#[derive(Clone, Debug)]
pub enum TaskOutcome {
    /// The built-in generator ran a hey command.
    Load(LoadReport),
    /// An external command ran (or was killed at the timeout).
    Command(CommandResult),
    /// The same command for the same canary was still running, so this one did not start.
    Skipped,
}

/// A refused or failed request to the task endpoint: an HTTP status and a message.
#[derive(Debug)]
pub struct Refusal {
    /// The HTTP status code.
    pub status: u16,
    /// What went wrong and what is accepted.
    pub message: String,
}

fn refuse(status: u16, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        message: message.into(),
    }
}

/// The work a payload asks for, checked before anything runs.
enum Work {
    Load(Box<LoadPlan>),
    External {
        program: String,
        args: Vec<String>,
    },
    /// A command line for [`Options::command_runner`].
    Script(String),
}

fn shell_refused(what: &str) -> Refusal {
    refuse(
        403,
        format!(
            "{what} needs a shell, and this load tester was started without --allow-shell; only hey commands run without it"
        ),
    )
}

/// Decides how to run `command` for a `cmd` task: hey in-process, anything else through the
/// command runner if there is one, else through `sh -c`.
fn plan_cmd(command: &str, options: &Options) -> Result<Work, Refusal> {
    let allow_shell = options.allow_shell;
    let words =
        split_command(command).map_err(|error| refuse(400, format!("metadata.cmd: {error}")))?;
    if words.words.is_empty() {
        return Err(refuse(
            400,
            "metadata.cmd is empty; expected a command such as hey -z 1m -q 10 -c 2 http://podinfo-canary.test:9898/",
        ));
    }
    if is_hey(&words.words) && !words.needs_shell {
        let mut plan = parse_hey_args(&words.words[1..]).map_err(|error| refuse(400, error))?;
        if let Some(file) = plan.body_file.take() {
            // -D reads a local file and sends it away, which is shell-level power.
            if !allow_shell {
                return Err(shell_refused(
                    "hey -D (a request body read from a local file)",
                ));
            }
            let body = std::fs::read(&file).map_err(|error| {
                refuse(400, format!("hey flag -D: cannot read {file}: {error}"))
            })?;
            plan.body = body.into();
        }
        if let Some(namespace) = &options.search_namespace {
            plan.search_in(namespace);
        }
        return Ok(Work::Load(Box::new(plan)));
    }
    if options.command_runner.is_some() {
        return Ok(Work::Script(command.to_string()));
    }
    if !allow_shell {
        let first = &words.words[0];
        let what = if is_hey(&words.words) {
            "this hey command uses shell syntax (pipes, redirections, variables or several commands) and".to_string()
        } else {
            format!("the command `{first}`")
        };
        return Err(shell_refused(&what));
    }
    Ok(Work::External {
        program: "sh".into(),
        args: vec!["-c".into(), command.into()],
    })
}

/// Handles a payload on the task endpoint; returns the status and body of the response.
pub(crate) async fn handle_task(
    shared: &Arc<Shared>,
    payload: Payload,
) -> Result<(u16, String), Refusal> {
    if let Some(filter) = &shared.options.namespace_filter
        && !filter.is_match(&payload.namespace)
    {
        return Err(refuse(403, "Forbidden"));
    }
    if payload.metadata.is_none() {
        return Err(refuse(
            400,
            "metadata not found in payload; expected e.g. \"metadata\": {\"type\": \"cmd\", \"cmd\": \"hey -z 1m -q 10 -c 2 http://podinfo-canary.test:9898/\"}",
        ));
    }
    let task_type = payload.meta("type").unwrap_or("cmd").to_string();
    let allow_shell = shared.options.allow_shell;
    let has_runner = shared.options.command_runner.is_some();
    let command = || {
        payload.meta("cmd").map(str::to_string).ok_or_else(|| {
            refuse(
                400,
                format!(
                    "metadata.cmd not found in payload; a {task_type} task needs the command to run"
                ),
            )
        })
    };
    match task_type.as_str() {
        "cmd" => {
            let command = command()?;
            let work = plan_cmd(&command, &shared.options)?;
            Ok(start_async(shared, &payload, command, work))
        }
        "bash" => {
            let command = command()?;
            if has_runner {
                let work = Work::Script(command.clone());
                return run_blocking(shared, &payload, command, work).await;
            }
            if !allow_shell {
                return Err(shell_refused("a bash task"));
            }
            let work = Work::External {
                program: "bash".into(),
                args: vec!["-c".into(), command.clone()],
            };
            run_blocking(shared, &payload, command, work).await
        }
        "helm" | "helmv3" | "kubectl" => {
            let command = command()?;
            let program = if task_type == "kubectl" {
                "kubectl"
            } else {
                "helm"
            };
            if has_runner {
                // The words as Flagger passes them (split on whitespace), quoted for the runner's
                // shell so none of them is read as shell syntax.
                let mut line = program.to_string();
                for word in command.split_whitespace() {
                    line.push(' ');
                    line.push_str(&shell_quote(word));
                }
                return run_blocking(shared, &payload, command, Work::Script(line)).await;
            }
            if !allow_shell {
                return Err(shell_refused(&format!("a {task_type} task")));
            }
            let args = command.split_whitespace().map(str::to_string).collect();
            let work = Work::External {
                program: program.into(),
                args,
            };
            run_blocking(shared, &payload, command, work).await
        }
        "concord" | "ngrinder" => Err(refuse(
            501,
            format!(
                "task type {task_type} is not implemented by serin-loadtester; supported types: {SUPPORTED_TYPES}"
            ),
        )),
        other => Err(refuse(
            400,
            format!("unknown task type {other}; supported types: {SUPPORTED_TYPES}"),
        )),
    }
}

/// `word` in single quotes, so a shell reads it as one literal word.
fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// Removes a task's key from the running set when the task ends, however it ends.
struct RunningGuard {
    shared: Arc<Shared>,
    key: String,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.shared.running.lock().unwrap().remove(&self.key);
    }
}

/// Writes a task's log line to the log sink, if the load tester has one.
fn log_line(shared: &Shared, message: &str, canary: &str, command: &str, output: Option<&str>) {
    if let Some(sink) = &shared.options.log_sink {
        let mut line = serde_json::json!({
            "level": "info", "ts": humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            "msg": message, "canary": canary, "cmd": command,
        });
        if let Some(output) = output {
            line["output"] = serde_json::json!(output);
        }
        sink(&line.to_string());
    }
}

fn record(shared: &Shared, canary: String, command: String, outcome: TaskOutcome) {
    let (message, output) = match &outcome {
        TaskOutcome::Load(report) => ("command finished", Some(report.summary())),
        TaskOutcome::Command(result) if result.success => {
            ("command finished", Some(result.output.clone()))
        }
        TaskOutcome::Command(result) => (
            "command failed",
            Some(format!("{}: {}", result.exit, result.output)),
        ),
        TaskOutcome::Skipped => ("command skipped: already running", None),
    };
    log_line(shared, message, &canary, &command, output.as_deref());
    let mut history = shared.history.lock().unwrap();
    if history.len() == TASK_HISTORY_LIMIT {
        history.remove(0);
    }
    history.push(TaskRecord {
        canary,
        command,
        outcome,
    });
}

/// Starts a `cmd` task in the background unless the same canary and command is still running.
fn start_async(
    shared: &Arc<Shared>,
    payload: &Payload,
    command: String,
    work: Work,
) -> (u16, String) {
    let canary = payload.canary();
    let key = format!("{canary}{command}");
    if !shared.running.lock().unwrap().insert(key.clone()) {
        tracing::info!(%canary, "command skipped {command} is already running");
        record(shared, canary, command, TaskOutcome::Skipped);
        return (202, "already running; skipped\n".into());
    }
    let guard = RunningGuard {
        shared: shared.clone(),
        key,
    };
    let log_output = payload.flag("logCmdOutput");
    let shared = shared.clone();
    let mut shutdown = shared.shutdown.clone();
    tracing::info!(%canary, "command starting {command}");
    log_line(&shared, "command starting", &canary, &command, None);
    tokio::spawn(async move {
        let _guard = guard;
        tokio::select! {
            outcome = execute(&shared, &command, work) => finish(&shared, canary, command, outcome, log_output),
            _ = shutdown.wait_for(|stopping| *stopping) => {}
        }
    });
    (202, "started\n".into())
}

/// Runs a blocking task type and answers 200, or 500 with Flagger's error text.
async fn run_blocking(
    shared: &Arc<Shared>,
    payload: &Payload,
    command: String,
    work: Work,
) -> Result<(u16, String), Refusal> {
    let canary = payload.canary();
    let outcome = execute(shared, &command, work).await;
    let response = match &outcome {
        TaskOutcome::Command(result) if result.success => {
            let body = if payload.flag("returnCmdOutput") {
                result.output.clone()
            } else {
                String::new()
            };
            Ok((200, body))
        }
        TaskOutcome::Command(result) => Err(refuse(
            500,
            format!(
                "command {command} failed: {}: {}",
                result.output, result.exit
            ),
        )),
        _ => Ok((200, String::new())),
    };
    finish(
        shared,
        canary,
        command,
        outcome,
        payload.flag("logCmdOutput"),
    );
    response
}

async fn execute(shared: &Shared, command: &str, work: Work) -> TaskOutcome {
    let timeout = shared.options.timeout;
    let (outcome, timed_out) = match work {
        Work::Load(plan) => {
            let report = run_load(&plan, &shared.options.proxy, timeout).await;
            let cut = report.stopped_by_limit;
            (TaskOutcome::Load(report), cut)
        }
        Work::External { program, args } => {
            let result = run_command(&program, &args, timeout).await;
            let killed = result.timed_out;
            (TaskOutcome::Command(result), killed)
        }
        Work::Script(line) => {
            let result = match &shared.options.command_runner {
                Some(runner) => run_with_runner(runner.as_ref(), &line, timeout).await,
                None => CommandResult {
                    success: false,
                    output: String::new(),
                    exit: "no command runner".into(),
                    timed_out: false,
                },
            };
            let killed = result.timed_out;
            (TaskOutcome::Command(result), killed)
        }
    };
    if timed_out {
        tracing::warn!("command {command} cancelled at the timeout");
    }
    outcome
}

fn finish(
    shared: &Shared,
    canary: String,
    command: String,
    outcome: TaskOutcome,
    log_output: bool,
) {
    match &outcome {
        TaskOutcome::Load(report) => {
            let rps = format!("{:.1}", report.requests_per_second());
            tracing::info!(
                %canary,
                requests = report.requests,
                rps,
                "command finished {command}"
            );
            if log_output {
                tracing::info!(%canary, "{}", report.summary());
            }
        }
        TaskOutcome::Command(result) => {
            if result.success {
                tracing::info!(%canary, "command finished {command}");
            } else {
                tracing::warn!(%canary, "command failed {command}: {}", result.exit);
            }
            if log_output {
                tracing::info!(%canary, "{}", result.output);
            }
        }
        TaskOutcome::Skipped => {}
    }
    record(shared, canary, command, outcome);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(allow_shell: bool) -> Options {
        Options {
            allow_shell,
            ..Options::default()
        }
    }

    #[test]
    fn hey_runs_in_process_and_anything_else_needs_a_shell() {
        assert!(matches!(
            plan_cmd("hey -n 10 -c 1 http://a/", &shell(false)),
            Ok(Work::Load(_))
        ));
        assert!(matches!(
            plan_cmd("/usr/bin/hey -z 1s 'http://a/?x=1&y=2'", &shell(false)),
            Ok(Work::Load(_))
        ));
        let curl = plan_cmd("curl http://a/", &shell(false)).err().unwrap();
        assert_eq!(curl.status, 403);
        assert!(curl.message.contains("--allow-shell"), "{}", curl.message);
        let piped = plan_cmd("hey http://a/ | tail", &shell(false))
            .err()
            .unwrap();
        assert_eq!(piped.status, 403);
        assert!(matches!(
            plan_cmd("curl http://a/", &shell(true)),
            Ok(Work::External { .. })
        ));
        let body_file = plan_cmd("hey -D /etc/passwd http://a/", &shell(false))
            .err()
            .unwrap();
        assert_eq!(body_file.status, 403);
        assert_eq!(
            plan_cmd("hey -k http://a/", &shell(false))
                .err()
                .unwrap()
                .status,
            400
        );
        assert_eq!(plan_cmd("  ", &shell(true)).err().unwrap().status, 400);
    }

    struct Recorder;

    impl crate::shell::CommandRunner for Recorder {
        fn run<'a>(
            &'a self,
            line: &'a str,
        ) -> std::pin::Pin<Box<dyn Future<Output = crate::shell::RunnerOutput> + Send + 'a>>
        {
            Box::pin(async move {
                crate::shell::RunnerOutput {
                    stdout: line.to_string(),
                    ..Default::default()
                }
            })
        }
    }

    #[test]
    fn a_command_runner_takes_what_would_need_a_shell() {
        let options = Options {
            command_runner: Some(Arc::new(Recorder)),
            search_namespace: Some("test".into()),
            ..Options::default()
        };
        assert!(matches!(
            plan_cmd("curl -s http://a/ | grep x", &options),
            Ok(Work::Script(line)) if line == "curl -s http://a/ | grep x"
        ));
        assert!(matches!(
            plan_cmd("hey http://a/ | tail", &options),
            Ok(Work::Script(_))
        ));
        // Plain hey still runs in-process, its short host searched in the namespace.
        match plan_cmd("hey -n 2 -c 1 http://podinfo-canary:9898/", &options) {
            Ok(Work::Load(plan)) => assert_eq!(plan.host, "podinfo-canary.test"),
            _ => panic!("hey runs in-process"),
        }
        // A local file is not the runner's to read.
        assert_eq!(
            plan_cmd("hey -D /etc/passwd http://a/", &options)
                .err()
                .unwrap()
                .status,
            403
        );
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }
}
