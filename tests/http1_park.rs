//! HTTP/1 connections park between requests and lose no byte doing so,
//! over every transport: keep-alive with think time across PARKED and
//! DORMANT, pipelining, and requests split across writes with the
//! connection parked (or dormant) in between (invariants I1, I2, I4).
//! Requests in pieces, with pauses that let their connection park and
//! sleep, keep no worker busy while they wait for their rest: on a server
//! with one worker, another client is served meanwhile.

use std::time::Duration;

use crate::common::client::{Client, End, Endpoint, get, ok};
use crate::common::ladder::ladder;
use crate::common::servers::Serve;
use crate::common::services::echo_service;
use crate::common::transport::{Transport, over_every_transport};
use dormant::Rung::{Active, Dormant, Parked};

over_every_transport!(
    keep_alive_with_think_time_parks_and_goes_dormant,
    pipelined_requests_in_one_write,
    long_pipelined_burst_then_park,
    partial_pipelined_request_survives_a_park,
    first_request_split_across_a_park,
    later_request_split_across_a_park,
    request_split_across_the_dormant_boundary,
    first_bytes_like_the_h2_preface_then_http1,
    body_split_while_handler_reads_does_not_park,
    busy_connection_does_not_park,
    a_request_in_pieces_does_not_stop_another_connection,
);

/// Keep-alive with think time: pauses that park (task-less, in the lot's
/// parked slab) and pauses that go dormant (the fd, and a TLS session, in
/// the lot's poll). Every response is exact, requests are counted when the
/// connection parks, a parked connection does not park again, and no pool
/// buffer is held while idle (I4).
fn keep_alive_with_think_time_parks_and_goes_dormant<T: Transport>() {
    let srv = T::serve(&ladder(Duration::from_millis(200)), echo_service());
    let mut c = srv.connect();
    // Accepted connections start PARKED, holding no buffer (over TLS, the
    // handshake runs in the reads of a PARKED connection, which holds none
    // once it has answered the client's last flight).
    srv.wait_for("accept", |s| {
        s.accepted == 1 && s.connections[Parked] == 1 && s.pool.in_use == 0
    });

    c.send(get("/0").as_bytes());
    assert_eq!(c.response(), ok("GET /0 read="));
    srv.wait_for("first park", |s| {
        s.parks == 1 && s.connections[Parked] == 1 && s.connections[Active] == 0
    });
    let s = srv.stats();
    assert_eq!(s.wakes, 0, "the first request is not a wake: {s:?}");
    assert_eq!(
        s.requests, 1,
        "requests are added when the connection parks"
    );

    // Pauses shorter than dormant_after: woken from PARKED.
    for i in 1..=2u64 {
        // Think time.
        std::thread::sleep(Duration::from_millis(20));
        let s = srv.stats();
        assert_eq!(s.parks, i, "a parked connection parked again: {s:?}");
        assert_eq!(s.pool.in_use, 0, "PARKED holds a buffer: {s:?}");
        c.send(get(&format!("/parked/{i}")).as_bytes());
        assert_eq!(c.response(), ok(&format!("GET /parked/{i} read=")));
        srv.wait_for("parked again", |s| {
            s.parks == 1 + i && s.connections[Parked] == 1 && s.connections[Active] == 0
        });
        let s = srv.stats();
        assert_eq!(
            (s.wakes, s.requests, s.dormancies, s.lot_wakes),
            (i, i + 1, 0, 0),
            "{s:?}"
        );
    }

    // Pauses longer than dormant_after: woken from DORMANT.
    for i in 1..=2u64 {
        srv.wait_for("dormant", |s| {
            s.connections[Dormant] == 1
                && s.connections[Parked] == 0
                && s.connections[Active] == 0
                && s.dormancies == i
        });
        assert_eq!(srv.stats().pool.in_use, 0, "DORMANT holds a buffer");
        c.send(get(&format!("/dormant/{i}")).as_bytes());
        assert_eq!(c.response(), ok(&format!("GET /dormant/{i} read=")));
        srv.wait_for("parked after the lot's wake", |s| {
            s.parks == 3 + i && s.lot_wakes == i && s.connections[Active] == 0
        });
        let s = srv.stats();
        assert_eq!(s.wakes, 2 + i, "{s:?}");
    }
    srv.wait_for("dormant at the end", |s| {
        s.connections[Dormant] == 1 && s.dormancies == 3
    });
    let s = srv.stats();
    assert_eq!(
        (s.accepted, s.requests, s.lot_closes, s.pool.in_use),
        (1, 5, 0, 0),
        "{s:?}"
    );
    assert_eq!(
        (s.tls_handshakes, s.tls_handshake_failures),
        (T::HANDSHAKES, 0),
        "{s:?}"
    );
}

/// Pipelined requests in one write, one with a `Content-Length` body and
/// one chunked: exact responses, in order; then the connection parks, and
/// serves the next request, which closes it in order (a FIN; over TLS,
/// `close_notify`).
fn pipelined_requests_in_one_write<T: Transport>() {
    let srv = T::serve(&ladder(None), echo_service());
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
    srv.wait_for("park", |s| {
        s.parks == 1 && s.connections[Parked] == 1 && s.requests == 4
    });
    assert_eq!(srv.stats().pool.in_use, 0);
    // Nothing more arrives, and the parked connection serves the next.
    c.send(b"GET /5 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(
        c.read_to_end(),
        (
            "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 12\r\n\r\nGET /5 read="
                .to_owned(),
            End::Clean
        )
    );
    assert_eq!(srv.stats().pool.in_use, 0);
}

/// A pipelined burst long enough to spend the task's coop budget several
/// times over (tokio stops a task's I/O after 128 operations per poll) is
/// answered in order and still ends in a park. (The case where the budget
/// runs out in the very poll that arms the park timer is pinned down by a
/// unit test in `src/timeout.rs`.)
fn long_pipelined_burst_then_park<T: Transport>() {
    const N: usize = 2_000;
    let srv = T::serve(&ladder(None), echo_service());
    for round in 1..=3u64 {
        let mut c = srv.connect();
        let burst: String = (0..N).map(|i| get(&format!("/{i}"))).collect();
        c.send(burst.as_bytes());
        for i in 0..N {
            assert_eq!(c.response(), ok(&format!("GET /{i} read=")));
        }
        srv.wait_for("park after the burst", |s| s.parks == round);
    }
}

/// A full request and the first half of the next in one write; the
/// connection parks holding the half (the bytes hyper had read but not
/// parsed), then the rest arrives.
fn partial_pipelined_request_survives_a_park<T: Transport>() {
    let srv = T::serve(&ladder(None), echo_service());
    let mut c = srv.connect();
    c.send(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nContent-Le");
    assert_eq!(c.response(), ok("GET /a read="));
    srv.wait_for("park", |s| s.parks == 1 && s.connections[Parked] == 1);
    assert_eq!(srv.stats().pool.in_use, 0);
    c.send(b"ngth: 5\r\n\r\nhello");
    assert_eq!(c.response(), ok("POST /b read=hello"));
    srv.wait_for("second park", |s| s.parks == 2 && s.requests == 2);
}

/// The first request of a connection arrives in two writes, split at
/// several points; between them the connection parks in its task with the
/// first part carried and no pool buffer held.
fn first_request_split_across_a_park<T: Transport>() {
    let srv = T::serve(&ladder(None), echo_service());
    for split in [1usize, 3, 9, 17, 28] {
        srv.wait_for("the last connection closed", |s| s.connections.total() == 0);
        let before = srv.stats().parks;
        let req = b"GET /split HTTP/1.1\r\nHost: x\r\n\r\n";
        let mut c = srv.connect();
        c.send(&req[..split]);
        srv.wait_for("park with a partial head", |s| s.parks > before);
        assert_eq!(srv.stats().pool.in_use, 0);
        c.send(&req[split..]);
        assert_eq!(c.response(), ok("GET /split read="), "split at {split}");
    }
}

/// The same after a first request: the second request is split, and the
/// connection, woken from a task-less park by the first half, parks in its
/// task between the halves.
fn later_request_split_across_a_park<T: Transport>() {
    let srv = T::serve(&ladder(None), echo_service());
    let mut c = srv.connect();
    c.send(get("/first").as_bytes());
    assert_eq!(c.response(), ok("GET /first read="));
    srv.wait_for("first park", |s| s.parks == 1);
    c.send(b"POST /second HTTP/1.1\r\nHo");
    srv.wait_for("park with a partial head", |s| {
        s.parks == 2 && s.connections[Parked] == 1 && s.connections[Active] == 0
    });
    assert_eq!(srv.stats().pool.in_use, 0);
    c.send(b"st: x\r\nContent-Length: 2\r\n\r\nhi");
    assert_eq!(c.response(), ok("POST /second read=hi"));
    srv.wait_for("third park", |s| s.parks == 3 && s.wakes == 2);
}

/// Half a request wakes a DORMANT connection; the half is carried while
/// it waits PARKED in its task, which does not go dormant with it, and the
/// rest completes the request. Then the same with a request cut in its
/// request line.
fn request_split_across_the_dormant_boundary<T: Transport>() {
    let srv = T::serve(&ladder(Duration::from_millis(10)), echo_service());
    let mut c = srv.connect();
    c.send(get("/first").as_bytes());
    assert_eq!(c.response(), ok("GET /first read="));
    srv.wait_for("dormant", |s| {
        s.connections[Dormant] == 1 && s.dormancies == 1
    });

    c.send(b"POST /second HTTP/1.1\r\nContent-Le");
    srv.wait_for("woken and parked with the half", |s| {
        s.lot_wakes == 1
            && s.connections[Parked] == 1
            && s.connections[Dormant] == 0
            && s.parks == 2
    });
    assert_eq!(srv.stats().pool.in_use, 0);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(
        srv.stats().connections[Dormant],
        0,
        "a connection with carried bytes stays parked"
    );
    c.send(b"ngth: 3\r\n\r\nabc");
    assert_eq!(c.response(), ok("POST /second read=abc"));

    srv.wait_for("dormant again", |s| {
        s.connections[Dormant] == 1 && s.dormancies == 2
    });
    c.send(b"GET /thi");
    srv.wait_for("woken", |s| s.lot_wakes == 2);
    c.send(b"rd HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response(), ok("GET /third read="));
}

/// A first write that is a prefix of the HTTP/2 preface ("P", "PRI ") keeps
/// the connection waiting for more; an HTTP/1 request starting that way is
/// still served.
fn first_bytes_like_the_h2_preface_then_http1<T: Transport>() {
    let srv = T::serve(&ladder(None), echo_service());
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

/// A body split across writes while its handler reads it: the request is
/// in flight, so the connection must not park mid-body.
fn body_split_while_handler_reads_does_not_park<T: Transport>() {
    let srv = T::serve(&ladder(None), echo_service());
    let mut c = srv.connect();
    c.send(b"POST /slowbody HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01234");
    srv.wait_for("active", |s| s.connections[Active] == 1);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(srv.stats().parks, 0, "parked with a request in flight");
    c.send(b"56789");
    assert_eq!(c.response(), ok("POST /slowbody read=0123456789"));
}

/// A connection busy with back-to-back requests never parks, however long
/// it stays busy: only a pause of `park_after` with no request parks it.
fn busy_connection_does_not_park<T: Transport>() {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(200));
    let srv = T::serve(&b, echo_service());
    let mut c = srv.connect();
    let start = std::time::Instant::now();
    let mut i = 0;
    while start.elapsed() < Duration::from_millis(700) {
        c.send(get(&format!("/{i}")).as_bytes());
        assert_eq!(c.response(), ok(&format!("GET /{i} read=")));
        i += 1;
    }
    assert_eq!(srv.stats().parks, 0, "{i} back-to-back requests");
    srv.wait_for("park after the pause", |s| s.parks == 1);
}

/// How long a client pauses between the pieces of a request: many times
/// the `park_after` and `dormant_after` of [`in_pieces`]'s server.
const PAUSE: Duration = Duration::from_millis(40);

/// A builder whose servers park after 1 ms and go dormant after 2 ms:
/// every pause of a client is a sleep.
fn in_pieces() -> dormant::Builder {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(1))
        .dormant_after(Duration::from_millis(2));
    b
}

/// Sends `bytes` to `c` in pieces, cut at `cuts`, with a pause after each
/// piece in which the workers of `srv` stay idle; during the first pause,
/// another client (kept in `others`) is served.
fn send_in_pieces<A: Endpoint>(
    srv: &Serve<A>,
    c: &mut Client<A::Stream>,
    bytes: &[u8],
    cuts: &[usize],
    others: &mut Vec<Client<A::Stream>>,
) {
    let mut start = 0;
    for (i, &cut) in cuts.iter().enumerate() {
        c.send(&bytes[start..cut]);
        start = cut;
        srv.pause_idle(PAUSE, &format!("after the piece that ends at {cut}"));
        if i == 0 {
            let mut other = srv.connect();
            other.send(get("/other").as_bytes());
            assert_eq!(other.response(), ok("GET /other read="), "another client");
            others.push(other);
        }
    }
    c.send(&bytes[start..]);
}

/// A server with one worker, and requests sent in pieces with a pause
/// after each: a new connection's first request (it waits in its task,
/// holding its head), a later request of a connection gone DORMANT (each
/// piece wakes it, and it parks holding the head), and a request whose
/// first byte came with the one before (hyper's read-ahead, carried
/// across the park); each cut in its request line, its headers and its
/// body. While a request waits for its rest, the worker stays idle and
/// serves another client.
fn a_request_in_pieces_does_not_stop_another_connection<T: Transport>() {
    let srv = T::serve_with_workers(&in_pieces(), echo_service(), 1);
    let post = b"POST /pieces HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
    let cuts = [1, 2, 9, 25, 30, 55];
    let want = ok("POST /pieces read=hello");
    let mut others = Vec::new();

    let mut first = srv.connect();
    send_in_pieces(&srv, &mut first, post, &cuts, &mut others);
    assert_eq!(first.response(), want, "the first request");

    let mut later = srv.connect();
    later.send(get("/first").as_bytes());
    assert_eq!(later.response(), ok("GET /first read="));
    srv.wait_for("all three dormant", |s| {
        s.connections[Dormant] == 3 && s.connections[Active] == 0
    });
    send_in_pieces(&srv, &mut later, post, &cuts, &mut others);
    assert_eq!(later.response(), want, "a later request");

    let pipelined = [get("/read-ahead").as_bytes(), post].concat();
    let head = get("/read-ahead").len();
    let cuts = cuts.map(|cut| head + cut);
    send_in_pieces(&srv, &mut later, &pipelined, &cuts, &mut others);
    assert_eq!(later.response(), ok("GET /read-ahead read="));
    assert_eq!(later.response(), want, "a request read ahead");
    srv.pause_idle(PAUSE, "every request answered");
}
