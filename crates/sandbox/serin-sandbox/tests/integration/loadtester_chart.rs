//! Serin's load tester chart installed by a real Helm (`scripts/install-tools.sh`) in the sandbox
//! with its token in a Secret: the pod waits for the Secret as a kubelet does, then, reached
//! through the mesh, refuses to move a gate without the token and moves it with the token, while
//! reading a gate stays open; the chart's NetworkPolicy is stored (the sandbox does not enforce it).

use crate::common;

use serin_sandbox::mesh_proxy::{MeshClient, MeshResponse};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const TOKEN: &str = "lt-5e6f7a8b9c0d";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

/// `helm` with its own cache and configuration directories in `home`, pointed at `kubeconfig`.
fn helm(home: &Path, kubeconfig: &Path, args: &[&str]) -> String {
    let binary = std::env::var_os("HELM")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/tools/helm"));
    assert!(
        binary.exists(),
        "Helm is not installed at {}: run scripts/install-tools.sh (make test does)",
        binary.display()
    );
    let out = Command::new(binary)
        .args(args)
        .current_dir(workspace())
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "helm {args:?}:\n{stdout}\n{stderr}");
    stdout.into_owned()
}

async fn post(
    proxy: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> MeshResponse {
    let mut client = MeshClient::connect(proxy).await.unwrap();
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    tokio::time::timeout(
        Duration::from_secs(20),
        client.post(
            &format!("http://loadtester.test{path}"),
            &all,
            body.to_string(),
        ),
    )
    .await
    .expect("the load tester answers within 20 s")
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_load_tester_moves_gates_only_for_its_token() {
    let (sandbox, dir, k) = common::mesh_sandbox().await;
    let proxy = sandbox.mesh.as_ref().expect("a mesh").address;
    k.ok(&["create", "namespace", "test"]);
    let install = helm(
        &dir.path().join("helm"),
        &sandbox.kubeconfig,
        &[
            "install",
            "loadtester",
            "charts/loadtester",
            "-n",
            "test",
            "--set",
            "auth.secretName=loadtester-token",
            "--set",
            "cmd.maxTasks=8",
        ],
    );
    assert!(install.contains("STATUS: deployed"), "{install}");

    // Until its Secret exists the pod does not start, and says why.
    let waiting = common::eventually(Duration::from_secs(20), || {
        let (_, out) = k.output(&[
            "get",
            "pods",
            "-n",
            "test",
            "-o",
            "jsonpath={.items[*].status.containerStatuses[*].state.waiting}",
        ]);
        out.contains("CreateContainerConfigError")
            && out.contains(r#"secret \"loadtester-token\" not found"#)
    });
    assert!(
        waiting,
        "{}",
        k.output(&["get", "pods", "-n", "test", "-o", "yaml"]).1
    );
    k.ok(&[
        "create",
        "secret",
        "generic",
        "loadtester-token",
        "-n",
        "test",
        &format!("--from-literal=token={TOKEN}"),
    ]);
    k.ok(&[
        "rollout",
        "status",
        "deployment/loadtester",
        "-n",
        "test",
        "--timeout=60s",
    ]);

    let gate = r#"{"name":"podinfo","namespace":"test"}"#;
    let refused = post(proxy, "/gate/open", &[], gate).await;
    assert_eq!(refused.status, 401, "{}", refused.body);
    assert!(
        refused.body.contains("Authorization: Bearer <token>") && !refused.body.contains(TOKEN),
        "{}",
        refused.body
    );
    let wrong = post(
        proxy,
        "/gate/open",
        &[("authorization", "Bearer lt-guess")],
        gate,
    )
    .await;
    assert_eq!(wrong.status, 401);
    assert_eq!(post(proxy, "/gate/check", &[], gate).await.status, 403);
    let bearer = format!("Bearer {TOKEN}");
    let opened = post(proxy, "/gate/open", &[("authorization", &bearer)], gate).await;
    assert_eq!(opened.status, 202, "{}", opened.body);
    let check = post(proxy, "/gate/check", &[], gate).await;
    assert_eq!((check.status, check.body.as_str()), (200, "Approved\n"));
    // A Canary webhook sends the token in its metadata.
    let from_webhook =
        format!(r#"{{"name":"podinfo","namespace":"test","metadata":{{"token":"{TOKEN}"}}}}"#);
    assert_eq!(
        post(proxy, "/gate/close", &[], &from_webhook).await.status,
        202
    );
    assert_eq!(post(proxy, "/gate/check", &[], gate).await.status, 403);
    let logs = k.ok(&["logs", "deploy/loadtester", "-n", "test"]);
    assert!(!logs.contains(TOKEN), "{logs}");

    // The chart's NetworkPolicy is stored and listed; the sandbox does not enforce it.
    let policies = k.ok(&["get", "networkpolicy", "-n", "test"]);
    let rows = common::table_rows(&policies);
    assert_eq!(rows[0], ["NAME", "POD-SELECTOR", "AGE"], "{policies}");
    assert_eq!(rows[1][0], "loadtester", "{policies}");
    assert!(
        rows[1][1].contains("app.kubernetes.io/name=loadtester"),
        "{policies}"
    );
    let peers = k.ok(&[
        "get",
        "netpol",
        "loadtester",
        "-n",
        "test",
        "-o",
        "jsonpath={.spec.ingress[0].from}",
    ]);
    assert!(
        peers.contains(r#""podSelector":{}"#)
            && peers.contains(r#""kubernetes.io/metadata.name":"serin-system""#),
        "{peers}"
    );
    sandbox.stop().await;
}
