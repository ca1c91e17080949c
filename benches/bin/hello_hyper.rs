//! The benchmark baseline for `hello_dormant` (dormant's bench server): the
//! same handler on a plain hyper-util auto server (HTTP/1.1 and h2c), one
//! task per connection, nothing else.
//!
//! ```text
//! cargo run --release --example hello_hyper [ADDR]     # default 127.0.0.1:3000
//! TOKIO_WORKER_THREADS=1 cargo run --release --example hello_hyper
//! curl http://127.0.0.1:3000/
//! ```
//!
//! Not an example of dormant: it lives with the benches that run it
//! (`benches/scripts/`: `wrk.sh`, `syscalls.sh`, `instructions.sh`,
//! `load.sh`, `wake_instructions.sh`) and is declared in Cargo.toml as the
//! example `hello_hyper`, so that cargo builds it with the
//! dev-dependencies. It and `hello_dormant` both run on tokio's
//! multi-thread runtime, which takes its worker count from
//! `TOKIO_WORKER_THREADS`.

use std::convert::Infallible;
use std::sync::Arc;

use http::{Request, Response};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

async fn hello(_req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(
        b"Hello, World!",
    ))))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".to_owned());
    let listener = TcpListener::bind(&addr).await?;
    println!("listening on {}", listener.local_addr()?);

    let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                eprintln!("accept failed: {error}");
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                continue;
            }
        };
        // dormant sets TCP_NODELAY on every connection; so does the baseline.
        let _ = stream.set_nodelay(true);
        let builder = builder.clone();
        tokio::spawn(async move {
            let _ = builder
                .serve_connection(TokioIo::new(stream), service_fn(hello))
                .await;
        });
    }
}
