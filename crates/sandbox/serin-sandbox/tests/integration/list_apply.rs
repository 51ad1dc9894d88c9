//! `kubectl apply -f` of a `kind: List` (what `kubectl get -o yaml` prints) with kubectl's default
//! `--validate=strict`: kubectl validates the items itself, against the OpenAPI v2 document it
//! reads in protobuf, before it sends anything.

use crate::common::Kubectl;
use serin_sandbox::Sandbox;

/// A List of a ConfigMap and a Deployment, whose Deployment's spec has `spec_field: 1`.
fn list(spec_field: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {{name: settings}}
  data: {{greeting: hello}}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {{name: web}}
  spec:
    {spec_field}: 1
    selector: {{matchLabels: {{app: web}}}}
    template:
      metadata: {{labels: {{app: web}}}}
      spec:
        containers: [{{name: app, image: ghcr.io/stefanprodan/podinfo:6.0.0}}]
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_applies_with_kubectls_default_validation() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::start(dir.path()).await.unwrap();
    let k = Kubectl::new(&sandbox);

    let applied = k.apply(&list("replicas"), &[]);
    assert_eq!(
        applied,
        "configmap/settings created\ndeployment.apps/web created\n"
    );
    assert_eq!(
        k.ok(&["get", "configmap/settings", "deployment/web", "-o", "name"]),
        "configmap/settings\ndeployment.apps/web\n"
    );

    // What `kubectl get -o yaml` prints (status, managedFields and all) applies back. The export
    // carries each object's resourceVersion, so it is taken once the Deployment controller has
    // finished with `web` (its rollout complete, the last status it writes): a status write between the get and the apply would be a Conflict,
    // as on any cluster.
    k.ok(&[
        "wait",
        "deployment/web",
        "--for=jsonpath={.status.conditions[?(@.type==\"Progressing\")].reason}=NewReplicaSetAvailable",
        "--timeout=60s",
    ]);
    let exported = k.ok(&["get", "configmap/settings", "deployment/web", "-o", "yaml"]);
    assert!(exported.contains("kind: List"), "{exported}");
    let reapplied = k.apply(&exported, &[]);
    assert!(
        reapplied.contains("configmap/settings configured")
            || reapplied.contains("configmap/settings unchanged"),
        "{reapplied}"
    );
    // The nodes too: they carry every field kubectl's validation requires of a Node.
    let nodes = k.ok(&["get", "nodes", "-o", "yaml"]);
    let reapplied = k.apply(&nodes, &[]);
    assert!(reapplied.contains("node/sandbox-node "), "{reapplied}");
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_validation_refuses_an_unknown_field_in_a_list() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::start(dir.path()).await.unwrap();
    let k = Kubectl::new(&sandbox);

    let refused = k.fails(&["apply", "-f", "-"], Some(&list("replicass")));
    assert!(
        refused.contains(
            r#"error validating data: ValidationError(Deployment.spec): unknown field "replicass" in io.k8s.api.apps.v1.DeploymentSpec"#
        ),
        "{refused}"
    );
    // Refused before anything was sent: not even the valid ConfigMap exists.
    let (found, _, missing) = k.run(&["get", "configmap/settings"], None);
    assert!(!found, "the ConfigMap was created");
    assert!(missing.contains("NotFound"), "{missing}");
    sandbox.stop().await;
}
