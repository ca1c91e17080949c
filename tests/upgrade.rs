//! Upgrades: the raw stream and its leftover bytes handed to the handler,
//! nothing of the server kept, declined upgrades going on as HTTP, and
//! upgraded streams sleeping in the parking lot.
//!
//! The server's runtime outlives `serve` (`Serve`), so upgraded streams,
//! which outlive `serve`, can be observed after it returned.

use crate::common::client::{Client, get, ok};
use crate::common::drops::{DropCount, Dropped};
use crate::common::ladder::ladder;
use crate::common::rungs::client_runtime;
use crate::common::runtime::Servable;
use crate::common::servers::Serve;
use crate::common::sleepers::{SWITCHED, UPGRADE};
use crate::common::tcp::serve_with;
use crate::common::timeout::CLIENT_TIMEOUT;
use crate::common::transport::{Tcp, Transport};
use crate::common::upgrade_echo::{check_sleeping_echo, connect_upgraded, sleepy_service};
use crate::common::wait::wait;

use std::convert::Infallible;
use std::io::Read;
use std::pin::Pin;
use std::sync::{Arc, Mutex, mpsc};
use std::task::{Context, Poll};
use std::time::Duration;

use dormant::Rung::{Active, Dormant, Parked};
use dormant::upgrade::{self, Upgraded, Woken};
use http::{Method, Request, Response, StatusCode};
use http_body::Frame;
use hyper::body::Bytes;
use hyper::service::Service;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A response body that counts its drop.
struct TestBody {
    data: Option<Bytes>,
    _dropped: Option<Dropped>,
}

impl TestBody {
    fn new(text: impl Into<Bytes>) -> Self {
        TestBody {
            data: Some(text.into()).filter(|b| !b.is_empty()),
            _dropped: None,
        }
    }
}

impl http_body::Body for TestBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.data.take().map(|d| Ok(Frame::data(d))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
    }
}

fn switching(body: TestBody) -> Response<TestBody> {
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("connection", "upgrade")
        .header("upgrade", "echo")
        .body(body)
        .unwrap()
}

fn text(status: StatusCode, body: &str) -> Response<TestBody> {
    let mut res = Response::new(TestBody::new(body.to_owned()));
    *res.status_mut() = status;
    res
}

/// Echoes with the readiness reader until the peer closes.
async fn echo_pooled(mut stream: Upgraded) {
    while let Ok(Some(bytes)) = stream.read_pooled().await {
        if stream.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

/// Echoes through `AsyncRead` until the peer closes.
async fn echo_async_read(mut stream: Upgraded) {
    let mut buf = [0u8; 1024];
    while let Ok(n @ 1..) = stream.read(&mut buf).await {
        if stream.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// What the upgrade handler of [`upgrader`] reports.
type Events = Arc<Mutex<mpsc::Sender<String>>>;

fn report(events: &Events, event: String) {
    let _ = events.lock().unwrap().send(event);
}

/// The test handler:
///
/// - not an upgrade request: reports what `on` says, answers `200 plain`;
/// - `CONNECT`: tunnels into an echo (`AsyncRead`);
/// - `/decline`: asks for the upgrade, answers `200`, reports the error;
/// - `/drop`: asks for the upgrade, drops the future, answers `101`;
/// - any other path: upgrades and echoes with `read_pooled`.
fn upgrader(
    events: Events,
) -> impl Service<
    Request<dormant::Body>,
    Response = Response<TestBody>,
    Error = Infallible,
    Future = impl Send,
> + Clone
+ Send
+ 'static {
    hyper::service::service_fn(move |mut req: Request<dormant::Body>| {
        let events = events.clone();
        async move {
            let upgrade = match upgrade::on(&mut req) {
                Ok(upgrade) => upgrade,
                Err(e) => {
                    report(&events, format!("unsupported={} {e}", e.is_unsupported()));
                    return Ok(text(StatusCode::OK, "plain"));
                }
            };
            if req.method() == Method::CONNECT {
                tokio::spawn(async move {
                    let parts = upgrade.await.expect("CONNECT hand-off");
                    echo_async_read(parts.into()).await;
                });
                return Ok(text(StatusCode::OK, ""));
            }
            match req.uri().path() {
                "/decline" => {
                    tokio::spawn(async move {
                        let e = upgrade.await.expect_err("declined");
                        report(&events, format!("declined={} {e}", e.is_declined()));
                    });
                    Ok(text(StatusCode::OK, "declined"))
                }
                "/drop" => {
                    drop(upgrade);
                    Ok(switching(TestBody::new("")))
                }
                _ => {
                    tokio::spawn(async move {
                        match upgrade.await {
                            Ok(parts) => {
                                report(&events, format!("read_buf={:?}", parts.read_buf));
                                echo_pooled(parts.into()).await;
                            }
                            Err(e) => report(&events, format!("error: {e}")),
                        }
                    });
                    Ok(switching(TestBody::new("")))
                }
            }
        }
    })
}

fn events() -> (Events, mpsc::Receiver<String>) {
    let (tx, rx) = mpsc::channel();
    (Arc::new(Mutex::new(tx)), rx)
}

/// A server of [`upgrader`] that parks after 3 ms and never goes DORMANT,
/// and its handler's events.
fn upgrader_server() -> (Serve, mpsc::Receiver<String>) {
    let (ev, rx) = events();
    (serve_with(&ladder(None), upgrader(ev)), rx)
}

/// A server of `service`, whose upgraded streams echo, and a client whose
/// upgraded stream had an echo.
fn upgraded_echo<S: Servable<TestBody>>(service: S) -> (Serve, Client) {
    let srv = serve_with(&ladder(None), service);
    let mut c = srv.connect();
    c.send(UPGRADE.as_bytes());
    assert_eq!(c.response(), SWITCHED);
    c.send(b"echo");
    assert_eq!(c.read_exact_bytes(4), b"echo");
    (srv, c)
}

/// Sends `request`, which must be answered `200` with `body`: the
/// handler's event, which must start with `event`.
fn answered(
    c: &mut Client,
    rx: &mpsc::Receiver<String>,
    request: &[u8],
    body: &str,
    event: &str,
) -> String {
    c.send(request);
    assert_eq!(c.response(), ok(body));
    let seen = next(rx);
    assert!(seen.starts_with(event), "{seen}");
    seen
}

fn next(rx: &mpsc::Receiver<String>) -> String {
    rx.recv_timeout(CLIENT_TIMEOUT).expect("handler event")
}

#[test]
fn bytes_after_the_upgrade_request_come_out_first() {
    let (srv, rx) = upgrader_server();
    let mut c = srv.connect();
    c.send(format!("{UPGRADE}hello").as_bytes());
    assert_eq!(c.response(), SWITCHED);
    assert_eq!(next(&rx), r#"read_buf=b"hello""#);
    c.send(b" world");
    assert_eq!(c.read_exact_bytes(11), b"hello world");

    // Bytes sent before the 101 is read, in a write of their own.
    let mut c = srv.connect();
    c.send(UPGRADE.as_bytes());
    c.send(b"early ");
    assert_eq!(c.response(), SWITCHED);
    next(&rx);
    c.send(b"late");
    assert_eq!(c.read_exact_bytes(10), b"early late");
    srv.wait_for("two upgrades", |s| s.upgrades == 2);
}

#[test]
fn upgrade_after_parked_keep_alive_requests() {
    let (srv, rx) = upgrader_server();
    let mut c = srv.connect();
    for i in 1..=3 {
        c.send(get(&format!("/plain{i}")).as_bytes());
        assert_eq!(c.response(), ok("plain"));
        assert!(next(&rx).starts_with("unsupported=true"));
        srv.wait_for("parked", |s| s.parks == i && s.connections[Parked] == 1);
    }
    c.send(format!("{UPGRADE}xyz").as_bytes());
    assert_eq!(c.response(), SWITCHED);
    assert_eq!(next(&rx), r#"read_buf=b"xyz""#);
    c.send(b" after three requests");
    assert_eq!(c.read_exact_bytes(24), b"xyz after three requests");
    let s = srv.stats();
    assert_eq!((s.accepted, s.upgrades, s.requests), (1, 1, 4), "{s:?}");
}

#[test]
fn connect_tunnels() {
    let (srv, _rx) = upgrader_server();
    let mut c = srv.connect();
    c.send(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\ntunneled");
    assert_eq!(c.response_head(), "HTTP/1.1 200 OK\r\n\r\n");
    c.send(b" bytes");
    assert_eq!(c.read_exact_bytes(14), b"tunneled bytes");
    srv.wait_for("handed off", |s| {
        s.upgrades == 1 && s.connections[Active] == 0
    });
}

#[test]
fn declined_upgrade_goes_on_as_http() {
    let (srv, rx) = upgrader_server();
    let mut c = srv.connect();
    let decline =
        b"GET /decline HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n";
    answered(&mut c, &rx, decline, "declined", "declined=true");
    // The connection still speaks HTTP, parks, and wakes.
    c.send(get("/after").as_bytes());
    assert_eq!(c.response(), ok("plain"));
    srv.wait_for("parked", |s| s.connections[Parked] == 1);
    c.send(get("/again").as_bytes());
    assert_eq!(c.response(), ok("plain"));
    let s = srv.stats();
    assert_eq!((s.upgrades, s.requests >= 2), (0, true), "{s:?}");
}

#[test]
fn not_an_upgrade_request_fails_at_once() {
    let (srv, rx) = upgrader_server();
    let mut c = srv.connect();
    // `Upgrade` without `Connection: upgrade` is not an upgrade request.
    let request = b"GET /x HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\n\r\n";
    let event = answered(&mut c, &rx, request, "plain", "unsupported=true");
    assert!(event.contains("not an HTTP/1.1 upgrade request"), "{event}");
    // Nor is an HTTP/1.0 request.
    c.send(b"GET /x HTTP/1.0\r\nConnection: upgrade, keep-alive\r\nUpgrade: echo\r\n\r\n");
    assert!(c.response().contains("plain"));
    assert!(next(&rx).starts_with("unsupported=true"));
}

#[test]
fn dropped_upgrade_future_closes_the_connection() {
    let (srv, _rx) = upgrader_server();
    let mut c = srv.connect();
    c.send(b"GET /drop HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n");
    assert_eq!(c.read_to_close(), SWITCHED);
    srv.wait_for("closed", |s| {
        s.connections[Active] == 0 && s.connections[Parked] == 0
    });
    assert_eq!(srv.stats().upgrades, 0);
}

#[test]
fn http2_upgrade_fails_clearly() {
    let (srv, rx) = upgrader_server();
    let status = client_runtime().block_on(async {
        let (mut send, _conn) = Tcp::hyper_h2(&srv.addr).await;
        let req = Request::get("http://x/echo")
            .body(http_body_util::Empty::<Bytes>::new())
            .unwrap();
        tokio::time::timeout(CLIENT_TIMEOUT, send.send_request(req))
            .await
            .expect("h2 response timed out")
            .expect("h2 response")
            .status()
    });
    assert_eq!(status, StatusCode::OK, "the handler knew before answering");
    assert_eq!(
        next(&rx),
        "unsupported=true no upgrade: upgrades are not supported on HTTP/2 connections"
    );
    assert_eq!(srv.stats().upgrades, 0);
}

#[test]
fn after_the_hand_off_nothing_of_the_server_remains() {
    let request_ext = DropCount::default();
    let response_body = DropCount::default();
    // Every copy of the service holds it: the server keeps one, and a
    // connection serves a clone while ACTIVE.
    let service_copies = Arc::new(());
    let (stream_tx, stream_rx) = mpsc::channel::<()>();
    let stream_tx = Arc::new(Mutex::new(stream_tx));
    let service = {
        let request_ext = request_ext.clone();
        let response_body = response_body.clone();
        let held_by_service = service_copies.clone();
        hyper::service::service_fn(move |mut req: Request<dormant::Body>| {
            let _service = &held_by_service;
            req.extensions_mut().insert(request_ext.token());
            let upgrade = upgrade::on(&mut req).expect("an upgrade request");
            assert!(upgrade::on(&mut req).unwrap_err().is_unsupported(), "taken");
            let stream_tx = stream_tx.clone();
            tokio::spawn(async move {
                let parts = upgrade.await.expect("hand-off");
                let _ = stream_tx.lock().unwrap().send(());
                echo_pooled(parts.into()).await;
            });
            let body = TestBody {
                data: None,
                _dropped: Some(response_body.token()),
            };
            async move { Ok::<_, Infallible>(switching(body)) }
        })
    };
    let mut srv = serve_with(&ladder(None), service);
    let mut c = srv.connect();
    c.send(UPGRADE.as_bytes());
    assert_eq!(c.response(), SWITCHED);
    stream_rx.recv_timeout(CLIENT_TIMEOUT).expect("handed off");
    c.send(b"ping");
    assert_eq!(c.read_exact_bytes(4), b"ping");

    srv.wait_for("connection gone", |s| {
        s.upgrades == 1
            && s.connections[Active] == 0
            && s.connections[Parked] == 0
            && s.connections[Dormant] == 0
    });
    assert_eq!(srv.stats().pool.in_use, 0, "no pool buffer in use");
    wait("request and response dropped", || {
        request_ext.get() == 1 && response_body.get() == 1
    });
    // The server's own copy and this test's: the connection's clone went
    // with the hand-off, and the stream holds none.
    wait("the connection's service dropped", || {
        Arc::strong_count(&service_copies) == 2
    });

    // Shutdown neither waits for nor closes the upgraded stream, and the
    // service goes with the server: the stream held no reference to it.
    srv.stop();
    wait("service dropped", || {
        Arc::strong_count(&service_copies) == 1
    });
    c.send(b"still here");
    assert_eq!(c.read_exact_bytes(10), b"still here");
    // Process-wide: other tests' streams may hold one for a moment, an idle
    // stream never does.
    wait("upgrade buffers back", || upgrade::pool_stats().in_use == 0);
}

#[test]
fn shutdown_signal_reaches_upgraded_streams() {
    let service = hyper::service::service_fn(|mut req: Request<dormant::Body>| {
        let upgrade = upgrade::on(&mut req).expect("an upgrade request");
        tokio::spawn(async move {
            let parts = upgrade.await.expect("hand-off");
            let shutdown = parts.shutdown.clone();
            assert!(!shutdown.is_begun());
            let mut stream = Upgraded::from(parts);
            let closing = tokio::select! {
                () = shutdown.begun() => true,
                () = echo_pooled_ref(&mut stream) => false,
            };
            if closing {
                assert!(shutdown.is_begun());
                let _ = stream.write_all(b"going away").await;
            }
        });
        async { Ok::<_, Infallible>(switching(TestBody::new(""))) }
    });
    let (mut srv, mut c) = upgraded_echo(service);
    srv.stop();
    assert_eq!(c.read_to_close(), "going away");
}

async fn echo_pooled_ref(stream: &mut Upgraded) {
    while let Ok(Some(bytes)) = stream.read_pooled().await {
        if stream.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

#[test]
fn dormant_upgraded_stream_wakes_on_data_and_on_close() {
    // `dormant_after(None)`: upgraded streams sleep in the lot regardless.
    let b = ladder(None);
    let (service, s) = sleepy_service();
    let srv = serve_with(&b, service);
    let (rx, drops) = (&s.events, &s.drops);
    let mut c = srv.connect();
    // The leftover wakes it at once.
    c.send(format!("{UPGRADE}first").as_bytes());
    assert_eq!(c.response(), SWITCHED);
    assert_eq!(s.hand_off(), r#"handed off: unix=false read_buf=b"first""#);
    assert_eq!(c.read_exact_bytes(5), b"first");
    wait("asleep", || s.sleeping() == 1);
    srv.wait_for("connection gone", |s| {
        s.connections[Active] == 0 && s.connections[Parked] == 0
    });

    check_sleeping_echo(&mut c, &s);
    assert_eq!(drops.get(), 0, "the state lives while the stream sleeps");

    // Peer close: woken, state dropped exactly once.
    c.stream.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(s.next(), "eof");
    wait("state dropped", || drops.get() == 1);
    assert_eq!(s.sleeping(), 0);
    let mut rest = Vec::new();
    assert_eq!(c.stream.read_to_end(&mut rest).unwrap(), 0, "closed");
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(drops.get(), 1);
    assert!(rx.try_recv().is_err(), "called back once");
    wait("upgrade buffers back", || upgrade::pool_stats().in_use == 0);
}

#[test]
fn dormant_upgraded_streams_are_handed_back_at_shutdown() {
    let (service, s) = sleepy_service();
    let mut srv = serve_with(&ladder(None), service);
    let mut clients = connect_upgraded(&srv, 5);
    wait("all asleep", || s.sleeping() == 5);
    srv.stop();
    for c in &mut clients {
        assert_eq!(c.read_to_close(), "bye");
    }
    for _ in 0..5 {
        assert_eq!(s.next(), "shutdown");
    }
    wait("states dropped", || s.drops.get() == 5);
    assert_eq!(s.sleeping(), 0);

    // After shutdown the lot takes nothing: sleeping calls back at once.
    let lot = s.lot.lock().unwrap().clone().unwrap();
    let (tx, woken) = mpsc::channel();
    srv.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        let (stream, _) = accepted.unwrap();
        let stream = Upgraded::from(stream);
        lot.sleep(stream, move |w| async move {
            tx.send(matches!(w, Woken::Shutdown(_))).unwrap();
        });
        drop(client);
    });
    assert!(woken.recv_timeout(CLIENT_TIMEOUT).unwrap(), "Shutdown");
}

/// A stream upgraded through `hyper::upgrade::on` is the handler's, as
/// with hyper's own server: it keeps working after `serve` returned.
#[test]
fn hyper_upgraded_streams_outlive_serve() {
    let service = hyper::service::service_fn(|mut req: Request<dormant::Body>| {
        let on = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            let mut stream = hyper_util::rt::TokioIo::new(on.await.expect("hyper's upgrade"));
            let mut buf = [0; 64];
            while let Ok(n @ 1..) = stream.read(&mut buf).await {
                if stream.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        });
        async { Ok::<_, Infallible>(switching(TestBody::new(""))) }
    });
    let (mut srv, mut c) = upgraded_echo(service);
    srv.stop();
    c.send(b"after serve");
    assert_eq!(c.read_exact_bytes(11), b"after serve");
}
