//! Keep-alive hello-world throughput over 64 connections: `dormant` (default
//! settings) against a hyper-util auto server, same run.
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

use std::convert::Infallible;
use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Keep-alive connections per server.
const CONNS: usize = 64;
/// Requests per connection per iteration.
const PER_CONN: usize = 50;

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";

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
                match kind {
                    "dormant" => {
                        let server = dormant::Server::builder().build().expect("build");
                        server
                            .serve(listener, service_fn(hello_dormant))
                            .await
                            .expect("serve");
                    }
                    _ => serve_hyper_util(listener).await,
                }
            });
        })
        .expect("server thread");
    addr
}

/// The baseline: one hyper-util auto connection per accepted socket.
async fn serve_hyper_util(listener: TcpListener) {
    let builder = std::sync::Arc::new(auto::Builder::new(TokioExecutor::new()));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let builder = builder.clone();
        tokio::spawn(async move {
            let _ = builder
                .serve_connection(TokioIo::new(stream), service_fn(hello_hyper))
                .await;
        });
    }
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

fn throughput(c: &mut Criterion) {
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    let mut group = c.benchmark_group("keepalive_hello_64conns");
    group
        .throughput(Throughput::Elements((CONNS * PER_CONN) as u64))
        .sample_size(20)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(8));
    for kind in ["dormant", "hyper-util"] {
        let addr = spawn_server(kind);
        let mut load = client.block_on(Load::connect(addr));
        group.bench_function(kind, |b| {
            b.iter(|| client.block_on(black_box(&mut load).iteration()));
        });
    }
    group.finish();
}

criterion_group!(benches, throughput);
criterion_main!(benches);
