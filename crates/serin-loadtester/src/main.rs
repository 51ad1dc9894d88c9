//! `serin-loadtester`: Flagger-compatible load-test and gate service.

use anyhow::Context;
use clap::Parser;
use serin_loadtester::access::TOKEN_ENV;
use serin_loadtester::proxy::ProxyConfig;
use serin_loadtester::{Options, serve};
use std::time::Duration;

/// Flagger-compatible load tester: receives canary webhooks, generates load with a built-in
/// hey, runs commands when allowed, and keeps manual gates.
#[derive(Parser)]
#[command(name = "serin-loadtester", version)]
struct Args {
    /// Port to listen on.
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Address to listen on; 0.0.0.0 so other pods can reach it.
    #[arg(long, default_value = "0.0.0.0")]
    address: std::net::IpAddr,
    /// Longest a task may run (30s, 10m, 1h, 1h30m).
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// debug, info, warn or error; logs are JSON lines on stderr.
    #[arg(long, default_value = "info")]
    log_level: tracing::Level,
    /// Run commands other than hey (bash tasks, helm, kubectl, any non-hey cmd).
    #[arg(long)]
    allow_shell: bool,
    /// Only payloads whose namespace matches this regular expression (the whole namespace) may
    /// run tasks. A filter on what payloads claim, not a security boundary.
    #[arg(long, value_parser = namespace_regexp)]
    namespace_regexp: Option<regex::Regex>,
    /// How many tasks may run at once; the task endpoint answers 429 to more.
    #[arg(long, default_value_t = serin_loadtester::DEFAULT_MAX_TASKS, value_parser = at_least_one)]
    max_tasks: usize,
}

fn namespace_regexp(pattern: &str) -> Result<regex::Regex, regex::Error> {
    serin_loadtester::access::namespace_filter(pattern)
}

fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(count) if count >= 1 => Ok(count),
        _ => Err(format!(
            "expected a whole number of tasks, at least 1, got `{text}`"
        )),
    }
}

/// The token from the environment only: a flag would show it to anyone who can run `ps`.
fn token_from_env() -> anyhow::Result<Option<String>> {
    match std::env::var(TOKEN_ENV) {
        Ok(value) => Ok(Some(
            serin_loadtester::access::token_from(&value).map_err(anyhow::Error::msg)?,
        )),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            anyhow::bail!("{TOKEN_ENV} is not valid UTF-8")
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_max_level(args.log_level)
        .with_writer(std::io::stderr)
        .init();
    let token = token_from_env()?;
    let listener = tokio::net::TcpListener::bind((args.address, args.port))
        .await
        .with_context(|| format!("cannot listen on {}:{}", args.address, args.port))?;
    let options = Options {
        timeout: args.timeout,
        allow_shell: args.allow_shell,
        proxy: ProxyConfig::from_env(),
        namespace_filter: args.namespace_regexp,
        max_tasks: args.max_tasks,
        token,
        ..Options::default()
    };
    let timeout = humantime::format_duration(args.timeout).to_string();
    let token_required = options.token.is_some();
    let address = listener
        .local_addr()
        .context("cannot read the listening address")?
        .to_string();
    tracing::info!(
        address,
        timeout,
        max_tasks = args.max_tasks,
        token_required,
        "Starting load tester"
    );
    if !token_required {
        tracing::warn!(
            "{TOKEN_ENV} is not set: anyone who can reach this load tester can start tasks and open or close gates"
        );
    }
    // Kubernetes stops a pod with SIGTERM; a terminal sends SIGINT.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot listen for SIGTERM")?;
    serve(listener, options, async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
    })
    .await?;
    tracing::info!("Load tester stopped");
    Ok(())
}
