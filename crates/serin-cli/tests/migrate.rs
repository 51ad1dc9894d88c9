//! `kubectl serin migrate` as a user runs it: the plugin found by kubectl on the PATH converts the
//! Flagger and Argo Rollouts manifests of `artifacts/examples/migrate`, warns about what has no
//! equivalent, `kubectl serin lint` accepts the result, and the real `kubectl apply` puts it into a
//! sandbox whose CRDs are Serin's, where the objects read back with the converted fields.

mod common;

use common::{Kubectl, SandboxUp};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn corpus(directory: &str) -> String {
    workspace()
        .join("artifacts/examples/migrate")
        .join(directory)
        .display()
        .to_string()
}

/// A directory holding a `kubectl-serin` symlink, put first on the PATH as a user installs the plugin.
struct Plugin {
    directory: tempfile::TempDir,
}

/// What a command printed and how it exited.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Plugin {
    fn install() -> Self {
        let directory = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(
            env!("CARGO_BIN_EXE_kubectl-serin"),
            directory.path().join("kubectl-serin"),
        )
        .unwrap();
        Plugin { directory }
    }

    /// `kubectl serin ARGS`, with `stdin` piped in.
    fn kubectl_serin(&self, args: &[&str], stdin: &str) -> Ran {
        let path = format!(
            "{}:{}",
            self.directory.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut child = Command::new("kubectl")
            .arg("serin")
            .args(args)
            .env("PATH", path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl is installed (apt package kubectl)");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        Ran {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// The warning lines a user reads on stderr for the example corpus, in order per file.
fn expected_warnings(v1alpha3: &str, argo: &str) -> Vec<String> {
    let step = format!("warning: {argo}/analysis-step-rollout.yaml");
    let templates = format!("warning: {argo}/analysis-templates.yaml");
    let canary = format!("warning: {argo}/canary-rollout.yaml");
    let blue_green = format!("warning: {argo}/bluegreen-rollout.yaml");
    let workload = format!("warning: {argo}/workloadref-rollout.yaml");
    let routes = format!("warning: {argo}/routes-rollout.yaml");
    vec![
        format!(
            "warning: {v1alpha3}/canary.yaml: Canary podinfo: spec.autoscalerRef.apiVersion: autoscaling/v2beta1 is served by no current Kubernetes; written as autoscaling/v2"
        ),
        format!("warning: {v1alpha3}/canary.yaml: Canary podinfo: its comments were not kept"),
        format!("{step}: Rollout checkout: spec.strategy.canary.trafficRouting: absent"),
        format!(
            "{templates}: ClusterAnalysisTemplate smoke-test: spec.metrics[0].provider.web: the Canary's interval metrics (spec.analysis.metrics) query Prometheus only, so metric \"smoke-test\" is left out"
        ),
        format!(
            "{blue_green}: Service frontend-active: the activeService of Rollout frontend: left out, since Serin writes this Service itself as the Canary's apex Service"
        ),
        format!(
            "{blue_green}: Rollout frontend: spec.strategy.blueGreen: Argo Rollouts switched the activeService's selector, and so does the Canary (provider: kubernetes"
        ),
        format!(
            "{blue_green}: Rollout frontend: spec.strategy.blueGreen.previewService: Serin serves the preview at its Service frontend-active-canary instead of frontend-preview"
        ),
        format!(
            "{canary}: VirtualService podinfo-vsvc: the VirtualService of Rollout podinfo: left out"
        ),
        format!(
            "{routes}: Rollout storefront: spec.strategy.canary.analysis.args[3].valueFrom.fieldRef: Serin's args have no fieldRef: written as value \"shop-frontend\""
        ),
        format!(
            "{workload}: Rollout backend: spec.workloadRef.scaleDown: no equivalent: Serin releases Deployment backend's own pods, which Argo Rollouts scaled to zero; scale it back up before removing the Rollout (kubectl scale deployment backend --replicas=2)"
        ),
        format!(
            "{workload}: Rollout backend: spec.strategy.canary.trafficRouting: absent: Argo Rollouts split traffic by the ratio of canary to stable pods, and so does the Canary (provider: kubernetes"
        ),
    ]
}

#[test]
fn the_example_manifests_migrate_lint_and_apply() {
    let plugin = Plugin::install();
    let (v1beta1, v1alpha3, argo) = (
        corpus("flagger-v1beta1"),
        corpus("flagger-v1alpha3"),
        corpus("argo"),
    );
    let migrated = plugin.kubectl_serin(&["migrate", &v1beta1, &v1alpha3, &argo], "");
    assert_eq!(migrated.code, Some(0), "{}", migrated.stderr);

    // The warnings name the file, the object and the field, in the order of the files.
    let mut rest = migrated.stderr.as_str();
    for expected in expected_warnings(&v1alpha3, &argo) {
        let at = rest.find(&expected).unwrap_or_else(|| {
            panic!(
                "stderr lacks (in this order) {expected:?}:\n{}",
                migrated.stderr
            )
        });
        rest = &rest[at + expected.len()..];
    }
    assert!(
        !migrated.stderr.contains("flagger-v1beta1"),
        "Flagger v1beta1 objects convert without a warning:\n{}",
        migrated.stderr
    );
    assert_eq!(
        migrated.stderr.matches("Serin refuses").count(),
        0,
        "every converted object is valid:\n{}",
        migrated.stderr
    );
    for converted in [
        "analysis",
        "setHeaderRoute",
        "setMirrorRoute",
        "managedRoutes",
        "startingStep",
        "dryRun",
        "measurementRetention",
        "provider.web",
        "provider.job",
        "podTemplateHashValue",
        "secretKeyRef",
    ] {
        // The one warning about these Rollouts' analyses: an arg read from a label, which Serin
        // writes as a value.
        let warned = migrated.stderr.lines().any(|line| {
            line.contains(&format!(".{converted}"))
                && !line.contains("valueFrom.fieldRef")
                && (line.contains("Rollout podinfo:")
                    || line.contains("Rollout checkout:")
                    || line.contains("storefront"))
        });
        assert!(
            !warned,
            "{converted} converts without a warning:\n{}",
            migrated.stderr
        );
    }
    assert!(migrated.stderr.ends_with("warning(s)\n"));

    // Flagger v1beta1 manifests come out as written, comments included, but for the API group.
    let canary = std::fs::read_to_string(format!("{v1beta1}/canary.yaml")).unwrap();
    let expected = canary.replace(
        "apiVersion: flagger.app/v1beta1",
        "apiVersion: serin.dev/v1beta1",
    );
    assert!(
        migrated.stdout.contains(&expected),
        "the v1beta1 Canary is not printed as written:\n{}",
        migrated.stdout
    );
    assert!(!migrated.stdout.contains("flagger.app/"));
    assert!(!migrated.stdout.contains("argoproj.io/v1alpha1"));

    let linted = plugin.kubectl_serin(&["lint", "/dev/stdin"], &migrated.stdout);
    assert_eq!(
        (linted.code, linted.stdout.as_str()),
        (Some(0), "7 Canary manifest(s) valid\n"),
        "{}",
        linted.stderr
    );

    let sandbox = SandboxUp::start();
    let k = Kubectl::new(&sandbox.dir.path().join("kubeconfig"));
    let crds = std::fs::read_to_string(workspace().join("artifacts/crds/serin.yaml")).unwrap();
    k.with_input(&["apply", "-f", "-"], &crds, "created");
    for crd in ["canaries", "metrictemplates", "alertproviders"] {
        k.expect(
            &[
                "wait",
                "--for=condition=Established",
                &format!("crd/{crd}.serin.dev"),
            ],
            "met",
        );
    }
    for namespace in ["test", "legacy", "rollouts"] {
        k.expect(&["create", "namespace", namespace], "created");
    }
    let applied = k.with_input(&["apply", "-f", "-"], &migrated.stdout, "created");
    for object in [
        "canary.serin.dev/podinfo created",
        "metrictemplate.serin.dev/latency created",
        "alertprovider.serin.dev/on-call created",
        "deployment.apps/frontend created",
        "metrictemplate.serin.dev/success-rate created",
        "metrictemplate.serin.dev/payments-status created",
        "metrictemplate.serin.dev/storefront-catalog created",
        "metrictemplate.serin.dev/storefront-e2e created",
        "canary.serin.dev/storefront created",
    ] {
        assert!(applied.contains(object), "{object}:\n{applied}");
    }
    let get = |namespace: &str, object: &str, jsonpath: &str| {
        let (ok, out, err) = k.run(
            &[
                "-n",
                namespace,
                "get",
                object,
                "-o",
                &format!("jsonpath={jsonpath}"),
            ],
            None,
        );
        assert!(ok, "kubectl get {object}: {err}");
        out
    };

    // Argo Rollouts without trafficRouting routed with Services alone, as the kubernetes provider does.
    assert_eq!(
        [
            get("rollouts", "canary/frontend", "{.spec.provider}"),
            get("rollouts", "canary/backend", "{.spec.provider}"),
            get("rollouts", "canary/podinfo", "{.spec.provider}"),
        ],
        ["kubernetes", "kubernetes", "istio"]
    );
    assert_eq!(
        get(
            "rollouts",
            "canary/backend",
            "{.spec.analysis.maxSurge}/{.spec.analysis.maxUnavailable}"
        ),
        "25%/0",
        "the basic canary's maxSurge/maxUnavailable pace the canary by replica ratio"
    );

    // Flagger v1beta1.
    assert_eq!(
        get(
            "test",
            "canary/podinfo",
            "{.spec.analysis.stepWeight}/{.spec.analysis.metrics[2].templateRef.name}/{.spec.analysis.alerts[0].providerRef.name}"
        ),
        "10/latency/on-call"
    );
    assert_eq!(
        get("test", "metrictemplate/latency", "{.spec.provider.type}"),
        "prometheus"
    );
    assert_eq!(
        get("test", "alertprovider/on-call", "{.spec.secretRef.name}"),
        "on-call-url"
    );

    // Flagger v1alpha3.
    assert_eq!(
        get(
            "legacy",
            "canary/podinfo",
            "{.spec.analysis.metrics[*].name}|{.spec.analysis.metrics[0].thresholdRange.min}|{.spec.analysis.metrics[1].thresholdRange.max}|{.spec.analysis.metrics[2].thresholdRange.max}|{.spec.analysis.stepWeight}"
        ),
        "request-success-rate request-duration 404s percentage|99|500|5|5"
    );
    let headers: serde_json::Value = serde_json::from_str(&get(
        "legacy",
        "canary/podinfo",
        "{.spec.service.headers.request.add}",
    ))
    .unwrap();
    assert_eq!(
        headers,
        serde_json::json!({
            "x-envoy-upstream-rq-timeout-ms": "15000",
            "x-envoy-max-retries": "10",
            "x-envoy-retry-on": "gateway-error,connect-failure,refused-stream",
        })
    );

    // Argo Rollouts: a canary through Istio.
    assert_eq!(
        get(
            "rollouts",
            "deployment/podinfo",
            "{.spec.replicas} {.spec.selector.matchLabels.app} {.spec.template.spec.containers[0].image}"
        ),
        "4 podinfo ghcr.io/stefanprodan/podinfo:6.0.0"
    );
    let steps: serde_json::Value =
        serde_json::from_str(&get("rollouts", "canary/podinfo", "{.spec.analysis.steps}")).unwrap();
    assert_eq!(
        steps,
        serde_json::json!([
            {"setCanaryScale": {"replicas": 1}},
            {"setWeight": 10},
            {"pause": {"duration": "1m"}},
            {"setWeight": 20},
            {"analysis": {
                "metrics": [{
                    "name": "success-rate",
                    "interval": "1m",
                    "count": 3,
                    "failureLimit": 2,
                    "successCondition": "result[0] >= 0.95",
                    "templateRef": {"name": "success-rate-args", "namespace": "rollouts"},
                }],
                "args": [{"name": "service-name", "value": "podinfo-canary.rollouts.svc.cluster.local"}],
            }},
            {"setHeaderRoute": {
                "name": "canary-testers",
                "match": [{"headerName": "x-canary", "headerValue": {"exact": "true"}}],
            }},
            {"setWeight": 50},
            {"pause": {}},
        ])
    );
    // The background latency analysis runs beside the steps from the third on, as in Argo.
    assert_eq!(
        get(
            "rollouts",
            "canary/podinfo",
            "{.spec.targetRef.name} {.spec.service.port} {.spec.service.hosts[0]} {.spec.service.timeout} {.spec.analysis.managedRoutes[0].name} {.spec.analysis.backgroundAnalysis.startingStep} {.spec.analysis.backgroundAnalysis.metrics[0].templateRef.name} {.spec.analysis.backgroundAnalysis.metrics[0].successCondition}"
        ),
        "podinfo 9898 app.example.com 10s canary-testers 2 latency isNaN(result[0]) || result[0] < 500"
    );
    // Argo's documented forms of header and mirror routes, background analysis and args.
    let analysis: serde_json::Value =
        serde_json::from_str(&get("rollouts", "canary/storefront", "{.spec.analysis}")).unwrap();
    assert_eq!(
        analysis["managedRoutes"],
        serde_json::json!([{"name": "beta-testers"}, {"name": "shadow-reads"}])
    );
    assert_eq!(
        analysis["steps"][1]["setMirrorRoute"],
        serde_json::json!({
            "name": "shadow-reads",
            "percentage": 35,
            "match": [{"method": {"exact": "GET"}, "path": {"prefix": "/api/"}}],
        })
    );
    assert_eq!(
        analysis["steps"][3]["setHeaderRoute"]["match"][1],
        serde_json::json!({"headerName": "user-agent", "headerValue": {"prefix": "StorefrontQA"}})
    );
    assert_eq!(
        (&analysis["steps"][6], &analysis["steps"][7]),
        (
            &serde_json::json!({"setHeaderRoute": {"name": "beta-testers"}}),
            &serde_json::json!({"setMirrorRoute": {"name": "shadow-reads"}})
        )
    );
    assert_eq!(
        analysis["steps"][5]["analysis"]["metrics"][0]["templateRef"]["name"],
        "storefront-e2e"
    );
    let background = &analysis["backgroundAnalysis"];
    assert_eq!(background["startingStep"], 2);
    assert_eq!(
        background["args"][2],
        serde_json::json!({"name": "latest-hash", "valueFrom": {"podTemplateHashValue": "Latest"}})
    );
    assert_eq!(
        background["args"][4],
        serde_json::json!({"name": "catalog-token", "valueFrom": {"secretKeyRef": {"name": "catalog-api", "key": "token"}}})
    );
    assert_eq!(
        (&background["dryRun"], &background["measurementRetention"]),
        (
            &serde_json::json!([{"metricName": "catalog-health"}]),
            &serde_json::json!([{"metricName": "error-ratio", "limit": 30}])
        )
    );
    assert_eq!(
        get(
            "rollouts",
            "metrictemplate/storefront-catalog",
            "{.spec.provider.type} {.spec.provider.jsonPath} {.spec.provider.timeoutSeconds}"
        ),
        "web {$.status} 5"
    );
    // success-rate serves the blue/green's interval metric and the analysis step, each its way.
    assert!(
        get("rollouts", "metrictemplate/success-rate", "{.spec.query}")
            .contains("destination_service=~\"{{ variables.service_name }}\"")
    );
    assert!(
        get(
            "rollouts",
            "metrictemplate/success-rate-args",
            "{.spec.query}"
        )
        .contains("destination_service=~\"{{args.service-name}}\"")
    );

    // Argo Rollouts: an analysis step of a Prometheus and a web metric.
    let step: serde_json::Value = serde_json::from_str(&get(
        "rollouts",
        "canary/checkout",
        "{.spec.analysis.steps[1].analysis}",
    ))
    .unwrap();
    assert_eq!(
        (
            &step["metrics"][0]["count"],
            &step["metrics"][1]["templateRef"]["name"]
        ),
        (&serde_json::json!(4), &serde_json::json!("payments-status"))
    );
    assert_eq!(
        step["args"][1]["valueFrom"],
        serde_json::json!({"secretKeyRef": {"name": "metrics-tenant", "key": "token"}})
    );
    assert_eq!(
        step["dryRun"],
        serde_json::json!([{"metricName": "payments-status"}])
    );
    // The Services and VirtualService the Rollout routed through are left to Serin.
    k.refused(
        &["-n", "rollouts", "get", "service", "podinfo-stable"],
        "NotFound",
    );

    // Argo Rollouts: blue/green.
    assert_eq!(
        get(
            "rollouts",
            "canary/frontend",
            "{.spec.service.name}/{.spec.service.port}/{.spec.analysis.iterations}/{.spec.analysis.autoPromotionEnabled}/{.spec.analysis.previewReplicaCount}/{.spec.analysis.scaleDownDelaySeconds}"
        ),
        "frontend-active/80/3/false/1/30"
    );
    assert_eq!(
        get("rollouts", "deployment/frontend", "{.spec.replicas}"),
        "3"
    );

    // Argo Rollouts: workloadRef keeps the user's Deployment.
    assert_eq!(
        get(
            "rollouts",
            "canary/backend",
            "{.spec.targetRef.kind}/{.spec.targetRef.name}/{.spec.service.targetPort}"
        ),
        "Deployment/backend/http"
    );
    assert_eq!(
        get("rollouts", "deployment/backend", "{.metadata.labels.app}"),
        "backend"
    );
}

#[test]
fn unreadable_or_unparsable_files_exit_4_with_nothing_on_stdout() {
    let plugin = Plugin::install();
    let missing = plugin.kubectl_serin(&["migrate", "/nonexistent/rollout.yaml"], "");
    assert_eq!(missing.code, Some(4));
    assert_eq!(missing.stdout, "");
    assert!(
        missing
            .stderr
            .starts_with("error: reading /nonexistent/rollout.yaml:"),
        "{}",
        missing.stderr
    );

    let directory = tempfile::tempdir().unwrap();
    let broken = directory.path().join("broken.yaml");
    std::fs::write(&broken, "kind: Canary\n---\nspec: [unclosed\n").unwrap();
    let good = corpus("flagger-v1beta1");
    let unparsable = plugin.kubectl_serin(&["migrate", &good, broken.to_str().unwrap()], "");
    assert_eq!(unparsable.code, Some(4));
    assert_eq!(unparsable.stdout, "", "no partial output for kubectl apply");
    assert!(
        unparsable.stderr.starts_with(&format!(
            "error: {}: document 2 is not YAML",
            broken.display()
        )),
        "{}",
        unparsable.stderr
    );
}

#[test]
fn fields_serin_refuses_are_warned_about_and_the_migration_still_succeeds() {
    let plugin = Plugin::install();
    let directory = tempfile::tempdir().unwrap();
    let canary = std::fs::read_to_string(corpus("flagger-v1beta1") + "/canary.yaml")
        .unwrap()
        .replace("spec:\n", "spec:\n  provider: linkerd\n");
    let file = directory.path().join("linkerd-canary.yaml");
    std::fs::write(&file, &canary).unwrap();
    let migrated = plugin.kubectl_serin(&["migrate", file.to_str().unwrap()], "");
    assert_eq!(migrated.code, Some(0), "{}", migrated.stderr);
    assert_eq!(
        migrated.stdout,
        canary.replace("flagger.app/v1beta1", "serin.dev/v1beta1")
    );
    assert!(
        migrated.stderr.starts_with(&format!(
            "warning: {}: Canary podinfo: spec.provider: Serin refuses this: \"linkerd\" is not supported yet",
            file.display()
        )),
        "{}",
        migrated.stderr
    );
    let linted = plugin.kubectl_serin(&["lint", "/dev/stdin"], &migrated.stdout);
    assert_eq!(
        linted.code,
        Some(1),
        "lint refuses it too: {}",
        linted.stdout
    );
}
