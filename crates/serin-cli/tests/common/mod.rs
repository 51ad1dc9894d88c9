//! What the serin binary's integration tests share: `serin sandbox up` in a directory of its own,
//! and the real kubectl pointed at it.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `serin sandbox up` in a directory of its own, stopped (SIGTERM) when dropped.
pub struct SandboxUp {
    child: Child,
    /// The sandbox's directory (kubeconfig, endpoints.json, ca.crt).
    pub dir: tempfile::TempDir,
}

impl SandboxUp {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Like [`SandboxUp::start`], with `extra` flags for `serin sandbox up`.
    pub fn start_with(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_serin"))
            .args(["sandbox", "up", "--without-prometheus"])
            .args(extra)
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let endpoints = dir.path().join("endpoints.json");
        let until = Instant::now() + Duration::from_secs(30);
        while !endpoints.exists() {
            assert!(Instant::now() < until, "serin sandbox up did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        SandboxUp { child, dir }
    }

    pub fn endpoint(&self, key: &str) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("endpoints.json")).unwrap();
        let endpoints: serde_json::Value = serde_json::from_str(&text).unwrap();
        endpoints[key].as_str().unwrap().to_string()
    }
}

impl Drop for SandboxUp {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The real kubectl with a kubeconfig and a private discovery cache; counts the commands it ran.
pub struct Kubectl {
    kubeconfig: PathBuf,
    cache: tempfile::TempDir,
    /// How many kubectl commands ran.
    pub ran: std::cell::Cell<usize>,
}

impl Kubectl {
    pub fn new(kubeconfig: &Path) -> Self {
        Kubectl {
            kubeconfig: kubeconfig.to_path_buf(),
            cache: tempfile::tempdir().unwrap(),
            ran: std::cell::Cell::new(0),
        }
    }

    pub fn run(&self, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        self.ran.set(self.ran.get() + 1);
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.cache.path())
            .args(args)
            .env("KUBE_EDITOR", "sed -i s/replicas:\\ 3/replicas:\\ 2/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl is installed (apt package kubectl)");
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs a command that must succeed and print something containing `expected`.
    pub fn expect(&self, args: &[&str], expected: &str) -> String {
        let (ok, out, err) = self.run(args, None);
        assert!(ok, "kubectl {args:?} failed:\n{out}\n{err}");
        assert!(
            out.contains(expected),
            "kubectl {args:?} printed:\n{out}\n(expected to contain {expected:?})"
        );
        out
    }

    /// Runs a command that must fail with `expected` in its error output.
    pub fn refused(&self, args: &[&str], expected: &str) {
        let (ok, out, err) = self.run(args, None);
        assert!(!ok, "kubectl {args:?} should have failed:\n{out}");
        assert!(
            err.contains(expected),
            "kubectl {args:?} said:\n{err}\n(expected {expected:?})"
        );
    }

    pub fn with_input(&self, args: &[&str], stdin: &str, expected: &str) -> String {
        let (ok, out, err) = self.run(args, Some(stdin));
        assert!(ok, "kubectl {args:?} failed:\n{out}\n{err}");
        assert!(out.contains(expected), "kubectl {args:?} printed:\n{out}");
        out
    }
}
