//! `kubectl top` and the HorizontalPodAutoscaler with the real kubectl: serving pods' CPU estimate
//! follows the requests they serve, and an HPA made by `kubectl autoscale` scales on it.

use crate::common;

use crate::common::Kubectl;
use serin_sandbox::SandboxOptions;
use serin_sandbox::runtime::http_get;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn replicas(k: &Kubectl) -> String {
    k.ok(&["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hpa_scales_a_deployment_on_the_cpu_its_requests_cost() {
    let (sandbox, _dir, k) = common::serving_sandbox(SandboxOptions {
        autoscaler_period: Duration::from_secs(1),
        ..SandboxOptions::default()
    })
    .await;
    common::rolled_out_podinfo_deployment(&k, "web", &["--replicas=2"]);
    k.ok(&[
        "set",
        "resources",
        "deployment",
        "web",
        "--requests=cpu=10m",
    ]);
    k.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);

    let top = k.ok(&["top", "pods", "-l", "app=web"]);
    assert!(
        top.starts_with("NAME") && top.contains("CPU(cores)"),
        "{top}"
    );
    assert_eq!(
        top.lines().filter(|l| l.contains(" 1m ")).count(),
        2,
        "idle pods: {top}"
    );
    let node = k.ok(&["top", "node"]);
    assert!(node.contains("sandbox-node"), "{node}");

    assert_eq!(
        k.ok(&[
            "autoscale",
            "deployment",
            "web",
            "--min=1",
            "--max=4",
            "--cpu-percent=50"
        ]),
        "horizontalpodautoscaler.autoscaling/web autoscaled\n"
    );
    // Without a stabilization window the idle Deployment (10% of its request) shrinks at once.
    k.ok(&[
        "patch",
        "hpa",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec":{"behavior":{"scaleDown":{"stabilizationWindowSeconds":0}}}}"#,
    ]);
    assert!(
        common::eventually(Duration::from_secs(20), || replicas(&k) == "1"),
        "scaled down to 1"
    );
    let hpa = k.ok(&["get", "hpa", "web"]);
    assert!(hpa.contains("cpu: 10%/50%"), "{hpa}");
    k.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);

    // Load the remaining pod directly on its loopback port, bounded in count and time.
    let port = k.ok(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={.items[0].status.sandboxPorts[0].hostPort}",
    ]);
    let address: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let load = tokio::spawn(async move {
        let until = Instant::now() + Duration::from_secs(40);
        for _ in 0..2400 {
            if Instant::now() > until {
                break;
            }
            let _ = http_get(address, "/", Duration::from_secs(1)).await;
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
    });
    let scaled = tokio::task::spawn_blocking(move || {
        let k = k;
        let up = common::eventually(Duration::from_secs(40), || {
            replicas(&k).parse::<u32>().unwrap_or(0) > 1
        });
        (k, up)
    })
    .await
    .unwrap();
    let (k, up) = scaled;
    load.abort();
    assert!(up, "the HPA scaled the Deployment up under load");
    let events = k.ok(&["events", "--for", "horizontalpodautoscaler/web"]);
    assert!(events.contains("SuccessfulRescale"), "{events}");
    assert!(
        events.contains("reason: cpu resource utilization (percentage of request) above target"),
        "{events}"
    );
    let described = k.ok(&["describe", "hpa", "web"]);
    assert!(described.contains("ValidMetricFound"), "{described}");
    sandbox.stop().await;
}
