//! `grpc_health_probe` of the load tester image: a health check of a gRPC server, with the probe's
//! flags, messages and exit codes (1 bad arguments, 2 no connection, 3 the call failed, 4 not
//! serving). A Service is reached through the pod's mesh proxy (`CONNECT`), as its sidecar would
//! carry the connection; the sandbox's pods serve gRPC without TLS.

use super::context::*;
use crate::grpc_health::{self, CheckError, Route, ServingStatus, code};
use std::time::Duration;

const INVALID_ARGUMENTS: i32 = 1;
const CONNECTION_FAILURE: i32 = 2;
const RPC_FAILURE: i32 = 3;
const UNHEALTHY: i32 = 4;

/// The probe's options as its command line sets them.
#[derive(Debug, PartialEq)]
struct ProbeOptions {
    addr: String,
    service: String,
    user_agent: String,
    connect_timeout: Duration,
    rpc_timeout: Duration,
    verbose: bool,
}

/// A Go duration as Go prints it: `1s`, `500ms`, `1m30s`, `1.5s`.
fn go_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis < 1000 {
        return format!("{millis}ms");
    }
    let minutes = millis / 60_000;
    let rest = millis % 60_000;
    let seconds = if rest.is_multiple_of(1000) {
        format!("{}s", rest / 1000)
    } else {
        format!("{}s", rest as f64 / 1000.0)
    };
    match minutes {
        0 => seconds,
        m => format!("{m}m{seconds}"),
    }
}

/// Reads the command line as Go's `flag` package would (`-name=value`, `-name value`, `--name`,
/// bare booleans). `Err` is the message for exit code 1.
fn parse(args: &[String]) -> Result<ProbeOptions, String> {
    let mut options = ProbeOptions {
        addr: String::new(),
        service: String::new(),
        user_agent: "grpc_health_probe".into(),
        connect_timeout: Duration::from_secs(1),
        rpc_timeout: Duration::from_secs(1),
        verbose: false,
    };
    let mut words = args.iter();
    while let Some(word) = words.next() {
        let Some(flag) = word
            .strip_prefix("--")
            .or_else(|| word.strip_prefix('-'))
            .filter(|f| !f.is_empty())
        else {
            // Go's flag package stops at the first argument that is not a flag.
            break;
        };
        let (name, inline) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (flag, None),
        };
        let boolean = |inline: Option<String>| -> Result<bool, String> {
            match inline.as_deref() {
                None | Some("true") | Some("1") | Some("t") | Some("T") | Some("TRUE") => Ok(true),
                Some("false") | Some("0") | Some("f") | Some("F") | Some("FALSE") => Ok(false),
                Some(other) => Err(format!(
                    "invalid boolean value \"{other}\" for -{name}: parse error"
                )),
            }
        };
        match name {
            "v" => options.verbose = boolean(inline)?,
            "gzip" => {
                // Compression changes how the request travels, not what it asks.
                boolean(inline)?;
            }
            "tls" | "alts" | "spiffe" => {
                if boolean(inline)? {
                    return Err(format!(
                        "-{name}: the sandbox's pods serve gRPC without TLS (the mesh would add it); leave -{name} out"
                    ));
                }
            }
            "addr" | "service" | "user-agent" | "connect-timeout" | "rpc-timeout"
            | "rpc-header" | "tls-no-verify" | "tls-ca-cert" | "tls-client-cert"
            | "tls-client-key" | "tls-server-name" => {
                let value = match inline {
                    Some(value) => value,
                    None => words
                        .next()
                        .cloned()
                        .ok_or_else(|| format!("flag needs an argument: -{name}"))?,
                };
                let duration = |value: &str| {
                    serin_api::duration::parse_go_duration(value)
                        .map(|d| d.min(MAX_HTTP_TIMEOUT))
                        .map_err(|_| {
                            format!("invalid value \"{value}\" for flag -{name}: parse error")
                        })
                };
                match name {
                    "addr" => options.addr = value,
                    "service" => options.service = value,
                    "user-agent" => options.user_agent = value,
                    "connect-timeout" => options.connect_timeout = duration(&value)?,
                    "rpc-timeout" => options.rpc_timeout = duration(&value)?,
                    "rpc-header" => {
                        return Err(
                            "-rpc-header: the sandbox's health service reads no headers; leave it out"
                                .into(),
                        );
                    }
                    _ => return Err(format!("specified -{name} without specifying -tls")),
                }
            }
            other => return Err(format!("flag provided but not defined: -{other}")),
        }
    }
    if options.addr.is_empty() {
        return Err("error: -addr not specified".into());
    }
    if options.connect_timeout.is_zero() {
        return Err(format!(
            "error: -connect-timeout must be greater than zero (specified: {})",
            go_duration(options.connect_timeout)
        ));
    }
    if options.rpc_timeout.is_zero() {
        return Err(format!(
            "error: -rpc-timeout must be greater than zero (specified: {})",
            go_duration(options.rpc_timeout)
        ));
    }
    Ok(options)
}

/// Where `addr` (`host:port` as written in the pod) goes: the pod itself for `localhost`, else the
/// Service by its name searched in the pod's namespace, through the pod's proxy when it has one.
fn route(addr: &str, context: &Context) -> Result<Route, String> {
    let Some((host, port)) = addr.rsplit_once(':') else {
        return Err(format!("address {addr}: missing port in address"));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("address {addr}: invalid port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = matches!(host, "localhost" | "127.0.0.1" | "::1");
    if loopback && !context.local_ports.is_empty() {
        let Some((_, served)) = context.local_ports.iter().find(|(own, _)| *own == port) else {
            return Err(format!(
                "dial tcp {host}:{port}: connect: connection refused"
            ));
        };
        return Ok(Route {
            authority: format!("127.0.0.1:{served}"),
            proxy: None,
        });
    }
    let host = serin_loadtester::proxy::search_name(host, &context.namespace)
        .unwrap_or_else(|| host.to_string());
    Ok(Route {
        proxy: context.proxy.proxy_for(&host).cloned(),
        authority: format!("{host}:{port}"),
    })
}

/// Runs `grpc_health_probe` with `args` from the pod of `context`.
pub(crate) async fn grpc_health_probe(args: &[String], context: &Context) -> Outcome {
    let options = match parse(args) {
        Ok(options) => options,
        Err(error) => return Outcome::failed(INVALID_ARGUMENTS, format!("{error}\n")),
    };
    let mut log = String::new();
    if options.verbose {
        log.push_str(&format!(
            "parsed options:\n> addr={} conn_timeout={} rpc_timeout={}\n> tls=false\n> alts=false\n> spiffe=false\nestablishing connection\n",
            options.addr,
            go_duration(options.connect_timeout),
            go_duration(options.rpc_timeout)
        ));
    }
    let connect_failed = |log: String, cause: &str| {
        Outcome::failed(
            CONNECTION_FAILURE,
            format!(
                "{log}timeout: failed to connect service \"{}\" within {}\n({cause})\n",
                options.addr,
                go_duration(options.connect_timeout)
            ),
        )
    };
    let route = match route(&options.addr, context) {
        Ok(route) => route,
        Err(cause) => return connect_failed(log, &cause),
    };
    let result = grpc_health::check_health(
        &route,
        &options.service,
        &options.user_agent,
        options.connect_timeout,
        options.rpc_timeout,
    )
    .await;
    match result {
        Ok(ServingStatus::Serving) => {
            log.push_str("status: SERVING\n");
            Outcome {
                stderr: log,
                ..Outcome::default()
            }
        }
        Ok(other) => Outcome::failed(
            UNHEALTHY,
            format!(
                "{log}service unhealthy (responded with \"{}\")\n",
                other.name()
            ),
        ),
        Err(CheckError::Connect(cause)) => connect_failed(log, &cause),
        Err(CheckError::Rpc { code, message }) => {
            let line = match code {
                code::UNIMPLEMENTED => format!(
                    "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {message}"
                ),
                code::DEADLINE_EXCEEDED => format!(
                    "timeout: health rpc did not complete within {}",
                    go_duration(options.rpc_timeout)
                ),
                _ => format!(
                    "error: health rpc failed: rpc error: code = {} desc = {message}",
                    grpc_health::code_name(code)
                ),
            };
            Outcome::failed(RPC_FAILURE, format!("{log}{line}\n"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serin_loadtester::proxy::ProxyConfig;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    fn context(proxy: ProxyConfig, local_ports: Vec<(u16, u16)>) -> Context {
        Context {
            pod_name: "flagger-loadtester-1".into(),
            namespace: "test".into(),
            env: Vec::new(),
            load_tester: true,
            proxy,
            local_ports,
        }
    }

    #[test]
    fn flags_read_as_go_reads_them() {
        let options = parse(&words("-connect-timeout=1s -addr=podinfo-canary:9999")).unwrap();
        assert_eq!(options.addr, "podinfo-canary:9999");
        assert_eq!(options.connect_timeout, Duration::from_secs(1));
        let options = parse(&words(
            "--addr localhost:9999 -service podinfo -rpc-timeout 1500ms -v",
        ))
        .unwrap();
        assert_eq!(
            (
                options.service.as_str(),
                options.rpc_timeout,
                options.verbose
            ),
            ("podinfo", Duration::from_millis(1500), true)
        );
        assert_eq!(parse(&[]).unwrap_err(), "error: -addr not specified");
        assert_eq!(
            parse(&words("-addr=a:1 -x")).unwrap_err(),
            "flag provided but not defined: -x"
        );
        assert_eq!(
            parse(&words("-addr=a:1 -connect-timeout=0s")).unwrap_err(),
            "error: -connect-timeout must be greater than zero (specified: 0ms)"
        );
        assert!(
            parse(&words("-addr=a:1 -tls"))
                .unwrap_err()
                .contains("without TLS")
        );
        assert_eq!(
            parse(&words("-addr")).unwrap_err(),
            "flag needs an argument: -addr"
        );
    }

    #[test]
    fn durations_print_as_go_prints_them() {
        assert_eq!(go_duration(Duration::from_secs(1)), "1s");
        assert_eq!(go_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_secs(90)), "1m30s");
    }

    #[test]
    fn a_short_service_name_goes_through_the_pods_proxy_and_localhost_to_the_pod() {
        let proxied = context(
            ProxyConfig::through("127.0.0.1:15001", &[]).unwrap(),
            Vec::new(),
        );
        let through = route("podinfo-canary:9999", &proxied).unwrap();
        assert_eq!(through.authority, "podinfo-canary.test:9999");
        assert_eq!(through.proxy, Some(("127.0.0.1".into(), 15001)));
        let own = context(ProxyConfig::direct(), vec![(9999, 41000)]);
        let local = route("localhost:9999", &own).unwrap();
        assert_eq!(
            (local.authority.as_str(), local.proxy),
            ("127.0.0.1:41000", None)
        );
        assert!(
            route("localhost:8080", &own)
                .unwrap_err()
                .contains("connection refused")
        );
        assert!(route("podinfo", &own).unwrap_err().contains("missing port"));
    }

    #[tokio::test]
    async fn the_probe_reports_serving_unknown_services_and_closed_ports_with_its_exit_codes() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let app = grpc_health::health_router("podinfo".into());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let pod = context(ProxyConfig::direct(), vec![(9999, address.port())]);
        let serving = grpc_health_probe(&words("-addr=localhost:9999"), &pod).await;
        assert_eq!(
            (serving.exit_code, serving.stderr.as_str()),
            (0, "status: SERVING\n")
        );
        let unknown =
            grpc_health_probe(&words("-addr=localhost:9999 -service=billing"), &pod).await;
        assert_eq!(unknown.exit_code, RPC_FAILURE);
        assert_eq!(
            unknown.stderr,
            "error: health rpc failed: rpc error: code = NotFound desc = unknown service\n"
        );
        let closed = grpc_health_probe(&words("-addr=localhost:7000"), &pod).await;
        assert_eq!(closed.exit_code, CONNECTION_FAILURE);
        assert!(
            closed
                .stderr
                .starts_with("timeout: failed to connect service \"localhost:7000\" within 1s\n"),
            "{}",
            closed.stderr
        );
        let usage = grpc_health_probe(&[], &pod).await;
        assert_eq!(usage.exit_code, INVALID_ARGUMENTS);
    }
}
