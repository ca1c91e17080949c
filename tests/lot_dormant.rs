//! DORMANT connections, whose fds (and TLS sessions) left tokio for the
//! parking lot, over every transport: bytes that arrive while a connection
//! moves between its task and the lot, slots reused while others sleep,
//! large responses after a wake, and requests racing the lot's idle
//! deadline.

use std::time::Duration;

use crate::common::client::{Endpoint, get, ok};
use crate::common::ladder::ladder;
use crate::common::racing::{Raced, request_racing_a_close};
use crate::common::services::echo_service;
use crate::common::transport::{Transport, over_every_transport};
use dormant::Rung::{Active, Dormant, Parked};

over_every_transport!(
    back_to_back_requests_racing_the_lot,
    back_to_back_requests_racing_the_lot_on_one_worker,
    slots_reused_while_connections_sleep_and_wake,
    slots_reused_while_connections_sleep_and_wake_on_one_worker,
    large_response_after_a_wake_is_written_to_the_end,
    requests_racing_the_idle_deadline_of_dormant_connections,
    requests_racing_the_idle_deadline_of_parked_connections,
);

/// Parks and goes dormant at once.
fn at_once() -> dormant::Builder {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::ZERO).dormant_after(Duration::ZERO);
    b
}

/// Every request parks and goes dormant at once, so bytes often arrive
/// while the connection moves between its task and the lot.
fn back_to_back_requests_racing_the_lot<T: Transport>() {
    back_to_back_requests_racing_the_lot_on::<T>(2);
}

/// On one worker a woken connection is first polled in the lot's task.
fn back_to_back_requests_racing_the_lot_on_one_worker<T: Transport>() {
    back_to_back_requests_racing_the_lot_on::<T>(1);
}

fn back_to_back_requests_racing_the_lot_on<T: Transport>(workers: usize) {
    let srv = T::serve_with_workers(&at_once(), echo_service(), workers);
    let threads: Vec<_> = (0..20)
        .map(|t| {
            let addr = srv.addr.clone();
            std::thread::spawn(move || {
                let mut c = addr.connect();
                for i in 0..500 {
                    let path = format!("/{t}/{i}");
                    c.send(get(&path).as_bytes());
                    assert_eq!(c.response(), ok(&format!("GET {path} read=")));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("every response exact");
    }
    let s = srv.stats();
    assert!(s.dormancies > 0, "the lot was exercised: {s:?}");
}

/// Connections open and close while others sleep and wake: a closed
/// connection's slot is reused at once, and an event collected for its
/// old occupant may reach the new one. Every response stays exact, and
/// every slot is freed in the end.
fn slots_reused_while_connections_sleep_and_wake<T: Transport>() {
    slots_reused_while_connections_sleep_and_wake_on::<T>(2);
}

/// On one worker a woken connection is first polled in the lot's task.
fn slots_reused_while_connections_sleep_and_wake_on_one_worker<T: Transport>() {
    slots_reused_while_connections_sleep_and_wake_on::<T>(1);
}

fn slots_reused_while_connections_sleep_and_wake_on<T: Transport>(workers: usize) {
    let srv = T::serve_with_workers(&at_once(), echo_service(), workers);
    let churn: Vec<_> = (0..4)
        .map(|t| {
            let addr = srv.addr.clone();
            std::thread::spawn(move || {
                for i in 0..150 {
                    let mut c = addr.connect();
                    let path = format!("/churn/{t}/{i}");
                    c.send(get(&path).as_bytes());
                    assert_eq!(c.response(), ok(&format!("GET {path} read=")));
                }
            })
        })
        .collect();
    let sleepy: Vec<_> = (0..8)
        .map(|t| {
            let addr = srv.addr.clone();
            std::thread::spawn(move || {
                let mut c = addr.connect();
                for i in 0..60 {
                    let path = format!("/sleepy/{t}/{i}");
                    c.send(get(&path).as_bytes());
                    assert_eq!(c.response(), ok(&format!("GET {path} read=")));
                    std::thread::sleep(Duration::from_millis(i % 3));
                }
            })
        })
        .collect();
    for t in churn.into_iter().chain(sleepy) {
        t.join().expect("every response exact");
    }
    srv.wait_for("every connection closed", |s| {
        s.connections[Active] == 0 && s.connections[Parked] == 0 && s.connections[Dormant] == 0
    });
    assert!(srv.stats().lot_wakes > 0, "the lot was exercised");
}

/// A connection woken from the lot answers with more than the socket
/// takes at once: its writes wait for room, which the lot reports, until
/// the body's last byte. The wake's first poll runs in the lot's task and
/// fills the socket; the connection goes on in a task of its own (one
/// worker or two).
fn large_response_after_a_wake_is_written_to_the_end<T: Transport>() {
    const LEN: usize = 8 << 20;
    for workers in [1, 2] {
        let service = hyper::service::service_fn(|_req: http::Request<dormant::Body>| async {
            let body = http_body_util::Full::new(hyper::body::Bytes::from(vec![b'x'; LEN]));
            Ok::<_, std::convert::Infallible>(http::Response::new(body))
        });
        let srv = T::serve_with_workers(&ladder(Duration::from_millis(10)), service, workers);
        let mut c = srv.connect();
        for round in 0..2 {
            srv.wait_for("dormant", |s| s.connections[Dormant] == 1 || round == 0);
            c.send(get("/big").as_bytes());
            // The server fills the socket and waits for room.
            std::thread::sleep(Duration::from_millis(50));
            let head = c.response_head();
            assert!(
                head.starts_with("HTTP/1.1 200 OK"),
                "{workers} workers: {head}"
            );
            let body = c.read_exact_bytes(LEN);
            assert!(body.iter().all(|&b| b == b'x'), "{workers} workers");
        }
        assert_eq!(srv.stats().lot_wakes, 1, "{workers} workers");
    }
}

/// Requests that arrive around the moment the lot's idle deadline closes
/// their connection (task-less PARKED, or DORMANT): the event and the
/// deadline race in the lot. Each request is either answered exactly or
/// its connection closed without a byte of response; the server goes on
/// serving, and every connection is released.
fn requests_racing_the_idle_deadline<T: Transport>(dormant_after: Option<Duration>) {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::ZERO)
        .dormant_after(dormant_after)
        .idle_timeout(Duration::from_millis(40));
    let srv = T::serve(&b, echo_service());
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let addr = srv.addr.clone();
            std::thread::spawn(move || {
                let mut closed = 0;
                for i in 0..12u64 {
                    let mut c = addr.connect();
                    let first = format!("/{t}/{i}/first");
                    c.send(get(&first).as_bytes());
                    assert_eq!(c.response(), ok(&format!("GET {first} read=")));
                    // 30–50 ms: either side of the deadline.
                    std::thread::sleep(Duration::from_millis(30 + (t * 7 + i * 5) % 21));
                    let path = format!("/{t}/{i}");
                    let expected = [ok(&format!("GET {path} read="))];
                    if request_racing_a_close(&mut c, &path, &expected) == Raced::Closed {
                        closed += 1;
                    }
                }
                closed
            })
        })
        .collect();
    let closed: u64 = threads
        .into_iter()
        .map(|t| t.join().expect("every request answered exactly or closed"))
        .sum();
    srv.wait_for("every connection released", |s| {
        s.connections[Active] == 0 && s.connections[Parked] == 0 && s.connections[Dormant] == 0
    });
    let s = srv.stats();
    assert!(
        s.idle_timeouts >= closed,
        "{closed} requests met a closed connection, but {} idle timeouts: {s:?}",
        s.idle_timeouts
    );
    let mut c = srv.connect();
    c.send(get("/after").as_bytes());
    assert_eq!(c.response(), ok("GET /after read="));
}

fn requests_racing_the_idle_deadline_of_dormant_connections<T: Transport>() {
    requests_racing_the_idle_deadline::<T>(Some(Duration::from_millis(5)));
}

fn requests_racing_the_idle_deadline_of_parked_connections<T: Transport>() {
    requests_racing_the_idle_deadline::<T>(None);
}
