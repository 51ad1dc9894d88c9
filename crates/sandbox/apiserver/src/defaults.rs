//! Defaults the API server fills in for built-in kinds, so clients that diff or hash what they
//! wrote against what they read see what a real cluster shows.

use crate::registry::ResourceInfo;
use serde_json::{Value, json};

fn default(object: &mut Value, key: &str, value: Value) {
    if let Some(map) = object.as_object_mut()
        && map.get(key).is_none_or(Value::is_null)
    {
        map.insert(key.into(), value);
    }
}

fn pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    default(spec, "restartPolicy", json!("Always"));
    default(spec, "dnsPolicy", json!("ClusterFirst"));
    default(spec, "schedulerName", json!("default-scheduler"));
    default(spec, "terminationGracePeriodSeconds", json!(30));
    default(spec, "securityContext", json!({}));
    for list in ["containers", "initContainers"] {
        // `get_mut`, not indexing: indexing a missing key would write `initContainers: null`.
        let containers = spec.get_mut(list).and_then(Value::as_array_mut);
        for container in containers.into_iter().flatten() {
            let image = container["image"].as_str().unwrap_or_default().to_string();
            let tag = image
                .rsplit('/')
                .next()
                .unwrap_or("")
                .split_once(':')
                .map(|(_, t)| t);
            let pull = if tag.is_none() || tag == Some("latest") {
                "Always"
            } else {
                "IfNotPresent"
            };
            default(container, "imagePullPolicy", json!(pull));
            default(
                container,
                "terminationMessagePath",
                json!("/dev/termination-log"),
            );
            default(container, "terminationMessagePolicy", json!("File"));
            default(container, "resources", json!({}));
            let ports = container.get_mut("ports").and_then(Value::as_array_mut);
            for port in ports.into_iter().flatten() {
                default(port, "protocol", json!("TCP"));
            }
        }
    }
}

/// Folds a Secret's `stringData` into `data` (base64, overriding the same keys) and drops it, as
/// the API server stores Secrets: readers see `data` only.
fn fold_string_data(secret: &mut Value) {
    use base64::Engine;
    let Some(map) = secret.as_object_mut() else {
        return;
    };
    let Some(Value::Object(plain)) = map.remove("stringData") else {
        return;
    };
    let data = map.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    for (key, value) in plain {
        if let Some(text) = value.as_str() {
            data[key] = json!(base64::engine::general_purpose::STANDARD.encode(text));
        }
    }
}

/// Fills the defaults of `object`, a `info` kind, leaving any value the client set.
pub fn apply(info: &ResourceInfo, object: &mut Value) {
    match (info.group.as_str(), info.kind.as_str()) {
        ("apps", "Deployment") => {
            let spec = &mut object["spec"];
            if !spec.is_object() {
                return;
            }
            default(spec, "replicas", json!(1));
            default(spec, "revisionHistoryLimit", json!(10));
            default(spec, "progressDeadlineSeconds", json!(600));
            default(spec, "strategy", json!({}));
            default(&mut spec["strategy"], "type", json!("RollingUpdate"));
            if spec["strategy"]["type"] == "RollingUpdate" {
                default(&mut spec["strategy"], "rollingUpdate", json!({}));
                default(
                    &mut spec["strategy"]["rollingUpdate"],
                    "maxSurge",
                    json!("25%"),
                );
                default(
                    &mut spec["strategy"]["rollingUpdate"],
                    "maxUnavailable",
                    json!("25%"),
                );
            }
            pod_spec(&mut spec["template"]["spec"]);
        }
        ("apps", "ReplicaSet") => {
            default(&mut object["spec"], "replicas", json!(1));
            pod_spec(&mut object["spec"]["template"]["spec"]);
        }
        ("", "Pod") => {
            pod_spec(&mut object["spec"]);
            default(&mut object["spec"], "serviceAccountName", json!("default"));
            default(&mut object["spec"], "enableServiceLinks", json!(true));
            default(&mut object["spec"], "priority", json!(0));
        }
        ("", "Service") => {
            let spec = &mut object["spec"];
            if !spec.is_object() {
                return;
            }
            default(spec, "type", json!("ClusterIP"));
            default(spec, "sessionAffinity", json!("None"));
            default(spec, "internalTrafficPolicy", json!("Cluster"));
            let ports = spec.get_mut("ports").and_then(Value::as_array_mut);
            for port in ports.into_iter().flatten() {
                default(port, "protocol", json!("TCP"));
                let number = port["port"].clone();
                default(port, "targetPort", number);
            }
        }
        ("", "Secret") => {
            default(object, "type", json!("Opaque"));
            fold_string_data(object);
        }
        ("apps", "DaemonSet") => {
            let spec = &mut object["spec"];
            if !spec.is_object() {
                return;
            }
            default(spec, "revisionHistoryLimit", json!(10));
            default(
                spec,
                "updateStrategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}),
            );
            pod_spec(&mut spec["template"]["spec"]);
        }
        ("batch", "Job") => {
            let spec = &mut object["spec"];
            if !spec.is_object() {
                return;
            }
            default(spec, "completions", json!(1));
            default(spec, "parallelism", json!(1));
            default(spec, "backoffLimit", json!(6));
            default(spec, "completionMode", json!("NonIndexed"));
            default(spec, "suspend", json!(false));
            default(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
            pod_spec(&mut spec["template"]["spec"]);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secrets_string_data_is_stored_as_data() {
        let mut secret = json!({"metadata": {"name": "podinfo-secret"},
            "data": {"kept": "a2VwdA==", "value": "b2xk"}, "stringData": {"value": "s3cr3t"}});
        fold_string_data(&mut secret);
        assert_eq!(
            secret,
            json!({"metadata": {"name": "podinfo-secret"},
                   "data": {"kept": "a2VwdA==", "value": "czNjcjN0"}})
        );
    }
}
