//! `kubectl exec` with the real kubectl over its WebSocket protocol: commands run in the pod's
//! context, HTTP goes through the mesh proxy as from a pod with a sidecar, exit codes come back.

use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_exec_runs_commands_in_the_pods_context() {
    let (sandbox, _dir, k) = common::mesh_sandbox().await;
    k.ok(&[
        "create",
        "deployment",
        "web",
        "--image=ghcr.io/stefanprodan/podinfo:6.0.0",
        "--port=9898",
    ]);
    k.ok(&["expose", "deployment", "web", "--port=9898"]);
    k.ok(&[
        "run",
        "lt",
        "--image=ghcr.io/fluxcd/flagger-loadtester:0.34.0",
        "--env=STAGE=test",
    ]);
    k.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    k.ok(&["wait", "--for=condition=Ready", "pod/lt", "--timeout=60s"]);

    assert_eq!(k.ok(&["exec", "lt", "--", "echo", "hello"]), "hello\n");
    assert_eq!(k.ok(&["exec", "lt", "--", "hostname"]), "lt\n");
    assert!(k.ok(&["exec", "lt", "--", "env"]).contains("STAGE=test\n"));
    // Service names resolve only through the mesh proxy, as from a pod with a sidecar.
    let version = k.ok(&[
        "exec",
        "lt",
        "--",
        "curl",
        "-s",
        "http://web.default:9898/version",
    ]);
    assert!(version.contains("\"version\":\"6.0.0\""), "{version}");
    assert_eq!(
        k.ok(&["exec", "lt", "--", "sh", "-c", "wget -qO- web:9898/healthz"]),
        "{\"status\":\"OK\"}"
    );
    let code = k.ok(&[
        "exec",
        "deploy/web",
        "--",
        "curl",
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "http://web:9898/status/503",
    ]);
    assert_eq!(code, "503");
    let hey = k.ok(&[
        "exec",
        "lt",
        "--",
        "hey",
        "-n",
        "4",
        "-c",
        "2",
        "http://web.default:9898/",
    ]);
    assert!(hey.contains("[200]\t4 responses"), "{hey}");

    // Exit codes and errors as kubectl shows them on a cluster.
    let (ok, _, err) = k.run(&["exec", "lt", "--", "nc", "-z", "db", "5432"], None);
    assert!(!ok);
    assert!(
        err.contains("exec: \"nc\": executable file not found in $PATH"),
        "{err}"
    );
    assert!(
        err.contains("command terminated with exit code 127"),
        "{err}"
    );
    let status = k
        .command(&[
            "exec",
            "lt",
            "--",
            "curl",
            "-sf",
            "http://web:9898/status/404",
        ])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(22));

    // Exec needs `create` on pods/exec: the view role does not grant it.
    k.ok(&["create", "serviceaccount", "viewer"]);
    k.ok(&[
        "create",
        "rolebinding",
        "viewer",
        "--clusterrole=view",
        "--serviceaccount=default:viewer",
    ]);
    let denied = k.fails(
        &[
            "--as=system:serviceaccount:default:viewer",
            "exec",
            "lt",
            "--",
            "echo",
            "hi",
        ],
        None,
    );
    assert!(
        denied.contains("cannot create resource \"pods/exec\""),
        "{denied}"
    );
    sandbox.stop().await;
}
