//! What the tests of every converter share: migrating files, reading the output and warnings back,
//! and the Flagger and Argo Rollouts manifests they migrate; with the tests of the entry point.

use super::{Migration, Source, Warning, migrate};
use crate::migrate::documents::{name_of, split_documents};
use serde_json::Value;

pub(super) fn migrate_files(files: &[(&str, &str)]) -> Migration {
    let sources: Vec<Source> = files
        .iter()
        .map(|(name, text)| Source {
            name: name.to_string(),
            text: text.to_string(),
        })
        .collect();
    migrate(&sources).unwrap()
}

pub(super) fn migrate_one(text: &str) -> Migration {
    migrate_files(&[("in.yaml", text)])
}

/// The output documents, parsed.
pub(super) fn documents(migration: &Migration) -> Vec<Value> {
    split_documents(&migration.yaml)
        .iter()
        .map(|text| serde_saphyr::from_str(text).unwrap())
        .collect()
}

pub(super) fn find<'a>(documents: &'a [Value], kind: &str, name: &str) -> &'a Value {
    documents
        .iter()
        .find(|d| d["kind"] == kind && name_of(d) == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in {documents:#?}"))
}

/// The one warning whose path is `path`; fails when there is none or several.
pub(super) fn warning<'a>(migration: &'a Migration, path: &str) -> &'a Warning {
    let found: Vec<&Warning> = migration
        .warnings
        .iter()
        .filter(|w| w.path.as_deref() == Some(path))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "warnings at {path}: {:#?}",
        migration.warnings
    );
    found[0]
}

pub(super) fn object_warnings(migration: &Migration, object: &str) -> Vec<String> {
    migration
        .warnings
        .iter()
        .filter(|w| w.object == object && w.path.is_none())
        .map(|w| w.message.clone())
        .collect()
}

pub(super) const FLAGGER_CANARY: &str = "\
# podinfo's release
apiVersion: flagger.app/v1beta1   # Flagger's current API
kind: Canary
metadata:
  name: podinfo
  namespace: test
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: podinfo}
  service:
    port: 9898   # ClusterIP port
  analysis:
    interval: 1m
    threshold: 5
    stepWeight: 10
    maxWeight: 50
    metrics:
      - name: request-success-rate
        thresholdRange: {min: 99}
";

#[test]
fn other_objects_pass_through_as_written() {
    let text = "\
# the app
apiVersion: v1
kind: ConfigMap   # settings
metadata: {name: settings}
data: {color: blue}
";
    let migration = migrate_one(&format!("{text}---\n{FLAGGER_CANARY}"));
    assert!(migration.yaml.starts_with(&format!("{text}---\n")));
    assert_eq!(migration.converted, 1);
}

#[test]
fn a_file_that_is_not_yaml_is_an_error_naming_it() {
    let sources = [Source {
        name: "broken.yaml".into(),
        text: "a: 1\n---\nkind: [unclosed\n".into(),
    }];
    let error = migrate(&sources).unwrap_err();
    assert_eq!(error.to_string(), "broken.yaml: document 2 is not YAML");
}

pub(super) const TEMPLATES: &str = "\
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata: {name: success-rate, namespace: shop}
spec:
  args:
  - name: service-name
  - name: window
    value: 2m
  metrics:
  - name: success-rate
    interval: 1m
    count: 5
    failureLimit: 1
    successCondition: result[0] >= 0.95
    provider:
      prometheus:
        address: http://prometheus.monitoring:9090
        insecure: true
        timeout: 20
        headers: [{key: X-Scope-OrgID, value: shop}]
        query: sum(rate(ok{svc=\"{{args.service-name}}\"}[{{args.window}}])) / sum(rate(all{svc=\"{{args.service-name}}\"}[{{args.window}}]))
---
apiVersion: argoproj.io/v1alpha1
kind: ClusterAnalysisTemplate
metadata: {name: checks}
spec:
  metrics:
  - name: smoke
    provider:
      job:
        spec: {template: {spec: {containers: [{name: t, image: ghcr.io/stefanprodan/podinfo:6.0.0}]}}}
  - name: errors
    interval: 30s
    failureLimit: 3
    failureCondition: result[0] > 5
    provider:
      prometheus:
        address: http://prometheus.monitoring:9090
        query: sum(rate(errors[1m]))
";

pub(super) const SERVICES: &str = "\
apiVersion: v1
kind: Service
metadata: {name: shop-stable, namespace: shop}
spec:
  selector: {app: shop}
  ports: [{name: metrics, port: 9797}, {name: web, port: 8080, targetPort: 9898}]
---
apiVersion: v1
kind: Service
metadata: {name: shop-canary, namespace: shop}
spec:
  selector: {app: shop}
  ports: [{name: web, port: 8080, targetPort: 9898}]
---
apiVersion: networking.istio.io/v1beta1
kind: VirtualService
metadata: {name: shop-vsvc, namespace: shop}
spec:
  hosts: [shop, shop.example.com]
  gateways: [mesh, shop-gateway]
  exportTo: [\".\"]
  http:
  - name: debug
    match: [{headers: {x-debug: {exact: \"1\"}}}]
    route: [{destination: {host: shop-canary}}]
  - name: primary
    timeout: 5s
    fault: {delay: {percentage: {value: 1}, fixedDelay: 1s}}
    route:
    - destination: {host: shop-stable, port: {number: 8080}}
      weight: 100
    - destination: {host: shop-canary, port: {number: 8080}}
      weight: 0
---
apiVersion: networking.istio.io/v1beta1
kind: DestinationRule
metadata: {name: shop-destrule, namespace: shop}
spec:
  host: shop
  trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}
  subsets: [{name: canary}, {name: stable}]
";

pub(super) const CANARY_ROLLOUT: &str = "\
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata:
  name: shop
  namespace: shop
  labels: {app: shop, team: web}
  annotations:
    notifications.argoproj.io/subscribe.on-rollout-aborted.slack: web-team
    owner: web-team
spec:
  replicas: 5
  revisionHistoryLimit: 4
  progressDeadlineSeconds: 300
  progressDeadlineAbort: false
  selector: {matchLabels: {app: shop}}
  template:
    metadata: {labels: {app: shop}}
    spec:
      containers: [{name: shop, image: ghcr.io/stefanprodan/podinfo:6.0.0, ports: [{containerPort: 9898}]}]
  strategy:
    canary:
      canaryService: shop-canary
      stableService: shop-stable
      maxSurge: 1
      dynamicStableScale: true
      abortScaleDownDelaySeconds: 10
      canaryMetadata: {labels: {role: canary}}
      trafficRouting:
        managedRoutes: [{name: mirror}]
        istio:
          virtualService: {name: shop-vsvc, routes: [primary]}
          destinationRule: {name: shop-destrule, canarySubsetName: canary, stableSubsetName: stable}
      analysis:
        templates: [{templateName: checks, clusterScope: true}]
      steps:
      - setCanaryScale: {weight: 20}
      - setWeight: 20
      - pause: {duration: 10m}
      - analysis:
          templates: [{templateName: success-rate}]
          args:
          - name: service-name
            valueFrom: {fieldRef: {fieldPath: \"metadata.labels['app']\"}}
      - experiment:
          templates: [{name: baseline, specRef: stable}]
      - setMirrorRoute: {name: mirror, percentage: 10}
      - setWeight: 60
      - pause: {}
";

/// [`CANARY_ROLLOUT`] with success-rate in its background analysis too, so that template serves
/// the Canary's interval metrics as well as the analysis step.
pub(super) fn background_success_rate(rollout: &str) -> String {
    rollout.replace(
        "templates: [{templateName: checks, clusterScope: true}]",
        "templates: [{templateName: checks, clusterScope: true}, {templateName: success-rate}]\n        args: [{name: service-name, value: shop}]",
    )
}

/// A Rollout without its steps: its background analysis then becomes the Canary's interval
/// metrics, as Serin's backgroundAnalysis runs alongside steps only.
pub(super) fn without_steps(rollout: &str) -> String {
    rollout
        .split("      steps:\n")
        .next()
        .unwrap_or(rollout)
        .to_string()
}

/// The warnings of Serin's validation: what the migrated objects would be refused for.
pub(super) fn refusals(migration: &Migration) -> Vec<&Warning> {
    migration
        .warnings
        .iter()
        .filter(|w| w.message.starts_with("Serin refuses"))
        .collect()
}

pub(super) fn shop() -> Migration {
    migrate_files(&[
        ("templates.yaml", TEMPLATES),
        ("services.yaml", SERVICES),
        ("rollout.yaml", CANARY_ROLLOUT),
    ])
}

#[test]
fn analysis_runs_and_experiments_are_left_out() {
    let migration = migrate_one(
        "apiVersion: argoproj.io/v1alpha1\nkind: AnalysisRun\nmetadata: {name: shop-1}\nspec: {metrics: []}\n---\napiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: shop}\n",
    );
    assert_eq!(
        migration.yaml,
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: shop}\n"
    );
    assert!(object_warnings(&migration, "AnalysisRun shop-1")[0].starts_with("no equivalent"));
}
