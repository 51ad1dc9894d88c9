//! The sandbox's nodes: their names, their Node objects, and which taints a DaemonSet's pods tolerate.

use serde_json::{Value, json};

/// Name of the sandbox's first node; the others add `-2`, `-3`, ... ([`node_name`]).
pub const NODE_NAME: &str = "sandbox-node";

/// Name of the sandbox's node number `index` (from 1): [`NODE_NAME`], then `sandbox-node-2`, ...
pub fn node_name(index: usize) -> String {
    if index <= 1 {
        NODE_NAME.to_string()
    } else {
        format!("{NODE_NAME}-{index}")
    }
}

/// The Node object of the sandbox's node number `index` (from 1): Ready, with room for any pod,
/// labelled with its hostname, OS, architecture and a zone of its own (`zone-<index>`).
pub(crate) fn sandbox_node(index: usize) -> Value {
    let name = node_name(index);
    json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "topology.kubernetes.io/zone": format!("zone-{index}")}},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "sandbox kubelet is ready"}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
            "allocatable": {"cpu": "1k", "memory": "1Ti", "pods": "1M"}, "capacity": {"cpu": "1k", "memory": "1Ti", "pods": "1M"},
            // Every field the Node schema requires, so `kubectl get nodes -o yaml` applies back.
            "nodeInfo": {"kubeletVersion": "v1.32.5-serin", "kubeProxyVersion": "v1.32.5-serin",
                "architecture": "amd64", "operatingSystem": "linux", "osImage": "Serin sandbox",
                "kernelVersion": "sandbox", "containerRuntimeVersion": "serin-sandbox://0.1.0",
                "machineID": format!("sandbox-machine-{index}"), "systemUUID": format!("sandbox-node-{index}"),
                "bootID": format!("sandbox-boot-{index}")}}})
}

/// The tolerations the DaemonSet controller gives every daemon pod, so node conditions and a
/// cordon do not keep it off a node.
pub(crate) fn daemon_tolerations(spec: &Value) -> Vec<Value> {
    let mut added = vec![
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if spec["hostNetwork"] == true {
        added.push(("node.kubernetes.io/network-unavailable", "NoSchedule"));
    }
    let mut tolerations: Vec<Value> = spec["tolerations"].as_array().cloned().unwrap_or_default();
    for (key, effect) in added {
        if !tolerations
            .iter()
            .any(|t| t["key"] == key && t["effect"] == effect)
        {
            tolerations.push(json!({"key": key, "operator": "Exists", "effect": effect}));
        }
    }
    tolerations
}
