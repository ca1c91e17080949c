//! Go's four timeouts and the connection limit, over real sockets: the
//! idle timeout on every rung over every transport, the others over TCP.
//!
//! Timeouts are short (hundreds of milliseconds) so the tests are quick;
//! every wait is bounded, and nothing asserts how long anything took but
//! that the idle deadline did not come early.

use std::convert::Infallible;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::client::ok;
use crate::common::ladder::ladder;
use crate::common::rungs::{client_runtime, none_open};
use crate::common::servers::Serve;
use crate::common::services::echo_service;
use crate::common::timeout::CLIENT_TIMEOUT;
use crate::common::transport::{Tcp, Transport, over_every_transport};
use bytes::Bytes;
use dormant::Rung::{Active, Dormant, Parked};
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Frame;
use hyper::service::service_fn;

/// Answers `200 hello` without touching the request body.
pub(crate) async fn hello(
    _req: Request<dormant::Body>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"hello"))))
}

/// Whether the server has closed `stream`: waits up to `wait` for a byte,
/// which must not come.
fn closed_within(stream: &mut TcpStream, wait: Duration) -> bool {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => panic!("unexpected byte from the server"),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => true,
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => false,
        Err(e) => panic!("read: {e}"),
    }
}

/// Sends a request head one byte every 100 ms (it never ends) until the
/// server closes the connection; meanwhile another client is served.
fn slowloris(builder: &dormant::Builder, after_a_request: bool) -> dormant::Stats {
    let srv = Tcp::serve(builder, hyper::service::service_fn(hello));
    let mut slow = srv.connect();
    if after_a_request {
        slow.send(b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(slow.response(), ok("hello"));
    }
    let mut normal = srv.connect();
    let head = b"GET / HTTP/1.1\r\nHost: x\r\n"
        .iter()
        .chain(b"X-Slow: 1\r\n".iter().cycle());
    // Bounded: 200 bytes is 20 s, far beyond the timeout under test.
    let mut closed = false;
    for &byte in head.take(200) {
        if slow.stream.write_all(&[byte]).is_err()
            || closed_within(&mut slow.stream, Duration::from_millis(100))
        {
            closed = true;
            break;
        }
        normal.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(
            normal.response(),
            ok("hello"),
            "the other client is served meanwhile"
        );
    }
    assert!(closed, "the slowloris connection was never closed");
    srv.wait_for("the timeout counted", |s| s.header_read_timeouts == 1);
    let stats = srv.stats();
    assert_eq!(stats.read_timeouts + stats.idle_timeouts, 0, "{stats:?}");
    // The other connection is still served.
    normal.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(normal.response(), ok("hello"));
    stats
}

fn header_timeout(park_after: Option<Duration>) -> dormant::Builder {
    let mut b = dormant::Server::builder();
    b.park_after(park_after)
        .header_read_timeout(Duration::from_millis(500));
    b
}

#[test]
fn slowloris_first_request_is_closed_by_header_read_timeout() {
    slowloris(&header_timeout(Some(Duration::from_millis(5))), false);
}

#[test]
fn slowloris_after_a_request_is_closed_while_parking_between_bytes() {
    let stats = slowloris(&header_timeout(Some(Duration::from_millis(5))), true);
    assert!(
        stats.parks >= 2,
        "the trickled head parked between bytes: {stats:?}"
    );
}

#[test]
fn slowloris_is_closed_on_a_connection_that_never_parks() {
    let stats = slowloris(&header_timeout(None), true);
    assert_eq!(stats.parks, 0, "{stats:?}");
}

#[test]
fn a_connection_that_sends_nothing_is_closed_by_header_read_timeout() {
    let srv = Tcp::serve(
        &header_timeout(Some(Duration::from_millis(5))),
        service_fn(hello),
    );
    let mut silent = srv.connect();
    assert!(closed_within(&mut silent.stream, CLIENT_TIMEOUT));
    srv.wait_for("the timeout counted", |s| {
        s.header_read_timeouts == 1 && s.connections[Parked] == 0
    });
}

#[test]
fn header_read_timeout_does_not_close_idle_keep_alive_connections() {
    // Idle keep-alive waits fall under the idle timeout (none here), not the
    // header read timeout: two waits much longer than the header timeout.
    let mut b = ladder(Duration::from_secs(1));
    b.header_read_timeout(Duration::from_millis(100));
    let srv = Tcp::serve(&b, service_fn(hello));
    let mut c = srv.connect();
    for _ in 0..2 {
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(c.response(), ok("hello"));
        assert!(!closed_within(&mut c.stream, Duration::from_millis(400)));
    }
    assert_eq!(srv.stats().header_read_timeouts, 0);
}

#[test]
fn slow_body_is_closed_by_read_timeout() {
    let mut b = ladder(Duration::from_secs(1));
    b.read_timeout(Duration::from_millis(500));
    let srv = Tcp::serve(&b, echo_service());
    let mut c = srv.connect();
    c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n\r\n");
    let mut closed = false;
    for _ in 0..200 {
        if c.stream.write_all(b"x").is_err()
            || closed_within(&mut c.stream, Duration::from_millis(100))
        {
            closed = true;
            break;
        }
    }
    assert!(closed, "the slow upload was never closed");
    srv.wait_for("the timeout counted", |s| {
        s.read_timeouts == 1 && s.connections[Active] == 0
    });
    // A quick upload on a new connection is fine.
    let mut c = srv.connect();
    c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
    assert_eq!(c.response(), ok("POST / read=abc"));
}

/// A response body of 1,024 frames of 64 KiB (64 MiB), more than any
/// socket buffer holds.
struct Big(usize);

impl http_body::Body for Big {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.0 == 0 {
            return std::task::Poll::Ready(None);
        }
        self.0 -= 1;
        std::task::Poll::Ready(Some(Ok(Frame::data(Bytes::from(vec![b'x'; 64 * 1024])))))
    }
}

/// A client asks for `/big` and reads nothing: the server gives up on the
/// response at the write timeout; small responses to others go on. With
/// `woken`, the client first makes a small request and waits until its
/// connection parked, so `/big` is served by a woken connection: its first
/// poll in the lot's task arms the timer, its own task must hold it.
fn a_client_that_never_reads(woken: bool) {
    let mut b = ladder(Duration::from_secs(1));
    b.write_timeout(Duration::from_millis(300));
    let srv = Tcp::serve(
        &b,
        service_fn(|req: Request<dormant::Body>| async move {
            Ok::<_, Infallible>(if req.uri().path() == "/big" {
                Response::new(http_body_util::Either::Left(Big(1024)))
            } else {
                Response::new(http_body_util::Either::Right(Full::new(Bytes::from(
                    "small",
                ))))
            })
        }),
    );
    let mut stuck = srv.connect();
    if woken {
        stuck.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(stuck.response(), ok("small"));
        srv.wait_for("parked", |s| {
            s.connections[Parked] == 1 && s.connections[Active] == 0
        });
    }
    stuck.send(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n");
    // The client reads nothing; the server gives up on the response.
    srv.wait_for("the write timeout", |s| {
        s.write_timeouts == 1 && s.connections[Active] == 0
    });
    assert_eq!(srv.stats().wakes, u64::from(woken));
    // Small responses are unaffected.
    let mut c = srv.connect();
    for _ in 0..3 {
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(c.response(), ok("small"));
    }
    assert_eq!(srv.stats().write_timeouts, 1);
}

#[test]
fn a_client_that_never_reads_is_closed_by_write_timeout() {
    a_client_that_never_reads(false);
}

#[test]
fn a_woken_client_that_never_reads_is_closed_by_write_timeout() {
    a_client_that_never_reads(true);
}

#[test]
fn idle_timeout_shuts_down_an_idle_h2_connection() {
    let mut b = dormant::Server::builder();
    b.idle_timeout(Duration::from_millis(300));
    let srv = Tcp::serve(&b, service_fn(hello));
    client_runtime().block_on(async {
        let (mut send, conn) = Tcp::hyper_h2(&srv.addr).await;
        let res = send
            .send_request(Request::new(Full::new(Bytes::new())))
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        drop(res);
        // The server's GOAWAY ends the client connection.
        tokio::time::timeout(CLIENT_TIMEOUT, conn)
            .await
            .expect("the idle h2 connection was not shut down")
            .unwrap()
            .unwrap();
    });
    srv.wait_for("the idle timeout", |s| {
        s.idle_timeouts == 1 && s.connections[Active] == 0
    });
}

/// With `max_connections = 2`, a third connection is accepted only once
/// one of the first two has closed, whatever state they wait in.
fn connection_limit(builder: &mut dormant::Builder, wait_state: impl Fn(&dormant::Stats) -> bool) {
    builder.max_connections(2);
    let srv = Tcp::serve(builder, service_fn(hello));
    let mut first = srv.connect();
    let mut second = srv.connect();
    for c in [&mut first, &mut second] {
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(c.response(), ok("hello"));
    }
    srv.wait_for("the first two waiting", &wait_state);
    // The third connects (the kernel's backlog takes it) and sends its
    // request, which is not served while the other two are open.
    let mut third = srv.connect();
    third.send(b"GET /third HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(!closed_within(
        &mut third.stream,
        Duration::from_millis(300)
    ));
    assert_eq!(srv.stats().accepted, 2);
    drop(first);
    third.stream.set_read_timeout(Some(CLIENT_TIMEOUT)).unwrap();
    assert_eq!(third.response(), ok("hello"));
    assert_eq!(srv.stats().accepted, 3);
    // The second is still served.
    second.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(second.response(), ok("hello"));
}

#[test]
fn max_connections_counts_parked_connections() {
    connection_limit(&mut ladder(None), |s| s.connections[Parked] == 2);
}

#[test]
fn max_connections_counts_dormant_connections() {
    connection_limit(&mut ladder(Duration::from_millis(10)), |s| {
        s.connections[Dormant] == 2
    });
}

#[test]
fn zero_timeouts_and_limits_are_config_errors() {
    for b in [
        dormant::Server::builder().header_read_timeout(Duration::ZERO),
        dormant::Server::builder().read_timeout(Duration::ZERO),
        dormant::Server::builder().write_timeout(Duration::ZERO),
        dormant::Server::builder().max_connections(0),
    ] {
        let err = b.build().expect_err("invalid config");
        assert!(err.is_config(), "{err}");
    }
}

over_every_transport!(
    idle_timeout_closes_an_active_connection,
    idle_timeout_closes_a_parked_connection,
    idle_timeout_closes_a_dormant_connection,
);

/// A connection that never parks is closed by its task at the idle
/// deadline.
fn idle_timeout_closes_an_active_connection<T: Transport>() {
    let mut b = dormant::Server::builder();
    b.park_after(None).idle_timeout(Duration::from_millis(300));
    let srv = T::serve(&b, service_fn(hello));
    let mut c = srv.connect();
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response(), ok("hello"));
    assert_eq!(c.read_to_close(), "", "closed by the idle timeout");
    srv.wait_for("the idle timeout", |s| s.idle_timeouts == 1 && none_open(s));
    let s = srv.stats();
    assert_eq!(s.parks, 0, "{s:?}");
}

/// Waits until the one connection of `srv` timed out idle and closed, the
/// lot closing it (it parked once, and went DORMANT `dormancies` times)
/// without handing it back to tokio.
fn closed_by_the_lot_at_its_idle_deadline<A>(srv: &Serve<A>, dormancies: u64) {
    srv.wait_for("timed out", |s| s.idle_timeouts == 1 && none_open(s));
    let s = srv.stats();
    assert_eq!(
        (s.parks, s.dormancies, s.lot_wakes, s.lot_closes),
        (1, dormancies, 0, 0),
        "{s:?}"
    );
}

/// The lot closes a task-less PARKED connection at its idle deadline (not
/// before), without handing it back to tokio.
fn idle_timeout_closes_a_parked_connection<T: Transport>() {
    let mut b = ladder(None);
    b.idle_timeout(Duration::from_millis(80));
    let srv = T::serve(&b, echo_service());
    let mut c = srv.connect();
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let sent = Instant::now();
    assert_eq!(c.response(), ok("GET / read="));
    srv.wait_for("parked", |s| s.connections[Parked] == 1 && s.parks == 1);
    assert_eq!(c.read_to_close(), "", "closed at the idle deadline");
    assert!(
        sent.elapsed() >= Duration::from_millis(75),
        "{:?}",
        sent.elapsed()
    );
    closed_by_the_lot_at_its_idle_deadline(&srv, 0);
}

/// The lot closes a DORMANT connection's fd at its idle deadline, without
/// handing it back to tokio.
fn idle_timeout_closes_a_dormant_connection<T: Transport>() {
    let mut b = ladder(Duration::from_millis(10));
    b.idle_timeout(Duration::from_millis(200));
    let srv = T::serve(&b, echo_service());
    let mut c = srv.connect();
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response(), ok("GET / read="));
    srv.wait_for("dormant", |s| s.connections[Dormant] == 1);
    assert_eq!(c.read_to_close(), "", "closed at the idle deadline");
    closed_by_the_lot_at_its_idle_deadline(&srv, 1);
}
