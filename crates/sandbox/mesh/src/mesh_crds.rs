//! The CRDs a mesh brings: Istio's VirtualService, DestinationRule and Gateway, and Gateway API's
//! HTTPRoute and Gateway, served with open schemas so any valid object is stored as written.

use serde_json::{Value, json};
use serin_sandbox_apiserver::store::{Store, WriteOptions};

/// `(group, plural, kind, versions served, storage version)` of each mesh CRD.
const MESH_CRDS: [(&str, &str, &str, &[&str], &str); 5] = [
    (
        "networking.istio.io",
        "virtualservices",
        "VirtualService",
        &["v1alpha3", "v1beta1", "v1"],
        "v1",
    ),
    (
        "networking.istio.io",
        "destinationrules",
        "DestinationRule",
        &["v1alpha3", "v1beta1", "v1"],
        "v1",
    ),
    (
        "networking.istio.io",
        "gateways",
        "Gateway",
        &["v1alpha3", "v1beta1", "v1"],
        "v1",
    ),
    (
        "gateway.networking.k8s.io",
        "httproutes",
        "HTTPRoute",
        &["v1beta1", "v1"],
        "v1",
    ),
    (
        "gateway.networking.k8s.io",
        "gateways",
        "Gateway",
        &["v1beta1", "v1"],
        "v1",
    ),
];

/// The short names the real CRDs declare (`kubectl get vs`).
fn short_names(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        ("networking.istio.io", "virtualservices") => &["vs"],
        ("networking.istio.io", "destinationrules") => &["dr"],
        ("networking.istio.io", "gateways") => &["gw"],
        ("gateway.networking.k8s.io", "gateways") => &["gtw"],
        _ => &[],
    }
}

fn crd(group: &str, plural: &str, kind: &str, versions: &[&str], storage: &str) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| {
            json!({"name": v, "served": true, "storage": *v == storage,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}})
        })
        .collect();
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": plural, "kind": kind, "singular": kind.to_lowercase(),
                      "listKind": format!("{kind}List"), "shortNames": short_names(group, plural)},
            "versions": versions}})
}

/// Serves the mesh CRDs (those already present are left alone).
pub fn install(store: &Store) {
    let crds = store
        .resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        .expect("built in");
    for (group, plural, kind, versions, storage) in MESH_CRDS {
        let _ = store.create(
            &crds,
            None,
            crd(group, plural, kind, versions, storage),
            &WriteOptions::by("serin-sandbox"),
        );
    }
}
