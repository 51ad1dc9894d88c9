//! The container images (`make image`, `scripts/build-image.sh`): each is built with Debian's buildah
//! from scratch, then unpacked here layer by layer, and its binary runs from the image's own root
//! filesystem (chroot, as uid 65532): the image is self-contained, non-root, and has no shell.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn blob(layout: &Path, digest: &str) -> PathBuf {
    layout
        .join("blobs/sha256")
        .join(digest.trim_start_matches("sha256:"))
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn run(command: &mut Command) -> String {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{command:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn each_image_runs_its_binary_from_its_own_root_filesystem() {
    let version = env!("CARGO_PKG_VERSION");
    for name in ["serin-operator", "serin-loadtester"] {
        // The debug binaries the test run built already; make image builds release ones.
        let built = run(
            Command::new(workspace().join("scripts/build-image.sh")).args([
                name,
                "--profile",
                "debug",
            ]),
        );
        assert!(
            built.contains(&format!("localhost/{name}:{version}")),
            "{built}"
        );
        let archive = workspace().join(format!("target/images/{name}-{version}.oci.tar"));
        let unpacked = tempfile::tempdir().unwrap();
        let (layout, rootfs) = (unpacked.path().join("oci"), unpacked.path().join("rootfs"));
        std::fs::create_dir_all(&layout).unwrap();
        std::fs::create_dir_all(&rootfs).unwrap();
        run(Command::new("tar")
            .arg("-xf")
            .arg(&archive)
            .arg("-C")
            .arg(&layout));

        let index = json(&layout.join("index.json"));
        let manifest = json(&blob(
            &layout,
            index["manifests"][0]["digest"].as_str().unwrap(),
        ));
        let config = json(&blob(
            &layout,
            manifest["config"]["digest"].as_str().unwrap(),
        ));
        let config = &config["config"];
        assert_eq!(config["User"], "65532:65532", "{name} runs as non-root");
        assert_eq!(config["Entrypoint"][0], format!("/usr/local/bin/{name}"));
        let labels = &config["Labels"];
        assert_eq!(labels["org.opencontainers.image.version"], version);
        assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
        assert_eq!(
            labels["org.opencontainers.image.source"],
            "https://github.com/serin-dev/serin"
        );
        for layer in manifest["layers"].as_array().unwrap() {
            let blob = blob(&layout, layer["digest"].as_str().unwrap());
            run(Command::new("tar")
                .arg("-xf")
                .arg(&blob)
                .arg("-C")
                .arg(&rootfs));
        }
        for shell in ["bin/sh", "usr/bin/sh", "bin/bash", "usr/bin/bash"] {
            assert!(!rootfs.join(shell).exists(), "{name} has /{shell}");
        }
        assert!(rootfs.join("etc/ssl/certs/ca-certificates.crt").exists());

        let printed = run(Command::new("chroot")
            .arg("--userspec=65532:65532")
            .arg(&rootfs)
            .arg(format!("/usr/local/bin/{name}"))
            .arg("--version"));
        assert_eq!(printed.trim(), format!("{name} {version}"));
        if name == "serin-operator" {
            flaggers_chart_starts_and_probes_it(&rootfs, config, version);
            // The chart's dashboard Deployment starts the same binary under this name.
            let dashboard = run(Command::new("chroot")
                .arg("--userspec=65532:65532")
                .arg(&rootfs)
                .args(["/usr/local/bin/serin-dashboard", "--version"]));
            assert_eq!(dashboard.trim(), format!("serin-dashboard {version}"));
        }
    }
}

/// Flagger's chart runs `./flagger -log-level=info ...` in the image's working directory and
/// probes it with `wget --quiet --tries=1 --timeout=4 --spider http://localhost:8080/healthz`.
fn flaggers_chart_starts_and_probes_it(rootfs: &Path, config: &Value, version: &str) {
    assert_eq!(config["WorkingDir"], "/home/nonroot");
    // The probe's `wget` is looked up in the image's PATH.
    assert!(
        config["Env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == "PATH=/usr/local/bin:/usr/bin"),
        "{config}"
    );
    let printed = run(Command::new("chroot")
        .arg("--userspec=65532:65532")
        .arg(rootfs)
        .args(["/home/nonroot/flagger", "-version"]));
    assert_eq!(printed.trim(), format!("serin-operator {version}"));

    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/healthz", listener.local_addr().unwrap());
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        // The request's head, however the client's writes split it.
        let mut request = Vec::new();
        let mut chunk = [0u8; 1024];
        while !request.ends_with(b"\r\n\r\n") && request.len() < 8192 {
            let n = stream.read(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            request.extend_from_slice(&chunk[..n]);
        }
        stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .unwrap();
        String::from_utf8_lossy(&request).into_owned()
    });
    let probe = |url: &str| {
        Command::new("chroot")
            .arg("--userspec=65532:65532")
            .arg(rootfs)
            .args([
                "/usr/bin/wget",
                "--quiet",
                "--tries=1",
                "--timeout=4",
                "--spider",
                url,
            ])
            .status()
            .unwrap()
    };
    assert!(probe(&url).success());
    assert!(
        server
            .join()
            .unwrap()
            .starts_with("GET /healthz HTTP/1.0\r\n")
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    assert_eq!(probe(&format!("http://{closed}/healthz")).code(), Some(1));
}
