//! The HTTP commands: `curl` and `wget` through the mesh proxy, and `hey` in the load tester image.

use super::context::*;
use super::text::*;
use std::time::{Duration, Instant};

/// Where a URL written in the pod goes.
pub(crate) struct PodUrl {
    /// The URL to request.
    pub(crate) url: reqwest::Url,
    /// The Host header to send when the URL was rewritten (the host as written).
    pub(crate) host_header: Option<String>,
}

/// Resolves `text` as from inside the pod: a short Service name is searched in the pod's
/// namespace (`podinfo-canary` → `podinfo-canary.test`, the Host header keeps the name as
/// written), and `localhost` ports are the pod's own. `Err` is curl's message and exit code.
pub(crate) fn pod_url(text: &str, context: &Context) -> Result<PodUrl, (i32, String)> {
    let with_scheme = if text.contains("://") {
        text.to_string()
    } else {
        format!("http://{text}")
    };
    let mut url =
        reqwest::Url::parse(&with_scheme).map_err(|error| (3, format!("URL rejected: {error}")))?;
    if url.scheme() != "http" {
        return Err((
            1,
            format!(
                "Protocol \"{}\" not supported (the sandbox's pods speak plain HTTP; the mesh adds TLS)",
                url.scheme()
            ),
        ));
    }
    let host = url.host_str().unwrap_or_default().to_string();
    let written = match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.clone(),
    };
    let port = url.port_or_known_default().unwrap_or(80);
    let loopback = matches!(host.as_str(), "localhost" | "127.0.0.1" | "[::1]");
    if loopback && !context.local_ports.is_empty() {
        let Some((_, served)) = context.local_ports.iter().find(|(own, _)| *own == port) else {
            return Err((
                7,
                format!("Failed to connect to {host} port {port}: Connection refused"),
            ));
        };
        let _ = url.set_host(Some("127.0.0.1"));
        let _ = url.set_port(Some(*served));
        return Ok(PodUrl {
            url,
            host_header: Some(written),
        });
    }
    if let Some(name) = serin_loadtester::proxy::search_name(&host, &context.namespace)
        && url.set_host(Some(&name)).is_ok()
    {
        return Ok(PodUrl {
            url,
            host_header: Some(written),
        });
    }
    Ok(PodUrl {
        url,
        host_header: None,
    })
}

pub(crate) fn client(
    context: &Context,
    follow: bool,
    timeout: Duration,
    connect_timeout: Option<Duration>,
) -> reqwest::Result<reqwest::Client> {
    let config = context.proxy.clone();
    let proxy = reqwest::Proxy::custom(move |url| {
        let host = url.host_str()?;
        config
            .proxy_for(host)
            .map(|(proxy_host, port)| format!("http://{proxy_host}:{port}"))
    });
    let mut builder = reqwest::Client::builder()
        .proxy(proxy)
        .timeout(timeout)
        .redirect(if follow {
            reqwest::redirect::Policy::limited(50)
        } else {
            reqwest::redirect::Policy::none()
        });
    if let Some(connect) = connect_timeout {
        builder = builder.connect_timeout(connect);
    }
    builder.build()
}

/// curl's options as the sandbox's curl reads them.
#[derive(Default)]
pub(crate) struct CurlOptions {
    pub(crate) url: Option<String>,
    pub(crate) method: Option<String>,
    pub(crate) headers: Vec<String>,
    pub(crate) data: Vec<String>,
    pub(crate) output: Option<String>,
    pub(crate) write_out: Option<String>,
    pub(crate) fail: bool,
    pub(crate) silent: bool,
    pub(crate) show_error: bool,
    pub(crate) follow: bool,
    pub(crate) include: bool,
    pub(crate) head: bool,
    pub(crate) max_time: Option<Duration>,
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) user: Option<String>,
}

/// Reads curl's command line: short options alone or combined (`-sd 'x'`, `-sSf`, `-XPOST`),
/// long options, and the URL. `Err` is the message for exit code 2.
pub(crate) fn parse_curl(args: &[String]) -> Result<CurlOptions, String> {
    let mut options = CurlOptions::default();
    let mut words = args.iter();
    // The long name of each short option (the ones that take a value end with `=`).
    let short = |flag: char| -> Option<&'static str> {
        Some(match flag {
            's' => "silent",
            'S' => "show-error",
            'f' => "fail",
            'L' => "location",
            'v' => "verbose",
            'k' => "insecure",
            'i' => "include",
            'I' => "head",
            'd' => "data=",
            'X' => "request=",
            'H' => "header=",
            'o' => "output=",
            'w' => "write-out=",
            'm' => "max-time=",
            'A' => "user-agent=",
            'u' => "user=",
            _ => return None,
        })
    };
    let apply =
        |name: &str, given: Option<String>, options: &mut CurlOptions| -> Result<(), String> {
            let value = || given.clone().unwrap_or_default();
            match name {
                "silent" => options.silent = true,
                "show-error" => options.show_error = true,
                "fail" => options.fail = true,
                "location" => options.follow = true,
                "verbose" | "insecure" => {}
                "include" => options.include = true,
                "head" => options.head = true,
                "data" | "data-ascii" | "data-binary" if value().starts_with('@') => {
                    return Err(format!(
                        "curl: option --{name}: the sandbox's curl reads no files ({})",
                        value()
                    ));
                }
                "data" | "data-ascii" | "data-binary" | "data-raw" => options.data.push(value()),
                "request" => options.method = Some(value()),
                "header" => options.headers.push(value()),
                "output" => options.output = Some(value()),
                "write-out" => options.write_out = Some(value()),
                "user-agent" => options.headers.push(format!("User-Agent: {}", value())),
                "user" => options.user = Some(value()),
                "max-time" | "connect-timeout" => {
                    let Some(duration) = seconds(&value()) else {
                        return Err(format!(
                            "curl: option --{name}: expected a proper numerical parameter"
                        ));
                    };
                    if name == "max-time" {
                        options.max_time = Some(duration);
                    } else {
                        options.connect_timeout = Some(duration);
                    }
                }
                other => {
                    return Err(format!(
                        "curl: option --{other}: is unknown to the sandbox's curl"
                    ));
                }
            }
            Ok(())
        };
    let takes_value = |name: &str| {
        matches!(
            name,
            "data"
                | "data-ascii"
                | "data-binary"
                | "data-raw"
                | "data-urlencode"
                | "request"
                | "header"
                | "output"
                | "write-out"
                | "user-agent"
                | "user"
                | "max-time"
                | "connect-timeout"
        )
    };
    while let Some(word) = words.next() {
        if let Some(long) = word.strip_prefix("--") {
            let value = if takes_value(long) {
                match words.next() {
                    Some(value) => Some(value.clone()),
                    None => return Err(format!("curl: option --{long}: requires parameter")),
                }
            } else {
                None
            };
            apply(long, value, &mut options)?;
        } else if word.len() > 1 && word.starts_with('-') {
            let flags: Vec<char> = word[1..].chars().collect();
            for (at, flag) in flags.iter().enumerate() {
                let Some(name) = short(*flag) else {
                    return Err(format!(
                        "curl: option -{flag}: is unknown to the sandbox's curl"
                    ));
                };
                if let Some(name) = name.strip_suffix('=') {
                    // The rest of the word is the value (`-XPOST`), else the next word.
                    let inline: String = flags[at + 1..].iter().collect();
                    let value = if inline.is_empty() {
                        match words.next() {
                            Some(value) => value.clone(),
                            None => {
                                return Err(format!("curl: option -{flag}: requires parameter"));
                            }
                        }
                    } else {
                        inline
                    };
                    apply(name, Some(value), &mut options)?;
                    break;
                }
                apply(name, None, &mut options)?;
            }
        } else {
            options.url = Some(word.clone());
        }
    }
    Ok(options)
}

/// The response as `-i` and `-I` print it: status line and headers.
pub(crate) fn head_text(response: &reqwest::Response) -> String {
    let status = response.status();
    let mut text = format!(
        "HTTP/1.1 {} {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    for (name, value) in response.headers() {
        text.push_str(&format!(
            "{name}: {}\r\n",
            value.to_str().unwrap_or_default()
        ));
    }
    text.push_str("\r\n");
    text
}

/// curl's `--write-out` variables: `http_code`/`response_code`, `time_total`,
/// `size_download`, `url_effective`, `content_type`.
pub(crate) fn write_out(format: &str, values: &[(&str, String)]) -> (String, String) {
    let format = unescape(format);
    let (mut out, mut warnings) = (String::new(), String::new());
    let mut rest = format.as_str();
    while let Some(start) = rest.find("%{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let name = &after[..end];
        match values.iter().find(|(key, _)| *key == name) {
            Some((_, value)) => out.push_str(value),
            None => warnings.push_str(&format!(
                "curl: unknown --write-out variable: '{name}' (the sandbox's curl)\n"
            )),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    (out.replace("%%", "%"), warnings)
}

/// curl: GET, or POST with `-d`, or `-X METHOD`; the body on standard output unless `-o
/// /dev/null`; `-f` fails on HTTP errors (exit 22); `-s` silences errors unless `-S`; `-i`/`-I`
/// print the headers; `-w` writes out variables; `-m`/`--max-time` and `--connect-timeout`
/// bound the wait (30 s without them); redirects are followed only with `-L`.
pub(crate) async fn curl(args: &[String], context: &Context) -> Outcome {
    let options = match parse_curl(args) {
        Ok(options) => options,
        Err(message) => return Outcome::failed(2, format!("{message}\n")),
    };
    let error = |code: i32, message: String| {
        let stderr = if options.silent && !options.show_error {
            String::new()
        } else {
            format!("curl: ({code}) {message}\n")
        };
        Outcome::failed(code, stderr)
    };
    let Some(url) = &options.url else {
        return Outcome::failed(2, "curl: no URL specified\n".into());
    };
    if let Some(output) = options
        .output
        .as_deref()
        .filter(|o| *o != "/dev/null" && *o != "-")
    {
        return error(
            23,
            format!(
                "Failure writing output to destination: {output}: Read-only file system (the sandbox's curl writes to stdout or /dev/null)"
            ),
        );
    }
    let target = match pod_url(url, context) {
        Ok(target) => target,
        Err((code, message)) => return error(code, message),
    };
    let timeout = options.max_time.unwrap_or(DEFAULT_HTTP_TIMEOUT);
    let client = match client(context, options.follow, timeout, options.connect_timeout) {
        Ok(client) => client,
        Err(problem) => return error(2, problem.to_string()),
    };
    let method = options.method.clone().unwrap_or_else(|| {
        if options.head {
            "HEAD".into()
        } else if options.data.is_empty() {
            "GET".into()
        } else {
            "POST".into()
        }
    });
    let Ok(method) = reqwest::Method::from_bytes(method.as_bytes()) else {
        return error(2, format!("bad method {method}"));
    };
    let mut request = client.request(method, target.url.clone());
    let mut has_content_type = false;
    let mut has_host = false;
    for header in &options.headers {
        if let Some((name, value)) = header.split_once(':') {
            has_content_type |= name.trim().eq_ignore_ascii_case("content-type");
            has_host |= name.trim().eq_ignore_ascii_case("host");
            request = request.header(name.trim(), value.trim());
        }
    }
    if let Some(host) = target.host_header.filter(|_| !has_host) {
        request = request.header("host", host);
    }
    if let Some(user) = &options.user {
        let (name, password) = user.split_once(':').unwrap_or((user, ""));
        request = request.basic_auth(name, Some(password));
    }
    if !options.data.is_empty() {
        if !has_content_type {
            request = request.header("content-type", "application/x-www-form-urlencoded");
        }
        request = request.body(options.data.join("&"));
    }
    let started = Instant::now();
    let timed_out = || {
        format!(
            "Operation timed out after {} milliseconds",
            started.elapsed().as_millis()
        )
    };
    let response = match request.send().await {
        Ok(response) => response,
        Err(problem) if problem.is_timeout() => {
            return error(28, timed_out());
        }
        Err(problem) => {
            return error(
                7,
                format!(
                    "Failed to connect to {}: {problem}",
                    target.url.host_str().unwrap_or_default()
                ),
            );
        }
    };
    let status = response.status().as_u16();
    let head = head_text(&response);
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let effective = response.url().to_string();
    let body = match response.bytes().await {
        Ok(body) => body,
        Err(problem) if problem.is_timeout() => {
            return error(28, timed_out());
        }
        Err(problem) => {
            return error(
                56,
                format!("Failure when receiving data from the peer: {problem}"),
            );
        }
    };
    if options.fail && status >= 400 {
        return error(22, format!("The requested URL returned error: {status}"));
    }
    let mut stdout = String::new();
    if options.output.as_deref() != Some("/dev/null") {
        if options.include || options.head {
            stdout.push_str(&head);
        }
        if !options.head {
            stdout.push_str(&String::from_utf8_lossy(&body));
        }
    }
    let mut stderr = String::new();
    if let Some(format) = &options.write_out {
        let (text, warnings) = write_out(
            format,
            &[
                ("http_code", status.to_string()),
                ("response_code", status.to_string()),
                (
                    "time_total",
                    format!("{:.6}", started.elapsed().as_secs_f64()),
                ),
                ("size_download", body.len().to_string()),
                ("url_effective", effective),
                ("content_type", content_type),
            ],
        );
        stdout.push_str(&text);
        stderr.push_str(&warnings);
    }
    Outcome {
        stdout,
        stderr,
        exit_code: 0,
    }
}

/// wget as in the sandbox's (busybox-like) images: `-q`, `-O -` (standard output), `-O
/// /dev/null`, `--spider`, `-T`/`--timeout`, `--tries`, `--header`, `--post-data`, `-U`. Any
/// failure exits 1.
pub(crate) async fn wget(args: &[String], context: &Context) -> Outcome {
    let (mut quiet, mut spider) = (false, false);
    let mut output: Option<String> = None;
    let mut timeout = DEFAULT_HTTP_TIMEOUT;
    let mut headers = Vec::new();
    let mut post: Option<String> = None;
    let mut url = None;
    let mut words = args.iter();
    let fail = |message: String| Outcome::failed(1, format!("wget: {message}\n"));
    while let Some(word) = words.next() {
        if let Some(long) = word.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value.to_string())),
                None => (long, None),
            };
            let needs_value = matches!(
                name,
                "output-document" | "timeout" | "tries" | "header" | "post-data" | "user-agent"
            );
            let value = match (needs_value, inline) {
                (true, Some(value)) => value,
                (true, None) => match words.next() {
                    Some(value) => value.clone(),
                    None => return fail(format!("option '--{name}' requires an argument")),
                },
                (false, _) => String::new(),
            };
            match name {
                "quiet" => quiet = true,
                "spider" => spider = true,
                "no-check-certificate" | "no-verbose" => {}
                "output-document" => output = Some(value),
                "timeout" => match seconds(&value) {
                    Some(duration) => timeout = duration,
                    None => return fail(format!("invalid number '{value}'")),
                },
                "tries" => {}
                "header" => headers.push(value),
                "post-data" => post = Some(value),
                "user-agent" => headers.push(format!("User-Agent: {value}")),
                other => {
                    return fail(format!(
                        "unrecognized option '--{other}' (the sandbox's wget)"
                    ));
                }
            }
        } else if word.len() > 1 && word.starts_with('-') {
            let flags: Vec<char> = word[1..].chars().collect();
            for (at, flag) in flags.iter().enumerate() {
                match flag {
                    'q' => quiet = true,
                    'O' | 'T' | 't' | 'U' => {
                        let inline: String = flags[at + 1..].iter().collect();
                        let value = if inline.is_empty() {
                            match words.next() {
                                Some(value) => value.clone(),
                                None => {
                                    return fail(format!(
                                        "option requires an argument -- '{flag}'"
                                    ));
                                }
                            }
                        } else {
                            inline
                        };
                        match flag {
                            'O' => output = Some(value),
                            'T' => match seconds(&value) {
                                Some(duration) => timeout = duration,
                                None => return fail(format!("invalid number '{value}'")),
                            },
                            'U' => headers.push(format!("User-Agent: {value}")),
                            _ => {}
                        }
                        break;
                    }
                    other => {
                        return fail(format!("invalid option -- '{other}' (the sandbox's wget)"));
                    }
                }
            }
        } else {
            url = Some(word.clone());
        }
    }
    let Some(url) = url else {
        return fail("missing URL".into());
    };
    let target = match pod_url(&url, context) {
        Ok(target) => target,
        Err((_, message)) => return fail(format!("can't connect to remote host: {message}")),
    };
    let client = match client(context, true, timeout, None) {
        Ok(client) => client,
        Err(problem) => return fail(problem.to_string()),
    };
    let mut request = match &post {
        Some(data) => client
            .post(target.url.clone())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(data.clone()),
        None => client.get(target.url.clone()),
    };
    let mut has_host = false;
    for header in &headers {
        if let Some((name, value)) = header.split_once(':') {
            has_host |= name.trim().eq_ignore_ascii_case("host");
            request = request.header(name.trim(), value.trim());
        }
    }
    if let Some(host) = target.host_header.filter(|_| !has_host) {
        request = request.header("host", host);
    }
    let response = match request.send().await {
        Ok(response) => response,
        Err(problem) if problem.is_timeout() => return fail("download timed out".into()),
        Err(problem) => return fail(format!("can't connect to remote host: {problem}")),
    };
    let status = response.status();
    if status.as_u16() >= 400 {
        return fail(format!(
            "server returned error: HTTP/1.1 {} {}",
            status.as_u16(),
            status.canonical_reason().unwrap_or("")
        ));
    }
    let body = match response.bytes().await {
        Ok(body) => body,
        Err(problem) => return fail(format!("error getting response: {problem}")),
    };
    if spider {
        return Outcome::default();
    }
    let mut outcome = match output.as_deref() {
        Some("-") => Outcome::out(String::from_utf8_lossy(&body).into_owned()),
        Some("/dev/null") => Outcome::default(),
        other => {
            let name = other.map(str::to_string).unwrap_or_else(|| {
                let path = target.url.path().rsplit('/').next().unwrap_or_default();
                if path.is_empty() {
                    "index.html".into()
                } else {
                    path.to_string()
                }
            });
            return fail(format!(
                "can't open '{name}': Read-only file system (the sandbox's wget writes to -O - or -O /dev/null)"
            ));
        }
    };
    if !quiet && output.as_deref() != Some("-") {
        outcome.stderr = format!("Connecting to {}\n", target.url);
    }
    outcome
}

/// `hey` (the load tester image) through the built-in load generator, its target resolved as
/// from the pod; the summary on standard output.
pub(crate) async fn hey(args: &[String], context: &Context) -> Outcome {
    let mut plan = match serin_loadtester::hey::parse_hey_args(args) {
        Ok(plan) => plan,
        Err(error) => return Outcome::failed(1, format!("{error}\n")),
    };
    if let Some(file) = &plan.body_file {
        return Outcome::failed(
            1,
            format!("hey: -D {file}: no such file (the sandbox's images have no files to read)\n"),
        );
    }
    let loopback = matches!(plan.host.as_str(), "localhost" | "127.0.0.1" | "::1");
    if loopback && !context.local_ports.is_empty() {
        match context
            .local_ports
            .iter()
            .find(|(own, _)| *own == plan.port)
        {
            Some((_, served)) => {
                plan.host = "127.0.0.1".into();
                plan.port = *served;
            }
            None => {
                return Outcome::failed(
                    1,
                    format!(
                        "hey: dial tcp {}:{}: connect: connection refused\n",
                        plan.host, plan.port
                    ),
                );
            }
        }
    } else {
        plan.search_in(&context.namespace);
    }
    let report =
        serin_loadtester::load::run_load(&plan, &context.proxy, Duration::from_secs(600)).await;
    Outcome::out(report.summary())
}
