//! `kubectl-serin`: the kubectl plugin. With it on the PATH, `kubectl serin get`, `kubectl serin status
//! NAME --watch`, `kubectl serin promote NAME` and the rest run the same subcommands as `serin`.

#[path = "../history.rs"]
mod history;
#[path = "../lint.rs"]
mod lint;
#[path = "../migrate/mod.rs"]
mod migrate;
#[path = "../steer.rs"]
mod steer;

use clap::Parser;
use std::process::ExitCode;

/// Watches and steers Serin's releases.
#[derive(Parser)]
#[command(
    name = "kubectl serin",
    bin_name = "kubectl serin",
    version,
    about = "Watch and steer Serin's releases"
)]
struct Plugin {
    #[command(flatten)]
    cluster: steer::Cluster,
    #[command(subcommand)]
    command: steer::Steer,
}

#[tokio::main]
async fn main() -> ExitCode {
    let plugin = Plugin::parse();
    if let steer::Steer::Completion { shell } = plugin.command {
        use clap::CommandFactory;
        // Completes the plugin's own executable; kubectl does not pass completion to plugins.
        steer::print_completion(shell, &mut Plugin::command(), "kubectl-serin");
        return ExitCode::SUCCESS;
    }
    steer::run(plugin.cluster, plugin.command)
        .await
        .unwrap_or_else(|error| {
            eprintln!("error: {error:#}");
            ExitCode::from(steer::ERROR_EXIT)
        })
}
