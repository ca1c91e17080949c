//! Graceful shutdown: parked connections close at once, requests in flight
//! finish, new connections are refused, and the serve future resolves.

mod common;
use common::*;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use tokio::sync::Semaphore;

/// `/slow` waits for a permit of `gate` (the test decides when it answers,
/// instead of a sleep); anything else answers `hello`.
fn gated(
    gate: Arc<Semaphore>,
    entered: Arc<AtomicUsize>,
) -> impl hyper::service::Service<
    Request<dormant::Body>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Send,
> + Send
+ Sync
+ 'static {
    service_fn(move |req: Request<dormant::Body>| {
        let gate = gate.clone();
        let entered = entered.clone();
        async move {
            if req.uri().path() == "/slow" {
                entered.fetch_add(1, Ordering::SeqCst);
                gate.acquire().await.unwrap().forget();
                return Ok(Response::new(Full::new(Bytes::from_static(b"slow"))));
            }
            Ok(Response::new(Full::new(Bytes::from_static(b"hello"))))
        }
    })
}

fn wait_entered(entered: &AtomicUsize) {
    let deadline = std::time::Instant::now() + CLIENT_TIMEOUT;
    while entered.load(Ordering::SeqCst) == 0 {
        assert!(std::time::Instant::now() < deadline, "handler not entered");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn parked_close_at_once_in_flight_finishes_serve_returns() {
    let gate = Arc::new(Semaphore::new(0));
    let entered = Arc::new(AtomicUsize::new(0));
    let mut srv = serve_with(&fast_park(), gated(gate.clone(), entered.clone()));

    let mut parked: Vec<Client> = (0..100).map(|_| srv.connect()).collect();
    for c in &mut parked {
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(
            c.response(),
            "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"
        );
    }
    srv.wait_for("100 parked", |s| s.parked == 100 && s.parks == 100);

    let mut slow = srv.connect();
    slow.send(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
    wait_entered(&entered);

    srv.begin_shutdown();
    // The slow request is still held at the gate: every parked connection
    // must be closed without waiting for it.
    for (i, c) in parked.iter_mut().enumerate() {
        assert_eq!(c.read_to_close(), "", "parked connection {i}");
    }
    srv.wait_for("parked gone", |s| s.parked == 0 && s.active == 1);
    // The listener is gone before parked connections are told to close.
    let refused = std::net::TcpStream::connect(srv.addr);
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused),
        "connect after shutdown began: {refused:?}"
    );

    gate.add_permits(1);
    assert_eq!(
        slow.read_to_close(),
        "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 4\r\n\r\nslow"
    );
    srv.wait_stopped();
    let s = srv.stats();
    assert_eq!((s.active, s.parked, s.requests), (0, 0, 101), "{s:?}");
}

/// A request that does not finish within `shutdown_grace` has its
/// connection closed, and serve returns.
#[test]
fn shutdown_grace_closes_requests_in_flight() {
    let gate = Arc::new(Semaphore::new(0));
    let entered = Arc::new(AtomicUsize::new(0));
    let mut b = fast_park();
    b.shutdown_grace(Duration::from_millis(50));
    let mut srv = serve_with(&b, gated(gate, entered.clone()));
    let mut slow = srv.connect();
    slow.send(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
    wait_entered(&entered);
    srv.begin_shutdown();
    // Never released: the grace period ends it.
    assert_eq!(slow.read_to_close(), "");
    srv.wait_stopped();
    let s = srv.stats();
    assert_eq!((s.active, s.parked), (0, 0), "{s:?}");
}

/// The same for a request on a connection woken from the lot, served
/// both ways: on one worker its first poll ran in the lot's task, before
/// its own task took it over; the end of the grace period must reach that
/// task, which nothing else wakes.
#[test]
fn shutdown_grace_closes_a_woken_request_in_flight() {
    for workers in [1, 2] {
        let gate = Arc::new(Semaphore::new(0));
        let entered = Arc::new(AtomicUsize::new(0));
        let mut b = fast_park();
        b.shutdown_grace(Duration::from_millis(50));
        let mut srv = serve_with_workers(&b, gated(gate, entered.clone()), workers);
        let mut c = srv.connect();
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(
            c.response(),
            "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"
        );
        srv.wait_for("parked", |s| s.parked == 1 && s.parks == 1);
        c.send(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
        wait_entered(&entered);
        srv.begin_shutdown();
        assert_eq!(c.read_to_close(), "", "{workers} workers");
        srv.wait_stopped();
        let s = srv.stats();
        assert_eq!(
            (s.active, s.parked, s.wakes),
            (0, 0, 1),
            "{workers} workers: {s:?}"
        );
    }
}

/// A connection holding part of a request while parked is idle too: it
/// is closed by shutdown.
#[test]
fn parked_with_a_partial_request_is_closed() {
    let mut srv = serve_with(&fast_park(), echo_service());
    let mut c = srv.connect();
    c.send(b"GET /partial HTTP/1.1\r\nHo");
    srv.wait_for("parked with carried bytes", |s| {
        s.parks == 1 && s.parked == 1
    });
    srv.begin_shutdown();
    assert_eq!(c.read_to_close(), "");
    srv.wait_stopped();
}
