//! A handler's own deadlines (`dormant::Deadlines`), over every transport:
//! a server-sent events stream that runs past `write_timeout` because its
//! handler lifted it (and is cut at it when it did not), a client that
//! stops reading closed at the deadline its handler pushes forward, an
//! upload past `read_timeout` because its handler extended it (and cut
//! when it did not), deadlines shorter than the server's, a handle kept
//! past its request, and HTTP/2, which has none.
//!
//! Durations leave no doubt about the outcome: the server's timeouts are
//! 300 ms (or 10 s when a handler shortens them), streams and uploads last
//! 1.5 s. Nothing asserts how long anything took: the client sees a body
//! complete, or cut (the connection closed before the last chunk, or
//! before any response), and the server counts the cut.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::client::{Client, Stream};
use crate::common::ladder::ladder;
use crate::common::timeout::CLIENT_TIMEOUT;
use crate::common::transport::{Transport, over_every_transport};
use bytes::Bytes;
use dormant::Deadlines;
use dormant::Rung::{Active, Parked};
use http::{Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::service::service_fn;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The server's read or write timeout in most tests: far shorter than a
/// stream or an upload.
const TIMEOUT: Duration = Duration::from_millis(300);

/// The server's timeout when a handler shortens it: far longer than a
/// stream or an upload.
const LONG: Duration = Duration::from_secs(10);

/// Events of a stream, and pieces of an upload, are this far apart: 15 of
/// them last 1.5 s.
const TICK: Duration = Duration::from_millis(100);
const TICKS: usize = 15;

type ResBody = BoxBody<Bytes, Infallible>;

/// What a streaming handler does with its deadline.
#[derive(Clone, Copy, Debug)]
enum OnWrite {
    /// Nothing: the server's `write_timeout` applies.
    Server,
    /// Lifts it before answering.
    Lift,
    /// Sets it this far ahead before answering.
    Set(Duration),
    /// Pushes it this far ahead each time the body takes an event.
    Push(Duration),
    /// Sets it this far ahead a tick after the body has taken the first
    /// event (the connection waits for the next), and sends nothing more
    /// (the body stays open).
    SetAfterOne(Duration),
    /// Sets it this far ahead, lets it pass, then lifts it, before
    /// answering.
    LiftTooLate(Duration),
}

/// A response body of `count` events of `size` bytes, `every` apart (at
/// once if zero), produced by a task that treats the request's deadline as
/// `write` says.
async fn events(
    req: &Request<dormant::Body>,
    write: OnWrite,
    count: usize,
    size: usize,
    every: Duration,
) -> ResBody {
    let deadlines = Deadlines::of(req).expect("HTTP/1 requests have deadlines");
    match write {
        OnWrite::Server | OnWrite::Push(_) | OnWrite::SetAfterOne(_) => {}
        OnWrite::Lift => deadlines.set_write_deadline(None),
        OnWrite::Set(after) => deadlines.set_write_deadline(Instant::now() + after),
        OnWrite::LiftTooLate(after) => {
            deadlines.set_write_deadline(Instant::now() + after);
            tokio::time::sleep(after * 2).await;
            deadlines.set_write_deadline(None);
        }
    }
    let (tx, rx) = mpsc::channel::<Bytes>(1);
    tokio::spawn(async move {
        for n in 0..count {
            if !every.is_zero() {
                tokio::time::sleep(every).await;
            }
            let mut event = format!("data: {n}\n\n").into_bytes();
            event.resize(size.max(event.len()), b'.');
            if tx.send(Bytes::from(event)).await.is_err() {
                return; // the connection is gone
            }
            match write {
                OnWrite::Push(after) => deadlines.set_write_deadline(Instant::now() + after),
                OnWrite::SetAfterOne(after) => {
                    tokio::time::sleep(TICK).await;
                    deadlines.set_write_deadline(Instant::now() + after);
                    // Until the connection is gone.
                    tx.closed().await;
                    return;
                }
                _ => {}
            }
        }
    });
    let frames = futures_util::stream::unfold(rx, |mut rx| async move {
        let event = rx.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(event)), rx))
    });
    BodyExt::boxed(StreamBody::new(frames))
}

fn full(text: &'static str) -> ResBody {
    BodyExt::boxed(Full::new(Bytes::from_static(text.as_bytes())))
}

/// Serves `/events` (15 events of a few bytes, 100 ms apart) treating its
/// write deadline as `write` says, and `/events-server`, the same stream
/// leaving the server's `write_timeout` alone.
fn sse_server<T: Transport>(
    builder: &dormant::Builder,
    write: OnWrite,
) -> crate::common::servers::Serve<T::Addr> {
    T::serve(
        builder,
        service_fn(move |req: Request<dormant::Body>| async move {
            let write = match req.uri().path() {
                "/events" => write,
                _ => OnWrite::Server,
            };
            Ok::<_, Infallible>(Response::new(events(&req, write, TICKS, 0, TICK).await))
        }),
    )
}

/// How a chunked response ended, as the client read it.
#[derive(Debug, PartialEq, Eq)]
enum Ending {
    /// Every chunk, then the last one.
    Complete,
    /// The connection closed before the last chunk.
    Cut,
}

/// Reads a chunked response to the end of the connection (`Connection:
/// close` requests): whether its last chunk came, and how many events.
fn read_chunked<S: Stream>(client: &mut Client<S>) -> (Ending, usize) {
    let mut all = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    while let Ok(n) = client.read_or_end(&mut chunk) {
        all.extend_from_slice(&chunk[..n]);
    }
    assert!(
        all.starts_with(b"HTTP/1.1 200 OK\r\n"),
        "{:?}",
        String::from_utf8_lossy(&all[..all.len().min(200)])
    );
    let events = all.windows(6).filter(|w| w == b"data: ").count();
    let body = if all.ends_with(b"\r\n0\r\n\r\n") {
        Ending::Complete
    } else {
        Ending::Cut
    };
    (body, events)
}

const EVENTS: &[u8] = b"GET /events HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

/// A handler that lifts its write deadline streams for 1.5 s under a
/// 300 ms `write_timeout`; after that connection parks, the same stream
/// without the lift is cut at the server's timeout: other requests keep
/// it, and nothing carries over a park.
fn a_lifted_stream_runs_past_write_timeout<T: Transport>() {
    let mut b = ladder(Duration::from_secs(1));
    b.write_timeout(TIMEOUT);
    let srv = sse_server::<T>(&b, OnWrite::Lift);
    let mut c = srv.connect();
    c.send(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n");
    let res = c.response();
    assert!(res.starts_with("HTTP/1.1 200 OK\r\n"), "{res}");
    assert_eq!(res.matches("data: ").count(), TICKS, "{res}");
    assert_eq!(srv.stats().write_timeouts, 0);
    // The same connection, parked since, with a request that leaves the
    // server's timeout alone.
    srv.wait_for("the connection to park", |s| {
        s.connections[Parked] == 1 && s.connections[Active] == 0
    });
    c.send(b"GET /events-server HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let (body, events) = read_chunked(&mut c);
    assert_eq!(body, Ending::Cut, "{events} events");
    assert!(events < TICKS, "{events} events");
    srv.wait_for("the write timeout counted", |s| s.write_timeouts == 1);
}

/// The same stream, whose handler leaves the deadline alone, is cut at
/// the server's `write_timeout`.
fn a_stream_that_keeps_the_timeout_is_cut_at_it<T: Transport>() {
    stream_is_cut::<T>(TIMEOUT, OnWrite::Server);
}

/// A handler that sets a write deadline shorter than the server's
/// `write_timeout` (10 s, far longer than the stream) has its stream cut
/// at its own deadline.
fn a_shorter_write_deadline_cuts_the_stream<T: Transport>() {
    stream_is_cut::<T>(LONG, OnWrite::Set(TIMEOUT));
}

/// A stream on a server with `write_timeout`, whose handler does what
/// `on_write` says, is cut before its last event, counted as a write
/// timeout.
fn stream_is_cut<T: Transport>(write_timeout: Duration, on_write: OnWrite) {
    let mut b = ladder(Duration::from_secs(1));
    b.write_timeout(write_timeout);
    let srv = sse_server::<T>(&b, on_write);
    let mut c = srv.connect();
    c.send(EVENTS);
    let (body, events) = read_chunked(&mut c);
    assert_eq!(body, Ending::Cut, "{events} events");
    assert!(events < TICKS, "{events} events");
    srv.wait_for("the write timeout counted", |s| s.write_timeouts == 1);
}

/// A handler that shortens its deadline while its stream waits for its
/// next event (the connection waits on the body, its timer set for the
/// server's 10 s) has the stream cut at once at its deadline: setting a
/// deadline wakes the connection, which moves its timer.
fn a_deadline_set_while_the_stream_waits_cuts_it<T: Transport>() {
    let mut b = ladder(Duration::from_secs(1));
    b.write_timeout(LONG);
    let srv = sse_server::<T>(&b, OnWrite::SetAfterOne(TIMEOUT));
    let mut c = srv.connect();
    c.send(EVENTS);
    assert_eq!(read_chunked(&mut c), (Ending::Cut, 1));
    srv.wait_for("the write timeout counted", |s| s.write_timeouts == 1);
}

/// A deadline that has passed stays passed (Go's rule): a handler that
/// lets its 100 ms write deadline pass before answering cannot lift it,
/// and its stream is cut, though the server has no `write_timeout`.
fn a_passed_deadline_is_not_extended<T: Transport>() {
    let srv = sse_server::<T>(&ladder(Duration::from_secs(1)), OnWrite::LiftTooLate(TICK));
    let mut c = srv.connect();
    c.send(EVENTS);
    let (ending, events) = read_chunked(&mut c);
    assert_eq!(ending, Ending::Cut, "{events} events");
    srv.wait_for("the write timeout counted", |s| s.write_timeouts == 1);
}

/// A handler that pushes its deadline 300 ms ahead at each event streams
/// for 1.5 s to a client that reads, past a 300 ms `write_timeout`.
fn a_stream_that_pushes_its_deadline_runs_while_the_client_reads<T: Transport>() {
    let mut b = ladder(Duration::from_secs(1));
    b.write_timeout(TIMEOUT);
    let srv = sse_server::<T>(&b, OnWrite::Push(TIMEOUT));
    let mut c = srv.connect();
    c.send(EVENTS);
    assert_eq!(read_chunked(&mut c), (Ending::Complete, TICKS));
    assert_eq!(srv.stats().write_timeouts, 0);
}

/// A client that stops reading a stream whose handler pushes its
/// deadline 300 ms ahead at each event, with no server `write_timeout`:
/// the socket's buffers fill, the body is no longer polled, the deadline
/// passes and the connection is closed. Events of 64 KiB, up to 32 MiB,
/// far more than the buffers hold.
fn a_client_that_stops_reading_is_closed_at_the_handlers_deadline<T: Transport>() {
    let srv = T::serve(
        &ladder(Duration::from_secs(1)),
        service_fn(|req: Request<dormant::Body>| async move {
            let body = events(&req, OnWrite::Push(TIMEOUT), 512, 64 * 1024, Duration::ZERO).await;
            Ok::<_, Infallible>(Response::new(body))
        }),
    );
    let mut c = srv.connect();
    c.send(EVENTS);
    // The client reads nothing until the server has given up.
    srv.wait_for("the write deadline closed the connection", |s| {
        s.write_timeouts == 1 && s.connections[Active] == 0
    });
    let (body, events) = read_chunked(&mut c);
    assert_eq!(body, Ending::Cut, "{events} events");
    assert!(events < 512, "{events} events");
}

/// What an uploading handler does with its read deadline.
#[derive(Clone, Copy, Debug)]
enum OnRead {
    Server,
    /// Sets it this far ahead before reading.
    Set(Duration),
}

/// Serves uploads: treats the read deadline as `read` says, reads the
/// body, answers with its length.
fn upload_server<T: Transport>(
    builder: &dormant::Builder,
    read: OnRead,
) -> crate::common::servers::Serve<T::Addr> {
    T::serve(
        builder,
        service_fn(move |req: Request<dormant::Body>| async move {
            let deadlines = Deadlines::of(&req).expect("HTTP/1 requests have deadlines");
            if let OnRead::Set(after) = read {
                deadlines.set_read_deadline(Instant::now() + after);
            }
            let text = match req.into_body().collect().await {
                Ok(body) => format!("read {}", body.to_bytes().len()),
                Err(e) => format!("error {e}"),
            };
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(text))))
        }),
    )
}

/// Sends an upload of 15 pieces, 100 ms apart; returns what the server
/// answered, or `None` if it closed the connection without an answer.
fn trickle<S: Stream>(client: &mut Client<S>) -> Option<String> {
    client.send(
        format!("POST /upload HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {TICKS}\r\n\r\n")
            .as_bytes(),
    );
    for _ in 0..TICKS {
        std::thread::sleep(TICK);
        if std::io::Write::write_all(&mut client.stream, b"x").is_err() {
            break; // closed: the answer, if any, tells
        }
    }
    let got = client.read_to_close();
    (!got.is_empty()).then_some(got)
}

/// A handler that extends its read deadline to 10 s reads an upload of
/// 1.5 s under a 300 ms `read_timeout`.
fn an_extended_read_deadline_lets_an_upload_finish<T: Transport>() {
    let mut b = ladder(Duration::from_secs(1));
    b.read_timeout(TIMEOUT);
    let srv = upload_server::<T>(&b, OnRead::Set(LONG));
    let got = trickle(&mut srv.connect()).expect("an answer");
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
    assert!(got.ends_with(&format!("read {TICKS}")), "{got}");
    assert_eq!(srv.stats().read_timeouts, 0);
}

/// The same upload, whose handler leaves the deadline alone, is cut at
/// the server's `read_timeout`.
fn an_upload_that_keeps_the_timeout_is_cut_at_it<T: Transport>() {
    let mut b = ladder(Duration::from_secs(1));
    b.read_timeout(TIMEOUT);
    let srv = upload_server::<T>(&b, OnRead::Server);
    assert_eq!(trickle(&mut srv.connect()), None);
    srv.wait_for("the read timeout counted", |s| s.read_timeouts == 1);
}

/// A handler that sets a read deadline shorter than the server's
/// `read_timeout` (10 s) has the upload cut at its own deadline.
fn a_shorter_read_deadline_cuts_the_upload<T: Transport>() {
    let mut b = ladder(Duration::from_secs(1));
    b.read_timeout(LONG);
    let srv = upload_server::<T>(&b, OnRead::Set(TIMEOUT));
    assert_eq!(trickle(&mut srv.connect()), None);
    srv.wait_for("the read timeout counted", |s| s.read_timeouts == 1);
}

/// A handle kept past its request does nothing to the next request on
/// the same connection (which never parks here): the first request's
/// handler keeps its handle, the second request's handler sets a short
/// deadline with it and streams for 1.5 s, uncut.
fn a_handle_kept_past_its_request_does_nothing<T: Transport>() {
    let mut b = dormant::Server::builder();
    b.park_after(None);
    let kept = Arc::new(Mutex::new(None::<Deadlines>));
    let srv = T::serve(
        &b,
        service_fn(move |req: Request<dormant::Body>| {
            let kept = kept.clone();
            async move {
                let body = match req.uri().path() {
                    "/keep" => {
                        *kept.lock().unwrap() = Deadlines::of(&req);
                        full("kept")
                    }
                    _ => {
                        let stale = kept.lock().unwrap().take();
                        let stale = stale.expect("kept by the first request");
                        stale.set_write_deadline(Instant::now() + Duration::from_millis(50));
                        events(&req, OnWrite::Server, TICKS, 0, TICK).await
                    }
                };
                Ok::<_, Infallible>(Response::new(body))
            }
        }),
    );
    let mut c = srv.connect();
    c.send(b"GET /keep HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(c.response().ends_with("\r\n\r\nkept"));
    c.send(EVENTS);
    assert_eq!(read_chunked(&mut c), (Ending::Complete, TICKS));
    assert_eq!(srv.stats().write_timeouts, 0);
}

/// HTTP/2 has no per-request deadlines (its streams have no read or write
/// timeout): `Deadlines::of` is `None` there, as for a request that did
/// not come from a dormant server; HTTP/1 requests have them.
fn http2_requests_have_no_deadlines<T: Transport>() {
    assert!(Deadlines::of(&Request::new(())).is_none());
    let srv = T::serve(
        &dormant::Server::builder(),
        service_fn(|req: Request<dormant::Body>| async move {
            let has = if Deadlines::of(&req).is_some() {
                "some"
            } else {
                "none"
            };
            Ok::<_, Infallible>(Response::new(full(has)))
        }),
    );
    let mut c = srv.connect();
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(c.response().ends_with("\r\n\r\nsome"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let io = T::connect_h2(&srv.addr).await;
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                .await
                .expect("h2 handshake");
        tokio::spawn(conn);
        let req = Request::get("http://localhost/")
            .body(http_body_util::Empty::<Bytes>::new())
            .unwrap();
        let res = tokio::time::timeout(CLIENT_TIMEOUT, send.send_request(req))
            .await
            .expect("response timed out")
            .expect("h2 response");
        assert_eq!(res.version(), http::Version::HTTP_2);
        let body = tokio::time::timeout(CLIENT_TIMEOUT, res.into_body().collect())
            .await
            .expect("body timed out")
            .expect("h2 body")
            .to_bytes();
        assert_eq!(body, "none");
    });
}

over_every_transport!(
    a_lifted_stream_runs_past_write_timeout,
    a_stream_that_keeps_the_timeout_is_cut_at_it,
    a_shorter_write_deadline_cuts_the_stream,
    a_stream_that_pushes_its_deadline_runs_while_the_client_reads,
    a_deadline_set_while_the_stream_waits_cuts_it,
    a_passed_deadline_is_not_extended,
    a_client_that_stops_reading_is_closed_at_the_handlers_deadline,
    an_extended_read_deadline_lets_an_upload_finish,
    an_upload_that_keeps_the_timeout_is_cut_at_it,
    a_shorter_read_deadline_cuts_the_upload,
    a_handle_kept_past_its_request_does_nothing,
    http2_requests_have_no_deadlines,
);
