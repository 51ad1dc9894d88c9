//! Services: resolving a cluster host name (`name.namespace[.svc[.cluster.local]][:port]`) to the
//! loopback addresses of the ready pods a Service selects, as the API server's service proxy and
//! the mesh do.

use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::Store;
use serde_json::{Value, json};
use std::net::SocketAddr;

/// The pod status field where the sandbox's pod runtime says on which loopback address each
/// container port is served: `[{"containerPort": 9898, "address": "127.0.0.1:41234"}]`.
pub const PORTS_FIELD: &str = "sandboxPorts";

/// A host name split into the Service it names and the port asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceHost {
    /// The Service's name.
    pub name: String,
    /// The Service's namespace.
    pub namespace: String,
    /// The Service port asked for, if the host carried one.
    pub port: Option<u16>,
}

/// Why a host did not resolve.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum ResolveError {
    /// The host is not a cluster Service name.
    #[error("{0:?} is not a Service host (name.namespace[.svc[.cluster.local]][:port])")]
    NotAServiceHost(String),
    /// No such Service.
    #[error("service {0} not found")]
    NoService(String),
    /// The Service has no port matching the one asked for.
    #[error("service {0} has no port {1}")]
    NoPort(String, String),
}

/// Splits `host` (optionally with `:port`) into a Service name, namespace and port. A bare `name`
/// resolves in `default_namespace`, as from a pod in that namespace.
pub fn parse_host(host: &str, default_namespace: &str) -> Option<ServiceHost> {
    let host = host.trim().trim_end_matches('.');
    let (name_part, port) = match host.rsplit_once(':') {
        Some((h, p)) => (h, Some(p.parse::<u16>().ok()?)),
        None => (host, None),
    };
    let name_part = name_part.to_ascii_lowercase();
    let labels: Vec<&str> = name_part.split('.').collect();
    let (name, namespace) = match labels.as_slice() {
        [name] => (*name, default_namespace),
        [name, ns] | [name, ns, "svc"] | [name, ns, "svc", "cluster", "local"] => (*name, *ns),
        _ => return None,
    };
    let valid = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    (valid(name) && valid(namespace)).then(|| ServiceHost {
        name: name.to_string(),
        namespace: namespace.to_string(),
        port,
    })
}

fn all(
    store: &Store,
    group: &str,
    version: &str,
    plural: &str,
    namespace: Option<&str>,
) -> Vec<Value> {
    let info = store.resource(group, version, plural).expect("built in");
    store
        .list(
            &info,
            namespace,
            &LabelSelector::default(),
            &FieldSelector::default(),
        )
        .0
}

/// Whether `pod` is Ready and not being deleted.
pub fn is_ready(pod: &Value) -> bool {
    !pod["metadata"]["deletionTimestamp"].is_string()
        && pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Whether `service`'s (non-empty) selector matches `pod`'s labels.
pub fn selects(service: &Value, pod: &Value) -> bool {
    let Some(selector) = service["spec"]["selector"].as_object() else {
        return false;
    };
    !selector.is_empty()
        && selector
            .iter()
            .all(|(k, v)| pod["metadata"]["labels"][k.as_str()] == *v)
}

/// The container port a Service port's `targetPort` means in `pod`: a number, a container port
/// name, or (absent) the Service port itself.
pub fn target_port(service_port: &Value, pod: &Value) -> Option<u64> {
    match &service_port["targetPort"] {
        Value::Number(n) => n.as_u64(),
        Value::String(name) => match name.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
                .find(|p| p["name"] == name.as_str())
                .and_then(|p| p["containerPort"].as_u64()),
        },
        _ => service_port["port"].as_u64(),
    }
}

/// Where `pod` serves `container_port`: the loopback port the serving runtime recorded in the
/// pod's status, if any.
pub fn served_address(pod: &Value, container_port: u64) -> Option<SocketAddr> {
    pod["status"][PORTS_FIELD]
        .as_array()?
        .iter()
        .find(|p| p["containerPort"].as_u64() == Some(container_port))
        .and_then(|p| p["hostPort"].as_u64())
        .and_then(|port| u16::try_from(port).ok())
        .map(|port| SocketAddr::from(([127, 0, 0, 1], port)))
}

/// The Service port a request for `port` (a number or a port name) uses: that port, or with none
/// given the only port, else port 80.
fn service_port<'a>(service: &'a Value, port: Option<&str>) -> Option<&'a Value> {
    let ports = service["spec"]["ports"].as_array()?;
    match port {
        Some(p) => ports.iter().find(|sp| {
            sp["port"].as_u64().map(|n| n.to_string()).as_deref() == Some(p) || sp["name"] == p
        }),
        None if ports.len() == 1 => ports.first(),
        None => ports.iter().find(|sp| sp["port"].as_u64() == Some(80)),
    }
}

/// The ready, served pods behind the Service `namespace/name` with the loopback address each serves
/// `port` (a Service port number or name; `None` for the only port) on, in pod name order. Pods the
/// runtime does not serve (no recorded port) are left out.
pub fn service_backends(
    store: &Store,
    namespace: &str,
    name: &str,
    port: Option<&str>,
) -> Result<Vec<(SocketAddr, Value)>, ResolveError> {
    let services = store.resource("", "v1", "services").expect("built in");
    let key = format!("{name}.{namespace}");
    let service = store
        .get(&services, namespace, name)
        .map_err(|_| ResolveError::NoService(key.clone()))?;
    let port = service_port(&service, port).ok_or_else(|| {
        ResolveError::NoPort(key.clone(), port.unwrap_or("(default)").to_string())
    })?;
    let mut pods = all(store, "", "v1", "pods", Some(namespace));
    pods.sort_by_key(|p| {
        p["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    });
    Ok(pods
        .into_iter()
        .filter(|pod| selects(&service, pod) && is_ready(pod))
        .filter_map(|pod| Some((served_address(&pod, target_port(port, &pod)?)?, pod)))
        .collect())
}

/// The loopback address `pod` serves `port` on (a container port number or name; `None` for its
/// first served port).
pub fn pod_address(pod: &Value, port: Option<&str>) -> Option<SocketAddr> {
    let container_port = match port {
        None => pod["status"][PORTS_FIELD][0]["containerPort"].as_u64()?,
        Some(p) => match p.parse::<u64>() {
            Ok(n) => n,
            Err(_) => target_port(&json!({"targetPort": p}), pod)?,
        },
    };
    served_address(pod, container_port)
}

/// The ready, served pods behind `host` (see [`parse_host`]) with the loopback address each serves
/// the Service port on, in pod name order.
pub fn resolve_pods(
    store: &Store,
    host: &str,
    default_namespace: &str,
) -> Result<Vec<(SocketAddr, Value)>, ResolveError> {
    let target = parse_host(host, default_namespace)
        .ok_or_else(|| ResolveError::NotAServiceHost(host.to_string()))?;
    let port = target.port.map(|p| p.to_string());
    service_backends(store, &target.namespace, &target.name, port.as_deref())
}

/// The loopback addresses of the ready, served pods behind `host`, as [`resolve_pods`] finds them.
pub fn resolve(
    store: &Store,
    host: &str,
    default_namespace: &str,
) -> Result<Vec<SocketAddr>, ResolveError> {
    Ok(resolve_pods(store, host, default_namespace)?
        .into_iter()
        .map(|(address, _)| address)
        .collect())
}
#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str, namespace: &str, port: Option<u16>) -> Option<ServiceHost> {
        Some(ServiceHost {
            name: name.into(),
            namespace: namespace.into(),
            port,
        })
    }

    #[test]
    fn every_cluster_form_of_a_service_host_parses() {
        assert_eq!(
            parse_host("podinfo.test", "default"),
            host("podinfo", "test", None)
        );
        assert_eq!(
            parse_host("podinfo.test.svc", "default"),
            host("podinfo", "test", None)
        );
        assert_eq!(
            parse_host("podinfo.test.svc.cluster.local:9898", "default"),
            host("podinfo", "test", Some(9898))
        );
        assert_eq!(
            parse_host("podinfo.test.svc.cluster.local.", "default"),
            host("podinfo", "test", None)
        );
        assert_eq!(
            parse_host("podinfo-canary", "test"),
            host("podinfo-canary", "test", None)
        );
        assert_eq!(
            parse_host("Podinfo.Test:80", "x"),
            host("podinfo", "test", Some(80))
        );
    }

    #[test]
    fn other_hosts_do_not_parse() {
        for bad in [
            "example.com.org.net",
            "podinfo.test.svc.other.local",
            "podinfo.test:http",
            "podinfo.test:99999",
            "",
            "under_score.test",
            "127.0.0.1:80",
        ] {
            assert_eq!(parse_host(bad, "default"), None, "{bad}");
        }
    }

    #[test]
    fn named_target_ports_map_to_container_ports() {
        let pod =
            json!({"spec": {"containers": [{"ports": [{"name": "http", "containerPort": 9898}]}]}});
        assert_eq!(
            target_port(&json!({"port": 80, "targetPort": "http"}), &pod),
            Some(9898)
        );
        assert_eq!(
            target_port(&json!({"port": 80, "targetPort": 8080}), &pod),
            Some(8080)
        );
        assert_eq!(target_port(&json!({"port": 80}), &pod), Some(80));
        assert_eq!(
            target_port(&json!({"port": 80, "targetPort": "grpc"}), &pod),
            None
        );
    }
}
