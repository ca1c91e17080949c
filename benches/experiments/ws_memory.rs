//! Memory per idle WebSocket: `dormant::ws` (sockets asleep in the
//! parking lot between messages), against axum's WebSocket (a task per
//! socket looping on `recv`, tungstenite's buffers) served by
//! `axum::serve` and by `dormant::axum::serve`, and tokio-tungstenite's own
//! server; over TLS, `dormant::ws` against tokio-tungstenite over
//! tokio-rustls. Same N, same run.
//!
//! ```text
//! cargo bench --features axum,ws --bench ws_memory
//! WS_N=10000 WS_REPEAT=3 cargo bench --features tls,axum,ws --bench ws_memory
//! WS_KINDS=tokio-tungstenite,dormant-ws cargo bench --features axum,ws --bench ws_memory
//! WS_N=10000 WS_KINDS=tokio-tungstenite,dormant-ws,dormant-ws-deflate cargo bench --features axum,ws-deflate --bench ws_memory
//! ```
//!
//! Under `cargo test --benches` (no `--bench` argument) it only checks that
//! it works: N = 200, one round.
//!
//! # Method
//!
//! As `benches/experiments/upgrade_memory.rs` (`benches/common/procs.rs`):
//! every measurement runs in a fresh server process on a 2-worker runtime,
//! warms up with 64 sockets that echo once and close, takes the *before*
//! figures, then a client process opens N WebSockets one after another:
//! the handshake, one masked text message `ping`, its echo read back, and
//! the socket stays open. Once all N echoed and the live heap is still, the
//! *after* figures: `(after - before) / N` of the live heap (counting
//! allocator), RSS, and RSS after `malloc_trim(0)`.
//!
//! - `axum-serve`, `dormant`: axum's WebSocket as axum's examples write it
//!   (`ws.on_upgrade(handle_socket)`), tungstenite's default buffers;
//! - `axum-serve-4k`, `dormant-4k`: the same with
//!   `WebSocketUpgrade::read_buffer_size(4096)` (axum#3178's advice);
//! - `tokio-tungstenite`: `tokio_tungstenite::accept_async` on each accepted
//!   `TcpStream`, a task per socket echoing, its default configuration;
//! - `dormant-ws`: `dormant::ws::WebSocketUpgrade` in the same axum router,
//!   served by `dormant::axum::serve`: an echo handler whose state is `()`;
//! - `dormant-ws-deflate` (feature `ws-deflate`): the same server, whose
//!   client offers compression as browsers do (`permessage-deflate;
//!   client_max_window_bits`; the bench fails unless the `101` accepts it)
//!   and sends its one message compressed (RSV1, raw deflate without the
//!   last four bytes): a 94-byte JSON text, long enough that the server
//!   compresses its echo too, which the client inflates and checks. So the
//!   socket has inflated one message and compressed one before it sleeps;
//!   the server's inflaters and compressor are per thread, paid in the
//!   warm-up;
//! - `tls-tokio-tungstenite`, `tls-dormant-ws`: the same two over TLS 1.3
//!   (tokio-rustls's `TlsAcceptor`, dormant's `TlsListener`; the same rustls
//!   configuration, a self-signed certificate).

use std::convert::Infallible;
use std::io::{Read, Write};
use std::path::Path;
#[cfg(feature = "tls-no-provider")]
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::routing::get;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

#[path = "../common/deflate.rs"]
mod deflate;
#[path = "../common/memory.rs"]
mod memory;
#[path = "../common/procs.rs"]
mod procs;
#[path = "../common/switching.rs"]
mod switching;

use memory::wait_until;
use procs::{Bench, Conn, Connect, Endpoint, Listen, UnderTest, WARMUP};

static BENCH: Bench<Exchange> = Bench {
    prefix: "WS",
    title: "memory per idle WebSocket",
    kinds: KINDS,
    kind_width: 21,
    ratios: &[
        ("dormant", "dormant, axum's WebSocket"),
        ("dormant-ws", "dormant::ws"),
        #[cfg(feature = "ws-deflate")]
        ("dormant-ws-deflate", "dormant::ws, compressed"),
    ],
    connect: Exchange,
};

/// The kinds, in the order they run; `dormant-ws-deflate` with
/// `ws-deflate` only (without it the server declines compression).
const KINDS: &[&str] = &[
    "axum-serve",
    "dormant",
    "axum-serve-4k",
    "dormant-4k",
    "tokio-tungstenite",
    "dormant-ws",
    #[cfg(feature = "ws-deflate")]
    "dormant-ws-deflate",
    "tls-tokio-tungstenite",
    "tls-dormant-ws",
];

fn main() {
    procs::main(&BENCH, || procs::serve(&BENCH, start_server));
}

// ---------------------------------------------------------------------------
// Server process
// ---------------------------------------------------------------------------

/// Sockets that echoed their first message.
static ECHOED: AtomicUsize = AtomicUsize::new(0);

/// axum's WebSocket echo, as its examples write it.
async fn echo(mut socket: WebSocket) {
    while let Some(Ok(message)) = socket.recv().await {
        if let Message::Text(_) | Message::Binary(_) = message {
            if socket.send(message).await.is_err() {
                return;
            }
            ECHOED.fetch_add(1, Relaxed);
        }
    }
}

/// The application: `/ws`, with the default read buffer or a 4 KiB one.
fn app(small: bool) -> axum::Router {
    axum::Router::new().route(
        "/ws",
        get(move |ws: WebSocketUpgrade| async move {
            let ws = if small { ws.read_buffer_size(4096) } else { ws };
            Ok::<_, Infallible>(ws.on_upgrade(echo))
        }),
    )
}

struct Sockets;

impl UnderTest for Sockets {
    fn wait_warmed_up(&self) {
        wait_until("warm-up echoed", Duration::from_secs(30), || {
            ECHOED.load(Relaxed) >= WARMUP
        });
    }

    fn wait_idle(&self, n: usize) {
        wait_until("all echoed", Duration::from_secs(120), || {
            ECHOED.load(Relaxed) >= WARMUP + n
        });
    }
}

/// `dormant-ws`: the same route with dormant's extractor: each message
/// runs the closure, and the socket sleeps in between.
fn dormant_ws_app() -> axum::Router {
    axum::Router::new().route(
        "/ws",
        get(|ws: dormant::ws::WebSocketUpgrade| async move {
            ws.on_message((), |(), message, sender| async move {
                if let dormant::ws::Message::Text(text) = message {
                    if sender.send(text).is_ok() {
                        ECHOED.fetch_add(1, Relaxed);
                    }
                }
            })
        }),
    )
}

/// `tokio-tungstenite`: its server on an accepted stream, a task per socket.
async fn tungstenite_echo<S: AsyncRead + AsyncWrite + Unpin>(stream: S) {
    let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
        return;
    };
    while let Some(Ok(message)) = ws.next().await {
        if message.is_text() || message.is_binary() {
            if ws.send(message).await.is_err() {
                return;
            }
            ECHOED.fetch_add(1, Relaxed);
        }
    }
}

/// The listener of a kind: TCP, or TLS over TCP for the `tls-…` kinds.
enum Listening {
    Tcp(TcpListener),
    #[cfg(feature = "tls-no-provider")]
    Tls(TcpListener, Arc<rustls::ServerConfig>),
}

impl Listen for Listening {
    fn listen(unix: Option<&Path>) -> (Self, Endpoint) {
        let (listener, to) = TcpListener::listen(unix);
        (Listening::Tcp(listener), to)
    }

    #[cfg(feature = "tls-no-provider")]
    fn tls(listener: TcpListener, config: Arc<rustls::ServerConfig>) -> Self {
        Listening::Tls(listener, config)
    }
}

/// Starts the server of `kind` (see the module docs).
fn start_server(
    kind: &str,
    listener: Listening,
    stop: oneshot::Receiver<()>,
) -> (Sockets, JoinHandle<()>) {
    let small = kind.ends_with("-4k");
    let shutdown = async {
        let _ = stop.await;
    };
    let task = match (kind, listener) {
        ("axum-serve" | "axum-serve-4k", Listening::Tcp(listener)) => tokio::spawn(async move {
            axum::serve(listener, app(small))
                .with_graceful_shutdown(shutdown)
                .await
                .expect("serve");
        }),
        ("dormant" | "dormant-4k", Listening::Tcp(listener)) => tokio::spawn(async move {
            dormant::axum::serve(listener, app(small))
                .with_graceful_shutdown(shutdown)
                .await
                .expect("serve");
        }),
        // Compression is on by default: with `ws-deflate`, the server
        // accepts `dormant-ws-deflate`'s offer.
        ("dormant-ws" | "dormant-ws-deflate", Listening::Tcp(listener)) => {
            tokio::spawn(async move {
                dormant::axum::serve(listener, dormant_ws_app())
                    .with_graceful_shutdown(shutdown)
                    .await
                    .expect("serve");
            })
        }
        ("tokio-tungstenite", Listening::Tcp(listener)) => tokio::spawn(async move {
            let mut shutdown = std::pin::pin!(shutdown);
            loop {
                let accept = tokio::select! {
                    () = &mut shutdown => return,
                    accept = listener.accept() => accept,
                };
                if let Ok((stream, _)) = accept {
                    // As dormant's sockets (and hyper-util's servers) are.
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(tungstenite_echo(stream));
                }
            }
        }),
        #[cfg(feature = "tls-no-provider")]
        ("tls-dormant-ws", Listening::Tls(listener, config)) => tokio::spawn(async move {
            let config = dormant::tls::TlsConfig::new(config);
            let listener = dormant::tls::TlsListener::new(listener, config);
            let server = dormant::Server::builder().build().expect("build");
            let app = dormant::axum::App::new(dormant_ws_app());
            server
                .serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
                .expect("serve");
        }),
        #[cfg(feature = "tls-no-provider")]
        ("tls-tokio-tungstenite", Listening::Tls(listener, config)) => tokio::spawn(async move {
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            let mut shutdown = std::pin::pin!(shutdown);
            loop {
                let accept = tokio::select! {
                    () = &mut shutdown => return,
                    accept = listener.accept() => accept,
                };
                if let Ok((stream, _)) = accept {
                    let _ = stream.set_nodelay(true);
                    let acceptor = acceptor.clone();
                    tokio::spawn(async move {
                        if let Ok(stream) = acceptor.accept(stream).await {
                            tungstenite_echo(stream).await;
                        }
                    });
                }
            }
        }),
        (other, _) => panic!("unknown kind {other}"),
    };
    (Sockets, task)
}

// ---------------------------------------------------------------------------
// Client process
// ---------------------------------------------------------------------------

/// The client's exchange on each connection: [`handshake_and_echo`], or
/// [`compressed_echo`] for `dormant-ws-deflate`.
struct Exchange;

impl Connect for Exchange {
    type Open = Conn;

    fn connect(&self, kind: &str, to: &Endpoint) -> Conn {
        let mut conn = Conn::open(to);
        match kind {
            "dormant-ws-deflate" => compressed_echo(&mut conn),
            _ => handshake_and_echo(&mut conn),
        }
        conn
    }
}

/// The upgrade request, with `extra` header lines.
fn upgrade_request(extra: &str) -> Vec<u8> {
    format!(
        "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{extra}\r\n"
    )
    .into_bytes()
}

/// A client's frame: final, masked (as a client must), with `first` as
/// its first byte (FIN, RSV1, the opcode); payloads under 126 bytes.
fn masked(first: u8, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 126);
    let mask = [1, 2, 3, 4];
    let mut frame = vec![first, 0x80 | payload.len() as u8];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().zip(mask.iter().cycle()).map(|(b, m)| b ^ m));
    frame
}

/// Opens a WebSocket on `/ws`, sends `ping` and reads its echo.
fn handshake_and_echo(s: &mut Conn) {
    s.write_all(&upgrade_request("")).expect("write");
    switching::read_switching_head(s);
    s.write_all(&masked(0x81, b"ping")).expect("write");
    let mut echo = [0u8; 6];
    s.read_exact(&mut echo).expect("echo");
    assert_eq!(&echo, b"\x81\x04ping");
}

/// `dormant-ws-deflate`'s message: long enough (over 64 bytes) for the
/// server to compress its echo.
const JSON: &[u8] =
    br#"{"type":"hello","user":"ada","room":"lobby","client":"bench/1.0","text":"hello, hello, hello"}"#;

/// Opens a WebSocket on `/ws` offering compression, checks the `101`
/// accepted it, sends [`JSON`] compressed and reads its echo, which comes
/// compressed, and inflates it.
fn compressed_echo(s: &mut Conn) {
    s.write_all(&upgrade_request(deflate::OFFER))
        .expect("write");
    let head = switching::read_switching_head(s);
    assert!(
        deflate::accepted(&head),
        "the 101 did not accept compression (built without ws-deflate?): {}",
        String::from_utf8_lossy(&head)
    );
    let compressed = deflate::deflate(JSON);
    s.write_all(&masked(0x80 | deflate::RSV1 | 0x1, &compressed))
        .expect("write");
    let mut header = [0u8; 2];
    s.read_exact(&mut header).expect("echo");
    assert_eq!(header[0] & !deflate::RSV1, 0x81, "a final text frame");
    let len = match header[1] {
        126 => {
            let mut len = [0u8; 2];
            s.read_exact(&mut len).expect("echo");
            u16::from_be_bytes(len) as usize
        }
        len => len as usize,
    };
    let mut payload = vec![0; len];
    s.read_exact(&mut payload).expect("echo");
    // The server compresses what compression makes smaller; this message
    // is, so the socket compressed one before it sleeps (as documented).
    assert!(
        header[0] & deflate::RSV1 != 0,
        "the echo came uncompressed: the method says it is compressed"
    );
    let mut text = Vec::new();
    deflate::Inflater::new().inflate(&payload, &mut text);
    payload = text;
    assert_eq!(payload, JSON, "the echo");
}
