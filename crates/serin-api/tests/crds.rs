//! The checked-in CRD manifests must match what the Rust types generate.

use std::path::PathBuf;

fn repo_file(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
}

#[test]
fn checked_in_crds_match_the_types() {
    let generated = serin_api::crd::crds_yaml();
    for file in ["artifacts/crds/serin.yaml", "charts/serin/crds/serin.yaml"] {
        let on_disk = std::fs::read_to_string(repo_file(file))
            .unwrap_or_else(|e| panic!("cannot read {file}: {e}; run `make crds`"));
        assert!(
            on_disk == generated,
            "{file} is stale: the CRD types changed; run `make crds` and commit the result"
        );
    }
}

#[test]
fn checked_in_field_reference_matches_the_types() {
    serin_api::reference::check_checked_in(
        "docs/reference/crds.md",
        &serin_api::reference::crds_markdown(),
    )
    .unwrap_or_else(|problem| panic!("{problem}"));
}

#[test]
fn canary_crd_has_flaggers_shape() {
    let crds = serin_api::crd::crds();
    let canary = crds.iter().find(|c| c.spec.names.kind == "Canary").unwrap();
    assert_eq!(canary.spec.group, "serin.dev");
    assert_eq!(canary.spec.scope, "Namespaced");
    assert_eq!(canary.spec.names.plural, "canaries");
    assert_eq!(
        canary.spec.names.categories.as_deref(),
        Some(&["all".to_string()][..])
    );
    let version = &canary.spec.versions[0];
    assert_eq!(version.name, "v1beta1");
    assert!(version.subresources.as_ref().unwrap().status.is_some());
    let columns: Vec<(&str, Option<i32>)> = version
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| (c.name.as_str(), c.priority))
        .collect();
    assert_eq!(
        columns,
        vec![
            ("Status", None),
            ("Weight", None),
            ("Suspended", Some(1)),
            ("FailedChecks", Some(1)),
            ("Interval", Some(1)),
            ("Mirror", Some(1)),
            ("StepWeight", Some(1)),
            ("StepWeights", Some(1)),
            ("MaxWeight", Some(1)),
            ("LastTransitionTime", None),
        ]
    );
    for crd in &crds {
        assert_eq!(
            crd.metadata.annotations.as_ref().unwrap()["helm.sh/resource-policy"],
            "keep"
        );
    }
}

#[test]
fn every_schema_is_structural_and_uses_kubernetes_integer_formats() {
    let yaml = serin_api::crd::crds_yaml();
    assert!(
        !yaml.contains("uint32") && !yaml.contains("uint64"),
        "Kubernetes knows only int32/int64"
    );
    for crd in serin_api::crd::crds() {
        let schema = crd.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap();
        let json = serde_json::to_value(schema).unwrap();
        assert_structural(&json, &crd.spec.names.kind);
    }
}

/// A structural schema gives every node a type, unless it preserves unknown fields or is int-or-string.
fn assert_structural(node: &serde_json::Value, path: &str) {
    let obj = node.as_object().unwrap();
    let exempt = obj.get("x-kubernetes-int-or-string").is_some()
        || obj.get("x-kubernetes-preserve-unknown-fields").is_some();
    assert!(exempt || obj.contains_key("type"), "{path} has no type");
    for key in ["anyOf", "oneOf", "allOf"] {
        assert!(
            !obj.contains_key(key) || exempt,
            "{path} uses {key} without a type"
        );
    }
    if let Some(props) = obj.get("properties").and_then(|p| p.as_object()) {
        for (name, child) in props {
            assert_structural(child, &format!("{path}.{name}"));
        }
    }
    if let Some(items) = obj.get("items") {
        assert_structural(items, &format!("{path}[]"));
    }
    if let Some(extra) = obj.get("additionalProperties").filter(|v| v.is_object()) {
        assert_structural(extra, &format!("{path}{{}}"));
    }
}
