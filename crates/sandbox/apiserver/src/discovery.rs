//! Discovery documents (legacy and aggregated v2) and the OpenAPI v3 stub kubectl validates against.

use crate::registry::{Registry, ResourceInfo};
use serde_json::{Value, json};

/// Media type of aggregated discovery responses.
pub const AGGREGATED_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether an Accept header asks for aggregated discovery v2.
pub fn wants_aggregated(accept: &str) -> bool {
    accept.split(',').any(|media| {
        let params: Vec<&str> = media.split(';').map(str::trim).collect();
        params.contains(&"as=APIGroupDiscoveryList")
            && params.contains(&"v=v2")
            && params.contains(&"g=apidiscovery.k8s.io")
    })
}

/// `/version`: the kubectl dispatcher picks its bundled kubectl 1.32 from this.
pub fn version() -> Value {
    json!({
        "major": "1", "minor": "32", "gitVersion": "v1.32.5-serin",
        "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23.0", "compiler": "gc",
        "platform": "linux/amd64"
    })
}

/// `GET /api` in the legacy form.
pub fn api_versions(address: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]})
}

fn group_object(group: &str, versions: &[String]) -> Value {
    let entries: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({"name": group, "versions": entries, "preferredVersion": entries.first().cloned().unwrap_or(json!({}))})
}

/// `GET /apis` in the legacy form.
pub fn api_group_list(registry: &Registry) -> Value {
    let groups: Vec<Value> = registry
        .groups()
        .iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, v)| group_object(g, v))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/<group>`.
pub fn api_group(registry: &Registry, group: &str) -> Option<Value> {
    let versions = registry.groups().get(group)?;
    let mut object = group_object(group, versions);
    object["kind"] = json!("APIGroup");
    object["apiVersion"] = json!("v1");
    Some(object)
}

/// `GET /api/v1` or `/apis/<group>/<version>`: the resources of one group-version.
pub fn api_resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for r in registry.in_group_version(group, version) {
        resources.push(json!({
            "name": r.plural, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind,
            "verbs": verbs(r), "shortNames": r.short_names, "categories": r.categories
        }));
        if r.kind == "ServiceAccount" {
            resources.push(json!({"name": "serviceaccounts/token", "singularName": "",
                "namespaced": true, "group": "authentication.k8s.io", "version": "v1",
                "kind": "TokenRequest", "verbs": ["create"]}));
        }
        if r.kind == "Pod" && r.group.is_empty() {
            resources.push(json!({"name": "pods/log", "singularName": "",
                "namespaced": true, "kind": "Pod", "verbs": ["get"]}));
            resources.push(json!({"name": "pods/eviction", "singularName": "",
                "namespaced": true, "group": "policy", "version": "v1",
                "kind": "Eviction", "verbs": ["create"]}));
        }
        if r.status_subresource {
            resources.push(
                json!({"name": format!("{}/status", r.plural), "singularName": "",
                "namespaced": r.namespaced, "kind": r.kind, "verbs": ["get", "patch", "update"]}),
            );
        }
        if r.scale.is_some() {
            resources.push(json!({"name": format!("{}/scale", r.plural), "singularName": "",
                "namespaced": r.namespaced, "group": "autoscaling", "version": "v1", "kind": "Scale",
                "verbs": ["get", "patch", "update"]}));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}

fn verbs(r: &ResourceInfo) -> &'static [&'static str] {
    r.verbs.names()
}

fn aggregated_resource(r: &ResourceInfo) -> Value {
    let mut subresources = Vec::new();
    if r.status_subresource {
        subresources.push(json!({"subresource": "status",
            "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
            "verbs": ["get", "patch", "update"]}));
    }
    if r.scale.is_some() {
        subresources.push(json!({"subresource": "scale",
            "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "verbs": ["get", "patch", "update"]}));
    }
    if r.kind == "Pod" && r.group.is_empty() {
        subresources.push(json!({"subresource": "log",
            "responseKind": {"group": "", "version": "v1", "kind": "Pod"},
            "verbs": ["get"]}));
        subresources.push(json!({"subresource": "eviction",
            "responseKind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "verbs": ["create"]}));
    }
    if r.kind == "ServiceAccount" {
        subresources.push(json!({"subresource": "token",
            "responseKind": {"group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest"},
            "verbs": ["create"]}));
    }
    json!({
        "resource": r.plural, "singularResource": r.singular,
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "verbs": verbs(r), "shortNames": r.short_names, "categories": r.categories,
        "subresources": subresources
    })
}

/// Aggregated discovery of the core group (`core: true`) or of every other group.
pub fn aggregated(registry: &Registry, core: bool) -> Value {
    let items: Vec<Value> = registry
        .groups()
        .iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| {
                    let resources: Vec<Value> = registry
                        .in_group_version(group, v)
                        .map(aggregated_resource)
                        .collect();
                    json!({"version": v, "freshness": "Current", "resources": resources})
                })
                .collect();
            json!({"metadata": {"name": group}, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

/// `api/<version>` or `apis/<group>/<version>`, as OpenAPI v3 paths name a group-version.
pub fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The operations of one group-version's OpenAPI v3 document: a PATCH operation per kind that
/// declares the `fieldValidation` parameter, which is what kubectl checks before validating on the
/// server (`openapi::group_version` adds the schemas).
pub fn openapi_group_version(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut paths = serde_json::Map::new();
    for r in registry.in_group_version(group, version) {
        let path = if r.namespaced {
            format!(
                "/{}/namespaces/{{namespace}}/{}/{{name}}",
                gv_path(group, version),
                r.plural
            )
        } else {
            format!("/{}/{}/{{name}}", gv_path(group, version), r.plural)
        };
        let mut content = json!({
            "application/json-patch+json": {"schema": {"type": "object"}},
            "application/merge-patch+json": {"schema": {"type": "object"}},
            "application/apply-patch+yaml": {"schema": {"type": "object"}}
        });
        if r.builtin {
            content["application/strategic-merge-patch+json"] =
                json!({"schema": {"type": "object"}});
        }
        paths.insert(path, json!({"patch": {
            "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": r.kind},
            "x-kubernetes-action": "patch",
            "parameters": [
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
                {"name": "force", "in": "query", "schema": {"type": "boolean"}}
            ],
            "requestBody": {"content": content},
            "responses": {"200": {"description": "OK"}}
        }}));
    }
    if paths.is_empty() {
        return None;
    }
    Some(
        json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.5"},
        "paths": paths, "components": {"schemas": {}}}),
    )
}
