//! HTTP/1 semantics hyper provides stay intact under dormant: HEAD,
//! HTTP/1.0 keep-alive rules, `Connection: close`, malformed and oversized
//! requests — also when the connection parked before the request.

use crate::common::client::Client;
use crate::common::servers::Serve;
use crate::common::services::echo_service;
use crate::common::tcp::{fast_park, serve_with};
use dormant::Rung::{Active, Parked};

fn ok(body: &str) -> String {
    resp("HTTP/1.1 200 OK", "", body)
}

/// A response with `headers` (each ending in CRLF) before content-length.
fn resp(status_line: &str, headers: &str, body: &str) -> String {
    format!(
        "{status_line}\r\n{headers}content-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Parks the connection after one request, so the next one is served by a
/// freshly built hyper connection.
fn parked_client(srv: &Serve) -> Client {
    let before = srv.stats().parks;
    let mut c = srv.connect();
    c.send(b"GET /warmup HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response(), ok("GET /warmup read="));
    srv.wait_for("park", |s| s.parks > before);
    c
}

#[test]
fn head_has_no_body_but_keeps_the_length() {
    let srv = serve_with(&fast_park(), echo_service());
    let mut c = parked_client(&srv);
    c.send(b"HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n");
    // The length of the body a GET would get: "HEAD /h read=".
    assert_eq!(
        c.response_head(),
        "HTTP/1.1 200 OK\r\ncontent-length: 13\r\n\r\n"
    );
    // No body bytes follow: the next response starts right away.
    c.send(b"GET /after HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(
        c.read_to_close(),
        resp(
            "HTTP/1.1 200 OK",
            "connection: close\r\n",
            "GET /after read="
        )
    );
}

#[test]
fn http10_without_keep_alive_closes() {
    let srv = serve_with(&fast_park(), echo_service());
    let mut c = srv.connect();
    c.send(b"GET /old HTTP/1.0\r\n\r\n");
    assert_eq!(
        c.read_to_close(),
        resp("HTTP/1.0 200 OK", "", "GET /old read=")
    );
    srv.wait_for("closed", |s| {
        s.connections[Active] == 0 && s.connections[Parked] == 0
    });
}

#[test]
fn http10_with_keep_alive_stays_open() {
    let srv = serve_with(&fast_park(), echo_service());
    let mut c = srv.connect();
    c.send(b"GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert_eq!(
        c.response(),
        resp(
            "HTTP/1.0 200 OK",
            "connection: keep-alive\r\n",
            "GET /a read="
        )
    );
    srv.wait_for("park", |s| s.parks == 1 && s.connections[Parked] == 1);
    c.send(b"GET /b HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert_eq!(
        c.response(),
        resp(
            "HTTP/1.0 200 OK",
            "connection: keep-alive\r\n",
            "GET /b read="
        )
    );
    c.send(b"GET /c HTTP/1.0\r\n\r\n");
    assert_eq!(
        c.read_to_close(),
        resp("HTTP/1.0 200 OK", "", "GET /c read=")
    );
}

#[test]
fn connection_close_closes_after_the_response() {
    let srv = serve_with(&fast_park(), echo_service());
    for mut c in [srv.connect(), parked_client(&srv)] {
        c.send(b"GET /bye HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert_eq!(
            c.read_to_close(),
            resp("HTTP/1.1 200 OK", "connection: close\r\n", "GET /bye read=")
        );
    }
    srv.wait_for("closed", |s| {
        s.connections[Active] == 0 && s.connections[Parked] == 0
    });
}

#[test]
fn keep_alive_off_closes_after_each_response() {
    let mut b = fast_park();
    b.keep_alive(false);
    let srv = serve_with(&b, echo_service());
    let mut c = srv.connect();
    c.send(b"GET /k HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(
        c.read_to_close(),
        resp("HTTP/1.1 200 OK", "connection: close\r\n", "GET /k read=")
    );
}

#[test]
fn malformed_request_gets_400_and_close() {
    let srv = serve_with(&fast_park(), echo_service());
    let mut other = parked_client(&srv);
    for mut c in [srv.connect(), parked_client(&srv)] {
        c.send(b"GARBAGE\r\n\r\n");
        assert_eq!(
            c.read_to_close(),
            "HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
        );
    }
    // Other connections keep working.
    other.send(b"GET /still HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(other.response(), ok("GET /still read="));
    let mut fresh = srv.connect();
    fresh.send(b"GET /fresh HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(fresh.response(), ok("GET /fresh read="));
}

#[test]
fn oversized_head_gets_431_and_close() {
    let mut b = fast_park();
    b.max_header_bytes(8192);
    let srv = serve_with(&b, echo_service());
    let big = format!(
        "GET /big HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(20 * 1024)
    );
    for mut c in [srv.connect(), parked_client(&srv)] {
        c.send(big.as_bytes());
        assert_eq!(
            c.read_to_close(),
            "HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
        );
    }
    // A head just under the limit is fine.
    let mut c = srv.connect();
    let fits = format!(
        "GET /fits HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(6000)
    );
    c.send(fits.as_bytes());
    assert_eq!(c.response(), ok("GET /fits read="));
}

#[test]
fn too_many_headers_gets_431() {
    let mut b = fast_park();
    b.max_headers(4);
    let srv = serve_with(&b, echo_service());
    let mut c = srv.connect();
    c.send(b"GET /many HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n\r\n");
    assert_eq!(
        c.read_to_close(),
        "HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
    );
}

/// The head limit holds across parks: a head sent in pieces, with the
/// connection parked (carrying the partial head) between them, is still
/// refused once it outgrows `max_header_bytes`.
#[test]
fn oversized_head_in_pieces_across_parks_gets_431() {
    let mut b = fast_park();
    b.max_header_bytes(8192);
    let srv = serve_with(&b, echo_service());
    let big = format!(
        "GET /big HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(20 * 1024)
    );
    let mut c = srv.connect();
    let mut sent = 0;
    // Pieces well under the limit, each followed by a park, until the
    // server has seen more than the limit.
    for piece in big.as_bytes().chunks(2000).take(6) {
        let parks = srv.stats().parks;
        c.send(piece);
        sent += piece.len();
        if sent < 8192 {
            srv.wait_for("park with a partial head", |s| s.parks > parks);
        }
    }
    assert_eq!(
        c.read_to_close(),
        "HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
    );
}
