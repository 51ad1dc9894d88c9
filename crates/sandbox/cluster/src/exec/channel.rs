//! kubectl's channel protocol over a WebSocket: the command's output and its exit status.

use super::context::*;
use super::shell::*;
use axum::extract::ws::{Message, WebSocket};

pub(crate) fn frame(channel: u8, data: &[u8]) -> Message {
    let mut bytes = Vec::with_capacity(data.len() + 1);
    bytes.push(channel);
    bytes.extend_from_slice(data);
    Message::Binary(bytes.into())
}

/// Runs the command and streams the result over the channel protocol: stdout on channel 1, stderr
/// on 2, then the Status on 3, then the socket closes.
pub async fn serve(mut socket: WebSocket, words: Vec<String>, context: Context) {
    let outcome = run(&words, &context).await;
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
