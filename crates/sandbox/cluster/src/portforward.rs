//! `kubectl port-forward`: the kubelet's side of the port-forward protocol. Each local connection
//! kubectl accepts opens two SPDY streams named by `requestid`: an error stream (where a failure
//! to reach the pod's port is written) and a data stream whose bytes are relayed to and from the
//! pod's port. kubectl tunnels the SPDY frames in a WebSocket (`SPDY/3.1+portforward.k8s.io`) or,
//! as its fallback, speaks SPDY on the upgraded connection itself.

use crate::spdy::{self, Decoder, Encoder, Frame};
use axum::extract::ws::{Message, WebSocket};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use futures::{SinkExt, Stream, StreamExt};
use serde_json::Value;
use serin_sandbox_apiserver::kubelet::Transport;
use serin_sandbox_apiserver::services;
use serin_sandbox_apiserver::status::ApiError;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// The WebSocket subprotocol kubectl asks for: SPDY/3.1 frames carrying port-forward streams.
pub const WEBSOCKET_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";

/// The streaming protocol version the SPDY fallback negotiates (`X-Stream-Protocol-Version`).
pub const STREAM_PROTOCOL: &str = "portforward.k8s.io";

/// How long the pod's port may take to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Frames queued towards the client; forwarding waits when the client reads slowly.
const OUTGOING_FRAMES: usize = 64;

/// Chunks of client bytes queued towards one pod connection.
const INBOUND_CHUNKS: usize = 64;

/// Serves port-forward streams for `pod` over a WebSocket carrying SPDY frames.
pub async fn serve_websocket(socket: WebSocket, pod: Value) {
    let (mut sink, stream) = socket.split();
    let (outgoing, mut frames) = mpsc::channel::<Vec<u8>>(OUTGOING_FRAMES);
    let writer = tokio::spawn(async move {
        while let Some(frame) = frames.recv().await {
            if sink.send(Message::Binary(frame.into())).await.is_err() {
                return;
            }
        }
        let _ = sink.close().await;
    });
    let incoming = stream
        .take_while(|message| {
            std::future::ready(!matches!(message, Err(_) | Ok(Message::Close(_))))
        })
        .filter_map(|message| {
            std::future::ready(match message {
                Ok(Message::Binary(bytes)) => Some(bytes),
                _ => None,
            })
        });
    serve(incoming, outgoing, Arc::new(pod)).await;
    let _ = writer.await;
}

/// Serves port-forward streams for `pod` over a connection upgraded to SPDY/3.1.
pub async fn serve_upgraded<Io>(io: Io, pod: Value)
where
    Io: AsyncRead + AsyncWrite + Send + 'static,
{
    let (reader, mut writer) = tokio::io::split(io);
    let (outgoing, mut frames) = mpsc::channel::<Vec<u8>>(OUTGOING_FRAMES);
    let write_task = tokio::spawn(async move {
        while let Some(frame) = frames.recv().await {
            if writer.write_all(&frame).await.is_err() {
                return;
            }
        }
        let _ = writer.shutdown().await;
    });
    let incoming = futures::stream::unfold(
        (reader, vec![0u8; 16 << 10]),
        |(mut reader, mut buffer)| async move {
            match reader.read(&mut buffer).await {
                Ok(0) | Err(_) => None,
                Ok(n) => Some((Bytes::copy_from_slice(&buffer[..n]), (reader, buffer))),
            }
        },
    );
    serve(Box::pin(incoming), outgoing, Arc::new(pod)).await;
    let _ = write_task.await;
}

/// What the client sent on a data stream, in order.
enum Inbound {
    Bytes(Bytes),
    Fin,
    Reset,
}

/// The two streams of one forwarded connection, as they arrive.
#[derive(Default)]
struct Pair {
    port: String,
    error: Option<u32>,
    data: Option<(u32, mpsc::Receiver<Inbound>)>,
}

async fn serve<S>(mut incoming: S, outgoing: mpsc::Sender<Vec<u8>>, pod: Arc<Value>)
where
    S: Stream<Item = Bytes> + Unpin,
{
    let mut decoder = Decoder::default();
    let mut encoder = Encoder::default();
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    let mut inbound: HashMap<u32, mpsc::Sender<Inbound>> = HashMap::new();
    // Dropping the set when the connection ends aborts every forwarded connection.
    let mut forwards = JoinSet::new();
    while let Some(chunk) = incoming.next().await {
        decoder.push(&chunk);
        loop {
            let frame = match decoder.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                // A peer that does not speak SPDY gets the connection closed, as the kubelet does.
                Err(_) => return,
            };
            let sent = match frame {
                Frame::SynStream {
                    stream, headers, ..
                } => {
                    let kind = spdy::header(&headers, "streamtype").unwrap_or_default();
                    let port = spdy::header(&headers, "port").unwrap_or_default();
                    if !matches!(kind, "error" | "data") || port.is_empty() {
                        let _ = outgoing.send(encoder.syn_reply(stream, true)).await;
                        outgoing
                            .send(spdy::reset(stream, spdy::REFUSED_STREAM))
                            .await
                    } else {
                        let request = spdy::header(&headers, "requestid").unwrap_or(port);
                        let pair = pairs.entry(request.to_string()).or_default();
                        pair.port = port.to_string();
                        if kind == "error" {
                            pair.error = Some(stream);
                        } else {
                            let (sender, receiver) = mpsc::channel(INBOUND_CHUNKS);
                            inbound.insert(stream, sender);
                            pair.data = Some((stream, receiver));
                        }
                        if pair.error.is_some() && pair.data.is_some() {
                            let pair = pairs.remove(request).unwrap_or_default();
                            if let (Some(error), Some((data, receiver))) = (pair.error, pair.data) {
                                forwards.spawn(forward(
                                    Arc::clone(&pod),
                                    pair.port,
                                    error,
                                    data,
                                    receiver,
                                    outgoing.clone(),
                                ));
                            }
                        }
                        outgoing.send(encoder.syn_reply(stream, false)).await
                    }
                }
                Frame::Data {
                    stream,
                    flags,
                    data,
                } => {
                    if let Some(sender) = inbound.get(&stream) {
                        if !data.is_empty() {
                            let _ = sender.send(Inbound::Bytes(data)).await;
                        }
                        if flags & spdy::FLAG_FIN != 0 {
                            let _ = sender.send(Inbound::Fin).await;
                        }
                    }
                    Ok(())
                }
                Frame::Reset { stream, .. } => {
                    if let Some(sender) = inbound.remove(&stream) {
                        let _ = sender.send(Inbound::Reset).await;
                    }
                    Ok(())
                }
                Frame::Ping(id) => outgoing.send(spdy::ping(id)).await,
                Frame::GoAway => return,
                Frame::Ignored => Ok(()),
            };
            if sent.is_err() {
                return;
            }
            while forwards.try_join_next().is_some() {}
        }
    }
}

/// Relays one local connection of kubectl's to the pod's `port`, then closes both streams.
async fn forward(
    pod: Arc<Value>,
    port: String,
    error_stream: u32,
    data_stream: u32,
    mut from_client: mpsc::Receiver<Inbound>,
    outgoing: mpsc::Sender<Vec<u8>>,
) {
    match connect(&pod, &port).await {
        Err(message) => {
            let _ = outgoing
                .send(spdy::data(error_stream, false, message.as_bytes()))
                .await;
            let _ = outgoing.send(spdy::data(data_stream, true, b"")).await;
        }
        Ok(connection) => {
            let (mut from_pod, mut to_pod) = connection.into_split();
            let upstream = async {
                while let Some(message) = from_client.recv().await {
                    match message {
                        Inbound::Bytes(bytes) => {
                            if to_pod.write_all(&bytes).await.is_err() {
                                break;
                            }
                        }
                        Inbound::Fin => {
                            let _ = to_pod.shutdown().await;
                        }
                        Inbound::Reset => return,
                    }
                }
                // Nothing more comes from the client; the pod's answer may still be on its way.
                std::future::pending::<()>().await;
            };
            let downstream = async {
                let mut buffer = vec![0u8; 32 << 10];
                loop {
                    match from_pod.read(&mut buffer).await {
                        Ok(0) | Err(_) => {
                            let _ = outgoing.send(spdy::data(data_stream, true, b"")).await;
                            return;
                        }
                        Ok(n) => {
                            let frame = spdy::data(data_stream, false, &buffer[..n]);
                            if outgoing.send(frame).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            };
            tokio::select! {
                () = upstream => {}
                () = downstream => {}
            }
        }
    }
    let _ = outgoing.send(spdy::data(error_stream, true, b"")).await;
}

/// Connects to the pod's `port`, or says why not in the kubelet's words.
async fn connect(pod: &Value, port: &str) -> Result<TcpStream, String> {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    let failed = |reason: &str| {
        format!(
            "error forwarding port {port} to pod {name}, uid {uid}: failed to connect to localhost:{port} inside the pod: {reason}"
        )
    };
    if port.parse::<u16>().is_err() {
        return Err(format!(
            "error forwarding port {port} to pod {name}, uid {uid}: invalid port {port:?}"
        ));
    }
    let address =
        services::pod_address(pod, Some(port)).ok_or_else(|| failed("connection refused"))?;
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await {
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(error)) => Err(failed(&error.to_string())),
        Err(_) => Err(failed("connection timed out")),
    }
}

/// Answers a port-forward upgrade in whichever of kubectl's two transports it came.
pub fn upgrade(
    transport: Transport,
    headers: &HeaderMap,
    pod: Value,
) -> Result<Response, ApiError> {
    match transport {
        Transport::WebSocket(upgrade) => {
            let upgrade = upgrade.protocols([WEBSOCKET_PROTOCOL]);
            if upgrade.selected_protocol().is_none() {
                return Err(ApiError::bad_request(format!(
                    "unable to upgrade connection: the sandbox serves port-forward WebSockets only with the {} subprotocol (kubectl 1.30 or later)",
                    WEBSOCKET_PROTOCOL
                )));
            }
            Ok(upgrade.on_upgrade(move |socket| serve_websocket(socket, pod)))
        }
        Transport::Spdy(on_upgrade) => {
            let offered: Vec<&str> = headers
                .get_all("x-stream-protocol-version")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .map(str::trim)
                .collect();
            let protocol = STREAM_PROTOCOL;
            if !offered.contains(&protocol) {
                let mut error = ApiError::bad_request(format!(
                    "unable to upgrade connection: unable to negotiate protocol: client supports {offered:?}, server supports [\"{protocol}\"]"
                ));
                error.code = 403;
                error.reason = "Forbidden";
                return Err(error);
            }
            let Some(on_upgrade) = on_upgrade else {
                return Err(ApiError::bad_request(
                    "unable to upgrade connection: the connection cannot be taken over",
                ));
            };
            tokio::spawn(async move {
                if let Ok(upgraded) = on_upgrade.await {
                    serve_upgraded(hyper_util::rt::TokioIo::new(upgraded), pod).await;
                }
            });
            Ok(Response::builder()
                .status(StatusCode::SWITCHING_PROTOCOLS)
                .header(header::CONNECTION, "Upgrade")
                .header(header::UPGRADE, "SPDY/3.1")
                .header("X-Stream-Protocol-Version", protocol)
                .body(axum::body::Body::empty())
                .expect("static headers"))
        }
    }
}
