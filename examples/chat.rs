//! A chat room on `dormant::ws`: what one client says, every client hears.
//! The room is a [`Topic`]: every member's socket joins it, a message is
//! published to it, and a socket that closes leaves it by itself. Between
//! messages a socket sleeps in the parking lot with its member's number
//! and no task; a message wakes only its sender's socket, and the publish
//! writes to every other socket where it sleeps, without holding the
//! room's lock while it does.
//!
//! ```text
//! cargo run --release --features ws --example chat [ADDR]   # default 127.0.0.1:3000
//! ```
//!
//! Open <http://127.0.0.1:3000/> in two browser tabs, or connect any
//! WebSocket client to `ws://127.0.0.1:3000/chat`.
//!
//! A client that stops reading fills its socket's queue and is let go
//! (close code 1008); the others are not held back. Ctrl-C shuts down
//! gracefully: every socket is sent 1001.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dormant::ws::{Frame, Message, Topic, WebSocketUpgrade};
use http::header::CONTENT_TYPE;
use http::{Request, Response, StatusCode};
use hyper::service::service_fn;
use tokio::net::TcpListener;

/// The room: its members' sockets, and the number the next one gets.
#[derive(Debug, Default)]
pub struct Room {
    members: Topic,
    joined: AtomicU64,
}

impl Room {
    /// Sends `text` to every member.
    pub fn broadcast(&self, text: &str) {
        // Encoded once, for every socket.
        self.members.publish(Frame::text(text));
    }

    /// How many members the room has.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// How many members' sockets sleep now (no task serves them).
    pub fn asleep(&self) -> usize {
        let members = self.members.members();
        members.iter().filter(|member| member.is_asleep()).count()
    }

    /// Whether the room is empty.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

/// `/chat` upgrades to a member's WebSocket; `/` is a page to chat from.
pub async fn handle(
    room: Arc<Room>,
    mut req: Request<dormant::Body>,
) -> Result<Response<String>, Infallible> {
    if req.uri().path() != "/chat" {
        let mut page = Response::new(PAGE.to_owned());
        let html = "text/html; charset=utf-8".parse().unwrap();
        page.headers_mut().insert(CONTENT_TYPE, html);
        if req.uri().path() != "/" {
            *page.status_mut() = StatusCode::NOT_FOUND;
        }
        return Ok(page);
    }
    let ws = match WebSocketUpgrade::from_request(&mut req) {
        Ok(ws) => ws.max_message_size(4096),
        Err(rejection) => return Ok(rejection.response()),
    };
    room.members.subscribe(&ws.sender());
    let id = room.joined.fetch_add(1, Ordering::Relaxed) + 1;
    room.broadcast(&format!("#{id} joined ({} here)", room.len()));
    // A member's socket keeps its number between messages, nothing else.
    Ok(ws
        .on_message(id, move |id, message, _sender| {
            let room = room.clone();
            async move {
                match message {
                    Message::Text(text) => room.broadcast(&format!("#{id}: {text}")),
                    Message::Binary(_) => {}
                    // The socket has left the room already.
                    Message::Close(_) => room.broadcast(&format!("#{id} left")),
                }
                id
            }
        })
        .into())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args().nth(1);
    let listener = TcpListener::bind(addr.as_deref().unwrap_or("127.0.0.1:3000")).await?;
    println!("chat on http://{}/", listener.local_addr()?);
    let server = dormant::Server::builder().build()?;
    let room = Arc::new(Room::default());
    let service = service_fn(move |req| handle(room.clone(), req));
    server
        .serve(listener, service)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

const PAGE: &str = r#"<!doctype html>
<meta charset="utf-8"><title>dormant chat</title>
<pre id="log"></pre>
<form id="say"><input id="text" autofocus autocomplete="off"> <button>Send</button></form>
<script>
const log = document.getElementById("log");
const ws = new WebSocket(`ws://${location.host}/chat`);
ws.onmessage = (e) => { log.textContent += e.data + "\n"; };
ws.onclose = (e) => { log.textContent += `(closed: ${e.code})\n`; };
document.getElementById("say").onsubmit = (e) => {
  e.preventDefault();
  const text = document.getElementById("text");
  ws.send(text.value);
  text.value = "";
};
</script>
"#;
