//! Server-side printing: the `meta.k8s.io/v1` Table that `kubectl get` asks for, with the column
//! sets of the built-in kinds and the `additionalPrinterColumns` of custom resources.

use crate::registry::ResourceInfo;
use serde_json::{Value, json};

/// The media type of a Table response.
pub const TABLE_CONTENT_TYPE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// Whether an `Accept` header asks for a Table first (kubectl get does, with JSON as fallback).
pub fn wanted(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

/// What each row carries as `object`, from the `includeObject` parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    /// No object.
    None,
    /// A PartialObjectMetadata (the default): what kubectl needs for namespaces and labels.
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Parses `includeObject`; anything unknown means the default.
    pub fn parse(value: Option<&str>) -> Self {
        match value {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

/// One column: its definition and how a cell is computed from the stored object.
struct Column {
    name: String,
    kind: &'static str,
    format: &'static str,
    priority: i64,
    description: String,
    cell: Cell,
}

enum Cell {
    Name,
    Age,
    /// A value found by a (simple) JSONPath, as a CRD column declares it.
    Path(String),
    /// A value computed from the object.
    Computed(fn(&Value) -> Value),
}

fn column(name: &str, priority: i64, cell: Cell) -> Column {
    let (kind, format, description) = match cell {
        Cell::Name => ("string", "name", "Name must be unique within a namespace."),
        Cell::Age => (
            "string",
            "",
            "CreationTimestamp is a timestamp representing the server time when this object was created.",
        ),
        _ => ("string", "", ""),
    };
    Column {
        name: name.into(),
        kind,
        format,
        priority,
        description: description.into(),
        cell,
    }
}

fn computed(name: &str, priority: i64, f: fn(&Value) -> Value) -> Column {
    column(name, priority, Cell::Computed(f))
}

fn none_if_empty(text: String) -> Value {
    if text.is_empty() {
        json!("<none>")
    } else {
        json!(text)
    }
}

fn int(value: &Value) -> Value {
    json!(value.as_i64().unwrap_or(0))
}

fn containers(object: &Value) -> &[Value] {
    object["spec"]["template"]["spec"]["containers"]
        .as_array()
        .map_or(&[], Vec::as_slice)
}

fn joined(items: &[Value], field: &str) -> Value {
    let parts: Vec<&str> = items.iter().filter_map(|c| c[field].as_str()).collect();
    none_if_empty(parts.join(","))
}

fn selector(labels: &Value) -> Value {
    let parts: Vec<String> = labels
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    none_if_empty(parts.join(","))
}

fn pod_status(pod: &Value) -> Value {
    if pod["metadata"]["deletionTimestamp"].is_string() {
        return json!("Terminating");
    }
    let statuses = pod["status"]["containerStatuses"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let waiting = statuses
        .iter()
        .find_map(|s| s["state"]["waiting"]["reason"].as_str());
    // A finished pod shows its container's termination reason (`Completed`, `Error`).
    let terminated = statuses
        .iter()
        .find_map(|s| s["state"]["terminated"]["reason"].as_str());
    if let Some(reason) = terminated.filter(|_| waiting.is_none()) {
        return json!(reason);
    }
    json!(
        waiting
            .or(pod["status"]["phase"].as_str())
            .unwrap_or("Pending")
    )
}

fn pod_ready(pod: &Value) -> Value {
    let total = pod["spec"]["containers"].as_array().map_or(0, Vec::len);
    let ready = pod["status"]["containerStatuses"]
        .as_array()
        .map_or(0, |s| {
            s.iter().filter(|c| c["ready"] == json!(true)).count()
        });
    json!(format!("{ready}/{total}"))
}

fn service_ports(service: &Value) -> Value {
    let ports: Vec<String> = service["spec"]["ports"]
        .as_array()
        .map(|ports| {
            ports
                .iter()
                .map(|p| {
                    format!(
                        "{}/{}",
                        p["port"].as_i64().unwrap_or(0),
                        p["protocol"].as_str().unwrap_or("TCP")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    none_if_empty(ports.join(","))
}

fn endpoint_addresses(endpoints: &Value) -> Value {
    let mut out = Vec::new();
    for subset in endpoints["subsets"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
    {
        for address in subset["addresses"]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
        {
            for port in subset["ports"].as_array().map_or(&[][..], Vec::as_slice) {
                out.push(format!(
                    "{}:{}",
                    address["ip"].as_str().unwrap_or_default(),
                    port["port"].as_i64().unwrap_or(0)
                ));
            }
        }
    }
    none_if_empty(out.join(","))
}

/// An HPA's metrics as `current/target` (`cpu: 12%/50%`), `<unknown>` before the first sync.
fn hpa_targets(hpa: &Value) -> Value {
    let current = hpa["status"]["currentMetrics"].as_array();
    let mut shown = Vec::new();
    for metric in hpa["spec"]["metrics"].as_array().into_iter().flatten() {
        let resource = &metric["resource"];
        if metric["type"] != "Resource" {
            shown.push(format!(
                "{}: <unsupported>",
                metric["type"].as_str().unwrap_or("metric")
            ));
            continue;
        }
        let name = resource["name"].as_str().unwrap_or_default();
        let measured = current
            .and_then(|list| list.iter().find(|m| m["resource"]["name"] == name))
            .map(|m| &m["resource"]["current"]);
        let target = &resource["target"];
        let (now, wanted) = if target["type"] == "Utilization" {
            (
                measured
                    .and_then(|m| m["averageUtilization"].as_i64())
                    .map(|p| format!("{p}%")),
                format!("{}%", target["averageUtilization"].as_i64().unwrap_or(0)),
            )
        } else {
            (
                measured.and_then(|m| m["averageValue"].as_str().map(String::from)),
                target["averageValue"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        };
        shown.push(format!(
            "{name}: {}/{wanted}",
            now.unwrap_or_else(|| "<unknown>".into())
        ));
    }
    json!(if shown.is_empty() {
        "<none>".to_string()
    } else {
        shown.join(", ")
    })
}

/// A Job's state as kubectl 1.32 shows it: Complete, Failed or Running.
fn job_status(job: &Value) -> Value {
    let has = |kind: &str| {
        job["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == kind && c["status"] == "True")
    };
    json!(if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else {
        "Running"
    })
}

/// How long a Job ran (so far), as a human duration.
fn job_duration(job: &Value) -> Value {
    let Some(start) = job["status"]["startTime"].as_str() else {
        return json!("");
    };
    let parse = |t: &str| t.parse::<k8s_openapi::jiff::Timestamp>().ok();
    let end = job["status"]["completionTime"]
        .as_str()
        .and_then(parse)
        .unwrap_or_else(k8s_openapi::jiff::Timestamp::now);
    match parse(start) {
        Some(begun) => json!(human_duration(end.duration_since(begun).as_secs().max(0))),
        None => json!(""),
    }
}

/// A binding's subjects of one kind, comma-separated (`namespace/name` for ServiceAccounts).
fn subjects_of(binding: &Value, kind: &str) -> Value {
    let names: Vec<String> = binding["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["kind"] == kind)
        .map(|s| {
            let name = s["name"].as_str().unwrap_or_default();
            match s["namespace"].as_str() {
                Some(ns) if kind == "ServiceAccount" => format!("{ns}/{name}"),
                _ => name.to_string(),
            }
        })
        .collect();
    json!(names.join(", "))
}

fn data_count(object: &Value) -> Value {
    let count = |field: &str| object[field].as_object().map_or(0, |m| m.len());
    json!(count("data") + count("binaryData") + count("stringData"))
}

fn event_last_seen(event: &Value) -> Value {
    let when = ["lastTimestamp", "eventTime", "firstTimestamp"]
        .iter()
        .find_map(|f| event[*f].as_str().filter(|t| !t.is_empty()))
        .or(event["series"]["lastObservedTime"].as_str());
    json!(when.map_or("<unknown>".to_string(), age_of))
}

fn event_object(event: &Value) -> Value {
    let regarding = &event["involvedObject"];
    json!(format!(
        "{}/{}",
        regarding["kind"]
            .as_str()
            .unwrap_or_default()
            .to_lowercase(),
        regarding["name"].as_str().unwrap_or_default()
    ))
}

fn node_ready(node: &Value) -> Value {
    let ready = node["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .is_some_and(|c| c["status"] == "True");
    let status = if ready { "Ready" } else { "NotReady" };
    if node["spec"]["unschedulable"] == true {
        return json!(format!("{status},SchedulingDisabled"));
    }
    json!(status)
}

fn builtin_columns(info: &ResourceInfo) -> Option<Vec<Column>> {
    use Cell::{Age, Name};
    let name = || column("Name", 0, Name);
    let age = || column("Age", 0, Age);
    let columns = match (info.group.as_str(), info.kind.as_str()) {
        ("", "Pod") => vec![
            name(),
            computed("Ready", 0, pod_ready),
            computed("Status", 0, pod_status),
            computed("Restarts", 0, |p| {
                let restarts: i64 = p["status"]["containerStatuses"].as_array().map_or(0, |s| {
                    s.iter().filter_map(|c| c["restartCount"].as_i64()).sum()
                });
                json!(restarts)
            }),
            age(),
            computed("IP", 1, |p| {
                none_if_empty(p["status"]["podIP"].as_str().unwrap_or_default().into())
            }),
            computed("Node", 1, |p| {
                none_if_empty(p["spec"]["nodeName"].as_str().unwrap_or_default().into())
            }),
            computed("Nominated Node", 1, |_| json!("<none>")),
            computed("Readiness Gates", 1, |_| json!("<none>")),
        ],
        ("apps", "Deployment") => vec![
            name(),
            computed("Ready", 0, |d| {
                json!(format!(
                    "{}/{}",
                    d["status"]["readyReplicas"].as_i64().unwrap_or(0),
                    d["spec"]["replicas"].as_i64().unwrap_or(0)
                ))
            }),
            computed("Up-to-date", 0, |d| int(&d["status"]["updatedReplicas"])),
            computed("Available", 0, |d| int(&d["status"]["availableReplicas"])),
            age(),
            computed("Containers", 1, |d| joined(containers(d), "name")),
            computed("Images", 1, |d| joined(containers(d), "image")),
            computed("Selector", 1, |d| {
                selector(&d["spec"]["selector"]["matchLabels"])
            }),
        ],
        ("apps", "ReplicaSet") => vec![
            name(),
            computed("Desired", 0, |r| int(&r["spec"]["replicas"])),
            computed("Current", 0, |r| int(&r["status"]["replicas"])),
            computed("Ready", 0, |r| int(&r["status"]["readyReplicas"])),
            age(),
            computed("Containers", 1, |r| joined(containers(r), "name")),
            computed("Images", 1, |r| joined(containers(r), "image")),
            computed("Selector", 1, |r| {
                selector(&r["spec"]["selector"]["matchLabels"])
            }),
        ],
        ("", "Service") => vec![
            name(),
            computed("Type", 0, |s| {
                json!(s["spec"]["type"].as_str().unwrap_or("ClusterIP"))
            }),
            computed("Cluster-IP", 0, |s| {
                none_if_empty(s["spec"]["clusterIP"].as_str().unwrap_or_default().into())
            }),
            computed("External-IP", 0, |_| json!("<none>")),
            computed("Port(s)", 0, service_ports),
            age(),
            computed("Selector", 1, |s| selector(&s["spec"]["selector"])),
        ],
        ("", "Endpoints") => vec![name(), computed("Endpoints", 0, endpoint_addresses), age()],
        ("", "Namespace") => vec![
            name(),
            computed("Status", 0, |n| {
                json!(n["status"]["phase"].as_str().unwrap_or("Active"))
            }),
            age(),
        ],
        ("", "Node") => vec![
            name(),
            computed("Status", 0, node_ready),
            computed("Roles", 0, |_| json!("<none>")),
            age(),
            computed("Version", 0, |n| {
                json!(
                    n["status"]["nodeInfo"]["kubeletVersion"]
                        .as_str()
                        .unwrap_or_default()
                )
            }),
        ],
        ("", "Event") | ("events.k8s.io", "Event") => vec![
            computed("Last Seen", 0, event_last_seen),
            computed("Type", 0, |e| e["type"].clone()),
            computed("Reason", 0, |e| e["reason"].clone()),
            computed("Object", 0, event_object),
            computed("Message", 0, |e| e["message"].clone()),
        ],
        ("", "ConfigMap") => vec![name(), computed("Data", 0, data_count), age()],
        ("", "Secret") => vec![
            name(),
            computed("Type", 0, |s| json!(s["type"].as_str().unwrap_or("Opaque"))),
            computed("Data", 0, data_count),
            age(),
        ],
        ("apps", "DaemonSet") => vec![
            name(),
            computed("Desired", 0, |d| {
                int(&d["status"]["desiredNumberScheduled"])
            }),
            computed("Current", 0, |d| {
                int(&d["status"]["currentNumberScheduled"])
            }),
            computed("Ready", 0, |d| int(&d["status"]["numberReady"])),
            computed("Up-to-date", 0, |d| {
                int(&d["status"]["updatedNumberScheduled"])
            }),
            computed("Available", 0, |d| int(&d["status"]["numberAvailable"])),
            computed("Node Selector", 0, |d| {
                selector(&d["spec"]["template"]["spec"]["nodeSelector"])
            }),
            age(),
            computed("Containers", 1, |d| joined(containers(d), "name")),
            computed("Images", 1, |d| joined(containers(d), "image")),
            computed("Selector", 1, |d| {
                selector(&d["spec"]["selector"]["matchLabels"])
            }),
        ],
        ("batch", "Job") => vec![
            name(),
            computed("Status", 0, job_status),
            computed("Completions", 0, |j| {
                json!(format!(
                    "{}/{}",
                    int(&j["status"]["succeeded"]),
                    j["spec"]["completions"].as_i64().unwrap_or(1)
                ))
            }),
            computed("Duration", 0, job_duration),
            age(),
            computed("Containers", 1, |j| joined(containers(j), "name")),
            computed("Images", 1, |j| joined(containers(j), "image")),
            computed("Selector", 1, |j| {
                selector(&j["spec"]["selector"]["matchLabels"])
            }),
        ],
        ("rbac.authorization.k8s.io", "Role" | "ClusterRole") => vec![
            name(),
            computed("Created At", 0, |r| {
                r["metadata"]["creationTimestamp"].clone()
            }),
        ],
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => vec![
            name(),
            computed("Role", 0, |b| {
                let role = &b["roleRef"];
                json!(format!(
                    "{}/{}",
                    role["kind"].as_str().unwrap_or_default(),
                    role["name"].as_str().unwrap_or_default()
                ))
            }),
            age(),
            computed("Users", 1, |b| subjects_of(b, "User")),
            computed("Groups", 1, |b| subjects_of(b, "Group")),
            computed("ServiceAccounts", 1, |b| subjects_of(b, "ServiceAccount")),
        ],
        ("networking.k8s.io", "NetworkPolicy") => vec![
            name(),
            computed("Pod-Selector", 0, |p| {
                selector(&p["spec"]["podSelector"]["matchLabels"])
            }),
            age(),
        ],
        ("coordination.k8s.io", "Lease") => vec![
            name(),
            computed("Holder", 0, |l| {
                json!(l["spec"]["holderIdentity"].as_str().unwrap_or_default())
            }),
            age(),
        ],
        ("autoscaling", "HorizontalPodAutoscaler") => vec![
            name(),
            computed("Reference", 0, |h| {
                let target = &h["spec"]["scaleTargetRef"];
                json!(format!(
                    "{}/{}",
                    target["kind"].as_str().unwrap_or_default(),
                    target["name"].as_str().unwrap_or_default()
                ))
            }),
            computed("Targets", 0, hpa_targets),
            computed("MinPods", 0, |h| {
                json!(h["spec"]["minReplicas"].as_i64().unwrap_or(1))
            }),
            computed("MaxPods", 0, |h| int(&h["spec"]["maxReplicas"])),
            computed("Replicas", 0, |h| int(&h["status"]["currentReplicas"])),
            age(),
        ],
        ("apiextensions.k8s.io", "CustomResourceDefinition") => vec![
            name(),
            Column {
                kind: "date",
                ..column(
                    "Created At",
                    0,
                    Cell::Path(".metadata.creationTimestamp".into()),
                )
            },
        ],
        _ if info.builtin => vec![name(), age()],
        _ => return None,
    };
    Some(columns)
}

fn custom_columns(info: &ResourceInfo) -> Vec<Column> {
    let mut columns = vec![column("Name", 0, Cell::Name)];
    if info.printer_columns.is_empty() {
        columns.push(Column {
            kind: "date",
            ..column("Age", 0, Cell::Path(".metadata.creationTimestamp".into()))
        });
        return columns;
    }
    for printer in &info.printer_columns {
        let kind = match printer["type"].as_str().unwrap_or("string") {
            "integer" => "integer",
            "number" => "number",
            "boolean" => "boolean",
            "date" => "date",
            _ => "string",
        };
        columns.push(Column {
            name: printer["name"].as_str().unwrap_or_default().into(),
            kind,
            format: "",
            priority: printer["priority"].as_i64().unwrap_or(0),
            description: printer["description"].as_str().unwrap_or_default().into(),
            cell: Cell::Path(printer["jsonPath"].as_str().unwrap_or_default().into()),
        });
    }
    columns
}

fn columns_of(info: &ResourceInfo) -> Vec<Column> {
    builtin_columns(info).unwrap_or_else(|| custom_columns(info))
}

/// Go's `HumanDuration`, as `kubectl get` shows ages: "45s", "3m20s", "12m", "5h10m", "3d4h", "2y".
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    let seconds = seconds.max(0);
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{days}d"),
            h => format!("{days}d{h}h"),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if hours < 24 * 365 * 8 {
        return match days % 365 {
            0 => format!("{years}y"),
            d => format!("{years}y{d}d"),
        };
    }
    format!("{years}y")
}

fn age_of(timestamp: &str) -> String {
    let Ok(then) = timestamp.parse::<k8s_openapi::jiff::Timestamp>() else {
        return "<unknown>".into();
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let elapsed = now - then.as_second();
    human_duration(elapsed)
}

/// Evaluates the JSONPath subset CRDs use in printer columns: `.a.b`, `.a[0].b`, and
/// `.a[?(@.type=="Ready")].status`. A missing value is `None`.
pub fn json_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let mut node = object;
    let mut rest = path.trim().trim_start_matches('{').trim_end_matches('}');
    rest = rest.strip_prefix('$').unwrap_or(rest);
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            node = node.get(&after[..end])?;
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']')?;
            let inside = &after[..end];
            rest = &after[end + 1..];
            node = if let Some(filter) = inside.strip_prefix("?(@.") {
                let (field, wanted) = filter.trim_end_matches(')').split_once("==")?;
                let wanted = wanted.trim().trim_matches(['"', '\'']);
                node.as_array()?.iter().find(|item| {
                    let value = &item[field.trim()];
                    value.as_str() == Some(wanted)
                        || serde_json::from_str::<Value>(wanted).ok().as_ref() == Some(value)
                })?
            } else {
                node.get(inside.parse::<usize>().ok()?)?
            };
        } else {
            return None;
        }
    }
    Some(node)
}

fn cell(column: &Column, stored: &Value) -> Value {
    match &column.cell {
        Cell::Name => stored["metadata"]["name"].clone(),
        Cell::Age => json!(
            stored["metadata"]["creationTimestamp"]
                .as_str()
                .map_or("<unknown>".to_string(), age_of)
        ),
        Cell::Path(path) => match json_path(stored, path) {
            None | Some(Value::Null) => Value::Null,
            Some(value @ (Value::Array(_) | Value::Object(_))) => json!(value.to_string()),
            Some(value) => value.clone(),
        },
        Cell::Computed(f) => f(stored),
    }
}

fn row_object(presented: &Value, include: IncludeObject) -> Value {
    match include {
        IncludeObject::None => Value::Null,
        IncludeObject::Object => presented.clone(),
        IncludeObject::Metadata => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": presented["metadata"],
        }),
    }
}

/// Builds the Table of `objects` (as the client's API version shows them). Column definitions are
/// left out when `with_columns` is false, as in every watch event after the first.
pub fn table(
    info: &ResourceInfo,
    objects: &[Value],
    resource_version: &str,
    include: IncludeObject,
    with_columns: bool,
) -> Value {
    let columns = columns_of(info);
    let rows: Vec<Value> = objects
        .iter()
        .map(|presented| {
            // Cells are computed from the stored form, so both Event APIs share one column set.
            let stored = crate::convert::to_storage(info, presented.clone());
            let cells: Vec<Value> = columns.iter().map(|c| cell(c, &stored)).collect();
            json!({"cells": cells, "object": row_object(presented, include)})
        })
        .collect();
    let definitions: Vec<Value> = columns
        .iter()
        .map(|c| {
            json!({"name": c.name, "type": c.kind, "format": c.format,
                   "description": c.description, "priority": c.priority})
        })
        .collect();
    let mut table = json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "rows": rows,
    });
    if with_columns {
        table["columnDefinitions"] = json!(definitions);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    #[test]
    fn human_durations_match_kubectl() {
        let cases = [
            (5, "5s"),
            (119, "119s"),
            (200, "3m20s"),
            (240, "4m"),
            (12 * 60, "12m"),
            (179 * 60, "179m"),
            (5 * 3600 + 600, "5h10m"),
            (30 * 3600, "30h"),
            (3 * 86400 + 4 * 3600, "3d4h"),
            (20 * 86400, "20d"),
            (3 * 365 * 86400 + 86400, "3y1d"),
            (10 * 365 * 86400, "10y"),
            (-1, "0s"),
            (-5, "<invalid>"),
        ];
        for (seconds, expected) in cases {
            assert_eq!(human_duration(seconds), expected, "{seconds}s");
        }
    }

    #[test]
    fn json_path_follows_fields_indexes_and_filters() {
        let object = json!({"status": {"conditions": [
            {"type": "Progressing", "status": "True"},
            {"type": "Promoted", "status": "False", "reason": "Failed"}]}});
        assert_eq!(
            json_path(
                &object,
                r#".status.conditions[?(@.type=="Promoted")].reason"#
            ),
            Some(&json!("Failed"))
        );
        assert_eq!(
            json_path(&object, ".status.conditions[0].type"),
            Some(&json!("Progressing"))
        );
        assert_eq!(json_path(&object, ".status.phase"), None);
    }

    #[test]
    fn deployment_rows_show_ready_counts_and_hide_wide_columns_by_priority() {
        let registry = Registry::with_builtins();
        let info = registry.get("apps", "v1", "deployments").unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let five_minutes_ago = k8s_openapi::jiff::Timestamp::from_second(now - 300).unwrap();
        let deployment = json!({
            "metadata": {"name": "podinfo", "creationTimestamp": five_minutes_ago.to_string()},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "podinfo"}},
                     "template": {"spec": {"containers": [{"name": "podinfod", "image": "podinfo:6.0.0"}]}}},
            "status": {"readyReplicas": 1, "updatedReplicas": 2, "availableReplicas": 1}
        });
        let table = table(info, &[deployment], "7", IncludeObject::Metadata, true);
        let names: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "Name",
                "Ready",
                "Up-to-date",
                "Available",
                "Age",
                "Containers",
                "Images",
                "Selector"
            ]
        );
        let cells = &table["rows"][0]["cells"];
        assert_eq!(cells[0], "podinfo");
        assert_eq!(cells[1], "1/2");
        assert_eq!(cells[2], 2);
        assert!(cells[4].as_str().unwrap().starts_with("5m"), "{}", cells[4]);
        assert_eq!(cells[6], "podinfo:6.0.0");
        assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(table["columnDefinitions"][5]["priority"], 1);
    }
}
