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

/// How a request sent at about the moment its connection is closed
/// (idle deadline, shutdown) ended.
#[derive(Debug, PartialEq)]
enum Raced {
    /// Answered with one of the expected responses, exactly.
    Answered,
    /// Closed before a byte of the response: the close won.
    Closed,
}

/// Sends `GET path` and reads the response, which must be one of
/// `expected`, or the close of a connection the server closed first.
/// Anything else (another response, a close after part of one, a
/// timeout) fails the test.
fn request_racing_a_close(c: &mut Client, path: &str, expected: &[String]) -> Raced {
    use std::io::{ErrorKind, Write};
    let closed = |e: &std::io::Error| {
        matches!(
            e.kind(),
            ErrorKind::ConnectionReset | ErrorKind::BrokenPipe | ErrorKind::ConnectionAborted
        )
    };
    match c.stream.write_all(get(path).as_bytes()) {
        Ok(()) => {}
        Err(e) if closed(&e) => return Raced::Closed,
        Err(e) => panic!("{path}: write: {e}"),
    }
    let mut buf = Vec::new();
    loop {
        if let Some(len) = complete_response(&buf) {
            let response = strip_date(&String::from_utf8_lossy(&buf[..len]));
            assert!(expected.contains(&response), "{path}: {response:?}");
            assert_eq!(len, buf.len(), "{path}: bytes after the response");
            return Raced::Answered;
        }
        let mut chunk = [0u8; 4096];
        match c.stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if closed(&e) => break,
            Err(e) => panic!("{path}: read (timed out?): {e}"),
        }
    }
    assert!(
        buf.is_empty(),
        "{path}: closed after part of a response: {:?}",
        String::from_utf8_lossy(&buf)
    );
    Raced::Closed
}

/// Requests that arrive around the moment the lot's idle deadline closes
/// their connection (task-less PARKED, or DORMANT): the event and the
/// deadline race in the lot. Each request is either answered exactly or
/// its connection closed without a byte of response; the server goes on
/// serving, and every connection is released.
fn requests_racing_the_idle_deadline(dormant_after: Option<Duration>) {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::ZERO)
        .dormant_after(dormant_after)
        .idle_timeout(Duration::from_millis(40));
    let srv = serve_with(&b, echo_service());
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let addr = srv.addr;
            std::thread::spawn(move || {
                let mut closed = 0;
                for i in 0..12u64 {
                    let mut c = Client::connect(addr);
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
        s.active == 0 && s.parked == 0 && s.dormant == 0
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

#[test]
fn requests_racing_the_idle_deadline_of_dormant_connections() {
    requests_racing_the_idle_deadline(Some(Duration::from_millis(5)));
}

#[test]
fn requests_racing_the_idle_deadline_of_parked_connections() {
    requests_racing_the_idle_deadline(None);
}

/// Graceful shutdown while DORMANT connections are woken by requests: the
/// lot's close of idle connections races their events. Each request is
/// answered exactly (with `connection: close` once the drain began) or its
/// connection closed without a byte of response; every idle connection is
/// closed, and `serve` returns.
#[test]
fn requests_racing_graceful_shutdown() {
    let mut srv = serve_with(&dormant_fast(), echo_service());
    let mut clients = connect_served(&srv, 64);
    srv.wait_for("all dormant", |s| s.dormant == 64);
    let (racing, idle) = clients.split_at_mut(32);
    let sent = std::sync::atomic::AtomicUsize::new(0);
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
                sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            outcomes
        });
        // The drain begins while the requests come.
        wait("a few requests answered", || {
            sent.load(std::sync::atomic::Ordering::Relaxed) >= 4
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
