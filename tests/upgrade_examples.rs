//! The upgrade examples, served and spoken to: `examples/echo.rs` (streams
//! sleeping in the lot) and `examples/websocket.rs` (tokio-tungstenite).

use crate::common::timeout::CLIENT_TIMEOUT;

use crate::common::servers::Serve;
use crate::common::tcp::{fast_park, serve_with};
use dormant::Rung::{Active, Parked};

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/echo.rs"]
mod echo;
// Also run over TLS by tls_upgrade.rs (a file is one module).
#[allow(dead_code, unreachable_pub)]
#[path = "../examples/websocket.rs"]
pub(crate) mod websocket;

use futures_util::{SinkExt, StreamExt};
use hyper::service::service_fn;
use tokio::time::timeout;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

const ECHO_UPGRADE: &str =
    "GET /any/path HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n";

#[test]
fn echo_example_echoes_and_sleeps_between_messages() {
    let srv = serve_with(&fast_park(), service_fn(echo::handle));
    let mut c = srv.connect();
    c.send(format!("{ECHO_UPGRADE}hi").as_bytes());
    assert_eq!(
        c.response(),
        "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: echo\r\n\r\n"
    );
    assert_eq!(c.read_exact_bytes(2), b"hi");
    for msg in ["one", "two", "three"] {
        c.send(msg.as_bytes());
        assert_eq!(c.read_exact_bytes(msg.len()), msg.as_bytes());
    }
    srv.wait_for("handed off", |s| {
        s.upgrades == 1 && s.connections[Active] == 0 && s.connections[Parked] == 0
    });

    let mut plain = srv.connect();
    plain.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let res = plain.response();
    assert!(
        res.starts_with("HTTP/1.1 426 Upgrade Required\r\n"),
        "{res}"
    );
}

/// examples/websocket.rs served, and a tokio-tungstenite client connected
/// to it (its handshake answered 101).
async fn websocket_example() -> (Serve, WebSocketStream<tokio::net::TcpStream>) {
    let srv = serve_with(&fast_park(), service_fn(websocket::handle));
    let stream = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    let (ws, res) = timeout(
        CLIENT_TIMEOUT,
        tokio_tungstenite::client_async("ws://x/chat", stream),
    )
    .await
    .expect("handshake timed out")
    .expect("handshake");
    assert_eq!(res.status(), 101);
    (srv, ws)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn websocket_example_echoes() {
    let (srv, mut ws) = websocket_example().await;
    let big: Vec<u8> = (0..20_000u32).map(|i| i as u8).collect();
    for message in [Message::text("hello"), Message::binary(big)] {
        ws.send(message.clone()).await.unwrap();
        let echoed = timeout(CLIENT_TIMEOUT, ws.next())
            .await
            .expect("echo timed out")
            .expect("a message")
            .unwrap();
        assert_eq!(echoed, message);
    }
    ws.close(None).await.unwrap();
    srv.wait_for("handed off", |s| {
        s.upgrades == 1 && s.connections[Active] == 0
    });
}

/// A message over the example's limit gets a close frame with 1009
/// (message too big), not a dropped connection (1006), and then the
/// connection ends cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn websocket_example_closes_with_1009_on_a_too_big_message() {
    let (srv, mut ws) = websocket_example().await;
    let limit = websocket::config()
        .max_message_size
        .expect("the example limits messages");
    // The server reads (and discards) the rest of the message after its
    // close frame, so sending all of it succeeds.
    timeout(
        CLIENT_TIMEOUT,
        ws.send(Message::binary(vec![7u8; limit + 1])),
    )
    .await
    .expect("send timed out")
    .expect("send");
    let close = timeout(CLIENT_TIMEOUT, ws.next())
        .await
        .expect("close timed out")
        .expect("a message");
    match close {
        Ok(Message::Close(Some(frame))) => {
            assert_eq!(frame.code, CloseCode::Size, "{frame}");
            assert_eq!(frame.reason, "message too big");
        }
        other => panic!("expected a close frame with 1009, got {other:?}"),
    }
    // The client's reply goes out, then the server's end of stream ends it.
    let end = timeout(CLIENT_TIMEOUT, ws.next())
        .await
        .expect("end timed out");
    assert!(end.is_none(), "{end:?}");
    drop(ws);
    srv.wait_for("handed off", |s| {
        s.upgrades == 1 && s.connections[Active] == 0
    });
}

/// A frame sent in the same write as the handshake request reaches
/// tungstenite first: the leftover bytes come out of `Upgraded` first.
#[test]
fn websocket_frame_right_after_the_handshake() {
    let srv = serve_with(&fast_park(), service_fn(websocket::handle));
    let mut c = srv.connect();
    let mask = [1u8, 2, 3, 4];
    let mut frame = vec![0x81, 0x80 | 5];
    frame.extend_from_slice(&mask);
    frame.extend(b"early".iter().zip(mask.iter().cycle()).map(|(b, m)| b ^ m));
    let mut bytes = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
        Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        .to_vec();
    bytes.extend_from_slice(&frame);
    c.send(&bytes);
    assert_eq!(
        c.response(),
        "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\n\
         sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"
    );
    assert_eq!(c.read_exact_bytes(7), b"\x81\x05early");
}
