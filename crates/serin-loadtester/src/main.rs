//! `serin-loadtester`: Flagger-compatible load-test and gate service.

use anyhow::Context;
use clap::Parser;
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
    /// Only payloads whose namespace matches this regular expression may run tasks.
    #[arg(long)]
    namespace_regexp: Option<regex::Regex>,
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
    let listener = tokio::net::TcpListener::bind((args.address, args.port))
        .await
        .with_context(|| format!("cannot listen on {}:{}", args.address, args.port))?;
    let options = Options {
        timeout: args.timeout,
        allow_shell: args.allow_shell,
        proxy: ProxyConfig::from_env(),
        namespace_filter: args.namespace_regexp,
        ..Options::default()
    };
    let timeout = humantime::format_duration(args.timeout).to_string();
    tracing::info!(port = args.port, timeout, "Starting load tester");
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
