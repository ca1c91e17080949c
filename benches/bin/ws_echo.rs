//! A `dormant::ws` echo server for the Autobahn|Testsuite
//! (`benches/scripts/autobahn.sh`): every text message comes back as text,
//! every binary message as binary; pings, closes and protocol errors are
//! `dormant::ws`'s own business, which is what the suite tests.
//!
//! ```text
//! cargo run --release --features ws --example ws_echo [ADDR]   # default 127.0.0.1:9001
//! PARK_AFTER_MS=10 DORMANT_AFTER_MS=1000 cargo run --release --features ws --example ws_echo
//! ```
//!
//! Any path accepts a WebSocket handshake; other requests get the
//! handshake's rejection (`426`, `405` or `400`). Messages and frames may
//! be up to 16 MiB, the largest the suite's 9.* cases send.
//!
//! The server parks an idle connection after 1 ms and puts it in the lot
//! after 2 ms (`PARK_AFTER_MS`, `DORMANT_AFTER_MS`, as `hello_dormant`:
//! milliseconds, or `off`), instead of dormant's 10 ms and 1 s, so that a
//! connection sleeps before its upgrade as soon as it can. A socket
//! sleeps between frames whatever these say: it goes back to the lot as
//! soon as a read finds nothing more. `TOKIO_WORKER_THREADS` and
//! `RUST_LOG` work as for any example. Prints `listening on ADDR` once it
//! accepts connections; Ctrl-C shuts down gracefully.
//!
//! Not an example of dormant: it lives with the script that runs it, beside
//! its reference `ws_echo_tungstenite`, and is declared in
//! tests/Cargo.toml as the example `ws_echo`, so that cargo builds it with
//! the dev-dependencies.

use std::convert::Infallible;
use std::time::Duration;

use dormant::ws::{Frame, Message, WebSocketUpgrade};
use http::{Request, Response};
use hyper::service::service_fn;
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;

/// The largest message and frame a client may send: the suite's 9.1.6 and
/// 9.2.6 send 16 MiB in one frame.
const MAX_SIZE: usize = 16 << 20;

async fn handle(mut req: Request<dormant::Body>) -> Result<Response<String>, Infallible> {
    let ws = match WebSocketUpgrade::from_request(&mut req) {
        Ok(ws) => ws,
        Err(rejection) => return Ok(rejection.response()),
    };
    let accepted = ws
        .max_message_size(MAX_SIZE)
        .max_frame_size(MAX_SIZE)
        .on_message((), |(), message, sender| async move {
            let frame = match message {
                Message::Text(text) => Frame::text(text),
                Message::Binary(bytes) => Frame::binary(bytes),
                // The socket answers the close itself.
                Message::Close(_) => return,
            };
            if let Err(error) = sender.send(frame) {
                tracing::debug!(%error, "echo not sent");
            }
        });
    Ok(accepted.into())
}

/// Reads a duration in milliseconds from the environment variable `name`,
/// or `default` when it is unset; `off` or `none` for never.
fn millis(name: &str, default: u64) -> Result<Option<Duration>, Box<dyn std::error::Error>> {
    let ms = std::env::var(name).unwrap_or_else(|_| default.to_string());
    Ok(match ms.as_str() {
        "off" | "none" => None,
        ms => Some(Duration::from_millis(
            ms.parse().map_err(|e| format!("{name}={ms}: {e}"))?,
        )),
    })
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    if let Err(error) = run().await {
        eprintln!("ws_echo: {error}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9001".to_owned());
    let server = dormant::Server::builder()
        .park_after(millis("PARK_AFTER_MS", 1)?)
        .dormant_after(millis("DORMANT_AFTER_MS", 2)?)
        .build()?;
    let listener = TcpListener::bind(&addr).await?;
    println!("listening on {}", listener.local_addr()?);
    server
        .serve(listener, service_fn(handle))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
