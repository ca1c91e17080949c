//! Answers every request with `200 Hello, World!`, like hyper's hello example.
//!
//! ```text
//! cargo run --release --example hello [ADDR]     # default 127.0.0.1:3000
//! RUST_LOG=dormant=debug cargo run --example hello
//! PARK_AFTER_MS=100 cargo run --release --example hello   # benches/wrk.sh
//! PEER_ADDR=on cargo run --release --example hello         # benches/instructions.sh
//! ```
//!
//! `PARK_AFTER_MS` sets [`park_after`](dormant::Builder::park_after) in
//! milliseconds (`none`: never park); it exists for the `park_after` sweep
//! of `benches/wrk.sh`. `PEER_ADDR=on` turns the
//! [`PeerAddr`](dormant::PeerAddr) extension on, to measure its cost.
//! `TOKIO_WORKER_THREADS` sets the number of runtime threads, as for any
//! `#[tokio::main]` program.

use std::convert::Infallible;

use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;

async fn hello(_req: Request<dormant::Body>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(
        b"Hello, World!",
    ))))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".to_owned());
    let listener = TcpListener::bind(&addr).await?;
    println!("listening on {}", listener.local_addr()?);

    let mut builder = dormant::Server::builder();
    if let Ok(ms) = std::env::var("PARK_AFTER_MS") {
        builder.park_after(match ms.as_str() {
            "none" => None,
            ms => Some(std::time::Duration::from_millis(ms.parse()?)),
        });
    }
    if std::env::var("PEER_ADDR").is_ok_and(|v| v == "on") {
        builder.peer_addr(true);
    }
    let server = builder.build()?;
    server
        .serve(listener, service_fn(hello))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
