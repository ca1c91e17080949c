//! What the axum tests' applications share: axum's own WebSocket routes.

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;

/// Echoes text and binary messages; tungstenite answers pings and the
/// close by itself, the close at the next `recv`, which then ends.
pub(crate) async fn echo(mut socket: WebSocket) {
    while let Some(Ok(message)) = socket.recv().await {
        let reply = match message {
            Message::Text(text) => Message::Text(text),
            Message::Binary(bytes) => Message::Binary(bytes),
            Message::Ping(_) | Message::Pong(_) | Message::Close(_) => continue,
        };
        if socket.send(reply).await.is_err() {
            return;
        }
    }
}

/// A WebSocket route that closes at once with 4001 "bye", and reads on
/// until the client's answer.
pub(crate) async fn bye(ws: WebSocketUpgrade) -> Response {
    ws.on_upgrade(|mut socket| async move {
        let close = CloseFrame {
            code: 4001,
            reason: "bye".into(),
        };
        let _ = socket.send(Message::Close(Some(close))).await;
        while socket.recv().await.is_some() {}
    })
}
