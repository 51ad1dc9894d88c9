//! Prometheus' `kubernetes-pods` job for the sandbox, as the Istio addon's and Flagger's Prometheus
//! configure it with `kubernetes_sd_configs` and relabelling: every running, served pod annotated
//! `prometheus.io/scrape: "true"` is scraped at its `prometheus.io/port` and `prometheus.io/path`,
//! labelled with its namespace, name and labels. The sandbox's Prometheus has no API server to
//! discover pods from, so a controller writes one file discovery file per such pod into the targets
//! directory ([`crate::prometheus::TARGETS_DIR`]) and removes it when the pod stops qualifying.

use crate::prometheus::write_target_groups;
use serde_json::{Map, Value, json};
use serin_sandbox_apiserver::selectors::{FieldSelector, LabelSelector};
use serin_sandbox_apiserver::services::PORTS_FIELD;
use serin_sandbox_apiserver::store::{ChangeType, Store};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;

/// The job of the pods scraped through their annotations.
pub const JOB: &str = "kubernetes-pods";

/// Target files of pods are named `kubernetes-pods_<namespace>_<pod>.json` (neither name may hold
/// a `_`); the controller owns every file with this prefix in the targets directory.
const FILE_PREFIX: &str = "kubernetes-pods_";

/// A Kubernetes label name as a Prometheus label name, as kubernetes_sd's `labelmap` gives it:
/// every character but `[a-zA-Z0-9_]` becomes `_` (`app.kubernetes.io/name` gives
/// `app_kubernetes_io_name`), and a leading digit gets a `_` before it so the name stays valid.
pub fn label_name(name: &str) -> String {
    let mut sanitized: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if sanitized.is_empty() || sanitized.starts_with(|c: char| c.is_ascii_digit()) {
        sanitized.insert(0, '_');
    }
    sanitized
}

/// The file discovery target group that scrapes `pod`, or `None` when it is not to be scraped: not
/// annotated `prometheus.io/scrape: "true"`, not `Running`, terminating (the sandbox's kubelet stops
/// such a pod at once), not served (no `sandboxPorts`), or its `prometheus.io/port` is not one of
/// its ports. Readiness does not matter, as for kubernetes_sd.
pub fn target_group(pod: &Value) -> Option<Value> {
    let metadata = &pod["metadata"];
    let annotations = &metadata["annotations"];
    if annotations["prometheus.io/scrape"].as_str() != Some("true")
        || pod["status"]["phase"].as_str() != Some("Running")
        || metadata["deletionTimestamp"].is_string()
    {
        return None;
    }
    let ports = pod["status"][PORTS_FIELD].as_array()?;
    // No port annotation: the pod's first declared port (which `sandboxPorts` lists first).
    let served = match annotations["prometheus.io/port"].as_str() {
        Some(port) => {
            let port: u64 = port.trim().parse().ok()?;
            ports
                .iter()
                .find(|entry| entry["containerPort"].as_u64() == Some(port))?
        }
        None => ports.first()?,
    };
    let host = served["hostIP"].as_str().unwrap_or("127.0.0.1");
    let host_port = served["hostPort"].as_u64()?;
    let path = annotations["prometheus.io/path"]
        .as_str()
        .filter(|p| !p.is_empty())
        .unwrap_or("/metrics");
    let namespace = metadata["namespace"].as_str().unwrap_or("default");
    let name = metadata["name"].as_str()?;
    let mut labels = Map::new();
    for (key, value) in metadata["labels"].as_object().into_iter().flatten() {
        if let Some(value) = value.as_str() {
            labels.insert(label_name(key), json!(value));
        }
    }
    // After the pod's labels, as the relabelling rules come after `labelmap`: these win.
    labels.insert("job".into(), json!(JOB));
    labels.insert("namespace".into(), json!(namespace));
    labels.insert("pod".into(), json!(name));
    labels.insert("kubernetes_namespace".into(), json!(namespace));
    labels.insert("kubernetes_pod_name".into(), json!(name));
    labels.insert("__metrics_path__".into(), json!(path));
    Some(json!({"targets": [format!("{host}:{host_port}")], "labels": labels}))
}

/// The target file's name (without `.json`) of the pod `namespace/name`.
fn file_name(namespace: &str, name: &str) -> String {
    format!("{FILE_PREFIX}{namespace}_{name}")
}

/// The target files written, by file name, with what each holds.
struct PodTargets {
    dir: PathBuf,
    written: HashMap<String, Value>,
}

impl PodTargets {
    /// Brings `namespace/name`'s file in line with `pod` (`None`: the pod is gone).
    fn update(&mut self, namespace: &str, name: &str, pod: Option<&Value>) {
        let file = file_name(namespace, name);
        let group = pod.and_then(target_group);
        if self.written.get(&file) == group.as_ref() {
            return;
        }
        match group {
            Some(group) => {
                // A failed write is not recorded, so the pod's next change tries again.
                if write_target_groups(&self.dir, &file, &json!([group])).is_ok() {
                    self.written.insert(file, group);
                }
            }
            None => {
                let _ = std::fs::remove_file(self.dir.join(format!("{file}.json")));
                self.written.remove(&file);
            }
        }
    }

    /// Every pod again, and no file for a pod that is gone (also those a previous run left behind).
    fn resync(&mut self, store: &Store) {
        let pods = store.resource("", "v1", "pods").expect("built in");
        let (items, _) = store.list(
            &pods,
            None,
            &LabelSelector::default(),
            &FieldSelector::default(),
        );
        let mut present = std::collections::HashSet::new();
        for pod in &items {
            let (namespace, name) = identity(pod);
            present.insert(file_name(namespace, name));
            self.update(namespace, name, Some(pod));
        }
        self.written.retain(|file, _| present.contains(file));
        for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let file_name = entry.file_name().to_string_lossy().into_owned();
            if let Some(stem) = file_name.strip_suffix(".json")
                && stem.starts_with(FILE_PREFIX)
                && !self.written.contains_key(stem)
            {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

fn identity(pod: &Value) -> (&str, &str) {
    (
        pod["metadata"]["namespace"].as_str().unwrap_or("default"),
        pod["metadata"]["name"].as_str().unwrap_or_default(),
    )
}

/// Keeps a target file in `dir` for every pod to scrape ([`target_group`]) until the returned
/// handle is aborted: all pods at the start, then each pod as it changes.
pub fn spawn(store: Arc<Store>, dir: PathBuf) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        // Subscribed before the first listing, so no change falls between the two.
        let mut changes = store.subscribe();
        let mut targets = PodTargets {
            dir,
            written: HashMap::new(),
        };
        targets.resync(&store);
        loop {
            match changes.recv().await {
                Ok(change) if change.resource == "pods" => {
                    let (namespace, name) = identity(&change.object);
                    let pod = (change.change != ChangeType::Deleted).then_some(&*change.object);
                    targets.update(namespace, name, pod);
                }
                Ok(_) => {}
                // Changes were missed: look at every pod again.
                Err(RecvError::Lagged(_)) => targets.resync(&store),
                Err(RecvError::Closed) => return,
            }
        }
    })
}

/// Removes every pod target file from `dir` (when the sandbox stops: its pods stop serving).
pub fn remove_all(dir: &Path) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let file_name = entry.file_name().to_string_lossy().into_owned();
        if file_name.starts_with(FILE_PREFIX) && file_name.ends_with(".json") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn podinfo_pod() -> Value {
        json!({
            "metadata": {
                "name": "podinfo-7c8d9-x2b4c",
                "namespace": "test",
                "labels": {"app": "podinfo", "pod-template-hash": "7c8d9",
                           "app.kubernetes.io/name": "podinfo", "job": "mine"},
                "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9797"}
            },
            "status": {
                "phase": "Running",
                "sandboxPorts": [
                    {"containerPort": 9898, "name": "http", "hostIP": "127.0.0.1", "hostPort": 40123},
                    {"containerPort": 9797, "name": "http-metrics", "hostIP": "127.0.0.1", "hostPort": 40123},
                    {"containerPort": 8080, "hostIP": "127.0.0.1", "hostPort": 40123}
                ]
            }
        })
    }

    #[test]
    fn an_annotated_pod_is_scraped_at_its_port_with_its_labels() {
        let group = target_group(&podinfo_pod()).expect("scraped");
        assert_eq!(
            group,
            json!({"targets": ["127.0.0.1:40123"], "labels": {
                "app": "podinfo",
                "pod_template_hash": "7c8d9",
                "app_kubernetes_io_name": "podinfo",
                "job": "kubernetes-pods",
                "namespace": "test",
                "pod": "podinfo-7c8d9-x2b4c",
                "kubernetes_namespace": "test",
                "kubernetes_pod_name": "podinfo-7c8d9-x2b4c",
                "__metrics_path__": "/metrics"
            }})
        );
    }

    #[test]
    fn the_path_and_port_annotations_are_optional() {
        let mut pod = podinfo_pod();
        pod["metadata"]["annotations"] =
            json!({"prometheus.io/scrape": "true", "prometheus.io/path": "/stats"});
        pod["status"]["sandboxPorts"][0]["hostPort"] = json!(40999);
        let group = target_group(&pod).unwrap();
        assert_eq!(group["targets"], json!(["127.0.0.1:40999"]), "first port");
        assert_eq!(group["labels"]["__metrics_path__"], "/stats");
    }

    #[test]
    fn pods_not_to_scrape_have_no_target() {
        type Change = fn(&mut Value);
        let cases: [(&str, Change); 6] = [
            ("not annotated", |p| {
                p["metadata"]["annotations"] = json!({})
            }),
            ("scrape false", |p| {
                p["metadata"]["annotations"]["prometheus.io/scrape"] = json!("false")
            }),
            ("pending", |p| p["status"]["phase"] = json!("Pending")),
            ("terminating", |p| {
                p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z")
            }),
            ("not served", |p| {
                p["status"].as_object_mut().unwrap().remove("sandboxPorts");
            }),
            ("undeclared port", |p| {
                p["metadata"]["annotations"]["prometheus.io/port"] = json!("7777")
            }),
        ];
        for (case, change) in cases {
            let mut pod = podinfo_pod();
            change(&mut pod);
            assert_eq!(target_group(&pod), None, "{case}");
        }
    }

    #[test]
    fn label_names_are_sanitised() {
        assert_eq!(
            label_name("app.kubernetes.io/name"),
            "app_kubernetes_io_name"
        );
        assert_eq!(label_name("pod-template-hash"), "pod_template_hash");
        assert_eq!(label_name("version_2"), "version_2");
        assert_eq!(label_name("1st"), "_1st");
    }

    #[test]
    fn files_follow_the_pod_and_stale_ones_go() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("kubernetes-pods_old_gone.json"), "[]").unwrap();
        std::fs::write(dir.path().join("operator.json"), "[]").unwrap();
        let store = Store::new();
        let mut targets = PodTargets {
            dir: dir.path().to_path_buf(),
            written: HashMap::new(),
        };
        targets.resync(&store);
        let names = || {
            let mut names: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        assert_eq!(names(), ["operator.json"], "a previous run's pod file goes");

        let pod = podinfo_pod();
        targets.update("test", "podinfo-7c8d9-x2b4c", Some(&pod));
        let file = dir
            .path()
            .join("kubernetes-pods_test_podinfo-7c8d9-x2b4c.json");
        let written: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(written, json!([target_group(&pod).unwrap()]));

        let mut stopped = pod.clone();
        stopped["status"]["phase"] = json!("Succeeded");
        targets.update("test", "podinfo-7c8d9-x2b4c", Some(&stopped));
        assert!(!file.exists());
        targets.update("test", "podinfo-7c8d9-x2b4c", Some(&pod));
        assert!(file.exists());
        targets.update("test", "podinfo-7c8d9-x2b4c", None);
        assert_eq!(names(), ["operator.json"]);

        targets.update("test", "podinfo-7c8d9-x2b4c", Some(&pod));
        remove_all(dir.path());
        assert_eq!(names(), ["operator.json"]);
    }
}
