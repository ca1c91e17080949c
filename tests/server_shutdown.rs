//! Graceful shutdown over every transport: idle connections (PARKED with
//! or without a task, DORMANT) close at once, in order (a FIN; over TLS,
//! `close_notify`), requests in flight finish or are cut at
//! `shutdown_grace`, new connections are refused, requests racing the
//! close are answered exactly or closed before a byte, and the serve
//! future resolves.

use std::future::IntoFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::client::{Client, End, Endpoint, get, ok};
use crate::common::ladder::ladder;
use crate::common::racing::{Raced, request_racing_a_close};
use crate::common::servers::Serve;
use crate::common::services::{echo_service, gated};
use crate::common::timeout::CLIENT_TIMEOUT;
use crate::common::transport::{Transport, over_every_transport};
use crate::common::wait::wait;
use dormant::Rung::{Active, Dormant, Parked};
use tokio::sync::Semaphore;

over_every_transport!(
    graceful_shutdown_closes_parked_and_dormant_connections,
    graceful_shutdown_closes_taskless_parked_connections,
    parked_close_at_once_in_flight_finishes_serve_returns,
    shutdown_grace_closes_requests_in_flight,
    shutdown_grace_closes_a_woken_request_in_flight,
    requests_racing_graceful_shutdown,
    handle_shutdown_closes_every_rung_and_requests_in_flight,
    handle_graceful_shutdown_cuts_requests_at_its_grace,
    handle_graceful_shutdown_lets_requests_finish,
);

fn wait_entered(entered: &AtomicUsize) {
    wait("handler entered", || entered.load(Ordering::SeqCst) > 0);
}

/// `n` connections to an echo server, each served one `GET /{i}`, kept open.
fn connect_served<A: Endpoint>(srv: &Serve<A>, n: usize) -> Vec<Client<A::Stream>> {
    (0..n)
        .map(|i| {
            let mut c = srv.connect();
            c.send(get(&format!("/{i}")).as_bytes());
            assert_eq!(c.response(), ok(&format!("GET /{i} read=")));
            c
        })
        .collect()
}

/// `n` connections to a `gated` server, each served one `GET /`, kept
/// open.
fn connect_hello<A: Endpoint>(srv: &Serve<A>, n: usize) -> Vec<Client<A::Stream>> {
    (0..n)
        .map(|_| {
            let mut c = srv.connect();
            c.send(get("/").as_bytes());
            assert_eq!(c.response(), ok("hello"));
            c
        })
        .collect()
}

/// `Handle::shutdown` from the test's thread, with connections on every
/// rung (DORMANT, PARKED, a request in flight that never finishes): every
/// one is closed at once, the count it gave was right, and `serve`
/// returns.
fn handle_shutdown_closes_every_rung_and_requests_in_flight<T: Transport>() {
    let gate = Arc::new(Semaphore::new(0));
    let entered = Arc::new(AtomicUsize::new(0));
    let mut srv = T::serve(
        &ladder(Duration::from_millis(250)),
        gated(gate, entered.clone()),
    );
    assert_eq!(srv.handle.connection_count(), 0);
    let mut dormant = connect_hello(&srv, 3);
    srv.wait_for("3 dormant", |s| {
        s.connections[Dormant] == 3 && s.connections[Parked] == 0
    });
    let mut parked = connect_hello(&srv, 2);
    let mut slow = srv.connect();
    slow.send(get("/slow").as_bytes());
    wait_entered(&entered);
    srv.wait_for("3 dormant, 2 parked, 1 active", |s| {
        s.connections[Dormant] == 3 && s.connections[Parked] == 2 && s.connections[Active] == 1
    });
    assert_eq!(srv.handle.connection_count(), 6);

    srv.handle.shutdown();
    assert_eq!(slow.read_to_close(), "", "the request in flight is cut");
    for c in dormant.iter_mut().chain(&mut parked) {
        assert_eq!(c.read_to_end(), (String::new(), End::Clean));
    }
    srv.wait_stopped();
    assert_eq!(srv.handle.connection_count(), 0);
    let s = srv.stats();
    assert_eq!(s.connections.total(), 0, "{s:?}");
    assert!(srv.addr.refuses(), "connect after shutdown");
}

/// `Handle::graceful_shutdown` with a grace of its own, on a server with
/// none (`shutdown_grace(None)` waits for ever): a request that does not
/// finish is cut at the handle's grace, and `serve` returns.
fn handle_graceful_shutdown_cuts_requests_at_its_grace<T: Transport>() {
    let entered = Arc::new(AtomicUsize::new(0));
    let mut b = ladder(None);
    b.shutdown_grace(None);
    let mut srv = T::serve(&b, gated(Arc::new(Semaphore::new(0)), entered.clone()));
    let mut idle = connect_hello(&srv, 1);
    let mut slow = srv.connect();
    slow.send(get("/slow").as_bytes());
    wait_entered(&entered);
    srv.handle
        .graceful_shutdown(Some(Duration::from_millis(50)));
    assert_eq!(idle[0].read_to_end(), (String::new(), End::Clean));
    // Never released: the handle's grace ends it.
    assert_eq!(slow.read_to_close(), "");
    srv.wait_stopped();
}

/// Within its grace, a request in flight finishes (with `connection:
/// close`) after `Handle::graceful_shutdown`; a later `graceful_shutdown`
/// changes nothing, and `serve` returns once it is answered.
fn handle_graceful_shutdown_lets_requests_finish<T: Transport>() {
    let gate = Arc::new(Semaphore::new(0));
    let entered = Arc::new(AtomicUsize::new(0));
    let mut b = ladder(None);
    b.shutdown_grace(Duration::from_millis(1));
    let mut srv = T::serve(&b, gated(gate.clone(), entered.clone()));
    let mut slow = srv.connect();
    slow.send(get("/slow").as_bytes());
    wait_entered(&entered);
    srv.handle.graceful_shutdown(Some(Duration::from_secs(60)));
    // Already shutting down with a 60 s grace: the builder's 1 ms does not
    // come back.
    srv.handle.graceful_shutdown(Some(Duration::from_millis(1)));
    srv.wait_for("the listener closed", |_| srv.addr.refuses());
    assert_eq!(srv.handle.connection_count(), 1);
    gate.add_permits(1);
    assert_eq!(
        slow.read_to_close(),
        "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 4\r\n\r\nslow"
    );
    srv.wait_stopped();
}

/// `Handle::listening`, awaited on another thread: the listener's address
/// once `serve` runs, and `None` for a call dropped before it started.
#[test]
fn handle_listening_says_where_or_none() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = dormant::Server::builder().build().unwrap();
    let on_another_thread = |handle: dormant::Handle| {
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async { tokio::time::timeout(CLIENT_TIMEOUT, handle.listening()).await })
                .expect("listening() did not resolve")
        })
    };
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let bound = listener.local_addr().unwrap();
        let handle = dormant::Handle::new();
        let asked = on_another_thread(handle.clone());
        let serving = tokio::spawn(
            server
                .serve(listener, echo_service())
                .with_handle(handle.clone())
                .into_future(),
        );
        assert_eq!(asked.join().unwrap(), Some(bound));
        handle.shutdown();
        tokio::time::timeout(CLIENT_TIMEOUT, serving)
            .await
            .expect("serve returned")
            .unwrap()
            .unwrap();

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let handle = dormant::Handle::new();
        let asked = on_another_thread(handle.clone());
        let never = server.serve(listener, echo_service()).with_handle(handle);
        drop(never.into_future());
        assert_eq!(asked.join().unwrap(), None);
    });
}

/// Every idle rung at once: DORMANT, PARKED without a task, and PARKED in
/// its task holding part of a request. Each is closed in order, `serve`
/// returns, and nothing listens any more.
fn graceful_shutdown_closes_parked_and_dormant_connections<T: Transport>() {
    let mut srv = T::serve(&ladder(Duration::from_millis(250)), echo_service());
    let mut dormant = connect_served(&srv, 5);
    srv.wait_for("5 dormant", |s| {
        s.connections[Dormant] == 5 && s.connections[Parked] == 0
    });
    let mut parked = connect_served(&srv, 5);
    let mut partial = srv.connect();
    partial.send(b"GET /partial HTTP/1.1\r\nHo");
    srv.wait_for("5 dormant, 6 parked", |s| {
        s.connections[Dormant] == 5
            && s.connections[Parked] == 6
            && s.parks == 11
            && s.connections[Active] == 0
    });

    srv.begin_shutdown();
    for c in dormant.iter_mut().chain(&mut parked).chain([&mut partial]) {
        assert_eq!(c.read_to_end(), (String::new(), End::Clean));
    }
    srv.wait_stopped();
    let s = srv.stats();
    assert_eq!(s.connections.total(), 0, "{s:?}");
    assert!(srv.addr.refuses(), "connect after shutdown");
}

/// Task-less PARKED connections (the lot's driver is the only task left)
/// are closed, and `serve` returns once every one is released.
fn graceful_shutdown_closes_taskless_parked_connections<T: Transport>() {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(2)).dormant_after(None);
    let mut srv = T::serve(&b, echo_service());
    let mut clients = connect_served(&srv, 30);
    srv.wait_for("all parked", |s| {
        s.connections[Parked] == 30 && s.parks == 30
    });
    srv.wait_tasks(1);
    srv.begin_shutdown();
    srv.wait_stopped();
    for c in &mut clients {
        assert_eq!(c.read_to_end(), (String::new(), End::Clean));
    }
    let s = srv.stats();
    assert_eq!(s.connections.total(), 0, "{s:?}");
}

/// Parked connections close at once, without waiting for a request in
/// flight, which finishes (with `connection: close`); the listener is gone
/// before parked connections are told to close; `serve` returns.
fn parked_close_at_once_in_flight_finishes_serve_returns<T: Transport>() {
    let gate = Arc::new(Semaphore::new(0));
    let entered = Arc::new(AtomicUsize::new(0));
    let mut srv = T::serve(&ladder(None), gated(gate.clone(), entered.clone()));

    let mut parked: Vec<_> = (0..100).map(|_| srv.connect()).collect();
    for c in &mut parked {
        c.send(get("/").as_bytes());
        assert_eq!(c.response(), ok("hello"));
    }
    srv.wait_for("100 parked", |s| {
        s.connections[Parked] == 100 && s.parks == 100
    });

    let mut slow = srv.connect();
    slow.send(get("/slow").as_bytes());
    wait_entered(&entered);

    srv.begin_shutdown();
    // The slow request is still held at the gate: every parked connection
    // must be closed without waiting for it.
    for (i, c) in parked.iter_mut().enumerate() {
        assert_eq!(c.read_to_close(), "", "parked connection {i}");
    }
    srv.wait_for("parked gone", |s| {
        s.connections[Parked] == 0 && s.connections[Active] == 1
    });
    assert!(srv.addr.refuses(), "connect after shutdown began");

    gate.add_permits(1);
    assert_eq!(
        slow.read_to_close(),
        "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 4\r\n\r\nslow"
    );
    srv.wait_stopped();
    let s = srv.stats();
    assert_eq!(
        (s.connections[Active], s.connections[Parked], s.requests),
        (0, 0, 101),
        "{s:?}"
    );
}

/// A request that does not finish within `shutdown_grace` has its
/// connection closed, and serve returns.
fn shutdown_grace_closes_requests_in_flight<T: Transport>() {
    let gate = Arc::new(Semaphore::new(0));
    let entered = Arc::new(AtomicUsize::new(0));
    let mut b = ladder(None);
    b.shutdown_grace(Duration::from_millis(50));
    let mut srv = T::serve(&b, gated(gate, entered.clone()));
    let mut slow = srv.connect();
    slow.send(get("/slow").as_bytes());
    wait_entered(&entered);
    srv.begin_shutdown();
    // Never released: the grace period ends it.
    assert_eq!(slow.read_to_close(), "");
    srv.wait_stopped();
    let s = srv.stats();
    assert_eq!(
        (s.connections[Active], s.connections[Parked]),
        (0, 0),
        "{s:?}"
    );
}

/// The same for a request on a connection woken from the lot, served
/// both ways: on one worker its first poll ran in the lot's task, before
/// its own task took it over; the end of the grace period must reach that
/// task, which nothing else wakes.
fn shutdown_grace_closes_a_woken_request_in_flight<T: Transport>() {
    for workers in [1, 2] {
        let gate = Arc::new(Semaphore::new(0));
        let entered = Arc::new(AtomicUsize::new(0));
        let mut b = ladder(None);
        b.shutdown_grace(Duration::from_millis(50));
        let mut srv = T::serve_with_workers(&b, gated(gate, entered.clone()), workers);
        let mut c = srv.connect();
        c.send(get("/").as_bytes());
        assert_eq!(c.response(), ok("hello"));
        srv.wait_for("parked", |s| s.connections[Parked] == 1 && s.parks == 1);
        c.send(get("/slow").as_bytes());
        wait_entered(&entered);
        srv.begin_shutdown();
        assert_eq!(c.read_to_close(), "", "{workers} workers");
        srv.wait_stopped();
        let s = srv.stats();
        assert_eq!(
            (s.connections[Active], s.connections[Parked], s.wakes),
            (0, 0, 1),
            "{workers} workers: {s:?}"
        );
    }
}

/// Graceful shutdown while DORMANT connections are woken by requests: the
/// lot's close of idle connections races their events. Each request is
/// answered exactly (with `connection: close` once the drain began) or its
/// connection closed without a byte of response; every idle connection is
/// closed, and `serve` returns.
fn requests_racing_graceful_shutdown<T: Transport>() {
    let mut b = ladder(Duration::from_millis(10));
    b.park_after(Duration::from_millis(2));
    let mut srv = T::serve(&b, echo_service());
    let mut clients = connect_served(&srv, 64);
    srv.wait_for("all dormant", |s| s.connections[Dormant] == 64);
    let (racing, idle) = clients.split_at_mut(32);
    let sent = AtomicUsize::new(0);
    let outcomes = std::thread::scope(|scope| {
        let sender = scope.spawn(|| {
            let mut outcomes = Vec::new();
            for (i, c) in racing.iter_mut().enumerate() {
                let path = format!("/racing/{i}");
                let body = format!("GET {path} read=");
                let closing = format!(
                    "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                outcomes.push(request_racing_a_close(c, &path, &[ok(&body), closing]));
                sent.fetch_add(1, Ordering::Relaxed);
            }
            outcomes
        });
        // The drain begins while the requests come.
        wait("a few requests answered", || {
            sent.load(Ordering::Relaxed) >= 4
        });
        srv.begin_shutdown();
        sender
            .join()
            .expect("every request answered exactly or closed")
    });
    assert!(
        outcomes[..4].iter().all(|o| *o == Raced::Answered),
        "requests before the drain are answered: {outcomes:?}"
    );
    for c in idle {
        assert_eq!(c.read_to_close(), "", "an idle connection is closed");
    }
    srv.wait_stopped();
}
