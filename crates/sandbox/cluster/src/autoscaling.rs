//! Resource metrics and autoscaling: the `metrics.k8s.io/v1beta1` API that `kubectl top` reads, and a
//! HorizontalPodAutoscaler controller that scales on the same numbers.
//!
//! Pods in the sandbox share one process, so their CPU cannot be measured; the pod runtime reports
//! an estimate instead (see [`crate::pod_runtime::PodRuntime::usage`]): a serving pod's CPU follows
//! the requests it served, so load from `hey` makes an HPA scale out as it would on a cluster.

use crate::pod_runtime::PodRuntime;
pub use crate::pod_runtime::{ContainerUsage, idle_usage};
use serde_json::{Value, json};
use serin_sandbox_apiserver::registry::ResourceInfo;
use serin_sandbox_apiserver::scale;
use serin_sandbox_apiserver::selectors::{FieldSelector, LabelSelector};
use serin_sandbox_apiserver::status::ApiError;
use serin_sandbox_apiserver::store::{Part, Store, WriteOptions};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn quantity_cpu(millis: u64) -> String {
    format!("{millis}m")
}

fn quantity_memory(bytes: u64) -> String {
    format!("{}Ki", bytes / 1024)
}

fn pods(store: &Store) -> ResourceInfo {
    store.resource("", "v1", "pods").expect("built in")
}

fn running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running" && pod["metadata"]["deletionTimestamp"].is_null()
}

fn pod_metrics(pod: &Value, usage: &[ContainerUsage], at: &str) -> Value {
    let metadata = &pod["metadata"];
    json!({
        "kind": "PodMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": {"name": metadata["name"], "namespace": metadata["namespace"],
            "labels": metadata["labels"], "creationTimestamp": at},
        "timestamp": at, "window": "30s",
        "containers": usage.iter().map(|c| json!({"name": c.name,
            "usage": {"cpu": quantity_cpu(c.cpu_millis), "memory": quantity_memory(c.memory_bytes)}}))
            .collect::<Vec<_>>(),
    })
}

/// Answers `GET /apis/metrics.k8s.io/v1beta1/...`: PodMetrics of running pods (by namespace, name
/// and label selector) and NodeMetrics summing the pods on each node.
pub fn serve(
    store: &Store,
    runtime: &dyn PodRuntime,
    info: &ResourceInfo,
    namespace: Option<&str>,
    name: Option<&str>,
    labels: &LabelSelector,
) -> Result<Value, ApiError> {
    let at = now_rfc3339();
    let (all, _) = store.list(&pods(store), None, labels, &FieldSelector::default());
    let running: Vec<&Value> = all.iter().filter(|p| running(p)).collect();
    let not_found = |name: &str| {
        ApiError::not_found(
            &format!("{}.{}", info.plural, info.group),
            &info.group,
            &info.plural,
            name,
        )
    };
    let items: Vec<Value> = if info.kind == "PodMetrics" {
        running
            .iter()
            .filter(|p| namespace.is_none_or(|ns| p["metadata"]["namespace"] == ns))
            .filter(|p| name.is_none_or(|n| p["metadata"]["name"] == n))
            .map(|p| pod_metrics(p, &runtime.usage(p), &at))
            .collect()
    } else {
        let nodes = store.resource("", "v1", "nodes").expect("built in");
        let (nodes, _) = store.list(
            &nodes,
            None,
            &LabelSelector::default(),
            &FieldSelector::default(),
        );
        nodes
            .iter()
            .filter(|n| name.is_none_or(|wanted| n["metadata"]["name"] == wanted))
            .map(|node| {
                let node_name = &node["metadata"]["name"];
                let (mut cpu, mut memory) = (0, 0);
                for pod in running.iter().filter(|p| &p["spec"]["nodeName"] == node_name) {
                    for container in runtime.usage(pod) {
                        cpu += container.cpu_millis;
                        memory += container.memory_bytes;
                    }
                }
                json!({"kind": "NodeMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
                    "metadata": {"name": node_name, "labels": node["metadata"]["labels"], "creationTimestamp": at},
                    "timestamp": at, "window": "30s",
                    "usage": {"cpu": quantity_cpu(cpu), "memory": quantity_memory(memory)}})
            })
            .collect()
    };
    match name {
        Some(name) => items.into_iter().next().ok_or_else(|| not_found(name)),
        None => Ok(
            json!({"kind": format!("{}List", info.kind), "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {}, "items": items}),
        ),
    }
}

/// A quantity such as `250m`, `1`, `0.5`, `128Mi` or `1G` in thousandths of its unit (millicores
/// for CPU, millibytes for memory), for comparing usage with requests.
pub fn parse_quantity_milli(text: &str) -> Option<f64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let value: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1000.0,
        "m" => 1.0,
        "k" => 1e6,
        "M" => 1e9,
        "G" => 1e12,
        "Ki" => 1024.0 * 1000.0,
        "Mi" => 1024.0 * 1024.0 * 1000.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0 * 1000.0,
        _ => return None,
    };
    Some(value * factor)
}

/// The HorizontalPodAutoscaler controller's memory: recent recommendations per HPA, for the
/// scale-down stabilization window.
pub struct Autoscaler {
    store: Arc<Store>,
    runtime: Arc<dyn PodRuntime>,
    recommendations: BTreeMap<(String, String), VecDeque<(Instant, i64)>>,
}

/// A metric's verdict: the replicas it asks for and what `status.currentMetrics` says of it.
struct Measured {
    replicas: i64,
    current: Value,
    description: String,
    above: bool,
}

impl Autoscaler {
    /// An autoscaler over `store`'s HPAs, measuring pods through `runtime`.
    pub fn new(store: Arc<Store>, runtime: Arc<dyn PodRuntime>) -> Self {
        Autoscaler {
            store,
            runtime,
            recommendations: BTreeMap::new(),
        }
    }

    /// One sync of every HPA, as the controller does every `--horizontal-pod-autoscaler-sync-period`.
    pub fn sync(&mut self) {
        let Some(hpas) = self
            .store
            .resource("autoscaling", "v2", "horizontalpodautoscalers")
        else {
            return;
        };
        let (all, _) = self.store.list(
            &hpas,
            None,
            &LabelSelector::default(),
            &FieldSelector::default(),
        );
        for hpa in all {
            self.sync_one(&hpas, &hpa);
        }
    }

    fn sync_one(&mut self, hpas: &ResourceInfo, hpa: &Value) {
        let namespace = hpa["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let name = hpa["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let spec = &hpa["spec"];
        let target = &spec["scaleTargetRef"];
        let min = spec["minReplicas"].as_i64().unwrap_or(1);
        let max = spec["maxReplicas"].as_i64().unwrap_or(min);
        let mut status = json!({
            "observedGeneration": hpa["metadata"]["generation"],
            "currentReplicas": 0, "desiredReplicas": 0,
            "lastScaleTime": hpa["status"]["lastScaleTime"],
        });
        let mut conditions = Vec::new();
        let (info, object) = match self.scale_target(&namespace, target) {
            Ok(found) => found,
            Err(message) => {
                conditions.push(condition("AbleToScale", false, "FailedGetScale", &message));
                self.event(hpa, "Warning", "FailedGetScale", &message);
                return self.write_status(hpas, hpa, status, conditions);
            }
        };
        let scale = scale::scale_of(&info, &object);
        let current = scale["spec"]["replicas"].as_i64().unwrap_or(0);
        status["currentReplicas"] = json!(scale["status"]["replicas"]);
        conditions.push(condition(
            "AbleToScale",
            true,
            "ReadyForNewScale",
            "recommended size matches current size",
        ));
        if current == 0 && min > 0 {
            status["desiredReplicas"] = json!(0);
            conditions.push(condition(
                "ScalingActive",
                false,
                "ScalingDisabled",
                "scaling is disabled since the replica count of the target is zero",
            ));
            return self.write_status(hpas, hpa, status, conditions);
        }
        let selector = scale["status"]["selector"].as_str().unwrap_or_default();
        let pods: Vec<Value> = LabelSelector::parse(selector)
            .map(|labels| {
                self.store
                    .list(
                        &pods(&self.store),
                        Some(&namespace),
                        &labels,
                        &FieldSelector::default(),
                    )
                    .0
            })
            .unwrap_or_default()
            .into_iter()
            .filter(running)
            .collect();
        let default_metrics = json!([{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 80}}}]);
        let metrics = spec["metrics"]
            .as_array()
            .filter(|m| !m.is_empty())
            .cloned()
            .unwrap_or_else(|| default_metrics.as_array().cloned().unwrap_or_default());
        let mut measured = Vec::new();
        for metric in &metrics {
            match self.measure(metric, &pods, current) {
                Ok(m) => measured.push(m),
                Err((reason, message)) => {
                    conditions.push(condition("ScalingActive", false, reason, &message));
                    self.event(hpa, "Warning", reason, &message);
                    return self.write_status(hpas, hpa, status, conditions);
                }
            }
        }
        conditions.push(condition(
            "ScalingActive",
            true,
            "ValidMetricFound",
            "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)",
        ));
        status["currentMetrics"] = json!(
            measured
                .iter()
                .map(|m| m.current.clone())
                .collect::<Vec<_>>()
        );
        let strongest = measured.iter().max_by_key(|m| m.replicas);
        let proposed = strongest.map_or(current, |m| m.replicas);
        // Scale-up is limited to doubling (or 4 more pods) per sync; scale-down takes the highest
        // recommendation of the stabilization window (300 s unless the HPA's behavior says).
        let up_limit = (current * 2).max(current + 4);
        let window = |direction: &str, default: i64| {
            spec["behavior"][direction]["stabilizationWindowSeconds"]
                .as_i64()
                .unwrap_or(default)
                .max(0) as u64
        };
        let history = self
            .recommendations
            .entry((namespace.clone(), name.clone()))
            .or_default();
        let now = Instant::now();
        // A new HPA starts from the current size, so it too waits out the scale-down window.
        if history.is_empty() {
            history.push_back((now, current));
        }
        history.push_back((now, proposed));
        let down_window = Duration::from_secs(window("scaleDown", 300));
        let up_window = Duration::from_secs(window("scaleUp", 0));
        history.retain(|(at, _)| now.duration_since(*at) <= down_window.max(up_window));
        let within = |span: Duration| {
            history
                .iter()
                .filter(move |(at, _)| now.duration_since(*at) <= span)
                .map(|(_, replicas)| *replicas)
        };
        let up = within(up_window).min().unwrap_or(proposed);
        let down = within(down_window).max().unwrap_or(proposed);
        let mut desired = if up > current {
            up.min(up_limit)
        } else if down < current {
            down
        } else {
            current
        };
        let mut limited = "DesiredWithinRange";
        if desired > max {
            desired = max;
            limited = "TooManyReplicas";
        } else if desired < min {
            desired = min;
            limited = "TooFewReplicas";
        }
        conditions.push(condition(
            "ScalingLimited",
            limited != "DesiredWithinRange",
            limited,
            match limited {
                "TooManyReplicas" => {
                    "the desired replica count is more than the maximum replica count"
                }
                "TooFewReplicas" => {
                    "the desired replica count is less than the minimum replica count"
                }
                _ => "the desired count is within the acceptable range",
            },
        ));
        status["desiredReplicas"] = json!(desired);
        if desired != current {
            let reason = match strongest {
                Some(m) if desired > current && m.above => {
                    format!("{} above target", m.description)
                }
                Some(m) if desired > current => m.description.clone(),
                _ => "All metrics below target".to_string(),
            };
            let write = WriteOptions::by("horizontal-pod-autoscaler");
            let scaled = scale::set_scale(
                &self.store,
                &info,
                &namespace,
                target["name"].as_str().unwrap_or_default(),
                &json!({"spec": {"replicas": desired}}),
                &write,
            );
            if scaled.is_ok() {
                status["lastScaleTime"] = json!(now_rfc3339());
                conditions[0] = condition(
                    "AbleToScale",
                    true,
                    "SucceededRescale",
                    &format!("the HPA controller was able to update the target scale to {desired}"),
                );
                self.event(
                    hpa,
                    "Normal",
                    "SuccessfulRescale",
                    &format!("New size: {desired}; reason: {reason}"),
                );
            }
        }
        self.write_status(hpas, hpa, status, conditions);
    }

    fn scale_target(
        &self,
        namespace: &str,
        target: &Value,
    ) -> Result<(ResourceInfo, Value), String> {
        let api_version = target["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let kind = target["kind"].as_str().unwrap_or_default();
        let name = target["name"].as_str().unwrap_or_default();
        let info = self
            .store
            .registry()
            .all()
            .find(|r| r.group == group && r.version == version && r.kind == kind && r.scale.is_some())
            .cloned()
            .ok_or_else(|| {
                format!("the HPA controller was unable to get the target's current scale: no scale subresource for {api_version}, Kind={kind}")
            })?;
        let object = self.store.get(&info, namespace, name).map_err(|e| {
            format!(
                "the HPA controller was unable to get the target's current scale: {}",
                e.message
            )
        })?;
        Ok((info, object))
    }

    /// One metric over the target's running pods.
    fn measure(
        &self,
        metric: &Value,
        pods: &[Value],
        current: i64,
    ) -> Result<Measured, (&'static str, String)> {
        let kind = metric["type"].as_str().unwrap_or_default();
        if kind != "Resource" {
            return Err((
                "FailedGetMetric",
                format!(
                    "the sandbox measures only Resource metrics (cpu, memory), not {kind} metrics"
                ),
            ));
        }
        let resource = metric["resource"]["name"].as_str().unwrap_or_default();
        if resource != "cpu" && resource != "memory" {
            return Err((
                "FailedGetResourceMetric",
                format!("unknown resource {resource:?}"),
            ));
        }
        if pods.is_empty() {
            return Err((
                "FailedGetResourceMetric",
                format!(
                    "failed to get {resource} utilization: did not receive metrics for targeted pods (pods might be unready)"
                ),
            ));
        }
        let (mut used, mut requested) = (0.0, 0.0);
        for pod in pods {
            let usage = self.runtime.usage(pod);
            for container in pod["spec"]["containers"].as_array().into_iter().flatten() {
                let container_name = container["name"].as_str().unwrap_or_default();
                let request = container["resources"]["requests"][resource]
                    .as_str()
                    .map(String::from)
                    .or_else(|| {
                        container["resources"]["requests"][resource]
                            .as_i64()
                            .map(|n| n.to_string())
                    })
                    .and_then(|q| parse_quantity_milli(&q));
                let Some(request) = request else {
                    if metric["resource"]["target"]["type"] == "Utilization" {
                        return Err((
                            "FailedGetResourceMetric",
                            format!(
                                "failed to get {resource} utilization: missing request for {resource} in container {container_name} of Pod {}",
                                pod["metadata"]["name"].as_str().unwrap_or_default()
                            ),
                        ));
                    }
                    continue;
                };
                requested += request;
                if let Some(u) = usage.iter().find(|u| u.name == container_name) {
                    used += if resource == "cpu" {
                        u.cpu_millis as f64
                    } else {
                        u.memory_bytes as f64 * 1000.0
                    };
                }
            }
        }
        let count = pods.len() as f64;
        let target = &metric["resource"]["target"];
        let (ratio, current_value, description) = if target["type"] == "Utilization" {
            let wanted = target["averageUtilization"].as_f64().unwrap_or(80.0);
            let utilization = if requested > 0.0 {
                100.0 * used / requested
            } else {
                0.0
            };
            (
                utilization / wanted,
                json!({"averageUtilization": utilization.round() as i64,
                    "averageValue": average_quantity(resource, used / count)}),
                format!("{resource} resource utilization (percentage of request)"),
            )
        } else {
            let wanted = target["averageValue"]
                .as_str()
                .and_then(parse_quantity_milli)
                .unwrap_or(1.0)
                .max(1.0);
            (
                (used / count) / wanted,
                json!({"averageValue": average_quantity(resource, used / count)}),
                format!("{resource} resource"),
            )
        };
        // Within 10% of the target the HPA leaves the size alone, as Kubernetes' tolerance does.
        let replicas = if (ratio - 1.0).abs() <= 0.1 {
            current
        } else {
            (ratio * count).ceil() as i64
        };
        Ok(Measured {
            replicas,
            current: json!({"type": "Resource", "resource": {"name": resource, "current": current_value}}),
            description,
            above: ratio > 1.0,
        })
    }

    fn event(&self, hpa: &Value, kind: &str, reason: &str, message: &str) {
        if let Some(events) = self.store.resource("", "v1", "events") {
            crate::controllers::write_event(
                &self.store,
                &events,
                hpa,
                "HorizontalPodAutoscaler",
                "horizontal-pod-autoscaler",
                (kind, reason),
                message.to_string(),
            );
        }
    }

    fn write_status(
        &self,
        hpas: &ResourceInfo,
        hpa: &Value,
        mut status: Value,
        conditions: Vec<Value>,
    ) {
        let previous = &hpa["status"]["conditions"];
        // A condition's transition time only moves when its status flips.
        let conditions: Vec<Value> = conditions
            .into_iter()
            .map(|mut c| {
                if let Some(old) = previous
                    .as_array()
                    .and_then(|list| list.iter().find(|o| o["type"] == c["type"]))
                    && old["status"] == c["status"]
                {
                    c["lastTransitionTime"] = old["lastTransitionTime"].clone();
                }
                c
            })
            .collect();
        status["conditions"] = json!(conditions);
        if status["lastScaleTime"].is_null() {
            status.as_object_mut().map(|s| s.remove("lastScaleTime"));
        }
        if hpa["status"] == status {
            return;
        }
        let mut updated = hpa.clone();
        updated["status"] = status;
        let _ = self.store.update(
            hpas,
            hpa["metadata"]["namespace"].as_str().unwrap_or_default(),
            hpa["metadata"]["name"].as_str().unwrap_or_default(),
            updated,
            Part::Status,
            &WriteOptions::by("horizontal-pod-autoscaler"),
        );
    }
}

fn average_quantity(resource: &str, milli: f64) -> String {
    if resource == "cpu" {
        format!("{}m", milli.round() as i64)
    } else {
        format!("{}", (milli / 1000.0).round() as i64)
    }
}

fn condition(kind: &str, status: bool, reason: &str, message: &str) -> Value {
    json!({"type": kind, "status": if status { "True" } else { "False" }, "reason": reason,
        "message": message, "lastTransitionTime": now_rfc3339()})
}

/// Runs the HorizontalPodAutoscaler controller every `period` until the handle is aborted.
pub fn spawn(
    store: Arc<Store>,
    runtime: Arc<dyn PodRuntime>,
    period: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut autoscaler = Autoscaler::new(store, runtime);
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            autoscaler.sync();
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_compare_in_thousandths() {
        assert_eq!(parse_quantity_milli("250m"), Some(250.0));
        assert_eq!(parse_quantity_milli("1"), Some(1000.0));
        assert_eq!(parse_quantity_milli("0.5"), Some(500.0));
        assert_eq!(parse_quantity_milli("1Ki"), Some(1_024_000.0));
        assert_eq!(parse_quantity_milli("lots"), None);
    }
}
