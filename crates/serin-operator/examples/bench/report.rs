//! The bench's report: the one table of figures, a column per size, and each target beside its
//! figure, met or missed.

use super::{Figures, IDLE_WINDOW};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// One target of the bench at one size: its figure, its limit and whether the figure is within it.
struct Target {
    name: &'static str,
    figure: String,
    limit: String,
    met: bool,
}

/// The targets a size's figures are held to.
fn targets(f: &Figures) -> Vec<Target> {
    let idle_limit_mib = if f.size <= 1_000 { 64.0 } else { 192.0 };
    let idle_mib = f.idle_rss as f64 / 1048576.0;
    let ratio = f.total() as f64 / (f.minimum + f.transitions).max(1) as f64;
    vec![
        Target {
            name: "step lag p99",
            figure: format!("{:.3} s", f.step_lag.p99),
            limit: "< 1 s".into(),
            met: f.step_lag.count > 0 && f.step_lag.p99 < 1.0,
        },
        Target {
            name: "new revision detected p99",
            figure: format!("{:.3} s", f.detection.p99),
            limit: "< 1 s".into(),
            met: f.detection.count > 0 && f.detection.p99 < 1.0,
        },
        Target {
            name: "operator memory idle",
            figure: format!("{idle_mib:.1} MiB"),
            limit: format!("< {idle_limit_mib} MiB"),
            met: idle_mib < idle_limit_mib,
        },
        Target {
            name: "requests per release / minimum with Events",
            figure: format!("{ratio:.2}"),
            limit: "< 1.5".into(),
            met: ratio < 1.5,
        },
        Target {
            name: "operator CPU per 1,000 reconciles",
            figure: format!("{:.2} s", f.cpu_per_1000_reconciles),
            limit: "< 1.0 s".into(),
            met: f.cpu_per_1000_reconciles < 1.0,
        },
        Target {
            name: "Succeeded with one \"Promotion completed\"",
            figure: format!("{}/{}", f.succeeded.min(f.promoted_once), f.size),
            limit: "every Canary".into(),
            met: f.succeeded == f.size && f.promoted_once == f.size,
        },
    ]
}

/// Every size's targets, one line each, and how many were missed.
pub(super) fn target_lines(all: &[Figures]) -> (String, usize) {
    let mut text = String::from("targets:\n");
    let mut missed = 0;
    for f in all {
        for target in targets(f) {
            missed += usize::from(!target.met);
            let _ = writeln!(
                text,
                "  {:>6} Canaries  {:<44} {:>12}  {:<13} {}",
                f.size,
                target.name,
                target.figure,
                target.limit,
                if target.met { "met" } else { "MISSED" }
            );
        }
    }
    (text, missed)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1048576.0)
}

/// The one table: a row per figure, a column per size.
pub(super) fn table(all: &[Figures], interval: Duration) -> String {
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |name: &str, cell: &dyn Fn(&Figures) -> String| {
        rows.push((name.to_string(), all.iter().map(cell).collect()));
    };
    row("operator memory idle (per Canary)", &|f| {
        format!(
            "{} ({:.1} KiB)",
            mib(f.idle_rss),
            f.idle_rss as f64 / 1024.0 / f.size as f64
        )
    });
    row("operator memory peak while all progress", &|f| {
        mib(f.peak_rss)
    });
    row("  cached bytes per Canary|Deployment|Service|VS|DR", &|f| {
        [
            "Canary",
            "Deployment",
            "Service",
            "VirtualService",
            "DestinationRule",
        ]
        .iter()
        .map(|kind| f.cached_bytes.get(*kind).map_or("-".into(), u64::to_string))
        .collect::<Vec<_>>()
        .join("|")
    });
    row("idle 30 s: API requests", &|f| f.idle_requests.to_string());
    row("step lag p50 / p99 / max", &|f| f.step_lag.to_string());
    row("  the operator's: from due or available", &|f| {
        f.operator_lag.to_string()
    });
    row(
        "  ticks due before their Deployments were available",
        &|f| f.waited_on_rollout.to_string(),
    );
    row("new revision detected p50 / p99 / max", &|f| {
        f.detection.to_string()
    });
    row("requests per release", &|f| {
        format!("{:.1}", f.total() as f64 / f.size as f64)
    });
    row("  minimum (transitions + routes + scale/promote)", &|f| {
        format!("{:.1}", f.minimum as f64 / f.size as f64)
    });
    row("  ratio, writes without Events", &|f| {
        format!(
            "{:.2}",
            (f.total() - f.events()) as f64 / f.minimum.max(1) as f64
        )
    });
    row("  ratio, with one Event per transition", &|f| {
        format!(
            "{:.2}",
            f.total() as f64 / (f.minimum + f.transitions).max(1) as f64
        )
    });
    row("operator CPU s per 1,000 reconciles (ticks)", &|f| {
        format!(
            "{:.2} ({:.2})",
            f.cpu_per_1000_reconciles, f.cpu_per_1000_ticks
        )
    });
    row(
        "  reconciles while releasing; CPU s per minute idle",
        &|f| {
            format!(
                "{}; {:.3} ({} reconciles in {} s)",
                f.reconciles,
                f.idle_cpu_per_minute,
                f.idle_reconciles,
                IDLE_WINDOW.as_secs()
            )
        },
    );
    row("sandbox objects, memory per object", &|f| {
        format!(
            "{}, {:.1} KiB",
            f.sandbox_objects,
            f.sandbox_bytes_per_object as f64 / 1024.0
        )
    });
    row("sandbox peak commits per second", &|f| {
        f.commits_peak.to_string()
    });
    row(
        "sandbox controllers: ms per pass, share of the time",
        &|f| {
            let (passes, seconds, window) = f.sandbox_passes;
            format!(
                "{:.1} ms, {:.0}%",
                seconds * 1000.0 / passes.max(1) as f64,
                seconds * 100.0 / window.max(0.001)
            )
        },
    );
    row(
        "sandbox: scaled-up target available p50 / p99 / max",
        &|f| f.rollout.to_string(),
    );
    row("Succeeded, \"Promotion completed\" exactly once", &|f| {
        format!("{}/{}, {}/{}", f.succeeded, f.size, f.promoted_once, f.size)
    });
    let first = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let width = rows
        .iter()
        .flat_map(|(_, cells)| cells.iter().map(String::len))
        .max()
        .unwrap_or(0);
    let mut text = format!(
        "operator bench: every Canary has its own Deployment and one 50% step, interval {}s\n",
        interval.as_secs()
    );
    let _ = write!(text, "{:first$}", "");
    for f in all {
        let _ = write!(text, " | {:>width$}", format!("{} Canaries", f.size));
    }
    text.push('\n');
    for (name, cells) in &rows {
        let _ = write!(text, "{name:first$}");
        for cell in cells {
            let _ = write!(text, " | {cell:>width$}");
        }
        text.push('\n');
    }
    for f in all {
        let per_release = |counts: &BTreeMap<String, u64>| -> String {
            let shares: Vec<String> = counts
                .iter()
                .map(|(key, n)| format!("{key} {:.1}", *n as f64 / f.size as f64))
                .collect();
            shares.join(", ")
        };
        let _ = writeln!(
            text,
            "requests per release at {} by verb: {}",
            f.size,
            per_release(&f.requests)
        );
        let _ = writeln!(
            text,
            "changes per release at {} by resource: {}",
            f.size,
            per_release(&f.commits_by_resource)
        );
        let mut kinds: Vec<(&String, &(usize, usize))> = f.sandbox_by_resource.iter().collect();
        kinds.sort_by_key(|(_, (objects, _))| std::cmp::Reverse(*objects));
        let kinds: Vec<String> = kinds
            .iter()
            .take(8)
            .map(|(resource, (objects, bytes))| {
                format!("{resource} {objects} ({} B)", bytes / objects.max(&1))
            })
            .collect();
        let _ = writeln!(
            text,
            "sandbox objects at {} (JSON bytes each): {}",
            f.size,
            kinds.join(", ")
        );
    }
    text
}
