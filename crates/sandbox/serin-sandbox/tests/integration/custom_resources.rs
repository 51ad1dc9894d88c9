//! Custom resources as the API server treats them, with the real kubectl and kube-rs: fields the
//! CRD does not declare are pruned (spec and status), `default`s appear on write and on read,
//! schema violations are a 422 naming the field, and lists come back in pages (`limit`,
//! `continue`) from one consistent snapshot, with tokens that expire.

use crate::common;

use crate::common::Kubectl;
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Config};
use serde_json::{Value, json};
use serin_api::Canary;
use serin_sandbox::Sandbox;
use std::collections::BTreeSet;

async fn start() -> (Sandbox, Client, Kubectl, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::start(dir.path()).await.unwrap();
    let client = Client::try_from(Config::new(sandbox.url.parse().unwrap())).unwrap();
    let kubectl = Kubectl::new(&sandbox);
    (sandbox, client, kubectl, dir)
}

fn api_error(error: kube::Error) -> (u16, String) {
    match error {
        kube::Error::Api(status) => (status.code, status.message),
        other => panic!("expected an API error, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serins_crds_prune_and_validate_what_is_written() {
    let (_sandbox, client, k, _dir) = start().await;
    k.apply(
        include_str!("../../../../../artifacts/crds/serin.yaml"),
        &[],
    );
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/canaries.serin.dev",
    ]);
    k.ok(&["create", "namespace", "test"]);
    let example = include_str!("../../../../../artifacts/examples/canary-progressive.yaml");
    // kubectl validates strictly by default: the example declares nothing the CRD lacks.
    k.apply(example, &[]);

    let with_unknown = example.replace("  provider: istio\n", "  provider: istio\n  bogus: 1\n");
    let (ok, _, err) = k.run(&["apply", "-f", "-"], Some(&with_unknown));
    assert!(!ok);
    assert!(
        err.contains("strict decoding error: unknown field \"spec.bogus\""),
        "{err}"
    );

    // Without fieldValidation (kube-rs) an unknown field is dropped, in spec and in status alike.
    let canaries: Api<Canary> = Api::namespaced(client.clone(), "test");
    canaries
        .patch(
            "podinfo",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"bogus": 1, "analysis": {"unknownKnob": true}}})),
        )
        .await
        .unwrap();
    canaries
        .patch_status(
            "podinfo",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Progressing", "undeclaredRecord": ["r1"]}})),
        )
        .await
        .unwrap();
    let stored: Value =
        serde_json::from_str(&k.ok(&["-n", "test", "get", "canary", "podinfo", "-o", "json"]))
            .unwrap();
    assert!(stored["spec"].get("bogus").is_none(), "{}", stored["spec"]);
    assert!(stored["spec"]["analysis"].get("unknownKnob").is_none());
    assert_eq!(stored["spec"]["analysis"]["maxWeight"], 50);
    assert_eq!(stored["status"]["phase"], "Progressing");
    assert!(
        stored["status"].get("undeclaredRecord").is_none(),
        "{}",
        stored["status"]
    );

    // The CRD declares maxWeight's range, so an out-of-range value never reaches the operator.
    let too_heavy = example.replace("maxWeight: 50", "maxWeight: 200");
    assert_ne!(too_heavy, example);
    let (ok, _, err) = k.run(&["apply", "-f", "-"], Some(&too_heavy));
    assert!(!ok);
    assert!(
        err.contains("The Canary \"podinfo\" is invalid: spec.analysis.maxWeight: Invalid value: 200: spec.analysis.maxWeight in body should be less than or equal to 100"),
        "{err}"
    );
    let refused = canaries
        .patch(
            "podinfo",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"analysis": {"maxWeight": 0, "stepWeight": 101}}})),
        )
        .await
        .unwrap_err();
    let (code, message) = api_error(refused);
    assert_eq!(code, 422);
    assert!(message.contains("spec.analysis.maxWeight: Invalid value: 0: spec.analysis.maxWeight in body should be greater than or equal to 1"), "{message}");
    assert!(
        message.contains("spec.analysis.stepWeight: Invalid value: 101"),
        "{message}"
    );
    let unchanged = canaries.get("podinfo").await.unwrap();
    assert_eq!(unchanged.spec.analysis.and_then(|a| a.max_weight), Some(50));
}

const WIDGETS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.test.serin.dev}
spec:
  group: test.serin.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1, maximum: 10}
              mode: {type: string, enum: [fast, safe], default: safe}
              port: {x-kubernetes-int-or-string: true}
              owner: {type: string, pattern: '^[a-z]+$'}
              tags: {type: array, x-kubernetes-list-type: set, items: {type: string}}
              extra: {type: object, x-kubernetes-preserve-unknown-fields: true}
REGION
          status:
            type: object
            properties:
              ready: {type: boolean}
"#;

fn widgets_crd(region_default: bool) -> String {
    let region = if region_default {
        "              region: {type: string, default: eu}"
    } else {
        ""
    };
    WIDGETS.replace("REGION\n", &format!("{region}\n"))
}

fn widget(name: &str, spec: Value) -> String {
    json!({"apiVersion": "test.serin.dev/v1", "kind": "Widget",
           "metadata": {"name": name, "namespace": "default"}, "spec": spec})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_crds_defaults_and_validation() {
    let (_sandbox, _client, k, _dir) = start().await;
    k.apply(&widgets_crd(false), &[]);
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.test.serin.dev",
    ]);

    k.apply(
        &widget("w1", json!({"size": 3, "extra": {"free": {"form": 1}}})),
        &[],
    );
    let get = |path: &str| k.ok(&["get", "widget", "w1", "-o", &format!("jsonpath={path}")]);
    assert_eq!(get("{.spec.mode}"), "safe", "a default appears on write");
    assert_eq!(get("{.spec.extra.free.form}"), "1", "preserved fields stay");

    let (ok, _, err) = k.run(
        &["create", "-f", "-"],
        Some(&widget(
            "w2",
            json!({"size": 0, "mode": "slow", "port": 1.5, "owner": "Bad", "tags": ["a", "a"]}),
        )),
    );
    assert!(!ok);
    for expected in [
        "The Widget \"w2\" is invalid:",
        "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1",
        "spec.mode: Unsupported value: \"slow\": supported values: \"fast\", \"safe\"",
        "spec.port: Invalid value: \"number\": spec.port in body must be of type integer,string: \"number\"",
        "spec.owner: Invalid value: \"Bad\": spec.owner in body should match '^[a-z]+$'",
        "spec.tags[1]: Duplicate value: \"a\"",
    ] {
        assert!(err.contains(expected), "{expected}\n{err}");
    }
    let (ok, _, err) = k.run(
        &["create", "-f", "-"],
        Some(&widget("w3", json!({"port": "http"}))),
    );
    assert!(!ok);
    assert!(
        err.contains("The Widget \"w3\" is invalid: spec.size: Required value"),
        "{err}"
    );

    // A default the CRD gains later appears when an existing object is read, without a write.
    let version = get("{.metadata.resourceVersion}");
    k.apply(&widgets_crd(true), &[]);
    assert!(common::eventually(
        std::time::Duration::from_secs(5),
        || get("{.spec.region}") == "eu"
    ));
    assert_eq!(get("{.metadata.resourceVersion}"), version);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_come_back_in_pages_from_one_snapshot() {
    let (sandbox, client, k, _dir) = start().await;
    k.apply(&widgets_crd(false), &[]);
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.test.serin.dev",
    ]);
    let gvk = GroupVersionKind::gvk("test.serin.dev", "v1", "Widget");
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk));
    futures::stream::iter(0..1200)
        .map(|i| {
            let widgets = widgets.clone();
            async move {
                let object: DynamicObject =
                    serde_json::from_str(&widget(&format!("w{i:04}"), json!({"size": 1 + i % 10})))
                        .unwrap();
                widgets
                    .create(&PostParams::default(), &object)
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await
        .unwrap();

    // kubectl asks for 500 at a time and follows the continue tokens.
    let (ok, out, err) = k.run(&["get", "widgets", "-o", "name", "-v=6"], None);
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 1200);
    let requests: Vec<&str> = err.lines().filter(|l| l.contains("/widgets?")).collect();
    assert_eq!(requests.len(), 3, "{requests:?}");
    assert!(requests.iter().all(|r| r.contains("limit=500")));
    assert_eq!(
        requests.iter().filter(|r| r.contains("continue=")).count(),
        2
    );

    // kube-rs, page by page: the later pages show the list as it was when the first was served.
    let first = widgets
        .list(&ListParams::default().limit(500))
        .await
        .unwrap();
    assert_eq!(first.items.len(), 500);
    assert_eq!(first.metadata.remaining_item_count, Some(700));
    widgets
        .delete("w1100", &DeleteParams::default())
        .await
        .unwrap();
    let late: DynamicObject = serde_json::from_str(&widget("w9999", json!({"size": 2}))).unwrap();
    widgets.create(&PostParams::default(), &late).await.unwrap();
    let mut names: Vec<String> = first
        .items
        .iter()
        .map(|w| w.metadata.name.clone().unwrap())
        .collect();
    let mut token = first.metadata.continue_.clone();
    let mut pages = 1;
    while let Some(next) = token.filter(|t| !t.is_empty()) {
        let page = widgets
            .list(&ListParams::default().limit(500).continue_token(&next))
            .await
            .unwrap();
        assert_eq!(
            page.metadata.resource_version,
            first.metadata.resource_version
        );
        names.extend(page.items.iter().map(|w| w.metadata.name.clone().unwrap()));
        token = page.metadata.continue_.clone();
        pages += 1;
    }
    assert_eq!(pages, 3);
    let unique: BTreeSet<&String> = names.iter().collect();
    assert_eq!((names.len(), unique.len()), (1200, 1200));
    assert!(
        names.contains(&"w1100".to_string()),
        "the snapshot still holds the deleted widget"
    );
    assert!(
        !names.contains(&"w9999".to_string()),
        "nor does it hold the later one"
    );
    assert_eq!(
        widgets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1200
    );

    // A token older than the retained history expires, as after an etcd compaction.
    let again = widgets
        .list(&ListParams::default().limit(100))
        .await
        .unwrap();
    widgets
        .delete("w0500", &DeleteParams::default())
        .await
        .unwrap();
    sandbox.store.compact();
    let expired = widgets
        .list(
            &ListParams::default()
                .limit(100)
                .continue_token(again.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap_err();
    let (code, message) = api_error(expired);
    assert_eq!(code, 410);
    assert!(
        message.contains("The provided continue parameter is too old"),
        "{message}"
    );
}
