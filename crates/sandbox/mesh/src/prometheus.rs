//! Runs Debian's `prometheus` for the sandbox: a generated config that scrapes the mesh every
//! second, storage in a temporary directory, a loopback port, and a clean stop. With a targets
//! directory it also scrapes whatever the `*.json` files there list (Prometheus' `file_sd_configs`),
//! so a process started later — the operator's admin address, say — registers itself by writing a
//! file ([`write_target_file`]).

use std::net::SocketAddr;
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

/// The port Prometheus says in its log (`msg="Listening on" address=127.0.0.1:PORT`) that it
/// listens on: started on port 0, it binds a free port itself, so no other process can take the
/// port between its choice and the bind.
fn listening_port(log: &str) -> Option<u16> {
    log.lines()
        .filter(|line| line.contains("msg=\"Listening on\""))
        .find_map(|line| {
            let address = line.split("address=").nth(1)?.split_whitespace().next()?;
            address.strip_prefix("127.0.0.1:")?.parse().ok()
        })
}

/// The directory, beside the sandbox's kubeconfig, whose `*.json` target files Prometheus scrapes.
pub const TARGETS_DIR: &str = "prometheus-targets";

/// The job of targets registered through the targets directory, unless their file names another.
pub const FILE_TARGETS_JOB: &str = "serin-targets";

/// How often Prometheus re-reads the target files; it also notices changes at once (inotify), this
/// is the fallback.
const TARGETS_REFRESH: &str = "2s";

/// The scrape config: every target every second on `metrics_path`, and, with `targets_dir`, the
/// targets its `*.json` files list (each second, on `/metrics` unless a file sets
/// `__metrics_path__`).
pub fn config(targets: &[SocketAddr], metrics_path: &str, targets_dir: Option<&Path>) -> String {
    let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
    let mut text = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: serin-mesh\n    scrape_interval: 1s\n    metrics_path: {metrics_path}\n    static_configs:\n      - targets: [{}]\n",
        targets.join(", ")
    );
    if let Some(dir) = targets_dir {
        // A single-quoted YAML string escapes a quote by doubling it.
        let pattern = dir.join("*.json").display().to_string().replace('\'', "''");
        text.push_str(&format!(
            "  - job_name: {FILE_TARGETS_JOB}\n    scrape_interval: 1s\n    file_sd_configs:\n      - files: ['{pattern}']\n        refresh_interval: {TARGETS_REFRESH}\n"
        ));
    }
    text
}

/// Registers `addresses` for scraping on `/metrics` as job `job`: writes `DIR/NAME.json` in
/// Prometheus' file discovery format, whole or not at all (Prometheus may read it at any moment).
/// Returns the file's path; removing the file ends the scraping.
pub fn write_target_file(
    dir: &Path,
    name: &str,
    job: &str,
    addresses: &[SocketAddr],
) -> std::io::Result<PathBuf> {
    let targets: Vec<String> = addresses.iter().map(ToString::to_string).collect();
    let groups = serde_json::json!([{"targets": targets, "labels": {"job": job}}]);
    write_target_groups(dir, name, &groups)
}

/// Writes `DIR/NAME.json` holding `groups`, a list of file discovery target groups
/// (`{"targets": [...], "labels": {...}}`), whole or not at all. Returns the file's path.
pub fn write_target_groups(
    dir: &Path,
    name: &str,
    groups: &serde_json::Value,
) -> std::io::Result<PathBuf> {
    let path = dir.join(format!("{name}.json"));
    // The temporary name does not match `*.json`, so Prometheus never reads a half-written file.
    let partial = dir.join(format!(".{name}.json.partial"));
    std::fs::write(&partial, groups.to_string())?;
    std::fs::rename(&partial, &path)?;
    Ok(path)
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
        Self::launch(binary, &config(targets, metrics_path, None), None)
    }

    /// Like [`Prometheus::start`], also scraping the targets listed by the `*.json` files in
    /// `targets_dir` (see [`write_target_file`]), as they come and go.
    pub fn start_with_file_targets(
        binary: &str,
        targets: &[SocketAddr],
        metrics_path: &str,
        targets_dir: &Path,
    ) -> Result<Self, PrometheusError> {
        let config = config(targets, metrics_path, Some(targets_dir));
        Self::launch(binary, &config, None)
    }

    /// Like [`Prometheus::start`], serving https with basic authentication as `web` says.
    pub fn start_with_web_config(
        binary: &str,
        targets: &[SocketAddr],
        metrics_path: &str,
        web: Option<&WebConfig>,
    ) -> Result<Self, PrometheusError> {
        Self::launch(binary, &config(targets, metrics_path, None), web)
    }

    fn launch(
        binary: &str,
        config: &str,
        web: Option<&WebConfig>,
    ) -> Result<Self, PrometheusError> {
        let found = which(binary).ok_or_else(|| PrometheusError::NotInstalled(binary.into()))?;
        let storage = tempfile::tempdir()?;
        let config_path = storage.path().join("prometheus.yml");
        std::fs::write(&config_path, config)?;
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
            .arg("--web.listen-address=127.0.0.1:0")
            .arg("--storage.tsdb.retention.time=1h")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let mut prometheus = Prometheus {
            url: "http://127.0.0.1:0".into(),
            child,
            _storage: storage,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut port = None;
        while Instant::now() < deadline {
            if port.is_none() {
                port = std::fs::read_to_string(&log_path)
                    .ok()
                    .as_deref()
                    .and_then(listening_port);
                if let Some(port) = port {
                    let scheme = if web.is_some() { "https" } else { "http" };
                    prometheus.url = format!("{scheme}://127.0.0.1:{port}");
                }
            }
            if port.is_none() {
                if let Ok(Some(_)) = prometheus.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
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
    fn the_port_is_read_from_the_address_prometheus_says_it_listens_on() {
        let log = "ts=2026-11-28T05:05:21.461Z caller=web.go:503 level=info component=web msg=\"Start listening for connections\" address=127.0.0.1:0\n\
                   ts=2026-11-28T05:05:21.468Z caller=tls_config.go:232 level=info component=web msg=\"Listening on\" address=127.0.0.1:45799\n";
        assert_eq!(listening_port(log), Some(45799));
        assert_eq!(listening_port(log.lines().next().unwrap()), None);
    }

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
        let text = config(
            &["127.0.0.1:15020".parse().unwrap()],
            "/stats/prometheus",
            None,
        );
        assert!(text.contains("scrape_interval: 1s"));
        assert!(text.contains("metrics_path: /stats/prometheus"));
        assert!(text.contains("targets: ['127.0.0.1:15020']"));
        assert!(!text.contains("file_sd_configs"));
    }

    #[test]
    fn with_a_targets_directory_the_config_reads_its_json_files() {
        let text = config(
            &[],
            "/metrics",
            Some(Path::new("/tmp/it's/prometheus-targets")),
        );
        assert!(
            text.contains("      - files: ['/tmp/it''s/prometheus-targets/*.json']\n        refresh_interval: 2s\n"),
            "{text}"
        );
        assert!(text.contains("job_name: serin-targets"), "{text}");
    }

    #[test]
    fn a_target_file_lists_the_addresses_under_their_job() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_target_file(
            dir.path(),
            "operator",
            "serin-operator",
            &["127.0.0.1:8080".parse().unwrap()],
        )
        .unwrap();
        assert_eq!(path, dir.path().join("operator.json"));
        let written: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(
            written,
            serde_json::json!([{"targets": ["127.0.0.1:8080"], "labels": {"job": "serin-operator"}}])
        );
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "the partial file is gone");
    }
}
