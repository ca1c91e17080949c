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
//! As `benches/idle_memory.rs`: every measurement runs in a fresh *server
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
//! allocations from a counting global allocator (`stats_alloc`), and
//! `VmRSS` from `/proc/self/status`. The kinds alternate, `UPGRADE_REPEAT`
//! times (default 3); the table shows medians.
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
//! through `sh -c 'ulimit -n …'`, as `idle_memory` does. Linux only.

use std::convert::Infallible;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

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

#[path = "common/memory.rs"]
mod memory;

use memory::{env_usize, heap, is_bench, median, rss, wait_heap_stable, wait_until};

const DEFAULT_N: usize = 10_000;
const DEFAULT_REPEAT: usize = 3;
const SMOKE_N: usize = 200;
const WARMUP: usize = 64;

/// The server kinds, in the order they run within one repetition.
const KINDS: [&str; 3] = ["hyper-util", "dormant-task", "dormant-lot"];

/// hyper-util's echo buffer, the usual size (`UPGRADE_HYPER_BUF`).
const HYPER_ECHO_BUF: usize = 4096;

static HYPER_BUF: OnceLock<usize> = OnceLock::new();

fn main() {
    match std::env::var("UPGRADE_ROLE").as_deref() {
        Ok("server") => server_main(),
        Ok("client") => client_main(),
        _ => orchestrate(),
    }
}

/// N: the first argument that is a number, or `UPGRADE_N`, or the default
/// (`SMOKE_N` under `cargo test`).
fn conn_count() -> usize {
    let default = if is_bench() { DEFAULT_N } else { SMOKE_N };
    std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or_else(|| env_usize("UPGRADE_N", default))
}

/// This binary again, with its fd soft limit raised to the hard limit.
fn reexec(role: &str, kind: &str) -> Command {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(r#"ulimit -n "$(ulimit -Hn)" && exec "$0""#)
        .arg(exe)
        .env("UPGRADE_ROLE", role)
        .env("UPGRADE_KIND", kind);
    cmd
}

// ---------------------------------------------------------------------------
// Orchestrator: one fresh server process per measurement
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
struct Sample {
    heap: f64,
    allocs: f64,
    rss: f64,
    secs: f64,
}

fn orchestrate() {
    let n = conn_count();
    let repeat = env_usize(
        "UPGRADE_REPEAT",
        if is_bench() { DEFAULT_REPEAT } else { 1 },
    )
    .max(1);
    println!("memory per upgraded idle echo connection, N = {n}, {repeat} repetition(s), medians");
    println!("(each measurement in a fresh server process; client in its own process)");
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); KINDS.len()];
    for round in 0..repeat {
        for (k, kind) in KINDS.iter().enumerate() {
            let out = reexec("server", kind)
                .env("UPGRADE_N", n.to_string())
                .stdout(Stdio::piped())
                .output()
                .expect("spawning the server process");
            assert!(
                out.status.success(),
                "{kind} server process failed: {}",
                out.status
            );
            let stdout = String::from_utf8_lossy(&out.stdout);
            let line = stdout
                .lines()
                .find_map(|l| l.strip_prefix("RESULT "))
                .unwrap_or_else(|| panic!("{kind}: no RESULT line in {stdout:?}"));
            let v: Vec<f64> = line
                .split_whitespace()
                .map(|x| x.parse().expect("RESULT field"))
                .collect();
            let s = Sample {
                heap: v[0],
                allocs: v[1],
                rss: v[2],
                secs: v[3],
            };
            println!(
                "  round {round} {kind:<13} heap {:>7.0} B/conn  allocs {:>5.2}/conn  RSS {:>7.0} B/conn  ({:.1} s)",
                s.heap, s.allocs, s.rss, s.secs
            );
            samples[k].push(s);
        }
    }

    let med = |k: usize, f: fn(&Sample) -> f64| median(samples[k].iter().map(f).collect());
    println!();
    println!(
        "{:<13} {:>6}  {:>12}  {:>12}  {:>12}",
        "kind", "N", "heap B/conn", "allocs/conn", "RSS B/conn"
    );
    for (k, kind) in KINDS.iter().enumerate() {
        println!(
            "{:<13} {:>6}  {:>12.0}  {:>12.2}  {:>12.0}",
            kind,
            n,
            med(k, |s| s.heap),
            med(k, |s| s.allocs),
            med(k, |s| s.rss)
        );
    }
    println!();
    for (k, kind) in [(1, "dormant-task"), (2, "dormant-lot")] {
        let ratio = |f: fn(&Sample) -> f64| med(0, f) / med(k, f);
        println!(
            "hyper-util / {kind}: heap {:.1}x, RSS {:.1}x",
            ratio(|s| s.heap),
            ratio(|s| s.rss)
        );
    }
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

fn server_main() {
    let n = env_usize("UPGRADE_N", DEFAULT_N);
    let kind = std::env::var("UPGRADE_KIND").expect("UPGRADE_KIND");
    HYPER_BUF
        .set(env_usize("UPGRADE_HYPER_BUF", HYPER_ECHO_BUF))
        .expect("set once");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    std_listener.set_nonblocking(true).expect("nonblocking");
    let addr = std_listener.local_addr().expect("local_addr");
    let (stop_tx, stop_rx) = oneshot::channel::<()>();

    let task = match kind.as_str() {
        "dormant-lot" | "dormant-task" => {
            let server = dormant::Server::builder().build().expect("build");
            let lot = kind == "dormant-lot";
            rt.spawn(async move {
                let listener = TcpListener::from_std(std_listener).expect("listener");
                let shutdown = async {
                    let _ = stop_rx.await;
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
        "hyper-util" => rt.spawn(async move {
            let listener = TcpListener::from_std(std_listener).expect("listener");
            let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
            let mut stop_rx = stop_rx;
            loop {
                let (stream, _) = tokio::select! {
                    _ = &mut stop_rx => return,
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

    let mut client = Client::spawn();

    // Warm-up: one-time allocations (runtime, pools, the lot's slab,
    // thread caches) must not count as per-connection cost.
    client.command(&format!("cycle {WARMUP} {addr}"));
    wait_until("warm-up echoed", Duration::from_secs(30), || {
        ECHOED.load(Relaxed) >= WARMUP
    });
    if kind == "dormant-lot" {
        wait_until("warm-up streams gone", Duration::from_secs(30), || {
            LOT.get().is_some_and(|lot| lot.sleeping() == 0)
        });
    }
    std::thread::sleep(Duration::from_millis(200));
    wait_heap_stable();
    let (heap0, allocs0) = heap();
    let rss0 = rss();

    let start = Instant::now();
    client.command(&format!("open {n} {addr}"));
    wait_until("all echoed", Duration::from_secs(120), || {
        ECHOED.load(Relaxed) >= WARMUP + n
    });
    if kind == "dormant-lot" {
        wait_until("all asleep", Duration::from_secs(60), || {
            LOT.get().is_some_and(|lot| lot.sleeping() == n)
        });
    }
    wait_heap_stable();
    let secs = start.elapsed().as_secs_f64();
    let (heap1, allocs1) = heap();
    let rss1 = rss();

    let per = |a: i64, b: i64| (b - a) as f64 / n as f64;
    println!(
        "RESULT {:.1} {:.3} {:.1} {:.2}",
        per(heap0, heap1),
        per(allocs0, allocs1),
        per(rss0, rss1),
        secs
    );

    client.close();
    let _ = stop_tx.send(());
    rt.block_on(async {
        let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    });
    rt.shutdown_timeout(Duration::from_secs(1));
}

/// The server process's handle on its client process.
struct Client {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Client {
    fn spawn() -> Self {
        let mut child = reexec("client", "")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawning the client process");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Client {
            child,
            stdin,
            stdout,
        }
    }

    /// Sends one command line and waits for `ready`.
    fn command(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}").expect("client stdin");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("client stdout");
        assert_eq!(line.trim(), "ready", "client answered {line:?} to {cmd:?}");
    }

    /// Closes every connection and waits for the client to exit.
    fn close(mut self) {
        writeln!(self.stdin, "close").expect("client stdin");
        drop(self.stdin);
        let status = self.child.wait().expect("client wait");
        assert!(status.success(), "client failed: {status}");
    }
}

// ---------------------------------------------------------------------------
// Client process
// ---------------------------------------------------------------------------

/// Commands on stdin, one per line; answers `ready` to each:
///
/// - `cycle K ADDR`: K connections, one after another, each upgrades,
///   echoes once and closes;
/// - `open N ADDR`: N connections, one after another, each upgrades,
///   echoes once and stays open;
/// - `close` (or EOF): close everything and exit.
fn client_main() {
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    let mut open: Vec<TcpStream> = Vec::new();
    for line in stdin.lock().lines() {
        let line = line.expect("stdin");
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["cycle", k, addr] | ["open", k, addr] => {
                let k: usize = k.parse().expect("count");
                let addr: SocketAddr = addr.parse().expect("addr");
                for _ in 0..k {
                    let s = upgrade_and_echo(addr);
                    if words[0] == "open" {
                        open.push(s);
                    }
                }
            }
            ["close"] => break,
            _ => panic!("unknown command {line:?}"),
        }
        writeln!(stdout, "ready").expect("stdout");
        stdout.flush().expect("stdout");
    }
    drop(open);
}

/// Connects, upgrades to `echo`, sends `ping` and reads it back.
fn upgrade_and_echo(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
        .expect("write");
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    let head_end = loop {
        let n = s.read(&mut chunk).expect("read");
        assert!(n > 0, "server closed the connection");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
    };
    assert!(buf.starts_with(b"HTTP/1.1 101"), "not a 101");
    assert_eq!(head_end, buf.len(), "unexpected bytes after the 101");
    s.write_all(b"ping").expect("write");
    let mut echo = [0u8; 4];
    s.read_exact(&mut echo).expect("echo");
    assert_eq!(&echo, b"ping");
    s
}
