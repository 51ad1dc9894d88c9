//! Who a request is, with the sandbox's own kubeconfig: kubectl's `--token` is honoured (the
//! kubeconfig names the HTTPS address, where kubectl sends tokens), a request without credentials
//! on the HTTPS address is `system:anonymous`, the plain-HTTP loopback address stays the admin's,
//! and kube-rs reads the kubeconfig as kubectl does.

use crate::common::Kubectl;
use serin_sandbox::Sandbox;

const READER: &str = "system:serviceaccount:team-a:reader";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_on_the_command_line_acts_as_its_service_account() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::start(dir.path()).await.unwrap();
    let k = Kubectl::new(&sandbox);
    k.ok(&["create", "namespace", "team-a"]);
    k.ok(&["-n", "team-a", "create", "serviceaccount", "reader"]);
    k.ok(&[
        "-n",
        "team-a",
        "create",
        "deployment",
        "web",
        "--image=ghcr.io/stefanprodan/podinfo:6.0.0",
    ]);
    k.ok(&[
        "-n",
        "team-a",
        "create",
        "role",
        "deployment-reader",
        "--verb=get,list,watch",
        "--resource=deployments",
    ]);
    k.ok(&[
        "-n",
        "team-a",
        "create",
        "rolebinding",
        "reader",
        "--role=deployment-reader",
        "--serviceaccount=team-a:reader",
    ]);
    let token = k.ok(&["-n", "team-a", "create", "token", "reader"]);
    let token = format!("--token={}", token.trim());

    let (deleted, stdout, stderr) = k.run(
        &["-n", "team-a", &token, "delete", "deployment", "web"],
        None,
    );
    assert!(
        !deleted,
        "a read-only token deleted the Deployment:\n{stdout}"
    );
    assert!(stderr.contains("forbidden"), "{stderr}");
    assert!(stderr.contains(READER), "{stderr}");
    assert_eq!(
        k.ok(&["-n", "team-a", "get", "deployment", "web", "-o", "name"]),
        "deployment.apps/web\n"
    );
    assert_eq!(
        k.ok(&["-n", "team-a", &token, "get", "deployments", "-o", "name"]),
        "deployment.apps/web\n",
        "the Role lets the token read"
    );

    let whoami = k.ok(&[&token, "auth", "whoami"]);
    assert!(
        whoami.contains(&format!("Username    {READER}")),
        "{whoami}"
    );
    let admin = k.ok(&["auth", "whoami"]);
    assert!(admin.contains("Username    sandbox-admin"), "{admin}");
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_credentials_the_https_address_serves_only_public_information() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::start(dir.path()).await.unwrap();
    let ca = reqwest::Certificate::from_pem(sandbox.ca_pem.as_bytes()).unwrap();
    let client = reqwest::Client::builder()
        .tls_certs_only([ca])
        .no_proxy()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .unwrap();
    let get = |base: &str, path: &str| {
        let request = client.get(format!("{base}{path}"));
        async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };

    let https = sandbox.https_url.as_str();
    for path in [
        "/version",
        "/api",
        "/apis",
        "/api/v1",
        "/openapi/v3",
        "/healthz",
    ] {
        let (status, body) = get(https, path).await;
        assert_eq!(status, 200, "GET {path} without credentials: {body}");
    }
    let (status, body) = get(https, "/api/v1/pods").await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains(
            r#"pods is forbidden: User \"system:anonymous\" cannot list resource \"pods\" in API group \"\" at the cluster scope"#
        ),
        "{body}"
    );
    let (status, body) = get(https, "/metrics").await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains(r#"User \"system:anonymous\" cannot get path \"/metrics\""#),
        "{body}"
    );

    // The plain-HTTP loopback address is the local admin's.
    let (status, body) = get(&sandbox.url, "/api/v1/pods").await;
    assert_eq!(status, 200, "{body}");
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_acts_as_the_admin_with_the_sandboxs_kubeconfig() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};
    use kube::config::{KubeConfigOptions, Kubeconfig};

    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::start(dir.path()).await.unwrap();
    let kubeconfig = Kubeconfig::read_from(&sandbox.kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    assert_eq!(
        config.cluster_url.to_string(),
        format!("{}/", sandbox.https_url)
    );
    let client = kube::Client::try_from(config).unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(client, "default");
    let created = configmaps
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "from-kube-rs"}}))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(created.metadata.name.as_deref(), Some("from-kube-rs"));
    sandbox.stop().await;
}
