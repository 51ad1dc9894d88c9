//! Flagger's command line, so that the image can stand in for Flagger's in Flagger's chart: a
//! program named `flagger` (the chart runs `./flagger` in the image's working directory) serves
//! Flagger's API group, and Go-style single-dash flags (`-log-level=info`, `-namespace test`) are
//! read as Flagger reads them and turned into Serin's.

/// What one Flagger flag becomes.
enum Meaning {
    /// Serin's flag of this name takes the value.
    Value(&'static str),
    /// A boolean Flagger flag; when true, Serin's flag of this name is given.
    Switch(&'static str),
    /// A boolean Flagger flag whose Serin flag takes `true` or `false`.
    BoolValue(&'static str),
    /// Flagger's port of `/metrics` and `/healthz`: Serin's `--admin-address 0.0.0.0:<port>`.
    Port,
    /// `-zap-encoding`: Serin's `--log-format` (`json` or `console` → `text`).
    Encoding,
    /// Read by Flagger for something Serin does without it (see the reason).
    NoEffect(&'static str),
    /// A boolean flag read by Flagger for something Serin does without it (see the reason).
    NoEffectSwitch(&'static str),
    /// Flagger behaviour Serin does not have: refused when given a value other than the default.
    Unsupported(&'static str),
}

/// Flagger's flags (cmd/flagger/main.go) and what each becomes.
const FLAGS: &[(&str, Meaning)] = &[
    ("kubeconfig", Meaning::Value("kubeconfig")),
    ("kubeconfig-qps", Meaning::Value("kube-api-qps")),
    ("kubeconfig-burst", Meaning::Value("kube-api-burst")),
    ("metrics-server", Meaning::Value("metrics-server")),
    ("log-level", Meaning::Value("log-level")),
    ("port", Meaning::Port),
    ("slack-url", Meaning::Value("slack-url")),
    ("slack-token", Meaning::Value("slack-token")),
    ("slack-proxy-url", Meaning::Value("slack-proxy-url")),
    ("slack-user", Meaning::Value("slack-user")),
    ("slack-channel", Meaning::Value("slack-channel")),
    ("msteams-url", Meaning::Value("msteams-url")),
    ("msteams-proxy-url", Meaning::Value("msteams-proxy-url")),
    ("event-webhook", Meaning::Value("event-webhook")),
    (
        "include-label-prefix",
        Meaning::Value("include-label-prefix"),
    ),
    ("threadiness", Meaning::Value("concurrency")),
    ("zap-encoding", Meaning::Encoding),
    ("namespace", Meaning::Value("namespace")),
    ("mesh-provider", Meaning::Value("mesh-provider")),
    ("selector-labels", Meaning::Value("selector-labels")),
    ("enable-leader-election", Meaning::Switch("leader-elect")),
    (
        "leader-election-namespace",
        Meaning::Value("leader-election-namespace"),
    ),
    (
        "enable-config-tracking",
        Meaning::BoolValue("enable-config-tracking"),
    ),
    ("cluster-name", Meaning::Value("cluster-name")),
    (
        "no-cross-namespace-refs",
        Meaning::Switch("no-cross-namespace-refs"),
    ),
    ("version", Meaning::Switch("version")),
    (
        "zap-replace-globals",
        Meaning::NoEffectSwitch("Serin's log has no separate global logger"),
    ),
    (
        "control-loop-interval",
        Meaning::NoEffect(
            "Serin ticks each Canary at its own analysis interval, and at once on every change",
        ),
    ),
    (
        "master",
        Meaning::Unsupported("set the API server in the kubeconfig (-kubeconfig)"),
    ),
    (
        "kubeconfig-service-mesh",
        Meaning::Unsupported("Serin writes routing objects in the cluster of the Canaries only"),
    ),
    (
        "ingress-annotations-prefix",
        Meaning::Unsupported("Serin has no NGINX ingress router"),
    ),
    (
        "ingress-class",
        Meaning::Unsupported("Serin has no Contour router"),
    ),
];

/// Flagger's boolean flags take no separate value (`-flag` or `-flag=false`, as Go's `flag`).
fn is_boolean(meaning: &Meaning) -> bool {
    matches!(
        meaning,
        Meaning::Switch(_) | Meaning::BoolValue(_) | Meaning::NoEffectSwitch(_)
    )
}

/// klog's flags, which Flagger registers too; Serin's log level is `-log-level`. The boolean ones
/// first.
const KLOG_SWITCHES: [&str; 6] = [
    "logtostderr",
    "alsologtostderr",
    "skip_headers",
    "skip_log_headers",
    "add_dir_header",
    "one_output",
];
const KLOG_VALUES: [&str; 7] = [
    "v",
    "vmodule",
    "log_dir",
    "log_file",
    "log_file_max_size",
    "stderrthreshold",
    "log_backtrace_at",
];

/// Whether `args` (without the program name) are written Flagger's way: some argument is a
/// single-dash word, which Serin's own flags never are.
pub fn is_flagger_style(args: &[String]) -> bool {
    args.iter().any(|arg| {
        arg.len() > 2
            && arg.starts_with('-')
            && !arg.starts_with("--")
            && arg[1..].starts_with(|c: char| c.is_ascii_lowercase())
    })
}

/// Whether the program was started under Flagger's name (`./flagger`, `/flagger`, `flagger`).
pub fn started_as_flagger(program: &str) -> bool {
    std::path::Path::new(program)
        .file_name()
        .is_some_and(|name| name == "flagger")
}

/// Serin's arguments for Flagger's `args` (the program name left out), with a note for each flag
/// that has no effect in Serin; or a message naming the flag that cannot be honoured and what to
/// do instead.
///
/// Serin's own flags (`serin_flags`: each long name and whether it takes a value) may be written
/// the same way, e.g. `-api-group=flagger.app`.
pub fn translate(
    args: &[String],
    serin_flags: &[(String, bool)],
) -> Result<(Vec<String>, Vec<String>), String> {
    let mut serin = Vec::new();
    let mut notes = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            return Err(format!(
                "unexpected argument {arg:?}: Flagger's flags are written -name=value"
            ));
        };
        let (name, inline) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (flag, None),
        };
        if KLOG_SWITCHES.contains(&name) {
            continue;
        }
        if KLOG_VALUES.contains(&name) {
            if inline.is_none() {
                rest.next();
            }
            continue;
        }
        let serin_flag = serin_flags.iter().find(|(flag, _)| flag == name);
        if let (None, Some((_, takes_value))) = (FLAGS.iter().find(|(f, _)| *f == name), serin_flag)
        {
            match (inline, takes_value) {
                (Some(value), _) => serin.push(format!("--{name}={value}")),
                (None, false) => serin.push(format!("--{name}")),
                (None, true) => {
                    let value = rest
                        .next()
                        .ok_or_else(|| format!("flag needs an argument: -{name}"))?;
                    serin.push(format!("--{name}={value}"));
                }
            }
            continue;
        }
        let Some((_, meaning)) = FLAGS.iter().find(|(flag, _)| *flag == name) else {
            return Err(format!(
                "flag provided but not defined: -{name} (Serin reads Flagger's flags {} and its own; see docs/migrating.md)",
                FLAGS
                    .iter()
                    .map(|(flag, _)| format!("-{flag}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        };
        let value = match inline {
            Some(value) => value,
            None if is_boolean(meaning) => "true".to_string(),
            None => rest
                .next()
                .cloned()
                .ok_or_else(|| format!("flag needs an argument: -{name}"))?,
        };
        let truth = || match value.as_str() {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
            "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
            other => Err(format!(
                "invalid boolean value {other:?} for -{name}: write true or false"
            )),
        };
        match meaning {
            Meaning::Value(serin_flag) => {
                let value = match (*serin_flag, value.as_str()) {
                    // Go's zap has levels beyond error; Serin's most severe is error.
                    ("log-level", "fatal" | "panic" | "dpanic") => "error".to_string(),
                    _ => value,
                };
                serin.push(format!("--{serin_flag}={value}"));
            }
            Meaning::Switch(serin_flag) => {
                if truth()? {
                    serin.push(format!("--{serin_flag}"));
                }
            }
            Meaning::BoolValue(serin_flag) => {
                serin.push(format!("--{serin_flag}={}", truth()?));
            }
            Meaning::Port => {
                let port: u16 = value.parse().map_err(|_| {
                    format!("invalid value {value:?} for -port: write a port number")
                })?;
                serin.push(format!("--admin-address=0.0.0.0:{port}"));
            }
            Meaning::Encoding => {
                let format = match value.as_str() {
                    "json" => "json",
                    "console" => "text",
                    other => {
                        return Err(format!(
                            "invalid value {other:?} for -zap-encoding: write json or console"
                        ));
                    }
                };
                serin.push(format!("--log-format={format}"));
            }
            Meaning::NoEffect(reason) | Meaning::NoEffectSwitch(reason) => {
                notes.push(format!("-{name} has no effect: {reason}"));
            }
            Meaning::Unsupported(instead) => {
                if !value.is_empty() {
                    return Err(format!("-{name} is not supported: {instead}"));
                }
            }
        }
    }
    Ok((serin, notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(String::from).collect()
    }

    fn translate(args: &[String]) -> Result<(Vec<String>, Vec<String>), String> {
        let serin = [
            ("admin-address".to_string(), true),
            ("allow-job-metrics".to_string(), false),
        ];
        super::translate(args, &serin)
    }

    #[test]
    fn the_arguments_of_flaggers_chart_become_serins() {
        let chart = args(
            "-log-level=info -mesh-provider=istio -metrics-server=http://prometheus.istio-system:9090 \
             -enable-config-tracking=true -slack-user=flagger -slack-url=http://127.0.0.1:9/hook \
             -slack-channel=general -enable-leader-election=true -leader-election-namespace=flagger-system \
             -include-label-prefix=app.kubernetes.io -threadiness=4 -cluster-name=prod \
             -no-cross-namespace-refs=true -msteams-url=http://127.0.0.1:9/teams -event-webhook=http://127.0.0.1:9/e",
        );
        assert!(is_flagger_style(&chart));
        assert_eq!(
            translate(&chart).unwrap().0,
            args(
                "--log-level=info --mesh-provider=istio --metrics-server=http://prometheus.istio-system:9090 \
                 --enable-config-tracking=true --slack-user=flagger --slack-url=http://127.0.0.1:9/hook \
                 --slack-channel=general --leader-elect --leader-election-namespace=flagger-system \
                 --include-label-prefix=app.kubernetes.io --concurrency=4 --cluster-name=prod \
                 --no-cross-namespace-refs --msteams-url=http://127.0.0.1:9/teams --event-webhook=http://127.0.0.1:9/e"
            )
        );
    }

    #[test]
    fn values_may_follow_as_the_next_argument_and_booleans_stand_alone() {
        assert_eq!(
            translate(&args(
                "-namespace test -enable-leader-election -port 9090 -zap-encoding console -v 2 -log-level fatal"
            ))
            .unwrap()
            .0,
            args(
                "--namespace=test --leader-elect --admin-address=0.0.0.0:9090 --log-format=text --log-level=error"
            )
        );
        assert_eq!(
            translate(&args(
                "-no-cross-namespace-refs=false -enable-config-tracking=false"
            ))
            .unwrap(),
            (args("--enable-config-tracking=false"), vec![])
        );
        assert_eq!(
            translate(&args("-control-loop-interval=10s")).unwrap().1,
            [
                "-control-loop-interval has no effect: Serin ticks each Canary at its own analysis interval, and at once on every change"
            ]
        );
    }

    #[test]
    fn what_serin_cannot_honour_is_refused_by_name() {
        assert_eq!(
            translate(&args("-ingress-class=contour")).unwrap_err(),
            "-ingress-class is not supported: Serin has no Contour router"
        );
        assert!(
            translate(&args("-metric-server=http://x"))
                .unwrap_err()
                .starts_with("flag provided but not defined: -metric-server (Serin reads Flagger's flags -kubeconfig,")
        );
        assert_eq!(
            translate(&args("-enable-leader-election=maybe")).unwrap_err(),
            "invalid boolean value \"maybe\" for -enable-leader-election: write true or false"
        );
        assert_eq!(
            translate(&args("-namespace")).unwrap_err(),
            "flag needs an argument: -namespace"
        );
    }

    #[test]
    fn serins_own_flags_may_be_written_the_same_way() {
        assert_eq!(
            translate(&args("-log-level=info -allow-job-metrics --admin-address=127.0.0.9:8080 -admin-address 127.0.0.9:9"))
                .unwrap()
                .0,
            args("--log-level=info --allow-job-metrics --admin-address=127.0.0.9:8080 --admin-address=127.0.0.9:9")
        );
    }

    #[test]
    fn serins_own_flags_are_not_flaggers() {
        assert!(!is_flagger_style(&args("--mesh-provider istio -h")));
        assert!(started_as_flagger("./flagger"));
        assert!(started_as_flagger("/usr/local/bin/flagger"));
        assert!(!started_as_flagger("serin-operator"));
    }
}
