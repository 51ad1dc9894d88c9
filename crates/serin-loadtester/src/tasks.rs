//! The task endpoint's work: deciding what a payload asks for, de-duplicating `cmd` tasks per
//! canary and command while they run, admitting at most `--max-tasks` at once, running them under
//! the task timeout, and keeping a bounded history of what they did.

use crate::hey::{LoadPlan, is_hey, parse_hey_args};
use crate::load::{LoadReport, run_load};
use crate::payload::Payload;
use crate::redact::mask_credentials;
use crate::shell::{CommandResult, run_command, run_with_runner};
use crate::words::split_command;
use crate::{Options, RECORD_TEXT_LIMIT, Shared, TASK_HISTORY_LIMIT};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// The task types this load tester runs.
pub const SUPPORTED_TYPES: &str = "cmd, bash, helm, helmv3, kubectl";

/// What one task did, kept for [`crate::Server::task_history`].
#[derive(Clone, Debug)]
pub struct TaskRecord {
    /// The canary that asked, `<name>.<namespace>`.
    pub canary: String,
    /// The command as given in `metadata.cmd`, with its credentials masked
    /// ([`crate::redact::mask_credentials`]).
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

/// What ends a text that a task record cut short.
pub const CUT_MARKER: &str = " [... cut]";

/// Cuts `text` to at most `limit` bytes (on a character boundary), ending with [`CUT_MARKER`]
/// when anything was cut.
pub fn cut_text(text: &mut String, limit: usize) {
    if text.len() <= limit {
        return;
    }
    let mut end = limit.saturating_sub(CUT_MARKER.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(CUT_MARKER);
}

/// The tasks running now: `cmd` tasks by key (canary and command), and blocking ones by count.
#[derive(Default)]
pub(crate) struct Running {
    /// Each running `cmd` task's key, with the key as shown (credentials masked).
    keyed: HashMap<String, String>,
    /// Blocking tasks (bash, helm, kubectl) running now.
    blocking: usize,
}

/// Whether a task may start.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// It took a place among the running tasks.
    Started,
    /// The same `cmd` task for the same canary is running.
    Duplicate,
    /// As many tasks as allowed are running.
    Busy,
}

impl Running {
    /// How many tasks run now.
    pub(crate) fn count(&self) -> usize {
        self.keyed.len() + self.blocking
    }

    /// Takes a place for a task (a `cmd` task with its key and shown key, a blocking one with
    /// `None`) unless `max` tasks are running. A running duplicate is reported before the limit,
    /// so a webhook repeating its command keeps being answered "already running".
    pub(crate) fn admit(&mut self, key: Option<(&str, &str)>, max: usize) -> Admission {
        if let Some((key, _)) = key
            && self.keyed.contains_key(key)
        {
            return Admission::Duplicate;
        }
        if self.count() >= max {
            return Admission::Busy;
        }
        match key {
            Some((key, shown)) => {
                self.keyed.insert(key.to_string(), shown.to_string());
            }
            None => self.blocking += 1,
        }
        Admission::Started
    }

    fn release(&mut self, key: Option<&str>) {
        match key {
            Some(key) => {
                self.keyed.remove(key);
            }
            None => self.blocking = self.blocking.saturating_sub(1),
        }
    }

    /// The shown keys of the running `cmd` tasks, sorted.
    pub(crate) fn shown_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.keyed.values().cloned().collect();
        keys.sort();
        keys
    }
}

/// Finished tasks, at most [`TASK_HISTORY_LIMIT`], each with at most [`RECORD_TEXT_LIMIT`] bytes
/// of canary name, of command and of output. A load run's report adds a fixed-size latency
/// histogram (18 KiB), its status codes and at most [`crate::load::MAX_ERROR_KINDS`] + 1 error
/// kinds, so the whole history stays under about 50 MiB in the worst case.
#[derive(Default)]
pub(crate) struct History {
    records: VecDeque<TaskRecord>,
}

impl History {
    /// Adds `record`, its text cut to [`RECORD_TEXT_LIMIT`], dropping the oldest record when the
    /// history is full.
    pub(crate) fn push(&mut self, mut record: TaskRecord) {
        cut_text(&mut record.canary, RECORD_TEXT_LIMIT);
        cut_text(&mut record.command, RECORD_TEXT_LIMIT);
        if let TaskOutcome::Command(result) = &mut record.outcome {
            cut_text(&mut result.output, RECORD_TEXT_LIMIT);
        }
        if self.records.len() >= TASK_HISTORY_LIMIT {
            self.records.pop_front();
        }
        self.records.push_back(record);
    }

    /// The records, oldest first.
    pub(crate) fn records(&self) -> Vec<TaskRecord> {
        self.records.iter().cloned().collect()
    }

    /// The records, oldest first, without copying them.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &TaskRecord> {
        self.records.iter()
    }
}

fn busy(max: usize) -> Refusal {
    refuse(
        429,
        format!(
            "{max} tasks are running, the most this load tester runs at once (--max-tasks); try again when one has finished, or raise --max-tasks"
        ),
    )
}

/// One task: the canary that asked, and its command as given (what runs) and as shown
/// (credentials masked, for logs, records and messages).
struct Task {
    canary: String,
    command: String,
    shown: String,
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
    let task = || {
        let command = payload.meta("cmd").map(str::to_string).ok_or_else(|| {
            refuse(
                400,
                format!(
                    "metadata.cmd not found in payload; a {task_type} task needs the command to run"
                ),
            )
        })?;
        Ok::<_, Refusal>(Task {
            canary: payload.canary(),
            shown: mask_credentials(&command),
            command,
        })
    };
    match task_type.as_str() {
        "cmd" => {
            let task = task()?;
            let work = plan_cmd(&task.command, &shared.options)?;
            start_async(shared, &payload, task, work)
        }
        "bash" => {
            let task = task()?;
            if has_runner {
                let work = Work::Script(task.command.clone());
                return run_blocking(shared, &payload, task, work).await;
            }
            if !allow_shell {
                return Err(shell_refused("a bash task"));
            }
            let work = Work::External {
                program: "bash".into(),
                args: vec!["-c".into(), task.command.clone()],
            };
            run_blocking(shared, &payload, task, work).await
        }
        "helm" | "helmv3" | "kubectl" => {
            let task = task()?;
            let program = if task_type == "kubectl" {
                "kubectl"
            } else {
                "helm"
            };
            if has_runner {
                // The words as Flagger passes them (split on whitespace), quoted for the runner's
                // shell so none of them is read as shell syntax.
                let mut line = program.to_string();
                for word in task.command.split_whitespace() {
                    line.push(' ');
                    line.push_str(&shell_quote(word));
                }
                return run_blocking(shared, &payload, task, Work::Script(line)).await;
            }
            if !allow_shell {
                return Err(shell_refused(&format!("a {task_type} task")));
            }
            let args = task
                .command
                .split_whitespace()
                .map(str::to_string)
                .collect();
            let work = Work::External {
                program: program.into(),
                args,
            };
            run_blocking(shared, &payload, task, work).await
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

/// Gives a task's place among the running tasks back when the task ends, however it ends.
struct TaskSlot {
    shared: Arc<Shared>,
    /// The `cmd` task's key; `None` for a blocking task.
    key: Option<String>,
}

impl Drop for TaskSlot {
    fn drop(&mut self) {
        self.shared
            .running
            .lock()
            .unwrap()
            .release(self.key.as_deref());
    }
}

/// Writes a task's log line to the log sink, if the load tester has one.
fn log_line(shared: &Shared, message: &str, canary: &str, shown: &str, output: Option<&str>) {
    if let Some(sink) = &shared.options.log_sink {
        let mut line = serde_json::json!({
            "level": "info", "ts": humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            "msg": message, "canary": canary, "cmd": shown,
        });
        if let Some(output) = output {
            line["output"] = serde_json::json!(output);
        }
        sink(&line.to_string());
    }
}

fn record(shared: &Shared, task: Task, outcome: TaskOutcome) {
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
    let output = output.map(|mut output| {
        cut_text(&mut output, RECORD_TEXT_LIMIT);
        output
    });
    log_line(
        shared,
        message,
        &task.canary,
        &task.shown,
        output.as_deref(),
    );
    shared.history.lock().unwrap().push(TaskRecord {
        canary: task.canary,
        command: task.shown,
        outcome,
    });
}

/// Starts a `cmd` task in the background unless the same canary and command is still running,
/// or as many tasks as allowed are.
fn start_async(
    shared: &Arc<Shared>,
    payload: &Payload,
    task: Task,
    work: Work,
) -> Result<(u16, String), Refusal> {
    let canary = task.canary.clone();
    let key = format!("{canary}{}", task.command);
    let shown_key = format!("{canary}{}", task.shown);
    let max = shared.options.max_tasks;
    let admission = shared
        .running
        .lock()
        .unwrap()
        .admit(Some((&key, &shown_key)), max);
    match admission {
        Admission::Started => {}
        Admission::Duplicate => {
            tracing::info!(%canary, "command skipped {} is already running", task.shown);
            record(shared, task, TaskOutcome::Skipped);
            return Ok((202, "already running; skipped\n".into()));
        }
        Admission::Busy => return Err(busy(max)),
    }
    let slot = TaskSlot {
        shared: shared.clone(),
        key: Some(key),
    };
    let log_output = payload.flag("logCmdOutput");
    let shared = shared.clone();
    let mut shutdown = shared.shutdown.clone();
    tracing::info!(%canary, "command starting {}", task.shown);
    log_line(&shared, "command starting", &canary, &task.shown, None);
    tokio::spawn(async move {
        let _slot = slot;
        tokio::select! {
            outcome = execute(&shared, &task.shown, work) => finish(&shared, task, outcome, log_output),
            _ = shutdown.wait_for(|stopping| *stopping) => {}
        }
    });
    Ok((202, "started\n".into()))
}

/// Runs a blocking task type and answers 200, or 500 with Flagger's error text.
async fn run_blocking(
    shared: &Arc<Shared>,
    payload: &Payload,
    task: Task,
    work: Work,
) -> Result<(u16, String), Refusal> {
    let max = shared.options.max_tasks;
    if shared.running.lock().unwrap().admit(None, max) == Admission::Busy {
        return Err(busy(max));
    }
    let _slot = TaskSlot {
        shared: shared.clone(),
        key: None,
    };
    let outcome = execute(shared, &task.shown, work).await;
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
                "command {} failed: {}: {}",
                task.shown, result.output, result.exit
            ),
        )),
        _ => Ok((200, String::new())),
    };
    finish(shared, task, outcome, payload.flag("logCmdOutput"));
    response
}

async fn execute(shared: &Shared, shown: &str, work: Work) -> TaskOutcome {
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
        tracing::warn!("command {shown} cancelled at the timeout");
    }
    outcome
}

fn finish(shared: &Shared, task: Task, outcome: TaskOutcome, log_output: bool) {
    let (canary, shown) = (&task.canary, &task.shown);
    match &outcome {
        TaskOutcome::Load(report) => {
            let rps = format!("{:.1}", report.requests_per_second());
            tracing::info!(
                %canary,
                requests = report.requests,
                rps,
                "command finished {shown}"
            );
            if log_output {
                tracing::info!(%canary, "{}", report.summary());
            }
        }
        TaskOutcome::Command(result) => {
            if result.success {
                tracing::info!(%canary, "command finished {shown}");
            } else {
                tracing::warn!(%canary, "command failed {shown}: {}", result.exit);
            }
            if log_output {
                tracing::info!(%canary, "{}", result.output);
            }
        }
        TaskOutcome::Skipped => {}
    }
    record(shared, task, outcome);
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

    #[test]
    fn at_most_max_tasks_run_and_duplicates_are_still_recognised() {
        let max = crate::DEFAULT_MAX_TASKS;
        let mut running = Running::default();
        for _ in 0..max - 2 {
            assert_eq!(running.admit(None, max), Admission::Started);
        }
        assert_eq!(
            running.admit(Some(("a.test hey", "a.test hey")), max),
            Admission::Started
        );
        // One under the limit: the last place is taken.
        assert_eq!(running.count(), max - 1);
        assert_eq!(running.admit(None, max), Admission::Started);
        // At the limit: refused, whatever the kind of task.
        assert_eq!(running.admit(None, max), Admission::Busy);
        assert_eq!(
            running.admit(Some(("b.test hey", "b.test hey")), max),
            Admission::Busy
        );
        // A webhook repeating a running command hears that it runs, not that the tester is busy.
        assert_eq!(
            running.admit(Some(("a.test hey", "a.test hey")), max),
            Admission::Duplicate
        );
        running.release(None);
        assert_eq!(
            running.admit(Some(("b.test hey", "b.test hey")), max),
            Admission::Started
        );
        running.release(Some("a.test hey"));
        assert_eq!(running.shown_keys(), ["b.test hey"]);
        assert_eq!(running.count(), max - 1);
    }

    fn command_record(command: &str, output: String) -> TaskRecord {
        TaskRecord {
            canary: "podinfo.test".into(),
            command: command.into(),
            outcome: TaskOutcome::Command(CommandResult {
                success: true,
                output,
                exit: "exit status 0".into(),
                timed_out: false,
            }),
        }
    }

    fn output(record: &TaskRecord) -> &str {
        match &record.outcome {
            TaskOutcome::Command(result) => &result.output,
            _ => panic!("a command record"),
        }
    }

    #[test]
    fn the_history_keeps_the_last_records() {
        let mut history = History::default();
        for n in 0..TASK_HISTORY_LIMIT {
            history.push(command_record(&n.to_string(), String::new()));
        }
        let records = history.records();
        assert_eq!(records.len(), TASK_HISTORY_LIMIT);
        assert_eq!(records[0].command, "0");
        history.push(command_record("last", String::new()));
        let records = history.records();
        assert_eq!(records.len(), TASK_HISTORY_LIMIT);
        assert_eq!(records[0].command, "1");
        assert_eq!(records[TASK_HISTORY_LIMIT - 1].command, "last");
    }

    #[test]
    fn record_text_is_cut_at_the_limit_with_a_marker() {
        let mut history = History::default();
        let whole = "x".repeat(RECORD_TEXT_LIMIT);
        history.push(command_record("fits", whole.clone()));
        let mut one_over = format!("{whole}y");
        cut_text(&mut one_over, RECORD_TEXT_LIMIT);
        assert_eq!(one_over.len(), RECORD_TEXT_LIMIT);
        assert!(one_over.ends_with(CUT_MARKER));
        // Two-byte characters, so the cut has to find a character boundary.
        let long = "é".repeat(RECORD_TEXT_LIMIT);
        history.push(command_record(&"c".repeat(RECORD_TEXT_LIMIT + 1), long));
        let records = history.records();
        assert_eq!(output(&records[0]), whole);
        assert_eq!(records[0].command, "fits");
        let cut = output(&records[1]);
        assert!(cut.len() <= RECORD_TEXT_LIMIT && cut.len() > RECORD_TEXT_LIMIT - 16);
        assert!(cut.ends_with(CUT_MARKER) && cut.starts_with("éé"), "{cut}");
        assert!(records[1].command.len() <= RECORD_TEXT_LIMIT);
        assert!(records[1].command.ends_with(CUT_MARKER));
    }
}
