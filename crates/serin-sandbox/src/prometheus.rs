//! Runs Debian's `prometheus` for the sandbox: a generated config that scrapes the mesh every
//! second, storage in a temporary directory, a loopback port, and a clean stop.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Why Prometheus could not be started.
#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    /// The binary is not installed.
    #[error(
        "prometheus is not installed (looked for `{0}`): install Debian's package with `apt-get install prometheus`"
    )]
    NotInstalled(String),
    /// Writing its config or starting it failed.
    #[error("starting prometheus: {0}")]
    Io(#[from] std::io::Error),
    /// It started but never became ready.
    #[error("prometheus did not become ready at {url} within {seconds}s; its log is {log}")]
    NotReady {
        /// Where it should have answered.
        url: String,
        /// How long we waited.
        seconds: u64,
        /// Its output.
        log: String,
    },
}

/// The user of the fixture web config ([`WebConfig::fixture`]).
pub const FIXTURE_USER: &str = "serin";
/// The password of [`FIXTURE_USER`]; the fixture holds only its bcrypt hash.
pub const FIXTURE_PASSWORD: &str = "serin-test-password";
/// bcrypt (cost 10) of [`FIXTURE_PASSWORD`], computed once with Python's `bcrypt` package.
const FIXTURE_PASSWORD_BCRYPT: &str =
    "$2b$10$c.3n245IE6cig07jcpgq.eNCJSdpONyMqj4nVSQErkhY1sl6ZnnAO";

/// What Prometheus' `--web.config.file` sets: https with a certificate and its key, and the basic
/// authentication users (name and bcrypt hash).
#[derive(Clone, Debug)]
pub struct WebConfig {
    /// PEM certificate Prometheus serves.
    pub cert: PathBuf,
    /// PEM private key of `cert`.
    pub key: PathBuf,
    /// Users allowed in, as (name, bcrypt hash); empty means no authentication.
    pub users: Vec<(String, String)>,
}

impl WebConfig {
    /// The committed fixture: a self-signed certificate for 127.0.0.1 (valid until 2126) and
    /// [`FIXTURE_USER`] with [`FIXTURE_PASSWORD`].
    pub fn fixture() -> Self {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/prometheus-tls");
        WebConfig {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
            users: vec![(FIXTURE_USER.into(), FIXTURE_PASSWORD_BCRYPT.into())],
        }
    }

    /// The file's YAML.
    pub fn yaml(&self) -> String {
        let mut text = format!(
            "tls_server_config:\n  cert_file: '{}'\n  key_file: '{}'\n",
            self.cert.display(),
            self.key.display()
        );
        if !self.users.is_empty() {
            text.push_str("basic_auth_users:\n");
            for (name, hash) in &self.users {
                text.push_str(&format!("  '{name}': '{hash}'\n"));
            }
        }
        text
    }
}

/// A running Prometheus, stopped when dropped.
pub struct Prometheus {
    /// Base URL, e.g. `http://127.0.0.1:41234` (`https://` with a [`WebConfig`]).
    pub url: String,
    child: Child,
    _storage: tempfile::TempDir,
}

fn free_loopback_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The scrape config: every target every second on `metrics_path`.
pub fn config(targets: &[SocketAddr], metrics_path: &str) -> String {
    let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
    format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: serin-mesh\n    scrape_interval: 1s\n    metrics_path: {metrics_path}\n    static_configs:\n      - targets: [{}]\n",
        targets.join(", ")
    )
}

fn get(url: &str) -> Option<String> {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut stream = std::net::TcpStream::connect(authority).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET /{path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.starts_with("HTTP/1.1 200").then_some(response)
}

impl Prometheus {
    /// Starts `binary` (normally `prometheus` from PATH) scraping `targets` on `metrics_path`, and
    /// waits until it is ready.
    pub fn start(
        binary: &str,
        targets: &[SocketAddr],
        metrics_path: &str,
    ) -> Result<Self, PrometheusError> {
        Self::start_with_web_config(binary, targets, metrics_path, None)
    }

    /// Like [`Prometheus::start`], serving https with basic authentication as `web` says.
    pub fn start_with_web_config(
        binary: &str,
        targets: &[SocketAddr],
        metrics_path: &str,
        web: Option<&WebConfig>,
    ) -> Result<Self, PrometheusError> {
        let found = which(binary).ok_or_else(|| PrometheusError::NotInstalled(binary.into()))?;
        let storage = tempfile::tempdir()?;
        let config_path = storage.path().join("prometheus.yml");
        std::fs::write(&config_path, config(targets, metrics_path))?;
        let port = free_loopback_port()?;
        let log_path = storage.path().join("prometheus.log");
        let log = std::fs::File::create(&log_path)?;
        let mut command = Command::new(found);
        if let Some(web) = web {
            let web_path = storage.path().join("web.yml");
            std::fs::write(&web_path, web.yaml())?;
            command.arg(format!("--web.config.file={}", web_path.display()));
        }
        let child = command
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                storage.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--storage.tsdb.retention.time=1h")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let mut prometheus = Prometheus {
            url: format!(
                "{}://127.0.0.1:{port}",
                if web.is_some() { "https" } else { "http" }
            ),
            child,
            _storage: storage,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            // The plain-http probe cannot speak TLS; behind a web config, the log says when.
            let ready = match web {
                None => get(&format!("{}/-/ready", prometheus.url)).is_some(),
                Some(_) => std::fs::read_to_string(&log_path)
                    .is_ok_and(|log| log.contains("Server is ready to receive web requests")),
            };
            if ready {
                return Ok(prometheus);
            }
            if let Ok(Some(_)) = prometheus.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        Err(PrometheusError::NotReady {
            url: prometheus.url.clone(),
            seconds: 30,
            log: log.lines().rev().take(5).collect::<Vec<_>>().join(" | "),
        })
    }

    /// Whether every scrape target has been scraped successfully at least once (plain http only).
    pub fn targets_up(&self) -> bool {
        get(&format!("{}/api/v1/targets", self.url)).is_some_and(|body| {
            body.contains("\"health\":\"up\"") && !body.contains("\"health\":\"unknown\"")
        })
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn which(binary: &str) -> Option<PathBuf> {
    if binary.contains('/') {
        return Path::new(binary).is_file().then(|| PathBuf::from(binary));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(binary))
            .find(|candidate| candidate.is_file())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_names_the_package_to_install() {
        let error = Prometheus::start("/nonexistent/prometheus", &[], "/metrics")
            .err()
            .expect("cannot start");
        assert!(
            error.to_string().contains("apt-get install prometheus"),
            "{error}"
        );
    }

    #[test]
    fn the_config_scrapes_every_target_each_second() {
        let text = config(&["127.0.0.1:15020".parse().unwrap()], "/stats/prometheus");
        assert!(text.contains("scrape_interval: 1s"));
        assert!(text.contains("metrics_path: /stats/prometheus"));
        assert!(text.contains("targets: ['127.0.0.1:15020']"));
    }
}
