//! Log output for the operator and the CLI: tracing's subscriber writing to stderr, as text or one
//! JSON object per line, filtered by `RUST_LOG` when it is set and by the given level otherwise.
//! Every reconcile past its quick checks runs in a `reconcile` span carrying the Canary's `canary`
//! (name) and `namespace`, so each line of a tick, kube's own included, can be filtered by Canary.

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
        _ => EnvFilter::try_new(directives_for(level)).map_err(|e| {
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

/// The filter directives for `--log-level`. At plain `info`, kube's own span around each
/// reconcile (`reconciling object`, at info) is left out: the operator's `reconcile` span names
/// the Canary already, and building kube's for every reconcile, its fields formatted, was about
/// a fiftieth of the operator's CPU at 1,000 Canaries. `debug` and explicit directives keep it.
fn directives_for(level: &str) -> String {
    if level.trim().eq_ignore_ascii_case("info") {
        "info,kube_runtime::controller=warn".to_string()
    } else {
        level.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::directives_for;
    use tracing_subscriber::EnvFilter;
    use tracing_subscriber::layer::SubscriberExt;

    /// Whether a span at info, with `target`, is enabled under `--log-level level`.
    fn info_span_enabled(level: &str, target: &'static str) -> bool {
        let subscriber = tracing_subscriber::registry()
            .with(EnvFilter::try_new(directives_for(level)).expect("valid directives"));
        tracing::subscriber::with_default(subscriber, || match target {
            "kube_runtime::controller" => {
                !tracing::info_span!(target: "kube_runtime::controller", "reconciling object")
                    .is_disabled()
            }
            _ => !tracing::info_span!(target: "serin_controller::reconcile", "reconcile")
                .is_disabled(),
        })
    }

    #[test]
    fn plain_info_leaves_out_kubes_reconcile_span_and_keeps_the_operators() {
        assert!(!info_span_enabled("info", "kube_runtime::controller"));
        assert!(!info_span_enabled(" INFO ", "kube_runtime::controller"));
        assert!(info_span_enabled("info", "serin_controller::reconcile"));
        assert!(info_span_enabled("debug", "kube_runtime::controller"));
        assert!(info_span_enabled(
            "info,kube=debug",
            "kube_runtime::controller"
        ));
        assert!(!info_span_enabled("warn", "serin_controller::reconcile"));
    }
}
