//! Task-less PARKED connections: an idle HTTP/1 connection with nothing
//! carried waits in the parking lot with its tokio registration and no
//! task; the lot hands it to a new task when bytes arrive, moves it to
//! DORMANT after `dormant_after`, closes it at its idle deadline or at
//! shutdown.

mod common;

use std::io::Read;
use std::time::Duration;

use common::*;

/// Parks after 2 ms and never goes dormant.
fn parked_only() -> dormant::Builder {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(2)).dormant_after(None);
    b
}

/// Waits until the runtime has `n` tasks alive.
fn wait_tasks(srv: &Serve, n: usize) {
    let deadline = std::time::Instant::now() + CLIENT_TIMEOUT;
    loop {
        let alive = srv.handle.metrics().num_alive_tasks();
        if alive == n {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{alive} tasks alive, want {n}: {:?}",
            srv.stats()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn parked_connections_have_no_task_and_wake() {
    let srv = serve_with(&parked_only(), echo_service());
    let mut clients: Vec<Client> = (0..20).map(|_| srv.connect()).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        c.send(get(&format!("/{i}")).as_bytes());
        assert_eq!(c.response(), ok(&format!("GET /{i} read=")));
    }
    srv.wait_for("20 parked", |s| s.parked == 20 && s.parks == 20);
    // The lot's driver is the only task left.
    wait_tasks(&srv, 1);
    for round in 1..=3u64 {
        for (i, c) in clients.iter_mut().enumerate() {
            c.send(get(&format!("/{round}/{i}")).as_bytes());
            assert_eq!(c.response(), ok(&format!("GET /{round}/{i} read=")));
        }
        srv.wait_for("parked again", |s| {
            s.parked == 20 && s.parks == 20 * (round + 1) && s.active == 0
        });
        wait_tasks(&srv, 1);
        let s = srv.stats();
        assert_eq!(s.wakes, 20 * round, "{s:?}");
        assert_eq!((s.dormant, s.dormancies, s.lot_wakes), (0, 0, 0), "{s:?}");
        assert_eq!(s.pool.in_use, 0, "{s:?}");
    }
}

#[test]
fn client_close_while_parked_taskless_releases_the_fd() {
    let mut b = parked_only();
    // Exact accounting: with a limit of one, the next connection is
    // served only once the lot released the first.
    b.max_connections(1);
    let srv = serve_with(&b, echo_service());
    for round in 1..=3u64 {
        let mut c = srv.connect();
        let client_port = c.stream.local_addr().unwrap().port();
        c.send(get("/").as_bytes());
        assert_eq!(c.response(), ok("GET / read="));
        srv.wait_for("parked", |s| s.parked == 1 && s.parks == round);
        wait_tasks(&srv, 1);
        drop(c);
        srv.wait_for("closed", |s| {
            s.parked == 0 && s.active == 0 && s.dormant == 0
        });
        let deadline = std::time::Instant::now() + CLIENT_TIMEOUT;
        while server_socket_open(srv.addr.port(), client_port) {
            assert!(
                std::time::Instant::now() < deadline,
                "server socket still open: fd leak"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let s = srv.stats();
    assert_eq!(s.wakes, 0, "a close is not a wake: {s:?}");
}

/// Serves the echo service with `b`; a connection makes one request
/// (`/1`) and parks task-less.
fn parked_after_one_request(b: &dormant::Builder) -> (Serve, Client) {
    let srv = serve_with(b, echo_service());
    let mut c = srv.connect();
    c.send(get("/1").as_bytes());
    assert_eq!(c.response(), ok("GET /1 read="));
    srv.wait_for("parked", |s| s.parked == 1 && s.parks == 1);
    wait_tasks(&srv, 1);
    (srv, c)
}

#[test]
fn taskless_parked_goes_dormant_then_wakes() {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(2))
        .dormant_after(Duration::from_millis(30));
    let (srv, mut c) = parked_after_one_request(&b);
    srv.wait_for("dormant", |s| s.dormant == 1 && s.parked == 0);
    c.send(get("/2").as_bytes());
    assert_eq!(c.response(), ok("GET /2 read="));
    srv.wait_for("dormant again", |s| s.dormant == 1 && s.dormancies == 2);
    let s = srv.stats();
    assert_eq!((s.lot_wakes, s.wakes, s.parked, s.active), (1, 1, 0, 0));
}

#[test]
fn idle_timeout_closes_taskless_parked() {
    let mut b = parked_only();
    b.idle_timeout(Duration::from_millis(80));
    let srv = serve_with(&b, echo_service());
    let mut c = srv.connect();
    c.send(get("/").as_bytes());
    let sent = std::time::Instant::now();
    assert_eq!(c.response(), ok("GET / read="));
    srv.wait_for("parked", |s| s.parked == 1 && s.parks == 1);
    assert_eq!(c.read_to_close(), "", "closed at the idle deadline");
    assert!(
        sent.elapsed() >= Duration::from_millis(75),
        "{:?}",
        sent.elapsed()
    );
    srv.wait_for("timed out", |s| s.idle_timeouts == 1 && s.parked == 0);
    assert_eq!(srv.stats().dormancies, 0);
}

#[test]
fn graceful_shutdown_closes_taskless_parked_connections() {
    let srv = serve_with(&parked_only(), echo_service());
    let mut clients = connect_served(&srv, 30);
    srv.wait_for("all parked", |s| s.parked == 30 && s.parks == 30);
    wait_tasks(&srv, 1);
    let server = srv.server.clone();
    // Returns once every connection is released.
    srv.shutdown();
    for c in &mut clients {
        let mut byte = [0u8; 1];
        assert_eq!(c.stream.read(&mut byte).expect("EOF, not a timeout"), 0);
    }
    let s = server.stats();
    assert_eq!((s.parked, s.active, s.dormant), (0, 0, 0), "{s:?}");
}

/// `park_after` and `dormant_after` tiny: bytes arrive while connections
/// enter the parked slab, wake from it, and move from it to the lot's poll.
/// Every response must be exact, and the accounting must come back to zero
/// (shutdown returns only once every connection is released).
#[test]
fn back_to_back_requests_racing_the_parked_slab() {
    for dormant_after in [None, Some(Duration::from_millis(1)), Some(Duration::ZERO)] {
        let mut b = dormant::Server::builder();
        b.park_after(Duration::ZERO).dormant_after(dormant_after);
        let srv = serve_with(&b, echo_service());
        let threads: Vec<_> = (0..20)
            .map(|t| {
                let addr = srv.addr;
                std::thread::spawn(move || {
                    let mut c = Client::connect(addr);
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
        let clients: Vec<Client> = threads
            .into_iter()
            .map(|t| t.join().expect("every response exact"))
            .collect();
        srv.wait_for("all idle", |s| s.active == 0 && s.parked + s.dormant == 20);
        let s = srv.stats();
        eprintln!("dormant_after {dormant_after:?}: {s:?}");
        assert!(s.parks > 0 && s.wakes > 0, "{s:?}");
        if dormant_after.is_some() {
            assert!(s.dormancies > 0, "the lot was exercised: {s:?}");
        }
        let server = srv.server.clone();
        srv.shutdown();
        let s = server.stats();
        assert_eq!((s.parked, s.active, s.dormant), (0, 0, 0), "{s:?}");
        drop(clients);
    }
}

/// More connections than the parked slab keeps when it empties: every
/// round they park, all go dormant (the slab is freed), wake, and park in
/// a new slab.
#[test]
fn parked_slab_freed_and_rebuilt() {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(1))
        .dormant_after(Duration::from_millis(20));
    let srv = serve_with(&b, echo_service());
    let mut clients: Vec<Client> = (0..100).map(|_| srv.connect()).collect();
    for round in 1..=3u64 {
        for (i, c) in clients.iter_mut().enumerate() {
            c.send(get(&format!("/{round}/{i}")).as_bytes());
        }
        for (i, c) in clients.iter_mut().enumerate() {
            assert_eq!(c.response(), ok(&format!("GET /{round}/{i} read=")));
        }
        srv.wait_for("all dormant", |s| {
            s.dormant == 100 && s.parked == 0 && s.dormancies == 100 * round
        });
    }
    wait_tasks(&srv, 1);
}

/// A server with `park_after` 500 ms (never dormant) and a connection
/// that made one request (`/1`), parked, and then slept twice
/// `park_after`: its next wake is after a long sleep.
fn long_sleeper() -> (Serve, Client) {
    let park_after = Duration::from_millis(500);
    let mut b = dormant::Server::builder();
    b.park_after(park_after).dormant_after(None);
    let (srv, c) = parked_after_one_request(&b);
    std::thread::sleep(2 * park_after);
    (srv, c)
}

/// Waits until the one connection of `srv` is parked task-less again
/// after its last request, then checks its `(parks, wakes, requests)`.
fn assert_parked_again(srv: &Serve, want: (u64, u64, u64)) {
    srv.wait_for("parked again", |s| {
        s.parked == 1 && s.active == 0 && s.parks == want.0
    });
    wait_tasks(srv, 1);
    let s = srv.stats();
    assert_eq!((s.parks, s.wakes, s.requests), want, "{s:?}");
}

/// A connection woken after sleeping at least `park_after` parks again as
/// soon as its response is written, without waiting `park_after` once
/// more; one whose client came back sooner than that waits `park_after`
/// again, so a burst of requests is served by one ACTIVE phase.
#[test]
fn a_long_sleeper_parks_at_once_and_a_quick_return_waits_park_after() {
    let (srv, mut c) = long_sleeper();
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
#[test]
fn a_long_sleeper_whose_head_comes_in_pieces_still_parks_at_once() {
    let (srv, mut c) = long_sleeper();
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
#[test]
fn a_woken_service_that_waits_is_answered() {
    for workers in [1, 2] {
        let service = hyper::service::service_fn(|req: http::Request<dormant::Body>| async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            echo(req).await
        });
        let srv = serve_with_workers(&parked_only(), service, workers);
        let mut clients: Vec<Client> = (0..2).map(|_| srv.connect()).collect();
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
                s.parked == 2 && s.parks == 2 * (round + 1)
            });
            wait_tasks(&srv, 1);
        }
        let s = srv.stats();
        assert_eq!((s.wakes, s.requests), (4, 6), "{workers} workers: {s:?}");
    }
}
