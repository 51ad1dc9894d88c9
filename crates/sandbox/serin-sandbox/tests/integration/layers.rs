//! The sandbox's layers depend one way: the API server on no other Serin crate, the cluster and the
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
    // Besides the layers below, the cluster runs the load tester in-process and both read Istio's
    // Go durations with serin-api; nothing else of the operator's is theirs to use.
    let layers: [(&str, &[&str]); 4] = [
        ("apiserver", &[]),
        (
            "cluster",
            &["serin-sandbox-apiserver", "serin-api", "serin-loadtester"],
        ),
        ("mesh", &["serin-sandbox-apiserver", "serin-api"]),
        (
            "serin-sandbox",
            &[
                "serin-sandbox-apiserver",
                "serin-sandbox-cluster",
                "serin-sandbox-mesh",
            ],
        ),
    ];
    for (folder, allowed) in layers {
        let manifest = sandbox.join(folder).join("Cargo.toml");
        for name in serin_dependencies(&manifest) {
            assert!(
                allowed.contains(&name.as_str()),
                "{} depends on {name}; it may depend only on {allowed:?}",
                manifest.display()
            );
        }
    }
}
