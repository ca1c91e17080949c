//! Answers every request with `200 Hello, World!`, like hyper's hello example.
//!
//! ```text
//! cargo run --release --example hello [ADDR]     # default 127.0.0.1:3000
//! cargo run --release --example hello unix:/tmp/hello.sock
//! curl --unix-socket /tmp/hello.sock http://localhost/
//! RUST_LOG=dormant=debug cargo run --example hello
//! PARK_AFTER_MS=100 cargo run --release --example hello   # benches/wrk.sh
//! DORMANT_AFTER_MS=off cargo run --release --example hello # benches/load.sh
//! PEER_ADDR=on cargo run --release --example hello         # benches/instructions.sh
//! ```
//!
//! An address `unix:PATH` serves on a Unix socket at `PATH` (the server
//! creates the socket file, and removes it when stopped with Ctrl-C; it
//! refuses to start if a file is already there).
//!
//! `PARK_AFTER_MS` sets [`park_after`](dormant::Builder::park_after) in
//! milliseconds (`off` or `none`: never park); it exists for the
//! `park_after` sweep of `benches/wrk.sh` and the ablations of
//! `benches/load.sh`. `DORMANT_AFTER_MS` sets
//! [`dormant_after`](dormant::Builder::dormant_after) the same way (`off` or
//! `none`: parked connections stay in tokio). `PEER_ADDR=on` turns the
//! [`PeerAddr`](dormant::PeerAddr) extension on, to measure its cost.
//! `TOKIO_WORKER_THREADS` sets the number of runtime threads, as for any
//! `#[tokio::main]` program.

use std::convert::Infallible;
use std::time::Duration;

use dormant::Listener;
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
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    if let Err(error) = run().await {
        eprintln!("hello: {error}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".to_owned());
    let server = server()?;
    match addr.strip_prefix("unix:") {
        Some(path) => {
            let listener = dormant::UnixListener::bind(path)?;
            println!("listening on unix:{}", listener.path().display());
            serve(server, listener).await
        }
        None => {
            let listener = TcpListener::bind(&addr).await?;
            println!("listening on {}", Listener::local_addr(&listener)?);
            serve(server, listener).await
        }
    }
}

/// The server, with the settings the benches vary.
fn server() -> Result<dormant::Server, Box<dyn std::error::Error>> {
    let mut builder = dormant::Server::builder();
    if let Some(after) = millis("PARK_AFTER_MS")? {
        builder.park_after(after);
    }
    if let Some(after) = millis("DORMANT_AFTER_MS")? {
        builder.dormant_after(after);
    }
    if std::env::var("PEER_ADDR").is_ok_and(|v| v == "on") {
        builder.peer_addr(true);
    }
    Ok(builder.build()?)
}

/// Reads a duration in milliseconds from the environment variable `name`:
/// `None` if it is unset, `Some(None)` for `off` or `none`.
fn millis(name: &str) -> Result<Option<Option<Duration>>, Box<dyn std::error::Error>> {
    let Ok(ms) = std::env::var(name) else {
        return Ok(None);
    };
    Ok(Some(match ms.as_str() {
        "off" | "none" => None,
        ms => Some(Duration::from_millis(
            ms.parse().map_err(|e| format!("{name}={ms}: {e}"))?,
        )),
    }))
}

/// Serves until Ctrl-C, then shuts down gracefully.
async fn serve(
    server: dormant::Server,
    listener: impl Listener,
) -> Result<(), Box<dyn std::error::Error>> {
    server
        .serve(listener, service_fn(hello))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
