//! dormant's bench server: `examples/hello.rs` (`200 Hello, World!` over
//! HTTP/1.1 and h2c) with the settings the benchmark scripts vary, on TCP
//! or on a Unix socket.
//!
//! ```text
//! cargo run --release --example hello_dormant [ADDR]     # default 127.0.0.1:3000
//! curl http://127.0.0.1:3000/
//! cargo run --release --example hello_dormant unix:/tmp/hello.sock
//! curl --unix-socket /tmp/hello.sock http://localhost/
//! PARK_AFTER_MS=100 cargo run --release --example hello_dormant     # wrk.sh, instructions.sh
//! DORMANT_AFTER_MS=off cargo run --release --example hello_dormant  # load.sh
//! PEER_ADDR=on cargo run --release --example hello_dormant          # instructions.sh
//! ```
//!
//! An address `unix:PATH` serves on a Unix socket at `PATH` (the server
//! creates the socket file, and removes it when stopped with Ctrl-C; it
//! refuses to start if a file is already there). The environment variables
//! (`PARK_AFTER_MS`, `DORMANT_AFTER_MS`, `PEER_ADDR`, `RUST_LOG`,
//! `TOKIO_WORKER_THREADS`) are described in `benches/common/server.rs`.
//!
//! Not an example of dormant: it lives with the benches that run it
//! (`benches/scripts/`: `wrk.sh`, `syscalls.sh`, `instructions.sh`,
//! `load.sh`, `wake_instructions.sh`), beside its baseline `hello_hyper`,
//! and is declared in Cargo.toml as the example `hello_dormant`, so that
//! cargo builds it with the dev-dependencies.

#[path = "../common/server.rs"]
mod server;

use tokio::net::TcpListener;

#[tokio::main]
async fn main() {
    server::init_tracing();
    if let Err(error) = run().await {
        eprintln!("hello_dormant: {error}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".to_owned());
    let server = server::server()?;
    match addr.strip_prefix("unix:") {
        Some(path) => {
            let listener = dormant::UnixListener::bind(path)?;
            println!("listening on unix:{}", listener.path().display());
            server::serve(server, listener).await
        }
        None => {
            let listener = TcpListener::bind(&addr).await?;
            println!("listening on {}", listener.local_addr()?);
            server::serve(server, listener).await
        }
    }
}
