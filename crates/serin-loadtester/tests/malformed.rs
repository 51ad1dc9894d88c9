//! Malformed requests to every endpoint of the load tester, over real TCP on 127.0.0.1: each one
//! is answered 4xx (or, for bytes that are not HTTP, the connection is closed without a 2xx or
//! 5xx), and the server still answers a valid request afterwards.

use serin_loadtester::proxy::ProxyConfig;
use serin_loadtester::{Options, Server};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn start() -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    Server::start(
        listener,
        Options {
            timeout: Duration::from_secs(10),
            proxy: ProxyConfig::direct(),
            ..Options::default()
        },
    )
    .unwrap()
}

/// Sends `request` as raw bytes and reads until the server closes the connection or 5 s pass;
/// returns the status code of the answer, if there was one.
async fn raw(address: SocketAddr, request: &[u8]) -> (Option<u16>, String) {
    let mut stream = TcpStream::connect(address).await.unwrap();
    // The server may answer and close before reading everything (a body over the limit). The
    // write side stays open: a client that half-closes is taken as gone, and every request says
    // `Connection: close`, so the server closes once it has answered.
    let _ = stream.write_all(request).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok());
    (status, text)
}

fn http(method: &str, path: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: loadtester\r\nConnection: close\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

const ENDPOINTS: [&str; 9] = [
    "/",
    "/gate/check",
    "/gate/open",
    "/gate/close",
    "/rollback/check",
    "/rollback/open",
    "/rollback/close",
    "/gate/no-such-gate",
    "/rollback/no-such-thing/x",
];

fn bad_bodies() -> Vec<(&'static str, Vec<u8>)> {
    let mut huge = br#"{"name":"podinfo","namespace":"test","metadata":{"cmd":""#.to_vec();
    huge.extend(std::iter::repeat_n(b'a', 4 * 1024 * 1024));
    huge.extend_from_slice(br#""}}"#);
    vec![
        ("empty", Vec::new()),
        ("not JSON", b"name=podinfo&namespace=test".to_vec()),
        (
            "truncated JSON",
            br#"{"name":"podinfo","namespace":"te"#.to_vec(),
        ),
        ("a JSON string", br#""podinfo""#.to_vec()),
        (
            "a JSON array",
            br#"[{"name":"podinfo","namespace":"test"}]"#.to_vec(),
        ),
        ("null", b"null".to_vec()),
        ("name missing", br#"{"namespace":"test"}"#.to_vec()),
        ("namespace missing", br#"{"name":"podinfo"}"#.to_vec()),
        (
            "name a number",
            br#"{"name":5,"namespace":"test"}"#.to_vec(),
        ),
        (
            "namespace an object",
            br#"{"name":"podinfo","namespace":{"n":"test"}}"#.to_vec(),
        ),
        ("name null", br#"{"name":null,"namespace":"test"}"#.to_vec()),
        (
            "metadata a string",
            br#"{"name":"podinfo","namespace":"test","metadata":"cmd"}"#.to_vec(),
        ),
        (
            "metadata an array",
            br#"{"name":"podinfo","namespace":"test","metadata":["cmd"]}"#.to_vec(),
        ),
        (
            "metadata value an array",
            br#"{"name":"podinfo","namespace":"test","metadata":{"cmd":[1]}}"#.to_vec(),
        ),
        (
            "metadata value an object",
            br#"{"name":"podinfo","namespace":"test","metadata":{"cmd":{"x":1}}}"#.to_vec(),
        ),
        (
            "invalid UTF-8",
            b"{\"name\":\"\xff\xfe\",\"namespace\":\"test\"}".to_vec(),
        ),
        (
            "a lone surrogate",
            br#"{"name":"\ud800","namespace":"test"}"#.to_vec(),
        ),
        ("deeply nested", {
            let mut nested = b"{\"name\":\"p\",\"namespace\":\"t\",\"metadata\":".to_vec();
            nested.extend(std::iter::repeat_n(b'[', 100_000));
            nested
        }),
        ("4 MiB body", huge),
    ]
}

async fn assert_still_serves(address: SocketAddr, after: &str) {
    let (status, text) = raw(address, &http("GET", "/healthz", "text/plain", b"")).await;
    assert_eq!(
        status,
        Some(200),
        "after {after}, /healthz answered: {text}"
    );
    let gate = http(
        "POST",
        "/gate/check",
        "application/json",
        br#"{"name":"podinfo","namespace":"test"}"#,
    );
    let (status, text) = raw(address, &gate).await;
    assert_eq!(
        status,
        Some(403),
        "after {after}, a valid /gate/check answered: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_payloads_get_4xx_on_every_endpoint() {
    let server = start().await;
    let address = server.local_addr();
    let mut tried = 0;
    for endpoint in ENDPOINTS {
        for (what, body) in bad_bodies() {
            for (method, content_type) in [
                ("POST", "application/json"),
                ("PUT", "text/plain"),
                ("GET", "application/x-www-form-urlencoded"),
                ("DELETE", "application/octet-stream"),
            ] {
                // The 4 MiB body once per endpoint is enough.
                if what == "4 MiB body" && method != "POST" {
                    continue;
                }
                let (status, text) =
                    raw(address, &http(method, endpoint, content_type, &body)).await;
                let status = status.unwrap_or_else(|| {
                    panic!(
                        "{method} {endpoint} with {what} ({content_type}) got no answer: {text:?}"
                    )
                });
                assert!(
                    (400..500).contains(&status),
                    "{method} {endpoint} with {what} ({content_type}) answered {status}: {}",
                    text.chars().take(300).collect::<String>()
                );
                tried += 1;
            }
        }
        assert_still_serves(address, &format!("the malformed requests to {endpoint}")).await;
    }
    assert!(tried > 500, "only {tried} requests were tried");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_that_are_not_http_are_refused_or_dropped() {
    let server = start().await;
    let address = server.local_addr();
    let garbage: Vec<(&str, Vec<u8>)> = vec![
        ("random bytes", (0..2048u32).map(|i| (i * 7919 % 251) as u8).collect()),
        ("a TLS ClientHello", vec![0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03]),
        ("an HTTP/2 preface without settings", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec()),
        ("a request line without a version", b"POST /gate/check\r\n\r\n".to_vec()),
        ("a bad method token", b"P@ST / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("a header without a colon", b"POST / HTTP/1.1\r\nHost x\r\n\r\n".to_vec()),
        ("a negative Content-Length", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n".to_vec()),
        (
            "two different Content-Lengths",
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}x".to_vec(),
        ),
        ("a bad chunk size", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n".to_vec()),
        ("a body shorter than its Content-Length", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"name\":".to_vec()),
        ("a 1 MiB header", {
            let mut r = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
            r.extend(std::iter::repeat_n(b'a', 1024 * 1024));
            r.extend_from_slice(b"\r\n\r\n");
            r
        }),
        ("NUL bytes", vec![0; 1024]),
    ];
    for (what, bytes) in garbage {
        let (status, text) = raw(address, &bytes).await;
        if let Some(status) = status {
            assert!(
                (400..500).contains(&status),
                "{what} was answered {status}: {}",
                text.chars().take(300).collect::<String>()
            );
        }
        assert_still_serves(address, what).await;
    }
    server.stop().await;
}
