//! A raw echo over HTTP/1.1 upgrades, whose idle streams sleep in the
//! parking lot between messages.
//!
//! ```text
//! cargo run --release --example echo [ADDR]     # default 127.0.0.1:3000
//! ```
//!
//! A request with `Connection: Upgrade` and `Upgrade: echo` (any path) is
//! answered `101 Switching Protocols`; from then on every byte the client
//! sends comes back. Other requests get `426 Upgrade Required`. Try it:
//!
//! ```text
//! printf 'GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\nhi\n' \
//!     | nc -q 1 127.0.0.1 3000
//! ```
//!
//! After each message the stream goes to sleep: it has no task, no tokio
//! registration and no buffer until its next bytes arrive (see
//! `benches/experiments/upgrade_memory.rs` for what that costs).

use std::convert::Infallible;

use dormant::upgrade::{self, Lot, Upgraded, Woken};
use http::header::{CONNECTION, UPGRADE};
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;

/// Answers `Upgrade: echo` with `101` and echoes on the upgraded stream;
/// anything else with `426`.
pub async fn handle(mut req: Request<dormant::Body>) -> Result<Response<Full<Bytes>>, Infallible> {
    let echo = req
        .headers()
        .get(UPGRADE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"echo"));
    let upgrade = match upgrade::on(&mut req) {
        Ok(upgrade) if echo => upgrade,
        _ => {
            let mut res = Response::new(Full::new(Bytes::from_static(
                b"send Connection: Upgrade and Upgrade: echo\n",
            )));
            *res.status_mut() = StatusCode::UPGRADE_REQUIRED;
            res.headers_mut()
                .insert(UPGRADE, HeaderValue::from_static("echo"));
            return Ok(res);
        }
    };
    tokio::spawn(async move {
        match upgrade.await {
            Ok(parts) => {
                let lot = parts.lot.clone();
                sleep(lot, parts.into());
            }
            Err(error) => tracing::debug!(%error, "no upgrade"),
        }
    });
    let mut res = Response::new(Full::default());
    *res.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    res.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("upgrade"));
    res.headers_mut()
        .insert(UPGRADE, HeaderValue::from_static("echo"));
    Ok(res)
}

/// Puts the stream to sleep; when bytes arrive, echoes them and sleeps
/// again. The lot keeps the stream and this closure, which holds nothing
/// but the lot handle.
fn sleep(lot: Lot, stream: Upgraded) {
    lot.clone().sleep(stream, move |woken| async move {
        match woken {
            Woken::Readable(mut stream) => match stream.read_pooled().await {
                Ok(Some(bytes)) => {
                    if stream.write_all(&bytes).await.is_ok() {
                        // The buffer goes back to the pool before the wait.
                        drop(bytes);
                        sleep(lot, stream);
                    }
                }
                Ok(None) => {}
                Err(error) => tracing::debug!(%error, "read failed"),
            },
            // The peer is done, or the server stops: close.
            Woken::Eof(_) | Woken::Shutdown(_) => {}
            Woken::Failed(error) => tracing::debug!(%error, "stream failed"),
            _ => {}
        }
    });
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

    let server = dormant::Server::builder().build()?;
    server
        .serve(listener, service_fn(handle))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
