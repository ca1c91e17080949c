//! Keep-alive hello-world throughput over 64 connections: `dormant` (default
//! settings) against a hyper-util auto server, and `dormant` with all four
//! timeouts on against `dormant` with none, same run.
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-bench cargo bench --bench throughput
//! ```
//!
//! Each server runs on its own current-thread runtime on its own thread;
//! only the one being measured is busy. The client, on one more
//! current-thread runtime, keeps 64 keep-alive connections per server open
//! for the whole run; one iteration sends [`PER_CONN`] sequential
//! `GET / HTTP/1.1` requests on each of them (64 in flight at any time) and
//! reads every response to its end. The machines are noisy: compare the two
//! lines of one run (the ratio), never a lone figure.
//!
//! Criterion measures one server after the other, so load that comes and
//! goes during a run (other builds on the machine) lands on one of them.
//! After the criterion group the bench therefore also runs the two servers
//! *interleaved*: [`ROUNDS`] rounds, each timing every server on the same
//! work (order reversed every other round), and prints every round's ratios
//! dormant / hyper-util and timeouts on / off, and their medians. That part
//! runs only under `cargo bench` (which passes `--bench`), not under
//! `cargo test --benches`.
//!
//! "timeouts on" sets header read 30 s, read 30 s, write 30 s and idle 60 s;
//! "timeouts off" sets none of them (the default has the header read
//! timeout only). Allocations per request are counted by
//! `benches/experiments/request_allocs.rs`, which needs a counting allocator this bench
//! must not pay for.

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group};
use hyper::service::service_fn;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

#[path = "common/hello.rs"]
mod hello;

use hello::{complete_response, hello_dormant, serve_hyper_util};

/// Keep-alive connections per server.
const CONNS: usize = 64;
/// Requests per connection per iteration.
const PER_CONN: usize = 50;

/// Interleaved rounds after the criterion group, and iterations (of
/// `CONNS * PER_CONN` requests) per server per round.
const ROUNDS: usize = 10;
const ROUND_ITERS: usize = 8;

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";

/// The servers compared, in the order of [`servers`].
const KINDS: [&str; 4] = ["dormant", "hyper-util", "timeouts-off", "timeouts-on"];

/// The dormant server with default settings, for its statistics.
static DORMANT: OnceLock<dormant::Server> = OnceLock::new();

/// A dormant server of one of the [`KINDS`].
fn dormant_builder(kind: &str) -> dormant::Builder {
    let mut builder = dormant::Server::builder();
    match kind {
        "timeouts-off" => {
            builder.header_read_timeout(None);
        }
        "timeouts-on" => {
            builder
                .header_read_timeout(Duration::from_secs(30))
                .read_timeout(Duration::from_secs(30))
                .write_timeout(Duration::from_secs(30))
                .idle_timeout(Duration::from_secs(60));
        }
        _ => {}
    }
    builder
}

/// Starts a server on its own current-thread runtime thread; returns its
/// address. The thread lives until the process exits.
fn spawn_server(kind: &'static str) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("local_addr");
    std::thread::Builder::new()
        .name(format!("{kind}-server"))
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("listener");
                if kind == "hyper-util" {
                    return serve_hyper_util(listener, std::future::pending(), Default::default())
                        .await;
                }
                let server = dormant_builder(kind).build().expect("build");
                if kind == "dormant" {
                    let _ = DORMANT.set(server.clone());
                }
                server
                    .serve(listener, service_fn(hello_dormant))
                    .await
                    .expect("serve");
            });
        })
        .expect("server thread");
    addr
}

/// One client keep-alive connection and its read buffer.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    async fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).await.expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        Conn {
            stream,
            buf: Vec::with_capacity(1024),
        }
    }

    /// `n` requests, one after another, each response read to its end.
    async fn run(mut self, n: usize) -> Self {
        for _ in 0..n {
            self.stream.write_all(REQUEST).await.expect("write");
            loop {
                if let Some(len) = complete_response(&self.buf) {
                    self.buf.drain(..len);
                    break;
                }
                let read = self.stream.read_buf(&mut self.buf).await.expect("read");
                assert!(read > 0, "server closed the connection");
            }
        }
        self
    }
}

/// The 64 connections to one server, moved into tasks for an iteration and
/// back.
struct Load {
    conns: Vec<Conn>,
}

impl Load {
    async fn connect(addr: SocketAddr) -> Self {
        let mut conns = Vec::with_capacity(CONNS);
        for _ in 0..CONNS {
            conns.push(Conn::connect(addr).await);
        }
        Load { conns }
    }

    async fn iteration(&mut self) {
        let mut set = JoinSet::new();
        for conn in self.conns.drain(..) {
            set.spawn(conn.run(PER_CONN));
        }
        while let Some(conn) = set.join_next().await {
            self.conns.push(conn.expect("client task"));
        }
    }
}

/// Every server, started once for the whole run.
fn servers() -> &'static [SocketAddr; 4] {
    static SERVERS: OnceLock<[SocketAddr; 4]> = OnceLock::new();
    SERVERS.get_or_init(|| KINDS.map(spawn_server))
}

fn client_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime")
}

fn throughput(c: &mut Criterion) {
    let client = client_runtime();
    let mut group = c.benchmark_group("keepalive_hello_64conns");
    group
        .throughput(Throughput::Elements((CONNS * PER_CONN) as u64))
        .sample_size(20)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(8));
    for (kind, addr) in KINDS.iter().zip(servers()) {
        let mut load = client.block_on(Load::connect(*addr));
        group.bench_function(*kind, |b| {
            b.iter(|| client.block_on(black_box(&mut load).iteration()));
        });
    }
    group.finish();
}

/// Every server on the same work, order reversed every other round;
/// prints requests/s per round and the median ratios.
fn interleaved() {
    let client = client_runtime();
    let mut loads = servers().map(|addr| client.block_on(Load::connect(addr)));
    let rate = |load: &mut Load| {
        let start = Instant::now();
        for _ in 0..ROUND_ITERS {
            client.block_on(load.iteration());
        }
        (ROUND_ITERS * CONNS * PER_CONN) as f64 / start.elapsed().as_secs_f64()
    };
    // Warm-up, untimed.
    for load in &mut loads {
        rate(load);
    }
    println!(
        "interleaved: {ROUNDS} rounds, {} requests per server per round (req/s)",
        ROUND_ITERS * CONNS * PER_CONN
    );
    print!("{:>5}", "round");
    for kind in KINDS {
        print!(" {kind:>12}");
    }
    println!(" {:>10} {:>10}", "d/hyper", "on/off");
    let mut vs_hyper = Vec::with_capacity(ROUNDS);
    let mut on_off = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let mut rates = [0.0; KINDS.len()];
        let mut order: Vec<usize> = (0..KINDS.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            rates[i] = rate(&mut loads[i]);
        }
        let [dormant, hyper, off, on] = rates;
        print!("{round:>5}");
        for r in rates {
            print!(" {r:>12.0}");
        }
        println!(" {:>10.3} {:>10.3}", dormant / hyper, on / off);
        vs_hyper.push(dormant / hyper);
        on_off.push(on / off);
    }
    println!(
        "median ratio dormant / hyper-util: {:.3}",
        median(&mut vs_hyper)
    );
    println!(
        "median ratio timeouts on / off:    {:.3}",
        median(&mut on_off)
    );
    if let Some(server) = DORMANT.get() {
        // Parks and wakes tell whether connections went idle for
        // `park_after` during the run (between rounds they do, 64 each).
        let stats = server.stats();
        println!(
            "dormant stats: accepted {} parks {} wakes {} requests {}",
            stats.accepted, stats.parks, stats.wakes, stats.requests
        );
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    (values[(n - 1) / 2] + values[n / 2]) / 2.0
}

criterion_group!(benches, throughput);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // `cargo bench` passes `--bench`; `cargo test --benches` does not, and
    // criterion then runs each benchmark once as a test.
    let bench = std::env::args().any(|a| a == "--bench");
    let listing = std::env::args().any(|a| a == "--list" || a == "--test");
    if bench && !listing {
        interleaved();
    }
}
