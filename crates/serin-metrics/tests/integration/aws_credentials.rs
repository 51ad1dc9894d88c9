//! A CloudWatch template without keys of its own is read with the operator's AWS identity, found
//! as the AWS SDKs find it: environment variables, then a shared credentials file, then a web
//! identity token file exchanged at STS (as IRSA mounts it). The loopback CloudWatch verifies
//! whose signature each request carries; a loopback STS answers `AssumeRoleWithWebIdentity`.
//!
//! This file holds one test: it changes the process's environment, which no other test may read
//! at the same time.

use axum::body::Bytes;
use serin_core::plan::MetricReading;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::support;
use crate::support::cloudwatch as cloudwatch_server;

fn template(address: &str) -> serin_api::MetricTemplate {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "serin.dev/v1beta1", "kind": "MetricTemplate",
        "metadata": {"name": "errors", "namespace": "test"},
        "spec": {"provider": {"type": "cloudwatch", "address": address, "region": "us-west-2"},
                 "query": r#"[{"Id": "e1", "Expression": "SUM(METRICS())"}]"#}
    }))
    .unwrap()
}

/// Serves STS's `AssumeRoleWithWebIdentity` (the query protocol, an XML answer) and records the
/// form of each call.
async fn serve_sts() -> (String, Arc<Mutex<Vec<BTreeMap<String, String>>>>) {
    let calls: Arc<Mutex<Vec<BTreeMap<String, String>>>> = Arc::default();
    let record = calls.clone();
    let app = axum::Router::new().route(
        "/",
        axum::routing::post(move |body: Bytes| {
            let record = record.clone();
            async move {
                let form: BTreeMap<String, String> = reqwest::Url::parse(&format!(
                    "http://sts/?{}",
                    String::from_utf8_lossy(&body)
                ))
                .unwrap()
                .query_pairs()
                .into_owned()
                .collect();
                record.lock().unwrap().push(form);
                let expiration = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1);
                let expiration = expiration.strftime("%Y-%m-%dT%H:%M:%SZ");
                (
                    [("content-type", "text/xml")],
                    format!(
                        r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>system:serviceaccount:serin-system:serin</SubjectFromWebIdentityToken>
    <Audience>sts.amazonaws.com</Audience>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/serin-cloudwatch/serin</Arn>
      <AssumedRoleId>AROACLKWSDQRAOEXAMPLE:serin</AssumedRoleId>
    </AssumedRoleUser>
    <Credentials>
      <SessionToken>web-identity-s3ssion</SessionToken>
      <SecretAccessKey>webIdentitySecretKeyEXAMPLE</SecretAccessKey>
      <Expiration>{expiration}</Expiration>
      <AccessKeyId>ASIAWEBIDENTITY</AccessKeyId>
    </Credentials>
    <Provider>arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/EXAMPLE</Provider>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>ad4156e9-bce1-11e2-82e6-6b6efEXAMPLE</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>"#
                    ),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, calls)
}

fn set(name: &str, value: &str) {
    // SAFETY: this test binary holds one test, and nothing else reads the environment while it
    // changes it (the reads below happen after each change, on this task).
    unsafe { std::env::set_var(name, value) }
}

fn unset(name: &str) {
    // SAFETY: as in `set`.
    unsafe { std::env::remove_var(name) }
}

#[tokio::test]
async fn the_operators_identity_comes_from_env_then_profile_then_web_identity() {
    let (address, cloudwatch) = cloudwatch_server::serve(&[
        ("AKIDFROMENV", "envSecretKeyEXAMPLE"),
        ("AKIDFROMPROFILE", "profileSecretKeyEXAMPLE"),
        ("ASIAWEBIDENTITY", "webIdentitySecretKeyEXAMPLE"),
    ])
    .await;
    let (sts, sts_calls) = serve_sts().await;
    let files = tempfile::tempdir().unwrap();
    let credentials_file = files.path().join("credentials");
    // Nothing of the machine running the test may answer: no instance metadata, no ~/.aws.
    set("AWS_EC2_METADATA_DISABLED", "true");
    set(
        "AWS_CONFIG_FILE",
        files.path().join("config").to_str().unwrap(),
    );
    set(
        "AWS_SHARED_CREDENTIALS_FILE",
        credentials_file.to_str().unwrap(),
    );
    for name in [
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ] {
        unset(name);
    }
    let template = template(&address);
    let signer = || cloudwatch.received.lock().unwrap().last().cloned().unwrap();

    set("AWS_ACCESS_KEY_ID", "AKIDFROMENV");
    set("AWS_SECRET_ACCESS_KEY", "envSecretKeyEXAMPLE");
    assert_eq!(
        support::read_template(&template, None, "1m").await,
        MetricReading::Value(0.25)
    );
    assert_eq!(signer().access_key, "AKIDFROMENV");
    assert_eq!(
        signer().target,
        "GraniteServiceVersion20100801.GetMetricData"
    );
    assert_eq!(
        signer().body["MetricDataQueries"][0]["Expression"],
        "SUM(METRICS())"
    );
    assert_eq!(
        signer().scope,
        ("us-west-2".to_string(), "monitoring".to_string())
    );

    unset("AWS_ACCESS_KEY_ID");
    unset("AWS_SECRET_ACCESS_KEY");
    std::fs::write(
        &credentials_file,
        "[default]\naws_access_key_id = AKIDFROMPROFILE\naws_secret_access_key = profileSecretKeyEXAMPLE\n",
    )
    .unwrap();
    assert_eq!(
        support::read_template(&template, None, "1m").await,
        MetricReading::Value(0.25)
    );
    assert_eq!(signer().access_key, "AKIDFROMPROFILE");

    std::fs::remove_file(&credentials_file).unwrap();
    let token_file = files.path().join("token");
    std::fs::write(
        &token_file,
        "eyJhbGciOiJSUzI1NiJ9.projected-service-account-token.sig",
    )
    .unwrap();
    set("AWS_WEB_IDENTITY_TOKEN_FILE", token_file.to_str().unwrap());
    set(
        "AWS_ROLE_ARN",
        "arn:aws:iam::123456789012:role/serin-cloudwatch",
    );
    set("AWS_ROLE_SESSION_NAME", "serin");
    set("AWS_ENDPOINT_URL_STS", &sts);
    assert_eq!(
        support::read_template(&template, None, "1m").await,
        MetricReading::Value(0.25)
    );
    assert_eq!(signer().access_key, "ASIAWEBIDENTITY");
    assert_eq!(
        signer().session_token.as_deref(),
        Some("web-identity-s3ssion")
    );
    let call = sts_calls.lock().unwrap()[0].clone();
    assert_eq!(call["Action"], "AssumeRoleWithWebIdentity");
    assert_eq!(
        call["RoleArn"],
        "arn:aws:iam::123456789012:role/serin-cloudwatch"
    );
    assert_eq!(call["RoleSessionName"], "serin");
    assert_eq!(
        call["WebIdentityToken"],
        "eyJhbGciOiJSUzI1NiJ9.projected-service-account-token.sig"
    );

    unset("AWS_WEB_IDENTITY_TOKEN_FILE");
    unset("AWS_ROLE_ARN");
    let MetricReading::Error(none) = support::read_template(&template, None, "1m").await else {
        panic!("no identity at all is an error");
    };
    assert!(
        none.starts_with(
            "Metric template errors.test (cloudwatch) cannot be queried: the operator has no AWS credentials"
        ) && none.contains("IRSA"),
        "{none}"
    );
}
