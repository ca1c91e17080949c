//! Idle memory per keep-alive connection: `dormant` against a plain
//! hyper-util server, same handler, same N, same run.
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-bench cargo bench --bench idle_memory
//! IDLE_N=5000 IDLE_REPEAT=5 cargo bench --bench idle_memory
//! cargo bench --bench idle_memory -- 2000          # N as an argument
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
//!   (`stats_alloc`, which wraps `System` with atomic counters; the crate
//!   forbids `unsafe`, so the bench cannot implement `GlobalAlloc` itself);
//! - **allocs**: live allocations, same source;
//! - **RSS**: `VmRSS` from `/proc/self/status`.
//!
//! The kinds alternate, `IDLE_REPEAT` times (default 3), and the table shows
//! medians:
//!
//! - `hyper-util`: hyper-util's auto server, the baseline;
//! - `parked`: dormant with `dormant_after(None)`, every connection PARKED
//!   (a task and a tokio registration, no hyper state, no buffer);
//! - `dormant`: dormant's defaults, measured once every connection has gone
//!   DORMANT (`dormant_after`, 1 s): fds in the parking lot, no task;
//! - `no-park`: dormant with `park_after(None)`: what a connection costs
//!   while it keeps hyper, which shows what parking saves.
//!
//! Both child processes raise their soft `RLIMIT_NOFILE` to the hard limit
//! by being started through `sh -c 'ulimit -n "$(ulimit -Hn)"; exec …'`
//! (`unsafe` is forbidden, so no `setrlimit` through `libc`), so N can go up
//! to a little below the hard limit. Linux only (`/proc`).

use std::convert::Infallible;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use http::{Request, Response};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
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
const KINDS: [&str; 4] = ["hyper-util", "parked", "dormant", "no-park"];

fn main() {
    match std::env::var("IDLE_ROLE").as_deref() {
        Ok("server") => server_main(),
        Ok("client") => client_main(),
        _ => orchestrate(),
    }
}

/// N: the first argument that is a number, or `IDLE_N`, or the default
/// (`SMOKE_N` under `cargo test`).
fn conn_count() -> usize {
    let default = if is_bench() { DEFAULT_N } else { SMOKE_N };
    std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or_else(|| env_usize("IDLE_N", default))
}

/// This binary again, with its fd soft limit raised to the hard limit.
fn reexec(role: &str, kind: &str) -> Command {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(r#"ulimit -n "$(ulimit -Hn)" && exec "$0""#)
        .arg(exe)
        .env("IDLE_ROLE", role)
        .env("IDLE_KIND", kind);
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
    let repeat = env_usize("IDLE_REPEAT", if is_bench() { DEFAULT_REPEAT } else { 1 }).max(1);
    println!("idle memory per connection, N = {n}, {repeat} repetition(s), medians");
    println!("(each measurement in a fresh server process; client in its own process)");
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); KINDS.len()];
    for round in 0..repeat {
        for (k, kind) in KINDS.iter().enumerate() {
            let out = reexec("server", kind)
                .env("IDLE_N", n.to_string())
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
                "  round {round} {kind:<16} heap {:>8.0} B/conn  allocs {:>5.2}/conn  RSS {:>8.0} B/conn  ({:.1} s)",
                s.heap, s.allocs, s.rss, s.secs
            );
            samples[k].push(s);
        }
    }

    let med = |k: usize, f: fn(&Sample) -> f64| median(samples[k].iter().map(f).collect());
    println!();
    println!(
        "{:<16} {:>6}  {:>12}  {:>12}  {:>12}",
        "kind", "N", "heap B/conn", "allocs/conn", "RSS B/conn"
    );
    for (k, kind) in KINDS.iter().enumerate() {
        println!(
            "{:<16} {:>6}  {:>12.0}  {:>12.2}  {:>12.0}",
            kind,
            n,
            med(k, |s| s.heap),
            med(k, |s| s.allocs),
            med(k, |s| s.rss)
        );
    }
    // Ratios of medians, hyper-util over each dormant rung.
    println!();
    for (k, rung) in [(1, "PARKED"), (2, "DORMANT")] {
        let ratio = |f: fn(&Sample) -> f64| med(0, f) / med(k, f);
        println!(
            "hyper-util / {rung}: heap {:.1}x, RSS {:.1}x",
            ratio(|s| s.heap),
            ratio(|s| s.rss)
        );
    }
}

// ---------------------------------------------------------------------------
// Server process
// ---------------------------------------------------------------------------

async fn hello_dormant(_req: Request<dormant::Body>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(
        b"Hello, World!",
    ))))
}

async fn hello_hyper(_req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(
        b"Hello, World!",
    ))))
}

/// The server under test, as the measuring thread sees it.
enum Running {
    Dormant(dormant::Server),
    Hyper(Arc<AtomicUsize>),
}

impl Running {
    fn accepted(&self) -> usize {
        match self {
            Running::Dormant(s) => s.stats().accepted as usize,
            Running::Hyper(accepted) => accepted.load(Relaxed),
        }
    }
}

fn server_main() {
    let n = env_usize("IDLE_N", DEFAULT_N);
    let kind = std::env::var("IDLE_KIND").expect("IDLE_KIND");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    std_listener.set_nonblocking(true).expect("nonblocking");
    let addr = std_listener.local_addr().expect("local_addr");
    let (stop_tx, stop_rx) = oneshot::channel::<()>();

    let (running, task) = match kind.as_str() {
        "parked" | "dormant" | "no-park" => {
            let mut builder = dormant::Server::builder();
            match kind.as_str() {
                "parked" => builder.dormant_after(None),
                "no-park" => builder.park_after(None),
                _ => &mut builder, // defaults: dormant after 1 s
            };
            let server = builder.build().expect("build");
            let serve = server.clone();
            let task = rt.spawn(async move {
                let listener = TcpListener::from_std(std_listener).expect("listener");
                serve
                    .serve(listener, service_fn(hello_dormant))
                    .with_graceful_shutdown(async {
                        let _ = stop_rx.await;
                    })
                    .await
                    .expect("serve");
            });
            (Running::Dormant(server), task)
        }
        "hyper-util" => {
            let accepted = Arc::new(AtomicUsize::new(0));
            let count = accepted.clone();
            let task = rt.spawn(async move {
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
                    count.fetch_add(1, Relaxed);
                    let builder = builder.clone();
                    tokio::spawn(async move {
                        let _ = builder
                            .serve_connection(TokioIo::new(stream), service_fn(hello_hyper))
                            .await;
                    });
                }
            });
            (Running::Hyper(accepted), task)
        }
        other => panic!("unknown kind {other}"),
    };

    let mut client = Client::spawn();

    // Warm-up: one-time allocations (runtime, pools, thread caches) must not
    // count as per-connection cost.
    client.command(&format!("cycle {WARMUP} {addr}"));
    wait_until(
        "warm-up connections accepted",
        Duration::from_secs(30),
        || running.accepted() >= WARMUP,
    );
    std::thread::sleep(Duration::from_millis(200));
    wait_heap_stable();
    let (heap0, allocs0) = heap();
    let rss0 = rss();

    let start = Instant::now();
    client.command(&format!("open {n} {addr}"));
    wait_until("all connections accepted", Duration::from_secs(120), || {
        running.accepted() >= WARMUP + n
    });
    match &running {
        Running::Dormant(server) => {
            wait_until("all connections idle", Duration::from_secs(60), || {
                let s = server.stats();
                match kind.as_str() {
                    "no-park" => s.active == n,
                    "parked" => s.parked == n && s.active == 0,
                    _ => s.dormant == n && s.parked == 0 && s.active == 0,
                }
            });
        }
        Running::Hyper(_) => std::thread::sleep(Duration::from_millis(500)),
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
/// - `cycle K ADDR`: K connections, one after another, each does one
///   request and closes;
/// - `open N ADDR`: N connections, one after another, each does one
///   keep-alive request and stays open;
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
                    let s = request(addr);
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

/// Connects, sends one keep-alive `GET`, reads the whole response.
fn request(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("write");
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    loop {
        let n = s.read(&mut chunk).expect("read");
        assert!(n > 0, "server closed the connection");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(len) = complete_response(&buf) {
            assert_eq!(len, buf.len(), "unexpected extra bytes");
            assert!(buf.starts_with(b"HTTP/1.1 200"), "not a 200");
            return s;
        }
    }
}

/// The length of the response at the start of `buf`, once all of it is
/// there (head plus `content-length` bytes).
fn complete_response(buf: &[u8]) -> Option<usize> {
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buf[..head_end]).ok()?;
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    (buf.len() >= head_end + len).then_some(head_end + len)
}
