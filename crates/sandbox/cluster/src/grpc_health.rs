//! gRPC's health protocol (`grpc.health.v1.Health/Check`) as the sandbox's pods speak it: podinfo's
//! health service on its `--grpc-port`, and the client the load tester image's `grpc_health_probe`
//! uses, over HTTP/2 without TLS (h2c), reaching a Service through the pod's mesh proxy with
//! `CONNECT` as a sidecar would carry the connection.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use axum::routing::post;
use http_body_util::{BodyExt, Empty, Full, Limited, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use std::convert::Infallible;
use std::time::Duration;

/// The method `grpc_health_probe` calls.
pub const CHECK_PATH: &str = "/grpc.health.v1.Health/Check";

/// The streaming method of the health service, which the sandbox does not implement.
pub const WATCH_PATH: &str = "/grpc.health.v1.Health/Watch";

/// Largest gRPC message read from either side; health messages are a few bytes.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct HealthCheckRequest {
    /// The service asked about; empty asks about the server as a whole.
    #[prost(string, tag = "1")]
    pub service: String,
}

/// `grpc.health.v1.HealthCheckResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct HealthCheckResponse {
    /// A [`ServingStatus`] number.
    #[prost(int32, tag = "1")]
    pub status: i32,
}

/// `grpc.health.v1.HealthCheckResponse.ServingStatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServingStatus {
    /// 0.
    Unknown,
    /// 1.
    Serving,
    /// 2.
    NotServing,
    /// 3 (only the Watch method answers it).
    ServiceUnknown,
}

impl ServingStatus {
    /// The status a response's number stands for; numbers the protocol does not define are
    /// `Unknown`.
    pub fn from_number(number: i32) -> Self {
        match number {
            1 => ServingStatus::Serving,
            2 => ServingStatus::NotServing,
            3 => ServingStatus::ServiceUnknown,
            _ => ServingStatus::Unknown,
        }
    }

    /// Its number on the wire.
    pub fn number(self) -> i32 {
        match self {
            ServingStatus::Unknown => 0,
            ServingStatus::Serving => 1,
            ServingStatus::NotServing => 2,
            ServingStatus::ServiceUnknown => 3,
        }
    }

    /// Its name in the protocol's enum, as `grpc_health_probe` prints it.
    pub fn name(self) -> &'static str {
        match self {
            ServingStatus::Unknown => "UNKNOWN",
            ServingStatus::Serving => "SERVING",
            ServingStatus::NotServing => "NOT_SERVING",
            ServingStatus::ServiceUnknown => "SERVICE_UNKNOWN",
        }
    }
}

/// gRPC status codes the sandbox answers or reads.
pub mod code {
    /// Success.
    pub const OK: u32 = 0;
    /// The RPC ran past its deadline.
    pub const DEADLINE_EXCEEDED: u32 = 4;
    /// The health service does not know the service asked about.
    pub const NOT_FOUND: u32 = 5;
    /// The server does not implement the method.
    pub const UNIMPLEMENTED: u32 = 12;
    /// The server could not read the request.
    pub const INTERNAL: u32 = 13;
    /// The connection failed during the call.
    pub const UNAVAILABLE: u32 = 14;
}

/// The name of a gRPC status code, as grpc-go prints it.
pub fn code_name(code: u32) -> &'static str {
    match code {
        0 => "OK",
        1 => "Canceled",
        2 => "Unknown",
        3 => "InvalidArgument",
        4 => "DeadlineExceeded",
        5 => "NotFound",
        6 => "AlreadyExists",
        7 => "PermissionDenied",
        8 => "ResourceExhausted",
        9 => "FailedPrecondition",
        10 => "Aborted",
        11 => "OutOfRange",
        12 => "Unimplemented",
        13 => "Internal",
        14 => "Unavailable",
        15 => "DataLoss",
        16 => "Unauthenticated",
        _ => "Unknown",
    }
}

/// `message` in gRPC's length-prefixed framing: an uncompressed flag, its length, its bytes.
pub fn frame(message: &impl Message) -> Bytes {
    let encoded = message.encode_to_vec();
    let mut framed = Vec::with_capacity(5 + encoded.len());
    framed.push(0);
    framed.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
    framed.extend_from_slice(&encoded);
    Bytes::from(framed)
}

/// The one message in a framed body; `Err` says what is wrong with it.
pub fn unframe(body: &[u8]) -> Result<&[u8], String> {
    let Some((header, rest)) = body.split_first_chunk::<5>() else {
        return Err(format!(
            "a gRPC message needs a 5-byte prefix, got {} bytes",
            body.len()
        ));
    };
    if header[0] != 0 {
        return Err("compressed gRPC messages are not supported".into());
    }
    let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if length > MAX_MESSAGE_BYTES {
        return Err(format!(
            "a gRPC message of {length} bytes is over the limit of {MAX_MESSAGE_BYTES}"
        ));
    }
    rest.get(..length)
        .filter(|_| rest.len() == length)
        .ok_or_else(|| {
            format!(
                "the gRPC prefix announces {length} bytes, {} follow",
                rest.len()
            )
        })
}

/// The health service of a server whose services `""` (the server) and `service_name` both serve,
/// as grpc-go's health server answers after podinfo marks its service serving.
pub fn health_router(service_name: String) -> axum::Router {
    axum::Router::new()
        .route(
            CHECK_PATH,
            post(move |request: Request<Body>| {
                let service_name = service_name.clone();
                async move { check(request, &service_name).await }
            }),
        )
        .route(
            WATCH_PATH,
            post(|| async {
                failure(
                    code::UNIMPLEMENTED,
                    "method Watch is not implemented by the sandbox",
                )
            }),
        )
}

async fn check(request: Request<Body>, service_name: &str) -> Response<Body> {
    let grpc = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if !grpc {
        let mut response = Response::new(Body::from(
            "a gRPC method needs content-type application/grpc",
        ));
        *response.status_mut() = StatusCode::UNSUPPORTED_MEDIA_TYPE;
        return response;
    }
    let body = match Limited::new(request.into_body(), MAX_MESSAGE_BYTES + 5)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(error) => return failure(code::INTERNAL, &format!("reading the request: {error}")),
    };
    let asked = match unframe(&body).and_then(|m| {
        HealthCheckRequest::decode(m).map_err(|e| format!("decoding HealthCheckRequest: {e}"))
    }) {
        Ok(asked) => asked,
        Err(error) => return failure(code::INTERNAL, &error),
    };
    if !asked.service.is_empty() && asked.service != service_name {
        return failure(code::NOT_FOUND, "unknown service");
    }
    let answer = frame(&HealthCheckResponse {
        status: ServingStatus::Serving.number(),
    });
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from(code::OK));
    let frames = [Frame::data(answer), Frame::trailers(trailers)].map(Ok::<_, Infallible>);
    let mut response = Response::new(Body::new(StreamBody::new(futures::stream::iter(frames))));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    response
}

/// A "trailers-only" answer: the gRPC status in the headers and no message.
fn failure(status: u32, message: &str) -> Response<Body> {
    let mut response = Response::new(Body::empty());
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    headers.insert("grpc-status", HeaderValue::from(status));
    if let Ok(value) = HeaderValue::from_str(&percent_encode(message)) {
        headers.insert("grpc-message", value);
    }
    response
}

/// gRPC's percent-encoding of `grpc-message`: printable ASCII except `%` as is, the rest escaped.
fn percent_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if (0x20..0x7f).contains(&byte) && byte != b'%' {
            encoded.push(byte as char);
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let escaped = (bytes[at] == b'%')
            .then(|| text.get(at + 1..at + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                decoded.push(byte);
                at += 3;
            }
            None => {
                decoded.push(bytes[at]);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

/// Why a health check did not get an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckError {
    /// No connection within the connect timeout, or the connection was refused; the text says why.
    Connect(String),
    /// The call ended with this gRPC status code and message.
    Rpc {
        /// The gRPC status code.
        code: u32,
        /// The server's `grpc-message`, or what went wrong on the client's side.
        message: String,
    },
}

/// Where a health check goes: straight to `address`, or through the HTTP proxy at `proxy` with a
/// `CONNECT` to `authority`.
#[derive(Clone, Debug)]
pub struct Route {
    /// `host:port` as the proxy resolves it (and as the `:authority` of the call).
    pub authority: String,
    /// The proxy's `host:port`, or none to connect to `authority` directly.
    pub proxy: Option<(String, u16)>,
}

/// Calls `Check` for `service` along `route`: the connection, through a proxy its `CONNECT`, and
/// the HTTP/2 handshake all within `connect_timeout`; the call within `rpc_timeout`.
pub async fn check_health(
    route: &Route,
    service: &str,
    user_agent: &str,
    connect_timeout: Duration,
    rpc_timeout: Duration,
) -> Result<ServingStatus, CheckError> {
    let connected_by = tokio::time::Instant::now() + connect_timeout;
    let connected = tokio::time::timeout_at(connected_by, connect(route)).await;
    match connected {
        Err(_) => Err(CheckError::Connect(format!(
            "no connection within {connect_timeout:?}"
        ))),
        Ok(Err(error)) => Err(CheckError::Connect(error)),
        Ok(Ok(Connection::Direct(io))) => {
            call(io, route, service, user_agent, connected_by, rpc_timeout).await
        }
        Ok(Ok(Connection::Tunnel(io))) => {
            call(io, route, service, user_agent, connected_by, rpc_timeout).await
        }
    }
}

enum Connection {
    Direct(TokioIo<tokio::net::TcpStream>),
    Tunnel(hyper::upgrade::Upgraded),
}

async fn connect(route: &Route) -> Result<Connection, String> {
    let Some((proxy_host, proxy_port)) = &route.proxy else {
        let stream = tokio::net::TcpStream::connect(&route.authority)
            .await
            .map_err(|e| format!("dial tcp {}: {e}", route.authority))?;
        return Ok(Connection::Direct(TokioIo::new(stream)));
    };
    let stream = tokio::net::TcpStream::connect((proxy_host.as_str(), *proxy_port))
        .await
        .map_err(|e| format!("dial tcp {proxy_host}:{proxy_port} (the pod's proxy): {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("proxy handshake: {e}"))?;
    let driver = tokio::spawn(connection.with_upgrades());
    let request = Request::connect(route.authority.as_str())
        .header(header::HOST, route.authority.as_str())
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("CONNECT {}: {e}", route.authority))?;
    let answer = sender.send_request(request).await;
    let answer = match answer {
        Ok(answer) => answer,
        Err(error) => {
            driver.abort();
            return Err(format!("CONNECT {}: {error}", route.authority));
        }
    };
    if !answer.status().is_success() {
        driver.abort();
        let status = answer.status();
        let body = Limited::new(answer.into_body(), 1024)
            .collect()
            .await
            .map(|c| String::from_utf8_lossy(&c.to_bytes()).trim().to_string())
            .unwrap_or_default();
        return Err(format!(
            "proxy refused CONNECT {}: {status} {body}",
            route.authority
        ));
    }
    hyper::upgrade::on(answer)
        .await
        .map(Connection::Tunnel)
        .map_err(|e| format!("CONNECT {}: {e}", route.authority))
}

async fn call<Io>(
    io: Io,
    route: &Route,
    service: &str,
    user_agent: &str,
    connected_by: tokio::time::Instant,
    rpc_timeout: Duration,
) -> Result<ServingStatus, CheckError>
where
    Io: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let handshake = tokio::time::timeout_at(
        connected_by,
        hyper::client::conn::http2::handshake(TokioExecutor::new(), io),
    )
    .await;
    let (mut sender, connection) = match handshake {
        Err(_) => {
            return Err(CheckError::Connect(
                "no HTTP/2 handshake within the connect timeout".into(),
            ));
        }
        Ok(Err(error)) => return Err(CheckError::Connect(format!("HTTP/2 handshake: {error}"))),
        Ok(Ok(pair)) => pair,
    };
    let driver = tokio::spawn(connection);
    let outcome = tokio::time::timeout(rpc_timeout, async {
        let request = Request::post(format!("http://{}{CHECK_PATH}", route.authority))
            .header(header::CONTENT_TYPE, "application/grpc")
            .header("te", "trailers")
            .header(header::USER_AGENT, user_agent)
            .header(
                "grpc-timeout",
                format!("{}m", rpc_timeout.as_millis().max(1)),
            )
            .body(Full::new(frame(&HealthCheckRequest {
                service: service.to_string(),
            })))
            .map_err(|e| rpc_error(code::INTERNAL, e.to_string()))?;
        let answer = sender
            .send_request(request)
            .await
            .map_err(|e| rpc_error(code::UNAVAILABLE, format!("connection error: {e}")))?;
        read_answer(answer).await
    })
    .await;
    driver.abort();
    match outcome {
        Ok(result) => result,
        Err(_) => Err(rpc_error(
            code::DEADLINE_EXCEEDED,
            "context deadline exceeded".into(),
        )),
    }
}

fn rpc_error(code: u32, message: String) -> CheckError {
    CheckError::Rpc { code, message }
}

async fn read_answer(answer: Response<hyper::body::Incoming>) -> Result<ServingStatus, CheckError> {
    if answer.status() != StatusCode::OK {
        return Err(rpc_error(
            code::UNAVAILABLE,
            format!(
                "unexpected HTTP status code received from server: {}",
                answer.status().as_u16()
            ),
        ));
    }
    let headers = answer.headers().clone();
    let collected = Limited::new(answer.into_body(), MAX_MESSAGE_BYTES + 5)
        .collect()
        .await
        .map_err(|e| rpc_error(code::INTERNAL, format!("reading the answer: {e}")))?;
    let trailers = collected.trailers().cloned().unwrap_or_default();
    let body = collected.to_bytes();
    // A trailers-only answer carries its status in the headers.
    let status_of = |map: &HeaderMap| {
        map.get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u32>().ok())
            .map(|status| {
                let message = map
                    .get("grpc-message")
                    .and_then(|v| v.to_str().ok())
                    .map(percent_decode)
                    .unwrap_or_default();
                (status, message)
            })
    };
    let Some((status, message)) = status_of(&trailers).or_else(|| status_of(&headers)) else {
        return Err(rpc_error(
            code::INTERNAL,
            "server closed the stream without sending trailers".into(),
        ));
    };
    if status != code::OK {
        return Err(rpc_error(status, message));
    }
    let message = unframe(&body).map_err(|e| rpc_error(code::INTERNAL, e))?;
    let answer = HealthCheckResponse::decode(message)
        .map_err(|e| rpc_error(code::INTERNAL, format!("decoding HealthCheckResponse: {e}")))?;
    Ok(ServingStatus::from_number(answer.status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_through_the_framing() {
        let framed = frame(&HealthCheckRequest {
            service: "podinfo".into(),
        });
        assert_eq!(&framed[..5], &[0, 0, 0, 0, 9]);
        assert_eq!(&framed[5..], b"\x0a\x07podinfo");
        let message = unframe(&framed).unwrap();
        assert_eq!(
            HealthCheckRequest::decode(message).unwrap().service,
            "podinfo"
        );
        assert!(unframe(&framed[..3]).unwrap_err().contains("5-byte prefix"));
        assert!(
            unframe(&framed[..8])
                .unwrap_err()
                .contains("announces 9 bytes, 3 follow")
        );
        let mut compressed = framed.to_vec();
        compressed[0] = 1;
        assert!(unframe(&compressed).unwrap_err().contains("compressed"));
        let huge = [0, 0xff, 0xff, 0xff, 0xff];
        assert!(unframe(&huge).unwrap_err().contains("over the limit"));
    }

    #[test]
    fn grpc_messages_are_percent_encoded_both_ways() {
        let text = "unknown service: 100% «x»";
        let encoded = percent_encode(text);
        assert_eq!(encoded, "unknown service: 100%25 %C2%ABx%C2%BB");
        assert_eq!(percent_decode(&encoded), text);
        assert_eq!(percent_decode("50%"), "50%");
    }

    async fn serve(service_name: &str) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let app = health_router(service_name.to_string());
        tokio::spawn(async move { axum::serve(listener, app).await });
        address
    }

    fn direct(address: std::net::SocketAddr) -> Route {
        Route {
            authority: address.to_string(),
            proxy: None,
        }
    }

    #[tokio::test]
    async fn the_health_service_answers_for_the_server_and_its_named_service_only() {
        let address = serve("podinfo").await;
        let second = Duration::from_secs(1);
        let ask = |service: &'static str| {
            let route = direct(address);
            async move { check_health(&route, service, "test", second, second).await }
        };
        assert_eq!(ask("").await, Ok(ServingStatus::Serving));
        assert_eq!(ask("podinfo").await, Ok(ServingStatus::Serving));
        assert_eq!(
            ask("billing").await,
            Err(CheckError::Rpc {
                code: code::NOT_FOUND,
                message: "unknown service".into()
            })
        );
    }

    #[tokio::test]
    async fn a_closed_port_is_a_connection_failure() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        let second = Duration::from_secs(1);
        let result = check_health(&direct(address), "", "test", second, second).await;
        assert!(
            matches!(&result, Err(CheckError::Connect(text)) if text.contains("refused")),
            "{result:?}"
        );
    }

    #[tokio::test]
    async fn a_server_that_never_answers_fails_at_the_rpc_deadline() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        // Accepts and says nothing, as a port with no gRPC server behind it would.
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let short = Duration::from_millis(200);
        let started = std::time::Instant::now();
        let result = check_health(&direct(address), "", "test", short, short).await;
        assert!(started.elapsed() < Duration::from_secs(5));
        // The client's preface goes out unanswered, so the call runs into its deadline.
        assert_eq!(
            result,
            Err(CheckError::Rpc {
                code: code::DEADLINE_EXCEEDED,
                message: "context deadline exceeded".into()
            })
        );
    }
}
