//! Clients that close while their connection is idle on any rung (or
//! active) leave nothing behind, over every transport: the gauges return
//! to zero and the server releases every file descriptor. The server runs
//! in-process, so the process's descriptors are counted: each test runs
//! alone in a process of its own ([`in_own_process`]).

use std::future::IntoFuture;
use std::time::Duration;

use crate::common::client::{Client, Endpoint, Stream, get, ok};
use crate::common::fds::{fd_count, wait_for_fds};
use crate::common::ladder::ladder;
use crate::common::process::in_own_process;
use crate::common::rungs::none_open;
use crate::common::servers::Serve;
use crate::common::services::echo_service;
use crate::common::transport::{Transport, over_every_transport};
use dormant::Rung::{Active, Dormant, Parked};

over_every_transport!(
    client_close_while_dormant_releases_the_fd,
    client_close_while_parked_releases_the_fd,
    clients_closing_leave_no_connection_and_no_fd,
);

/// Warms up the runtimes (lazily opened descriptors) with a request on a
/// connection that closes; returns the process's descriptors after.
fn warm_up<A: Endpoint>(srv: &Serve<A>) -> usize {
    let mut c = srv.connect();
    c.send(b"GET /warm HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    c.read_to_close();
    drop(c);
    srv.wait_for("warm-up closed", none_open);
    fd_count()
}

/// After a warm-up, `n` clients, each served one `GET /{i}`, whose
/// connections went DORMANT; returns the process's descriptors before them
/// and the server's stats then, and the clients.
fn dormant_clients<A: Endpoint>(
    srv: &Serve<A>,
    n: usize,
) -> (usize, dormant::Stats, Vec<Client<A::Stream>>) {
    let baseline = warm_up(srv);
    let base = srv.stats();
    let clients: Vec<_> = (0..n)
        .map(|i| {
            let mut c = srv.connect();
            c.send(get(&format!("/{i}")).as_bytes());
            assert_eq!(c.response(), ok(&format!("GET /{i} read=")));
            c
        })
        .collect();
    srv.wait_for("all dormant", |s| {
        s.connections[Dormant] == n && s.dormancies == base.dormancies + n as u64
    });
    // The test's sockets and the server's.
    assert_eq!(fd_count(), baseline + 2 * n);
    (baseline, base, clients)
}

/// Waits until the server has closed every connection, each of
/// `clients` reading its end with nothing before it; then only the
/// clients' sockets are left of them, and none once they are dropped.
fn closed_then_dropped<A, S: Stream>(srv: &Serve<A>, mut clients: Vec<Client<S>>, baseline: usize) {
    srv.wait_for("all closed", none_open);
    for c in &mut clients {
        assert_eq!(c.read_to_close(), "", "closed, with nothing before");
    }
    wait_for_fds(baseline + clients.len(), "after the clients closed");
    drop(clients);
    wait_for_fds(baseline, "after the clients dropped their sockets");
}

/// Clients closing while their connections are DORMANT, half of them with
/// a half-close (over TLS, `close_notify` and a FIN) and reading on, half
/// dropping their sockets: the server releases every descriptor. Over TCP
/// the lot's peek finds each close and the lot closes the connection; over
/// a Unix socket or TLS the lot hands each back to tokio (a lot wake, not
/// a wake), whose first read finds the end.
fn client_close_while_dormant_releases_the_fd<T: Transport>() {
    if !in_own_process() {
        return;
    }
    let srv = T::serve(&ladder(Duration::from_millis(10)), echo_service());
    let (baseline, base, mut clients) = dormant_clients(&srv, 6);

    let dropped = clients.split_off(3);
    let mut half_closed = clients;
    for c in &mut half_closed {
        c.stream.close_write().expect("half-close");
    }
    drop(dropped);
    // The server's 6 are closed; the test's 3 left.
    closed_then_dropped(&srv, half_closed, baseline);
    let s = srv.stats();
    let (lot_wakes, lot_closes) = if T::PEEKS { (0, 6) } else { (6, 0) };
    assert_eq!(
        (
            s.lot_wakes - base.lot_wakes,
            s.lot_closes - base.lot_closes,
            s.wakes - base.wakes,
            s.pool.in_use
        ),
        (lot_wakes, lot_closes, 0, 0),
        "{s:?}"
    );
}

/// A client closing while its connection is PARKED without a task: the
/// server releases the descriptor (exact accounting: with a limit of one,
/// the next connection is served only once the first was released), and
/// a close is not a wake.
fn client_close_while_parked_releases_the_fd<T: Transport>() {
    if !in_own_process() {
        return;
    }
    let mut b = ladder(None);
    b.max_connections(1);
    let srv = T::serve(&b, echo_service());
    let baseline = warm_up(&srv);
    let base = srv.stats();
    for round in 1..=3u64 {
        let mut c = srv.connect();
        c.send(get("/").as_bytes());
        assert_eq!(c.response(), ok("GET / read="));
        srv.wait_for("parked", |s| {
            s.connections[Parked] == 1 && s.parks == base.parks + round
        });
        srv.wait_tasks(1);
        // The test's socket and the server's.
        assert_eq!(fd_count(), baseline + 2);
        drop(c);
        srv.wait_for("closed", none_open);
        wait_for_fds(baseline, "after the client closed");
    }
    let s = srv.stats();
    assert_eq!(s.wakes, base.wakes, "a close is not a wake: {s:?}");
}

/// Clients that close on every rung and in the middle of a request: parked
/// after a request, parked holding part of one, silent since they
/// connected, and active with a handler waiting for the body.
fn clients_closing_leave_no_connection_and_no_fd<T: Transport>() {
    if !in_own_process() {
        return;
    }
    let srv = T::serve(&ladder(None), echo_service());
    let baseline = warm_up(&srv);

    // Parked after a request.
    let mut clients: Vec<Client<_>> = (0..20).map(|_| srv.connect()).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        c.send(get(&format!("/{i}")).as_bytes());
        c.response();
    }
    srv.wait_for("20 parked", |s| {
        s.connections[Parked] == 20 && s.parks == 20
    });
    // The test's own 20 sockets plus the server's 20.
    assert_eq!(fd_count(), baseline + 40);
    drop(clients);
    srv.wait_for("all closed", none_open);
    wait_for_fds(baseline, "after closing parked connections");
    assert_eq!(srv.stats().pool.in_use, 0);

    // Parked holding part of a request.
    let mut c = srv.connect();
    c.send(b"GET /x HTTP/1.1\r\nHo");
    srv.wait_for("parked with carried bytes", |s| {
        s.parks == 21 && s.connections[Parked] == 1
    });
    drop(c);
    srv.wait_for("closed", none_open);
    wait_for_fds(baseline, "after closing a connection with carried bytes");

    // Never sent a request.
    let c = srv.connect();
    srv.wait_for("accepted", |s| s.connections[Parked] == 1);
    drop(c);
    srv.wait_for("closed", none_open);
    wait_for_fds(baseline, "after closing a silent connection");

    // Active: the handler waits for a body that never comes.
    let mut c = srv.connect();
    c.send(b"POST /wait HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc");
    srv.wait_for("active", |s| s.connections[Active] == 1);
    drop(c);
    srv.wait_for("closed", none_open);
    wait_for_fds(baseline, "after closing an active connection");
    assert_eq!(srv.stats().pool.in_use, 0);
}

/// TLS only: clients that send `close_notify` alone, their sockets left
/// open, while their connections are DORMANT. A TLS session cannot tell a
/// close without decrypting, so the lot hands each back to tokio (a lot
/// wake), whose first read finds the end; the server closes its end and
/// releases every descriptor.
#[cfg(any(feature = "tls", feature = "tls-ring"))]
#[test]
fn close_notify_alone_while_dormant_releases_the_fd() {
    use crate::common::tls::block;
    use crate::common::transport::Tls;
    use tokio::io::AsyncWriteExt;

    if !in_own_process() {
        return;
    }
    let srv = Tls::serve(&ladder(Duration::from_millis(10)), echo_service());
    let (baseline, base, mut clients) = dormant_clients(&srv, 3);
    for c in &mut clients {
        c.stream.tls.get_mut().1.send_close_notify();
        block("flush close_notify", c.stream.tls.flush()).expect("flush close_notify");
    }
    closed_then_dropped(&srv, clients, baseline);
    let s = srv.stats();
    assert_eq!(
        (
            s.lot_wakes - base.lot_wakes,
            s.lot_closes,
            s.wakes - base.wakes,
            s.pool.in_use
        ),
        (3, 0, 0, 0),
        "{s:?}"
    );
}

/// Serve calls that end while their runtime goes on leave no descriptor
/// behind: each call's parking lot (its epoll fd, registered with tokio)
/// is closed when the call ends. Three calls, one after another on one
/// runtime, each serving a request and shut down gracefully: after each,
/// the process's descriptors come back to what they were before the first
/// (the runtime's). They are waited for: the last connection's socket and
/// the lot may close a moment after `serve` returned (counted right after
/// the calls, a run once saw 14, 14, 12), and a descriptor a call left
/// open would never close.
#[test]
fn serve_calls_that_end_close_their_lot() {
    if !in_own_process() {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let before = fd_count();
    for round in 0..3 {
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let server = dormant::Server::builder().build().unwrap();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let serving = tokio::spawn(
                server
                    .serve(listener, echo_service())
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .into_future(),
            );
            let client = tokio::task::spawn_blocking(move || {
                let mut c = addr.connect();
                c.send(get(&format!("/{round}")).as_bytes());
                assert_eq!(c.response(), ok(&format!("GET /{round} read=")));
            });
            client.await.unwrap();
            let _ = stop.send(());
            serving.await.unwrap().unwrap();
        });
        wait_for_fds(before, &format!("after serve call {round}"));
    }
}
