//! Authentication and RBAC with the real kubectl: ServiceAccount tokens over the HTTPS address,
//! impersonation, `kubectl auth can-i|whoami`, Roles and bindings enforced as on a cluster.

use crate::common::Kubectl;
use serin_sandbox::Sandbox;
use std::path::PathBuf;

/// kubectl acting with a kubeconfig of its own (a ServiceAccount token).
fn kubectl_with(kubeconfig: &str, dir: &tempfile::TempDir, name: &str) -> Kubectl {
    let path: PathBuf = dir.path().join(name);
    std::fs::write(&path, kubeconfig).unwrap();
    Kubectl::with_kubeconfig(path)
}

const ROBOT: &str = "system:serviceaccount:team-a:robot";

/// Gives team-a's robot a Role `role` (`--verb=...`, `--resource=...`) through a RoleBinding.
fn grant_robot(admin: &Kubectl, role: &str, verbs: &str, resources: &str) {
    admin.ok(&["-n", "team-a", "create", "role", role, verbs, resources]);
    let binding = format!("robot-{role}");
    let role_ref = format!("--role={role}");
    admin.ok(&[
        "-n",
        "team-a",
        "create",
        "rolebinding",
        &binding,
        &role_ref,
        "--serviceaccount=team-a:robot",
    ]);
}

/// A sandbox with the namespace `team-a` and its ServiceAccount `robot`, and the admin's kubectl.
async fn team_a_with_robot() -> (Sandbox, tempfile::TempDir, Kubectl) {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::start(dir.path()).await.unwrap();
    let admin = Kubectl::new(&sandbox);
    admin.ok(&["create", "namespace", "team-a"]);
    admin.ok(&["-n", "team-a", "create", "serviceaccount", "robot"]);
    (sandbox, dir, admin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_tokens_get_exactly_what_their_bindings_grant() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::start(dir.path()).await.unwrap();
    let admin = Kubectl::new(&sandbox);
    admin.ok(&["create", "namespace", "team-a"]);
    admin.ok(&["create", "namespace", "team-b"]);
    admin.ok(&["-n", "team-a", "create", "serviceaccount", "robot"]);
    admin.ok(&[
        "-n",
        "team-a",
        "create",
        "configmap",
        "settings",
        "--from-literal=a=1",
    ]);
    admin.ok(&[
        "-n",
        "team-a",
        "create",
        "configmap",
        "other",
        "--from-literal=b=2",
    ]);

    let token = admin.ok(&["-n", "team-a", "create", "token", "robot", "--duration=20m"]);
    let robot = kubectl_with(&sandbox.kubeconfig_for_token(token.trim()), &dir, "robot");
    let whoami = robot.ok(&["auth", "whoami"]);
    assert!(whoami.contains(&format!("Username    {ROBOT}")), "{whoami}");
    assert!(
        whoami.contains(
            "[system:serviceaccounts system:serviceaccounts:team-a system:authenticated]"
        ),
        "{whoami}"
    );

    // No binding yet: a 403 worded as the API server words it.
    let denied = robot.fails(&["-n", "team-a", "get", "pods"], None);
    assert!(
        denied.contains(&format!("Error from server (Forbidden): pods is forbidden: User \"{ROBOT}\" cannot list resource \"pods\" in API group \"\" in the namespace \"team-a\"")),
        "{denied}"
    );

    // The built-in `view` role, bound in team-a only.
    admin.ok(&[
        "-n",
        "team-a",
        "create",
        "rolebinding",
        "robot-view",
        "--clusterrole=view",
        "--serviceaccount=team-a:robot",
    ]);
    assert_eq!(
        robot.ok(&["-n", "team-a", "get", "configmaps", "-o", "name"]),
        "configmap/other\nconfigmap/settings\n"
    );
    let elsewhere = robot.fails(&["-n", "team-b", "get", "deployments"], None);
    assert!(
        elsewhere.contains(
            "cannot list resource \"deployments\" in API group \"apps\" in the namespace \"team-b\""
        ),
        "{elsewhere}"
    );
    let no_secrets = robot.fails(&["-n", "team-a", "get", "secrets"], None);
    assert!(
        no_secrets.contains("cannot list resource \"secrets\""),
        "{no_secrets}"
    );
    let no_delete = robot.fails(&["-n", "team-a", "delete", "configmap", "other"], None);
    assert!(
        no_delete.contains("configmaps \"other\" is forbidden"),
        "{no_delete}"
    );
    assert_eq!(
        robot.ok(&["-n", "team-a", "auth", "can-i", "watch", "deployments.apps"]),
        "yes\n"
    );
    assert_eq!(
        robot.output(&["-n", "team-a", "auth", "can-i", "create", "deployments"]),
        (false, "no\n".into())
    );

    // A Role limited by resourceNames and one subresource.
    admin.ok(&[
        "-n",
        "team-a",
        "create",
        "role",
        "settings-editor",
        "--verb=update,patch",
        "--resource=configmaps",
        "--resource-name=settings",
    ]);
    admin.ok(&[
        "-n",
        "team-a",
        "create",
        "role",
        "scaler",
        "--verb=get,patch",
        "--resource=deployments.apps/scale",
    ]);
    admin.ok(&[
        "-n",
        "team-a",
        "create",
        "rolebinding",
        "robot-settings",
        "--role=settings-editor",
        "--serviceaccount=team-a:robot",
    ]);
    admin.ok(&[
        "-n",
        "team-a",
        "create",
        "rolebinding",
        "robot-scaler",
        "--role=scaler",
        "--serviceaccount=team-a:robot",
    ]);
    robot.ok(&[
        "-n",
        "team-a",
        "label",
        "configmap",
        "settings",
        "owner=robot",
    ]);
    let other = robot.fails(
        &["-n", "team-a", "label", "configmap", "other", "owner=robot"],
        None,
    );
    assert!(
        other.contains("cannot patch resource \"configmaps\""),
        "{other}"
    );
    admin.ok(&[
        "-n",
        "team-a",
        "create",
        "deployment",
        "web",
        "--image=ghcr.io/stefanprodan/podinfo:6.0.0",
    ]);
    robot.ok(&["-n", "team-a", "scale", "deployment", "web", "--replicas=3"]);
    assert_eq!(
        admin.ok(&[
            "-n",
            "team-a",
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "3"
    );
    let edit = robot.fails(
        &[
            "-n",
            "team-a",
            "set",
            "image",
            "deployment/web",
            "podinfo=ghcr.io/stefanprodan/podinfo:6.0.1",
        ],
        None,
    );
    assert!(
        edit.contains("cannot patch resource \"deployments\" in API group \"apps\""),
        "{edit}"
    );

    // Non-resource URLs need a ClusterRole that names them.
    let metrics = robot.fails(&["get", "--raw", "/metrics"], None);
    assert!(
        metrics.contains(&format!("User \"{ROBOT}\" cannot get path \"/metrics\"")),
        "{metrics}"
    );
    admin.ok(&[
        "create",
        "clusterrole",
        "metrics-reader",
        "--verb=get",
        "--non-resource-url=/metrics",
    ]);
    admin.ok(&[
        "create",
        "clusterrolebinding",
        "robot-metrics",
        "--clusterrole=metrics-reader",
        "--serviceaccount=team-a:robot",
    ]);
    assert!(
        robot
            .ok(&["get", "--raw", "/metrics"])
            .contains("apiserver_request_total")
    );

    // The sandbox recorded what the robot was allowed to do.
    let access = sandbox.auth.access();
    let granted = &access[ROBOT];
    let has = |verb: &str, group: &str, resource: &str, sub: &str| {
        granted.iter().any(|a| {
            a.verb == verb && a.group == group && a.resource == resource && a.subresource == sub
        })
    };
    assert!(has("list", "", "configmaps", ""));
    assert!(has("patch", "apps", "deployments", "scale"));
    assert!(
        !has("list", "", "secrets", ""),
        "denied requests are not recorded"
    );

    // A deleted ServiceAccount's tokens stop working, as on a cluster.
    admin.ok(&["-n", "team-a", "delete", "serviceaccount", "robot"]);
    let gone = robot.fails(&["-n", "team-a", "get", "configmaps"], None);
    assert!(
        gone.contains("error: You must be logged in to the server"),
        "{gone}"
    );
    let short = admin.fails(
        &[
            "-n",
            "team-a",
            "create",
            "token",
            "default",
            "--duration=1m",
        ],
        None,
    );
    assert!(
        short.contains("may not specify a duration less than 10 minutes"),
        "{short}"
    );
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_can_i_and_aggregated_roles() {
    let (sandbox, dir, admin) = team_a_with_robot().await;
    let as_robot = ["-n", "team-a", "--as", ROBOT];
    let robot = |args: &[&str]| admin.output(&[&as_robot[..], args].concat());

    let whoami = admin.ok(&["auth", "whoami"]);
    assert!(whoami.contains("Username    sandbox-admin"), "{whoami}");
    assert!(whoami.contains("system:masters"), "{whoami}");
    assert_eq!(admin.ok(&["auth", "can-i", "*", "*"]), "yes\n");
    assert_eq!(
        robot(&["auth", "can-i", "list", "pods"]),
        (false, "no\n".into())
    );

    // `edit` holds `view` and `admin` holds `edit`, through aggregation labels.
    admin.ok(&[
        "-n",
        "team-a",
        "create",
        "rolebinding",
        "robot-admin",
        "--clusterrole=admin",
        "--serviceaccount=team-a:robot",
    ]);
    for (verb, resource) in [
        ("list", "pods"),
        ("delete", "deployments.apps"),
        ("create", "rolebindings.rbac.authorization.k8s.io"),
        ("get", "secrets"),
    ] {
        assert_eq!(
            robot(&["auth", "can-i", verb, resource]),
            (true, "yes\n".into()),
            "{verb} {resource}"
        );
    }
    let nodes = robot(&["auth", "can-i", "list", "nodes"]);
    // kubectl adds a warning because --namespace means nothing for nodes.
    assert!(!nodes.0 && nodes.1.starts_with("no\n"), "{nodes:?}");
    // kubectl warns that the sandbox serves no canaries (no CRD here); the answer still counts.
    let canaries = robot(&["auth", "can-i", "list", "canaries.flagger.app"]);
    assert!(
        !canaries.0 && canaries.1.starts_with("no\n"),
        "{canaries:?}"
    );
    // A ClusterRole labelled aggregate-to-view extends view, and so edit and admin.
    admin.apply(
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: events-view
  labels: {rbac.authorization.k8s.io/aggregate-to-view: "true"}
rules:
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [get, list, watch]
"#,
        &[],
    );
    let mut answered = (false, String::new());
    for _ in 0..50 {
        answered = robot(&["auth", "can-i", "list", "events.events.k8s.io"]);
        if answered.0 && answered.1.starts_with("yes\n") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        answered.0 && answered.1.starts_with("yes\n"),
        "{answered:?}"
    );
    let view = admin.ok(&[
        "get",
        "clusterrole",
        "view",
        "-o",
        "jsonpath={.rules[*].apiGroups}",
    ]);
    assert!(view.contains("events.k8s.io"), "{view}");

    let list = robot(&["auth", "can-i", "--list"]).1;
    assert!(list.contains("events.events.k8s.io"), "{list}");
    assert!(
        list.contains("selfsubjectaccessreviews.authorization.k8s.io"),
        "{list}"
    );

    // Impersonating needs the `impersonate` verb: the robot may not pose as someone else.
    let token = admin.ok(&["-n", "team-a", "create", "token", "robot"]);
    let with_token = kubectl_with(&sandbox.kubeconfig_for_token(token.trim()), &dir, "robot");
    let posing = with_token.fails(
        &[
            "--as",
            "jane",
            "get",
            "--raw",
            "/api/v1/namespaces/team-a/pods",
        ],
        None,
    );
    assert!(
        posing.contains(&format!("users \"jane\" is forbidden: User \"{ROBOT}\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope")),
        "{posing}"
    );
    sandbox.stop().await;
}

/// A ConfigMap owned by Deployment `web` (uid `uid`), blocking its owner's deletion or not.
fn owned_configmap(name: &str, uid: &str, block: bool) -> String {
    format!(
        r#"{{"apiVersion": "v1", "kind": "ConfigMap",
  "metadata": {{"name": "{name}", "namespace": "team-a",
    "ownerReferences": [{{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
      "uid": "{uid}", "controller": true, "blockOwnerDeletion": {block}}}]}},
  "data": {{"a": "1"}}}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_an_owners_deletion_needs_update_on_its_finalizers() {
    let (_sandbox, _dir, admin) = team_a_with_robot().await;
    admin.ok(&[
        "-n",
        "team-a",
        "create",
        "deployment",
        "web",
        "--image=nginx",
    ]);
    let uid = admin.ok(&[
        "-n",
        "team-a",
        "get",
        "deploy",
        "web",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    grant_robot(
        &admin,
        "writer",
        "--verb=get,list,create,update,patch",
        "--resource=configmaps,deployments",
    );
    let robot = |args: &[&str], stdin: Option<&str>| {
        let mut all = vec!["--as", ROBOT, "-n", "team-a"];
        all.extend_from_slice(args);
        admin.run(&all, stdin)
    };

    // Without delete on ConfigMaps, no ownerReference at all may be set.
    let (ok, _, err) = robot(
        &["create", "-f", "-"],
        Some(&owned_configmap("a", &uid, false)),
    );
    assert!(!ok);
    assert!(
        err.contains("configmaps \"a\" is forbidden: cannot set an ownerRef on a resource you can't delete: , <nil>"),
        "{err}"
    );
    grant_robot(&admin, "deleter", "--verb=delete", "--resource=configmaps");
    // A reference that does not block the owner's deletion needs nothing more.
    let (ok, _, err) = robot(
        &["create", "-f", "-"],
        Some(&owned_configmap("a", &uid, false)),
    );
    assert!(ok, "{err}");
    // Blocking it needs update on deployments/finalizers, whether created, replaced or patched.
    let refused = "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: , <nil>";
    let (ok, _, err) = robot(
        &["create", "-f", "-"],
        Some(&owned_configmap("b", &uid, true)),
    );
    assert!(
        !ok && err.contains(&format!("configmaps \"b\" is forbidden: {refused}")),
        "{err}"
    );
    let (ok, _, err) = robot(
        &["replace", "-f", "-"],
        Some(&owned_configmap("a", &uid, true)),
    );
    assert!(!ok && err.contains(refused), "{err}");
    let patch = r#"[{"op": "replace", "path": "/metadata/ownerReferences/0/blockOwnerDeletion", "value": true}]"#;
    let (ok, _, err) = robot(
        &["patch", "configmap", "a", "--type=json", "-p", patch],
        None,
    );
    assert!(!ok && err.contains(refused), "{err}");
    // The refused writes left nothing behind.
    let blocks = admin.ok(&[
        "-n",
        "team-a",
        "get",
        "configmap",
        "a",
        "-o",
        "jsonpath={.metadata.ownerReferences[0].blockOwnerDeletion}",
    ]);
    assert_eq!(blocks, "false");
    assert!(!admin.output(&["-n", "team-a", "get", "configmap", "b"]).0);

    grant_robot(
        &admin,
        "finalizer",
        "--verb=update",
        "--resource=deployments/finalizers",
    );
    let (ok, _, err) = robot(
        &["patch", "configmap", "a", "--type=json", "-p", patch],
        None,
    );
    assert!(ok, "{err}");
    let (ok, _, err) = robot(
        &["create", "-f", "-"],
        Some(&owned_configmap("b", &uid, true)),
    );
    assert!(ok, "{err}");
    // The admin is never held to the check.
    let (ok, _, err) = admin.run(
        &["create", "-f", "-"],
        Some(&owned_configmap("c", &uid, true)),
    );
    assert!(ok, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_side_apply_that_creates_needs_create() {
    let (_sandbox, _dir, admin) = team_a_with_robot().await;
    grant_robot(
        &admin,
        "patcher",
        "--verb=get,patch",
        "--resource=configmaps",
    );
    let manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: team-a}\ndata: {a: '1'}\n";
    let apply = ["--as", ROBOT, "apply", "--server-side", "-f", "-"];
    let (ok, _, err) = admin.run(&apply, Some(manifest));
    assert!(!ok);
    assert!(
        err.contains(
            "User \"system:serviceaccount:team-a:robot\" cannot create resource \"configmaps\""
        ),
        "{err}"
    );
    // Once the object exists, patch is enough to apply changes to it.
    admin.ok(&[
        "-n",
        "team-a",
        "create",
        "configmap",
        "settings",
        "--from-literal=a=0",
    ]);
    let mut take_over = apply.to_vec();
    take_over.push("--force-conflicts");
    let (ok, _, err) = admin.run(&take_over, Some(manifest));
    assert!(ok, "{err}");
    assert_eq!(
        admin.ok(&[
            "-n",
            "team-a",
            "get",
            "cm",
            "settings",
            "-o",
            "jsonpath={.data.a}"
        ]),
        "1"
    );
}

/// A TokenReview (as a dashboard or an authenticating proxy asks it) names the bearer of a token
/// the sandbox issued, and accepts no other; only who may create tokenreviews may ask.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_review_names_the_tokens_service_account() {
    let (_sandbox, _dir, admin) = team_a_with_robot().await;
    let token = admin.ok(&["-n", "team-a", "create", "token", "robot"]);
    let review = |token: &str| {
        let manifest = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token.trim()},
        });
        let (ok, out, err) = admin.run(
            &["create", "-f", "-", "-o", "json"],
            Some(&manifest.to_string()),
        );
        assert!(ok, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["status"].clone()
    };
    let status = review(&token);
    assert_eq!(status["authenticated"], true, "{status}");
    assert_eq!(status["user"]["username"], ROBOT);
    let groups = status["user"]["groups"].to_string();
    assert!(groups.contains("system:serviceaccounts:team-a"), "{groups}");
    let forged = review("not-a-token");
    assert_eq!(forged["authenticated"], false, "{forged}");

    let (allowed, answer) =
        admin.output(&["auth", "can-i", "create", "tokenreviews", "--as", ROBOT]);
    assert!(!allowed && answer.starts_with("no\n"), "{answer}");
}
