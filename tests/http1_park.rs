//! HTTP/1 connections park between requests and lose no byte doing so:
//! keep-alive with think time, pipelining, and requests split across writes
//! with the connection parked in between (invariants I1, I2).

mod common;
use common::*;
use std::time::Duration;

#[test]
fn keep_alive_with_think_time_parks_and_wakes() {
    let srv = serve_with(&fast_park(), echo_service());
    let mut c = srv.connect();
    // Accepted connections start PARKED, holding no buffer.
    srv.wait_for("accept", |s| s.accepted == 1 && s.parked == 1);
    assert_eq!(srv.stats().pool.in_use, 0);
    for i in 0..4u64 {
        c.send(format!("GET /think/{i} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        assert_eq!(c.response(), ok(&format!("GET /think/{i} read=")));
        srv.wait_for("park", |s| s.parks == i + 1 && s.parked == 1);
        let s = srv.stats();
        assert_eq!(s.active, 0, "{s:?}");
        assert_eq!(
            s.pool.in_use, 0,
            "a parked connection holds a buffer: {s:?}"
        );
        // The first request woke the connection from accept, not a wake.
        assert_eq!(s.wakes, i, "{s:?}");
        // Requests are added when the connection parks.
        assert_eq!(s.requests, i + 1, "{s:?}");
        // Think time.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(srv.stats().parks, i + 1, "a parked connection parked again");
    }
}

#[test]
fn pipelined_requests_in_one_write() {
    let srv = serve_with(&fast_park(), echo_service());
    let mut c = srv.connect();
    c.send(
        b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\n\
          POST /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc\
          GET /3 HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    assert_eq!(c.response(), ok("GET /1 read="));
    assert_eq!(c.response(), ok("POST /2 read=abc"));
    assert_eq!(c.response(), ok("GET /3 read="));
    srv.wait_for("park", |s| s.parks == 1 && s.parked == 1 && s.requests == 3);
    // And nothing more arrives.
    c.send(b"GET /4 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(
        c.read_to_close(),
        "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 12\r\n\r\nGET /4 read="
    );
}

/// A pipelined burst long enough to spend the task's coop budget several
/// times over (tokio stops a task's I/O after 128 operations per poll) is
/// answered in order and still ends in a park. (The case where the budget
/// runs out in the very poll that arms the park timer is pinned down by a
/// unit test in `src/timeout.rs`.)
#[test]
fn long_pipelined_burst_then_park() {
    const N: usize = 2_000;
    let srv = serve_with(&fast_park(), echo_service());
    for round in 1..=3u64 {
        let mut c = srv.connect();
        let burst: String = (0..N)
            .map(|i| format!("GET /{i} HTTP/1.1\r\nHost: x\r\n\r\n"))
            .collect();
        c.send(burst.as_bytes());
        for i in 0..N {
            assert_eq!(c.response(), ok(&format!("GET /{i} read=")));
        }
        srv.wait_for("park after the burst", |s| s.parks == round);
    }
}

/// The first request of a connection arrives in two writes; between them
/// the connection parks with the first half carried.
#[test]
fn first_request_split_across_a_park() {
    let srv = serve_with(&fast_park(), echo_service());
    check_first_request_split_across_a_park(&srv);
}

/// A first write that is a prefix of the HTTP/2 preface ("P", "PRI ") keeps
/// the connection waiting for more; an HTTP/1 request starting that way is
/// still served.
#[test]
fn first_bytes_like_the_h2_preface_then_http1() {
    let srv = serve_with(&fast_park(), echo_service());
    for (req, split, want) in [
        (
            &b"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nz"[..],
            1,
            "POST /p read=z",
        ),
        (
            &b"PRI /x HTTP/1.1\r\nHost: x\r\n\r\n"[..],
            4,
            "PRI /x read=",
        ),
        (
            &b"PRI /x HTTP/1.1\r\nHost: x\r\n\r\n"[..],
            8,
            "PRI /x read=",
        ),
    ] {
        let mut c = srv.connect();
        c.send(&req[..split]);
        std::thread::sleep(Duration::from_millis(20));
        c.send(&req[split..]);
        assert_eq!(c.response(), ok(want), "split at {split}");
    }
}

/// The same after a first request: the second request is split, and the
/// connection parks between the halves.
#[test]
fn later_request_split_across_a_park() {
    let srv = serve_with(&fast_park(), echo_service());
    let mut c = srv.connect();
    c.send(b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response(), ok("GET /first read="));
    srv.wait_for("first park", |s| s.parks == 1);
    c.send(b"POST /second HTTP/1.1\r\nHo");
    srv.wait_for("park with a partial head", |s| {
        s.parks == 2 && s.parked == 1
    });
    c.send(b"st: x\r\nContent-Length: 2\r\n\r\nhi");
    assert_eq!(c.response(), ok("POST /second read=hi"));
    srv.wait_for("third park", |s| s.parks == 3 && s.wakes == 2);
}

/// A full request and the first half of the next in one write; the
/// connection parks holding the half (the bytes hyper had read but not
/// parsed), then the rest arrives.
#[test]
fn partial_pipelined_request_survives_a_park() {
    let srv = serve_with(&fast_park(), echo_service());
    let mut c = srv.connect();
    c.send(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nContent-Le");
    assert_eq!(c.response(), ok("GET /a read="));
    srv.wait_for("park", |s| s.parks == 1 && s.parked == 1);
    assert_eq!(srv.stats().pool.in_use, 0);
    c.send(b"ngth: 5\r\n\r\nhello");
    assert_eq!(c.response(), ok("POST /b read=hello"));
    srv.wait_for("second park", |s| s.parks == 2 && s.requests == 2);
}

/// A body split across writes while its handler reads it: the request is
/// in flight, so the connection must not park mid-body.
#[test]
fn body_split_while_handler_reads_does_not_park() {
    let srv = serve_with(&fast_park(), echo_service());
    let mut c = srv.connect();
    c.send(b"POST /slowbody HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01234");
    srv.wait_for("active", |s| s.active == 1);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(srv.stats().parks, 0, "parked with a request in flight");
    c.send(b"56789");
    assert_eq!(c.response(), ok("POST /slowbody read=0123456789"));
}

/// A connection busy with back-to-back requests never parks, however long
/// it stays busy: only a pause of `park_after` with no request parks it.
#[test]
fn busy_connection_does_not_park() {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(200));
    let srv = serve_with(&b, echo_service());
    let mut c = srv.connect();
    let start = std::time::Instant::now();
    let mut i = 0;
    while start.elapsed() < Duration::from_millis(700) {
        c.send(format!("GET /{i} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        let body = format!("GET /{i} read=");
        assert_eq!(
            c.response(),
            format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
        );
        i += 1;
    }
    assert_eq!(srv.stats().parks, 0, "{i} back-to-back requests");
    srv.wait_for("park after the pause", |s| s.parks == 1);
}
