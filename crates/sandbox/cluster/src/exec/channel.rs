//! kubectl's channel protocol over a WebSocket: the command's output and its exit status.

use super::context::*;
use super::shell::*;
use axum::extract::ws::{Message, WebSocket};
use std::time::Duration;

/// How long after the handshake the command's first output may be sent. A container runtime
/// takes tens of milliseconds to start a process in a container, and kubectl relies on it: it
/// creates its streams only after the handshake and drops a frame that arrives for a stream it
/// has not created yet, so a server that answered at once could lose the command's first output.
const PROCESS_START: Duration = Duration::from_millis(100);

pub(crate) fn frame(channel: u8, data: &[u8]) -> Message {
    let mut bytes = Vec::with_capacity(data.len() + 1);
    bytes.push(channel);
    bytes.extend_from_slice(data);
    Message::Binary(bytes.into())
}

/// Runs the command and streams the result over the channel protocol: stdout on channel 1, stderr
/// on 2, then the Status on 3, then the socket closes. Nothing is sent in the first 100 ms, the
/// time a container runtime takes to start a process.
pub async fn serve(mut socket: WebSocket, words: Vec<String>, context: Context) {
    let started = tokio::time::Instant::now();
    let outcome = run(&words, &context).await;
    tokio::time::sleep_until(started + PROCESS_START).await;
    if !outcome.stdout.is_empty() {
        let _ = socket.send(frame(1, outcome.stdout.as_bytes())).await;
    }
    if !outcome.stderr.is_empty() {
        let _ = socket.send(frame(2, outcome.stderr.as_bytes())).await;
    }
    let _ = socket
        .send(frame(3, status(&outcome).to_string().as_bytes()))
        .await;
    // A normal closure (1000): kubectl treats a close without a status as a broken stream.
    let close = axum::extract::ws::CloseFrame {
        code: 1000,
        reason: "".into(),
    };
    let _ = socket.send(Message::Close(Some(close))).await;
}
