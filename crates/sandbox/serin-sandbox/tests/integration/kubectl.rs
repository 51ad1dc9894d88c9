//! The real kubectl against the sandbox: discovery, apply, patch, CRDs, finalizers, watch, GC.

use crate::common;

use crate::common::Kubectl;
use serin_sandbox::Sandbox;
use std::process::Stdio;

fn first_container(k: &Kubectl, field: &str) -> String {
    k.ok(&[
        "get",
        "deploy",
        "podinfo",
        "-o",
        &format!("jsonpath={{.spec.template.spec.containers[0].{field}}}"),
    ])
}

fn deployment(image: &str, env_value: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
  labels: {{app: podinfo}}
spec:
  replicas: 2
  selector:
    matchLabels: {{app: podinfo}}
  template:
    metadata:
      labels: {{app: podinfo}}
    spec:
      containers:
      - name: podinfod
        image: {image}
        env: [{{name: A, value: "{env_value}"}}]
"#
    )
}

async fn sandbox() -> (Sandbox, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::start(dir.path()).await.unwrap();
    (sandbox, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_discovery_and_namespaces() {
    let (sandbox, _dir) = sandbox().await;
    let k = Kubectl::new(&sandbox);
    let version = k.ok(&["version", "-o", "json"]);
    let version: serde_json::Value = serde_json::from_str(&version).unwrap();
    assert_eq!(version["serverVersion"]["minor"], "32");
    let namespaces = k.ok(&["get", "namespaces", "-o", "name"]);
    assert_eq!(
        namespaces.lines().collect::<Vec<_>>(),
        [
            "namespace/default",
            "namespace/kube-node-lease",
            "namespace/kube-public",
            "namespace/kube-system"
        ]
    );
    let resources = k.ok(&["api-resources", "-o", "name"]);
    for expected in [
        "deployments.apps",
        "pods",
        "services",
        "leases.coordination.k8s.io",
        "customresourcedefinitions.apiextensions.k8s.io",
        "horizontalpodautoscalers.autoscaling",
    ] {
        assert!(
            resources.lines().any(|l| l == expected),
            "{expected} missing from:\n{resources}"
        );
    }
    let stderr = k.fails(&["get", "deployment", "nope"], None);
    assert!(
        stderr.contains("Error from server (NotFound): deployments.apps \"nope\" not found"),
        "{stderr}"
    );
    let stderr = k.fails(&["delete", "namespace", "default"], None);
    assert!(stderr.contains("Forbidden"), "{stderr}");
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_creates_updates_and_leaves_unchanged() {
    let (sandbox, _dir) = sandbox().await;
    let k = Kubectl::new(&sandbox);
    assert_eq!(
        k.apply(&deployment("podinfo:6.0.0", "1"), &[]),
        "deployment.apps/podinfo created\n"
    );
    let jsonpath = "jsonpath={.metadata.generation} {.spec.template.spec.containers[0].image} {.spec.strategy.rollingUpdate.maxSurge}";
    assert_eq!(
        k.ok(&["get", "deploy", "podinfo", "-o", jsonpath]),
        "1 podinfo:6.0.0 25%"
    );
    assert_eq!(
        k.apply(&deployment("podinfo:6.0.1", "1"), &[]),
        "deployment.apps/podinfo configured\n"
    );
    assert_eq!(
        k.ok(&["get", "deploy", "podinfo", "-o", jsonpath]),
        "2 podinfo:6.0.1 25%"
    );
    assert_eq!(
        k.apply(&deployment("podinfo:6.0.1", "1"), &[]),
        "deployment.apps/podinfo unchanged\n"
    );
    assert_eq!(
        k.ok(&["get", "deploy", "podinfo", "-o", jsonpath]),
        "2 podinfo:6.0.1 25%"
    );
    // Server-side apply of a changed manifest.
    assert_eq!(
        k.apply(&deployment("podinfo:6.0.2", "2"), &["--server-side"]),
        "deployment.apps/podinfo serverside-applied\n"
    );
    assert_eq!(
        k.ok(&["get", "deploy", "podinfo", "-o", jsonpath]),
        "3 podinfo:6.0.2 25%"
    );
    // Applying the same manifest again, a second later (a GitOps loop), writes nothing: the
    // version and the manager's time stay. Taken once the rollout's last status write is done.
    k.ok(&[
        "wait",
        "deployment/podinfo",
        "--for=jsonpath={.status.conditions[?(@.type==\"Progressing\")].reason}=NewReplicaSetAvailable",
        "--timeout=60s",
    ]);
    let version = "jsonpath={.metadata.resourceVersion} {.metadata.managedFields[?(@.manager==\"kubectl\")].time}";
    let before = k.ok(&[
        "get",
        "deploy",
        "podinfo",
        "--show-managed-fields",
        "-o",
        version,
    ]);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    k.apply(&deployment("podinfo:6.0.2", "2"), &["--server-side"]);
    assert_eq!(
        k.ok(&[
            "get",
            "deploy",
            "podinfo",
            "--show-managed-fields",
            "-o",
            version
        ]),
        before
    );
    // Server-side dry run changes nothing.
    k.apply(&deployment("podinfo:6.0.3", "2"), &["--dry-run=server"]);
    assert_eq!(
        k.ok(&["get", "deploy", "podinfo", "-o", jsonpath]),
        "3 podinfo:6.0.2 25%"
    );
    // Another field manager changing a field kubectl owns gets a conflict naming owner and field,
    // unless it forces.
    let (ok, _, stderr) = k.run(
        &["apply", "--server-side", "--field-manager=ci", "-f", "-"],
        Some(&deployment("podinfo:6.0.9", "2")),
    );
    assert!(!ok);
    assert!(
        stderr.contains(r#"conflict with "kubectl""#)
            && stderr.contains(r#".spec.template.spec.containers[name="podinfod"].image"#),
        "{stderr}"
    );
    k.apply(
        &deployment("podinfo:6.0.9", "2"),
        &["--server-side", "--field-manager=ci", "--force-conflicts"],
    );
    assert_eq!(first_container(&k, "image"), "podinfo:6.0.9");
    let managers = k.ok(&[
        "get",
        "deploy",
        "podinfo",
        "--show-managed-fields",
        "-o",
        "jsonpath={.metadata.managedFields[*].manager}",
    ]);
    assert!(
        managers.contains("ci") && managers.contains("kubectl"),
        "{managers}"
    );
    // A field the sole applier stops applying is removed.
    let without_env =
        deployment("podinfo:6.0.9", "2").replace("        env: [{name: A, value: \"2\"}]\n", "");
    assert!(!without_env.contains("env:"));
    k.apply(&without_env, &["--server-side", "--field-manager=ci"]);
    k.apply(&without_env, &["--server-side"]);
    assert_eq!(
        first_container(&k, "env"),
        "",
        "env was removed once no manager applied it"
    );
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patches_and_scale() {
    let (sandbox, _dir) = sandbox().await;
    let k = Kubectl::new(&sandbox);
    k.apply(&deployment("podinfo:6.0.0", "1"), &[]);
    k.ok(&[
        "patch",
        "deploy",
        "podinfo",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"replicas":3}}"#,
    ]);
    k.ok(&[
        "patch",
        "deploy",
        "podinfo",
        "--type",
        "json",
        "-p",
        r#"[{"op":"add","path":"/metadata/labels/tier","value":"web"}]"#,
    ]);
    k.ok(&["patch", "deploy", "podinfo", "-p", r#"{"spec":{"template":{"spec":{"containers":[{"name":"podinfod","env":[{"name":"B","value":"2"}]}]}}}}"#]);
    let out = k.ok(&["get", "deploy", "podinfo", "-o", "jsonpath={.spec.replicas} {.metadata.labels.tier} {.spec.template.spec.containers[0].env[*].name}"]);
    assert_eq!(out, "3 web A B", "strategic merge keeps A and adds B");
    let stderr = k.fails(
        &[
            "patch",
            "deploy",
            "podinfo",
            "--type",
            "json",
            "-p",
            r#"[{"op":"test","path":"/spec/replicas","value":9}]"#,
        ],
        None,
    );
    assert!(
        stderr.contains("test of \"/spec/replicas\" failed"),
        "{stderr}"
    );
    k.ok(&["scale", "deploy", "podinfo", "--replicas=5"]);
    assert_eq!(
        k.ok(&[
            "get",
            "deploy",
            "podinfo",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "5"
    );
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_then_custom_resources_with_finalizers_and_watch() {
    let (sandbox, _dir) = sandbox().await;
    let k = Kubectl::new(&sandbox);
    let crds = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../artifacts/crds/serin.yaml"
    ))
    .unwrap();
    k.apply(&crds, &[]);
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/canaries.serin.dev",
        "--timeout=10s",
    ]);
    k.apply(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: test\n",
        &[],
    );
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../artifacts/examples/canary-progressive.yaml"
    ))
    .unwrap();
    assert!(
        k.apply(&example, &[])
            .contains("canary.serin.dev/podinfo created")
    );
    assert_eq!(
        k.ok(&[
            "get",
            "canary",
            "podinfo",
            "-n",
            "test",
            "-o",
            "jsonpath={.spec.analysis.stepWeight} {.metadata.generation}"
        ]),
        "10 1"
    );

    // Server-side tables: the CRD's printer columns, priority-1 columns only with -o wide.
    k.ok(&[
        "patch", "canary", "podinfo", "-n", "test", "--subresource=status", "--type=merge", "-p",
        r#"{"status":{"phase":"Progressing","canaryWeight":10,"lastTransitionTime":"2026-11-22T07:00:00Z"}}"#,
    ]);
    let table = k.ok(&["get", "canaries", "-n", "test"]);
    let rows = common::table_rows(&table);
    assert_eq!(
        rows[0],
        ["NAME", "STATUS", "WEIGHT", "LASTTRANSITIONTIME"],
        "{table}"
    );
    assert_eq!(
        rows[1],
        ["podinfo", "Progressing", "10", "2026-11-22T07:00:00Z"],
        "{table}"
    );
    let wide = k.ok(&["get", "canaries", "-n", "test", "-o", "wide"]);
    assert!(
        wide.lines().next().unwrap().contains("STEPWEIGHT"),
        "{wide}"
    );
    assert!(
        wide.lines().nth(1).unwrap().contains("1m"),
        "the interval column: {wide}"
    );
    let all = k.ok(&["get", "canaries", "-A"]);
    assert!(all.starts_with("NAMESPACE"), "{all}");
    assert!(all.lines().nth(1).unwrap().starts_with("test"), "{all}");

    let mut watch = k
        .command(&[
            "get",
            "canaries",
            "-n",
            "test",
            "-w",
            "--output-watch-events",
            "--no-headers",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let lines = std::thread::spawn(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .take(4)
            .collect::<Vec<_>>()
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    k.ok(&[
        "patch",
        "canary",
        "podinfo",
        "-n",
        "test",
        "--type",
        "merge",
        "-p",
        r#"{"metadata":{"finalizers":["serin.dev/test"]}}"#,
    ]);
    k.ok(&["delete", "canary", "podinfo", "-n", "test", "--wait=false"]);
    let marked = k.ok(&[
        "get",
        "canary",
        "podinfo",
        "-n",
        "test",
        "-o",
        "jsonpath={.metadata.deletionTimestamp}",
    ]);
    assert!(
        !marked.is_empty(),
        "a finalizer keeps the object, marked for deletion"
    );
    k.ok(&[
        "patch",
        "canary",
        "podinfo",
        "-n",
        "test",
        "--type",
        "json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
    let seen = lines.join().unwrap();
    let _ = watch.kill();
    let _ = watch.wait();
    assert_eq!(seen.len(), 4, "{seen:?}");
    let types: Vec<&str> = seen
        .iter()
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect();
    // Created, finalizer added, marked for deletion, then gone once the finalizer is removed.
    assert_eq!(
        types,
        ["ADDED", "MODIFIED", "MODIFIED", "DELETED"],
        "{seen:?}"
    );
    let stderr = k.fails(&["get", "canary", "podinfo", "-n", "test"], None);
    assert!(stderr.contains("not found"), "{stderr}");

    // Deleting the CRD removes its resources from discovery.
    k.ok(&["delete", "crd", "canaries.serin.dev"]);
    let served = k.ok(&["get", "--raw", "/apis/serin.dev/v1beta1"]);
    assert!(!served.contains("\"canaries\""), "{served}");
    assert!(
        served.contains("\"metrictemplates\""),
        "the other CRDs still serve the group"
    );
    let stderr = k.fails(&["get", "canaries", "-n", "test"], None);
    assert!(stderr.contains("NotFound"), "{stderr}");
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_collection_and_namespace_deletion() {
    let (sandbox, _dir) = sandbox().await;
    let k = Kubectl::new(&sandbox);
    k.apply(&deployment("podinfo:6.0.0", "1"), &[]);
    let uid = k.ok(&["get", "deploy", "podinfo", "-o", "jsonpath={.metadata.uid}"]);
    let owned = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: owned\n  ownerReferences:\n  - {{apiVersion: apps/v1, kind: Deployment, name: podinfo, uid: {uid}, controller: true}}\ndata: {{a: b}}\n"
    );
    k.apply(&owned, &[]);
    k.apply(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: free\n",
        &[],
    );
    k.ok(&["delete", "deploy", "podinfo"]);
    assert_eq!(
        k.ok(&["get", "configmaps", "-o", "name"]),
        "configmap/free\n"
    );

    k.apply(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: scratch\n",
        &[],
    );
    k.apply(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: scratch\n",
        &[],
    );
    k.ok(&["delete", "namespace", "scratch"]);
    let stderr = k.fails(&["get", "namespace", "scratch"], None);
    assert!(stderr.contains("not found"), "{stderr}");
    let stderr = k.fails(
        &["apply", "-f", "-"],
        Some("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: scratch\n"),
    );
    assert!(
        stderr.contains("namespaces \"scratch\" not found"),
        "{stderr}"
    );
    sandbox.stop().await;
}
