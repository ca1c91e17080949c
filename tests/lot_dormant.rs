//! DORMANT connections: fds that left tokio for the parking lot.

mod common;

use std::io::Read;
use std::time::Duration;

use common::*;

fn dormant_fast() -> dormant::Builder {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(2))
        .dormant_after(Duration::from_millis(10));
    b
}

#[test]
fn keep_alive_request_after_dormancy() {
    let srv = serve_with(&dormant_fast(), echo_service());
    let mut c = srv.connect();
    for i in 0..3 {
        c.send(get(&format!("/{i}")).as_bytes());
        assert_eq!(c.response(), ok(&format!("GET /{i} read=")));
        srv.wait_for("dormant", |s| {
            s.dormant == 1 && s.parked == 0 && s.active == 0
        });
    }
    let s = srv.stats();
    assert_eq!(s.dormancies, 3);
    assert_eq!(s.lot_wakes, 2);
    assert_eq!(s.pool.in_use, 0);
}

#[test]
fn request_split_across_the_dormant_boundary() {
    let srv = serve_with(&dormant_fast(), echo_service());
    let mut c = srv.connect();
    c.send(get("/first").as_bytes());
    assert_eq!(c.response(), ok("GET /first read="));
    srv.wait_for("dormant", |s| s.dormant == 1);

    // Half a request wakes it; the half is carried while it waits again.
    c.send(b"POST /second HTTP/1.1\r\nContent-Le");
    srv.wait_for("woken and parked with the half", |s| {
        s.lot_wakes == 1 && s.parked == 1
    });
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(
        srv.stats().dormant,
        0,
        "a connection with carried bytes stays parked"
    );
    c.send(b"ngth: 3\r\n\r\nabc");
    assert_eq!(c.response(), ok("POST /second read=abc"));

    srv.wait_for("dormant again", |s| s.dormant == 1);
    c.send(b"GET /thi");
    srv.wait_for("woken", |s| s.lot_wakes == 2);
    c.send(b"rd HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response(), ok("GET /third read="));
}

#[test]
fn client_close_while_dormant_releases_the_fd() {
    let srv = serve_with(&dormant_fast(), echo_service());
    let mut c = srv.connect();
    let client_port = c.stream.local_addr().unwrap().port();
    c.send(get("/").as_bytes());
    assert_eq!(c.response(), ok("GET / read="));
    srv.wait_for("dormant", |s| s.dormant == 1);
    drop(c);
    srv.wait_for("closed in the lot", |s| {
        s.dormant == 0 && s.parked == 0 && s.active == 0 && s.lot_closes == 1
    });
    assert_eq!(
        srv.stats().lot_wakes,
        0,
        "closed without going back to tokio"
    );
    // Had the server kept the fd, its socket would sit in CLOSE_WAIT.
    let deadline = std::time::Instant::now() + CLIENT_TIMEOUT;
    while server_socket_open(srv.addr.port(), client_port) {
        assert!(
            std::time::Instant::now() < deadline,
            "server socket still open: fd leak"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn idle_timeout_closes_dormant_and_parked_connections() {
    let mut b = dormant_fast();
    b.idle_timeout(Duration::from_millis(200));
    let srv = serve_with(&b, echo_service());
    let mut c = srv.connect();
    c.send(get("/").as_bytes());
    assert_eq!(c.response(), ok("GET / read="));
    srv.wait_for("dormant", |s| s.dormant == 1);
    assert_eq!(c.read_to_close(), "", "closed by the lot's idle deadline");
    srv.wait_for("timed out", |s| s.idle_timeouts == 1 && s.dormant == 0);

    // Shorter than dormant_after: the lot closes the task-less PARKED
    // connection at its idle deadline.
    let mut b = dormant_fast();
    b.dormant_after(Duration::from_secs(60))
        .idle_timeout(Duration::from_millis(50));
    let srv = serve_with(&b, echo_service());
    let mut c = srv.connect();
    c.send(get("/").as_bytes());
    assert_eq!(c.response(), ok("GET / read="));
    assert_eq!(c.read_to_close(), "");
    srv.wait_for("timed out", |s| s.idle_timeouts == 1 && s.parked == 0);
}

#[test]
fn graceful_shutdown_closes_dormant_connections() {
    let srv = serve_with(&dormant_fast(), echo_service());
    let mut clients = connect_served(&srv, 20);
    srv.wait_for("all dormant", |s| s.dormant == 20);
    let server = srv.server.clone();
    srv.shutdown();
    for c in &mut clients {
        let mut byte = [0u8; 1];
        assert_eq!(c.stream.read(&mut byte).expect("EOF, not a timeout"), 0);
    }
    assert_eq!(server.stats().dormant, 0);
}

/// Every request parks and goes dormant at once, so bytes often arrive
/// while the connection moves between its task and the lot.
#[test]
fn back_to_back_requests_racing_the_lot() {
    back_to_back_requests_racing_the_lot_on(2);
}

/// On one worker a woken connection is first polled in the lot's task.
#[test]
fn back_to_back_requests_racing_the_lot_on_one_worker() {
    back_to_back_requests_racing_the_lot_on(1);
}

fn back_to_back_requests_racing_the_lot_on(workers: usize) {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::ZERO).dormant_after(Duration::ZERO);
    let srv = serve_with_workers(&b, echo_service(), workers);
    let threads: Vec<_> = (0..20)
        .map(|t| {
            let addr = srv.addr;
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
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
#[test]
fn slots_reused_while_connections_sleep_and_wake() {
    slots_reused_while_connections_sleep_and_wake_on(2);
}

/// On one worker a woken connection is first polled in the lot's task.
#[test]
fn slots_reused_while_connections_sleep_and_wake_on_one_worker() {
    slots_reused_while_connections_sleep_and_wake_on(1);
}

fn slots_reused_while_connections_sleep_and_wake_on(workers: usize) {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::ZERO).dormant_after(Duration::ZERO);
    let srv = serve_with_workers(&b, echo_service(), workers);
    let churn: Vec<_> = (0..4)
        .map(|t| {
            let addr = srv.addr;
            std::thread::spawn(move || {
                for i in 0..150 {
                    let mut c = Client::connect(addr);
                    let path = format!("/churn/{t}/{i}");
                    c.send(get(&path).as_bytes());
                    assert_eq!(c.response(), ok(&format!("GET {path} read=")));
                }
            })
        })
        .collect();
    let sleepy: Vec<_> = (0..8)
        .map(|t| {
            let addr = srv.addr;
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
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
        s.active == 0 && s.parked == 0 && s.dormant == 0
    });
    assert!(srv.stats().lot_wakes > 0, "the lot was exercised");
}

/// A connection woken from the lot answers with more than the socket
/// takes at once: its writes wait for room, which the lot reports, until
/// the body's last byte. The wake's first poll runs in the lot's task and
/// fills the socket; the connection goes on in a task of its own (one
/// worker or two).
#[test]
fn large_response_after_a_wake_is_written_to_the_end() {
    const LEN: usize = 8 << 20;
    for workers in [1, 2] {
        let service = hyper::service::service_fn(|_req: http::Request<dormant::Body>| async {
            let body = http_body_util::Full::new(hyper::body::Bytes::from(vec![b'x'; LEN]));
            Ok::<_, std::convert::Infallible>(http::Response::new(body))
        });
        let srv = serve_with_workers(&dormant_fast(), service, workers);
        let mut c = srv.connect();
        for round in 0..2 {
            srv.wait_for("dormant", |s| s.dormant == 1 || round == 0);
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
