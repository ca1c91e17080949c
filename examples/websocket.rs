//! A WebSocket echo server: tokio-tungstenite on dormant's upgraded stream.
//!
//! ```text
//! cargo run --release --example websocket [ADDR]     # default 127.0.0.1:3000
//! cargo run --release --features tls --example websocket ADDR CERT_PEM KEY_PEM   # wss://
//! ```
//!
//! Any path accepts a WebSocket handshake (`GET` with `Connection: Upgrade`,
//! `Upgrade: websocket`, `Sec-WebSocket-Version: 13` and a
//! `Sec-WebSocket-Key`); text and binary messages come back unchanged.
//! Other requests get `426 Upgrade Required`. Try it with any WebSocket
//! client (`websocat ws://127.0.0.1:3000/`, a browser's
//! `new WebSocket("ws://127.0.0.1:3000/")`), or by hand: the handshake,
//! then the text message `hi` in a masked frame (`\201\202`: final text
//! frame, masked, 2 bytes; a zero mask), which comes back after the `101`
//! as an unmasked frame (two bytes, then `hi`):
//!
//! ```text
//! printf 'GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n\201\202\0\0\0\0hi' \
//!     | nc -q 1 127.0.0.1 3000
//! ```
//!
//! # Buffer sizes
//!
//! tungstenite allocates its read buffer eagerly, 128 KiB by default, and
//! keeps it for the life of the connection; its write buffer collects up to
//! 128 KiB before writing. For many mostly idle connections that dwarfs
//! everything else, so this example reads with 4 KiB (a larger message just
//! takes several reads) and writes each message at once. A connection here
//! is one task holding the WebSocket with its 4 KiB buffer; for streams
//! that cost nothing between messages, see `examples/echo.rs`, whose idle
//! streams sleep in dormant's parking lot.
//!
//! # Message size
//!
//! Messages and frames are limited to 1 MiB (`config()`). A client that
//! sends a larger one gets a close frame with code 1009 (message too big)
//! before the connection ends.

use std::convert::Infallible;
use std::time::Duration;

use dormant::upgrade::{self, Upgraded};
use futures_util::{SinkExt, StreamExt};
use http::header::{
    CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_VERSION, UPGRADE,
};
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Error;
use tokio_tungstenite::tungstenite::Utf8Bytes;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tracing_subscriber::EnvFilter;

/// How long a connection closed for a too big message goes on reading
/// (and discarding) what the client still sends, waiting for it to close.
const CLOSE_LINGER: Duration = Duration::from_secs(1);

/// tungstenite's buffers, sized for many mostly idle connections, and the
/// largest message and frame it accepts.
pub fn config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(4 * 1024)
        .write_buffer_size(0)
        .max_message_size(Some(1 << 20))
        .max_frame_size(Some(1 << 20))
}

/// Answers a WebSocket handshake with `101` and echoes on the upgraded
/// stream; anything else with `426`.
pub async fn handle(mut req: Request<dormant::Body>) -> Result<Response<Full<Bytes>>, Infallible> {
    let headers = req.headers();
    let websocket = headers
        .get(UPGRADE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"))
        && headers
            .get(SEC_WEBSOCKET_VERSION)
            .is_some_and(|v| v == "13");
    let key = headers
        .get(SEC_WEBSOCKET_KEY)
        .filter(|_| websocket)
        .cloned();
    let (Some(key), Ok(upgrade)) = (key, upgrade::on(&mut req)) else {
        return Ok(upgrade_required());
    };
    tokio::spawn(async move {
        match upgrade.await {
            Ok(parts) => echo(parts.into()).await,
            Err(error) => tracing::debug!(%error, "no upgrade"),
        }
    });
    let mut res = Response::new(Full::default());
    *res.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = res.headers_mut();
    h.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(UPGRADE, HeaderValue::from_static("websocket"));
    let accept = derive_accept_key(key.as_bytes());
    h.insert(
        SEC_WEBSOCKET_ACCEPT,
        accept.parse().expect("base64 is a header value"),
    );
    Ok(res)
}

fn upgrade_required() -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(Bytes::from_static(b"WebSocket only\n")));
    *res.status_mut() = StatusCode::UPGRADE_REQUIRED;
    res.headers_mut()
        .insert(UPGRADE, HeaderValue::from_static("websocket"));
    res
}

/// Sends every text and binary message back until the client closes.
async fn echo(stream: Upgraded) {
    // `Upgraded` yields the bytes the client sent right after its handshake
    // first, so a frame sent before the 101 arrived is not lost.
    let mut ws = WebSocketStream::from_raw_socket(stream, Role::Server, Some(config())).await;
    while let Some(message) = ws.next().await {
        let message = match message {
            Ok(m) if m.is_text() || m.is_binary() => m,
            // Pings are answered and closes completed by tungstenite.
            Ok(_) => continue,
            Err(Error::Capacity(error)) => {
                tracing::debug!(%error, "websocket message too big");
                close_too_big(ws).await;
                return;
            }
            Err(error) => {
                tracing::debug!(%error, "websocket ended");
                return;
            }
        };
        if let Err(error) = ws.send(message).await {
            tracing::debug!(%error, "websocket send failed");
            return;
        }
    }
}

/// Closes the connection of a client whose message is over the limits of
/// `config()`: a close frame with 1009 (message too big), then the end of
/// the connection.
///
/// tungstenite reports the error once it has read the frame header, so the
/// rest of the message is still on its way, and after the error its stream
/// yields nothing more (the close frame goes out through its sink). Dropping
/// a socket with unread bytes resets the connection, and a reset can discard
/// the close frame before the client reads it; so the server half-closes,
/// then discards what comes in until the client closes too (it does once it
/// has read the close frame and the end of the stream), for at most
/// `CLOSE_LINGER`.
async fn close_too_big(mut ws: WebSocketStream<Upgraded>) {
    let frame = CloseFrame {
        code: CloseCode::Size,
        reason: Utf8Bytes::from_static("message too big"),
    };
    if let Err(error) = ws.close(Some(frame)).await {
        tracing::debug!(%error, "websocket close failed");
        return;
    }
    let mut stream = ws.into_inner();
    if stream.shutdown().await.is_ok() {
        let mut sink = tokio::io::sink();
        let discard = tokio::io::copy(&mut stream, &mut sink);
        let _ = tokio::time::timeout(CLOSE_LINGER, discard).await;
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:3000".to_owned());
    let listener = TcpListener::bind(&addr).await?;
    println!("listening on {}", listener.local_addr()?);
    let server = dormant::Server::builder().build()?;
    match (args.next(), args.next()) {
        (None, _) => serve(server, listener).await,
        (Some(cert), Some(key)) => serve_tls(server, listener, cert, key).await,
        (Some(_), None) => Err("usage: websocket [ADDR [CERT_PEM KEY_PEM]]".into()),
    }
}

/// Serves until Ctrl-C, then shuts down gracefully.
async fn serve(
    server: dormant::Server,
    listener: impl dormant::Listener,
) -> Result<(), Box<dyn std::error::Error>> {
    server
        .serve(listener, service_fn(handle))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

/// wss://: the same handler over TLS (the upgraded stream is the TLS one).
#[cfg(feature = "tls-no-provider")]
async fn serve_tls(
    server: dormant::Server,
    listener: TcpListener,
    cert: String,
    key: String,
) -> Result<(), Box<dyn std::error::Error>> {
    use dormant::tls::{TlsConfig, TlsListener};
    let config = TlsConfig::from_pem_files(cert, key)?;
    serve(server, TlsListener::new(listener, config)).await
}

#[cfg(not(feature = "tls-no-provider"))]
async fn serve_tls(
    _: dormant::Server,
    _: TcpListener,
    _: String,
    _: String,
) -> Result<(), Box<dyn std::error::Error>> {
    Err("wss:// needs the `tls` feature: cargo run --features tls --example websocket …".into())
}
