//! `examples/sse.rs`, served and read over every transport: its event
//! stream runs past the server's `write_timeout`, and a client that stops
//! reading it is closed at the deadline its handler pushes forward.

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/sse.rs"]
mod sse;

use std::time::Duration;

use crate::common::client::{Client, Stream};
use crate::common::ladder::ladder;
use crate::common::transport::{Transport, over_every_transport};
use dormant::Rung::Active;
use hyper::service::service_fn;
use sse::Feed;

/// The server's write timeout, and the stream's grace: far shorter than
/// the 1.5 s the client reads for.
const TIMEOUT: Duration = Duration::from_millis(300);

/// Reads until `events` events have come, or the connection closes;
/// returns how many came and whether it closed.
fn read_events<S: Stream>(client: &mut Client<S>, events: usize) -> (usize, bool) {
    let mut all = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let seen = all.windows(6).filter(|w| w == b"data: ").count();
        if seen >= events {
            return (seen, false);
        }
        match client.read_or_end(&mut chunk) {
            Ok(n) => all.extend_from_slice(&chunk[..n]),
            Err(_) => return (seen, true),
        }
    }
}

/// Fifteen events 100 ms apart (1.5 s) under a 300 ms `write_timeout`:
/// the handler's own deadline, 900 ms after each event, lets them all
/// through, and the connection is still open; other requests are served.
/// (900 ms, not 300: under a loaded test run an event came more than
/// 300 ms after the last; still shorter than the stream, so a deadline set
/// once and not pushed would end it.)
fn the_stream_runs_past_the_write_timeout<T: Transport>() {
    let mut b = ladder(Duration::from_secs(1));
    b.write_timeout(TIMEOUT);
    let feed = Feed {
        every: Duration::from_millis(100),
        grace: 3 * TIMEOUT,
        size: 0,
    };
    let srv = T::serve(&b, service_fn(move |req| sse::handle(req, feed)));
    let mut c = srv.connect();
    c.send(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(read_events(&mut c, 15), (15, false));
    assert_eq!(srv.stats().write_timeouts, 0);
    let mut other = srv.connect();
    other.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(
        other
            .response()
            .ends_with("\r\n\r\nevents are at /events\n")
    );
}

/// A client that reads nothing of a stream of 64 KiB events: the
/// socket's buffers fill, the handler stops taking events and pushing its
/// deadline, and the connection is closed 300 ms later, though the server
/// has no `write_timeout`.
fn a_client_that_stops_reading_is_closed<T: Transport>() {
    let feed = Feed {
        every: Duration::from_millis(1),
        grace: TIMEOUT,
        size: 64 * 1024,
    };
    let srv = T::serve(
        &ladder(Duration::from_secs(1)),
        service_fn(move |req| sse::handle(req, feed)),
    );
    let mut c = srv.connect();
    c.send(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n");
    srv.wait_for("the stream's deadline closed the connection", |s| {
        s.write_timeouts == 1 && s.connections[Active] == 0
    });
    let (events, closed) = read_events(&mut c, usize::MAX);
    assert!(closed && events > 0, "{events} events");
}

over_every_transport!(
    the_stream_runs_past_the_write_timeout,
    a_client_that_stops_reading_is_closed,
);
