//! Node and proxy commands with the real kubectl: cordon, drain (evictions), uncordon; the API
//! server's service and pod proxy (`kubectl get --raw`, `kubectl proxy`); `kubectl debug`.

use crate::common;

use serin_sandbox::SandboxOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordon_drain_uncordon_and_proxies() {
    // One node, so cordoning it leaves the evicted pods nowhere to go.
    let (sandbox, _dir, k) = common::serving_sandbox(SandboxOptions {
        nodes: 1,
        ..SandboxOptions::default()
    })
    .await;
    k.ok(&[
        "create",
        "deployment",
        "web",
        "--image=ghcr.io/stefanprodan/podinfo:6.0.0",
        "--port=9898",
        "--replicas=2",
    ]);
    k.ok(&[
        "expose",
        "deployment",
        "web",
        "--port=80",
        "--target-port=9898",
    ]);
    k.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);

    // The API server's proxy reaches the pods behind a Service, and a pod itself.
    let version = k.ok(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/services/web:80/proxy/version",
    ]);
    assert!(version.contains("\"version\":\"6.0.0\""), "{version}");
    let pod = k.ok(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ]);
    let health = k.ok(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/default/pods/{pod}:9898/proxy/healthz"),
    ]);
    assert!(health.contains("OK"), "{health}");
    let missing = k.fails(
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/services/nope/proxy/",
        ],
        None,
    );
    assert!(
        missing.contains("Error from server (NotFound): services \"nope\" not found"),
        "{missing}"
    );

    // cordon → new pods wait; drain evicts; uncordon lets the replacements run.
    assert_eq!(
        k.ok(&["cordon", "sandbox-node"]),
        "node/sandbox-node cordoned\n"
    );
    let nodes = k.ok(&["get", "nodes"]);
    assert!(nodes.contains("Ready,SchedulingDisabled"), "{nodes}");
    let drained = k.ok(&[
        "drain",
        "sandbox-node",
        "--ignore-daemonsets",
        "--timeout=30s",
    ]);
    assert!(
        drained.contains("evicted") && drained.contains("node/sandbox-node drained"),
        "{drained}"
    );
    let pending = k.ok(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={.items[*].status.phase}",
    ]);
    assert_eq!(
        pending, "Pending Pending",
        "replacements wait while the node is cordoned"
    );
    let events = k.ok(&["events", "--types=Warning"]);
    assert!(
        events.contains("FailedScheduling") && events.contains("1 node(s) were unschedulable"),
        "{events}"
    );
    let unavailable = k.fails(
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/services/web/proxy/",
        ],
        None,
    );
    assert!(
        unavailable.contains("no endpoints available for service \"web\""),
        "{unavailable}"
    );
    k.ok(&["uncordon", "sandbox-node"]);
    k.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);

    // kubectl debug adds an ephemeral container through its subresource.
    let pod = k.ok(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ]);
    let (ok, out, err) = k.run(
        &[
            "debug",
            &pod,
            "--image=busybox",
            "--profile=general",
            "--container=dbg",
        ],
        Some(""),
    );
    assert!(ok, "{out}{err}");
    assert_eq!(
        k.ok(&[
            "get",
            "pod",
            &pod,
            "-o",
            "jsonpath={.spec.ephemeralContainers[*].name}"
        ]),
        "dbg"
    );
    sandbox.stop().await;
}
