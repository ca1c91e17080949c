//! A client that goes away while its request is answered: the handler's
//! future (or its response body) is dropped, as on hyper, which Go users
//! know as the request context's cancellation and long polls rely on.
//! dormant looks for the close itself (hyper's own mid-request read is
//! off, see `src/io.rs`), so these pin that it still happens: on a new
//! connection, on one woken after a park, for a response body still
//! streaming; and that what the look finds instead of a close (a pipelined
//! request, or a half-close after a request answered at once) is served.

mod common;
use common::*;

use std::convert::Infallible;
use std::net::Shutdown;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::task::{Context, Poll};

use http::{Request, Response};
use http_body::Frame;
use http_body_util::{Either, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;

/// A response body: one chunk, then nothing, ever; reports its drop.
struct Trickle {
    first: Option<Bytes>,
    _probe: DropProbe,
}

impl http_body::Body for Trickle {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.first.take() {
            Some(chunk) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
            None => Poll::Pending,
        }
    }
}

/// `/wait` answers `released` once the test releases it and reports the
/// drop of its future; `/stream` answers with a [`Trickle`]; anything else
/// answers `hello` at once.
fn serve_probed(
    builder: &dormant::Builder,
) -> (Serve, Receiver<()>, Receiver<&'static str>, Arc<Probes>) {
    let (probes, started, dropped) = Probes::new();
    let p = probes.clone();
    let srv = serve_with(
        builder,
        service_fn(move |req: Request<dormant::Body>| {
            let p = p.clone();
            async move {
                let body = match req.uri().path() {
                    "/wait" => {
                        p.gate().await;
                        full("released")
                    }
                    "/stream" => Either::Right(Trickle {
                        first: Some(Bytes::from_static(b"first")),
                        _probe: p.probe("body"),
                    }),
                    _ => full("hello"),
                };
                Ok::<_, Infallible>(Response::new(body))
            }
        }),
    );
    (srv, started, dropped, probes)
}

/// An answer that is complete at once.
fn full(body: &'static str) -> Either<Full<Bytes>, Trickle> {
    Either::Left(Full::new(Bytes::from_static(body.as_bytes())))
}

fn ok(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[test]
fn closing_drops_a_waiting_handler() {
    let (srv, started, dropped, _probes) = serve_probed(&dormant::Server::builder());
    let mut c = srv.connect();
    c.send(WAIT);
    handler_started(&started);
    drop(c);
    assert_eq!(next_drop(&dropped), "handler");
    srv.wait_for("connection released", |s| s.active == 0 && s.parked == 0);
}

#[test]
fn half_closing_a_woken_connection_drops_its_waiting_handler() {
    let (srv, started, dropped, _probes) = serve_probed(&fast_park());
    let mut c = srv.connect();
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response(), ok("hello"));
    srv.wait_for("park", |s| s.parks >= 1);
    c.send(WAIT);
    handler_started(&started);
    c.stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(next_drop(&dropped), "handler");
    assert_eq!(c.read_to_close(), "");
    srv.wait_for("connection released", |s| s.active == 0 && s.parked == 0);
}

#[test]
fn closing_ends_a_streaming_response() {
    let (srv, _started, dropped, _probes) = serve_probed(&dormant::Server::builder());
    let mut c = srv.connect();
    c.send(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
    let head = c.response_head();
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    assert_eq!(c.read_exact_bytes(10), b"5\r\nfirst\r\n");
    drop(c);
    assert_eq!(next_drop(&dropped), "body");
    srv.wait_for("connection released", |s| s.active == 0 && s.parked == 0);
}

#[test]
fn a_request_pipelined_behind_a_waiting_one_is_served() {
    let (srv, started, dropped, probes) = serve_probed(&dormant::Server::builder());
    let mut c = srv.connect();
    c.send(WAIT);
    handler_started(&started);
    // Arrives while the first request waits: found by the look for a
    // close, and left for hyper.
    c.send(b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n");
    std::thread::sleep(std::time::Duration::from_millis(50));
    probes.release.notify_one();
    assert_eq!(c.response(), ok("released"));
    assert_eq!(c.response(), ok("hello"));
    assert!(dropped.try_recv().is_err(), "nothing was cancelled");
}

#[test]
fn a_request_answered_at_once_survives_a_half_close() {
    let (srv, _started, _dropped, _probes) = serve_probed(&dormant::Server::builder());
    let mut c = srv.connect();
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    c.stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(c.read_to_close(), ok("hello"));
}
