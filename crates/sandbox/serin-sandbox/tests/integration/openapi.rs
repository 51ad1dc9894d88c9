//! The OpenAPI documents with the real kubectl: `explain` for built-in and custom kinds, field
//! validation (`--validate=strict|warn`, server-side apply) and `kubectl diff`.

use crate::common::Kubectl;
use serin_sandbox::Sandbox;

const TYPO: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicass: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: app, image: ghcr.io/stefanprodan/podinfo:6.0.0, imagee: x}]
"#;

const WIDGETS: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size:
                type: integer
                description: How many sprockets the widget carries.
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_validation_and_diff_work_as_on_a_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::start(dir.path()).await.unwrap();
    let k = Kubectl::new(&sandbox);

    let explained = k.ok(&["explain", "deployment.spec.strategy"]);
    assert!(
        explained.contains("FIELD: strategy <DeploymentStrategy>"),
        "{explained}"
    );
    assert!(
        explained.contains("rollingUpdate\t<RollingUpdateDeployment>"),
        "{explained}"
    );
    let ports = k.ok(&["explain", "pod.spec.containers.ports.containerPort"]);
    assert!(ports.contains("FIELD: containerPort <integer>"), "{ports}");

    let v2: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "--raw", "/openapi/v2"])).unwrap();
    assert_eq!(v2["swagger"], "2.0");
    assert_eq!(
        v2["definitions"]["io.k8s.api.apps.v1.Deployment"]["x-kubernetes-group-version-kind"][0]["kind"],
        "Deployment"
    );

    k.apply(WIDGETS, &[]);
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
    ]);
    let widget = k.ok(&["explain", "widgets.spec.size"]);
    assert!(
        widget.contains("How many sprockets the widget carries."),
        "{widget}"
    );

    // --validate=strict (kubectl's default) asks the server to reject unknown fields.
    let strict = k.fails(&["apply", "-f", "-"], Some(TYPO));
    assert!(
        strict.contains("Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: unknown field \"spec.replicass\", unknown field \"spec.template.spec.containers[0].imagee\""),
        "{strict}"
    );
    let ssa = k.fails(&["apply", "--server-side", "-f", "-"], Some(TYPO));
    assert!(
        ssa.contains("failed to create typed patch object (default/web; apps/v1, Kind=Deployment): .spec.replicass: field not declared in schema"),
        "{ssa}"
    );
    // --validate=warn: the unknown fields are reported and dropped, as typed decoding drops them.
    let (ok, out, warned) = k.run(&["apply", "--validate=warn", "-f", "-"], Some(TYPO));
    assert!(ok, "{out}{warned}");
    assert!(
        warned.contains("Warning: unknown field \"spec.replicass\""),
        "{warned}"
    );
    let spec = k.ok(&["get", "deploy", "web", "-o", "jsonpath={.spec}"]);
    assert!(
        !spec.contains("replicass") && !spec.contains("imagee"),
        "{spec}"
    );

    // kubectl diff: a server-side dry run compared with the live object.
    let fixed = TYPO
        .replace("replicass: 2", "replicas: 3")
        .replace(", imagee: x", "");
    let (differs, diff, _) = k.run(&["diff", "-f", "-"], Some(&fixed));
    assert!(!differs, "kubectl diff exits 1 when there are differences");
    assert!(diff.contains("-  replicas: 1\n+  replicas: 3"), "{diff}");
    k.apply(&fixed, &[]);
    let (same, diff, _) = k.run(&["diff", "-f", "-"], Some(&fixed));
    assert!(same && diff.is_empty(), "{diff}");
    assert_eq!(
        k.ok(&["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"]),
        "3"
    );
    sandbox.stop().await;
}
