//! Malformed requests to the sandbox's API server over real HTTP on 127.0.0.1: each one is answered
//! 4xx with a Kubernetes `Status` body whose code is the HTTP status, and the server still serves
//! a normal GET afterwards.

use serin_sandbox::Sandbox;
use std::time::Duration;

struct Case {
    what: &'static str,
    method: &'static str,
    path: String,
    content_type: &'static str,
    body: Vec<u8>,
}

fn case(
    what: &'static str,
    method: &'static str,
    path: &str,
    content_type: &'static str,
    body: &[u8],
) -> Case {
    Case {
        what,
        method,
        path: path.to_string(),
        content_type,
        body: body.to_vec(),
    }
}

const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";
const CM: &str = "/api/v1/namespaces/default/configmaps";

fn cases() -> Vec<Case> {
    let mut huge =
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"huge"},"data":{"k":""#
            .to_vec();
    huge.extend(std::iter::repeat_n(b'a', 8 * 1024 * 1024));
    huge.extend_from_slice(br#""}}"#);
    let mut nested =
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deep"},"data":"#.to_vec();
    nested.extend(std::iter::repeat_n(b'[', 100_000));
    let mut cases = vec![
        case("POST of bytes that are not JSON", "POST", CM, JSON, b"name=x"),
        case("POST of truncated JSON", "POST", CM, JSON, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"na"#),
        case("POST of an empty body", "POST", CM, JSON, b""),
        case("POST of a JSON array", "POST", CM, JSON, b"[]"),
        case("POST of JSON null", "POST", CM, JSON, b"null"),
        case("POST with metadata a string", "POST", CM, JSON, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":"x"}"#),
        case("POST with data values that are numbers", "POST", CM, JSON, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"n"},"data":{"k":5}}"#),
        case("POST of invalid UTF-8", "POST", CM, JSON, b"{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"\xff\"}}"),
        case("POST of deeply nested JSON", "POST", CM, JSON, &nested),
        case("POST of an 8 MiB object", "POST", CM, JSON, &huge),
        case("POST without a name", "POST", CM, JSON, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}"#),
        case("POST with an invalid name", "POST", CM, JSON, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Not_A Name!"}}"#),
        case("POST with a 300-character name", "POST", CM, JSON, format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{}"}}}}"#, "a".repeat(300)).as_bytes()),
        case("POST of a Secret to the ConfigMaps URL", "POST", CM, JSON, br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}"#),
        case("POST of a Deployment to the ConfigMaps URL", "POST", CM, JSON, br#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"}}"#),
        case("POST in another namespace than the URL's", "POST", CM, JSON, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"kube-system"}}"#),
        case("POST with a bad content type", "POST", CM, "text/plain", br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ct"}}"#),
        case("PUT of bytes that are not JSON", "PUT", &format!("{CM}/base"), JSON, b"\x00\x01garbage"),
        case("PUT with another name than the URL's", "PUT", &format!("{CM}/base"), JSON, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"other"}}"#),
        case("PUT with a resourceVersion that is not a number", "PUT", &format!("{CM}/base"), JSON, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"base","resourceVersion":"abc"}}"#),
        case("PUT with a stale resourceVersion", "PUT", &format!("{CM}/base"), JSON, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"base","resourceVersion":"1"}}"#),
        case("PATCH of bytes that are not JSON", "PATCH", &format!("{CM}/victim"), MERGE, b"{data: x}"),
        case("PATCH with JSON content type", "PATCH", &format!("{CM}/base"), JSON, br#"{"data":{"k":"v"}}"#),
        case("PATCH with a text content type", "PATCH", &format!("{CM}/base"), "text/plain", br#"{"data":{"k":"v"}}"#),
        case("JSON patch that is not a list", "PATCH", &format!("{CM}/base"), "application/json-patch+json", br#"{"op":"add"}"#),
        case("JSON patch with an unknown op", "PATCH", &format!("{CM}/base"), "application/json-patch+json", br#"[{"op":"frobnicate","path":"/data/k","value":"v"}]"#),
        case("JSON patch of a missing path", "PATCH", &format!("{CM}/base"), "application/json-patch+json", br#"[{"op":"replace","path":"/data/missing/deeper","value":"v"}]"#),
        case("JSON patch test that fails", "PATCH", &format!("{CM}/base"), "application/json-patch+json", br#"[{"op":"test","path":"/data/k","value":"other"}]"#),
        case("strategic patch of a string", "PATCH", &format!("{CM}/base"), "application/strategic-merge-patch+json", br#""x""#),
        case("apply patch of YAML that does not parse", "PATCH", &format!("{CM}/base?fieldManager=t"), "application/apply-patch+yaml", b"data: [unclosed"),
        case("apply patch without a field manager", "PATCH", &format!("{CM}/base"), "application/apply-patch+yaml", b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: base\n"),
        case("PATCH of an object that does not exist", "PATCH", &format!("{CM}/absent"), MERGE, br#"{"data":{"k":"v"}}"#),
        case("an unknown API group", "GET", "/apis/no.such.group/v1/namespaces/default/things", JSON, b""),
        case("an unknown version of a known group", "GET", "/apis/apps/v9/deployments", JSON, b""),
        case("an unknown core resource", "GET", "/api/v1/namespaces/default/frobnicators", JSON, b""),
        case("an unknown subresource", "GET", &format!("{CM}/base/frobnicate"), JSON, b""),
        case("a POST to a named object", "POST", &format!("{CM}/base"), JSON, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"base"}}"#),
        case("a label selector that does not parse", "GET", &format!("{CM}?labelSelector=app%3D%3D%3D%2Cx%20in%20(a"), JSON, b""),
        case("a label selector with a bad operator", "GET", &format!("{CM}?labelSelector=app%20like%20web"), JSON, b""),
        case("a field selector on an unknown field", "GET", &format!("{CM}?fieldSelector=spec.nothing%3Dx"), JSON, b""),
        case("a field selector that does not parse", "GET", &format!("{CM}?fieldSelector=%3D%3D%3D"), JSON, b""),
        case("a limit that is not a number", "GET", &format!("{CM}?limit=many"), JSON, b""),
        case("a continue token that is garbage", "GET", &format!("{CM}?limit=1&continue=%00garbage"), JSON, b""),
        case("a resourceVersion that is not a number", "GET", &format!("{CM}?resourceVersion=abc&resourceVersionMatch=NotOlderThan"), JSON, b""),
        case("a resourceVersionMatch that is unknown", "GET", &format!("{CM}?resourceVersion=1&resourceVersionMatch=Sometimes"), JSON, b""),
        case("watch with a resourceVersion that is not a number", "GET", &format!("{CM}?watch=true&resourceVersion=abc"), JSON, b""),
        case("watch with a timeout that is not a number", "GET", &format!("{CM}?watch=true&timeoutSeconds=soon"), JSON, b""),
        case("watch with a label selector that does not parse", "GET", &format!("{CM}?watch=true&labelSelector=%21%21%21"), JSON, b""),
        case("watch=maybe", "GET", &format!("{CM}?watch=maybe"), JSON, b""),
        case("DELETE with a body that is not JSON", "DELETE", &format!("{CM}/base"), JSON, b"{not json"),
        case("DELETE with a propagation policy that is unknown", "DELETE", &format!("{CM}/victim?propagationPolicy=Sometimes"), JSON, b""),
        case("DELETE of an object that does not exist", "DELETE", &format!("{CM}/absent"), JSON, b""),
        case("a dryRun value that is unknown", "POST", &format!("{CM}?dryRun=Maybe"), JSON, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dry"}}"#),
        case("a fieldValidation value that is unknown", "POST", &format!("{CM}?fieldValidation=Loose"), JSON, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fv"}}"#),
        case("an unknown field with strict validation", "POST", &format!("{CM}?fieldValidation=Strict"), JSON, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"strict"},"dataa":{}}"#),
        case("a namespace name that is invalid", "GET", "/api/v1/namespaces/Bad_Namespace!/configmaps/x", JSON, b""),
    ];
    for method in ["PUT", "PATCH", "DELETE"] {
        cases.push(case(
            "a write to discovery",
            method,
            "/api/v1",
            MERGE,
            b"{}",
        ));
    }
    cases
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_4xx_with_a_status_body() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::start(dir.path()).await.unwrap();
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let base = sandbox.url.clone();
    let created = client
        .post(format!("{base}{CM}"))
        .bearer_auth("serin-sandbox")
        .header("Content-Type", JSON)
        .body(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"base"},"data":{"k":"v"}}"#,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        created.status().as_u16(),
        201,
        "{}",
        created.text().await.unwrap()
    );

    let victim = client
        .post(format!("{base}{CM}"))
        .bearer_auth("serin-sandbox")
        .header("Content-Type", JSON)
        .body(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"victim"}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(victim.status().as_u16(), 201);

    let mut failures = Vec::new();
    let all = cases();
    for c in &all {
        let method = reqwest::Method::from_bytes(c.method.as_bytes()).unwrap();
        let answer = client
            .request(method, format!("{base}{}", c.path))
            .bearer_auth("serin-sandbox")
            .header("Content-Type", c.content_type)
            .body(c.body.clone())
            .send()
            .await;
        let answer = match answer {
            Ok(answer) => answer,
            Err(error) => {
                failures.push(format!(
                    "{}: {} {}: no answer: {error}",
                    c.what, c.method, c.path
                ));
                continue;
            }
        };
        let status = answer.status().as_u16();
        let text = answer.text().await.unwrap_or_default();
        let short: String = text.chars().take(300).collect();
        if !(400..500).contains(&status) {
            failures.push(format!(
                "{}: {} {} answered {status}: {short}",
                c.what,
                c.method,
                truncate(&c.path)
            ));
            continue;
        }
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(body)
                if body["kind"] == "Status"
                    && body["code"] == status
                    && body["status"] == "Failure" => {}
            _ => failures.push(format!(
                "{}: {} {} answered {status} without a Status body of that code: {short}",
                c.what,
                c.method,
                truncate(&c.path)
            )),
        }
    }

    // The server still serves, and the object the requests aimed at is as it was.
    let base_cm: serde_json::Value = client
        .get(format!("{base}{CM}/base"))
        .bearer_auth("serin-sandbox")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(base_cm["data"], serde_json::json!({"k": "v"}), "{base_cm}");
    let list = client
        .get(format!("{base}/api/v1/namespaces"))
        .bearer_auth("serin-sandbox")
        .send()
        .await
        .unwrap();
    assert_eq!(list.status().as_u16(), 200);
    assert!(
        failures.is_empty(),
        "{} of {} malformed requests were not refused with a 4xx Status:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
    sandbox.stop().await;
}

fn truncate(path: &str) -> String {
    path.chars().take(120).collect()
}
