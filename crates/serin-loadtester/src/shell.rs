//! Runs external commands (only when the load tester was started with `--allow-shell`): output
//! captured up to a limit, and the whole process group killed on timeout, shutdown or drop, so a
//! `sh -c "sleep 1000"` cannot outlive its task. A [`CommandRunner`] can run command lines
//! instead, without a process (the sandbox's command interpreter does, for Flagger's image).

use std::future::Future;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

/// Output kept per command; the rest is dropped so a chatty command cannot exhaust memory.
pub const MAX_OUTPUT_BYTES: usize = 1 << 20;

/// How an external command ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandResult {
    /// True when the command exited with status 0.
    pub success: bool,
    /// Standard output and standard error together, as far as kept.
    pub output: String,
    /// How it ended in Go's words: `exit status 1`, `signal: killed`, or why it could not start.
    pub exit: String,
    /// True when it was killed because it ran past the timeout.
    pub timed_out: bool,
}

/// How a [`CommandRunner`] says a command line ended: its exit code and what it printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunnerOutput {
    /// The exit code; 0 is success.
    pub exit_code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs command lines in place of `sh -c`/`bash -c`, e.g. through an interpreter of the
/// environment the load tester runs in. When [`crate::Options::command_runner`] is set, bash
/// tasks, `helm`/`kubectl` tasks and `cmd` tasks that are not plain hey commands go to it instead of
/// a process, and are not refused for want of `--allow-shell`.
pub trait CommandRunner: Send + Sync {
    /// Runs `line` (shell syntax) to its end; the load tester drops the future at the task timeout.
    fn run<'a>(&'a self, line: &'a str) -> Pin<Box<dyn Future<Output = RunnerOutput> + Send + 'a>>;
}

/// Runs `line` with `runner`, cut at `timeout`, and reports it as [`run_command`] reports a
/// process: standard output then standard error (at most [`MAX_OUTPUT_BYTES`]), `exit status N`,
/// and `signal: killed` with `timed_out` when the timeout cut it.
pub async fn run_with_runner(
    runner: &dyn CommandRunner,
    line: &str,
    timeout: Duration,
) -> CommandResult {
    match tokio::time::timeout(timeout, runner.run(line)).await {
        Ok(output) => {
            let mut text = output.stdout;
            text.push_str(&output.stderr);
            if text.len() > MAX_OUTPUT_BYTES {
                let mut end = MAX_OUTPUT_BYTES;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
            }
            CommandResult {
                success: output.exit_code == 0,
                output: text,
                exit: format!("exit status {}", output.exit_code),
                timed_out: false,
            }
        }
        Err(_) => CommandResult {
            success: false,
            output: String::new(),
            exit: "signal: killed".into(),
            timed_out: true,
        },
    }
}

struct KillGroupOnDrop(Option<i32>);

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        if let Some(group) = self.0 {
            // SAFETY: kill(2) with a negative pid signals the process group we created at spawn.
            unsafe {
                libc::kill(-group, libc::SIGKILL);
            }
        }
    }
}

async fn collect(mut stream: impl AsyncRead + Unpin, output: Arc<Mutex<Vec<u8>>>) {
    let mut buffer = [0u8; 8192];
    while let Ok(read) = stream.read(&mut buffer).await {
        if read == 0 {
            break;
        }
        let mut output = output.lock().unwrap();
        let room = MAX_OUTPUT_BYTES.saturating_sub(output.len());
        output.extend_from_slice(&buffer[..read.min(room)]);
    }
}

/// Runs `program` with `args`, killing it and its children after `timeout`.
pub async fn run_command(program: &str, args: &[String], timeout: Duration) -> CommandResult {
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            return CommandResult {
                success: false,
                output: String::new(),
                exit: format!("cannot start {program}: {error}"),
                timed_out: false,
            };
        }
    };
    let mut group = KillGroupOnDrop(child.id().map(|pid| pid as i32));
    let output = Arc::new(Mutex::new(Vec::new()));
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let finished = tokio::time::timeout(timeout, async {
        let (_, _, status) = tokio::join!(
            collect(stdout, output.clone()),
            collect(stderr, output.clone()),
            child.wait()
        );
        status
    })
    .await;
    let (success, exit, timed_out) = match finished {
        Ok(Ok(status)) => {
            group.0 = None;
            let exit = match (
                status.code(),
                std::os::unix::process::ExitStatusExt::signal(&status),
            ) {
                (Some(code), _) => format!("exit status {code}"),
                (None, Some(signal)) => format!("signal: {signal}"),
                (None, None) => "exited".to_string(),
            };
            (status.success(), exit, false)
        }
        Ok(Err(error)) => (false, format!("waiting for {program}: {error}"), false),
        Err(_) => (false, "signal: killed".to_string(), true),
    };
    drop(group);
    let output = String::from_utf8_lossy(&output.lock().unwrap()).into_owned();
    CommandResult {
        success,
        output,
        exit,
        timed_out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Vec<String> {
        vec!["-c".into(), script.into()]
    }

    #[tokio::test]
    async fn captures_output_and_exit_status() {
        let ok = run_command("sh", &sh("echo out; echo err >&2"), Duration::from_secs(5)).await;
        assert!(ok.success);
        assert!(
            ok.output.contains("out") && ok.output.contains("err"),
            "{}",
            ok.output
        );
        let failed = run_command("sh", &sh("echo nope; exit 3"), Duration::from_secs(5)).await;
        assert_eq!(
            (failed.success, failed.exit.as_str()),
            (false, "exit status 3")
        );
    }

    #[tokio::test]
    async fn kills_the_whole_group_on_timeout() {
        let started = std::time::Instant::now();
        let result =
            run_command("sh", &sh("sleep 30; echo late"), Duration::from_millis(300)).await;
        assert!(result.timed_out);
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(!result.output.contains("late"));
    }

    #[tokio::test]
    async fn a_missing_program_is_reported() {
        let result = run_command("serin-no-such-program", &[], Duration::from_secs(1)).await;
        assert!(!result.success);
        assert!(
            result.exit.contains("cannot start serin-no-such-program"),
            "{}",
            result.exit
        );
    }

    struct Echo;

    impl CommandRunner for Echo {
        fn run<'a>(
            &'a self,
            line: &'a str,
        ) -> Pin<Box<dyn Future<Output = RunnerOutput> + Send + 'a>> {
            Box::pin(async move {
                if let Some(seconds) = line.strip_prefix("sleep ") {
                    tokio::time::sleep(Duration::from_secs(seconds.parse().unwrap())).await;
                }
                RunnerOutput {
                    exit_code: if line.starts_with("fail") { 3 } else { 0 },
                    stdout: format!("ran {line}\n"),
                    stderr: "note\n".into(),
                }
            })
        }
    }

    #[tokio::test]
    async fn a_runner_reports_as_a_process_would() {
        let ok = run_with_runner(&Echo, "true", Duration::from_secs(5)).await;
        assert_eq!(
            ok,
            CommandResult {
                success: true,
                output: "ran true\nnote\n".into(),
                exit: "exit status 0".into(),
                timed_out: false
            }
        );
        let failed = run_with_runner(&Echo, "fail now", Duration::from_secs(5)).await;
        assert_eq!(
            (failed.success, failed.exit.as_str()),
            (false, "exit status 3")
        );
        let cut = run_with_runner(&Echo, "sleep 30", Duration::from_millis(100)).await;
        assert!(cut.timed_out && !cut.success);
        assert_eq!(cut.exit, "signal: killed");
    }
}
