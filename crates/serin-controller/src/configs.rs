//! Config tracking: the ConfigMaps and Secrets a target uses are part of its revision, and the
//! primary runs on `-primary` copies of them, so changing a ConfigMap starts a canary instead of
//! changing the stable version under it.

use crate::cache::Caches;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use serde_json::{Value, json};
use serin_core::revision::{ConfigKind, config_refs, data_checksum, tracked_configs};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Checksums of the configs `target` uses, keyed `configmap/<name>` or `secret/<name>`, or why they
/// cannot be read (a mandatory one is missing).
pub fn observe(
    caches: &Caches,
    namespace: &str,
    target: &Deployment,
) -> Result<BTreeMap<String, String>, String> {
    let Some(pod) = target.spec.as_ref().and_then(|s| s.template.spec.as_ref()) else {
        return Ok(BTreeMap::new());
    };
    let mut config_maps: BTreeMap<String, Arc<ConfigMap>> = BTreeMap::new();
    let mut secrets: BTreeMap<String, Arc<Secret>> = BTreeMap::new();
    for reference in config_refs(pod) {
        match reference.kind {
            ConfigKind::ConfigMap => {
                if let Some(found) = caches.config_map(namespace, &reference.name) {
                    config_maps.insert(reference.name, found);
                }
            }
            ConfigKind::Secret => {
                if let Some(found) = caches.secret(namespace, &reference.name) {
                    secrets.insert(reference.name, found);
                }
            }
        }
    }
    let mut tracked = tracked_configs(
        pod,
        |name| config_maps.get(name).map(|c| &**c),
        |name| secrets.get(name).map(|s| &**s),
    )
    .map_err(|missing| missing.to_string())?;
    // Serving Flagger's Canaries, Secrets get Flagger's checksum (unkeyed): Flagger, started
    // again, must find the checksums it computes, or it would release every Canary anew.
    if serin_api::api_group() == serin_api::ApiGroup::Flagger {
        for (key, checksum) in tracked.iter_mut() {
            if let Some(secret) = key
                .strip_prefix("secret/")
                .and_then(|name| secrets.get(name))
            {
                *checksum = data_checksum(&secret.data.clone().unwrap_or_default());
            }
        }
    }
    Ok(tracked)
}

/// Replaces in `recorded` (a status' `trackedConfigs`) the unkeyed checksums earlier versions (and
/// Flagger) wrote for Secrets with the keyed ones of `current`, where they still match the Secret's
/// data: an upgrade must not look like a change of every tracked Secret. Under Flagger's API group
/// `current` is unkeyed too, and nothing changes.
pub fn upgrade_secret_checksums(
    recorded: &mut BTreeMap<String, String>,
    current: &BTreeMap<String, String>,
    caches: &Caches,
    namespace: &str,
) {
    for (key, value) in recorded.iter_mut() {
        let Some(name) = key.strip_prefix("secret/") else {
            continue;
        };
        let Some(keyed) = current.get(key).filter(|keyed| *keyed != value) else {
            continue;
        };
        let unkeyed = caches
            .secret(namespace, name)
            .map(|secret| data_checksum(&secret.data.clone().unwrap_or_default()));
        if unkeyed.as_ref() == Some(value) {
            *value = keyed.clone();
        }
    }
}

/// The tracked configs as (kind, name) pairs, from the keys of [`observe`]'s map.
pub fn tracked_names(tracked: &BTreeMap<String, String>) -> BTreeSet<(ConfigKind, String)> {
    tracked
        .keys()
        .filter_map(|key| {
            let (kind, name) = key.split_once('/')?;
            let kind = match kind {
                "configmap" => ConfigKind::ConfigMap,
                "secret" => ConfigKind::Secret,
                _ => return None,
            };
            Some((kind, name.to_string()))
        })
        .collect()
}

/// Points every reference to a tracked config in a pod template (JSON) at its `-primary` copy:
/// volumes, projected sources, and `env`/`envFrom` of containers and init containers.
pub fn rename_references(template: &mut Value, tracked: &BTreeSet<(ConfigKind, String)>) {
    // pointer_mut never inserts, so fields the template does not have stay absent.
    let rename = |object: &mut Value, pointer: &str, kind: ConfigKind| {
        if let Some(field) = object.pointer_mut(pointer)
            && let Some(name) = field.as_str()
            && tracked.contains(&(kind, name.to_string()))
        {
            *field = json!(format!("{name}-primary"));
        }
    };
    let Some(spec) = template.get_mut("spec") else {
        return;
    };
    if let Some(volumes) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
        for volume in volumes {
            rename(volume, "/configMap/name", ConfigKind::ConfigMap);
            rename(volume, "/secret/secretName", ConfigKind::Secret);
            if let Some(sources) = volume
                .pointer_mut("/projected/sources")
                .and_then(Value::as_array_mut)
            {
                for source in sources {
                    rename(source, "/configMap/name", ConfigKind::ConfigMap);
                    rename(source, "/secret/name", ConfigKind::Secret);
                }
            }
        }
    }
    for list in ["containers", "initContainers"] {
        let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for container in containers {
            if let Some(env) = container.get_mut("env").and_then(Value::as_array_mut) {
                for var in env {
                    rename(
                        var,
                        "/valueFrom/configMapKeyRef/name",
                        ConfigKind::ConfigMap,
                    );
                    rename(var, "/valueFrom/secretKeyRef/name", ConfigKind::Secret);
                }
            }
            if let Some(sources) = container.get_mut("envFrom").and_then(Value::as_array_mut) {
                for source in sources {
                    rename(source, "/configMapRef/name", ConfigKind::ConfigMap);
                    rename(source, "/secretRef/name", ConfigKind::Secret);
                }
            }
        }
    }
}

/// The `-primary` copies of the tracked configs (JSON, ready to apply), owned by `owner`: same data
/// (and Secret type), same labels.
pub fn primary_copies(
    caches: &Caches,
    namespace: &str,
    tracked: &BTreeSet<(ConfigKind, String)>,
    owner: &Value,
) -> Vec<Value> {
    let metadata = |name: &str, labels: &Option<BTreeMap<String, String>>| {
        json!({"name": format!("{name}-primary"), "namespace": namespace,
               "labels": labels.clone().unwrap_or_default(), "ownerReferences": [owner]})
    };
    tracked
        .iter()
        .filter_map(|(kind, name)| match kind {
            ConfigKind::ConfigMap => {
                let source = caches.config_map(namespace, name)?;
                Some(json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": metadata(name, &source.metadata.labels),
                    "data": source.data.clone().unwrap_or_default(),
                    "binaryData": source.binary_data.clone().unwrap_or_default(),
                }))
            }
            ConfigKind::Secret => {
                let source = caches.secret(namespace, name)?;
                Some(json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": metadata(name, &source.metadata.labels),
                    "type": source.type_.clone().unwrap_or_else(|| "Opaque".into()),
                    "data": source.data.clone().unwrap_or_default(),
                }))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_tracked_references_are_renamed_and_nothing_is_added() {
        let mut template = json!({"spec": {
            "volumes": [{"name": "config", "configMap": {"name": "podinfo-config"}},
                        {"name": "untracked", "configMap": {"name": "other"}},
                        {"name": "scratch", "emptyDir": {}},
                        {"name": "tls", "secret": {"secretName": "podinfo-tls"}}],
            "containers": [{"name": "podinfod",
                "env": [{"name": "A", "value": "1"},
                        {"name": "B", "valueFrom": {"secretKeyRef": {"name": "podinfo-tls", "key": "k"}}}],
                "envFrom": [{"configMapRef": {"name": "podinfo-config"}}]}]}});
        let tracked = tracked_names(&BTreeMap::from([
            ("configmap/podinfo-config".to_string(), "a".to_string()),
            ("secret/podinfo-tls".to_string(), "b".to_string()),
        ]));
        rename_references(&mut template, &tracked);
        assert_eq!(
            template,
            json!({"spec": {
            "volumes": [{"name": "config", "configMap": {"name": "podinfo-config-primary"}},
                        {"name": "untracked", "configMap": {"name": "other"}},
                        {"name": "scratch", "emptyDir": {}},
                        {"name": "tls", "secret": {"secretName": "podinfo-tls-primary"}}],
            "containers": [{"name": "podinfod",
                "env": [{"name": "A", "value": "1"},
                        {"name": "B", "valueFrom": {"secretKeyRef": {"name": "podinfo-tls-primary", "key": "k"}}}],
                "envFrom": [{"configMapRef": {"name": "podinfo-config-primary"}}]}]}})
        );
    }
}
