//! `kubectl exec` over kubectl's WebSocket streaming protocol (`v5.channel.k8s.io`, or `v4`): the
//! command runs "in the pod's context" — the sandbox's images have a small, honest set of commands:
//! `echo`, `true`, `false`, `hostname`, `env`, `curl` and `wget` (HTTP GETs sent through the mesh
//! proxy, as from a pod with a sidecar), `hey` in the load tester image, and `sh -c`/`bash -c` with
//! one of those as a simple command. Anything else is not in the image (exit code 127).

use axum::extract::ws::{Message, WebSocket};
use serde_json::{Value, json};
use serin_loadtester::proxy::ProxyConfig;
use std::time::Duration;

/// The subprotocols the sandbox speaks, in preference order.
pub const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

/// What a command printed and how it ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// The exit code.
    pub exit_code: i32,
}

impl Outcome {
    fn out(text: String) -> Self {
        Outcome {
            stdout: text,
            ..Outcome::default()
        }
    }

    fn failed(code: i32, stderr: String) -> Self {
        Outcome {
            stderr,
            exit_code: code,
            ..Outcome::default()
        }
    }
}

/// Where a command runs: the pod's name, its container's environment, whether its image is the
/// load tester's, and how its HTTP traffic leaves the pod.
#[derive(Clone, Debug)]
pub struct Context {
    /// The pod's name (`hostname`).
    pub pod_name: String,
    /// The container's `env` values.
    pub env: Vec<(String, String)>,
    /// The load tester image (which has `hey`).
    pub load_tester: bool,
    /// The pod's outgoing proxy (the mesh proxy under `serin sandbox up`).
    pub proxy: ProxyConfig,
}

impl Context {
    /// The context of `container` in `pod`, whose HTTP traffic leaves through `proxy`.
    pub fn of(pod: &Value, container: &Value, proxy: ProxyConfig) -> Self {
        // As the kubelet resolves it for the container's process (fieldRefs included).
        let env = crate::process::container_env(pod, container);
        let image = container["image"].as_str().unwrap_or_default();
        Context {
            pod_name: pod["metadata"]["name"].as_str().unwrap_or_default().into(),
            env,
            load_tester: image.contains("loadtester"),
            proxy,
        }
    }
}

/// Runs `words` in `context`.
pub async fn run(words: &[String], context: &Context) -> Outcome {
    let Some((program, args)) = words.split_first() else {
        return Outcome::failed(127, "no command given\n".into());
    };
    let program = program.rsplit('/').next().unwrap_or(program);
    match program {
        "echo" => Outcome::out(format!("{}\n", args.join(" "))),
        "true" => Outcome::default(),
        "false" => Outcome::failed(1, String::new()),
        "hostname" => Outcome::out(format!("{}\n", context.pod_name)),
        "env" => {
            let mut lines = vec![format!("HOSTNAME={}", context.pod_name)];
            lines.extend(context.env.iter().map(|(k, v)| format!("{k}={v}")));
            Outcome::out(lines.join("\n") + "\n")
        }
        "sh" | "bash" => match args {
            [flag, line, ..] if flag == "-c" => shell(line, context).await,
            _ => Outcome::failed(
                2,
                format!("{program}: the sandbox's shell only runs `{program} -c \"<command>\"`\n"),
            ),
        },
        "curl" => curl(args, context).await,
        "wget" => wget(args, context).await,
        "hey" if context.load_tester => match serin_loadtester::hey::parse_hey_args(args) {
            Ok(plan) => {
                let report = serin_loadtester::load::run_load(
                    &plan,
                    &context.proxy,
                    Duration::from_secs(600),
                )
                .await;
                Outcome::out(report.summary())
            }
            Err(error) => Outcome::failed(1, format!("{error}\n")),
        },
        other => Outcome::failed(
            127,
            format!("exec: \"{other}\": executable file not found in $PATH\n"),
        ),
    }
}

async fn shell(line: &str, context: &Context) -> Outcome {
    match serin_loadtester::words::split_command(line) {
        Ok(words) if !words.needs_shell => Box::pin(run(&words.words, context)).await,
        Ok(_) => Outcome::failed(
            2,
            "sh: the sandbox's shell runs one simple command (no pipes, redirections or variables)\n"
                .into(),
        ),
        Err(error) => Outcome::failed(2, format!("sh: {error}\n")),
    }
}

fn client(context: &Context) -> reqwest::Result<reqwest::Client> {
    let config = context.proxy.clone();
    let proxy = reqwest::Proxy::custom(move |url| {
        let host = url.host_str()?;
        config
            .proxy_for(host)
            .map(|(proxy_host, port)| format!("http://{proxy_host}:{port}"))
    });
    reqwest::Client::builder()
        .proxy(proxy)
        .timeout(Duration::from_secs(30))
        .build()
}

/// A GET (or `-X` method) like curl's: the body on stdout, `-w '%{http_code}'`, `-o /dev/null`,
/// `-f` failing on HTTP errors (exit 22), `-H` headers, `-d` data.
async fn curl(args: &[String], context: &Context) -> Outcome {
    let mut url = None;
    let (mut method, mut headers, mut data) = (None, Vec::new(), None);
    let (mut discard, mut fail, mut write_out) = (false, false, None);
    let mut words = args.iter();
    while let Some(word) = words.next() {
        match word.as_str() {
            "-s" | "-S" | "-sS" | "-L" | "--silent" | "--show-error" | "-v" => {}
            "-f" | "--fail" | "-sf" | "-fsS" | "-sSf" => fail = true,
            "-o" | "--output" => discard = words.next().is_some_and(|f| f == "/dev/null"),
            "-w" | "--write-out" => write_out = words.next().cloned(),
            "-X" | "--request" => method = words.next().cloned(),
            "-H" | "--header" => headers.extend(words.next().cloned()),
            "-d" | "--data" => data = words.next().cloned(),
            flag if flag.starts_with('-') => {
                return Outcome::failed(
                    2,
                    format!("curl: option {flag}: is unknown to the sandbox's curl\n"),
                );
            }
            target => url = Some(target.to_string()),
        }
    }
    let Some(url) = url else {
        return Outcome::failed(2, "curl: no URL specified!\n".into());
    };
    let url = if url.contains("://") {
        url
    } else {
        format!("http://{url}")
    };
    let client = match client(context) {
        Ok(client) => client,
        Err(error) => return Outcome::failed(2, format!("curl: {error}\n")),
    };
    let method = method.unwrap_or_else(|| {
        if data.is_some() {
            "POST".into()
        } else {
            "GET".into()
        }
    });
    let Ok(method) = reqwest::Method::from_bytes(method.as_bytes()) else {
        return Outcome::failed(2, format!("curl: bad method {method}\n"));
    };
    let mut request = client.request(method, &url);
    for header in headers {
        if let Some((name, value)) = header.split_once(':') {
            request = request.header(name.trim(), value.trim());
        }
    }
    if let Some(data) = data {
        request = request.body(data);
    }
    match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            let body = response.text().await.unwrap_or_default();
            if fail && status >= 400 {
                return Outcome::failed(
                    22,
                    format!("curl: (22) The requested URL returned error: {status}\n"),
                );
            }
            let mut stdout = if discard { String::new() } else { body };
            if let Some(format) = write_out {
                stdout.push_str(
                    &format
                        .replace("%{http_code}", &status.to_string())
                        .replace("\\n", "\n"),
                );
            }
            Outcome::out(stdout)
        }
        Err(error) if error.is_timeout() => {
            Outcome::failed(28, format!("curl: (28) Operation timed out: {error}\n"))
        }
        Err(error) => Outcome::failed(7, format!("curl: (7) Failed to connect: {error}\n")),
    }
}

/// `wget -qO- URL` (and `-O -`, `-q`): the body on stdout.
async fn wget(args: &[String], context: &Context) -> Outcome {
    let url = args.iter().rev().find(|a| !a.starts_with('-') && *a != "-");
    match url {
        Some(url) => {
            let mut outcome = curl(&["-f".to_string(), url.clone()], context).await;
            if outcome.exit_code == 22 {
                outcome.exit_code = 8;
                outcome.stderr = format!("wget: server returned error: {}", outcome.stderr);
            }
            outcome
        }
        None => Outcome::failed(1, "wget: missing URL\n".into()),
    }
}

/// The Status kubectl reads on the error channel: success, or the exit code as a cause.
pub fn status(outcome: &Outcome) -> Value {
    if outcome.exit_code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({"metadata": {}, "status": "Failure",
        "message": format!("command terminated with non-zero exit code: error executing command, exit status {}", outcome.exit_code),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": outcome.exit_code.to_string()}]}})
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut bytes = Vec::with_capacity(data.len() + 1);
    bytes.push(channel);
    bytes.extend_from_slice(data);
    Message::Binary(bytes.into())
}

/// Runs the command and streams the result over the channel protocol: stdout on channel 1, stderr
/// on 2, then the Status on 3, then the socket closes.
pub async fn serve(mut socket: WebSocket, words: Vec<String>, context: Context) {
    let outcome = run(&words, &context).await;
    if !outcome.stdout.is_empty() {
        let _ = socket.send(frame(1, outcome.stdout.as_bytes())).await;
    }
    if !outcome.stderr.is_empty() {
        let _ = socket.send(frame(2, outcome.stderr.as_bytes())).await;
    }
    let _ = socket
        .send(frame(3, status(&outcome).to_string().as_bytes()))
        .await;
    // A normal closure (1000): kubectl treats a close without a status as a broken stream.
    let close = axum::extract::ws::CloseFrame {
        code: 1000,
        reason: "".into(),
    };
    let _ = socket.send(Message::Close(Some(close))).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> Context {
        Context {
            pod_name: "lt-1".into(),
            env: vec![("A".into(), "1".into())],
            load_tester: true,
            proxy: ProxyConfig::direct(),
        }
    }

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    #[tokio::test]
    async fn the_images_commands_answer_as_a_shell_would() {
        assert_eq!(
            run(&words("echo hello there"), &context()).await.stdout,
            "hello there\n"
        );
        assert_eq!(run(&words("hostname"), &context()).await.stdout, "lt-1\n");
        assert!(
            run(&words("env"), &context())
                .await
                .stdout
                .contains("A=1\n")
        );
        let shell = run(
            &["sh".into(), "-c".into(), "echo 'quoted words'".into()],
            &context(),
        )
        .await;
        assert_eq!(shell.stdout, "quoted words\n");
        let missing = run(&words("nc -z db 5432"), &context()).await;
        assert_eq!(missing.exit_code, 127);
        assert_eq!(
            missing.stderr,
            "exec: \"nc\": executable file not found in $PATH\n"
        );
        assert_eq!(status(&missing)["details"]["causes"][0]["message"], "127");
        assert_eq!(status(&Outcome::default())["status"], "Success");
        let piped = run(
            &["sh".into(), "-c".into(), "echo a | wc -l".into()],
            &context(),
        )
        .await;
        assert_eq!(piped.exit_code, 2);
    }
}
