//! Log output for the operator and the CLI: tracing's subscriber writing to stderr, as text or one
//! JSON object per line, filtered by `RUST_LOG` when it is set and by the given level otherwise.
//! Every reconcile runs in a `reconcile` span carrying the Canary's `canary` (name) and
//! `namespace`, so each line of a tick, kube's own included, can be filtered by Canary.

use tracing_subscriber::EnvFilter;

/// How log lines are written (`--log-format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// `<time> <LEVEL> reconcile{canary=.. namespace=..}: <target>: <message>`.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `message`, `target`, the fields of the
    /// current span under `span` and of every enclosing span under `spans`.
    Json,
}

/// Installs the process's log subscriber. `level` (`--log-level`: `info`, `debug`, or directives
/// such as `info,kube=debug`) applies when `RUST_LOG` is unset.
pub fn init_logging(format: LogFormat, level: &str) -> Result<(), String> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.trim().is_empty() => {
            EnvFilter::try_new(&directives).map_err(|e| format!("RUST_LOG={directives:?}: {e}"))?
        }
        _ => EnvFilter::try_new(level).map_err(|e| {
            format!("--log-level {level:?}: {e}; use trace, debug, info, warn or error")
        })?,
    };
    // Colours only on a terminal: a container's log (`kubectl logs`) is read as plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
    };
    installed.map_err(|e| format!("installing the log subscriber: {e}"))
}
