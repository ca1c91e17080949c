//! Answers every request with `200 Hello, World!`, over HTTP/1.1 and
//! HTTP/2 (h2c), like hyper's hello example.
//!
//! ```text
//! cargo run --release --example hello [ADDR]     # default 127.0.0.1:3000
//! curl http://127.0.0.1:3000/
//! curl --http2-prior-knowledge http://127.0.0.1:3000/
//! ```
//!
//! Ctrl-C stops the server gracefully: it stops accepting, lets requests in
//! flight finish, and returns once every connection is closed.

use std::convert::Infallible;

use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use tokio::net::TcpListener;

async fn hello(_req: Request<dormant::Body>) -> Result<Response<Full<Bytes>>, Infallible> {
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

    let server = dormant::Server::builder().build()?;
    server
        .serve(listener, service_fn(hello))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
