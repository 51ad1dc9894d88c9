//! `keptn` templates against the sandbox's API server serving Keptn's published metrics CRDs
//! (applied with the real kubectl): a KeptnMetric's value, a KeptnMetric with no value yet, one that
//! does not exist, a namespace the template may not read, and Analyses made, judged and deleted.
//! A task of the test plays Keptn's metrics operator, writing the status Keptn would write.

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serin_core::plan::MetricReading;
use serin_metrics::ClientCache;
use serin_sandbox::Sandbox;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use crate::support;

fn kubectl(sandbox: &Sandbox, args: &[&str]) {
    let output = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&sandbox.kubeconfig)
        .args(args)
        .output()
        .expect("kubectl on PATH");
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn keptn(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "metrics.keptn.sh".into(),
        version: "v1beta1".into(),
        api_version: "metrics.keptn.sh/v1beta1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn template(namespace: &str, query: &str) -> serin_api::MetricTemplate {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "serin.dev/v1beta1", "kind": "MetricTemplate",
        "metadata": {"name": "slo", "namespace": namespace},
        "spec": {"provider": {"type": "keptn"}, "query": query}
    }))
    .unwrap()
}

/// What Keptn's metrics operator does with an Analysis, as far as the test needs: a passing
/// verdict unless the `workload` argument is `faulty`; Analyses of the definition `stuck` are left
/// alone. The spec of each Analysis seen is recorded.
async fn play_keptn(client: kube::Client, seen: Arc<Mutex<Vec<serde_json::Value>>>) {
    let analyses: Api<DynamicObject> =
        Api::namespaced_with(client, "test", &keptn("Analysis", "analyses"));
    loop {
        for analysis in analyses.list(&ListParams::default()).await.unwrap() {
            let spec = analysis.data["spec"].clone();
            if analysis.data["status"]["state"].as_str() == Some("Completed")
                || spec["analysisDefinition"]["name"] == "stuck"
            {
                continue;
            }
            seen.lock().unwrap().push(spec.clone());
            let pass = spec["args"]["workload"] != "faulty";
            let status = serde_json::json!({"status": {"state": "Completed", "pass": pass,
                "timeframe": {"recent": spec["timeframe"]["recent"]}, "raw": "{}"}});
            let name = analysis.metadata.name.clone().unwrap();
            let _ = analyses
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                .await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keptn_metrics_and_analyses_are_read_through_the_kubernetes_api() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::start(dir.path()).await.unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../e2e/fixtures/keptn");
    for crd in ["keptnmetrics", "analyses", "analysisdefinitions"] {
        let file = fixtures.join(format!("metrics.keptn.sh_{crd}.yaml"));
        kubectl(&sandbox, &["apply", "-f", file.to_str().unwrap()]);
    }
    kubectl(
        &sandbox,
        &[
            "wait",
            "--for=condition=Established",
            "crd/keptnmetrics.metrics.keptn.sh",
            "crd/analyses.metrics.keptn.sh",
        ],
    );
    kubectl(&sandbox, &["create", "namespace", "test"]);
    kubectl(&sandbox, &["create", "namespace", "payments"]);
    let client = kube::Client::try_from(kube::Config::new(sandbox.url.parse().unwrap())).unwrap();
    let metrics: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "test",
        &keptn("KeptnMetric", "keptnmetrics"),
    );
    for name in ["podinfo-errors", "podinfo-latency"] {
        let metric: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "metrics.keptn.sh/v1beta1", "kind": "KeptnMetric",
            "metadata": {"name": name, "namespace": "test"},
            "spec": {"provider": {"name": "prometheus"}, "fetchIntervalSeconds": 10,
                     "query": "sum(rate(http_requests_total{status=~\"5..\"}[1m]))"}
        }))
        .unwrap();
        metrics
            .create(&PostParams::default(), &metric)
            .await
            .unwrap();
    }
    metrics
        .patch_status(
            "podinfo-errors",
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"status": {"value": "0.25", "rawValue": "MC4yNQ==",
                "lastUpdated": "2026-11-27T12:00:00Z"}}),
            ),
        )
        .await
        .unwrap();
    let clients = ClientCache::default();
    clients.providers().use_kubernetes(client.clone());
    let read = |namespace: &str, query: &str| {
        let template = template(namespace, query);
        let clients = &clients;
        async move { support::read_template_with(&template, None, "1m", clients).await }
    };

    assert_eq!(
        read("test", "keptnmetric/{{ namespace }}/podinfo-errors").await,
        MetricReading::Value(0.25)
    );
    assert_eq!(
        read("test", "keptnmetric/test/podinfo-latency").await,
        MetricReading::NoData,
        "a KeptnMetric Keptn has not measured yet has no value"
    );
    let MetricReading::Error(missing) = read("test", "keptnmetric/test/absent").await else {
        panic!("a missing KeptnMetric is an error");
    };
    assert!(
        missing.starts_with(
            "Metric template slo.test (keptn) cannot be queried: KeptnMetric test/absent was not found"
        ),
        "{missing}"
    );
    let MetricReading::Error(elsewhere) = read("shop", "keptnmetric/payments/podinfo-errors").await
    else {
        panic!("another team's namespace is refused");
    };
    assert!(
        elsewhere
            .contains("a template may read only its own namespace (shop) or the Canary's (test)"),
        "{elsewhere}"
    );
    let MetricReading::Error(not_in_process) = support::read_template(
        &template("test", "keptnmetric/test/podinfo-errors"),
        None,
        "1m",
    )
    .await
    else {
        panic!("without the operator's client a keptn template is an error");
    };
    assert!(
        not_in_process.contains("read only by the operator"),
        "{not_in_process}"
    );

    let seen = Arc::new(Mutex::new(Vec::new()));
    let keptn_operator = tokio::spawn(play_keptn(client.clone(), seen.clone()));
    assert_eq!(
        read(
            "test",
            "analysis/test/podinfo-slo/5m/workload={{ target }};env=prod"
        )
        .await,
        MetricReading::Value(1.0)
    );
    assert_eq!(
        seen.lock().unwrap()[0],
        serde_json::json!({"analysisDefinition": {"name": "podinfo-slo"},
                           "timeframe": {"recent": "5m"},
                           "args": {"env": "prod", "workload": "podinfo"}})
    );
    assert_eq!(
        read("test", "analysis/test/podinfo-slo/1m/workload=faulty").await,
        MetricReading::Value(0.0)
    );
    // Keptn's 10 s wait, made 2 s here so the test does not sit idle.
    let stuck = serin_metrics::providers::keptn::read_within(
        &client,
        &serin_metrics::providers::keptn::parse("analysis/test/stuck").unwrap(),
        std::time::Duration::from_secs(2),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&stuck, serin_metrics::providers::Failure::Transport(m)
            if m.contains("did not complete within 2s: is Keptn's metrics operator running?")),
        "{stuck:?}"
    );
    keptn_operator.abort();
    let analyses: Api<DynamicObject> =
        Api::namespaced_with(client, "test", &keptn("Analysis", "analyses"));
    assert!(
        analyses
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "every Analysis made for a query is deleted"
    );
}
