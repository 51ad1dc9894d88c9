//! The Helm charts with a real Helm 4 (`scripts/install-tools.sh`) against `serin sandbox up`: both
//! charts lint strictly, every rendering of a values matrix is accepted by the API server
//! (`kubectl apply --dry-run=server`), bad values are refused by the schema with a message naming the
//! key, and install, upgrade and uninstall behave as on a cluster.

mod common;
/// The chart's values reference, checked here so the suite links no extra test binary for it.
#[path = "helm_chart/values_reference.rs"]
mod values_reference;

use common::{Kubectl, SandboxUp};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `$HELM`, else the Helm that `scripts/install-tools.sh` installs.
fn helm_binary() -> PathBuf {
    let path = std::env::var_os("HELM")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/tools/helm"));
    assert!(
        path.exists(),
        "Helm is not installed at {}: run scripts/install-tools.sh (make test does)",
        path.display()
    );
    path
}

/// Helm with its own cache and configuration directories, pointed at `kubeconfig`.
struct Helm {
    binary: PathBuf,
    home: tempfile::TempDir,
    kubeconfig: Option<PathBuf>,
}

impl Helm {
    fn new(kubeconfig: Option<PathBuf>) -> Self {
        Helm {
            binary: helm_binary(),
            home: tempfile::tempdir().unwrap(),
            kubeconfig,
        }
    }

    fn run(&self, args: &[&str]) -> (bool, String, String) {
        let mut command = Command::new(&self.binary);
        command
            .args(args)
            .current_dir(workspace())
            .env("HELM_CACHE_HOME", self.home.path().join("cache"))
            .env("HELM_CONFIG_HOME", self.home.path().join("config"))
            .env("HELM_DATA_HOME", self.home.path().join("data"))
            .stdin(Stdio::null());
        if let Some(kubeconfig) = &self.kubeconfig {
            command.env("KUBECONFIG", kubeconfig);
        }
        let out = command.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args);
        assert!(ok, "helm {args:?} failed:\n{out}\n{err}");
        out
    }

    /// `helm template` of the operator chart into serin-system with `--set` of each of `sets`.
    fn template_serin(&self, sets: &[&str]) -> String {
        let mut args = vec![
            "template",
            "serin",
            "charts/serin",
            "--namespace",
            "serin-system",
        ];
        for set in sets {
            args.extend(["--set", set]);
        }
        self.ok(&args)
    }
}

/// A Prometheus operator monitor kind (`ServiceMonitor`, `PodMonitor`), as far as the API server
/// needs it to accept objects.
fn monitor_crd(kind: &str) -> String {
    let plural = format!("{}s", kind.to_lowercase());
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: {plural}.monitoring.coreos.com}}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {{plural: {plural}, kind: {kind}}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {{type: object, properties: {{spec: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}}}
"#
    )
}

#[test]
fn the_charts_render_what_the_api_server_accepts() {
    let helm = Helm::new(None);
    for chart in ["charts/serin", "charts/loadtester"] {
        helm.ok(&["lint", "--strict", chart]);
    }
    let sandbox = SandboxUp::start();
    let k = Kubectl::new(&sandbox.dir.path().join("kubeconfig"));
    for namespace in ["serin-system", "team-a", "test"] {
        k.expect(&["create", "namespace", namespace], "created");
    }
    let monitors = [monitor_crd("ServiceMonitor"), monitor_crd("PodMonitor")].join("---\n");
    k.with_input(&["apply", "-f", "-"], &monitors, "created");
    k.expect(
        &[
            "wait",
            "--for=condition=Established",
            "crd/podmonitors.monitoring.coreos.com",
        ],
        "met",
    );

    let matrix: [(&str, &[&str], &[&str]); 9] = [
        (
            "the dashboard, in one namespace",
            &[
                "dashboard.enabled=true",
                "namespace=team-a",
                "dashboard.allowedHosts={serin.example.com}",
            ],
            &[
                "command: [/usr/local/bin/serin-dashboard]",
                "- --namespace=team-a",
                "- --allowed-host=serin.example.com",
                "resources: [subjectaccessreviews]",
            ],
        ),
        (
            "defaults",
            &[],
            &[
                "kind: ClusterRole\n",
                "strategy:\n    type: Recreate",
                "- --mesh-provider=istio",
            ],
        ),
        (
            "two replicas with leader election",
            &["replicaCount=2", "leaderElection.enabled=true"],
            &[
                "replicas: 2",
                "- --leader-elect",
                "- --leader-election-namespace=serin-system",
                "resources: [leases]",
            ],
        ),
        (
            "one namespace",
            &["namespace=team-a"],
            &["kind: Role\n", "namespace: team-a", "- --namespace=team-a"],
        ),
        (
            "Flagger's keys",
            &[
                "metricsServer=http://prometheus.istio-system:9090",
                "selectorLabels=app",
                "includeLabelPrefix=app.kubernetes.io",
                "configTracking.enabled=false",
                "eventWebhook=http://events.test/T0KEN",
                "clusterName=prod",
                "logLevel=debug",
                "noCrossNamespaceRefs=true",
            ],
            &[
                "- --metrics-server=http://prometheus.istio-system:9090",
                "- --selector-labels=app",
                "- --include-label-prefix=app.kubernetes.io",
                "- --enable-config-tracking=false",
                "- --cluster-name=prod",
                "- --log-level=debug",
                "- --no-cross-namespace-refs",
                // The event webhook URL reaches the operator from a Secret, through its environment.
                "kind: Secret\nmetadata:\n  name: serin-event-webhook",
                "url: \"http://events.test/T0KEN\"",
                "- name: EVENT_WEBHOOK_URL\n              valueFrom:\n                secretKeyRef:\n                  name: serin-event-webhook\n                  key: url",
                // Without config tracking the operator only reads ConfigMaps and Secrets.
                "resources: [configmaps, secrets]\n    verbs: [list, watch]\n",
            ],
        ),
        (
            "taking over Flagger's Canaries, with its global alerts",
            &[
                "apiGroup=flagger.app",
                "slack.url=https://hooks.slack.test/T0KEN",
                "slack.channel=releases",
                "slack.user=flagger",
                "msteams.url=https://teams.test/T0KEN",
            ],
            &[
                "- --api-group=flagger.app",
                "- apiGroups: [flagger.app]\n    resources: [canaries]\n",
                "- --slack-channel=releases",
                "- --slack-user=flagger",
                // The webhook URLs reach the operator from a Secret, through its environment.
                "kind: Secret\nmetadata:\n  name: serin-alerts",
                "slack-url: \"https://hooks.slack.test/T0KEN\"",
                "- name: SLACK_URL\n              valueFrom:\n                secretKeyRef:\n                  name: serin-alerts\n                  key: slack-url",
                "- name: MSTEAMS_URL\n              valueFrom:\n                secretKeyRef:\n                  name: serin-alerts\n                  key: msteams-url",
            ],
        ),
        (
            "monitors and a disruption budget",
            &[
                "serviceMonitor.enabled=true",
                "podMonitor.enabled=true",
                "podDisruptionBudget.enabled=true",
            ],
            &[
                "kind: ServiceMonitor",
                "kind: PodMonitor",
                "kind: PodDisruptionBudget",
            ],
        ),
        (
            "Grafana dashboards",
            &[
                "grafana.dashboards.enabled=true",
                "grafana.dashboards.folder=Serin",
            ],
            &[
                "name: serin-dashboard-canary",
                "name: serin-dashboard-operator",
                "grafana_dashboard: \"1\"",
                "grafana_folder: \"Serin\"",
            ],
        ),
        (
            "existing account, no RBAC",
            &[
                "rbac.create=false",
                "serviceAccount.create=false",
                "serviceAccount.name=ops",
            ],
            &["serviceAccountName: ops"],
        ),
    ];
    for (case, sets, expected) in matrix {
        let rendered = helm.template_serin(sets);
        for text in expected {
            assert!(
                rendered.contains(text),
                "{case}: {text:?} missing from\n{rendered}"
            );
        }
        if case == "existing account, no RBAC" {
            assert!(!rendered.contains("kind: ClusterRole"), "{rendered}");
        }
        if case == "defaults" {
            assert!(
                rendered.contains(
                    "resources: [configmaps, secrets]\n    verbs: [list, watch, create, update, patch, delete]\n"
                ),
                "{rendered}"
            );
            assert!(!rendered.contains("EVENT_WEBHOOK_URL"), "{rendered}");
        }
        assert!(
            !rendered.contains("--event-webhook")
                && !rendered.contains("--slack-url")
                && !rendered.contains("--msteams-url"),
            "{case}: a URL on the command line\n{rendered}"
        );
        let (ok, out, err) = k.run(&["apply", "--dry-run=server", "-f", "-"], Some(&rendered));
        assert!(
            ok,
            "{case}: the API server refused the rendering:\n{out}\n{err}"
        );
        assert!(out.contains("(server dry run)"), "{out}");
    }
    let rendered = helm.ok(&[
        "template",
        "loadtester",
        "charts/loadtester",
        "--namespace",
        "test",
    ]);
    let (ok, _, err) = k.run(&["apply", "--dry-run=server", "-f", "-"], Some(&rendered));
    assert!(ok, "{err}");

    for (set, message) in [
        (
            "meshProvider=linkerd",
            "at '/meshProvider': value must be one of 'istio', 'kubernetes', 'gatewayapi:v1', 'gatewayapi:v1beta1'",
        ),
        (
            "replicaCount=0",
            "at '/replicaCount': minimum: got 0, want 1",
        ),
        (
            "metricsServer=prometheus:9090",
            "at '/metricsServer': 'prometheus:9090' does not match pattern",
        ),
        (
            "slack.url=hooks.slack.test/x",
            "at '/slack/url': 'hooks.slack.test/x' does not match pattern",
        ),
        (
            "apiGroup=flagger.example",
            "at '/apiGroup': value must be one of 'serin.dev', 'flagger.app'",
        ),
        ("logLevel=loud", "at '/logLevel': value must be one of"),
        ("namespace=Team_A", "at '/namespace'"),
    ] {
        let (ok, _, err) = helm.run(&["template", "serin", "charts/serin", "--set", set]);
        assert!(!ok, "{set} was accepted");
        assert!(err.contains(message), "{set}: {err}");
    }
}

/// The ConfigMaps of `helm template` with `sets`, as JSON objects.
fn rendered_config_maps(helm: &Helm, sets: &[&str]) -> Vec<serde_json::Value> {
    let rendered = helm.template_serin(sets);
    let documents: Vec<serde_json::Value> = serde_saphyr::from_multiple(&rendered)
        .unwrap_or_else(|e| panic!("helm template {sets:?} is not YAML ({e}):\n{rendered}"));
    documents
        .into_iter()
        .filter(|document| document["kind"] == "ConfigMap")
        .collect()
}

#[test]
fn grafana_dashboards_are_config_maps_of_the_chart_files_when_enabled() {
    let helm = Helm::new(None);
    assert_eq!(
        rendered_config_maps(&helm, &[]),
        Vec::<serde_json::Value>::new(),
        "dashboards are off by default"
    );
    let config_maps = rendered_config_maps(
        &helm,
        &[
            "grafana.dashboards.enabled=true",
            "grafana.dashboards.folder=Serin",
            "grafana.dashboards.namespace=monitoring",
        ],
    );
    let names: Vec<&str> = config_maps
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["serin-dashboard-canary", "serin-dashboard-operator"]
    );
    for config_map in &config_maps {
        let metadata = &config_map["metadata"];
        assert_eq!(metadata["namespace"], "monitoring");
        assert_eq!(metadata["labels"]["grafana_dashboard"], "1");
        assert_eq!(metadata["annotations"]["grafana_folder"], "Serin");
        let data = config_map["data"].as_object().unwrap();
        assert_eq!(data.len(), 1, "one dashboard per ConfigMap: {data:?}");
        let (file, text) = data.iter().next().unwrap();
        let dashboard: serde_json::Value = serde_json::from_str(text.as_str().unwrap())
            .unwrap_or_else(|e| panic!("{file} in the ConfigMap is not JSON: {e}"));
        let committed: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(workspace().join("charts/serin/dashboards").join(file))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(dashboard, committed, "{file} differs from the chart's file");
        assert!(
            dashboard["uid"]
                .as_str()
                .is_some_and(|u| u.starts_with("serin-"))
        );
        let queries: Vec<&str> = dashboard["panels"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|panel| panel["targets"].as_array().into_iter().flatten())
            .filter_map(|target| target["expr"].as_str())
            .collect();
        assert!(queries.len() >= 10, "{file}: {queries:?}");
    }
    // The sidecar's label is configurable; without a folder there is no annotation.
    let relabelled = rendered_config_maps(
        &helm,
        &[
            "grafana.dashboards.enabled=true",
            "grafana.dashboards.label=dashboards.example.com/grafana",
            "grafana.dashboards.labelValue=serin",
        ],
    );
    assert_eq!(relabelled.len(), 2);
    for config_map in &relabelled {
        let metadata = &config_map["metadata"];
        assert_eq!(metadata["namespace"], "serin-system");
        assert_eq!(
            metadata["labels"]["dashboards.example.com/grafana"],
            "serin"
        );
        assert!(metadata["labels"].get("grafana_dashboard").is_none());
        assert!(metadata.get("annotations").is_none(), "{metadata}");
    }
    let (ok, _, err) = helm.run(&[
        "template",
        "serin",
        "charts/serin",
        "--set",
        "grafana.dashboards.label=not a label",
    ]);
    assert!(
        !ok && err.contains("at '/grafana/dashboards/label'"),
        "{err}"
    );
}

#[test]
fn the_dashboard_is_off_by_default_and_its_role_reads_canaries_and_reviews_only() {
    let helm = Helm::new(None);
    let render = |sets: &[&str]| -> Vec<serde_json::Value> {
        let rendered = helm.template_serin(sets);
        serde_saphyr::from_multiple(&rendered)
            .unwrap_or_else(|e| panic!("helm template {sets:?} is not YAML ({e}):\n{rendered}"))
    };
    for document in render(&[]) {
        assert!(!document.to_string().contains("-dashboard"), "{document}");
    }
    let documents = render(&["dashboard.enabled=true"]);
    let named = |kind: &str, name: &str| {
        of_kind(&documents, kind)
            .into_iter()
            .find(|d| d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in {documents:?}"))
            .clone()
    };
    // Only what it does as itself: viewers are reviewed, and act with their own tokens.
    assert_eq!(
        named("ClusterRole", "serin-dashboard")["rules"],
        serde_json::json!([
            {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
            {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
            {"apiGroups": ["serin.dev"], "resources": ["canaries"], "verbs": ["get", "list", "watch"]}
        ])
    );
    let binding = named("ClusterRoleBinding", "serin-dashboard");
    assert_eq!(binding["roleRef"]["name"], "serin-dashboard");
    assert_eq!(
        binding["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": "serin-dashboard", "namespace": "serin-system"}])
    );
    let deployment = named("Deployment", "serin-dashboard");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["command"],
        serde_json::json!(["/usr/local/bin/serin-dashboard"])
    );
    let args = container["args"].as_array().unwrap();
    assert!(
        args.contains(&serde_json::json!("--api-group=serin.dev")),
        "{args:?}"
    );
    // The operator's selector (and so its Service and monitors) must not take in the dashboard's pods.
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let operator = named("Deployment", "serin");
    assert!(
        operator["spec"]["selector"]["matchLabels"]
            .as_object()
            .unwrap()
            .iter()
            .any(|(key, value)| &pod_labels[key] != value),
        "the operator's selector matches the dashboard's pods: {pod_labels}"
    );
    let service = named("Service", "serin-dashboard");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"]
    );
}

/// Reads `jsonpath` of the operator's Deployment in serin-system; it must contain `expected`.
fn operator_deployment(k: &Kubectl, jsonpath: &str, expected: &str) -> String {
    k.expect(
        &[
            "-n",
            "serin-system",
            "get",
            "deploy",
            "serin",
            "-o",
            jsonpath,
        ],
        expected,
    )
}

/// Checks that serin-system runs two Ready operator replicas, one of them holding the Lease, and
/// returns the leader's log.
fn two_ready_replicas_one_leading(k: &Kubectl) -> String {
    operator_deployment(k, "jsonpath={.status.readyReplicas}", "2");
    let lease = [
        "-n",
        "serin-system",
        "get",
        "lease",
        "serin-operator",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ];
    let holder = k.expect(&lease, "serin-");
    k.expect(
        &["-n", "serin-system", "logs", &format!("pod/{holder}")],
        "leading as",
    )
}

/// The sandbox runs the operator image as the `serin-operator` binary beside `serin`; `cargo test
/// --workspace` builds it, and a test run of this package alone builds it here (with the whole
/// workspace's binaries, whose dependencies' features are those of the workspace's own build).
fn ensure_operator_binary() {
    let binary = Path::new(env!("CARGO_BIN_EXE_serin")).with_file_name("serin-operator");
    if !binary.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let built = Command::new(cargo)
            .args(["build", "-q", "--workspace", "--bins"])
            .current_dir(workspace())
            .status()
            .unwrap();
        assert!(built.success(), "cargo build --workspace --bins failed");
    }
}

#[test]
fn helm_installs_upgrades_and_uninstalls_in_the_sandbox() {
    ensure_operator_binary();
    let sandbox = SandboxUp::start();
    let kubeconfig = sandbox.dir.path().join("kubeconfig");
    let helm = Helm::new(Some(kubeconfig.clone()));
    let k = Kubectl::new(&kubeconfig);
    let install = helm.ok(&[
        "install",
        "serin",
        "charts/serin",
        "-n",
        "serin-system",
        "--create-namespace",
        "--set",
        "leaderElection.enabled=true",
        "--set",
        "replicaCount=2",
        "--wait",
        "--timeout",
        "120s",
    ]);
    assert!(install.contains("STATUS: deployed"), "{install}");
    assert!(
        install.contains("watches Canaries in every namespace"),
        "{install}"
    );
    // The CRDs come from the chart's crds/ directory.
    k.expect(
        &[
            "wait",
            "--for=condition=Established",
            "crd/canaries.serin.dev",
        ],
        "met",
    );
    operator_deployment(
        &k,
        "jsonpath={.spec.template.spec.serviceAccountName}",
        "serin",
    );
    let log = two_ready_replicas_one_leading(&k);
    assert!(
        log.contains("watching Canaries of serin.dev/v1beta1 in all namespaces"),
        "{log}"
    );
    k.expect(
        &[
            "get",
            "clusterrole",
            "serin",
            "-o",
            "jsonpath={.rules[*].resources}",
        ],
        "canaries/finalizers",
    );
    k.expect(
        &[
            "auth",
            "can-i",
            "patch",
            "canaries.serin.dev/status",
            "--as=system:serviceaccount:serin-system:serin",
        ],
        "yes",
    );
    k.expect(
        &[
            "-n",
            "serin-system",
            "auth",
            "can-i",
            "update",
            "leases.coordination.k8s.io",
            "--as=system:serviceaccount:serin-system:serin",
        ],
        "yes",
    );
    let (_, denied, _) = k.run(
        &[
            "auth",
            "can-i",
            "delete",
            "canaries.serin.dev",
            "--as=system:serviceaccount:serin-system:serin",
        ],
        None,
    );
    assert_eq!(denied.trim(), "no", "the operator never deletes a Canary");
    k.with_input(
        &["apply", "-f", "-"],
        include_str!("../../../artifacts/examples/canary-progressive.yaml")
            .replace("namespace: test", "namespace: default")
            .as_str(),
        "created",
    );

    // helm upgrade with changed values rolls the operator.
    helm.ok(&[
        "upgrade",
        "serin",
        "charts/serin",
        "-n",
        "serin-system",
        "--reuse-values",
        "--set",
        "logLevel=debug",
    ]);
    operator_deployment(
        &k,
        "jsonpath={.metadata.annotations.deployment\\.kubernetes\\.io/revision} {.spec.template.spec.containers[0].args}",
        "2 [",
    );
    operator_deployment(
        &k,
        "jsonpath={.spec.template.spec.containers[0].args}",
        "--log-level=debug",
    );
    k.expect(
        &["-n", "serin-system", "rollout", "history", "deploy/serin"],
        "2 ",
    );
    helm.ok(&[
        "install",
        "loadtester",
        "charts/loadtester",
        "-n",
        "test",
        "--create-namespace",
    ]);
    k.expect(
        &[
            "-n",
            "test",
            "get",
            "svc",
            "loadtester",
            "-o",
            "jsonpath={.spec.ports[0].port}",
        ],
        "80",
    );

    // helm uninstall removes what the release made, keeps the CRDs and every Canary.
    helm.ok(&["uninstall", "serin", "-n", "serin-system", "--wait"]);
    let (found, _, _) = k.run(&["-n", "serin-system", "get", "deploy", "serin"], None);
    assert!(!found);
    let (found, _, _) = k.run(&["get", "clusterrole", "serin"], None);
    assert!(!found);
    k.expect(&["get", "crd", "canaries.serin.dev"], "canaries.serin.dev");
    k.expect(&["get", "canary", "podinfo"], "podinfo");
}

#[test]
fn the_kustomize_base_is_the_chart_rendered() {
    let rendered = Command::new(workspace().join("scripts/render-kustomize-base.sh"))
        .env("HELM", helm_binary())
        .output()
        .unwrap();
    assert!(
        rendered.status.success(),
        "{}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    let committed =
        std::fs::read_to_string(workspace().join("artifacts/kustomize/base/serin.yaml")).unwrap();
    assert!(
        String::from_utf8_lossy(&rendered.stdout) == committed,
        "artifacts/kustomize/base/serin.yaml is out of date with charts/serin: run make kustomize"
    );
}

#[test]
fn kubectl_apply_k_installs_a_ready_operator() {
    ensure_operator_binary();
    let sandbox = SandboxUp::start();
    let k = Kubectl::new(&sandbox.dir.path().join("kubeconfig"));
    let overlay = workspace().join("artifacts/kustomize/istio");
    let overlay = overlay.to_str().unwrap();
    let rendered = k.expect(&["kustomize", overlay], "kind: ClusterRole");
    assert!(rendered.contains("- --metrics-server=http://prometheus.istio-system:9090"));
    k.expect(&["apply", "-k", overlay], "deployment.apps/serin created");
    k.expect(
        &[
            "-n",
            "serin-system",
            "rollout",
            "status",
            "deploy/serin",
            "--timeout=120s",
        ],
        "successfully rolled out",
    );
    two_ready_replicas_one_leading(&k);
}

/// The documents of `helm template` of the load tester chart into `test` with `args` (`--set`,
/// `--set-json`), as JSON objects.
fn loadtester_documents(helm: &Helm, args: &[&str]) -> Vec<serde_json::Value> {
    let mut all = vec!["template", "loadtester", "charts/loadtester", "-n", "test"];
    all.extend_from_slice(args);
    let rendered = helm.ok(&all);
    serde_saphyr::from_multiple(&rendered)
        .unwrap_or_else(|e| panic!("helm template {args:?} is not YAML ({e}):\n{rendered}"))
}

fn of_kind<'a>(documents: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    documents.iter().filter(|d| d["kind"] == kind).collect()
}

fn loadtester_container(documents: &[serde_json::Value]) -> serde_json::Value {
    of_kind(documents, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0].clone()
}

#[test]
fn the_load_testers_network_policy_admits_its_namespace_and_the_operators() {
    let helm = Helm::new(None);
    let documents = loadtester_documents(&helm, &[]);
    let policies = of_kind(&documents, "NetworkPolicy");
    assert_eq!(policies.len(), 1, "{documents:?}");
    let policy = &policies[0]["spec"];
    let deployment = of_kind(&documents, "Deployment")[0];
    assert_eq!(
        policy["podSelector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(policy["policyTypes"], serde_json::json!(["Ingress"]));
    let ingress = policy["ingress"].as_array().unwrap();
    assert_eq!(ingress.len(), 1, "{policy}");
    assert_eq!(
        ingress[0]["ports"],
        serde_json::json!([{"port": "http", "protocol": "TCP"}])
    );
    assert_eq!(
        ingress[0]["from"],
        serde_json::json!([
            {"podSelector": {}},
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "serin-system"}}}
        ])
    );

    let documents = loadtester_documents(
        &helm,
        &[
            "--set-json",
            r#"networkPolicy.operatorNamespaces=["serin-system","team-a"]"#,
            "--set-json",
            r#"networkPolicy.extraFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}},{"ipBlock":{"cidr":"10.8.0.0/16"}}]"#,
        ],
    );
    assert_eq!(
        of_kind(&documents, "NetworkPolicy")[0]["spec"]["ingress"][0]["from"],
        serde_json::json!([
            {"podSelector": {}},
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "serin-system"}}},
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}},
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
            {"ipBlock": {"cidr": "10.8.0.0/16"}}
        ])
    );
    let documents = loadtester_documents(&helm, &["--set", "networkPolicy.enabled=false"]);
    assert!(of_kind(&documents, "NetworkPolicy").is_empty());
}

#[test]
fn the_load_testers_token_comes_from_a_secret_through_its_environment() {
    let helm = Helm::new(None);
    let container = loadtester_container(&loadtester_documents(&helm, &[]));
    assert!(container["env"].is_null(), "{container}");
    let container = loadtester_container(&loadtester_documents(
        &helm,
        &[
            "--set",
            "auth.secretName=loadtester-token",
            "--set",
            "auth.secretKey=value",
        ],
    ));
    assert_eq!(
        container["env"],
        serde_json::json!([{"name": "LOADTESTER_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "loadtester-token", "key": "value"}}}])
    );
    let args = container["args"].to_string();
    assert!(!args.contains("token"), "{args}");
}

#[test]
fn the_load_tester_has_a_memory_limit_and_a_task_limit() {
    let helm = Helm::new(None);
    let container = loadtester_container(&loadtester_documents(&helm, &[]));
    assert_eq!(
        container["resources"],
        serde_json::json!({"requests": {"cpu": "10m", "memory": "64Mi"},
                           "limits": {"cpu": "1000m", "memory": "256Mi"}})
    );
    let args = container["args"].as_array().unwrap();
    assert!(
        args.contains(&serde_json::json!("--max-tasks=32")),
        "{args:?}"
    );
    let container =
        loadtester_container(&loadtester_documents(&helm, &["--set", "cmd.maxTasks=5"]));
    assert!(
        container["args"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("--max-tasks=5")),
        "{container}"
    );
}

#[test]
fn the_load_testers_schema_refuses_bad_values() {
    let helm = Helm::new(None);
    for (args, message) in [
        (
            ["--set", "cmd.maxTasks=0"],
            "at '/cmd/maxTasks': minimum: got 0, want 1",
        ),
        (
            ["--set", "networkPolicy.enabled=maybe"],
            "at '/networkPolicy/enabled': got string, want boolean",
        ),
        (
            ["--set", "networkPolicy.peers=x"],
            "at '/networkPolicy': additional properties 'peers' not allowed",
        ),
        (
            ["--set", "networkPolicy.operatorNamespaces[0]=Serin_System"],
            "at '/networkPolicy/operatorNamespaces/0': 'Serin_System' does not match pattern",
        ),
        (
            [
                "--set-json",
                r#"networkPolicy.extraFrom=[{"namespace":"x"}]"#,
            ],
            "at '/networkPolicy/extraFrom/0': additional properties 'namespace' not allowed",
        ),
        (
            ["--set", "auth.secretName=Bad_Name"],
            "at '/auth/secretName': 'Bad_Name' does not match pattern",
        ),
        (
            ["--set", "auth.token=lt-123"],
            "at '/auth': additional properties 'token' not allowed",
        ),
    ] {
        let mut all = vec!["template", "loadtester", "charts/loadtester"];
        all.extend_from_slice(&args);
        let (ok, _, err) = helm.run(&all);
        assert!(!ok, "{args:?} was accepted");
        assert!(err.contains(message), "{args:?}: {err}");
    }
}
