//! Watching and steering releases from a terminal or a CI job: `get [--watch]`, `status --watch`,
//! the manual requests (`promote`, `abort`, `retry`, `restart`), `pause`/`resume`, `dashboard`, `lint` and
//! `completion`. The same subcommands serve `serin` and the kubectl plugin `kubectl-serin`
//! (`kubectl serin ...`).

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};
use serde_json::json;
use serin_api::{Canary, ManualRequest, Phase};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// The exit code when a command could not do its work (no cluster, no such Canary, ...), apart
/// from `status`'s 0 to 3.
pub const ERROR_EXIT: u8 = 4;

/// Where the Canaries are: kubectl's flags for the kubeconfig, context and namespace.
#[derive(Args, Clone, Debug)]
pub struct Cluster {
    /// Path of the kubeconfig (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, global = true)]
    context: Option<String>,
    /// Namespace of the Canary (default: the context's namespace).
    #[arg(short = 'n', long, global = true)]
    namespace: Option<String>,
    /// API group of the Canaries: `serin.dev`, or `flagger.app` where Serin serves Flagger's
    /// CRDs.
    #[arg(
        long,
        global = true,
        env = "SERIN_API_GROUP",
        default_value = "serin.dev"
    )]
    api_group: String,
}

/// The Canary `name`, with its status as the operator works with it (under Flagger's CRDs, the
/// fields kept in the status annotation joined in).
async fn get_canary(canaries: &Api<Canary>, name: &str) -> anyhow::Result<Canary> {
    Ok(serin_core::stored_status::joined(canaries.get(name).await?))
}

/// Every Canary of the namespace, as [`get_canary`] reads each.
async fn list_canaries(canaries: &Api<Canary>) -> anyhow::Result<Vec<Canary>> {
    let list = canaries.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .map(serin_core::stored_status::joined)
        .collect())
}

/// The subcommands that watch and steer releases.
#[derive(Subcommand, Debug)]
pub enum Steer {
    /// Lists the Canaries of a namespace, or shows one release in detail.
    #[command(visible_alias = "list")]
    Get {
        /// The Canary to show; all of the namespace's when left out.
        name: Option<String>,
        /// Print the Canary (or the list) as JSON or YAML instead.
        #[arg(short = 'o', long, value_parser = ["json", "yaml"])]
        output: Option<String>,
        /// Keep watching: redraw in place on a terminal, append each change otherwise.
        #[arg(short, long)]
        watch: bool,
    },
    /// Prints the state of a Canary's release; with --watch, every transition until it ends.
    /// Exit code: 0 Succeeded (or Initialized with no release pending), 1 Failed, 2 timed out,
    /// 3 the Canary is invalid.
    Status {
        /// The Canary.
        name: String,
        /// Follow the release until it Succeeded or Failed, or a new Canary is Initialized.
        #[arg(short, long)]
        watch: bool,
        /// Give up watching after this long (e.g. 10m).
        #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
        timeout: Duration,
        /// Print the final Canary as JSON or YAML after the transitions.
        #[arg(short = 'o', long, value_parser = ["json", "yaml"])]
        output: Option<String>,
    },
    /// Leaves a pause or a promotion gate; with --full, skips the rest of the analysis.
    Promote {
        /// The Canary.
        name: String,
        /// Promote at once, skipping the remaining steps and checks.
        #[arg(long)]
        full: bool,
    },
    /// Rolls the release back now: all traffic returns to the primary.
    Abort {
        /// The Canary.
        name: String,
    },
    /// Runs a Failed release again.
    Retry {
        /// The Canary.
        name: String,
    },
    /// Runs the analysis of the target's current revision again from the start (refused once the
    /// promotion has started).
    Restart {
        /// The Canary.
        name: String,
    },
    /// Suspends the Canary (`spec.suspend`): the operator stops acting on it.
    Pause {
        /// The Canary.
        name: String,
    },
    /// Resumes a suspended Canary.
    Resume {
        /// The Canary.
        name: String,
    },
    /// Validates Canary manifests offline with the operator's own validation.
    Lint {
        /// YAML files (several documents each, `---` separated); other kinds are skipped.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Converts Flagger and Argo Rollouts manifests into Serin's, warning about every field without an equivalent.
    Migrate {
        /// YAML files or directories of them; the converted manifests go to stdout, warnings to stderr.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Serves the web dashboard of the releases on this machine, with your kubeconfig's rights:
    /// every Canary live, a page per release with its metric charts, and the actions.
    Dashboard {
        /// Where to serve it: a loopback address (the dashboard acts with your credentials and
        /// has no sign-in of its own).
        #[arg(long, default_value = "127.0.0.1:9797")]
        address: std::net::SocketAddr,
        /// Open it in the default browser.
        #[arg(long)]
        open: bool,
    },
    /// Prints a shell completion script: `source <(kubectl-serin completion bash)`.
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// Prints the completion script of `command` (run as `bin_name`) for `shell`. A reader that stops
/// early (`| head`) ends the output quietly rather than with a panic.
pub fn print_completion(shell: clap_complete::Shell, command: &mut clap::Command, bin_name: &str) {
    use std::io::Write;
    let mut script = Vec::new();
    clap_complete::generate(shell, command, bin_name, &mut script);
    let _ = std::io::stdout().write_all(&script);
}

/// Runs a subcommand; its exit code follows the subcommand's documentation.
pub async fn run(cluster: Cluster, command: Steer) -> anyhow::Result<ExitCode> {
    if let Steer::Lint { files } = &command {
        return crate::lint::lint(files);
    }
    if let Steer::Migrate { files } = &command {
        return crate::migrate::run(files);
    }
    if let Steer::Completion { .. } = &command {
        bail!("completion is answered by the binary, which knows its full command line");
    }
    let group: serin_api::ApiGroup = cluster
        .api_group
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--api-group: {e}"))?;
    serin_api::set_api_group(group);
    if let Steer::Dashboard { address, open } = command {
        return dashboard(&cluster, address, open).await;
    }
    let (client, namespace) = connect(&cluster).await?;
    let canaries: Api<Canary> = Api::namespaced(client.clone(), &namespace);
    match command {
        Steer::Get {
            name,
            output: Some(format),
            ..
        } => {
            let text = match name {
                Some(name) => encode(&get_canary(&canaries, &name).await?, &format)?,
                None => encode(&list_canaries(&canaries).await?, &format)?,
            };
            print!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Steer::Get {
            name,
            output: None,
            watch,
        } => {
            let namespace = namespace.as_str();
            let draw = || async {
                match &name {
                    Some(name) => draw_release(&client, &canaries, name).await,
                    None => draw_list(&canaries, namespace).await,
                }
            };
            if !watch {
                print!("{}", draw().await?);
                return Ok(ExitCode::SUCCESS);
            }
            watch_drawing(draw).await
        }
        Steer::Status {
            name,
            watch,
            timeout,
            output,
        } => {
            let code = status(&client, &canaries, &name, watch, timeout).await?;
            if let Some(format) = output {
                print!("{}", encode(&get_canary(&canaries, &name).await?, &format)?);
            }
            Ok(code)
        }
        Steer::Promote { name, full: false } => {
            request(&client, &canaries, &name, ManualRequest::Promote).await
        }
        Steer::Promote { name, full: true } => {
            request(&client, &canaries, &name, ManualRequest::PromoteFull).await
        }
        Steer::Abort { name } => request(&client, &canaries, &name, ManualRequest::Abort).await,
        Steer::Retry { name } => request(&client, &canaries, &name, ManualRequest::Retry).await,
        Steer::Restart { name } => request(&client, &canaries, &name, ManualRequest::Restart).await,
        Steer::Pause { name } => suspend(&canaries, &name, true).await,
        Steer::Resume { name } => suspend(&canaries, &name, false).await,
        Steer::Lint { .. }
        | Steer::Migrate { .. }
        | Steer::Completion { .. }
        | Steer::Dashboard { .. } => {
            unreachable!("handled above")
        }
    }
}

/// `dashboard`: serves the web dashboard on a loopback address with the kubeconfig's user, over
/// the namespace given with `-n`, else every namespace the user may list.
async fn dashboard(
    cluster: &Cluster,
    address: std::net::SocketAddr,
    open: bool,
) -> anyhow::Result<ExitCode> {
    if !address.ip().is_loopback() {
        bail!(
            "--address {address}: the local dashboard must listen on a loopback address (127.0.0.1 or ::1): it acts with your kubeconfig's credentials and has no sign-in; to share one, install the in-cluster dashboard (Helm value dashboard.enabled=true)"
        );
    }
    let (config, default_namespace) = kube_config(cluster).await?;
    let client = Client::try_from(config.clone())?;
    let namespace = match &cluster.namespace {
        Some(namespace) => Some(namespace.clone()),
        None => {
            let every: Api<Canary> = Api::all(client);
            match every.list(&ListParams::default().limit(1)).await {
                Ok(_) => None,
                Err(kube::Error::Api(status)) if status.code == 403 => {
                    eprintln!(
                        "you may not list Canaries in every namespace; showing namespace {default_namespace} (choose another with -n)"
                    );
                    Some(default_namespace)
                }
                Err(error) => return Err(error).context("listing Canaries"),
            }
        }
    };
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("listening on {address}"))?;
    let url = format!("http://{}/", listener.local_addr()?);
    println!("Serin dashboard: {url} (Ctrl-C to stop)");
    if open {
        let opener = if cfg!(target_os = "macos") {
            "open"
        } else {
            "xdg-open"
        };
        if let Err(error) = std::process::Command::new(opener).arg(&url).spawn() {
            eprintln!("could not open a browser ({opener}: {error}); open {url} yourself");
        }
    }
    let settings = serin_dashboard::Settings {
        mode: serin_dashboard::Mode::Local,
        allowed_hosts: Vec::new(),
        secure_cookies: true,
        namespace,
    };
    tokio::select! {
        served = serin_dashboard::serve(listener, config, settings) => served?,
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(ExitCode::SUCCESS)
}

async fn connect(cluster: &Cluster) -> anyhow::Result<(Client, String)> {
    let (config, namespace) = kube_config(cluster).await?;
    Ok((Client::try_from(config)?, namespace))
}

/// The kubeconfig's connection and the namespace to work in (`-n`, else the context's).
async fn kube_config(cluster: &Cluster) -> anyhow::Result<(Config, String)> {
    let options = KubeConfigOptions {
        context: cluster.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match &cluster.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &options).await?
        }
        None => Config::from_kubeconfig(&options)
            .await
            .context("reading the kubeconfig ($KUBECONFIG or ~/.kube/config)")?,
    };
    let namespace = cluster
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    Ok((config, namespace))
}

fn phase_name(canary: &Canary) -> String {
    canary
        .status
        .as_ref()
        .and_then(|s| s.phase)
        .map(|p| format!("{p:?}"))
        .unwrap_or_else(|| "-".into())
}

fn age(canary: &Canary) -> String {
    let Some(created) = canary.metadata.creation_timestamp.as_ref() else {
        return "-".into();
    };
    let seconds = k8s_openapi::jiff::Timestamp::now()
        .duration_since(created.0)
        .as_secs()
        .max(0) as u64;
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// `3/7` for a release with steps: the step being run of how many.
fn step(canary: &Canary) -> String {
    let steps = canary
        .spec
        .analysis
        .as_ref()
        .and_then(|a| a.steps.as_ref())
        .map(Vec::len);
    let index = canary.status.as_ref().and_then(|s| s.current_step_index);
    match (steps, index) {
        (Some(total), Some(index)) => format!("{}/{total}", (index as usize + 1).min(total)),
        (Some(total), None) => format!("0/{total}"),
        _ => "-".into(),
    }
}

/// `value` as `json` or `yaml`, ending with a newline.
fn encode<T: serde::Serialize>(value: &T, format: &str) -> anyhow::Result<String> {
    Ok(match format {
        "yaml" => serde_saphyr::to_string(value)?,
        _ => serde_json::to_string_pretty(value)? + "\n",
    })
}

/// Redraws `draw()` every second until interrupted: in place on a terminal, appended (only when it
/// changed) otherwise, so a log of a CI job shows each state once.
async fn watch_drawing<F, Fut>(draw: F) -> anyhow::Result<ExitCode>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<String>>,
{
    use std::io::{IsTerminal, Write};
    let terminal = std::io::stdout().is_terminal();
    let mut last = String::new();
    loop {
        let drawing = draw().await?;
        if drawing != last {
            let mut out = std::io::stdout().lock();
            if terminal {
                // Home the cursor, then clear to the end of the screen: no flicker between frames.
                write!(out, "\x1b[H{}\x1b[J", drawing.replace('\n', "\x1b[K\n"))?;
            } else {
                let time = k8s_openapi::jiff::Timestamp::now().strftime("%H:%M:%S");
                writeln!(out, "--- {time}")?;
                write!(out, "{drawing}")?;
            }
            out.flush()?;
            last = drawing;
        }
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// Each metric's last value against its range, `request-success-rate=99.87(min 99)`, failed ones
/// marked with `!`.
fn metric_summary(canary: &Canary) -> String {
    let status = canary.status.clone().unwrap_or_default();
    let metrics = canary
        .spec
        .analysis
        .as_ref()
        .and_then(|a| a.metrics.clone())
        .unwrap_or_default();
    let summary: Vec<String> = status
        .metric_checks
        .iter()
        .map(|check| {
            let range = metrics
                .iter()
                .find(|m| m.name == check.name)
                .map(serin_core::summary::accepted_range)
                .unwrap_or_default();
            let value = check
                .value
                .map_or("none".to_string(), |v| format!("{v:.2}"));
            let mark = if check.passed { "" } else { "!" };
            format!("{mark}{}={value}({range})", check.name)
        })
        .collect();
    if summary.is_empty() {
        "-".into()
    } else {
        summary.join(" ")
    }
}

async fn draw_list(canaries: &Api<Canary>, namespace: &str) -> anyhow::Result<String> {
    let items = list_canaries(canaries).await?;
    if items.is_empty() {
        return Ok(format!("No Canaries in namespace {namespace}.\n"));
    }
    let rows: Vec<[String; 7]> = items
        .iter()
        .map(|c| {
            let status = c.status.clone().unwrap_or_default();
            let threshold = c.spec.analysis.as_ref().and_then(|a| a.threshold);
            [
                c.name_any(),
                phase_name(c),
                status.canary_weight.to_string(),
                step(c),
                match threshold {
                    Some(t) => format!("{}/{t}", status.failed_checks),
                    None => status.failed_checks.to_string(),
                },
                metric_summary(c),
                age(c),
            ]
        })
        .collect();
    Ok(table(
        &[
            "NAME", "STATUS", "WEIGHT", "STEP", "FAILED", "METRICS", "AGE",
        ],
        &rows,
    ))
}

fn table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(str::len);
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        format!("{}\n", padded.join("   ").trim_end())
    };
    let mut text = line(header.to_vec());
    for row in rows {
        text.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    text
}

async fn events_of(client: &Client, canary: &Canary) -> Vec<Event> {
    let events: Api<Event> =
        Api::namespaced(client.clone(), &canary.namespace().unwrap_or_default());
    let selector = format!(
        "involvedObject.name={},involvedObject.kind=Canary",
        canary.name_any()
    );
    let mut items = events
        .list(&ListParams::default().fields(&selector))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    // Events of the same second keep the order they were written in.
    let written = |e: &Event| {
        let version = e.metadata.resource_version.as_deref().unwrap_or_default();
        (version.len(), version.to_string())
    };
    items.sort_by_key(|e| (e.last_timestamp.clone().map(|t| t.0), written(e)));
    items
}

/// The first container image of a Deployment, or `-` when it does not exist.
async fn image_of(client: &Client, namespace: &str, name: &str) -> String {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    deployments
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|d| d.spec)
        .and_then(|s| s.template.spec)
        .and_then(|p| p.containers.into_iter().next())
        .and_then(|c| c.image)
        .unwrap_or_else(|| "-".into())
}

/// `get NAME`: the release drawn as text, the same on every call for the same state.
async fn draw_release(
    client: &Client,
    canaries: &Api<Canary>,
    name: &str,
) -> anyhow::Result<String> {
    use std::fmt::Write as _;
    let canary = get_canary(canaries, name).await?;
    let namespace = canary.namespace().unwrap_or_default();
    let status = canary.status.clone().unwrap_or_default();
    let mut out = String::new();
    writeln!(
        out,
        "Canary   {namespace}/{}   {}   weight {}%",
        canary.name_any(),
        phase_name(&canary),
        status.canary_weight
    )?;
    if let Some(message) = &status.message {
        writeln!(out, "Blocked  {message}")?;
    }
    let target = &canary.spec.target_ref;
    if target.kind == "Deployment" {
        let primary = format!("{}-primary", target.name);
        writeln!(
            out,
            "Images   {primary} {} (primary)   {} {} (canary)",
            image_of(client, &namespace, &primary).await,
            target.name,
            image_of(client, &namespace, &target.name).await
        )?;
    }
    if let Some(split) = &status.pod_split {
        writeln!(
            out,
            "Pods     {} canary / {} primary ready ({}% canary, by replica ratio)",
            split.canary, split.primary, split.canary_percent
        )?;
    }
    let ladder = serin_core::summary::ladder(&canary);
    if !ladder.is_empty() {
        let at = serin_core::summary::ladder_position(&canary, &ladder);
        let marked: Vec<String> = ladder
            .iter()
            .enumerate()
            .map(|(i, w)| {
                if Some(i) == at {
                    format!("[{w}]")
                } else {
                    w.clone()
                }
            })
            .collect();
        writeln!(out, "Steps    {}", marked.join(" > "))?;
    }
    let analysis = canary.spec.analysis.clone().unwrap_or_default();
    writeln!(
        out,
        "Checks   {} failed of {} allowed",
        status.failed_checks,
        analysis.threshold.unwrap_or(1)
    )?;
    for metric in analysis.metrics.iter().flatten() {
        let check = status.metric_checks.iter().find(|c| c.name == metric.name);
        let value = check
            .and_then(|c| c.value)
            .map_or("-".to_string(), |v| format!("{v:.3}"));
        let verdict = match check {
            None => "not run yet",
            Some(c) if c.passed => "ok",
            Some(_) => "FAILED",
        };
        writeln!(
            out,
            "Metric   {:<24} {value:>10}   {:<10} {verdict}",
            metric.name,
            serin_core::summary::accepted_range(metric)
        )?;
    }
    for line in crate::history::history_lines(&status) {
        writeln!(out, "{line}")?;
    }
    let waiting = matches!(status.phase, Some(Phase::Waiting | Phase::WaitingPromotion));
    for hook in analysis.webhooks.iter().flatten() {
        let kind = hook.type_.clone().unwrap_or_else(|| "rollout".into());
        if !kind.starts_with("confirm-") {
            continue;
        }
        let state = match (waiting, kind.as_str(), status.phase) {
            (true, "confirm-rollout", Some(Phase::Waiting)) => "closed: waiting",
            (true, "confirm-promotion", Some(Phase::WaitingPromotion)) => "closed: waiting",
            _ => "",
        };
        writeln!(out, "Gate     {:<24} {kind:<26} {state}", hook.name)?;
    }
    let events = events_of(client, &canary).await;
    for event in events.iter().rev().take(5).rev() {
        writeln!(
            out,
            "Event    {:<8} {:<16} {}",
            event.type_.as_deref().unwrap_or_default(),
            event.reason.as_deref().unwrap_or_default(),
            event.message.as_deref().unwrap_or_default()
        )?;
    }
    Ok(out)
}

/// Whether the target has a revision the Canary has not released yet (the operator will start a
/// release for it), by the same template hash the operator records as `lastAppliedSpec`.
async fn release_pending(client: &Client, canary: &Canary) -> bool {
    let target = &canary.spec.target_ref;
    if target.kind != "Deployment" {
        return false;
    }
    let deployments: Api<Deployment> =
        Api::namespaced(client.clone(), &canary.namespace().unwrap_or_default());
    let Ok(deployment) = deployments.get(&target.name).await else {
        return false;
    };
    let applied = canary
        .status
        .as_ref()
        .and_then(|s| s.last_applied_spec.clone());
    let current = serin_controller::workloads::released_revision(
        deployment,
        &serin_router::services::DEFAULT_SELECTOR_LABELS,
    );
    applied.is_some_and(|applied| current.is_some_and(|current| current != applied))
}

fn transition(canary: &Canary) -> String {
    let status = canary.status.clone().unwrap_or_default();
    let message = status
        .conditions
        .first()
        .map(|c| c.message.clone())
        .or(status.message)
        .unwrap_or_default();
    format!(
        "{:<17} weight={:<3} failedChecks={} step={}  {message}",
        phase_name(canary),
        status.canary_weight,
        status.failed_checks,
        step(canary)
    )
}

async fn status(
    client: &Client,
    canaries: &Api<Canary>,
    name: &str,
    watch: bool,
    timeout: Duration,
) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    let mut last = String::new();
    loop {
        let canary = get_canary(canaries, name).await?;
        let problems = serin_api::validate::validate(&canary);
        if !problems.is_empty() {
            println!("{} is invalid:", canary.name_any());
            for problem in problems {
                println!("  {problem}");
            }
            return Ok(ExitCode::from(3));
        }
        let line = transition(&canary);
        if line != last {
            let time = k8s_openapi::jiff::Timestamp::now().strftime("%H:%M:%S");
            println!("{time} {line}");
            last = line;
        }
        let phase = canary.status.as_ref().and_then(|s| s.phase);
        // A new Canary that initialized with nothing to release has settled, as Argo Rollouts'
        // status treats a Healthy rollout.
        let settled = matches!(
            phase,
            Some(Phase::Succeeded | Phase::Failed | Phase::Initialized)
        ) && !release_pending(client, &canary).await;
        if !watch || settled {
            return Ok(match phase {
                Some(Phase::Failed) if settled => ExitCode::from(1),
                _ => ExitCode::SUCCESS,
            });
        }
        if started.elapsed() >= timeout {
            println!(
                "timed out after {} waiting for {name} to succeed or fail",
                humantime::format_duration(timeout)
            );
            return Ok(ExitCode::from(2));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Writes a manual request (a new token in its annotation) and prints what the operator did.
async fn request(
    client: &Client,
    canaries: &Api<Canary>,
    name: &str,
    manual: ManualRequest,
) -> anyhow::Result<ExitCode> {
    let annotation = manual.annotation();
    let before = get_canary(canaries, name).await?;
    let held_before = before.status.as_ref().and_then(|s| s.message.clone());
    let known: Vec<String> = events_of(client, &before)
        .await
        .iter()
        .map(|e| e.metadata.name.clone().unwrap_or_default())
        .collect();
    let token = k8s_openapi::jiff::Timestamp::now()
        .as_millisecond()
        .to_string();
    let patch = json!({"metadata": {"annotations": {annotation: token}}});
    canaries
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let verb = manual.verb();
    println!("{verb} requested for {name} (token {token}); waiting for the operator");
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let canary = get_canary(canaries, name).await?;
        let handled = canary
            .status
            .as_ref()
            .and_then(|s| s.handled_requests.as_ref())
            .and_then(|h| manual.handled(h));
        if handled == Some(&token) {
            for event in events_of(client, &canary).await {
                if !known.contains(&event.metadata.name.clone().unwrap_or_default()) {
                    println!(
                        "{}: {}",
                        event.reason.as_deref().unwrap_or_default(),
                        event.message.as_deref().unwrap_or_default()
                    );
                }
            }
            println!("now {}", transition(&canary));
            return Ok(ExitCode::SUCCESS);
        }
        // The operator keeps a request it cannot act on yet pending, and says why in the status.
        let message = canary.status.as_ref().and_then(|s| s.message.as_deref());
        if let Some(message) = message.filter(|m| Some(*m) != held_before.as_deref()) {
            println!("the operator holds the {verb} request until this is resolved: {message}");
            return Ok(ExitCode::SUCCESS);
        }
    }
    bail!(
        "the operator did not act on the {verb} request within 60s: is it running and watching namespace {}?",
        before.namespace().unwrap_or_default()
    )
}

async fn suspend(canaries: &Api<Canary>, name: &str, suspend: bool) -> anyhow::Result<ExitCode> {
    let current = get_canary(canaries, name).await?;
    if current.spec.suspend.unwrap_or(false) == suspend {
        println!(
            "{name} is already {}",
            if suspend { "paused" } else { "running" }
        );
        return Ok(ExitCode::SUCCESS);
    }
    let patch = json!({"spec": {"suspend": suspend}});
    canaries
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    println!(
        "{name} {}",
        if suspend {
            "paused: the operator leaves it as it is until resume"
        } else {
            "resumed"
        }
    );
    Ok(ExitCode::SUCCESS)
}
