//! What a client's PING to an idle HTTP/2 connection costs the server:
//! `dormant` (its connections asleep, DORMANT) against a plain hyper-util
//! server, same handler, same run, paired.
//!
//! ```text
//! cargo bench --bench ping_cost                     # N = 1,000, 30 rounds
//! PING_N=1000 PING_ROUNDS=30 cargo bench --bench ping_cost
//! ```
//!
//! Under `cargo test --benches` (no `--bench` argument) it only checks that
//! it works: N = 20, 2 rounds.
//!
//! # Method
//!
//! Both servers run at once, each in a process of its own (this binary
//! re-executed with `PING_ROLE=server`) on a 1-worker tokio runtime:
//! `dormant` with its defaults (sleeps after 10 ms quiet, DORMANT after
//! 1 s), and hyper-util's auto server. This process opens `PING_N` h2c
//! connections to each (prior knowledge: the preface, an empty SETTINGS
//! and a WINDOW_UPDATE to a browser's 15 MiB, written by hand), makes one
//! `GET /` on stream 1 of each and reads its response, and keeps a reader
//! task per connection that acknowledges the server's SETTINGS (as any
//! client does; a sleep needs it) and counts PING ACKs. After 2.5 s
//! (dormant's connections DORMANT), the rounds alternate between the
//! servers: a round writes one PING to every connection of one server,
//! waits for every ACK, and reads the server's CPU time before and after
//! it (the sum over its threads of `/proc/PID/task/TID/schedstat`'s
//! nanoseconds on CPU): the CPU time per PING. The table shows each
//! server's median and the median of the per-round ratios (a dormant round
//! against the hyper-util round right after it: the machine's noise hits
//! both alike). The servers' RSS is read after each round; its growth from
//! the first round to the last, per connection, shows whether PINGs leave
//! memory behind.

use std::io::{BufRead, BufReader, Write as _};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use hyper::service::service_fn;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::Notify;

#[path = "../common/hello.rs"]
#[allow(dead_code, reason = "the HTTP/1.1 response framing is not used here")]
mod hello;

use hello::{hello_dormant, serve_hyper_util};

const KINDS: [&str; 2] = ["dormant", "hyper-util"];

fn main() {
    match std::env::var("PING_ROLE").as_deref() {
        Ok("server") => server(),
        _ => orchestrate(),
    }
}

// ---------------------------------------------------------------------------
// Server process
// ---------------------------------------------------------------------------

/// Serves `PING_KIND` on 127.0.0.1, prints its address, and runs until its
/// standard input closes (the orchestrator exits).
fn server() {
    let kind = std::env::var("PING_KIND").expect("PING_KIND");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        println!("{}", listener.local_addr().expect("address"));
        std::io::stdout().flush().expect("stdout");
        let stop = async {
            // Blocking: on a thread of its own.
            let _ = tokio::task::spawn_blocking(|| {
                let mut line = String::new();
                let _ = std::io::stdin().read_line(&mut line);
            })
            .await;
        };
        match kind.as_str() {
            "dormant" => {
                let server = dormant::Server::builder().build().expect("build");
                server
                    .serve(listener, service_fn(hello_dormant))
                    .with_graceful_shutdown(stop)
                    .await
                    .expect("serve");
            }
            "hyper-util" => {
                serve_hyper_util(listener, stop, Arc::new(AtomicUsize::new(0))).await;
            }
            other => panic!("unknown kind {other}"),
        }
    });
}

// ---------------------------------------------------------------------------
// This process: the client and the measurements
// ---------------------------------------------------------------------------

/// A server process.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(kind: &str) -> Server {
        let mut child = Command::new(std::env::current_exe().expect("current exe"))
            .env("PING_ROLE", "server")
            .env("PING_KIND", kind)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the server");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the server's address");
        let addr = line.trim().parse().expect("an address");
        Server { child, addr }
    }

    /// CPU time of all its threads so far, in nanoseconds.
    fn cpu_ns(&self) -> u64 {
        let tasks = format!("/proc/{}/task", self.child.id());
        std::fs::read_dir(tasks)
            .expect("the server's threads")
            .filter_map(|t| {
                let stat = std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok()?;
                stat.split_whitespace().next()?.parse::<u64>().ok()
            })
            .sum()
    }

    /// `VmRSS` in bytes.
    fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the server's status");
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS");
        kb * 1024
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len())
        .expect("a small frame")
        .to_be_bytes();
    let mut out = len[1..].to_vec();
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const WINDOW_UPDATE: u8 = 0x8;
const ACK: u8 = 0x1;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// A connection's side that the rounds write PINGs to.
struct Conn {
    write: tokio::sync::Mutex<OwnedWriteHalf>,
}

/// PING ACKs received, and who waits for them.
#[derive(Default)]
struct Acks {
    count: std::cell::Cell<usize>,
    notify: Notify,
}

/// Opens an h2c connection, makes one `GET /` and reads its response;
/// then reads on in a task that acknowledges SETTINGS and counts PING ACKs.
async fn open(addr: SocketAddr, acks: Rc<Acks>) -> Rc<Conn> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    let (mut read, mut write) = tcp.into_split();
    let mut opening = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    opening.extend(frame(SETTINGS, 0, 0, &[]));
    opening.extend(frame(WINDOW_UPDATE, 0, 0, &(15u32 << 20).to_be_bytes()));
    // `GET /` (`:method GET`, `:scheme http`, `:path /` from the static
    // table, `:authority localhost` a literal that enters no table).
    let mut block = vec![0x82, 0x86, 0x84, 0x01, 9];
    block.extend_from_slice(b"localhost");
    opening.extend(frame(HEADERS, END_STREAM | END_HEADERS, 1, &block));
    write.write_all(&opening).await.expect("write");
    let conn = Rc::new(Conn {
        write: tokio::sync::Mutex::new(write),
    });
    // Until the response ends.
    loop {
        let (kind, flags, stream, _) = read_frame(&mut read).await;
        if kind == SETTINGS && flags & ACK == 0 {
            send(&conn, &frame(SETTINGS, ACK, 0, &[])).await;
        }
        if stream == 1 && flags & END_STREAM != 0 && matches!(kind, DATA | HEADERS) {
            break;
        }
    }
    tokio::task::spawn_local(read_on(read, conn.clone(), acks));
    conn
}

async fn send(conn: &Conn, bytes: &[u8]) {
    let mut w = conn.write.lock().await;
    w.write_all(bytes).await.expect("write");
}

/// Reads the server's frames until the connection ends: SETTINGS are
/// acknowledged, PING ACKs counted.
async fn read_on(mut read: OwnedReadHalf, conn: Rc<Conn>, acks: Rc<Acks>) {
    loop {
        let (kind, flags, _, _) = read_frame(&mut read).await;
        match (kind, flags & ACK) {
            (SETTINGS, 0) => send(&conn, &frame(SETTINGS, ACK, 0, &[])).await,
            (PING, ACK) => {
                acks.count.set(acks.count.get() + 1);
                acks.notify.notify_one();
            }
            (PING, _) => panic!("a server PING"),
            _ => {}
        }
    }
}

async fn read_frame(read: &mut OwnedReadHalf) -> (u8, u8, u32, Vec<u8>) {
    let mut head = [0; 9];
    read.read_exact(&mut head)
        .await
        .expect("the server closed a connection");
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0; len];
    read.read_exact(&mut payload).await.expect("a frame");
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    (head[3], head[4], stream, payload)
}

/// One PING on each of `conns`; waits for every ACK.
async fn round(conns: &[Rc<Conn>], acks: &Acks, payload: [u8; 8]) {
    let before = acks.count.get();
    let ping = frame(PING, 0, 0, &payload);
    for conn in conns {
        send(conn, &ping).await;
    }
    let wait = async {
        while acks.count.get() < before + conns.len() {
            acks.notify.notified().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .expect("PING ACKs within 30 s");
}

/// `cargo bench` passes `--bench`; `cargo test --benches` does not.
fn is_bench() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

fn orchestrate() {
    let (n, rounds) = if is_bench() {
        (env_usize("PING_N", 1000), env_usize("PING_ROUNDS", 30))
    } else {
        (20, 2)
    };
    let servers: Vec<Server> = KINDS.iter().map(|kind| Server::start(kind)).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let local = tokio::task::LocalSet::new();
    // Per server: CPU ns per PING and RSS after each round.
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); KINDS.len()];
    let mut rss: Vec<Vec<u64>> = vec![Vec::new(); KINDS.len()];
    local.block_on(&rt, async {
        let mut all = Vec::new();
        for server in &servers {
            let acks = Rc::new(Acks::default());
            let mut conns = Vec::with_capacity(n);
            for _ in 0..n {
                conns.push(open(server.addr, acks.clone()).await);
            }
            all.push((conns, acks));
        }
        // dormant's connections DORMANT (after 1 s).
        tokio::time::sleep(Duration::from_millis(2500)).await;
        for r in 0..rounds {
            for (k, server) in servers.iter().enumerate() {
                let (conns, acks) = &all[k];
                let before = server.cpu_ns();
                round(conns, acks, (r as u64).to_be_bytes()).await;
                // Let the server finish what the last ACK left (its
                // flush), then read.
                tokio::time::sleep(Duration::from_millis(20)).await;
                let after = server.cpu_ns();
                cpu[k].push((after - before) as f64 / n as f64);
                rss[k].push(server.rss());
            }
        }
    });
    println!("CPU per PING to an idle h2c connection, N = {n}, {rounds} rounds, paired");
    println!(
        "{:<11} {:>12} {:>12} {:>12} {:>22}",
        "server", "median ns", "min ns", "max ns", "RSS growth B/conn"
    );
    for (k, kind) in KINDS.iter().enumerate() {
        let v = &cpu[k];
        let growth = (rss[k][rss[k].len() - 1] as f64 - rss[k][0] as f64) / n as f64;
        println!(
            "{kind:<11} {:>12.0} {:>12.0} {:>12.0} {:>22.1}",
            median(v.clone()),
            v.iter().copied().fold(f64::INFINITY, f64::min),
            v.iter().copied().fold(0.0, f64::max),
            growth
        );
    }
    let ratios: Vec<f64> = cpu[0].iter().zip(&cpu[1]).map(|(d, h)| d / h).collect();
    let mut sorted = ratios.clone();
    sorted.sort_by(f64::total_cmp);
    println!(
        "dormant / hyper-util, per round: median {:.3}, quartiles {:.3}-{:.3}",
        median(ratios),
        sorted[sorted.len() / 4],
        sorted[sorted.len() * 3 / 4]
    );
}
