//! A client that goes away while its request is answered: the handler's
//! future (or its response body) is dropped, as on hyper, which Go users
//! know as the request context's cancellation and long polls rely on.
//! dormant looks for the close itself (hyper's own mid-request read is
//! off, see `src/io.rs`), so these pin that it still happens, over every
//! transport: on a new connection, on one woken from PARKED or DORMANT,
//! for a response body still streaming; and that what the look finds
//! instead of a close (pipelined requests, a half-close after a request
//! answered at once) is served. A TCP socket is peeked; a Unix socket or a
//! TLS session is read ahead, and what was read is handed to hyper first.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::Duration;

use crate::common::client::{Stream, get, ok};
use crate::common::ladder::ladder;
use crate::common::probes::{DropProbe, Probes, WAIT, handler_started, next_drop};
use crate::common::rungs::none_open;
use crate::common::servers::Serve;
use crate::common::services::echo;
use crate::common::transport::{Transport, over_every_transport};
use dormant::Rung::{Active, Dormant, Parked};
use futures_util::{StreamExt, stream};
use http::{Request, Response};
use http_body::Frame;
use http_body_util::{Either, Full, StreamBody};
use hyper::body::Bytes;
use hyper::service::service_fn;

over_every_transport!(
    closing_drops_a_waiting_handler,
    half_closing_a_woken_connection_drops_its_waiting_handler,
    closing_ends_a_streaming_response,
    requests_arriving_while_one_is_answered_are_served,
    a_request_answered_at_once_survives_a_half_close,
);

/// A response body: one chunk, then nothing, ever; reports its drop
/// (`probe` goes with it).
fn trickle(probe: DropProbe) -> impl http_body::Body<Data = Bytes, Error = Infallible> + Send {
    let frames =
        stream::iter([Ok(Frame::data(Bytes::from_static(b"first")))]).chain(stream::pending());
    StreamBody::new(frames.map(move |frame| {
        let _ = &probe;
        frame
    }))
}

/// The server of these tests (parks after 3 ms, dormant after 30), and
/// what its handlers report.
struct Probed<A> {
    srv: Serve<A>,
    started: Receiver<()>,
    dropped: Receiver<&'static str>,
    probes: Arc<Probes>,
}

/// `/wait` answers `released` once the test releases it and reports the
/// drop of its future; `/stream` answers with a [`trickle`]; anything else
/// is echoed.
fn serve_probed<T: Transport>() -> Probed<T::Addr> {
    let (probes, started, dropped) = Probes::new();
    let p = probes.clone();
    let srv = T::serve(
        &ladder(Duration::from_millis(30)),
        service_fn(move |req: Request<dormant::Body>| {
            let p = p.clone();
            async move {
                let body = match req.uri().path() {
                    "/wait" => {
                        p.gate().await;
                        Either::Left(Full::new(Bytes::from_static(b"released")))
                    }
                    "/stream" => Either::Right(trickle(p.probe("body"))),
                    _ => Either::Left(echo(req).await?.into_body()),
                };
                Ok::<_, Infallible>(Response::new(body))
            }
        }),
    );
    Probed {
        srv,
        started,
        dropped,
        probes,
    }
}

/// A client that goes away while its request waits, on a new connection:
/// the handler is dropped, and the connection released.
fn closing_drops_a_waiting_handler<T: Transport>() {
    let p = serve_probed::<T>();
    let mut c = p.srv.connect();
    c.send(WAIT);
    handler_started(&p.started);
    drop(c);
    assert_eq!(next_drop(&p.dropped), "handler");
    p.srv.wait_for("connection released", none_open);
}

/// The same with a half-close (over TLS, `close_notify` and a FIN), on a
/// connection woken from PARKED, then on one woken from DORMANT.
fn half_closing_a_woken_connection_drops_its_waiting_handler<T: Transport>() {
    let p = serve_probed::<T>();
    for dormant in [false, true] {
        let mut c = p.srv.connect();
        c.send(get("/").as_bytes());
        assert_eq!(c.response(), ok("GET / read="));
        if dormant {
            p.srv.wait_for("dormant", |s| s.connections[Dormant] == 1);
        } else {
            p.srv.wait_for("parked", |s| {
                s.parks >= 1 && s.connections[Parked] == 1 && s.connections[Active] == 0
            });
        }
        c.send(WAIT);
        handler_started(&p.started);
        c.stream.close_write().unwrap();
        assert_eq!(next_drop(&p.dropped), "handler", "dormant: {dormant}");
        assert_eq!(c.read_to_close(), "");
        p.srv.wait_for("connection released", none_open);
    }
}

/// A client that goes away while its response body streams: the body is
/// dropped.
fn closing_ends_a_streaming_response<T: Transport>() {
    let p = serve_probed::<T>();
    let mut c = p.srv.connect();
    c.send(get("/stream").as_bytes());
    let head = c.response_head();
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    assert_eq!(c.read_exact_bytes(10), b"5\r\nfirst\r\n");
    drop(c);
    assert_eq!(next_drop(&p.dropped), "body");
    p.srv.wait_for("connection released", none_open);
}

/// Requests that arrive while one is answered are found by the look for a
/// close and left for hyper (over a Unix socket or TLS the look reads
/// ahead, at most 512 bytes, and hands what it read to hyper before
/// anything else the socket holds): a request, one with a body longer than
/// that read, and a head cut in two by it are served exactly, in order, on
/// a new connection and on one woken after a park; nothing is cancelled.
fn requests_arriving_while_one_is_answered_are_served<T: Transport>() {
    let p = serve_probed::<T>();
    let body: String = (0..2000u32)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let mut c = p.srv.connect();
    for round in 0..2u64 {
        c.send(WAIT);
        handler_started(&p.started);
        // Arrive while /wait is in flight.
        c.send(get("/next").as_bytes());
        c.send(
            format!(
                "POST /long HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
        std::thread::sleep(Duration::from_millis(50));
        p.probes.release.notify_one();
        assert_eq!(c.response(), ok("released"), "round {round}");
        assert_eq!(c.response(), ok("GET /next read="));
        assert_eq!(c.response(), ok(&format!("POST /long read={body}")));
        // The second round runs on a connection woken after a park.
        p.srv.wait_for("parked", |s| {
            s.parks == round + 1 && s.connections[Parked] == 1
        });
    }

    // Only the start of a head arrives during the wait.
    c.send(WAIT);
    handler_started(&p.started);
    c.send(b"GET /ha");
    std::thread::sleep(Duration::from_millis(50));
    p.probes.release.notify_one();
    assert_eq!(c.response(), ok("released"));
    c.send(b"lf HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response(), ok("GET /half read="));
    assert!(p.dropped.try_recv().is_err(), "nothing was cancelled");
    assert_eq!(p.srv.stats().pool.in_use, 0);
}

/// A request and the client's half-close right behind it: the look finds
/// the request first, and the answer still comes.
fn a_request_answered_at_once_survives_a_half_close<T: Transport>() {
    let p = serve_probed::<T>();
    let mut c = p.srv.connect();
    c.send(get("/at-once").as_bytes());
    c.stream.close_write().unwrap();
    assert_eq!(c.read_to_close(), ok("GET /at-once read="));
    assert!(p.dropped.try_recv().is_err(), "nothing was dropped");
}
