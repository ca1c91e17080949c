//! The whole idle ladder over a Unix domain socket (`dormant::UnixListener`
//! in a temporary directory): keep-alive across PARKED and DORMANT,
//! pipelined and split requests, the close check that reads ahead (a Unix
//! socket has no peek), descriptors released, timeouts, upgrades sleeping
//! in the lot, h2c, graceful shutdown, the listener's socket file, the peer
//! address, and a real client (curl).
//!
//! Tests of this binary run in parallel in one process, and one of them
//! counts the process's descriptors: it takes [`FDS`] exclusively, every
//! other test takes it shared.

mod common;
use common::*;

use std::convert::Infallible;
use std::io::ErrorKind;
use std::net::Shutdown;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use dormant::PeerAddr;
use dormant::upgrade;
use http::{Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};

/// Held shared by every test, exclusively by the one that counts the
/// process's open descriptors.
static FDS: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    FDS.read().unwrap_or_else(PoisonError::into_inner)
}

fn exclusive() -> RwLockWriteGuard<'static, ()> {
    FDS.write().unwrap_or_else(PoisonError::into_inner)
}

/// Parks after 3 ms, goes dormant after `dormant_after`.
fn ladder(dormant_after: impl Into<Option<Duration>>) -> dormant::Builder {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(3))
        .dormant_after(dormant_after);
    b
}

/// A tokio runtime for a test's own async client (or for binding).
fn client_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// 1. Keep-alive with think time: pauses that park (task-less, in the lot's
///    parked slab) and pauses that go dormant (the fd in the lot's poll);
///    every response exact, no pool buffer held while idle (I4).
#[test]
fn keep_alive_with_think_time_parks_and_goes_dormant() {
    let _fds = shared();
    let srv = serve_unix_with(&ladder(Duration::from_millis(50)), echo_service());
    let mut c = srv.connect();
    // Accepted connections start PARKED, holding no buffer.
    srv.wait_for("accept", |s| s.accepted == 1 && s.parked == 1);
    assert_eq!(srv.stats().pool.in_use, 0);

    c.send(get("/0").as_bytes());
    assert_eq!(c.response(), ok("GET /0 read="));
    srv.wait_for("first park", |s| {
        s.parks == 1 && s.parked == 1 && s.active == 0
    });
    assert_eq!(srv.stats().wakes, 0, "the first request is not a wake");

    // Pauses shorter than dormant_after: woken from PARKED.
    for i in 1..=2u64 {
        assert_eq!(srv.stats().pool.in_use, 0, "PARKED holds a buffer");
        c.send(get(&format!("/parked/{i}")).as_bytes());
        assert_eq!(c.response(), ok(&format!("GET /parked/{i} read=")));
        srv.wait_for("parked again", |s| {
            s.parks == 1 + i && s.parked == 1 && s.active == 0
        });
        let s = srv.stats();
        assert_eq!((s.wakes, s.dormancies, s.lot_wakes), (i, 0, 0), "{s:?}");
    }

    // Pauses longer than dormant_after: woken from DORMANT.
    for i in 1..=2u64 {
        srv.wait_for("dormant", |s| {
            s.dormant == 1 && s.parked == 0 && s.active == 0 && s.dormancies == i
        });
        assert_eq!(srv.stats().pool.in_use, 0, "DORMANT holds a buffer");
        c.send(get(&format!("/dormant/{i}")).as_bytes());
        assert_eq!(c.response(), ok(&format!("GET /dormant/{i} read=")));
        srv.wait_for("parked after the lot's wake", |s| {
            s.parks == 3 + i && s.lot_wakes == i && s.active == 0
        });
        let s = srv.stats();
        assert_eq!(s.wakes, 2 + i, "{s:?}");
    }
    srv.wait_for("dormant at the end", |s| {
        s.dormant == 1 && s.dormancies == 3
    });
    let s = srv.stats();
    assert_eq!(
        (s.accepted, s.requests, s.lot_closes, s.pool.in_use),
        (1, 5, 0, 0),
        "{s:?}"
    );
}

/// 2. Pipelined requests in one write, one of them with a body: exact
///    responses, in order; then the connection parks and serves more.
#[test]
fn pipelined_requests_in_one_write() {
    let _fds = shared();
    let srv = serve_unix_with(&ladder(None), echo_service());
    let mut c = srv.connect();
    c.send(
        b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\n\
          POST /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc\
          GET /3 HTTP/1.1\r\nHost: x\r\n\r\n\
          PUT /4 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
    );
    assert_eq!(c.response(), ok("GET /1 read="));
    assert_eq!(c.response(), ok("POST /2 read=abc"));
    assert_eq!(c.response(), ok("GET /3 read="));
    assert_eq!(c.response(), ok("PUT /4 read=hi"));
    srv.wait_for("park", |s| s.parks == 1 && s.parked == 1 && s.requests == 4);
    assert_eq!(srv.stats().pool.in_use, 0);
    // Nothing more arrives, and the parked connection serves the next.
    c.send(b"GET /5 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(
        c.read_to_close(),
        "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 12\r\n\r\nGET /5 read="
    );
}

/// 2. Requests split across a park: the first request of a connection, a
///    later one across a task-less park, and one across the DORMANT
///    boundary (the half wakes it; it waits PARKED in its task with the
///    half carried).
#[test]
fn requests_split_across_a_park() {
    let _fds = shared();
    let srv = serve_unix_with(&ladder(Duration::from_millis(50)), echo_service());
    check_first_request_split_across_a_park(&srv);

    srv.wait_for("split connections closed", |s| {
        s.active + s.parked + s.dormant == 0
    });
    let before = srv.stats();
    let mut c = srv.connect();
    c.send(get("/first").as_bytes());
    assert_eq!(c.response(), ok("GET /first read="));
    srv.wait_for("first park", |s| s.parks == before.parks + 1);
    c.send(b"POST /second HTTP/1.1\r\nHo");
    srv.wait_for("parked with a partial head", |s| {
        s.parks == before.parks + 2 && s.active == 0
    });
    assert_eq!(srv.stats().pool.in_use, 0);
    c.send(b"st: x\r\nContent-Length: 2\r\n\r\nhi");
    assert_eq!(c.response(), ok("POST /second read=hi"));

    srv.wait_for("dormant", |s| {
        s.dormant == 1 && s.dormancies == before.dormancies + 1
    });
    c.send(b"POST /third HTTP/1.1\r\nContent-Le");
    srv.wait_for("woken, parked with the half", |s| {
        s.lot_wakes == before.lot_wakes + 1 && s.dormant == 0 && s.parks == before.parks + 4
    });
    assert_eq!(srv.stats().pool.in_use, 0);
    c.send(b"ngth: 3\r\n\r\nabc");
    assert_eq!(c.response(), ok("POST /third read=abc"));
    srv.wait_for("dormant again", |s| {
        s.dormant == 1 && s.dormancies == before.dormancies + 2
    });
}

/// `/wait` answers `released` once the test releases it, and reports the
/// drop of its future ([`Probes::gate`]); anything else is echoed.
fn serve_gated(
    builder: &dormant::Builder,
) -> (ServeUnix, Receiver<()>, Receiver<&'static str>, Arc<Probes>) {
    let (gate, started, dropped) = Probes::new();
    let g = gate.clone();
    let srv = serve_unix_with(
        builder,
        service_fn(move |req: Request<dormant::Body>| {
            let g = g.clone();
            async move {
                if req.uri().path() != "/wait" {
                    return echo(req).await;
                }
                g.gate().await;
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"released"))))
            }
        }),
    );
    (srv, started, dropped, gate)
}

/// 2. Bytes that arrive while a request is answered: on a Unix socket the
///    look for the client's close reads them (at most 512 bytes) and hands
///    them to hyper before anything else the socket holds. A request with
///    a body longer than that read, and a head cut in two by it, are
///    served exactly, in order.
#[test]
fn requests_arriving_while_one_is_answered_are_served() {
    let _fds = shared();
    let (srv, started_rx, dropped, gate) = serve_gated(&ladder(None));
    let body: String = (0..2000u32)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let mut c = srv.connect();
    for round in 0..2u64 {
        c.send(WAIT);
        handler_started(&started_rx);
        // Arrives while /wait is in flight: the close check reads ahead.
        c.send(
            format!(
                "POST /next HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
        std::thread::sleep(Duration::from_millis(50));
        gate.release.notify_one();
        assert_eq!(c.response(), ok("released"), "round {round}");
        assert_eq!(c.response(), ok(&format!("POST /next read={body}")));
        // The second round runs on a connection woken after a park.
        srv.wait_for("parked", |s| s.parks == round + 1 && s.parked == 1);
    }

    // Only the start of a head arrives during the wait.
    c.send(WAIT);
    handler_started(&started_rx);
    c.send(b"GET /ha");
    std::thread::sleep(Duration::from_millis(50));
    gate.release.notify_one();
    assert_eq!(c.response(), ok("released"));
    c.send(b"lf HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response(), ok("GET /half read="));
    assert!(dropped.try_recv().is_err(), "nothing was cancelled");
    assert_eq!(srv.stats().pool.in_use, 0);
}

/// 2. A client that goes away while its request is answered has the
///    handler dropped, on a new connection, on one woken from PARKED and
///    on one woken from DORMANT; a half-close after a request answered at
///    once still gets the answer.
#[test]
fn client_close_while_a_request_is_answered_drops_the_handler() {
    let _fds = shared();
    let (srv, started_rx, dropped, _gate) = serve_gated(&ladder(Duration::from_millis(30)));

    let mut c = srv.connect();
    c.send(WAIT);
    handler_started(&started_rx);
    drop(c);
    assert_eq!(next_drop(&dropped), "handler");
    srv.wait_for("released", |s| s.active + s.parked + s.dormant == 0);

    for dormant in [false, true] {
        let mut c = srv.connect();
        c.send(get("/").as_bytes());
        assert_eq!(c.response(), ok("GET / read="));
        if dormant {
            srv.wait_for("dormant", |s| s.dormant == 1);
        } else {
            srv.wait_for("parked", |s| s.parked == 1 && s.active == 0);
        }
        c.send(WAIT);
        handler_started(&started_rx);
        c.stream.shutdown(Shutdown::Write).unwrap();
        assert_eq!(next_drop(&dropped), "handler", "dormant: {dormant}");
        assert_eq!(c.read_to_close(), "");
        srv.wait_for("released", |s| s.active + s.parked + s.dormant == 0);
    }

    let mut c = srv.connect();
    c.send(get("/at-once").as_bytes());
    c.stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(c.read_to_close(), ok("GET /at-once read="));
    assert!(dropped.try_recv().is_err(), "nothing else was dropped");
}

/// 3. Clients closing while their connections are DORMANT: the server's
///    descriptors are released. A Unix socket cannot be peeked, so the lot
///    hands each back to tokio and its first read finds the close: a lot
///    wake, not a lot close, and not a wake.
#[test]
fn client_close_while_dormant_releases_the_fd() {
    let _fds = exclusive();
    let srv = serve_unix_with(&ladder(Duration::from_millis(10)), echo_service());
    // Warm up the runtime (lazily opened descriptors), then the baseline.
    let mut c = srv.connect();
    c.send(b"GET /warm HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    c.read_to_close();
    drop(c);
    srv.wait_for("warm-up closed", |s| s.active + s.parked + s.dormant == 0);
    let baseline = fd_count();

    let mut clients: Vec<UnixClient> = (0..5).map(|_| srv.connect()).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        c.send(get(&format!("/{i}")).as_bytes());
        assert_eq!(c.response(), ok(&format!("GET /{i} read=")));
    }
    srv.wait_for("all dormant", |s| s.dormant == 5 && s.dormancies == 5);
    // The test's 5 sockets and the server's 5.
    assert_eq!(fd_count(), baseline + 10);
    drop(clients);
    srv.wait_for("all closed", |s| s.active + s.parked + s.dormant == 0);
    wait_for_fds(baseline, "after clients closed DORMANT connections");
    let s = srv.stats();
    assert_eq!(
        (s.lot_wakes, s.lot_closes, s.wakes, s.pool.in_use),
        (5, 0, 0, 0),
        "{s:?}"
    );
}

/// 4. The idle timeout closes a DORMANT Unix connection (and a task-less
///    PARKED one): the lot closes the fd at its deadline, the client reads
///    EOF.
#[test]
fn idle_timeout_closes_dormant_and_parked_connections() {
    let _fds = shared();
    let mut b = ladder(Duration::from_millis(10));
    b.idle_timeout(Duration::from_millis(200));
    let srv = serve_unix_with(&b, echo_service());
    let mut c = srv.connect();
    c.send(get("/").as_bytes());
    assert_eq!(c.response(), ok("GET / read="));
    srv.wait_for("dormant", |s| s.dormant == 1);
    assert_eq!(c.read_to_close(), "", "closed at the idle deadline");
    srv.wait_for("timed out", |s| {
        s.idle_timeouts == 1 && s.active + s.parked + s.dormant == 0
    });
    let s = srv.stats();
    assert_eq!(
        (s.dormancies, s.lot_wakes, s.lot_closes),
        (1, 0, 0),
        "{s:?}"
    );

    let mut b = ladder(None);
    b.idle_timeout(Duration::from_millis(80));
    let srv = serve_unix_with(&b, echo_service());
    let mut c = srv.connect();
    c.send(get("/").as_bytes());
    assert_eq!(c.response(), ok("GET / read="));
    srv.wait_for("parked", |s| s.parks == 1);
    assert_eq!(c.read_to_close(), "");
    srv.wait_for("timed out", |s| {
        s.idle_timeouts == 1 && s.active + s.parked + s.dormant == 0
    });
    assert_eq!(srv.stats().dormancies, 0);
}

/// 5. An upgraded Unix stream sleeps in the lot between messages, wakes on
///    data (no byte lost over many wakes), and on the client's close: a
///    Unix socket cannot be peeked, so the close wakes it as readable and
///    the read finds EOF.
#[test]
fn sleeping_upgraded_stream_wakes_on_data_and_on_close() {
    let _fds = shared();
    let (service, s) = sleepy_service();
    let srv = serve_unix_with(&ladder(None), service);
    let mut c = srv.connect();
    // The leftover wakes it at once.
    c.send(format!("{UPGRADE}first").as_bytes());
    assert_eq!(c.response(), SWITCHED);
    assert_eq!(s.hand_off(), r#"handed off: unix=true read_buf=b"first""#);
    assert_eq!(c.read_exact_bytes(5), b"first");
    wait("asleep", || s.sleeping() == 1);
    srv.wait_for("connection handed off", |st| {
        st.upgrades == 1 && st.active + st.parked + st.dormant == 0
    });

    check_sleeping_echo(&mut c, &s);
    assert_eq!(s.drops.get(), 0, "the state lives while asleep");

    // The client's close: woken, the read finds EOF, state dropped once.
    c.stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(s.next(), "readable, then a read found EOF");
    wait("state dropped", || s.drops.get() == 1);
    assert_eq!(s.sleeping(), 0);
    assert_eq!(c.read_to_close(), "", "the handler closed the stream");
    assert!(s.events.try_recv().is_err(), "called back once");
    wait("upgrade buffers back", || upgrade::pool_stats().in_use == 0);

    // A client that closes entirely, while its stream sleeps.
    let mut c = srv.connect();
    c.send(UPGRADE.as_bytes());
    assert_eq!(c.response(), SWITCHED);
    assert_eq!(s.hand_off(), r#"handed off: unix=true read_buf=b"""#);
    wait("asleep", || s.sleeping() == 1);
    drop(c);
    assert_eq!(s.next(), "readable, then a read found EOF");
    wait("state dropped", || s.drops.get() == 2);
    assert_eq!(s.sleeping(), 0);
}

/// 6. HTTP/2 with prior knowledge over the Unix socket, with hyper's
///    client: served by hyper's h2 server, never parked.
#[test]
fn h2c_prior_knowledge_over_a_unix_socket() {
    let _fds = shared();
    let srv = serve_unix_with(&ladder(Duration::from_millis(10)), echo_service());
    let rt = client_runtime();
    rt.block_on(async {
        let stream = tokio::net::UnixStream::connect(srv.path()).await.unwrap();
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .expect("h2 handshake");
        let conn = tokio::spawn(conn);
        let mut post = async |path: &str, body: &'static str| {
            let req = Request::post(format!("http://localhost{path}"))
                .body(Full::new(Bytes::from_static(body.as_bytes())))
                .unwrap();
            let res = tokio::time::timeout(CLIENT_TIMEOUT, send.send_request(req))
                .await
                .expect("response timed out")
                .expect("h2 response");
            let (parts, body) = res.into_parts();
            let body = tokio::time::timeout(CLIENT_TIMEOUT, body.collect())
                .await
                .expect("body timed out")
                .expect("h2 body")
                .to_bytes();
            (parts.status, parts.version, body)
        };
        for (path, body) in [("/h2/one", "first"), ("/h2/two", ""), ("/h2/three", "3")] {
            let (status, version, got) = post(path, body).await;
            assert_eq!((status, version), (StatusCode::OK, Version::HTTP_2));
            assert_eq!(got, format!("POST {path} read={body}"));
        }
        // Far longer than park_after and dormant_after: h2 stays ACTIVE.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let s = srv.stats();
        assert_eq!(
            (s.active, s.parked, s.dormant, s.parks),
            (1, 0, 0, 0),
            "{s:?}"
        );
        let (_, _, got) = post("/h2/four", "4").await;
        assert_eq!(got, "POST /h2/four read=4");
        drop(send);
        tokio::time::timeout(CLIENT_TIMEOUT, conn)
            .await
            .expect("client connection did not end")
            .unwrap()
            .unwrap();
    });
    srv.wait_for("h2 closed", |s| s.active + s.parked + s.dormant == 0);
    let s = srv.stats();
    assert_eq!(
        (s.accepted, s.requests, s.parks, s.wakes),
        (1, 4, 0, 0),
        "{s:?}"
    );
}

/// 7. Graceful shutdown closes PARKED (task-less, and in its task with a
///    partial request) and DORMANT Unix connections at once, serve
///    returns, and the socket file is gone.
#[test]
fn graceful_shutdown_closes_parked_and_dormant_connections() {
    let _fds = shared();
    let mut srv = serve_unix_with(&ladder(Duration::from_millis(250)), echo_service());
    let mut dormant: Vec<UnixClient> = (0..5).map(|_| srv.connect()).collect();
    for (i, c) in dormant.iter_mut().enumerate() {
        c.send(get(&format!("/d{i}")).as_bytes());
        assert_eq!(c.response(), ok(&format!("GET /d{i} read=")));
    }
    srv.wait_for("5 dormant", |s| s.dormant == 5 && s.parked == 0);
    let mut parked: Vec<UnixClient> = (0..5).map(|_| srv.connect()).collect();
    for (i, c) in parked.iter_mut().enumerate() {
        c.send(get(&format!("/p{i}")).as_bytes());
        assert_eq!(c.response(), ok(&format!("GET /p{i} read=")));
    }
    let mut partial = srv.connect();
    partial.send(b"GET /partial HTTP/1.1\r\nHo");
    srv.wait_for("5 dormant, 6 parked", |s| {
        s.dormant == 5 && s.parked == 6 && s.parks == 11 && s.active == 0
    });

    srv.begin_shutdown();
    for c in dormant.iter_mut().chain(&mut parked) {
        assert_eq!(c.read_to_close(), "");
    }
    assert_eq!(partial.read_to_close(), "");
    srv.wait_stopped();
    let s = srv.stats();
    assert_eq!((s.active, s.parked, s.dormant), (0, 0, 0), "{s:?}");
    assert!(
        !srv.path().exists(),
        "the socket file outlived the listener"
    );
    let refused = UnixStream::connect(srv.path());
    assert!(refused.is_err(), "connect after shutdown: {refused:?}");
}

/// 7. Graceful shutdown hands upgraded Unix streams asleep in the lot back
///    to their callbacks (`Woken::Shutdown`), which still can write. The
///    server runs on a runtime of the test's own: handed-off streams do
///    not hold `serve` back, and their callbacks run after it returned.
#[test]
fn graceful_shutdown_hands_back_sleeping_upgraded_streams() {
    let _fds = shared();
    let (service, s) = sleepy_service();
    let mut srv = Harness::start_unix(&ladder(Duration::from_millis(10)), service);
    let path = srv.addr.clone();

    let mut clients: Vec<UnixClient> = connect_upgraded(&srv, 3);
    for _ in 0..3 {
        assert!(s.hand_off().starts_with("handed off: unix=true"));
    }
    wait("all asleep", || s.sleeping() == 3);
    srv.shutdown();
    assert!(!path.exists(), "the socket file outlived the listener");
    for c in &mut clients {
        assert_eq!(c.read_to_close(), "bye");
    }
    for _ in 0..3 {
        assert_eq!(s.next(), "shutdown");
    }
    wait("states dropped", || s.drops.get() == 3);
    assert_eq!(s.sleeping(), 0);
}

/// 8. `dormant::UnixListener::bind` errors name the path, and the listener
///    removes its socket file when dropped, only if it is still its own.
#[test]
fn bind_errors_and_the_socket_file() {
    let _fds = shared();
    let rt = client_runtime();
    let _enter = rt.enter();
    let dir = TempDir::new();

    // The directory does not exist.
    let missing = dir.path.join("missing").join("http.sock");
    let err = dormant::UnixListener::bind(&missing).expect_err("no such directory");
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "the error names the path: {err}"
    );

    // A regular file is in the way: AddrInUse, and it is left alone.
    let file = dir.path.join("file.sock");
    std::fs::write(&file, "not a socket").unwrap();
    let err = dormant::UnixListener::bind(&file).expect_err("a file is in the way");
    assert_eq!(err.kind(), ErrorKind::AddrInUse, "{err}");
    assert!(
        err.to_string().contains(&file.display().to_string()),
        "the error names the path: {err}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not a socket");

    // A stale socket (a listener that did not remove its file) is left
    // alone too.
    let stale = dir.path.join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let err = dormant::UnixListener::bind(&stale).expect_err("a stale socket");
    assert_eq!(err.kind(), ErrorKind::AddrInUse, "{err}");
    assert!(is_socket(&stale), "the stale socket is still there");

    // Bound: the path and the address; dropped: the file is gone.
    let path = dir.path.join("own.sock");
    let listener = dormant::UnixListener::bind(&path).unwrap();
    assert_eq!(listener.path(), path);
    let local = dormant::Listener::local_addr(&listener).unwrap();
    assert_eq!(local.as_pathname(), Some(path.as_path()));
    assert!(is_socket(&path));
    drop(listener);
    assert!(!path.exists(), "dropping the listener removes its file");

    // After a server shuts down, the socket file it created is gone (its
    // directory is still there).
    let mut srv = serve_unix_with(&ladder(None), service_fn(hello));
    assert!(is_socket(srv.path()));
    srv.begin_shutdown();
    srv.wait_stopped();
    assert!(srv.dir().is_dir());
    assert!(!srv.path().exists(), "the socket file outlived the server");

    // Replaced by a regular file while serving: left alone at shutdown.
    let mut srv = serve_unix_with(&ladder(None), service_fn(hello));
    let mut c = srv.connect();
    std::fs::remove_file(srv.path()).unwrap();
    std::fs::write(srv.path(), "someone else's").unwrap();
    c.send(get("/").as_bytes());
    assert_eq!(c.response(), ok("hello"), "served after the file went");
    srv.begin_shutdown();
    assert_eq!(c.read_to_close(), "");
    srv.wait_stopped();
    assert_eq!(
        std::fs::read_to_string(srv.path()).unwrap(),
        "someone else's",
        "the listener removed a file it did not create"
    );

    // Replaced by another server's socket while serving: left alone, and
    // that server still gets connections.
    let mut srv = serve_unix_with(&ladder(None), service_fn(hello));
    std::fs::remove_file(srv.path()).unwrap();
    let other = std::os::unix::net::UnixListener::bind(srv.path()).unwrap();
    srv.begin_shutdown();
    srv.wait_stopped();
    assert!(is_socket(srv.path()), "the other socket file was removed");
    let _client = UnixStream::connect(srv.path()).expect("the other server");
    other.accept().expect("accepted by the other server");
}

fn is_socket(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// Answers with what the `PeerAddr` extension says: `unnamed`, the peer's
/// path, or `none`.
async fn peer(req: Request<dormant::Body>) -> Result<Response<Full<Bytes>>, Infallible> {
    let text = match req
        .extensions()
        .get::<PeerAddr<tokio::net::unix::SocketAddr>>()
    {
        _ if req.extensions().get::<PeerAddr>().is_some() => "a TCP address".to_owned(),
        None => "none".to_owned(),
        Some(PeerAddr(addr)) if addr.is_unnamed() => "unnamed".to_owned(),
        Some(PeerAddr(addr)) => match addr.as_pathname() {
            Some(path) => format!("path={}", path.display()),
            None => format!("other={addr:?}"),
        },
    };
    Ok(Response::new(Full::new(Bytes::from(text))))
}

/// 9. With `peer_addr(true)`, requests on a Unix listener carry
///    `PeerAddr<tokio::net::unix::SocketAddr>`: unnamed for a client that
///    did not bind, its path for one that did; on a new connection and on
///    one woken from DORMANT. Off by default.
#[test]
fn peer_addr_on_a_unix_listener() {
    let _fds = shared();
    let mut b = ladder(Duration::from_millis(10));
    b.peer_addr(true);
    let srv = serve_unix_with(&b, service_fn(peer));

    let mut c = srv.connect();
    c.send(get("/").as_bytes());
    assert_eq!(c.response(), ok("unnamed"), "new connection");
    srv.wait_for("dormant", |s| s.dormant == 1);
    c.send(get("/").as_bytes());
    assert_eq!(c.response(), ok("unnamed"), "woken from DORMANT");
    assert_eq!(srv.stats().lot_wakes, 1);
    drop(c);

    // A client bound to a path of its own.
    let client_path = srv.dir().join("client.sock");
    let rt = client_runtime();
    let stream = rt
        .block_on(async {
            let socket = tokio::net::UnixSocket::new_stream()?;
            socket.bind(&client_path)?;
            socket.connect(srv.path()).await
        })
        .expect("a named client");
    let stream = stream.into_std().unwrap();
    stream.set_nonblocking(false).unwrap();
    let mut c = Client::new(stream);
    let want = ok(&format!("path={}", client_path.display()));
    c.send(get("/").as_bytes());
    assert_eq!(c.response(), want, "new connection");
    srv.wait_for("dormant", |s| s.dormant == 1 && s.lot_wakes == 1);
    c.send(get("/").as_bytes());
    assert_eq!(c.response(), want, "woken from DORMANT");
    assert_eq!(srv.stats().lot_wakes, 2);

    let srv = serve_unix_with(&ladder(Duration::from_millis(10)), service_fn(peer));
    let mut c = srv.connect();
    c.send(get("/").as_bytes());
    assert_eq!(c.response(), ok("none"), "off by default");
}

/// 10. A real client: curl over the Unix socket, if it is installed.
#[test]
fn curl_over_the_unix_socket() {
    let _fds = shared();
    let found = std::process::Command::new("which")
        .arg("curl")
        .output()
        .is_ok_and(|out| out.status.success());
    if !found {
        eprintln!("curl is not installed: skipping curl_over_the_unix_socket");
        return;
    }
    let srv = serve_unix_with(&ladder(Duration::from_millis(10)), service_fn(hello));
    let curl = |args: &[&str]| {
        let out = std::process::Command::new("curl")
            .args([
                "--silent",
                "--show-error",
                "--max-time",
                "5",
                "--unix-socket",
            ])
            .arg(srv.path())
            .args(args)
            .output()
            .expect("run curl");
        assert!(
            out.status.success(),
            "curl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(curl(&["http://localhost/"]), "hello");
    // Two requests on one kept-alive connection.
    assert_eq!(
        curl(&["http://localhost/a", "http://localhost/b"]),
        "hellohello"
    );
    srv.wait_for("curl gone", |s| s.active + s.parked + s.dormant == 0);
    let s = srv.stats();
    assert_eq!((s.accepted, s.requests), (2, 3), "{s:?}");
}
