//! Idle memory per keep-alive connection: `dormant` against a plain
//! hyper-util server, same handler, same N, same run.
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-bench cargo bench --bench idle_memory
//! IDLE_N=5000 IDLE_REPEAT=5 cargo bench --bench idle_memory
//! IDLE_KINDS=h2c-dw-hyper-util,h2c-dw-dormant cargo bench --bench idle_memory
//! IDLE_KINDS=h2c-node-hyper-util,h2c-node-dormant cargo bench --bench idle_memory
//! cargo bench --bench idle_memory -- 2000          # N as an argument
//! cargo bench --features tls --bench idle_memory   # with the TLS rows (h2 too)
//! cargo bench --features tls-ring --bench idle_memory   # TLS on ring
//! ```
//!
//! Under `cargo test --benches` (no `--bench` argument) it only checks that
//! it works: N = 200, one round.
//!
//! # Method
//!
//! Every measurement runs in a fresh *server process* (this binary
//! re-executed with `IDLE_ROLE=server`), because memory a previous server
//! freed stays in the process's RSS and would hide the next one's growth.
//! The server process runs the server on a 2-worker multi-thread runtime,
//! warms up (64 connections that each do one request and close), takes the
//! *before* figures, then has a *client process* (`IDLE_ROLE=client`: one
//! process may hold at most `ulimit -Hn` descriptors) open N connections one
//! after another, each sending one keep-alive `GET` and reading its
//! response, and keep them all open. Once every connection is idle (dormant:
//! `stats()` shows all N on the rung measured; hyper-util: N accepted, then a
//! settle time) and
//! the live heap has stopped moving, it takes the *after* figures and
//! reports `(after - before) / N`:
//!
//! - **heap**: live bytes according to a counting global allocator
//!   (`stats_alloc`, which wraps `System` with atomic counters; the bench
//!   does not implement `GlobalAlloc` itself, see `Cargo.toml`);
//! - **allocs**: live allocations, same source;
//! - **RSS**: `VmRSS` from `/proc/self/status`;
//! - **RSS trimmed**: `VmRSS` again, read right after each of the two RSS
//!   readings once `malloc_trim(0)` has given back to the system what
//!   glibc's arenas hold free (`n/a` off glibc). glibc keeps its arenas'
//!   high-water mark: what the connections used while they were briefly
//!   ACTIVE or PARKED, and freed, stays in RSS, a fixed amount that the
//!   RSS column spreads over N as if every connection kept it (at N =
//!   10,000 most of the `dormant` row's RSS). This column counts the
//!   memory in use. The RSS column is read as before the trim existed, so
//!   earlier figures stay comparable (the trim after the *before* reading
//!   gives back a few KiB that the connections may fault in again: about
//!   1 B per connection at N = 10,000, at most).
//!
//! The kinds alternate, `IDLE_REPEAT` times (default 3), and the table shows
//! medians:
//!
//! - `hyper-util`: hyper-util's auto server, the baseline;
//! - `parked`: dormant with `dormant_after(None)`, every connection PARKED
//!   (a task and a tokio registration, no hyper state, no buffer);
//! - `dormant`: dormant's defaults, measured once every connection has gone
//!   DORMANT (`dormant_after`, 1 s): fds in the parking lot, no task;
//! - `hooked`: `dormant`'s server with a connection state hook
//!   (`Serve::on_conn_state`, counting states as a metrics hook would):
//!   what a hook costs a DORMANT connection;
//! - `no-park`: dormant with `park_after(None)`: what a connection costs
//!   while it keeps hyper, which shows what parking saves;
//! - `unix-parked`, `unix-dormant`: `parked` and `dormant` over a Unix
//!   socket (a `tokio::net::UnixListener` in a fresh directory under the
//!   system's temporary directory, removed at the end; the client connects
//!   with `std::os::unix::net::UnixStream`): the ladder is not about TCP,
//!   so a Unix connection should cost what a TCP one does. Their heap is
//!   TCP's; their untrimmed RSS runs higher because the client connects
//!   faster over a Unix socket, so more connections are ACTIVE at once in
//!   their first `park_after` (10 ms), each with hyper's buffers, which
//!   raises glibc's high-water mark: compare the trimmed columns;
//! - `tls-hyper-util`, `tls-parked`, `tls-dormant` (only when built with a
//!   TLS feature, `tls` or `tls-ring`; without one the table has the rows
//!   above): the same over TLS on TCP. `tls-hyper-util` is hyper-util's
//!   auto server, the one `hyper-util` runs, over tokio-rustls's
//!   `TlsAcceptor`, each accepted connection handshaken in its own task and
//!   then served, the usual hand-wiring of hyper-util's users; `tls-parked`
//!   and `tls-dormant` are `parked` and `dormant` over
//!   `dormant::tls::TlsListener`. All three get the same rustls
//!   `ServerConfig` (rustls's defaults; ALPN `h2` and `http/1.1`, which
//!   dormant's `TlsConfig` offers by itself), with a self-signed
//!   certificate for `localhost` that the server process makes with
//!   `rcgen` when it starts, before the warm-up and so outside the
//!   *before* readings, and writes as PEM into a fresh directory under the
//!   system's temporary directory (removed at the end). The client process
//!   trusts that file alone and speaks TLS 1.3 with ALPN `http/1.1` on
//!   rustls's blocking API (`ClientConnection` in a `StreamOwned` over
//!   std's `TcpStream`; the crypto provider is the feature's), without
//!   session resumption: every connection is a full handshake, then the
//!   same keep-alive `GET`. The TLS kinds' ratios are against
//!   `tls-hyper-util`. With `tls` (aws-lc-rs) the heap column misses the
//!   session's AEAD keys, in every TLS row: aws-lc allocates them in C
//!   (`malloc`, past the counting allocator; about 1.2 KB a connection for
//!   TLS 1.3's two AES-256-GCM contexts), so compare RSS there. ring's
//!   keys are Rust allocations (560 B each), which the heap column counts.
//!   rustls's server also keeps up to 256 resumption sessions (2 tickets a
//!   connection; the warm-up fills half): a fixed ~40 KB that shows at
//!   small N (about 190 B and 1.9 allocations a connection at N = 200),
//!   not at N = 10,000;
//! - `h2c-no-park-lean`: `h2c-no-park` with the HTTP/2 settings a user
//!   would lower to make an awake connection smaller, if any could: one
//!   stream at a time, the protocol's initial windows (65,535 B) instead of
//!   hyper's 1 MiB, a 4 KiB header list. It shows what those settings
//!   save an awake connection (issue #27's item 5);
//! - `h2c-hyper-util`, `h2c-no-park`, `h2c-parked`, `h2c-dormant`: the
//!   same servers as `hyper-util`, `no-park`, `parked` and `dormant` (each
//!   serves either protocol), with a client that speaks HTTP/2 with prior
//!   knowledge (h2c) over TCP: each connection sends the client preface and
//!   SETTINGS, makes one `GET` on stream 1, reads the whole response and
//!   idles, open. `h2c-no-park` (`park_after(None)`) keeps dormant's h2
//!   connections awake; `h2c-parked` and `h2c-dormant` let them sleep
//!   (task-less PARKED, then DORMANT). The client is hyper's http2 client
//!   (`hyper::client::conn::http2`) with its default settings, on a
//!   1-worker tokio runtime in the client process, one task per
//!   connection, which keeps answering what the server sends an idle
//!   connection (its SETTINGS, a PING) while the client waits; the
//!   request's URI is `http://localhost/` (`:authority` `localhost`). It
//!   checks the response (a 200 over HTTP/2, `Hello, World!`), and before
//!   it closes everything that none of its connections has ended: a
//!   connection the server closed fails the measurement. Their ratios
//!   are against `h2c-hyper-util`;
//! - `h2c-dw-hyper-util`, `h2c-dw-parked`, `h2c-dw-dormant`: the `h2c-`
//!   kinds with a client that keeps the protocol's default windows
//!   (hyper's http2 client with 65,535-byte connection and stream windows,
//!   no adaptive window), as Node's http2, Python's h2 and Netty do: after
//!   the 13-byte response its connection window is 65,522 bytes, below
//!   what a fresh connection believes, and it sends no WINDOW_UPDATE
//!   until half of it is used (dormant's window gate, `wire::gate`);
//! - `h2c-node-hyper-util`, `h2c-node-dormant`, `h2c-httpx-hyper-util`,
//!   `h2c-httpx-dormant`: the same with real clients of other languages
//!   that keep the default windows, as programs of their own that are the
//!   client process (they speak its protocol, `procs.rs`'s `client_main`):
//!   Node's http2 module (`benches/scripts/idle_h2_node.mjs`, needs
//!   `node`) and Python's httpx on h2 (`benches/scripts/idle_h2_httpx.py`,
//!   needs `python3` with `httpx[http2]`), one `GET /` on each connection,
//!   its response checked. Not in the default run (`IDLE_KINDS` names
//!   them): the machine may lack the runtimes;
//! - `tls-h2-hyper-util`, `tls-h2-no-park`, `tls-h2-parked`,
//!   `tls-h2-dormant` (with a TLS feature): the same over TLS:
//!   `tls-hyper-util`'s server, and `no-park`'s, `parked`'s and
//!   `dormant`'s over dormant's `TlsListener`, both offering ALPN `h2` and `http/1.1`; the client
//!   offers ALPN `h2` alone (TLS 1.3, the same trust, no resumption, on
//!   tokio-rustls), checks that the server chose it, then makes the same
//!   `GET` (`https://localhost/`). Their ratios are against
//!   `tls-h2-hyper-util`.
//!
//! Both child processes raise their soft `RLIMIT_NOFILE` to the hard limit
//! by being started through `sh -c 'ulimit -n "$(ulimit -Hn)"; exec …'`
//! (no `setrlimit` through `libc`: the benches keep `unsafe` to one call),
//! so N can go up to a little below the hard limit. Linux only (`/proc`).
//! The processes, the readings and the table are shared with
//! `upgrade_memory` (`benches/common/procs.rs`, `benches/common/memory.rs`),
//! and so is the choice of transport (a kind named `unix-…` runs over a Unix
//! socket, one named `tls-…` over TLS, `benches/common/tls.rs`); this file
//! has the kinds, their servers and the client's requests (HTTP/1.1, and
//! HTTP/2 for the `h2c-…` and `tls-h2-…` kinds).

use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dormant::Rung::{Active, Dormant, Parked};
#[cfg(feature = "tls-no-provider")]
use dormant::tls::{TlsConfig, TlsListener};
use http::{Request, StatusCode, Version};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::client::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
#[cfg(feature = "tls-no-provider")]
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio::runtime::Runtime;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

#[path = "../common/hello.rs"]
mod hello;
#[path = "../common/memory.rs"]
mod memory;
#[path = "../common/procs.rs"]
mod procs;

#[cfg(feature = "tls-no-provider")]
use hello::hello_hyper;
use hello::{complete_response, hello_dormant, serve_hyper_util};
use memory::wait_until;
use procs::{Bench, Conn, Connect, Endpoint, Listen, UnderTest, WARMUP};

static BENCH: Bench<Exchange> = Bench {
    prefix: "IDLE",
    title: "idle memory per connection",
    // A kind is a transport and protocol prefix (`unix-`, `tls-`, `h2c-`,
    // `tls-h2-`: `SERVED_AS`) and a server kind (`start_server`).
    kinds: &[
        "hyper-util",
        "parked",
        "dormant",
        "hooked",
        "no-park",
        "unix-parked",
        "unix-dormant",
        "h2c-hyper-util",
        "h2c-no-park",
        "h2c-no-park-lean",
        "h2c-parked",
        "h2c-dormant",
        "h2c-dw-hyper-util",
        "h2c-dw-parked",
        "h2c-dw-dormant",
        "h2c-node-hyper-util",
        "h2c-node-dormant",
        "h2c-httpx-hyper-util",
        "h2c-httpx-dormant",
        #[cfg(feature = "tls-no-provider")]
        "tls-hyper-util",
        #[cfg(feature = "tls-no-provider")]
        "tls-parked",
        #[cfg(feature = "tls-no-provider")]
        "tls-dormant",
        #[cfg(feature = "tls-no-provider")]
        "tls-h2-hyper-util",
        #[cfg(feature = "tls-no-provider")]
        "tls-h2-no-park",
        #[cfg(feature = "tls-no-provider")]
        "tls-h2-parked",
        #[cfg(feature = "tls-no-provider")]
        "tls-h2-dormant",
    ],
    kind_width: 17,
    // The `tls-…` kinds against `tls-hyper-util`, the `h2c-…` kinds against
    // `h2c-hyper-util`, the `tls-h2-…` kinds against `tls-h2-hyper-util`
    // (procs.rs: the baseline under the kind's prefix).
    ratios: &[
        ("parked", "PARKED"),
        ("dormant", "DORMANT"),
        ("hooked", "DORMANT, state hook"),
        ("unix-parked", "PARKED over Unix"),
        ("unix-dormant", "DORMANT over Unix"),
        ("h2c-no-park", "awake h2c"),
        ("h2c-no-park-lean", "awake h2c, lean settings"),
        ("h2c-parked", "h2c PARKED"),
        ("h2c-dormant", "h2c DORMANT"),
        ("h2c-dw-parked", "h2c PARKED, default window"),
        ("h2c-dw-dormant", "h2c DORMANT, default window"),
        ("h2c-node-dormant", "h2c DORMANT, Node's client"),
        ("h2c-httpx-dormant", "h2c DORMANT, httpx"),
        #[cfg(feature = "tls-no-provider")]
        ("tls-parked", "PARKED over TLS"),
        #[cfg(feature = "tls-no-provider")]
        ("tls-dormant", "DORMANT over TLS"),
        #[cfg(feature = "tls-no-provider")]
        ("tls-h2-no-park", "awake h2 over TLS"),
        #[cfg(feature = "tls-no-provider")]
        ("tls-h2-parked", "h2 PARKED over TLS"),
        #[cfg(feature = "tls-no-provider")]
        ("tls-h2-dormant", "h2 DORMANT over TLS"),
    ],
    connect: Exchange,
};

/// The prefixes of the kinds' names, each with whether its kinds speak
/// HTTP/2, longest first where one starts another; the rest of the name
/// is the server kind. procs.rs serves `unix-…` over a Unix socket and
/// `tls-…` over TLS, the rest over TCP.
const SERVED_AS: &[(&str, bool)] = &[
    ("tls-h2-", true),
    ("tls-", false),
    ("h2c-dw-", true),
    ("h2c-node-", true),
    ("h2c-httpx-", true),
    ("h2c-", true),
    ("unix-", false),
];

/// A kind's server kind (`start_server`) and whether its client speaks
/// HTTP/2.
fn served_as(kind: &str) -> (&str, bool) {
    SERVED_AS
        .iter()
        .find_map(|(prefix, h2)| Some((kind.strip_prefix(prefix)?, *h2)))
        .unwrap_or((kind, false))
}

fn main() {
    procs::main(&BENCH, || procs::serve(&BENCH, start_server));
}

// ---------------------------------------------------------------------------
// Server process
// ---------------------------------------------------------------------------

/// The server under test, as the measuring thread sees it.
enum Running {
    /// With the kind, which says the rung the connections settle on.
    Dormant(dormant::Server, String),
    Hyper(Arc<AtomicUsize>),
}

impl Running {
    fn accepted(&self) -> usize {
        match self {
            Running::Dormant(s, _) => s.stats().accepted as usize,
            Running::Hyper(accepted) => accepted.load(Relaxed),
        }
    }
}

impl UnderTest for Running {
    fn wait_warmed_up(&self) {
        wait_until(
            "warm-up connections accepted",
            Duration::from_secs(30),
            || self.accepted() >= WARMUP,
        );
    }

    fn wait_idle(&self, n: usize) {
        wait_until("all connections accepted", Duration::from_secs(120), || {
            self.accepted() >= WARMUP + n
        });
        match self {
            Running::Dormant(server, kind) => {
                wait_until("all connections idle", Duration::from_secs(60), || {
                    let s = server.stats();
                    match kind.as_str() {
                        "no-park" | "no-park-lean" => s.connections[Active] == n,
                        "parked" => s.connections[Parked] == n && s.connections[Active] == 0,
                        _ => {
                            s.connections[Dormant] == n
                                && s.connections[Parked] == 0
                                && s.connections[Active] == 0
                        }
                    }
                });
            }
            Running::Hyper(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// The listener of a kind: a Unix socket for the `unix-…` kinds, TLS
/// over TCP for the `tls-…` kinds.
enum Listening {
    Tcp(TcpListener),
    Unix(UnixListener),
    /// With the server configuration (self-signed, no ALPN protocols).
    #[cfg(feature = "tls-no-provider")]
    Tls(TcpListener, Arc<rustls::ServerConfig>),
}

impl Listen for Listening {
    fn listen(unix: Option<&Path>) -> (Self, Endpoint) {
        match unix {
            Some(path) => {
                let listener = UnixListener::bind(path).expect("bind the Unix socket");
                (Listening::Unix(listener), Endpoint::Unix(path.to_owned()))
            }
            None => {
                let (listener, to) = TcpListener::listen(None);
                (Listening::Tcp(listener), to)
            }
        }
    }

    #[cfg(feature = "tls-no-provider")]
    fn tls(listener: TcpListener, config: Arc<rustls::ServerConfig>) -> Self {
        Listening::Tls(listener, config)
    }
}

/// Starts the server of `kind` (see the module docs) on `listener`, which
/// is a Unix socket for the `unix-…` kinds and TLS for the `tls-…` kinds.
fn start_server(
    kind: &str,
    listener: Listening,
    stop: oneshot::Receiver<()>,
) -> (Running, JoinHandle<()>) {
    // The server of `unix-parked` and `tls-parked` is `parked`'s, on
    // another transport; the server of `h2c-no-park` is `no-park`'s, which
    // the client speaks HTTP/2 to (both servers serve either protocol).
    let (server_kind, _) = served_as(kind);
    match server_kind {
        "parked" | "dormant" | "hooked" | "no-park" | "no-park-lean" => {
            let mut builder = dormant::Server::builder();
            match server_kind {
                "parked" => builder.dormant_after(None),
                "no-park" => builder.park_after(None),
                "no-park-lean" => builder
                    .park_after(None)
                    .http2_max_concurrent_streams(1)
                    .http2_initial_stream_window_size(65_535)
                    .http2_initial_connection_window_size(65_535)
                    .http2_max_header_list_size(4096),
                _ => &mut builder, // defaults: dormant after 1 s
            };
            let server = builder.build().expect("build");
            let serve = server.clone();
            let hooked = server_kind == "hooked";
            let task = tokio::spawn(async move {
                let stop = async {
                    let _ = stop.await;
                };
                match listener {
                    Listening::Tcp(listener) if hooked => {
                        let states = Arc::new(AtomicUsize::new(0));
                        serve
                            .serve(listener, service_fn(hello_dormant))
                            .on_conn_state(move |_peer, _state| {
                                states.fetch_add(1, Relaxed);
                            })
                            .with_graceful_shutdown(stop)
                            .await
                    }
                    Listening::Tcp(listener) => {
                        serve
                            .serve(listener, service_fn(hello_dormant))
                            .with_graceful_shutdown(stop)
                            .await
                    }
                    Listening::Unix(listener) => {
                        serve
                            .serve(listener, service_fn(hello_dormant))
                            .with_graceful_shutdown(stop)
                            .await
                    }
                    #[cfg(feature = "tls-no-provider")]
                    Listening::Tls(listener, config) => {
                        let listener = TlsListener::new(listener, TlsConfig::new(config));
                        serve
                            .serve(listener, service_fn(hello_dormant))
                            .with_graceful_shutdown(stop)
                            .await
                    }
                }
                .expect("serve");
            });
            (Running::Dormant(server, server_kind.to_owned()), task)
        }
        "hyper-util" => {
            let accepted = Arc::new(AtomicUsize::new(0));
            let stop = async {
                let _ = stop.await;
            };
            let task = match listener {
                Listening::Tcp(listener) => {
                    tokio::spawn(serve_hyper_util(listener, stop, accepted.clone()))
                }
                #[cfg(feature = "tls-no-provider")]
                Listening::Tls(listener, config) => tokio::spawn(serve_hyper_util_tls(
                    listener,
                    config,
                    stop,
                    accepted.clone(),
                )),
                Listening::Unix(_) => panic!("hyper-util is served over TCP"),
            };
            (Running::Hyper(accepted), task)
        }
        other => panic!("unknown kind {other}"),
    }
}

/// `tls-hyper-util`: `serve_hyper_util` (benches/common/hello.rs) over
/// tokio-rustls, wired by hand as hyper-util's users do: a `TlsAcceptor`,
/// and each accepted connection handshaken in its own task, then served
/// by the same auto builder. The configuration offers `h2` and
/// `http/1.1`, as dormant's `TlsConfig` does when given none.
#[cfg(feature = "tls-no-provider")]
async fn serve_hyper_util_tls(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    stop: impl std::future::Future<Output = ()>,
    accepted: Arc<AtomicUsize>,
) {
    let mut config = Arc::unwrap_or_clone(config);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
    let mut stop = std::pin::pin!(stop);
    loop {
        let accept = tokio::select! {
            () = &mut stop => return,
            accept = listener.accept() => accept,
        };
        let Ok((stream, _)) = accept else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        accepted.fetch_add(1, Relaxed);
        let acceptor = acceptor.clone();
        let builder = builder.clone();
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(stream).await else {
                return;
            };
            let _ = builder
                .serve_connection(TokioIo::new(stream), service_fn(hello_hyper))
                .await;
        });
    }
}

// ---------------------------------------------------------------------------
// Client process
// ---------------------------------------------------------------------------

/// The client's exchange for each kind: one keep-alive `GET` over
/// HTTP/1.1 ([`request`]), or over HTTP/2 for the `h2c-…` and `tls-h2-…`
/// kinds ([`h2_get`]).
#[derive(Debug)]
struct Exchange;

/// What the client process holds of an open connection, which keeps it
/// open.
#[derive(Debug)]
enum Open {
    Http1(#[expect(dead_code, reason = "held to keep the connection open")] Conn),
    /// hyper's handle on the connection; its task runs on the client's
    /// runtime ([`client_runtime`]) and ends when this is dropped.
    H2(http2::SendRequest<Empty<Bytes>>),
}

impl Connect for Exchange {
    type Open = Open;

    fn connect(&self, kind: &str, to: &Endpoint) -> Open {
        if served_as(kind).1 {
            Open::H2(h2_get(to, kind.starts_with("h2c-dw-")))
        } else {
            let mut conn = Conn::open(to);
            request(&mut conn);
            Open::Http1(conn)
        }
    }

    /// Node's and Python's clients for their kinds.
    fn external(&self, kind: &str) -> Option<std::process::Command> {
        let (program, script) = match kind {
            k if k.starts_with("h2c-node-") => ("node", "idle_h2_node.mjs"),
            k if k.starts_with("h2c-httpx-") => ("python3", "idle_h2_httpx.py"),
            _ => return None,
        };
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches/scripts");
        let mut command = std::process::Command::new(program);
        command.arg(dir.join(script));
        Some(command)
    }

    /// An h2 connection the server closed (or that failed) has ended its
    /// task, which closes its handle.
    fn closed(&self, open: &Open) -> bool {
        match open {
            Open::Http1(_) => false,
            Open::H2(send) => send.is_closed(),
        }
    }
}

/// Sends one keep-alive `GET` and reads the whole response.
fn request(conn: &mut Conn) {
    conn.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("write");
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    loop {
        let n = conn.read(&mut chunk).expect("read");
        assert!(n > 0, "server closed the connection");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(len) = complete_response(&buf) {
            assert_eq!(len, buf.len(), "unexpected extra bytes");
            assert!(buf.starts_with(b"HTTP/1.1 200"), "not a 200");
            return;
        }
    }
}

/// The client process's runtime for its HTTP/2 connections, made on first
/// use: one worker thread, which runs every connection's task (one each)
/// also while the client waits for its next command, so that the client
/// answers what the server sends an idle connection (SETTINGS, PING) as a
/// real client would.
fn client_runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("client runtime")
    })
}

/// Opens an HTTP/2 connection to `to` (h2c with prior knowledge over TCP,
/// or h2 over TLS with ALPN `h2` alone), with hyper's http2 client and its
/// default settings (with `default_window`, the protocol's default
/// windows instead), and makes one `GET` on it: the client preface and
/// SETTINGS, the request on stream 1, the whole response (a 200, `Hello,
/// World!`). Returns the connection's handle, still open. Fails after 10 s,
/// so that a server that does not answer fails the bench.
fn h2_get(to: &Endpoint, default_window: bool) -> http2::SendRequest<Empty<Bytes>> {
    client_runtime().block_on(async {
        tokio::time::timeout(Duration::from_secs(10), async {
            let (mut send, uri) = match to {
                Endpoint::Tcp(addr) => (
                    h2_handshake(tcp(addr).await, default_window).await,
                    "http://localhost/",
                ),
                #[cfg(feature = "tls-no-provider")]
                Endpoint::Tls(addr, trust) => {
                    let connector =
                        tokio_rustls::TlsConnector::from(trust.client_config(true).clone());
                    let name =
                        rustls::pki_types::ServerName::try_from("localhost").expect("server name");
                    let tls = connector
                        .connect(name, tcp(addr).await)
                        .await
                        .expect("TLS handshake");
                    assert_eq!(
                        tls.get_ref().1.alpn_protocol(),
                        Some(&b"h2"[..]),
                        "the server did not choose h2"
                    );
                    (
                        h2_handshake(tls, default_window).await,
                        "https://localhost/",
                    )
                }
                Endpoint::Unix(_) => panic!("the h2 kinds run over TCP"),
            };
            let req = Request::get(uri)
                .body(Empty::<Bytes>::new())
                .expect("request");
            let res = send.send_request(req).await.expect("h2 GET");
            assert_eq!(res.status(), StatusCode::OK, "not a 200");
            assert_eq!(res.version(), Version::HTTP_2, "not HTTP/2");
            let body = res.into_body().collect().await.expect("body").to_bytes();
            assert_eq!(&body[..], b"Hello, World!", "unexpected body");
            send
        })
        .await
        .expect("an h2 GET took more than 10 s")
    })
}

async fn tcp(addr: &std::net::SocketAddr) -> TcpStream {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    tcp
}

/// hyper's http2 client handshake on `io` (sends the preface), with the
/// protocol's default 65,535-byte windows if `default_window`; the
/// connection's task goes to the client's runtime.
async fn h2_handshake<T>(io: T, default_window: bool) -> http2::SendRequest<Empty<Bytes>>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = http2::Builder::new(TokioExecutor::new());
    if default_window {
        builder
            .adaptive_window(false)
            .initial_connection_window_size(65_535)
            .initial_stream_window_size(65_535);
    }
    let (send, conn) = builder
        .handshake(TokioIo::new(io))
        .await
        .expect("h2 handshake");
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            eprintln!("h2 client connection: {e}");
        }
    });
    send
}
