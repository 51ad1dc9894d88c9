//! Loopback HTTP receivers for the integration tests: they record every request and answer from a
//! script of statuses.

#![allow(dead_code)]

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Captured {
    /// The request target as sent: origin-form (`/path`) or absolute-form (`http://host/path`).
    pub target: String,
    pub path: String,
    pub content_type: Option<String>,
    pub authorization: Option<String>,
    pub body: Bytes,
}

impl Captured {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("the body is JSON")
    }
}

#[derive(Default)]
struct Script {
    /// Answers used in order; once empty, `fallback` is used.
    answers: VecDeque<(u16, String)>,
    fallback: (u16, String),
    delay: Duration,
    seen: Vec<Captured>,
}

/// A receiver on 127.0.0.1 that records requests and answers from its script.
pub struct Receiver {
    pub address: SocketAddr,
    script: Arc<Mutex<Script>>,
}

impl Receiver {
    /// Answers every request with `status` and `body`.
    pub async fn start(status: u16, body: &str) -> Receiver {
        Receiver::scripted(&[], status, body, Duration::ZERO).await
    }

    /// Answers with `answers` in order, then `status`/`body`, each after `delay`.
    pub async fn scripted(
        answers: &[(u16, &str)],
        status: u16,
        body: &str,
        delay: Duration,
    ) -> Receiver {
        let script = Arc::new(Mutex::new(Script {
            answers: answers.iter().map(|(s, b)| (*s, b.to_string())).collect(),
            fallback: (status, body.to_string()),
            delay,
            seen: Vec::new(),
        }));
        let app = Router::new().fallback(record).with_state(script.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { address, script }
    }

    /// Answers every request on `listener` with `status` and `body`.
    pub fn on(listener: std::net::TcpListener, status: u16, body: &str) -> Receiver {
        let script = Arc::new(Mutex::new(Script {
            fallback: (status, body.to_string()),
            ..Script::default()
        }));
        let app = Router::new().fallback(record).with_state(script.clone());
        listener.set_nonblocking(true).unwrap();
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { address, script }
    }

    /// Answers every request with `status` and `body` over https, with the self-signed certificate
    /// for 127.0.0.1 in tests/fixtures.
    pub async fn start_tls(status: u16, body: &str) -> Receiver {
        let script = Arc::new(Mutex::new(Script {
            fallback: (status, body.to_string()),
            ..Script::default()
        }));
        let app = Router::new().fallback(record).with_state(script.clone());
        let listener = TlsListener::bind().await;
        let address = listener.tcp.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { address, script }
    }

    pub fn https_url(&self, path: &str) -> String {
        format!("https://{}{path}", self.address)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    pub fn seen(&self) -> Vec<Captured> {
        self.script.lock().unwrap().seen.clone()
    }

    pub fn last(&self) -> Captured {
        self.seen().pop().expect("the receiver got a request")
    }
}

/// A loopback listener that completes a TLS handshake before handing a connection to axum.
struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl TlsListener {
    async fn bind() -> TlsListener {
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
        let certificate =
            CertificateDer::from_pem_file(format!("{fixtures}/self-signed-127.0.0.1.crt")).unwrap();
        let key =
            PrivateKeyDer::from_pem_file(format!("{fixtures}/self-signed-127.0.0.1.key")).unwrap();
        // The provider is named because the tree may enable more than one.
        let provider = tokio_rustls::rustls::crypto::aws_lc_rs::default_provider();
        let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(Arc::new(provider))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![certificate], key)
            .unwrap();
        TlsListener {
            tcp: tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, address)) = self.tcp.accept().await else {
                continue;
            };
            // A client that rejects the certificate aborts the handshake; wait for the next one.
            if let Ok(tls) = self.acceptor.accept(tcp).await {
                return (tls, address);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

async fn record(State(script): State<Arc<Mutex<Script>>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let (answer, delay) = {
        let mut script = script.lock().unwrap();
        script.seen.push(Captured {
            target: parts.uri.to_string(),
            path: parts.uri.path().to_string(),
            content_type: header("content-type"),
            authorization: header("authorization"),
            body,
        });
        let answer = script
            .answers
            .pop_front()
            .unwrap_or_else(|| script.fallback.clone());
        (answer, script.delay)
    };
    tokio::time::sleep(delay).await;
    (StatusCode::from_u16(answer.0).unwrap(), answer.1).into_response()
}

/// A Canary named `podinfo` in namespace `test` with `analysis` as given.
pub fn canary(analysis: Value) -> serin_api::Canary {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "serin.dev/v1beta1",
        "kind": "Canary",
        "metadata": {"name": "podinfo", "namespace": "test"},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo"},
            "service": {"port": 9898},
            "analysis": analysis,
        },
        "status": {"phase": "Progressing", "lastAppliedSpec": "5d8f", "trackedConfigs": {"configmap/podinfo-config": "abc"}},
    }))
    .expect("a valid Canary")
}

/// A webhook payload for podinfo.test in the Progressing phase.
pub fn payload() -> serin_webhooks::HookPayload {
    serin_webhooks::HookPayload {
        name: "podinfo".into(),
        namespace: "test".into(),
        phase: "Progressing".into(),
        checksum: "abc".into(),
        metadata: Default::default(),
    }
}
