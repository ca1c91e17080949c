//! Task-less PARKED connections, over every transport: an idle HTTP/1
//! connection with nothing carried waits in the parking lot with its
//! tokio registration (and a TLS session) and no task; the lot hands it to
//! a new task when bytes arrive, moves it to DORMANT after
//! `dormant_after`. A request in pieces wakes it, and it waits for the
//! rest in its task; a wake whose read finds nothing (urgent data) sends
//! it back to the lot; neither keeps a worker busy (the readiness cell it
//! wakes with waits for the next bytes), and another client is served
//! meanwhile. (Its idle deadline: tests/timeouts.rs; its client's close:
//! tests/conn_fds.rs; shutdown: tests/server_shutdown.rs.)

use std::time::Duration;

use crate::common::client::{Client, End, Endpoint, Stream, get, ok};
use crate::common::servers::Serve;
use crate::common::services::{echo, echo_service};
use crate::common::transport::{Transport, over_every_transport};
use dormant::Rung;
use dormant::Rung::{Active, Dormant, Parked};

over_every_transport!(
    parked_connections_have_no_task_and_wake,
    taskless_parked_goes_dormant_then_wakes,
    back_to_back_requests_racing_the_parked_slab,
    parked_slab_freed_and_rebuilt,
    a_long_sleeper_parks_at_once_and_a_quick_return_waits_park_after,
    a_long_sleeper_whose_head_comes_in_pieces_still_parks_at_once,
    a_woken_service_that_waits_is_answered,
    a_request_in_pieces_wakes_a_parked_connection_and_keeps_no_worker_busy,
    a_wake_that_brings_nothing_parks_again_and_keeps_no_worker_busy,
);

/// Parks after 2 ms and never goes dormant.
fn parked_only() -> dormant::Builder {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(2)).dormant_after(None);
    b
}

fn parked_connections_have_no_task_and_wake<T: Transport>() {
    let srv = T::serve(&parked_only(), echo_service());
    let mut clients: Vec<_> = (0..20).map(|_| srv.connect()).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        c.send(get(&format!("/{i}")).as_bytes());
        assert_eq!(c.response(), ok(&format!("GET /{i} read=")));
    }
    srv.wait_for("20 parked", |s| {
        s.connections[Parked] == 20 && s.parks == 20
    });
    // The lot's driver is the only task left.
    srv.wait_tasks(1);
    for round in 1..=3u64 {
        for (i, c) in clients.iter_mut().enumerate() {
            c.send(get(&format!("/{round}/{i}")).as_bytes());
            assert_eq!(c.response(), ok(&format!("GET /{round}/{i} read=")));
        }
        srv.wait_for("parked again", |s| {
            s.connections[Parked] == 20 && s.parks == 20 * (round + 1) && s.connections[Active] == 0
        });
        srv.wait_tasks(1);
        let s = srv.stats();
        assert_eq!(s.wakes, 20 * round, "{s:?}");
        assert_eq!(
            (s.connections[Dormant], s.dormancies, s.lot_wakes),
            (0, 0, 0),
            "{s:?}"
        );
        assert_eq!(s.pool.in_use, 0, "{s:?}");
    }
}

/// Serves the echo service with `b`; a connection makes one request
/// (`/1`) and parks task-less.
fn parked_after_one_request<T: Transport>(
    b: &dormant::Builder,
) -> (Serve<T::Addr>, Client<<T::Addr as Endpoint>::Stream>) {
    let srv = T::serve(b, echo_service());
    let mut c = srv.connect();
    c.send(get("/1").as_bytes());
    assert_eq!(c.response(), ok("GET /1 read="));
    srv.wait_for("parked", |s| s.connections[Parked] == 1 && s.parks == 1);
    srv.wait_tasks(1);
    (srv, c)
}

fn taskless_parked_goes_dormant_then_wakes<T: Transport>() {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(2))
        .dormant_after(Duration::from_millis(30));
    let (srv, mut c) = parked_after_one_request::<T>(&b);
    srv.wait_for("dormant", |s| {
        s.connections[Dormant] == 1 && s.connections[Parked] == 0
    });
    c.send(get("/2").as_bytes());
    assert_eq!(c.response(), ok("GET /2 read="));
    srv.wait_for("dormant again", |s| {
        s.connections[Dormant] == 1 && s.dormancies == 2
    });
    let s = srv.stats();
    assert_eq!(
        (
            s.lot_wakes,
            s.wakes,
            s.connections[Parked],
            s.connections[Active]
        ),
        (1, 1, 0, 0)
    );
}

/// `park_after` and `dormant_after` tiny: bytes arrive while connections
/// enter the parked slab, wake from it, and move from it to the lot's poll.
/// Every response must be exact, and the accounting must come back to zero
/// (shutdown returns only once every connection is released).
fn back_to_back_requests_racing_the_parked_slab<T: Transport>() {
    for dormant_after in [None, Some(Duration::from_millis(1)), Some(Duration::ZERO)] {
        let mut b = dormant::Server::builder();
        b.park_after(Duration::ZERO).dormant_after(dormant_after);
        let mut srv = T::serve(&b, echo_service());
        let threads: Vec<_> = (0..20)
            .map(|t| {
                let addr = srv.addr.clone();
                std::thread::spawn(move || {
                    let mut c = addr.connect();
                    for i in 0..300 {
                        let path = format!("/{t}/{i}");
                        c.send(get(&path).as_bytes());
                        assert_eq!(c.response(), ok(&format!("GET {path} read=")));
                        if i % 7 == t % 7 {
                            std::thread::sleep(Duration::from_micros(300 * (i % 5) as u64));
                        }
                    }
                    c
                })
            })
            .collect();
        let clients: Vec<_> = threads
            .into_iter()
            .map(|t| t.join().expect("every response exact"))
            .collect();
        srv.wait_for("all idle", |s| {
            s.connections[Active] == 0 && s.connections[Parked] + s.connections[Dormant] == 20
        });
        let s = srv.stats();
        eprintln!("dormant_after {dormant_after:?}: {s:?}");
        assert!(s.parks > 0 && s.wakes > 0, "{s:?}");
        if dormant_after.is_some() {
            assert!(s.dormancies > 0, "the lot was exercised: {s:?}");
        }
        srv.begin_shutdown();
        srv.wait_stopped();
        let s = srv.stats();
        assert_eq!(s.connections.total(), 0, "{s:?}");
        drop(clients);
    }
}

/// More connections than the parked slab keeps when it empties: every
/// round they park, all go dormant (the slab is freed), wake, and park in
/// a new slab.
fn parked_slab_freed_and_rebuilt<T: Transport>() {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(1))
        .dormant_after(Duration::from_millis(20));
    let srv = T::serve(&b, echo_service());
    let mut clients: Vec<_> = (0..100).map(|_| srv.connect()).collect();
    for round in 1..=3u64 {
        for (i, c) in clients.iter_mut().enumerate() {
            c.send(get(&format!("/{round}/{i}")).as_bytes());
        }
        for (i, c) in clients.iter_mut().enumerate() {
            assert_eq!(c.response(), ok(&format!("GET /{round}/{i} read=")));
        }
        srv.wait_for("all dormant", |s| {
            s.connections[Dormant] == 100
                && s.connections[Parked] == 0
                && s.dormancies == 100 * round
        });
    }
    srv.wait_tasks(1);
}

/// A server with `park_after` 500 ms (never dormant) and a connection
/// that made one request (`/1`), parked, and then slept twice
/// `park_after`: its next wake is after a long sleep.
fn long_sleeper<T: Transport>() -> (Serve<T::Addr>, Client<<T::Addr as Endpoint>::Stream>) {
    let park_after = Duration::from_millis(500);
    let mut b = dormant::Server::builder();
    b.park_after(park_after).dormant_after(None);
    let (srv, c) = parked_after_one_request::<T>(&b);
    std::thread::sleep(2 * park_after);
    (srv, c)
}

/// Waits until the one connection of `srv` is parked task-less again
/// after its last request, then checks its `(parks, wakes, requests)`.
fn assert_parked_again<A>(srv: &Serve<A>, want: (u64, u64, u64)) {
    srv.wait_for("parked again", |s| {
        s.connections[Parked] == 1 && s.connections[Active] == 0 && s.parks == want.0
    });
    srv.wait_tasks(1);
    let s = srv.stats();
    assert_eq!((s.parks, s.wakes, s.requests), want, "{s:?}");
}

/// A connection woken after sleeping at least `park_after` parks again as
/// soon as its response is written, without waiting `park_after` once
/// more; one whose client came back sooner than that waits `park_after`
/// again, so a burst of requests is served by one ACTIVE phase.
fn a_long_sleeper_parks_at_once_and_a_quick_return_waits_park_after<T: Transport>() {
    let (srv, mut c) = long_sleeper::<T>();
    let mut request = |path: &str| {
        c.send(get(path).as_bytes());
        assert_eq!(c.response(), ok(&format!("GET {path} read=")));
    };
    // Woken after a long sleep: parked again right after the response, so
    // the next request, sent at once, wakes it again.
    request("/2");
    request("/3");
    // /3 came back quickly: its phase waits `park_after` and serves /4.
    request("/4");
    assert_parked_again(&srv, (3, 2, 4));
}

/// A long sleeper whose next request head comes in two pieces: the phase
/// woken by the first piece parks holding it (in its task), and the phase
/// that finishes the request still parks at once after the response, so
/// the request sent right after it wakes the connection again.
fn a_long_sleeper_whose_head_comes_in_pieces_still_parks_at_once<T: Transport>() {
    let (srv, mut c) = long_sleeper::<T>();
    c.send(b"GET /2 HTTP/1.1\r\n");
    srv.wait_for("parked holding the first piece", |s| s.parks == 2);
    c.send(b"Host: x\r\n\r\n");
    assert_eq!(c.response(), ok("GET /2 read="));
    // Parked at once after /2: /3 wakes it again, and its phase, woken
    // after a short sleep, waits `park_after` and serves /4.
    for path in ["/3", "/4"] {
        c.send(get(path).as_bytes());
        assert_eq!(c.response(), ok(&format!("GET {path} read=")));
    }
    assert_parked_again(&srv, (4, 3, 4));
}

/// A woken connection whose service does not answer at once, served both
/// ways: first polled in the lot's task (one worker), and in a task of its
/// own (two). It is answered, and parks again.
fn a_woken_service_that_waits_is_answered<T: Transport>() {
    for workers in [1, 2] {
        let service = hyper::service::service_fn(|req: http::Request<dormant::Body>| async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            echo(req).await
        });
        let srv = T::serve_with_workers(&parked_only(), service, workers);
        let mut clients: Vec<_> = (0..2).map(|_| srv.connect()).collect();
        for round in 0..3 {
            for c in &mut clients {
                let path = format!("/{round}");
                c.send(get(&path).as_bytes());
                assert_eq!(
                    c.response(),
                    ok(&format!("GET {path} read=")),
                    "{workers} workers"
                );
            }
            srv.wait_for("both parked", |s| {
                s.connections[Parked] == 2 && s.parks == 2 * (round + 1)
            });
            srv.wait_tasks(1);
        }
        let s = srv.stats();
        assert_eq!((s.wakes, s.requests), (4, 6), "{workers} workers: {s:?}");
    }
}

/// A server with one worker (which serves a woken connection's first poll
/// in the lot's task), whose connections park task-less after 2 ms and
/// never go dormant; a connection parked task-less, sent a request in
/// pieces, 40 ms apart: the first piece wakes it from the lot's PARKED
/// slab with its readiness cell, served in place, and it waits in its
/// task holding the head, where each later piece wakes it; the worker
/// stays idle between the pieces, and another client is served during
/// the first pause. Once answered, the
/// connection parks task-less again; then its last request comes with the
/// client's half-close, which the cell keeps (a read past it finds the
/// end): answered, the connection closes.
fn a_request_in_pieces_wakes_a_parked_connection_and_keeps_no_worker_busy<T: Transport>() {
    const PAUSE: Duration = Duration::from_millis(40);
    let srv = T::serve_with_workers(&parked_only(), echo_service(), 1);
    let mut c = srv.connect();
    c.send(get("/1").as_bytes());
    assert_eq!(c.response(), ok("GET /1 read="));
    srv.wait_for("parked", |s| s.connections[Parked] == 1 && s.parks == 1);
    srv.wait_tasks(1);
    let request = b"POST /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi";
    let mut others = Vec::new();
    let mut start = 0;
    for cut in [1, 7, 20, 46] {
        c.send(&request[start..cut]);
        start = cut;
        srv.pause_idle(PAUSE, &format!("after the piece that ends at {cut}"));
        // Parked again before the next piece, which then wakes it (on a
        // loaded machine the park may come after the pause).
        srv.wait_for("parked again", |s| s.connections[Active] == 0);
        if others.is_empty() {
            others.push(served_other(&srv));
        }
    }
    c.send(&request[start..]);
    assert_eq!(c.response(), ok("POST /2 read=hi"));
    srv.wait_for("both parked task-less", |s| {
        s.connections[Parked] == 2 && s.connections[Active] == 0
    });
    srv.wait_tasks(1);
    let s = srv.stats();
    assert_eq!(
        (s.wakes, s.connections[Dormant]),
        (5, 0),
        "a wake per piece: {s:?}"
    );

    c.send(b"GET /3 HTTP/1.1\r\nHost: x\r\n\r\n");
    c.stream.close_write().unwrap();
    let (got, end) = c.read_to_end();
    assert_eq!((got, end), (ok("GET /3 read="), End::Clean));
    srv.wait_for("closed", |s| {
        s.connections[Parked] == 1 && s.connections[Active] == 0
    });
    srv.pause_idle(PAUSE, "after the half-close");
}

/// Another client of `srv`, served `GET /other`, its connection kept.
fn served_other<A: Endpoint>(srv: &Serve<A>) -> Client<A::Stream> {
    let mut other = srv.connect();
    other.send(get("/other").as_bytes());
    assert_eq!(other.response(), ok("GET /other read="));
    other
}

/// A connection parked task-less (PARKED, and DORMANT) on a server with
/// one worker, sent a byte of urgent data (`MSG_OOB`), which a read skips:
/// on a Unix socket the lot sees it readable and hands the connection
/// back, whose read finds nothing; over TCP (and TLS over it) the kernel
/// reports nothing readable, and the connection sleeps on. Either way the
/// connection goes back to the lot with its readiness cell waiting for
/// the next event, the worker stays idle, another client is served, and
/// the next request is answered. (A cell left ready by that read would
/// send the connection round its park step, which the lot refuses, for
/// ever: the worker, stuck in that poll, runs nothing else.)
fn a_wake_that_brings_nothing_parks_again_and_keeps_no_worker_busy<T: Transport>() {
    const PAUSE: Duration = Duration::from_millis(40);
    for dormant_after in [None, Some(Duration::from_millis(2))] {
        let mut b = dormant::Server::builder();
        b.park_after(Duration::from_millis(2))
            .dormant_after(dormant_after);
        let srv = T::serve_with_workers(&b, echo_service(), 1);
        let mut c = srv.connect();
        c.send(get("/1").as_bytes());
        assert_eq!(c.response(), ok("GET /1 read="));
        let rung = match dormant_after {
            None => Rung::Parked,
            Some(_) => Rung::Dormant,
        };
        srv.wait_for("asleep", |s| {
            s.connections[rung] == 1 && s.connections[Active] == 0
        });
        srv.wait_tasks(1);
        let mut others = Vec::new();
        for i in 0..3 {
            let urgent = socket2::SockRef::from(&c.stream.socket()).send_out_of_band(b"!");
            if let Err(e) = urgent {
                // A kernel without urgent data on Unix sockets.
                assert_eq!(e.kind(), std::io::ErrorKind::Unsupported, "{e}");
                return;
            }
            srv.pause_idle(PAUSE, &format!("{dormant_after:?}: after urgent byte {i}"));
            if others.is_empty() {
                others.push(served_other(&srv));
            }
            srv.wait_for("asleep again", |s| {
                s.connections[rung] == 2 && s.connections[Active] == 0
            });
        }
        c.send(get("/2").as_bytes());
        assert_eq!(c.response(), ok("GET /2 read="), "{dormant_after:?}");
        srv.pause_idle(PAUSE, &format!("{dormant_after:?}: answered"));
    }
}
