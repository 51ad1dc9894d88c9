//! The sandbox's gateways with real pods: Istio's ingress gateway in `istio-system` routes by an
//! Istio Gateway and the VirtualServices bound to it (session affinity with a destination's
//! `Set-Cookie` and a cookie match, delegation behind a root VirtualService), reached on its pod's
//! loopback port, through `kubectl port-forward` and through the mesh proxy; and a Gateway API
//! Gateway of class `istio` gets its `<name>-istio` Service and pod, its status and its routes'.

use crate::common::{Kubectl, eventually};
use serde_json::Value;
use serin_sandbox::runtime::ServingRuntime;
use serin_sandbox::{MeshSettings, Sandbox, SandboxOptions};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PODINFO: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: test}
---
apiVersion: v1
kind: Namespace
metadata: {name: elsewhere}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: podinfo-primary, namespace: test}
spec:
  replicas: 1
  selector: {matchLabels: {app: podinfo-primary}}
  template:
    metadata: {labels: {app: podinfo-primary}}
    spec: {containers: [{name: podinfod, image: "ghcr.io/stefanprodan/podinfo:6.0.0", ports: [{name: http, containerPort: 9898}]}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: podinfo, namespace: test}
spec:
  replicas: 1
  selector: {matchLabels: {app: podinfo}}
  template:
    metadata: {labels: {app: podinfo}}
    spec: {containers: [{name: podinfod, image: "ghcr.io/stefanprodan/podinfo:6.0.1", ports: [{name: http, containerPort: 9898}]}]}
---
apiVersion: v1
kind: Service
metadata: {name: podinfo-primary, namespace: test}
spec: {selector: {app: podinfo-primary}, ports: [{name: http, port: 9898, targetPort: http}]}
---
apiVersion: v1
kind: Service
metadata: {name: podinfo-canary, namespace: test}
spec: {selector: {app: podinfo}, ports: [{name: http, port: 9898, targetPort: http}]}
"#;

const ISTIO_ROUTING: &str = r#"
apiVersion: networking.istio.io/v1beta1
kind: Gateway
metadata: {name: public-gateway, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1beta1
kind: VirtualService
metadata: {name: podinfo, namespace: test}
spec:
  hosts: ["*"]
  gateways: [istio-system/public-gateway]
  http:
  - match:
    - headers: {cookie: {regex: ".*flagger-cookie=xyz.*"}}
    route:
    - destination: {host: podinfo-canary}
  - route:
    - destination: {host: podinfo-primary}
      weight: 50
    - destination: {host: podinfo-canary}
      weight: 50
      headers: {response: {add: {Set-Cookie: "flagger-cookie=xyz; Max-Age=600"}}}
---
apiVersion: networking.istio.io/v1beta1
kind: VirtualService
metadata: {name: root, namespace: istio-system}
spec:
  hosts: [delegated.example.com]
  gateways: [public-gateway]
  http:
  - match: [{uri: {prefix: /podinfo/}}]
    rewrite: {uri: /}
    delegate: {name: podinfo-delegate, namespace: test}
---
apiVersion: networking.istio.io/v1beta1
kind: VirtualService
metadata: {name: podinfo-delegate, namespace: test}
spec:
  http:
  - match: [{headers: {x-canary: {exact: insider}}}]
    route: [{destination: {host: podinfo-canary}}]
  - route: [{destination: {host: podinfo-primary}}]
"#;

const GATEWAY_API: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: podinfo-gateway, namespace: test}
spec:
  gatewayClassName: istio
  listeners:
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: not-ours, namespace: test}
spec:
  gatewayClassName: other
  listeners:
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: podinfo, namespace: test}
spec:
  parentRefs: [{name: podinfo-gateway}]
  hostnames: [podinfo.example.com]
  rules:
  - backendRefs:
    - {name: podinfo-primary, port: 9898, weight: 0}
    - {name: podinfo-canary, port: 9898, weight: 100}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: outsider, namespace: elsewhere}
spec:
  parentRefs: [{name: podinfo-gateway, namespace: test}]
  rules:
  - backendRefs: [{name: podinfo-primary, namespace: test, port: 9898}]
"#;

/// A response read whole.
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// podinfo's `version` field.
    fn version(&self) -> String {
        serde_json::from_str::<Value>(&self.body)
            .ok()
            .and_then(|v| v["version"].as_str().map(String::from))
            .unwrap_or_else(|| panic!("not podinfo's JSON ({}): {}", self.status, self.body))
    }
}

/// One HTTP/1.1 GET of `target` (a path, or an absolute URL for a proxy) to `address` with this
/// Host and extra headers, `Connection: close`, bounded to 10 s.
async fn get(address: SocketAddr, target: &str, host: &str, headers: &[(&str, &str)]) -> Reply {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await?;
        let mut request = format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.take(1 << 20).read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&raw).into_owned())
    };
    let text = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .expect("answered within 10 s")
        .expect("an HTTP exchange");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_string(),
    }
}

/// The loopback address serving `containerPort` of the first pod `selector` finds in `namespace`.
fn pod_port(k: &Kubectl, namespace: &str, selector: &str, container_port: u16) -> SocketAddr {
    let port = k.ok(&[
        "get",
        "pods",
        "-n",
        namespace,
        "-l",
        selector,
        "-o",
        &format!(
            "jsonpath={{.items[0].status.sandboxPorts[?(@.containerPort=={container_port})].hostPort}}"
        ),
    ]);
    format!("127.0.0.1:{}", port.trim())
        .parse()
        .unwrap_or_else(|_| panic!("no sandboxPorts entry for {container_port}: {port:?}"))
}

fn rolled_out(k: &Kubectl, namespace: &str, deployment: &str) {
    k.ok(&[
        "rollout",
        "status",
        "-n",
        namespace,
        &format!("deployment/{deployment}"),
        "--timeout=60s",
    ]);
}

/// `kubectl port-forward -n NAMESPACE TARGET :REMOTE`, killed when dropped.
struct PortForward {
    child: std::process::Child,
    local: u16,
}

impl PortForward {
    fn start(k: &Kubectl, namespace: &str, target: &str, remote: &str) -> Self {
        let mut child = k
            .command(&[
                "port-forward",
                "--address=127.0.0.1",
                "-n",
                namespace,
                target,
                &format!(":{remote}"),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                let _ = sender.send(line);
            }
        });
        let first = lines
            .recv_timeout(Duration::from_secs(20))
            .expect("kubectl port-forward started");
        let local = first
            .strip_prefix("Forwarding from 127.0.0.1:")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("unexpected port-forward output: {first}"));
        PortForward { child, local }
    }
}

impl Drop for PortForward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn object(sandbox: &Sandbox, group: &str, plural: &str, namespace: &str, name: &str) -> Value {
    let info = sandbox.store.resource(group, "v1", plural).unwrap();
    sandbox.store.get(&info, namespace, name).unwrap()
}

fn condition<'a>(conditions: &'a Value, kind: &str) -> &'a Value {
    conditions
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} condition in {conditions}"))
}

async fn start() -> (Sandbox, tempfile::TempDir, Kubectl) {
    let dir = tempfile::tempdir().unwrap();
    let options = SandboxOptions {
        runtime: Some(Arc::new(ServingRuntime::default())),
        mesh: Some(MeshSettings {
            prometheus: None,
            ..MeshSettings::default()
        }),
        ..SandboxOptions::default()
    };
    let sandbox = Sandbox::start_with(dir.path(), options).await.unwrap();
    let kubectl = Kubectl::new(&sandbox);
    (sandbox, dir, kubectl)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_istio_ingress_gateway_routes_with_session_affinity_and_delegation() {
    let (sandbox, _dir, kubectl) = start().await;
    let k = Arc::new(kubectl);
    let setup = k.clone();
    let gateway = tokio::task::spawn_blocking(move || {
        setup.apply(PODINFO, &[]);
        setup.apply(ISTIO_ROUTING, &[]);
        for deployment in ["podinfo-primary", "podinfo"] {
            rolled_out(&setup, "test", deployment);
        }
        rolled_out(&setup, "istio-system", "istio-ingressgateway");
        let service = setup.ok(&[
            "get",
            "service",
            "-n",
            "istio-system",
            "istio-ingressgateway",
            "-o",
            "jsonpath={.spec.ports[*].name}:{.spec.ports[*].port}:{.spec.ports[*].targetPort}:{.spec.selector.istio}",
        ]);
        assert_eq!(service, "http2 https:80 443:8080 8443:ingressgateway");
        pod_port(&setup, "istio-system", "app=istio-ingressgateway", 8080)
    })
    .await
    .unwrap();

    // Weighted 50/50; only the canary's responses carry its destination's Set-Cookie.
    let mut versions = std::collections::BTreeMap::new();
    for _ in 0..60 {
        let reply = get(gateway, "/", "app.example.com", &[]).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let version = reply.version();
        assert_eq!(
            reply.header("set-cookie").is_some(),
            version == "6.0.1",
            "Set-Cookie comes with the canary only"
        );
        if version == "6.0.1" {
            assert_eq!(
                reply.header("set-cookie"),
                Some("flagger-cookie=xyz; Max-Age=600")
            );
        }
        *versions.entry(version).or_insert(0) += 1;
    }
    assert_eq!(versions.len(), 2, "both versions serve: {versions:?}");

    // The cookie keeps a client on the canary.
    for _ in 0..20 {
        let reply = get(
            gateway,
            "/",
            "app.example.com",
            &[("Cookie", "session=1; flagger-cookie=xyz")],
        )
        .await;
        assert_eq!(reply.version(), "6.0.1");
    }

    // Delegation: the root's prefix match and rewrite, the delegate's routes.
    let reply = get(gateway, "/podinfo/version", "delegated.example.com", &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        reply.version(),
        "6.0.0",
        "rewritten to /version on the primary"
    );
    let reply = get(
        gateway,
        "/podinfo/version",
        "delegated.example.com",
        &[("x-canary", "insider")],
    )
    .await;
    assert_eq!(reply.version(), "6.0.1");
    let reply = get(gateway, "/elsewhere", "delegated.example.com", &[]).await;
    assert_eq!(reply.status, 404, "outside the root's match: no route");

    // Through the mesh proxy, by the gateway Service's host.
    let proxy = sandbox.mesh.as_ref().unwrap().address;
    let reply = get(
        proxy,
        "http://istio-ingressgateway.istio-system/",
        "istio-ingressgateway.istio-system",
        &[("Cookie", "flagger-cookie=xyz")],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.version(), "6.0.1");

    // Through kubectl port-forward to the Service's port 80.
    let forward_k = k.clone();
    let forward = tokio::task::spawn_blocking(move || {
        PortForward::start(&forward_k, "istio-system", "svc/istio-ingressgateway", "80")
    })
    .await
    .unwrap();
    let local: SocketAddr = format!("127.0.0.1:{}", forward.local).parse().unwrap();
    let reply = get(
        local,
        "/podinfo/version",
        &format!("delegated.example.com:{}", forward.local),
        &[("x-canary", "insider")],
    )
    .await;
    assert_eq!(reply.version(), "6.0.1");
    drop(forward);

    // The gateway's requests are counted as Istio's gateway reports them.
    let metrics = sandbox.mesh.as_ref().unwrap().telemetry.render();
    let gateway_to = |workload: &str| {
        metrics.lines().any(|line| {
            line.starts_with("istio_requests_total{")
                && line.contains("reporter=\"destination\"")
                && line.contains("source_workload=\"istio-ingressgateway\"")
                && line.contains("source_workload_namespace=\"istio-system\"")
                && line.contains(&format!("destination_workload=\"{workload}\""))
        })
    };
    assert!(gateway_to("podinfo-primary"), "{metrics}");
    assert!(gateway_to("podinfo"), "{metrics}");
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_api_gateway_of_class_istio_is_deployed_and_routes_its_http_routes() {
    let (sandbox, _dir, kubectl) = start().await;
    let k = Arc::new(kubectl);
    let setup = k.clone();
    let gateway = tokio::task::spawn_blocking(move || {
        setup.apply(PODINFO, &[]);
        setup.apply(GATEWAY_API, &[]);
        for deployment in ["podinfo-primary", "podinfo"] {
            rolled_out(&setup, "test", deployment);
        }
        setup.ok(&[
            "wait",
            "-n",
            "test",
            "--for=condition=Programmed",
            "gateway.gateway.networking.k8s.io/podinfo-gateway",
            "--timeout=30s",
        ]);
        rolled_out(&setup, "test", "podinfo-gateway-istio");
        let ports = setup.ok(&[
            "get",
            "service",
            "-n",
            "test",
            "podinfo-gateway-istio",
            "-o",
            "jsonpath={.spec.ports[*].port}",
        ]);
        assert_eq!(ports, "15021 80");
        pod_port(
            &setup,
            "test",
            "gateway.networking.k8s.io/gateway-name=podinfo-gateway",
            80,
        )
    })
    .await
    .unwrap();

    let gw = object(
        &sandbox,
        "gateway.networking.k8s.io",
        "gateways",
        "test",
        "podinfo-gateway",
    );
    let generation = &gw["metadata"]["generation"];
    for kind in ["Accepted", "Programmed"] {
        let c = condition(&gw["status"]["conditions"], kind);
        assert_eq!(c["status"], "True", "{c}");
        assert_eq!(&c["observedGeneration"], generation);
        assert!(c["lastTransitionTime"].is_string());
    }
    assert_eq!(
        gw["status"]["addresses"],
        serde_json::json!([{"type": "Hostname", "value": "podinfo-gateway-istio.test.svc.cluster.local"}])
    );
    let listener = &gw["status"]["listeners"][0];
    assert_eq!(listener["name"], "http");
    assert_eq!(
        listener["attachedRoutes"], 1,
        "the outsider is not attached"
    );
    for kind in ["Accepted", "Programmed", "ResolvedRefs"] {
        assert_eq!(condition(&listener["conditions"], kind)["status"], "True");
    }

    let route = object(
        &sandbox,
        "gateway.networking.k8s.io",
        "httproutes",
        "test",
        "podinfo",
    );
    let parent = &route["status"]["parents"][0];
    assert_eq!(parent["parentRef"]["name"], "podinfo-gateway");
    assert_eq!(parent["controllerName"], "istio.io/gateway-controller");
    assert_eq!(
        condition(&parent["conditions"], "Accepted")["status"],
        "True"
    );
    assert_eq!(
        condition(&parent["conditions"], "ResolvedRefs")["status"],
        "True"
    );
    let outsider = object(
        &sandbox,
        "gateway.networking.k8s.io",
        "httproutes",
        "elsewhere",
        "outsider",
    );
    let refused = condition(&outsider["status"]["parents"][0]["conditions"], "Accepted");
    assert_eq!(refused["status"], "False");
    assert_eq!(refused["reason"], "NotAllowedByListeners");
    let other = object(
        &sandbox,
        "gateway.networking.k8s.io",
        "gateways",
        "test",
        "not-ours",
    );
    assert!(
        other["status"]["conditions"].is_null(),
        "another class is left alone: {other}"
    );
    let services = sandbox.store.resource("", "v1", "services").unwrap();
    assert!(
        sandbox
            .store
            .get(&services, "test", "not-ours-istio")
            .is_err()
    );

    // Weights 0/100: every request reaches the canary, on the pod's port and through the mesh.
    for _ in 0..20 {
        let reply = get(gateway, "/", "podinfo.example.com", &[]).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.version(), "6.0.1");
    }
    let reply = get(gateway, "/", "other.example.com", &[]).await;
    assert_eq!(
        reply.status, 404,
        "no route for a host the route does not name"
    );
    let proxy = sandbox.mesh.as_ref().unwrap().address;
    let reply = get(
        proxy,
        "http://podinfo-gateway-istio.test/",
        "podinfo.example.com",
        &[],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.version(), "6.0.1");

    let forward_k = k.clone();
    let forward = tokio::task::spawn_blocking(move || {
        PortForward::start(&forward_k, "test", "svc/podinfo-gateway-istio", "80")
    })
    .await
    .unwrap();
    let local: SocketAddr = format!("127.0.0.1:{}", forward.local).parse().unwrap();
    let reply = get(local, "/", "podinfo.example.com", &[]).await;
    assert_eq!(reply.version(), "6.0.1");
    drop(forward);

    // Deleting the Gateway takes its Service and Deployment with it.
    let teardown = k.clone();
    let store = sandbox.store.clone();
    let gone = tokio::task::spawn_blocking(move || {
        teardown.ok(&[
            "delete",
            "-n",
            "test",
            "gateway.gateway.networking.k8s.io/podinfo-gateway",
        ]);
        eventually(Duration::from_secs(10), || {
            store
                .get(&services, "test", "podinfo-gateway-istio")
                .is_err()
        })
    })
    .await
    .unwrap();
    assert!(gone, "the gateway's Service is garbage-collected");
    sandbox.stop().await;
}
