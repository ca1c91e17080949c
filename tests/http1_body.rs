//! Request bodies on a connection that parks: read or ignored by the
//! handler, content-length or chunked, arriving late — the body bytes are
//! never parsed as a request (invariant I3, the request-smuggling guard).
//! Each exchange also runs against plain hyper and must match it.

use crate::common::client::{Client, ok};
use crate::common::hyper::{PlainHyper, serve_plain_hyper};
use crate::common::servers::Serve;
use crate::common::services::echo;
use crate::common::tcp::{fast_park, serve_with};

use std::convert::Infallible;
use std::time::Duration;

use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;

/// `/ignore…` answers `hello` without touching the body; anything else
/// echoes.
async fn route<B>(req: Request<B>) -> Result<Response<Full<Bytes>>, Infallible>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::fmt::Display,
{
    if req.uri().path().starts_with("/background") {
        // Answers at once and reads the body in a task, after the response.
        tokio::spawn(async move {
            let _ = http_body_util::BodyExt::collect(req.into_body()).await;
        });
        return Ok(Response::new(Full::new(Bytes::from_static(b"accepted"))));
    }
    if req.uri().path().starts_with("/ignore") {
        Ok(Response::new(Full::new(Bytes::from_static(b"hello"))))
    } else {
        echo(req).await
    }
}

/// A body that would be a request of its own if it were ever parsed as one.
const SMUGGLED: &str = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";

/// What a run talks to: the dormant server (whose pauses wait for a park
/// when one is possible) or plain hyper.
enum Target<'a> {
    Dormant(&'a Serve),
    Hyper(&'a PlainHyper),
}

impl Target<'_> {
    fn connect(&self) -> Client {
        match self {
            Target::Dormant(s) => s.connect(),
            Target::Hyper(h) => h.connect(),
        }
    }

    /// A pause longer than `park_after`; on dormant, waits for `parks` to
    /// reach `parks` when given.
    fn pause(&self, parks: Option<u64>) {
        match (self, parks) {
            (Target::Dormant(s), Some(n)) => s.wait_for("park", |st| st.parks >= n),
            _ => std::thread::sleep(Duration::from_millis(30)),
        }
    }
}

/// Runs `script` on dormant and plain hyper; asserts both give `want`.
fn check(script: impl Fn(&Target<'_>) -> String, want: &str) {
    let srv = serve_with(&fast_park(), service_fn(route::<dormant::Body>));
    let plain = serve_plain_hyper(route::<hyper::body::Incoming>);
    let got_hyper = script(&Target::Hyper(&plain));
    assert_eq!(got_hyper, want, "plain hyper differs from the expectation");
    let got = script(&Target::Dormant(&srv));
    assert_eq!(got, want, "dormant differs from plain hyper");
    assert!(!got.contains("GET /smuggled read="), "smuggled: {got:?}");
}

fn ok_close(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

const NEXT: &[u8] = b"GET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

fn cl_post(path: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{SMUGGLED}",
        SMUGGLED.len()
    )
}

fn chunked_post(path: &str) -> String {
    let (a, b) = SMUGGLED.split_at(10);
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
         {:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
        a.len(),
        b.len()
    )
}

/// A POST to `path` with a body (chunked, or with a `content-length`),
/// cut where its head ends: (head, body).
fn post_in_two(path: &str, chunked: bool) -> (String, String) {
    let req = if chunked {
        chunked_post(path)
    } else {
        cl_post(path)
    };
    let head_end = req.find("\r\n\r\n").unwrap() + 4;
    let (head, body) = req.split_at(head_end);
    (head.to_owned(), body.to_owned())
}

/// Sends `writes` on one connection, each in a write of its own, and
/// reads to its close: the responses must be `want`.
fn written(writes: &[&[u8]], want: &str) {
    check(
        |t| {
            let mut c = t.connect();
            for bytes in writes {
                c.send(bytes);
            }
            c.read_to_close()
        },
        want,
    );
}

#[test]
fn content_length_body_read_then_next_request() {
    written(
        &[cl_post("/echo").as_bytes(), NEXT],
        &(ok(&format!("POST /echo read={SMUGGLED}")) + &ok_close("GET /next read=")),
    );
}

#[test]
fn content_length_body_ignored_then_next_request() {
    written(
        &[&[cl_post("/ignore").as_bytes(), NEXT].concat()],
        &(ok("hello") + &ok_close("GET /next read=")),
    );
}

#[test]
fn chunked_body_read_then_next_request() {
    written(
        &[chunked_post("/echo").as_bytes(), NEXT],
        &(ok(&format!("POST /echo read={SMUGGLED}")) + &ok_close("GET /next read=")),
    );
}

/// The handler answers at once and reads the body later, in a task; the
/// body's tail arrives after a pause longer than `park_after`. hyper keeps
/// reading the body for the task: the connection is mid-message and must
/// not park, or the body's tail is parsed as a request. The tail here is a
/// complete request, so parking mid-body serves `/smuggled`.
#[test]
fn body_read_after_the_response_arriving_late() {
    for chunked in [true, false] {
        let body = format!("12345{SMUGGLED}");
        let req = if chunked {
            format!(
                "POST /background HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
                 {:x}\r\n{body}\r\n0\r\n\r\n",
                body.len()
            )
        } else {
            format!(
                "POST /background HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
        };
        // Cut right before the embedded request.
        let split = req.find(SMUGGLED).unwrap();
        let (first, rest) = req.split_at(split);
        check(
            |t| {
                let mut c = t.connect();
                c.send(first.as_bytes());
                let out = c.response();
                t.pause(None);
                c.send(rest.as_bytes());
                c.send(NEXT);
                out + &c.read_to_close()
            },
            &(ok("accepted") + &ok_close("GET /next read=")),
        );
    }
}

/// hyper drains an ignored body with one read of the body decoder; a body of
/// two chunks is not drained by it, so hyper closes after the response.
#[test]
fn chunked_body_ignored_then_next_request() {
    written(
        &[&[chunked_post("/ignore").as_bytes(), NEXT].concat()],
        &ok("hello"),
    );
}

/// The ignored body is sent after a pause longer than `park_after`. hyper
/// answers, finds the body incomplete and closes; the body must not be
/// served as a request.
#[test]
fn ignored_body_arriving_late_is_never_a_request() {
    for chunked in [false, true] {
        let (head, body) = post_in_two("/ignore", chunked);
        check(
            |t| {
                let mut c = t.connect();
                c.send(head.as_bytes());
                let first = c.response();
                t.pause(None);
                // The server may have closed already: a failed write is fine.
                let _ = std::io::Write::write_all(&mut c.stream, body.as_bytes());
                let _ = std::io::Write::write_all(&mut c.stream, NEXT);
                first + &c.read_to_close()
            },
            &ok("hello"),
        );
    }
}

/// The read body arrives after a pause longer than `park_after`: the
/// request is in flight, the connection must not park mid-body.
#[test]
fn read_body_arriving_late_then_next_request() {
    for chunked in [false, true] {
        let (head, body) = post_in_two("/echo", chunked);
        check(
            |t| {
                let mut c = t.connect();
                c.send(head.as_bytes());
                t.pause(None);
                c.send(body.as_bytes());
                t.pause(None);
                c.send(NEXT);
                c.read_to_close()
            },
            &(ok(&format!("POST /echo read={SMUGGLED}")) + &ok_close("GET /next read=")),
        );
    }
}

/// After a parked first request, an ignored body in the same write as its
/// head, a park, then the next request.
#[test]
fn ignored_body_then_park_then_next_request() {
    check(
        |t| {
            let mut c = t.connect();
            c.send(b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n");
            let mut out = c.response();
            t.pause(Some(1));
            c.send(cl_post("/ignore").as_bytes());
            out += &c.response();
            // hyper drained the body; only the next request proves it, so
            // dormant may or may not park here.
            t.pause(None);
            c.send(NEXT);
            out + &c.read_to_close()
        },
        &(ok("GET /first read=") + &ok("hello") + &ok_close("GET /next read=")),
    );
}

#[test]
fn expect_continue_with_a_reading_handler() {
    let srv = serve_with(&fast_park(), service_fn(route::<dormant::Body>));
    let mut c = srv.connect();
    c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n");
    assert_eq!(c.response(), "HTTP/1.1 100 Continue\r\n\r\n");
    // Longer than park_after: the request is in flight, no park.
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(srv.stats().parks, 0);
    c.send(b"body");
    assert_eq!(c.response(), ok("POST /echo read=body"));
    srv.wait_for("park", |s| s.parks == 1);
    // Again after the park.
    c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n");
    assert_eq!(c.response(), "HTTP/1.1 100 Continue\r\n\r\n");
    c.send(b"ok");
    assert_eq!(c.response(), ok("POST /echo read=ok"));
}
