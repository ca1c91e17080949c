//! Bounded connection lives over every transport: `max_connection_age`
//! closes connections where they wait (DORMANT, with a GOAWAY on HTTP/2)
//! and lets a request in flight finish first (HTTP/1.1: `Connection:
//! close`; HTTP/2: GOAWAY) unless its grace runs out;
//! `max_requests_per_connection` serves exactly that many requests, across
//! parks and dormancy, pipelined or on concurrent HTTP/2 streams.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::client::{End, get, ok};
use crate::common::h2_raw::{
    DATA, END_STREAM, GOAWAY, NO_ERROR, REFUSED_STREAM, RST_STREAM, RawClient, get_frame,
};
use crate::common::ladder::ladder;
use crate::common::rungs::{all_closed, client_runtime, sleep_until};
use crate::common::runtime::Servable;
use crate::common::services::{echo_service, gated, mirror_service};
use crate::common::timeout::CLIENT_TIMEOUT;
use crate::common::transport::{HyperSend, Transport, over_every_transport};
use crate::common::wait::wait;
use dormant::Rung;
use dormant::Rung::{Active, Dormant, Parked};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;
use tokio::sync::Semaphore;
use tokio::time::timeout;

over_every_transport!(
    age_closes_a_dormant_http1_connection,
    age_closes_a_dormant_h2_connection_with_a_goaway,
    age_lets_an_http1_request_in_flight_finish_with_connection_close,
    age_lets_an_h2_request_in_flight_finish_after_a_goaway,
    age_grace_cuts_a_request_in_flight,
    request_limit_is_exact_on_http1_across_dormancy,
    request_limit_is_exact_on_pipelined_http1_requests,
    request_limit_is_exact_on_concurrent_h2_streams,
);

/// A builder whose connections go DORMANT after 100 ms and live about
/// `age` (±10%).
fn aging(age: Duration) -> dormant::Builder {
    let mut b = ladder(Duration::from_millis(100));
    b.max_connection_age(age);
    b
}

/// The connection's age is long enough for it to be seen DORMANT first,
/// even on a loaded machine.
const AGE: Duration = Duration::from_secs(2);

/// A DORMANT HTTP/1.1 connection past its age is closed by the lot (a
/// clean close, over TLS after `close_notify`), counted once.
fn age_closes_a_dormant_http1_connection<T: Transport>() {
    let srv = T::serve(&aging(AGE), echo_service());
    let mut c = srv.connect();
    c.send(get("/").as_bytes());
    assert_eq!(c.response(), ok("GET / read="));
    srv.wait_for("the connection DORMANT", |s| s.connections[Dormant] == 1);
    assert_eq!(srv.stats().age_closes, 0, "closed before its age");
    let (rest, end) = c.read_to_end();
    assert_eq!((rest.as_str(), end), ("", End::Clean));
    srv.wait_for("closed by age, from DORMANT", |s| {
        s.age_closes == 1
            && s.connections[Dormant] == 0
            && s.connections[Active] + s.connections[Parked] == 0
    });
}

/// A DORMANT HTTP/2 connection past its age gets a GOAWAY (no error)
/// before the close, counted once.
fn age_closes_a_dormant_h2_connection_with_a_goaway<T: Transport>() {
    let srv = T::serve(&aging(AGE), mirror_service());
    client_runtime().block_on(async {
        let mut raw = RawClient::start(T::connect_h2(&srv.addr).await.into_inner()).await;
        let before = srv.stats();
        raw.get(1).await;
        sleep_until(&srv, Rung::Dormant, before);
        assert_eq!(srv.stats().age_closes, 0, "closed before its age");
        let frames = raw.until_closed().await;
        assert!(
            frames
                .iter()
                .any(|f| f.kind == GOAWAY && f.error_code() == NO_ERROR),
            "no GOAWAY before the close: {frames:?}"
        );
    });
    srv.wait_for("closed by age, from DORMANT", |s| s.age_closes == 1);
    all_closed(&srv);
}

/// The age passes while a request runs: the request is not cut; its
/// response says `Connection: close`, and the connection closes after it.
fn age_lets_an_http1_request_in_flight_finish_with_connection_close<T: Transport>() {
    let gate = Arc::new(Semaphore::new(0));
    let entered = Arc::new(AtomicUsize::new(0));
    let srv = T::serve(&aging(AGE), gated(gate.clone(), entered.clone()));
    let mut c = srv.connect();
    c.send(get("/slow").as_bytes());
    wait("the handler entered", || {
        entered.load(Ordering::SeqCst) == 1
    });
    srv.wait_for("the age passed during the request", |s| s.age_closes == 1);
    gate.add_permits(1);
    let (rest, end) = c.read_to_end();
    assert_eq!(
        (rest.as_str(), end),
        (
            "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 4\r\n\r\nslow",
            End::Clean
        )
    );
    all_closed(&srv);
}

/// The age passes while an HTTP/2 request runs: the client gets a GOAWAY
/// (no error), the request still completes, and then the connection
/// closes.
fn age_lets_an_h2_request_in_flight_finish_after_a_goaway<T: Transport>() {
    let gate = Arc::new(Semaphore::new(0));
    let entered = Arc::new(AtomicUsize::new(0));
    let srv = T::serve(&aging(AGE), gated(gate.clone(), entered.clone()));
    client_runtime().block_on(async {
        let mut raw = RawClient::start(T::connect_h2(&srv.addr).await.into_inner()).await;
        raw.send(&get_frame(1, "/slow")).await;
        wait("the handler entered", || {
            entered.load(Ordering::SeqCst) == 1
        });
        srv.wait_for("the age passed during the request", |s| s.age_closes == 1);
        loop {
            let f = raw.next().await.expect("closed before its GOAWAY");
            assert_ne!(f.stream, 1, "an answer before the gate opened: {f:?}");
            if f.kind == GOAWAY {
                assert_eq!(f.error_code(), NO_ERROR);
                break;
            }
        }
        gate.add_permits(1);
        let frames = raw.until_closed().await;
        let body: Vec<u8> = (frames.iter())
            .filter(|f| f.stream == 1 && f.kind == DATA)
            .flat_map(|f| f.payload.clone())
            .collect();
        assert_eq!(body, b"slow", "{frames:?}");
        assert!(
            frames
                .iter()
                .any(|f| f.stream == 1 && f.flags & END_STREAM != 0),
            "the response did not end: {frames:?}"
        );
    });
    all_closed(&srv);
}

/// With a grace, a request that outlives the age by more than its grace is
/// cut: the connection closes without a response, HTTP/1.1 or HTTP/2.
fn age_grace_cuts_a_request_in_flight<T: Transport>() {
    let gate = Arc::new(Semaphore::new(0));
    let entered = Arc::new(AtomicUsize::new(0));
    let mut b = aging(AGE);
    b.max_connection_age_grace(Duration::from_millis(200));
    let srv = T::serve(&b, gated(gate, entered.clone()));
    let mut c = srv.connect();
    c.send(get("/slow").as_bytes());
    wait("the handler entered", || {
        entered.load(Ordering::SeqCst) == 1
    });
    assert_eq!(c.read_to_close(), "", "a response to a cut request");
    client_runtime().block_on(async {
        let (send, conn) = T::hyper_h2(&srv.addr).await;
        let slow = get_h2(send, "/slow").await;
        assert!(slow.is_err(), "a response to a cut request: {slow:?}");
        let _ = timeout(CLIENT_TIMEOUT, conn)
            .await
            .expect("the connection did not close");
    });
    assert_eq!(entered.load(Ordering::SeqCst), 2);
    srv.wait_for("both closed by age", |s| s.age_closes == 2);
    all_closed(&srv);
}

/// A service that counts the requests it was called with, and says which
/// one each is in an `x-call` header, with no body (a body would shrink a
/// raw HTTP/2 client's window, which never grows back, and its connection
/// could not sleep).
fn counting(calls: Arc<AtomicUsize>) -> impl Servable<Full<Bytes>> {
    service_fn(move |_req: Request<dormant::Body>| {
        let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
        let res = Response::builder()
            .header("x-call", n)
            .body(Full::default());
        async move { Ok::<_, Infallible>(res.unwrap()) }
    })
}

/// The response of `counting` to its `n`th call, with `Connection: close`
/// if `last`.
fn call(n: usize, last: bool) -> String {
    let close = if last { "connection: close\r\n" } else { "" };
    format!("HTTP/1.1 200 OK\r\nx-call: {n}\r\n{close}content-length: 0\r\n\r\n")
}

/// `max_requests_per_connection(3)`: three requests, the connection DORMANT
/// between them; only the third's response says `Connection: close`, and
/// the connection then closes.
fn request_limit_is_exact_on_http1_across_dormancy<T: Transport>() {
    let calls = Arc::new(AtomicUsize::new(0));
    let mut b = ladder(Duration::from_millis(20));
    b.max_requests_per_connection(3);
    let srv = T::serve(&b, counting(calls.clone()));
    let mut c = srv.connect();
    for i in 1..=2 {
        let before = srv.stats().dormancies;
        c.send(get("/").as_bytes());
        assert_eq!(c.response(), call(i, false));
        srv.wait_for("DORMANT", |s| {
            s.dormancies > before && s.connections[Dormant] == 1
        });
    }
    c.send(get("/").as_bytes());
    let (rest, end) = c.read_to_end();
    assert_eq!((rest, end), (call(3, true), End::Clean));
    srv.wait_for("counted", |s| s.request_limit_closes == 1);
    all_closed(&srv);
}

/// Five requests pipelined in one write on a connection that may serve
/// three: three are answered, the last with `Connection: close`, and the
/// service never sees the other two.
fn request_limit_is_exact_on_pipelined_http1_requests<T: Transport>() {
    let calls = Arc::new(AtomicUsize::new(0));
    let mut b = ladder(None);
    b.max_requests_per_connection(3);
    let srv = T::serve(&b, counting(calls.clone()));
    let mut c = srv.connect();
    c.send(get("/").repeat(5).as_bytes());
    let (rest, end) = c.read_to_end();
    let expected = call(1, false) + &call(2, false) + &call(3, true);
    assert_eq!((rest, end), (expected, End::Clean));
    all_closed(&srv);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

/// HTTP/2 with a limit of four: one request, a sleep, then five streams
/// in one write. The service sees exactly four requests; the two streams
/// past the limit are reset with REFUSED_STREAM (safe to retry), and the
/// connection ends after a GOAWAY.
fn request_limit_is_exact_on_concurrent_h2_streams<T: Transport>() {
    let calls = Arc::new(AtomicUsize::new(0));
    let mut b = ladder(Duration::from_millis(20));
    b.max_requests_per_connection(4);
    let srv = T::serve(&b, counting(calls.clone()));
    client_runtime().block_on(async {
        let mut raw = RawClient::start(T::connect_h2(&srv.addr).await.into_inner()).await;
        let before = srv.stats();
        raw.get(1).await;
        sleep_until(&srv, Rung::Dormant, before);
        let five: Vec<u8> = [3, 5, 7, 9, 11]
            .into_iter()
            .flat_map(|stream| get_frame(stream, "/"))
            .collect();
        raw.send(&five).await;
        let frames = raw.until_closed().await;
        let ended =
            |stream| (frames.iter()).any(|f| f.stream == stream && f.flags & END_STREAM != 0);
        let refused = |stream| {
            (frames.iter()).any(|f| {
                f.stream == stream
                    && f.kind == RST_STREAM
                    && f.payload == REFUSED_STREAM.to_be_bytes()
            })
        };
        for stream in [3, 5, 7] {
            assert!(
                ended(stream) && !refused(stream),
                "stream {stream}: {frames:?}"
            );
        }
        for stream in [9, 11] {
            assert!(
                refused(stream) && !ended(stream),
                "stream {stream}: {frames:?}"
            );
        }
        assert!(
            frames
                .iter()
                .any(|f| f.kind == GOAWAY && f.error_code() == NO_ERROR),
            "no GOAWAY: {frames:?}"
        );
    });
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    srv.wait_for("counted", |s| s.request_limit_closes == 1);
    all_closed(&srv);
}

/// `GET path` on hyper's HTTP/2 client: the status and body, or the error.
async fn get_h2(mut send: HyperSend, path: &str) -> Result<(StatusCode, Bytes), hyper::Error> {
    let req = Request::get(format!("http://localhost{path}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let res = timeout(CLIENT_TIMEOUT, send.send_request(req))
        .await
        .expect("response timed out")?;
    let status = res.status();
    let body = timeout(CLIENT_TIMEOUT, res.into_body().collect())
        .await
        .expect("body timed out")?
        .to_bytes();
    Ok((status, body))
}
