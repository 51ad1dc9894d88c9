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
