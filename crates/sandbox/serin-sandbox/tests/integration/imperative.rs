//! kubectl's imperative commands (`create <kind>`, `run`, `expose`), which send protobuf bodies.

use crate::common::Kubectl;
use serin_sandbox::Sandbox;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_generators_make_the_objects_they_describe() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::start(dir.path()).await.unwrap();
    let k = Kubectl::new(&sandbox);

    assert_eq!(
        k.ok(&["create", "namespace", "team-a"]),
        "namespace/team-a created\n"
    );
    let ns = ["-n", "team-a"];
    let kc = |args: &[&str]| k.ok(&[&ns[..], args].concat());

    kc(&[
        "create",
        "configmap",
        "settings",
        "--from-literal=color=blue",
        "--from-literal=size=2",
    ]);
    assert_eq!(
        kc(&[
            "get",
            "configmap",
            "settings",
            "-o",
            "jsonpath={.data.color},{.data.size}"
        ]),
        "blue,2"
    );
    kc(&[
        "create",
        "secret",
        "generic",
        "db",
        "--from-literal=password=hunter2",
    ]);
    // Secret data travels as protobuf bytes and comes back base64-encoded, as on a cluster.
    assert_eq!(
        kc(&["get", "secret", "db", "-o", "jsonpath={.data.password}"]),
        "aHVudGVyMg=="
    );
    assert_eq!(
        kc(&["get", "secret", "db", "-o", "jsonpath={.type}"]),
        "Opaque"
    );
    assert_eq!(
        kc(&["create", "serviceaccount", "robot"]),
        "serviceaccount/robot created\n"
    );

    kc(&[
        "create",
        "deployment",
        "web",
        "--image=ghcr.io/stefanprodan/podinfo:6.0.0",
        "--replicas=2",
        "--port=9898",
    ]);
    kc(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    assert_eq!(
        kc(&[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.strategy.type} {.status.readyReplicas} {.spec.template.spec.containers[0].ports[0].containerPort}"
        ]),
        "RollingUpdate 2 9898"
    );
    // An explicit zero survives the trip (a pointer field set to 0 is not the same as unset).
    kc(&[
        "create",
        "deployment",
        "idle",
        "--image=ghcr.io/stefanprodan/podinfo:6.0.0",
        "--replicas=0",
    ]);
    assert_eq!(
        kc(&[
            "get",
            "deployment",
            "idle",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "0"
    );

    kc(&["create", "service", "clusterip", "web", "--tcp=80:9898"]);
    assert_eq!(
        kc(&[
            "get",
            "service",
            "web",
            "-o",
            "jsonpath={.spec.ports[0].port}:{.spec.ports[0].targetPort} {.spec.selector.app}"
        ]),
        "80:9898 web"
    );
    assert_eq!(
        kc(&[
            "expose",
            "deployment",
            "web",
            "--name=web-direct",
            "--port=9898"
        ]),
        "service/web-direct exposed\n"
    );
    assert_eq!(
        kc(&[
            "run",
            "debug",
            "--image=ghcr.io/stefanprodan/podinfo:6.0.0",
            "--labels=app=debug"
        ]),
        "pod/debug created\n"
    );
    kc(&[
        "wait",
        "--for=condition=Ready",
        "pod/debug",
        "--timeout=60s",
    ]);

    let again = k.fails(&["-n", "team-a", "create", "configmap", "settings"], None);
    assert!(
        again.contains("failed to create configmap: configmaps \"settings\" already exists"),
        "{again}"
    );
    sandbox.stop().await;
}
