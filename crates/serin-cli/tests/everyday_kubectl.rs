//! Everyday kubectl against `serin sandbox up`: the real kubectl drives the commands a user types
//! in their first hours with a cluster, and each outcome is checked as a user would see it on a
//! cluster. docs/sandbox.md's table lists the same commands.

mod common;

use common::{Kubectl, SandboxUp};

const CONFIG: &str = r#"apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: demo}
data: {color: blue}
"#;

const AGENT: &str = r#"apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: demo}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, image: ghcr.io/stefanprodan/podinfo:6.0.0}]
"#;

#[test]
fn everyday_kubectl_commands_behave_as_on_a_cluster() {
    let sandbox = SandboxUp::start();
    let k = Kubectl::new(&sandbox.dir.path().join("kubeconfig"));
    let n = ["-n", "demo"];
    let ns = |args: &[&'static str]| -> Vec<&'static str> { [&n[..], args].concat() };

    // Discovery and the cluster.
    k.expect(&["version"], "Server Version: v1.32");
    k.expect(&["cluster-info"], "Kubernetes control plane is running at");
    k.expect(&["api-resources"], "horizontalpodautoscalers");
    k.expect(&["api-versions"], "rbac.authorization.k8s.io/v1");
    k.expect(&["get", "nodes"], "sandbox-node-3   Ready");
    k.expect(&["auth", "whoami"], "sandbox-admin");

    // Imperative creation (protobuf bodies).
    k.expect(&["create", "namespace", "demo"], "namespace/demo created");
    k.expect(
        &ns(&["create", "configmap", "flags", "--from-literal=beta=true"]),
        "configmap/flags created",
    );
    k.expect(
        &ns(&[
            "create",
            "secret",
            "generic",
            "db",
            "--from-literal=password=s3cret",
        ]),
        "secret/db created",
    );
    k.expect(
        &ns(&["create", "serviceaccount", "robot"]),
        "serviceaccount/robot created",
    );
    k.expect(
        &ns(&[
            "create",
            "deployment",
            "podinfo",
            "--image=ghcr.io/stefanprodan/podinfo:6.0.0",
            "--port=9898",
            "--replicas=2",
        ]),
        "deployment.apps/podinfo created",
    );
    k.expect(
        &ns(&["rollout", "status", "deployment/podinfo", "--timeout=60s"]),
        "successfully rolled out",
    );
    k.expect(
        &ns(&["expose", "deployment", "podinfo", "--port=9898"]),
        "service/podinfo exposed",
    );
    k.expect(
        &ns(&[
            "run",
            "tester",
            "--image=ghcr.io/fluxcd/flagger-loadtester:0.34.0",
        ]),
        "pod/tester created",
    );
    k.expect(
        &ns(&[
            "wait",
            "--for=condition=Ready",
            "pod/tester",
            "--timeout=60s",
        ]),
        "condition met",
    );

    // Looking at things.
    let pods = k.expect(&ns(&["get", "pods", "-o", "wide"]), "Running");
    assert_eq!(pods.matches("Running").count(), 3, "{pods}");
    k.expect(
        &ns(&[
            "get",
            "deploy",
            "podinfo",
            "-o",
            "jsonpath={.status.readyReplicas}",
        ]),
        "2",
    );
    k.expect(
        &ns(&["describe", "deployment", "podinfo"]),
        "ScalingReplicaSet",
    );
    k.expect(
        &ns(&["events", "--for", "deployment/podinfo"]),
        "Scaled up replica set podinfo-",
    );
    k.expect(&ns(&["get", "all"]), "service/podinfo");
    k.expect(
        &["explain", "deployment.spec.replicas"],
        "FIELD: replicas <integer>",
    );

    // Into the pods.
    k.expect(&ns(&["logs", "deploy/podinfo"]), "Starting podinfo");
    k.expect(
        &ns(&[
            "exec",
            "tester",
            "--",
            "curl",
            "-s",
            "http://podinfo.demo:9898/version",
        ]),
        "6.0.0",
    );
    k.expect(
        &ns(&["exec", "deploy/podinfo", "--", "hostname"]),
        "podinfo-",
    );
    k.expect(
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/demo/services/podinfo:9898/proxy/healthz",
        ],
        "OK",
    );

    // Changing workloads.
    k.expect(
        &ns(&["scale", "deployment", "podinfo", "--replicas=3"]),
        "scaled",
    );
    k.expect(
        &ns(&["rollout", "status", "deployment/podinfo", "--timeout=60s"]),
        "successfully rolled out",
    );
    k.expect(
        &ns(&["edit", "deployment", "podinfo"]),
        "deployment.apps/podinfo edited",
    );
    k.expect(
        &ns(&[
            "get",
            "deploy",
            "podinfo",
            "-o",
            "jsonpath={.spec.replicas}",
        ]),
        "2",
    );
    k.expect(
        &ns(&[
            "set",
            "image",
            "deployment/podinfo",
            "podinfo=ghcr.io/stefanprodan/podinfo:6.0.1",
        ]),
        "image updated",
    );
    k.expect(
        &ns(&["rollout", "status", "deployment/podinfo", "--timeout=60s"]),
        "successfully rolled out",
    );
    k.expect(
        &ns(&["rollout", "history", "deployment/podinfo"]),
        "2         <none>",
    );
    k.expect(
        &ns(&["rollout", "undo", "deployment/podinfo"]),
        "rolled back",
    );
    k.expect(
        &ns(&["rollout", "status", "deployment/podinfo", "--timeout=60s"]),
        "successfully rolled out",
    );
    k.expect(
        &ns(&[
            "get",
            "deploy",
            "podinfo",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ]),
        "podinfo:6.0.0",
    );
    k.expect(
        &ns(&["rollout", "restart", "deployment/podinfo"]),
        "restarted",
    );
    k.expect(&ns(&["rollout", "pause", "deployment/podinfo"]), "paused");
    k.expect(&ns(&["rollout", "resume", "deployment/podinfo"]), "resumed");
    k.expect(
        &ns(&["label", "deployment", "podinfo", "tier=web"]),
        "labeled",
    );
    k.expect(
        &ns(&["annotate", "deployment", "podinfo", "owner=team-a"]),
        "annotated",
    );
    k.expect(
        &ns(&[
            "patch",
            "deployment",
            "podinfo",
            "--type=merge",
            "-p",
            r#"{"spec":{"minReadySeconds":1}}"#,
        ]),
        "patched",
    );
    k.expect(
        &ns(&[
            "patch",
            "configmap",
            "flags",
            "--type=json",
            "-p",
            r#"[{"op":"add","path":"/data/gamma","value":"on"}]"#,
        ]),
        "patched",
    );
    k.expect(
        &ns(&[
            "wait",
            "--for=condition=Available",
            "deployment/podinfo",
            "--timeout=60s",
        ]),
        "condition met",
    );

    // Declarative.
    k.with_input(&["apply", "-f", "-"], CONFIG, "configmap/settings created");
    let (differs, diff, _) = k.run(&["diff", "-f", "-"], Some(&CONFIG.replace("blue", "green")));
    assert!(!differs && diff.contains("+  color: green"), "{diff}");
    k.with_input(
        &["apply", "--server-side", "-f", "-"],
        &CONFIG.replace("blue", "green"),
        "serverside-applied",
    );
    k.with_input(
        &["replace", "-f", "-"],
        &CONFIG.replace("blue", "red"),
        "configmap/settings replaced",
    );
    k.refused(&ns(&["create", "configmap", "settings"]), "already exists");

    // Autoscaling and resource metrics.
    k.expect(
        &ns(&[
            "set",
            "resources",
            "deployment",
            "podinfo",
            "--requests=cpu=10m",
        ]),
        "resource requirements updated",
    );
    k.expect(
        &ns(&[
            "autoscale",
            "deployment",
            "podinfo",
            "--min=1",
            "--max=3",
            "--cpu-percent=80",
        ]),
        "autoscaled",
    );
    k.expect(&ns(&["get", "hpa", "podinfo"]), "Deployment/podinfo");
    k.expect(&ns(&["top", "pods"]), "CPU(cores)");
    k.expect(&["top", "nodes"], "sandbox-node");

    // Jobs and DaemonSets.
    k.expect(
        &ns(&[
            "create",
            "job",
            "smoke",
            "--image=ghcr.io/fluxcd/flagger-loadtester:0.34.0",
            "--",
            "hey",
            "-n",
            "3",
            "-c",
            "1",
            "http://podinfo.demo:9898/",
        ]),
        "job.batch/smoke created",
    );
    k.expect(
        &ns(&[
            "wait",
            "--for=condition=complete",
            "job/smoke",
            "--timeout=60s",
        ]),
        "condition met",
    );
    k.expect(&ns(&["logs", "job/smoke"]), "Summary:");
    k.with_input(&["apply", "-f", "-"], AGENT, "daemonset.apps/agent created");
    k.expect(
        &ns(&["rollout", "status", "daemonset/agent", "--timeout=60s"]),
        "successfully rolled out",
    );

    // Access control.
    k.expect(
        &ns(&[
            "create",
            "role",
            "reader",
            "--verb=get,list,watch",
            "--resource=pods,configmaps",
        ]),
        "role.rbac.authorization.k8s.io/reader created",
    );
    k.expect(
        &ns(&[
            "create",
            "rolebinding",
            "robot-reads",
            "--role=reader",
            "--serviceaccount=demo:robot",
        ]),
        "created",
    );
    let as_robot = ["--as=system:serviceaccount:demo:robot", "-n", "demo"];
    k.expect(
        &[&as_robot[..], &["auth", "can-i", "list", "pods"]].concat(),
        "yes",
    );
    let (allowed, answer, _) = k.run(
        &[&as_robot[..], &["auth", "can-i", "delete", "pods"]].concat(),
        None,
    );
    assert!(!allowed && answer.starts_with("no"), "{answer}");
    k.refused(
        &[&as_robot[..], &["get", "secrets"]].concat(),
        "cannot list resource \"secrets\"",
    );
    let token = k.expect(&ns(&["create", "token", "robot"]), "eyJ");
    let https = sandbox.endpoint("apiserverHttps");
    let ca = sandbox.dir.path().join("ca.crt");
    let ca = ca.to_str().unwrap();
    let with_token = [
        "--kubeconfig=/dev/null",
        "--server",
        &https,
        "--certificate-authority",
        ca,
        "--token",
        token.trim(),
    ];
    k.expect(
        &[&with_token[..], &["auth", "whoami"]].concat(),
        "system:serviceaccount:demo:robot",
    );
    k.expect(
        &[
            &with_token[..],
            &["-n", "demo", "get", "configmaps", "-o", "name"],
        ]
        .concat(),
        "configmap/settings",
    );

    // Nodes.
    k.expect(&["cordon", "sandbox-node"], "cordoned");
    k.expect(&["get", "nodes"], "SchedulingDisabled");
    k.expect(&["uncordon", "sandbox-node"], "uncordoned");

    // Cleaning up.
    k.expect(
        &ns(&["delete", "deployment", "podinfo", "--wait"]),
        "deleted",
    );
    k.expect(
        &["delete", "namespace", "demo", "--wait", "--timeout=60s"],
        "namespace \"demo\" deleted",
    );
    k.refused(
        &["get", "namespace", "demo"],
        "namespaces \"demo\" not found",
    );

    assert!(
        k.ran.get() >= 40,
        "the suite drives at least 40 commands ({})",
        k.ran.get()
    );
}

/// `serin sandbox up --nodes N` runs N nodes (3 without the flag, as above), and refuses none.
#[test]
fn sandbox_up_runs_the_nodes_asked_for() {
    let sandbox = SandboxUp::start_with(&["--nodes", "5"]);
    let k = Kubectl::new(&sandbox.dir.path().join("kubeconfig"));
    let nodes = k.expect(&["get", "nodes", "-o", "name"], "node/sandbox-node-5");
    assert_eq!(nodes.lines().count(), 5, "{nodes}");
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_serin"))
        .args(["sandbox", "up", "--nodes", "0"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--nodes <N>"),
        "{refused:?}"
    );
}
