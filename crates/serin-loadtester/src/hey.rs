//! The command line of [hey](https://github.com/rakyll/hey), parsed into a [`LoadPlan`] for the
//! built-in generator. Flags follow Go's `flag` package: `-n 10`, `--n 10` and `-n=10` are the same,
//! and the first word that is not a flag is the URL.

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST, USER_AGENT};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};
use std::time::Duration;

// `-x` reads a proxy address the way HTTP_PROXY is read; re-exported so the parser's old path
// `hey::parse_host_port` still resolves.
pub use crate::proxy::parse_host_port;

/// The most requests one `-n` run may ask for, so a typo cannot keep a run going for days.
pub const MAX_REQUESTS: u64 = 100_000_000;
/// The most concurrent workers (`-c`) a run may ask for.
pub const MAX_CONCURRENCY: usize = 10_000;

const SUPPORTED_FLAGS: &str = "-n -c -q -z -m -d -D -H -T -A -a -x -t -h2 -host \
     -disable-keepalive -disable-compression -disable-redirects -cpus -o";

/// What one hey invocation asks for.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    /// The target; always `http://`.
    pub url: Uri,
    /// Host name or address to connect to (without the proxy).
    pub host: String,
    /// Port to connect to (without the proxy).
    pub port: u16,
    /// Total requests when no duration is given (`-n`, default 200); each worker sends `n / c`.
    pub requests: u64,
    /// Concurrent workers, each with its own keep-alive connection (`-c`, default 50).
    pub concurrency: usize,
    /// Requests per second per worker (`-q`); `None` sends as fast as the target answers.
    pub rate_per_worker: Option<f64>,
    /// Run for this long instead of counting requests (`-z`).
    pub duration: Option<Duration>,
    /// Request method (`-m`, default GET).
    pub method: Method,
    /// Request body (`-d`, or the file named by `-D`).
    pub body: Bytes,
    /// Every header sent, including Host, User-Agent and Content-Type.
    pub headers: HeaderMap,
    /// Per-request timeout (`-t`, default 20 s; 0 means none).
    pub request_timeout: Option<Duration>,
    /// Open a new connection for every request (`-disable-keepalive`).
    pub disable_keepalive: bool,
    /// Proxy given on the command line (`-x host:port`); overrides HTTP_PROXY.
    pub proxy: Option<(String, u16)>,
    /// File named by `-D`, read when the plan is resolved (only allowed with `--allow-shell`).
    pub body_file: Option<String>,
}

impl LoadPlan {
    /// Expands a short target host (`http://podinfo-canary:9898/`) in `namespace`, as a pod's DNS
    /// search path would: requests go to `podinfo-canary.test:9898`, the Host header keeps the name
    /// as written. Other hosts are left alone.
    pub fn search_in(&mut self, namespace: &str) {
        let Some(name) = crate::proxy::search_name(&self.host, namespace) else {
            return;
        };
        let authority = match self.url.port_u16() {
            Some(port) => format!("{name}:{port}"),
            None => name.clone(),
        };
        let path = self.url.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        if let Ok(url) = Uri::builder()
            .scheme("http")
            .authority(authority.as_str())
            .path_and_query(path)
            .build()
        {
            self.url = url;
            self.host = name;
        }
    }
}

/// Whether `words` (a split command line) is a hey invocation the built-in generator should run.
pub fn is_hey(words: &[String]) -> bool {
    words
        .first()
        .is_some_and(|program| program == "hey" || program.ends_with("/hey"))
}

/// Parses hey's arguments (the words after `hey`).
pub fn parse_hey_args(args: &[String]) -> Result<LoadPlan, String> {
    let mut requests: i64 = 200;
    let mut concurrency: i64 = 50;
    let mut rate: f64 = 0.0;
    let mut duration = Duration::ZERO;
    let mut method = "GET".to_string();
    let mut body: Option<String> = None;
    let mut body_file: Option<String> = None;
    let mut extra_headers: Vec<String> = Vec::new();
    let mut content_type = "text/html".to_string();
    let mut accept: Option<String> = None;
    let mut basic_auth: Option<String> = None;
    let mut proxy: Option<String> = None;
    let mut timeout_seconds: i64 = 20;
    let mut host_header: Option<String> = None;
    let mut disable_keepalive = false;

    let mut index = 0;
    while index < args.len() {
        let arg = &args[index];
        if arg == "--" {
            index += 1;
            break;
        }
        if !arg.starts_with('-') || arg == "-" {
            break;
        }
        let name_and_value = arg.trim_start_matches('-');
        let (name, inline_value) = match name_and_value.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (name_and_value, None),
        };
        index += 1;
        let is_bool = matches!(
            name,
            "h2" | "disable-keepalive" | "disable-compression" | "disable-redirects"
        );
        if is_bool {
            let value = match inline_value.as_deref() {
                None | Some("true" | "1" | "t" | "T" | "TRUE" | "True") => true,
                Some("false" | "0" | "f" | "F" | "FALSE" | "False") => false,
                Some(other) => {
                    return Err(format!(
                        "hey flag -{name} is a switch; got `{other}`, expected true or false"
                    ));
                }
            };
            // Compression is never requested and redirects are never followed, so those switches
            // change nothing; -h2 is HTTP/1.1 for http:// URLs in hey too (Go negotiates HTTP/2 only
            // over TLS).
            if name == "disable-keepalive" {
                disable_keepalive = value;
            }
            continue;
        }
        let known = matches!(
            name,
            "n" | "c"
                | "q"
                | "z"
                | "m"
                | "d"
                | "D"
                | "H"
                | "T"
                | "A"
                | "a"
                | "x"
                | "t"
                | "host"
                | "cpus"
                | "o"
        );
        if !known {
            return Err(format!(
                "hey flag -{name} is not supported by the built-in load generator; supported flags: {SUPPORTED_FLAGS}"
            ));
        }
        let value = match inline_value {
            Some(value) => value,
            None => {
                let value = args
                    .get(index)
                    .ok_or_else(|| format!("hey flag -{name} needs a value"))?
                    .clone();
                index += 1;
                value
            }
        };
        let integer = |what: &str| -> Result<i64, String> {
            value
                .parse::<i64>()
                .map_err(|_| format!("hey flag -{name} expects {what}, got `{value}`"))
        };
        match name {
            "n" => requests = integer("a number of requests")?,
            "c" => concurrency = integer("a number of workers")?,
            "q" => {
                rate = value
                    .parse::<f64>()
                    .ok()
                    .filter(|rate| rate.is_finite() && *rate >= 0.0)
                    .ok_or_else(|| {
                        format!("hey flag -q expects requests per second per worker, got `{value}`")
                    })?
            }
            "z" => {
                duration = humantime::parse_duration(&value)
                    .map_err(|error| format!("hey flag -z: `{value}`: {error}"))?
            }
            "m" => method = value.to_ascii_uppercase(),
            "d" => body = Some(value),
            "D" => body_file = Some(value),
            "H" => extra_headers.push(value),
            "T" => content_type = value,
            "A" => accept = Some(value),
            "a" => basic_auth = Some(value),
            "x" => proxy = Some(value),
            "t" => timeout_seconds = integer("a timeout in seconds")?,
            "host" => host_header = Some(value),
            "cpus" => {
                integer("a number of CPUs")?;
            }
            "o" => {
                if value != "csv" {
                    return Err(format!("hey flag -o accepts only csv, got `{value}`"));
                }
                return Err("hey flag -o csv (one line per request) is not supported; the summary is logged instead".into());
            }
            _ => unreachable!("every known flag is handled"),
        }
    }

    let rest = &args[index.min(args.len())..];
    let url_text = match rest {
        [] => {
            return Err(
                "hey needs a URL, e.g. hey -z 1m -q 10 -c 2 http://podinfo.test:9898/".into(),
            );
        }
        [url] => url,
        [_, extra, ..] => {
            return Err(format!(
                "unexpected argument `{extra}` after the URL; flags go before the URL"
            ));
        }
    };

    if duration > Duration::ZERO {
        if concurrency <= 0 {
            return Err("hey flag -c cannot be smaller than 1".into());
        }
    } else {
        if requests <= 0 || concurrency <= 0 {
            return Err("hey flags -n and -c cannot be smaller than 1".into());
        }
        if requests < concurrency {
            return Err(format!(
                "hey flag -n ({requests}) cannot be less than -c ({concurrency})"
            ));
        }
    }
    if requests as u64 > MAX_REQUESTS {
        return Err(format!(
            "hey flag -n {requests} is above the limit of {MAX_REQUESTS}; use -z for long runs"
        ));
    }
    if concurrency as usize > MAX_CONCURRENCY {
        return Err(format!(
            "hey flag -c {concurrency} is above the limit of {MAX_CONCURRENCY}"
        ));
    }
    if timeout_seconds < 0 {
        return Err(format!(
            "hey flag -t expects a timeout in seconds, got `{timeout_seconds}`"
        ));
    }
    if body.is_some() && body_file.is_some() {
        return Err("hey flags -d and -D cannot be used together".into());
    }

    let url: Uri = url_text.parse().map_err(|_| {
        format!("`{url_text}` is not a URL; expected e.g. http://podinfo.test:9898/")
    })?;
    match url.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(format!(
                "`{url_text}`: https targets are not supported by the built-in load generator; use http:// (the mesh adds TLS)"
            ));
        }
        _ => return Err(format!("`{url_text}` is not an http:// URL")),
    }
    let authority = url
        .authority()
        .ok_or_else(|| format!("`{url_text}` has no host"))?
        .clone();
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = authority.port_u16().unwrap_or(80);
    let path_and_query = url.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let url = Uri::builder()
        .scheme("http")
        .authority(authority.as_str())
        .path_and_query(if path_and_query.is_empty() {
            "/"
        } else {
            path_and_query
        })
        .build()
        .map_err(|error| format!("`{url_text}` is not a URL: {error}"))?;

    let method = Method::from_bytes(method.as_bytes())
        .map_err(|_| format!("hey flag -m: `{method}` is not an HTTP method"))?;

    let mut headers = HeaderMap::new();
    let header_value = |flag: &str, value: &str| {
        HeaderValue::from_str(value).map_err(|_| {
            // -a and -H values may be credentials, which error messages never repeat.
            if matches!(flag, "-a" | "-H") {
                format!("hey flag {flag}: the value given is not a valid header value")
            } else {
                format!("hey flag {flag}: `{value}` is not a valid header value")
            }
        })
    };
    headers.insert(
        HOST,
        header_value(
            "-host",
            host_header.as_deref().unwrap_or(authority.as_str()),
        )?,
    );
    headers.insert(CONTENT_TYPE, header_value("-T", &content_type)?);
    if let Some(accept) = &accept {
        headers.insert(ACCEPT, header_value("-A", accept)?);
    }
    if let Some(credentials) = &basic_auth {
        if !credentials.contains(':') {
            return Err("hey flag -a expects user:password".into());
        }
        headers.insert(
            AUTHORIZATION,
            header_value("-a", &format!("Basic {}", base64(credentials.as_bytes())))?,
        );
    }
    let mut user_agent: Option<String> = None;
    for header in &extra_headers {
        let (name, value) = header
            .split_once(':')
            .map(|(name, value)| (name.trim(), value.trim()))
            .filter(|(name, value)| !name.is_empty() && !value.is_empty())
            .ok_or_else(|| {
                "hey flag -H expects `Name: value` (a name, a colon and a value); the value given has no name or no value".to_string()
            })?;
        let valid = HeaderValue::from_str(value).map_err(|_| {
            format!("hey flag -H: the value of header `{name}` is not a valid header value")
        })?;
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("hey flag -H: `{name}` is not a valid header name"))?;
        if name == USER_AGENT {
            user_agent = Some(value.to_string());
            continue;
        }
        // Like hey, a header given twice keeps the last value.
        headers.insert(name, valid);
    }
    let agent = concat!("serin-loadtester/", env!("CARGO_PKG_VERSION"));
    let user_agent = match user_agent {
        Some(given) => format!("{given} {agent}"),
        None => agent.to_string(),
    };
    headers.insert(USER_AGENT, header_value("-H", &user_agent)?);

    let proxy = match proxy {
        Some(address) => Some(
            parse_host_port(&address)
                .ok_or_else(|| format!("hey flag -x expects host:port, got `{address}`"))?,
        ),
        None => None,
    };

    Ok(LoadPlan {
        url,
        host,
        port,
        requests: if duration > Duration::ZERO {
            u64::MAX
        } else {
            requests as u64
        },
        concurrency: concurrency as usize,
        rate_per_worker: (rate > 0.0).then_some(rate),
        duration: (duration > Duration::ZERO).then_some(duration),
        method,
        body: Bytes::from(body.unwrap_or_default()),
        headers,
        request_timeout: (timeout_seconds > 0).then(|| Duration::from_secs(timeout_seconds as u64)),
        disable_keepalive,
        proxy,
        body_file,
    })
}

fn base64(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let bytes = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let triple = (u32::from(bytes[0]) << 16) | (u32::from(bytes[1]) << 8) | u32::from(bytes[2]);
        for position in 0..4 {
            if position <= chunk.len() {
                out.push(ALPHABET[((triple >> (18 - 6 * position)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<LoadPlan, String> {
        let words: Vec<String> = line.split_whitespace().map(String::from).collect();
        parse_hey_args(&words)
    }

    #[test]
    fn defaults_match_hey() {
        let plan = parse("http://podinfo.test:9898/").unwrap();
        assert_eq!(plan.requests, 200);
        assert_eq!(plan.concurrency, 50);
        assert_eq!(plan.method, Method::GET);
        assert_eq!(plan.request_timeout, Some(Duration::from_secs(20)));
        assert_eq!(plan.headers[CONTENT_TYPE], "text/html");
        assert_eq!(plan.headers[HOST], "podinfo.test:9898");
        assert_eq!((plan.host.as_str(), plan.port), ("podinfo.test", 9898));
        assert_eq!(plan.duration, None);
        assert_eq!(plan.rate_per_worker, None);
    }

    #[test]
    fn reads_the_flags_flagger_docs_use() {
        let plan = parse("-z 1m -q 10 -c 2 -m post -d {} -T application/json -H X-A:1 -A text/plain -t 5 http://a:8080/api?x=1").unwrap();
        assert_eq!(plan.duration, Some(Duration::from_secs(60)));
        assert_eq!(plan.rate_per_worker, Some(10.0));
        assert_eq!(plan.concurrency, 2);
        assert_eq!(plan.method, Method::POST);
        assert_eq!(plan.body, "{}");
        assert_eq!(plan.headers[CONTENT_TYPE], "application/json");
        assert_eq!(plan.headers["x-a"], "1");
        assert_eq!(plan.headers[ACCEPT], "text/plain");
        assert_eq!(plan.request_timeout, Some(Duration::from_secs(5)));
        assert_eq!(plan.url.to_string(), "http://a:8080/api?x=1");
    }

    #[test]
    fn reads_the_go_durations_hey_users_write() {
        for (flag, expected) in [
            ("10s", Duration::from_secs(10)),
            ("1m30s", Duration::from_secs(90)),
            ("1h0m0s", Duration::from_secs(3600)),
            ("2.5s", Duration::from_millis(2500)),
            ("500ms", Duration::from_millis(500)),
        ] {
            let plan = parse(&format!("-z {flag} http://a/")).unwrap();
            assert_eq!(plan.duration, Some(expected), "-z {flag}");
        }
    }

    #[test]
    fn accepts_go_flag_spellings() {
        let plan = parse("--n=10 -c=2 -h2 -disable-keepalive=true http://a").unwrap();
        assert_eq!((plan.requests, plan.concurrency), (10, 2));
        assert!(plan.disable_keepalive);
        assert_eq!(plan.url.path(), "/");
        assert_eq!(plan.port, 80);
    }

    #[test]
    fn basic_auth_is_encoded() {
        let plan = parse("-a user:pass http://a/").unwrap();
        assert_eq!(plan.headers[AUTHORIZATION], "Basic dXNlcjpwYXNz");
        assert_eq!(base64(b"a"), "YQ==");
        assert_eq!(base64(b"ab"), "YWI=");
    }

    #[test]
    fn explains_what_is_wrong() {
        assert!(
            parse("-k http://a/")
                .unwrap_err()
                .contains("hey flag -k is not supported")
        );
        assert!(
            parse("-n 1 -c 2 http://a/")
                .unwrap_err()
                .contains("cannot be less than -c")
        );
        assert!(parse("-n").unwrap_err().contains("needs a value"));
        assert!(parse("-z 1m").unwrap_err().contains("needs a URL"));
        assert!(
            parse("-z 10 http://a/")
                .unwrap_err()
                .contains("time unit needed")
        );
        assert!(
            parse("https://a/")
                .unwrap_err()
                .contains("https targets are not supported")
        );
        let no_colon = parse("-H Bearer-s3cret http://a/").unwrap_err();
        assert!(
            no_colon.contains("Name: value") && !no_colon.contains("s3cret"),
            "{no_colon}"
        );
        let bad_value = parse("-H Authorization:s3cr\u{1}t http://a/").unwrap_err();
        assert!(
            bad_value.contains("`Authorization`") && !bad_value.contains("s3cr"),
            "{bad_value}"
        );
        assert!(
            parse("http://a/ extra")
                .unwrap_err()
                .contains("unexpected argument `extra`")
        );
        assert!(
            parse("-c 20000 -n 20000 http://a/")
                .unwrap_err()
                .contains("limit")
        );
    }

    #[test]
    fn a_short_target_host_is_searched_in_the_namespace() {
        let args: Vec<String> = ["-n", "1", "-c", "1", "http://podinfo-canary:9898/x?y=1"]
            .iter()
            .map(|w| w.to_string())
            .collect();
        let mut plan = parse_hey_args(&args).unwrap();
        plan.search_in("test");
        assert_eq!(
            plan.url.to_string(),
            "http://podinfo-canary.test:9898/x?y=1"
        );
        assert_eq!(plan.host, "podinfo-canary.test");
        assert_eq!(plan.headers[HOST], "podinfo-canary:9898");
        let mut qualified = parse_hey_args(&["http://web.prod/".to_string()]).unwrap();
        qualified.search_in("test");
        assert_eq!(qualified.url.to_string(), "http://web.prod/");
    }
}
