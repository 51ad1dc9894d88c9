//! The sandbox's layers depend one way: the API server on none of the others, the cluster and the
//! mesh on the API server only, and nothing below on serin-sandbox, which wires them. Cargo refuses
//! only cycles; this test refuses a dependency that would let a lower layer reach a higher one.

use std::path::Path;

/// The Serin crates that `manifest` (a Cargo.toml) lists under `[dependencies]`.
fn serin_dependencies(manifest: &Path) -> Vec<String> {
    let text =
        std::fs::read_to_string(manifest).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let mut in_dependencies = false;
    let mut found = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
            continue;
        }
        let name = line
            .split(['.', ' ', '='])
            .next()
            .unwrap_or_default()
            .to_string();
        if in_dependencies && name.starts_with("serin-") {
            found.push(name);
        }
    }
    found
}

#[test]
fn each_sandbox_layer_depends_only_on_the_layers_below_it() {
    let sandbox = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let layers: [(&str, &[&str]); 3] = [
        ("apiserver", &[]),
        ("cluster", &["serin-sandbox-apiserver"]),
        ("mesh", &["serin-sandbox-apiserver"]),
    ];
    for (folder, allowed_sandbox_crates) in layers {
        let manifest = sandbox.join(folder).join("Cargo.toml");
        let sandbox_crates: Vec<String> = serin_dependencies(&manifest)
            .into_iter()
            .filter(|name| name.starts_with("serin-sandbox"))
            .collect();
        assert_eq!(
            sandbox_crates,
            allowed_sandbox_crates,
            "{} may depend only on these sandbox crates",
            manifest.display()
        );
    }
    // The operator's crates are not the sandbox's to use: they test against it, not the other way.
    for folder in ["apiserver", "cluster", "mesh", "serin-sandbox"] {
        let manifest = sandbox.join(folder).join("Cargo.toml");
        for name in serin_dependencies(&manifest) {
            assert!(
                ["serin-sandbox", "serin-api", "serin-loadtester"]
                    .iter()
                    .any(|allowed| name.starts_with(allowed)),
                "{} depends on {name}, a crate of the operator",
                manifest.display()
            );
        }
    }
}
