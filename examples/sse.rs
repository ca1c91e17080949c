//! Server-sent events that outlive the server's write timeout, with a
//! deadline of their own.
//!
//! ```text
//! cargo run --example sse [ADDR]              # default 127.0.0.1:3000
//! curl -N http://127.0.0.1:3000/events        # an event a second, as long as you like
//! ```
//!
//! The server has a 5 s `write_timeout`, which closes the connection of a
//! client that stops reading any response for that long. An event stream
//! is a response that never ends, so its handler lifts the server's
//! timeout for its request ([`dormant::Deadlines`]) and keeps its own
//! instead: each time the response body takes an event, it pushes its
//! write deadline 10 s ahead. The stream runs for as long as its client
//! reads. A client that stops reading fills the socket's buffers, the body
//! is no longer polled, no event is taken, and 10 s later the connection
//! is closed. Every other request keeps the server's 5 s.

use std::convert::Infallible;
use std::time::Duration;

use dormant::Deadlines;
use futures_util::stream;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame};
use hyper::service::service_fn;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The server's write timeout, for every response but the event stream's.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// How the event stream runs.
#[derive(Clone, Copy, Debug)]
pub struct Feed {
    /// The time between events.
    pub every: Duration,
    /// How long the client may take to take each event: the stream's write
    /// deadline, pushed this far ahead at each event.
    pub grace: Duration,
    /// The size of an event's data, at least a few bytes (the tests send
    /// large ones, to fill a socket's buffers quickly).
    pub size: usize,
}

/// An event a second, each given 10 s.
pub const FEED: Feed = Feed {
    every: Duration::from_secs(1),
    grace: Duration::from_secs(10),
    size: 0,
};

/// A response body: an event stream or a short text.
pub type Body = BoxBody<Bytes, Infallible>;

/// Answers `/events` with an endless event stream paced by `feed`, and
/// anything else with a line of text.
pub async fn handle(req: Request<dormant::Body>, feed: Feed) -> Result<Response<Body>, Infallible> {
    if req.uri().path() != "/events" {
        let text = Full::new(Bytes::from_static(b"events are at /events\n"));
        return Ok(Response::new(text.boxed()));
    }
    // `None` on HTTP/2, whose streams have no write timeout.
    let deadlines = Deadlines::of(&req);
    if let Some(deadlines) = &deadlines {
        // Until the first event is taken.
        deadlines.set_write_deadline(Instant::now() + feed.grace);
    }
    // One event waits in the channel at most: the producer blocks while
    // the client does not read, and stops pushing the deadline.
    let (tx, rx) = mpsc::channel::<Bytes>(1);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(feed.every);
        for n in 0u64.. {
            tick.tick().await;
            let mut data = format!("tick {n}").into_bytes();
            data.resize(feed.size.max(data.len()), b'.');
            let event = [
                b"id: ",
                n.to_string().as_bytes(),
                b"\ndata: ",
                &data,
                b"\n\n",
            ]
            .concat();
            if tx.send(Bytes::from(event)).await.is_err() {
                return; // the connection is gone
            }
            // The body took the event: the client has `grace` for the next.
            if let Some(deadlines) = &deadlines {
                deadlines.set_write_deadline(Instant::now() + feed.grace);
            }
        }
    });
    let frames = stream::unfold(rx, |mut rx| async move {
        let event = rx.recv().await?;
        Some((Ok(Frame::data(event)), rx))
    });
    let mut res = Response::new(StreamBody::new(frames).boxed());
    let headers = res.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(res)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".to_owned());
    let listener = TcpListener::bind(&addr).await?;
    println!("listening on {}", listener.local_addr()?);
    dormant::Server::builder()
        .write_timeout(WRITE_TIMEOUT)
        // Event streams never end: Ctrl-C closes them after a second.
        .shutdown_grace(Duration::from_secs(1))
        .build()?
        .serve(listener, service_fn(|req| handle(req, FEED)))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
