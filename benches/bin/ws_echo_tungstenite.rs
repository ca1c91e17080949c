//! The reference for `ws_echo` in the Autobahn|Testsuite
//! (`benches/scripts/autobahn.sh`): tokio-tungstenite alone on a tokio
//! `TcpListener`, a task per connection, echoing every text and binary
//! message as it came (tokio-tungstenite's own `autobahn-server` example,
//! with the same 16 MiB limits as `ws_echo`). Pings, closes and protocol
//! errors are tungstenite's business.
//!
//! ```text
//! cargo run --release --example ws_echo_tungstenite [ADDR]   # default 127.0.0.1:9002
//! ```
//!
//! Prints `listening on ADDR` once it accepts connections.
//!
//! Not an example of dormant: it lives with the script that runs it and is
//! declared in tests/Cargo.toml as the example `ws_echo_tungstenite`, so
//! that cargo builds it with the dev-dependencies.

use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

/// The largest message and frame a client may send, as in `ws_echo`.
const MAX_SIZE: usize = 16 << 20;

async fn echo(stream: TcpStream) -> Result<(), tokio_tungstenite::tungstenite::Error> {
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_SIZE))
        .max_frame_size(Some(MAX_SIZE));
    let mut ws = tokio_tungstenite::accept_async_with_config(stream, Some(config)).await?;
    while let Some(message) = ws.next().await {
        let message = message?;
        if message.is_text() || message.is_binary() {
            ws.send(message).await?;
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9002".to_owned());
    let listener = TcpListener::bind(&addr).await?;
    println!("listening on {}", listener.local_addr()?);
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                eprintln!("accept failed: {error}");
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                continue;
            }
        };
        // As dormant does on every connection.
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            if let Err(error) = echo(stream).await {
                eprintln!("ws_echo_tungstenite: {error}");
            }
        });
    }
}
