//! `serin`: Serin's command line: the local sandbox (`serin sandbox up`), the end-to-end demo
//! (`serin demo`), and the commands that watch and steer releases (`get`, `status`, `promote`,
//! `abort`, `retry`, `restart`, `pause`, `resume`, `dashboard`, `lint`, `completion`) and `migrate` (Flagger
//! and Argo Rollouts manifests to Serin's), which `kubectl serin` runs too.

// The sandbox (`serin sandbox up`, `serin demo`) keeps its cluster's objects as JSON values and
// rebuilds many of them on every change; with mimalloc instead of glibc's malloc (whose arenas grew
// by page faults and mprotect calls) the same sandbox inside the operator's bench used a tenth less
// CPU (docs/scale.md, "The sandbox's CPU").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod demo;
mod history;
mod lint;
mod migrate;
mod steer;

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "serin", version, about = "Progressive delivery for Kubernetes")]
struct Cli {
    #[command(flatten)]
    cluster: steer::Cluster,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs a healthy and a faulty release end to end in a local sandbox, printing their progress.
    Demo,
    /// The local sandbox: a Kubernetes-API-compatible server on 127.0.0.1.
    Sandbox {
        #[command(subcommand)]
        action: SandboxAction,
    },
    #[command(flatten)]
    Steer(steer::Steer),
}

#[derive(Subcommand)]
enum SandboxAction {
    /// Starts the sandbox, writes DIR/kubeconfig and DIR/endpoints.json, runs until interrupted.
    Up {
        /// Directory for the kubeconfig and endpoints.json.
        #[arg(long, default_value = ".serin-sandbox")]
        dir: PathBuf,
        /// YAML or JSON list of fault rules in force from the start (see docs/sandbox.md);
        /// change them later with `PUT /sandbox/faults`.
        #[arg(long)]
        faults: Option<PathBuf>,
        /// Extra image-name pattern whose pods run the built-in podinfo app (besides `podinfo`);
        /// repeatable. Images matching nothing stay `ErrImagePull`.
        #[arg(long = "podinfo-image", value_name = "PATTERN")]
        podinfo_images: Vec<String>,
        /// Run the mesh without Prometheus (by default Debian's `prometheus` scrapes it).
        #[arg(long)]
        without_prometheus: bool,
        /// How many nodes the cluster has: `sandbox-node`, `sandbox-node-2`, ..., each in a zone
        /// of its own; the scheduler spreads pods over them (see docs/sandbox.md).
        #[arg(long, value_name = "N", default_value_t = 3,
            value_parser = clap::value_parser!(u16).range(1..=1000))]
        nodes: u16,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Command::Steer(steer::Steer::Completion { shell }) = cli.command {
        use clap::CommandFactory;
        steer::print_completion(shell, &mut Cli::command(), "serin");
        return std::process::ExitCode::SUCCESS;
    }
    let outcome = match cli.command {
        Command::Steer(command) => steer::run(cli.cluster, command).await,
        command => serve(command)
            .await
            .map(|()| std::process::ExitCode::SUCCESS),
    };
    outcome.unwrap_or_else(|error| {
        eprintln!("error: {error:#}");
        std::process::ExitCode::from(steer::ERROR_EXIT)
    })
}

/// The long-running commands: the demo and the sandbox.
async fn serve(command: Command) -> anyhow::Result<()> {
    // The in-process operator (demo) and load testers (sandbox pods) log through tracing.
    serin_controller::init_logging(serin_controller::LogFormat::Text, "info")
        .map_err(anyhow::Error::msg)?;
    match command {
        Command::Demo => demo::run().await,
        Command::Sandbox {
            action:
                SandboxAction::Up {
                    dir,
                    faults,
                    podinfo_images,
                    without_prometheus,
                    nodes,
                },
        } => {
            let mut serving = serin_sandbox::runtime::ServingOptions::default();
            serving.podinfo_images.extend(podinfo_images);
            // Pods serve real HTTP here, so `kubectl apply` of a podinfo Deployment can be curled.
            let mut options = serin_sandbox::SandboxOptions {
                runtime: Some(std::sync::Arc::new(
                    serin_sandbox::runtime::ServingRuntime::new(serving),
                )),
                mesh: Some(serin_sandbox::MeshSettings {
                    prometheus: (!without_prometheus).then(|| "prometheus".to_string()),
                    ..serin_sandbox::MeshSettings::default()
                }),
                nodes: usize::from(nodes),
                ..serin_sandbox::SandboxOptions::default()
            };
            if let Some(path) = faults {
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading --faults {}", path.display()))?;
                options.faults = serde_saphyr::from_str(&text).with_context(|| {
                    format!(
                        "--faults {}: expected a list of rules such as `- {{verb: LIST, resource: pods, errorRate: 0.1, latencyMs: 50}}`",
                        path.display()
                    )
                })?;
            }
            let sandbox = serin_sandbox::Sandbox::start_with(&dir, options)
                .await
                .with_context(|| format!("starting the sandbox in {}", dir.display()))?;
            println!(
                "sandbox API server: {} (CA: {}; the kubeconfig's address)",
                sandbox.https_url,
                dir.join("ca.crt").display()
            );
            println!(
                "local admin:        {} (plain HTTP, no credentials needed)",
                sandbox.url
            );
            println!("kubeconfig:         {}", sandbox.kubeconfig.display());
            println!("endpoints:          {}", sandbox.endpoints.display());
            if let Some(mesh) = &sandbox.mesh {
                println!(
                    "mesh proxy:         http://{} (use it as HTTP_PROXY)",
                    mesh.address
                );
            }
            if let Some(prometheus) = &sandbox.prometheus {
                println!("prometheus:         {}", prometheus.url);
            }
            if let Some(targets) = &sandbox.prometheus_targets {
                println!(
                    "scrape targets:     {}/*.json (file_sd: e.g. the operator's admin address)",
                    targets.display()
                );
            }
            println!(
                "try: KUBECONFIG={} kubectl get namespaces",
                sandbox.kubeconfig.display()
            );
            wait_for_signal().await?;
            println!("stopping the sandbox");
            sandbox.stop().await;
            Ok(())
        }
        Command::Steer(_) => unreachable!("run by main"),
    }
}

async fn wait_for_signal() -> anyhow::Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result?,
        _ = terminate.recv() => {}
    }
    Ok(())
}

#[cfg(test)]
mod reference {
    use clap::CommandFactory;
    use std::fmt::Write as _;

    /// Every `serin` command with its long help, as clap prints it.
    fn markdown() -> String {
        let mut out = String::from(
            "# Reference: `serin` and `kubectl serin`\n\n\
             <!-- Generated by `make reference` from crates/serin-cli; do not edit. -->\n\n\
             `kubectl serin` (the `kubectl-serin` binary on the PATH) runs the same subcommands as\n\
             `serin`, except `demo` and `sandbox`. [cli.md](../cli.md) shows them at work.\n",
        );
        let mut command = super::Cli::command().term_width(100);
        command.build();
        section(&mut out, &mut command, "serin");
        out
    }

    fn section(out: &mut String, command: &mut clap::Command, path: &str) {
        let help = command.render_long_help().to_string();
        let _ = write!(out, "\n## `{path}`\n\n```text\n{}\n```\n", help.trim_end());
        for sub in command.get_subcommands_mut() {
            if sub.get_name() != "help" {
                let name = format!("{path} {}", sub.get_name());
                section(out, sub, &name);
            }
        }
    }

    #[test]
    fn the_checked_in_command_reference_is_current() {
        serin_api::reference::check_checked_in("docs/reference/cli.md", &markdown())
            .unwrap_or_else(|problem| panic!("{problem}"));
    }
}
