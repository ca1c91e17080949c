//! Heap allocations per keep-alive request, counted by a global allocator:
//! `dormant` with no timeouts, with its defaults, with all four timeouts,
//! with the `PeerAddr` extension, and a hyper-util auto server, same run.
//!
//! ```text
//! cargo bench --bench request_allocs
//! ```
//!
//! Each server runs on its own current-thread runtime thread. The client,
//! on one more, keeps [`CONNS`] keep-alive connections open to each server,
//! warms them up, then sends [`REQUESTS`] sequential hello-world requests
//! per connection and reads every response to its end; allocations made by
//! the whole process during that phase, divided by the requests, are the
//! figure. The client reuses its buffers and allocates nothing per request,
//! so differences between rows are the servers'. Requests follow each other
//! without a pause, so no connection parks: this is the steady-state cost of
//! a busy connection.
//!
//! This is a separate bench from `throughput` because the counting
//! allocator slows every allocation down, which would tilt a time
//! comparison towards the server that allocates less.

use std::net::SocketAddr;
use std::time::Duration;

use hyper::service::service_fn;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[path = "../common/hello.rs"]
mod hello;

use hello::{complete_response, hello_dormant, serve_hyper_util};

#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Keep-alive connections per server.
const CONNS: usize = 4;
/// Measured requests per connection (after as many for warm-up).
const REQUESTS: usize = 5_000;

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";

const KINDS: [&str; 5] = [
    "timeouts-off",
    "defaults",
    "timeouts-on",
    "peer-addr",
    "hyper-util",
];

fn spawn_server(kind: &'static str) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("local_addr");
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = TcpListener::from_std(listener).expect("listener");
            let mut builder = dormant::Server::builder();
            match kind {
                "hyper-util" => {
                    return serve_hyper_util(listener, std::future::pending(), Default::default())
                        .await;
                }
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
                "peer-addr" => {
                    builder.peer_addr(true);
                }
                _ => {}
            }
            let server = builder.build().expect("build");
            server
                .serve(listener, service_fn(hello_dormant))
                .await
                .expect("serve");
        });
    });
    addr
}

/// `n` sequential requests on `stream`, each response read to its end into
/// `buf` (reused: no allocation once it has grown).
async fn requests(stream: &mut TcpStream, buf: &mut Vec<u8>, n: usize) {
    for _ in 0..n {
        stream.write_all(REQUEST).await.expect("write");
        loop {
            if let Some(len) = complete_response(buf) {
                buf.drain(..len);
                break;
            }
            let read = stream.read_buf(buf).await.expect("read");
            assert!(read > 0, "server closed the connection");
        }
    }
}

fn main() {
    // `cargo test --benches` runs bench binaries without `--bench`: a short
    // smoke run then.
    let full = std::env::args().any(|a| a == "--bench");
    let per_conn = if full { REQUESTS } else { 50 };
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    println!(
        "allocations per request: {CONNS} keep-alive connections per server, \
         {per_conn} sequential requests each, after as many for warm-up"
    );
    println!("{:>14} {:>12} {:>14}", "server", "allocs/req", "bytes/req");
    for kind in KINDS {
        let addr = spawn_server(kind);
        let (allocs, bytes) = client.block_on(async {
            let mut conns = Vec::new();
            for _ in 0..CONNS {
                let stream = TcpStream::connect(addr).await.expect("connect");
                stream.set_nodelay(true).expect("nodelay");
                conns.push((stream, Vec::with_capacity(4096)));
            }
            for (stream, buf) in &mut conns {
                requests(stream, buf, per_conn).await;
            }
            let region = Region::new(GLOBAL);
            for (stream, buf) in &mut conns {
                requests(stream, buf, per_conn).await;
            }
            let change = region.change();
            let n = (CONNS * per_conn) as f64;
            (
                change.allocations as f64 / n,
                change.bytes_allocated as f64 / n,
            )
        });
        println!("{kind:>14} {allocs:>12.2} {bytes:>14.1}");
    }
}
