//! Memory per upgraded, idle echo connection: dormant's upgraded streams
//! asleep in the parking lot, dormant's with a task per stream and the
//! readiness reader, and a hyper-util server with `hyper::upgrade::on` and
//! a 4 KiB echo buffer. Same N, same run.
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-bench cargo bench --bench upgrade_memory
//! UPGRADE_N=5000 UPGRADE_REPEAT=5 cargo bench --bench upgrade_memory
//! UPGRADE_HYPER_BUF=64 cargo bench --bench upgrade_memory   # hyper-util's echo buffer
//! cargo bench --bench upgrade_memory -- 2000          # N as an argument
//! ```
//!
//! Under `cargo test --benches` (no `--bench` argument) it only checks that
//! it works: N = 200, one round.
//!
//! # Method
//!
//! As `benches/experiments/idle_memory.rs`: every measurement runs in a fresh *server
//! process* (this binary re-executed with `UPGRADE_ROLE=server`) on a
//! 2-worker runtime; it warms up (64 connections that upgrade, echo once and
//! close), takes the *before* figures, then has a *client process*
//! (`UPGRADE_ROLE=client`; one process may hold at most `ulimit -Hn`
//! descriptors) open N connections one after another. Each sends
//! `GET / HTTP/1.1` with `Connection: Upgrade` and `Upgrade: echo`, reads
//! the `101`, sends `ping`, reads `ping` back, and stays open. Once every
//! stream is idle (the lot row: all N asleep in the lot; the others: all N
//! echoed) and the live heap has stopped moving, it takes the *after*
//! figures and reports `(after - before) / N`: live heap bytes and
//! allocations from a counting global allocator (`stats_alloc`), `VmRSS`
//! from `/proc/self/status`, and `VmRSS` read again right after each RSS
//! reading once `malloc_trim(0)` has given back what glibc's arenas hold
//! free (**RSS trimmed**, `n/a` off glibc): glibc keeps its arenas'
//! high-water mark, so memory a stream used while it was served and then
//! freed stays in RSS, a fixed amount the RSS column spreads over N; the
//! trimmed column counts the memory in use, and the RSS column is read as
//! before, so earlier figures stay comparable. The kinds alternate,
//! `UPGRADE_REPEAT` times (default 3); the table shows medians.
//!
//! - `dormant-lot`: `examples/echo.rs`'s handler: after each message the
//!   stream sleeps in the parking lot (`upgrade::Lot::sleep`) with a
//!   closure holding the lot handle: no task, no tokio registration;
//! - `dormant-task`: one task per stream looping on
//!   `Upgraded::read_pooled` (readiness, then a pool buffer that goes back
//!   before the next wait);
//! - `hyper-util`: hyper-util's auto server with upgrades, a task per
//!   stream holding `hyper::upgrade::Upgraded` and a 4 KiB `Vec` echo
//!   buffer, the usual shape (`UPGRADE_HYPER_BUF` sets another size).
//!
//! Both child processes raise their soft `RLIMIT_NOFILE` to the hard limit
//! through `sh -c 'ulimit -n …'`, as `idle_memory` does. Linux only. The
//! processes, the readings and the table are shared with `idle_memory`
//! (`benches/common/procs.rs`, `benches/common/memory.rs`); this file has
//! the kinds, their servers and the client's exchange.

use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dormant::upgrade::{self, Lot, Upgraded, Woken};
use http::header::{CONNECTION, UPGRADE};
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::Empty;
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

#[path = "../common/memory.rs"]
mod memory;
#[path = "../common/procs.rs"]
mod procs;
#[path = "../common/switching.rs"]
mod switching;

use memory::{env_usize, wait_until};
use procs::{Bench, UnderTest, WARMUP};

static BENCH: Bench = Bench {
    prefix: "UPGRADE",
    title: "memory per upgraded idle echo connection",
    kinds: &["hyper-util", "dormant-task", "dormant-lot"],
    kind_width: 13,
    ratios: &[
        ("dormant-task", "dormant-task"),
        ("dormant-lot", "dormant-lot"),
    ],
    connect: upgrade_and_echo,
};

/// hyper-util's echo buffer, the usual size (`UPGRADE_HYPER_BUF`).
const HYPER_ECHO_BUF: usize = 4096;

static HYPER_BUF: OnceLock<usize> = OnceLock::new();

fn main() {
    procs::main(&BENCH, || procs::serve(&BENCH, start_server));
}

// ---------------------------------------------------------------------------
// Server process
// ---------------------------------------------------------------------------

/// Streams that echoed their first message.
static ECHOED: AtomicUsize = AtomicUsize::new(0);

/// The lot of the `dormant-lot` server, once a stream was handed off.
static LOT: OnceLock<Lot> = OnceLock::new();

fn switching() -> Response<Empty<Bytes>> {
    let mut res = Response::new(Empty::new());
    *res.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    res.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("upgrade"));
    res.headers_mut()
        .insert(UPGRADE, HeaderValue::from_static("echo"));
    res
}

/// dormant, `sleep`: the stream sleeps in the lot between messages.
async fn echo_lot(mut req: Request<dormant::Body>) -> Result<Response<Empty<Bytes>>, Infallible> {
    let upgrade = upgrade::on(&mut req).expect("an upgrade request");
    tokio::spawn(async move {
        let parts = upgrade.await.expect("hand-off");
        let lot = parts.lot.clone();
        let _ = LOT.set(lot.clone());
        sleep(lot, parts.into());
    });
    Ok(switching())
}

fn sleep(lot: Lot, stream: Upgraded) {
    lot.clone().sleep(stream, move |woken| async move {
        let Woken::Readable(mut stream) = woken else {
            return;
        };
        if let Ok(Some(bytes)) = stream.read_pooled().await {
            if stream.write_all(&bytes).await.is_ok() {
                drop(bytes);
                ECHOED.fetch_add(1, Relaxed);
                sleep(lot, stream);
            }
        }
    });
}

/// dormant, task per stream: `read_pooled` between messages.
async fn echo_task(mut req: Request<dormant::Body>) -> Result<Response<Empty<Bytes>>, Infallible> {
    let upgrade = upgrade::on(&mut req).expect("an upgrade request");
    tokio::spawn(async move {
        let mut stream = Upgraded::from(upgrade.await.expect("hand-off"));
        while let Ok(Some(bytes)) = stream.read_pooled().await {
            if stream.write_all(&bytes).await.is_err() {
                return;
            }
            ECHOED.fetch_add(1, Relaxed);
        }
    });
    Ok(switching())
}

/// hyper-util: `hyper::upgrade::on`, a task per stream with a 4 KiB buffer.
async fn echo_hyper(mut req: Request<Incoming>) -> Result<Response<Empty<Bytes>>, Infallible> {
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let mut stream = TokioIo::new(upgrade.await.expect("hand-off"));
        let mut buf = vec![0u8; *HYPER_BUF.get().expect("set at start")];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if stream.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                    ECHOED.fetch_add(1, Relaxed);
                }
            }
        }
    });
    Ok(switching())
}

/// The server under test, as the measuring thread sees it: every kind
/// counts its echoes in `ECHOED`.
struct Echo {
    /// `dormant-lot`: the streams sleep in the lot.
    lot: bool,
}

impl UnderTest for Echo {
    fn wait_warmed_up(&self) {
        wait_until("warm-up echoed", Duration::from_secs(30), || {
            ECHOED.load(Relaxed) >= WARMUP
        });
        if self.lot {
            wait_until("warm-up streams gone", Duration::from_secs(30), || {
                LOT.get().is_some_and(|lot| lot.sleeping() == 0)
            });
        }
    }

    fn wait_idle(&self, n: usize) {
        wait_until("all echoed", Duration::from_secs(120), || {
            ECHOED.load(Relaxed) >= WARMUP + n
        });
        if self.lot {
            wait_until("all asleep", Duration::from_secs(60), || {
                LOT.get().is_some_and(|lot| lot.sleeping() == n)
            });
        }
    }
}

/// Starts the server of `kind` (see the module docs).
fn start_server(
    kind: &str,
    listener: TcpListener,
    stop: oneshot::Receiver<()>,
) -> (Echo, JoinHandle<()>) {
    HYPER_BUF
        .set(env_usize("UPGRADE_HYPER_BUF", HYPER_ECHO_BUF))
        .expect("set once");
    let lot = kind == "dormant-lot";
    let task = match kind {
        "dormant-lot" | "dormant-task" => {
            let server = dormant::Server::builder().build().expect("build");
            tokio::spawn(async move {
                let shutdown = async {
                    let _ = stop.await;
                };
                if lot {
                    server
                        .serve(listener, service_fn(echo_lot))
                        .with_graceful_shutdown(shutdown)
                        .await
                } else {
                    server
                        .serve(listener, service_fn(echo_task))
                        .with_graceful_shutdown(shutdown)
                        .await
                }
                .expect("serve");
            })
        }
        "hyper-util" => tokio::spawn(async move {
            let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
            let mut stop = stop;
            loop {
                let (stream, _) = tokio::select! {
                    _ = &mut stop => return,
                    accepted = listener.accept() => match accepted {
                        Ok(a) => a,
                        Err(_) => continue,
                    },
                };
                let _ = stream.set_nodelay(true);
                let builder = builder.clone();
                tokio::spawn(async move {
                    let _ = builder
                        .serve_connection_with_upgrades(
                            TokioIo::new(stream),
                            service_fn(echo_hyper),
                        )
                        .await;
                });
            }
        }),
        other => panic!("unknown kind {other}"),
    };
    (Echo { lot }, task)
}

// ---------------------------------------------------------------------------
// Client process
// ---------------------------------------------------------------------------

/// Connects, upgrades to `echo`, sends `ping` and reads it back.
fn upgrade_and_echo(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
        .expect("write");
    switching::read_switching_head(&mut s);
    s.write_all(b"ping").expect("write");
    let mut echo = [0u8; 4];
    s.read_exact(&mut echo).expect("echo");
    assert_eq!(&echo, b"ping");
    s
}
