//! Revision identity: what counts as "a new version" of the target.
//!
//! A revision is the pod template plus the content of the ConfigMaps and Secrets it uses.

use k8s_openapi::api::core::v1::{ConfigMap, PodSpec, PodTemplateSpec, Secret};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Hex sha256 of the canonical JSON of a pod template (keys sorted, absent fields omitted).
///
/// Unlike Flagger's hash of the Go struct dump, it does not change when a library adds an unset
/// field to PodSpec, so an operator upgrade never looks like a new revision.
pub fn pod_template_hash(template: &PodTemplateSpec) -> String {
    let value = serde_json::to_value(template).expect("a PodTemplateSpec always serializes");
    let mut canonical = Vec::new();
    write_canonical(&value, &mut canonical);
    hex(&Sha256::digest(&canonical))
}

/// Writes `value` as JSON with object keys in byte order, whatever map type serde_json was built with.
pub(crate) fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => write_canonical_map(map, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => write_json(scalar, out),
    }
}

/// [`write_canonical`] of one JSON object.
pub(crate) fn write_canonical_map(map: &serde_json::Map<String, Value>, out: &mut Vec<u8>) {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    out.push(b'{');
    for (i, (key, item)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_json(key, out);
        out.push(b':');
        write_canonical(item, out);
    }
    out.push(b'}');
}

/// Appends `value` as compact JSON, as its `to_string` would give it.
fn write_json(value: &(impl Serialize + ?Sized), out: &mut Vec<u8>) {
    serde_json::to_writer(out, value).expect("a string or scalar always serializes to a Vec");
}

/// Whether `hash` was recorded by another operator: every hash Serin records is
/// [`pod_template_hash`]'s 64 hex digits, and Flagger's are ten or so letters and digits of its
/// own alphabet (an FNV hash of a Go struct dump, which cannot be computed outside Go).
pub fn is_foreign_hash(hash: &str) -> bool {
    !(hash.len() == 64
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

/// Takes over a status another operator wrote: a foreign `lastAppliedSpec` stands for the target's
/// pod template as it is now (`hash`), and so does a `lastPromotedSpec` equal to it, so a release
/// in flight carries on and a finished one is not released again. Returns whether it did.
pub fn adopt_foreign_revision(status: &mut serin_api::CanaryStatus, hash: &str) -> bool {
    let Some(foreign) = status
        .last_applied_spec
        .clone()
        .filter(|applied| is_foreign_hash(applied))
    else {
        return false;
    };
    status.last_applied_spec = Some(hash.to_string());
    if status.last_promoted_spec.as_deref() == Some(foreign.as_str()) {
        status.last_promoted_spec = Some(hash.to_string());
    }
    true
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Kind of a configuration object a pod can reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigKind {
    /// A ConfigMap.
    ConfigMap,
    /// A Secret.
    Secret,
}

impl ConfigKind {
    /// Prefix used in `status.trackedConfigs` keys.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigKind::ConfigMap => "configmap",
            ConfigKind::Secret => "secret",
        }
    }
}

/// A ConfigMap or Secret referenced by a pod spec.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConfigRef {
    /// ConfigMap or Secret.
    pub kind: ConfigKind,
    /// Name of the object.
    pub name: String,
    /// Whether the pod starts without it (`optional: true` on every reference).
    pub optional: bool,
}

impl ConfigRef {
    /// Key in `status.trackedConfigs`, e.g. `configmap/podinfo-config`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.kind.as_str(), self.name)
    }
}

/// Every ConfigMap and Secret a pod spec references: volumes, projected volumes, and `env`/`envFrom`
/// of containers and init containers. A reference is optional only if every mention of it is.
pub fn config_refs(pod: &PodSpec) -> Vec<ConfigRef> {
    let mut found: BTreeMap<(ConfigKind, String), bool> = BTreeMap::new();
    let mut note = |kind: ConfigKind, name: &str, optional: Option<bool>| {
        if name.is_empty() {
            return;
        }
        let optional = optional.unwrap_or(false);
        found
            .entry((kind, name.to_string()))
            .and_modify(|all_optional| *all_optional &= optional)
            .or_insert(optional);
    };
    for volume in pod.volumes.iter().flatten() {
        if let Some(cm) = &volume.config_map {
            note(ConfigKind::ConfigMap, &cm.name, cm.optional);
        }
        if let Some(secret) = &volume.secret {
            note(
                ConfigKind::Secret,
                secret.secret_name.as_deref().unwrap_or(""),
                secret.optional,
            );
        }
        for source in volume
            .projected
            .iter()
            .flat_map(|p| p.sources.iter().flatten())
        {
            if let Some(cm) = &source.config_map {
                note(ConfigKind::ConfigMap, &cm.name, cm.optional);
            }
            if let Some(secret) = &source.secret {
                note(ConfigKind::Secret, &secret.name, secret.optional);
            }
        }
    }
    let containers = pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten());
    for container in containers {
        for env in container.env.iter().flatten() {
            if let Some(from) = &env.value_from {
                if let Some(cm) = &from.config_map_key_ref {
                    note(ConfigKind::ConfigMap, &cm.name, cm.optional);
                }
                if let Some(secret) = &from.secret_key_ref {
                    note(ConfigKind::Secret, &secret.name, secret.optional);
                }
            }
        }
        for from in container.env_from.iter().flatten() {
            if let Some(cm) = &from.config_map_ref {
                note(ConfigKind::ConfigMap, &cm.name, cm.optional);
            }
            if let Some(secret) = &from.secret_ref {
                note(ConfigKind::Secret, &secret.name, secret.optional);
            }
        }
    }
    found
        .into_iter()
        .map(|((kind, name), optional)| ConfigRef {
            kind,
            name,
            optional,
        })
        .collect()
}

/// Annotation that excludes a ConfigMap or Secret from tracking when its value starts with `disable`.
pub const CONFIG_TRACKING_ANNOTATION: &str = "serin.dev/config-tracking";
/// Flagger's name for the same annotation, honoured so existing objects keep working.
pub const FLAGGER_CONFIG_TRACKING_ANNOTATION: &str = "flagger.app/config-tracking";

/// Secret types whose content is tracked; others (service-account tokens, docker configs) are not.
pub const TRACKED_SECRET_TYPES: [&str; 4] = [
    "Opaque",
    "kubernetes.io/basic-auth",
    "kubernetes.io/ssh-auth",
    "kubernetes.io/tls",
];

/// A mandatory ConfigMap or Secret the target references does not exist.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{} {} referenced by the target does not exist; create it or mark the reference optional", match .0.kind { ConfigKind::ConfigMap => "ConfigMap", ConfigKind::Secret => "Secret" }, .0.name)]
pub struct MissingConfig(pub ConfigRef);

fn tracking_disabled(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations.is_some_and(|a| {
        [
            CONFIG_TRACKING_ANNOTATION,
            FLAGGER_CONFIG_TRACKING_ANNOTATION,
        ]
        .iter()
        .any(|key| a.get(*key).is_some_and(|v| v.starts_with("disable")))
    })
}

/// Checksum of a config object's data: hex of the first 8 bytes of sha256 over its JSON.
pub fn data_checksum<T: Serialize>(data: &T) -> String {
    let json = serde_json::to_vec(data).expect("config data always serializes");
    hex(&Sha256::digest(&json)[..8])
}

/// Checksum of a Secret's data, keyed with the Secret's uid: hex of the first 8 bytes of
/// HMAC-SHA256. `status.trackedConfigs` is readable by whoever may read the Canary, often more
/// people than may read the Secret; without the uid (which only Secret readers see) a checksum
/// cannot be used to test guesses of the Secret's content. A Secret deleted and created again with
/// the same data gets a new uid, so its checksum changes and a release starts.
pub fn secret_checksum<T: Serialize>(uid: &str, data: &T) -> String {
    use hmac::{KeyInit, Mac};
    let json = serde_json::to_vec(data).expect("config data always serializes");
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(uid.as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(&json);
    hex(&mac.finalize().into_bytes()[..8])
}

/// Checksums of the configs a pod spec uses, keyed as in `status.trackedConfigs`.
///
/// `config_map` and `secret` look objects up by name in the target's namespace. Objects annotated
/// to disable tracking, Secrets of untracked types and missing optional references are skipped.
pub fn tracked_configs<'a>(
    pod: &PodSpec,
    config_map: impl Fn(&str) -> Option<&'a ConfigMap>,
    secret: impl Fn(&str) -> Option<&'a Secret>,
) -> Result<BTreeMap<String, String>, MissingConfig> {
    let mut tracked = BTreeMap::new();
    for reference in config_refs(pod) {
        let checksum = match reference.kind {
            ConfigKind::ConfigMap => match config_map(&reference.name) {
                Some(cm) if tracking_disabled(cm.metadata.annotations.as_ref()) => None,
                Some(cm) => Some(data_checksum(&cm.data.clone().unwrap_or_default())),
                None if reference.optional => None,
                None => return Err(MissingConfig(reference)),
            },
            ConfigKind::Secret => match secret(&reference.name) {
                Some(s) if tracking_disabled(s.metadata.annotations.as_ref()) => None,
                Some(s)
                    if !TRACKED_SECRET_TYPES.contains(&s.type_.as_deref().unwrap_or("Opaque")) =>
                {
                    None
                }
                Some(s) => Some(secret_checksum(
                    s.metadata.uid.as_deref().unwrap_or_default(),
                    &s.data.clone().unwrap_or_default(),
                )),
                None if reference.optional => None,
                None => return Err(MissingConfig(reference)),
            },
        };
        if let Some(checksum) = checksum {
            tracked.insert(reference.key(), checksum);
        }
    }
    Ok(tracked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(v: Value) -> PodTemplateSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn hash_ignores_key_order_and_changes_with_content() {
        let a = template(
            json!({"metadata": {"labels": {"app": "podinfo", "tier": "web"}},
            "spec": {"containers": [{"name": "podinfo", "image": "podinfo:6.0.0"}]}}),
        );
        let b = template(
            json!({"spec": {"containers": [{"image": "podinfo:6.0.0", "name": "podinfo"}]},
            "metadata": {"labels": {"tier": "web", "app": "podinfo"}}}),
        );
        let c = template(
            json!({"metadata": {"labels": {"app": "podinfo", "tier": "web"}},
            "spec": {"containers": [{"name": "podinfo", "image": "podinfo:6.0.1"}]}}),
        );
        assert_eq!(pod_template_hash(&a), pod_template_hash(&b));
        assert_ne!(pod_template_hash(&a), pod_template_hash(&c));
        assert_eq!(pod_template_hash(&a).len(), 64);
    }

    #[test]
    fn hash_is_the_sha256_of_the_canonical_json() {
        let t = template(json!({"spec": {"containers": [{"name": "a", "image": "b"}]}}));
        let expected = hex(&Sha256::digest(
            br#"{"spec":{"containers":[{"image":"b","name":"a"}]}}"#,
        ));
        assert_eq!(pod_template_hash(&t), expected);
    }

    #[test]
    fn finds_every_kind_of_reference() {
        let pod: PodSpec = serde_json::from_value(json!({
            "volumes": [
                {"name": "v1", "configMap": {"name": "cm-vol"}},
                {"name": "v2", "secret": {"secretName": "sec-vol", "optional": true}},
                {"name": "v3", "projected": {"sources": [{"configMap": {"name": "cm-proj"}}, {"secret": {"name": "sec-proj"}}]}}
            ],
            "containers": [{"name": "app", "env": [
                {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm-env", "key": "a"}}},
                {"name": "B", "valueFrom": {"secretKeyRef": {"name": "sec-env", "key": "b"}}}
            ], "envFrom": [{"configMapRef": {"name": "cm-from"}}]}],
            "initContainers": [{"name": "init", "envFrom": [{"secretRef": {"name": "sec-init"}}]}]
        }))
        .unwrap();
        let keys: Vec<(String, bool)> = config_refs(&pod)
            .iter()
            .map(|r| (r.key(), r.optional))
            .collect();
        assert_eq!(
            keys,
            vec![
                ("configmap/cm-env".into(), false),
                ("configmap/cm-from".into(), false),
                ("configmap/cm-proj".into(), false),
                ("configmap/cm-vol".into(), false),
                ("secret/sec-env".into(), false),
                ("secret/sec-init".into(), false),
                ("secret/sec-proj".into(), false),
                ("secret/sec-vol".into(), true),
            ]
        );
    }

    #[test]
    fn tracked_configs_skip_disabled_untracked_and_optional_missing() {
        let pod: PodSpec = serde_json::from_value(json!({
            "volumes": [
                {"name": "a", "configMap": {"name": "settings"}},
                {"name": "b", "configMap": {"name": "ignored"}},
                {"name": "c", "secret": {"secretName": "registry"}},
                {"name": "d", "secret": {"secretName": "absent", "optional": true}},
                {"name": "e", "secret": {"secretName": "token"}}
            ],
            "containers": [{"name": "app"}]
        }))
        .unwrap();
        let settings: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": "settings"}, "data": {"k": "v"}}))
                .unwrap();
        let ignored: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "ignored",
            "annotations": {"flagger.app/config-tracking": "disabled"}}, "data": {"k": "v"}}))
        .unwrap();
        let registry: Secret = serde_json::from_value(json!({"metadata": {"name": "registry"},
            "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "e30="}}))
        .unwrap();
        let token: Secret = serde_json::from_value(
            json!({"metadata": {"name": "token"}, "data": {"t": "c2VjcmV0"}}),
        )
        .unwrap();
        let cms = [settings, ignored];
        let secrets = [registry, token];
        let find_cm = |n: &str| cms.iter().find(|c| c.metadata.name.as_deref() == Some(n));
        let find_secret = |n: &str| {
            secrets
                .iter()
                .find(|s| s.metadata.name.as_deref() == Some(n))
        };
        let tracked = tracked_configs(&pod, find_cm, find_secret).unwrap();
        assert_eq!(
            tracked.keys().collect::<Vec<_>>(),
            vec!["configmap/settings", "secret/token"]
        );
        assert_eq!(tracked["configmap/settings"].len(), 16);

        let missing = tracked_configs(&pod, |_| None, find_secret).unwrap_err();
        assert_eq!(missing.0.key(), "configmap/ignored");
        assert!(
            missing
                .to_string()
                .contains("create it or mark the reference optional")
        );
    }

    #[test]
    fn a_secret_checksum_depends_on_its_uid_so_it_cannot_be_guessed_from_the_data() {
        let data = BTreeMap::from([("password".to_string(), "hunter2".to_string())]);
        let keyed = secret_checksum("uid-1", &data);
        assert_eq!(keyed.len(), 16);
        assert_eq!(keyed, secret_checksum("uid-1", &data.clone()));
        assert_ne!(
            keyed,
            data_checksum(&data),
            "an unkeyed hash tells a guess apart"
        );
        assert_ne!(keyed, secret_checksum("uid-2", &data));
        let other = BTreeMap::from([("password".to_string(), "hunter3".to_string())]);
        assert_ne!(keyed, secret_checksum("uid-1", &other));
    }

    #[test]
    fn checksum_changes_with_data() {
        let a = BTreeMap::from([("k".to_string(), "v1".to_string())]);
        let b = BTreeMap::from([("k".to_string(), "v2".to_string())]);
        assert_ne!(data_checksum(&a), data_checksum(&b));
        assert_eq!(data_checksum(&a), data_checksum(&a.clone()));
    }
}
