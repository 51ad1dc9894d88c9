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
    }
}
