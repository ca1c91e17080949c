//! Memory per idle WebSocket of one axum application (axum's own
//! `WebSocketUpgrade`, a task per socket looping on `recv`), served by
//! `axum::serve` and by `dormant::axum::serve`: with tungstenite's default
//! buffers, and with a 4 KiB read buffer (`read_buffer_size(4096)`, the
//! setting axum#3178 recommends). Same N, same run.
//!
//! ```text
//! cargo bench --features axum --bench ws_memory
//! WS_N=10000 WS_REPEAT=3 cargo bench --features axum --bench ws_memory
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
//! - `axum-serve`, `dormant`: the handler as axum's examples write it
//!   (`ws.on_upgrade(handle_socket)`), tungstenite's default buffers;
//! - `axum-serve-4k`, `dormant-4k`: the same with
//!   `WebSocketUpgrade::read_buffer_size(4096)`.
//!
//! The WebSocket is axum's in every row: what dormant can change is what
//! the server keeps beside it (hyper's upgraded connection and the socket),
//! not tungstenite's buffers or the task; `dormant::ws` (issue #38) is the
//! design that keeps neither.

use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

#[path = "../common/memory.rs"]
mod memory;
#[path = "../common/procs.rs"]
mod procs;
#[path = "../common/switching.rs"]
mod switching;

use memory::wait_until;
use procs::{Bench, UnderTest, WARMUP};

static BENCH: Bench = Bench {
    prefix: "WS",
    title: "memory per idle axum WebSocket",
    kinds: &["axum-serve", "dormant", "axum-serve-4k", "dormant-4k"],
    kind_width: 13,
    ratios: &[("dormant", "dormant")],
    connect: handshake_and_echo,
};

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

/// Starts the server of `kind` (see the module docs).
fn start_server(
    kind: &str,
    listener: TcpListener,
    stop: oneshot::Receiver<()>,
) -> (Sockets, JoinHandle<()>) {
    let small = kind.ends_with("-4k");
    let shutdown = async {
        let _ = stop.await;
    };
    let task = match kind {
        "axum-serve" | "axum-serve-4k" => tokio::spawn(async move {
            axum::serve(listener, app(small))
                .with_graceful_shutdown(shutdown)
                .await
                .expect("serve");
        }),
        "dormant" | "dormant-4k" => tokio::spawn(async move {
            dormant::axum::serve(listener, app(small))
                .with_graceful_shutdown(shutdown)
                .await
                .expect("serve");
        }),
        other => panic!("unknown kind {other}"),
    };
    (Sockets, task)
}

// ---------------------------------------------------------------------------
// Client process
// ---------------------------------------------------------------------------

/// Opens a WebSocket on `/ws`, sends `ping` (masked, as a client must)
/// and reads its echo.
fn handshake_and_echo(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(
        b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
          Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    )
    .expect("write");
    switching::read_switching_head(&mut s);
    let mask = [1, 2, 3, 4];
    let mut frame = vec![0x81, 0x80 | 4];
    frame.extend_from_slice(&mask);
    frame.extend(b"ping".iter().zip(mask.iter().cycle()).map(|(b, m)| b ^ m));
    s.write_all(&frame).expect("write");
    let mut echo = [0u8; 6];
    s.read_exact(&mut echo).expect("echo");
    assert_eq!(&echo, b"\x81\x04ping");
    s
}
