//! A loopback server that answers as CloudWatch's `GetMetricData` over the JSON protocol documents,
//! and checks each request's SigV4 signature on its own (HMAC-SHA256 as AWS's Signature Version 4
//! reference describes it, not through the signing crate under test); and a loopback STS that
//! answers `AssumeRoleWithWebIdentity`.

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// One request CloudWatch received, after its signature was checked.
#[derive(Clone, Debug)]
pub struct Received {
    /// The `X-Amz-Target` header.
    pub target: String,
    /// The JSON body.
    pub body: serde_json::Value,
    /// The access key the request was signed with.
    pub access_key: String,
    /// The region and service of the signature's scope.
    pub scope: (String, String),
    /// The session token sent, if any.
    pub session_token: Option<String>,
}

/// The server's record of requests; `keys` are the access keys it knows, with their secrets.
#[derive(Clone, Default)]
pub struct CloudWatch {
    pub received: Arc<Mutex<Vec<Received>>>,
    keys: Arc<BTreeMap<String, String>>,
    throttled: Arc<Mutex<BTreeMap<String, u32>>>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(data.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// Checks the SigV4 `Authorization` of a request; `Ok` has the access key and the scope.
fn verify(
    keys: &BTreeMap<String, String>,
    (method, uri, headers, body): (&Method, &Uri, &HeaderMap, &[u8]),
) -> Result<(String, String, String), String> {
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .ok_or("no Authorization header")?;
    let rest = authorization
        .strip_prefix("AWS4-HMAC-SHA256 ")
        .ok_or("not AWS4-HMAC-SHA256")?;
    let parts: BTreeMap<&str, &str> = rest.split(", ").filter_map(|p| p.split_once('=')).collect();
    let credential: Vec<&str> = parts["Credential"].split('/').collect();
    let [access_key, date, region, service, "aws4_request"] = credential[..] else {
        return Err(format!("bad credential scope {credential:?}"));
    };
    let secret = keys.get(access_key).ok_or("unknown access key")?;
    let signed_headers = parts["SignedHeaders"];
    let amz_date = headers["x-amz-date"].to_str().unwrap();
    let canonical_headers: String = signed_headers
        .split(';')
        .map(|name| {
            let value = headers
                .get(name)
                .map(|v| v.to_str().unwrap().trim().to_string())
                .unwrap_or_default();
            format!("{name}:{value}\n")
        })
        .collect();
    let canonical_request = format!(
        "{method}\n{}\n{}\n{canonical_headers}\n{signed_headers}\n{}",
        uri.path(),
        uri.query().unwrap_or_default(),
        hex(&Sha256::digest(body))
    );
    let scope = format!("{date}/{region}/{service}/aws4_request");
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical_request.as_bytes()))
    );
    let key = [date, region, service, "aws4_request"]
        .iter()
        .fold(format!("AWS4{secret}").into_bytes(), |key, part| {
            hmac(&key, part)
        });
    if hex(&hmac(&key, &string_to_sign)) != parts["Signature"] {
        return Err("signature mismatch".into());
    }
    Ok((access_key.into(), region.into(), service.into()))
}

fn json(status: StatusCode, body: serde_json::Value) -> Response {
    (
        status,
        [("content-type", "application/x-amz-json-1.0")],
        body.to_string(),
    )
        .into_response()
}

async fn get_metric_data(
    axum::extract::State(cloudwatch): axum::extract::State<CloudWatch>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (access_key, region, service) = match verify(
        &cloudwatch.keys,
        (&method, &uri, &headers, &body),
    ) {
        Ok(signed) => signed,
        Err(e) if e == "unknown access key" => {
            return json(
                StatusCode::BAD_REQUEST,
                serde_json::json!({"__type": "com.amazon.coral.service#UnrecognizedClientException",
                                   "message": "The security token included in the request is invalid."}),
            );
        }
        Err(_) => {
            return json(
                StatusCode::FORBIDDEN,
                serde_json::json!({"__type": "com.amazon.coral.service#InvalidSignatureException",
                                   "message": "The request signature we calculated does not match the signature you provided."}),
            );
        }
    };
    let parsed: serde_json::Value = serde_json::from_slice(&body).unwrap();
    cloudwatch.received.lock().unwrap().push(Received {
        target: headers["x-amz-target"].to_str().unwrap().into(),
        body: parsed.clone(),
        access_key,
        scope: (region, service),
        session_token: headers
            .get("x-amz-security-token")
            .map(|v| v.to_str().unwrap().to_string()),
    });
    let first = parsed["MetricDataQueries"][0].clone();
    let expression = first["Expression"].as_str().unwrap_or_default();
    if expression.contains("throttled") && !cloudwatch.throttled_once(expression) {
        return json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"__type": "com.amazonaws.cloudwatch#Throttling", "message": "Rate exceeded"}),
        );
    }
    if expression.contains("bad(") {
        return json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"__type": "com.amazonaws.cloudwatch#InvalidParameterValueException",
                               "message": "Unrecognized function bad in expression"}),
        );
    }
    let end = parsed["EndTime"].as_i64().unwrap();
    let values = if expression.contains("nodata") {
        serde_json::json!([])
    } else {
        serde_json::json!([0.25, 0.5])
    };
    json(
        StatusCode::OK,
        serde_json::json!({"MetricDataResults": [
            {"Id": first["Id"], "Label": first["Label"], "StatusCode": "Complete",
             "Timestamps": [end - 60, end - 120], "Values": values}],
            "Messages": []}),
    )
}

impl CloudWatch {
    /// True for the second and later queries of an expression asking to be throttled once.
    fn throttled_once(&self, expression: &str) -> bool {
        let mut throttled = self.throttled.lock().unwrap();
        let times = throttled.entry(expression.to_string()).or_default();
        *times += 1;
        expression.contains("once") && *times > 1
    }
}

/// Serves CloudWatch on a loopback port knowing `keys` (access key → secret); the address and
/// the record of requests.
pub async fn serve(keys: &[(&str, &str)]) -> (String, CloudWatch) {
    let cloudwatch = CloudWatch {
        received: Arc::default(),
        throttled: Arc::default(),
        keys: Arc::new(
            keys.iter()
                .map(|(k, s)| (k.to_string(), s.to_string()))
                .collect(),
        ),
    };
    let app = axum::Router::new()
        .route("/", axum::routing::post(get_metric_data))
        .with_state(cloudwatch.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, cloudwatch)
}
