//! Differential test over every transport: one stream of pipelined
//! requests, cut into two or three writes at every split point (and seeded
//! random 3-way splits), sent to dormant (which may park between the
//! writes) and to plain hyper over the same transport (hyper-util's TCP;
//! hyper over a Unix socket; hyper over tokio-rustls, each part of the
//! plaintext a TLS record of its own in its own TCP write); the bytes that
//! come back (`date` removed) and the way each server ends the connection
//! must be identical (invariant I2).

use std::time::Duration;

use crate::common::client::{Client, End, Stream};
use crate::common::hyper::Protocol;
use crate::common::reference::Reference;
use crate::common::servers::Serve;
use crate::common::services::describe;
use crate::common::transport::over_every_transport;
use crate::common::xorshift::XorShift;
use hyper::service::service_fn;

over_every_transport!(
    split_pipelines_match_plain_hyper,
    split_pipelines_match_plain_hyper_on_one_worker,
);

/// Content-Length and chunked bodies (with an extension and a trailer),
/// HEAD, `Expect: 100-continue`, and a last request that closes.
const STREAM: &[u8] = b"POST /p1 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\
GET /g1?q=1 HTTP/1.1\r\nHost: x\r\n\r\n\
POST /c1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n\
HEAD /h1 HTTP/1.1\r\nHost: x\r\n\r\n\
POST /e1 HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\nbody\
GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

/// Pause between writes: long enough for dormant (park_after 1 ms) to
/// park when hyper is between messages. Equality is the assertion; the
/// pause only makes parking possible.
const PAUSE: Duration = Duration::from_millis(10);

/// How many cases run at once.
const CONCURRENCY: usize = 16;

/// Every two-way split of [`STREAM`], then 1,000 seeded three-way splits:
/// the cut points of each case, ascending.
fn split_cases() -> Vec<Vec<usize>> {
    let mut cases: Vec<Vec<usize>> = (1..STREAM.len()).map(|i| vec![i]).collect();
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    for _ in 0..1000 {
        let a = 1 + rng.below(STREAM.len() - 2);
        let b = a + 1 + rng.below(STREAM.len() - a - 1);
        cases.push(vec![a, b]);
    }
    cases
}

/// Sends `STREAM` cut at `cuts` (ascending), pausing between writes, and
/// reads until the server ends the connection: what came back (`date`
/// removed) and how it ended.
fn run<S: Stream>(mut c: Client<S>, cuts: &[usize]) -> (String, End) {
    let mut start = 0;
    for &cut in cuts.iter().chain([STREAM.len()].iter()) {
        if start > 0 {
            std::thread::sleep(PAUSE);
        }
        c.send(&STREAM[start..cut]);
        start = cut;
    }
    c.read_to_end()
}

/// dormant parks after 1 ms.
fn park_quickly() -> dormant::Builder {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(1));
    b
}

fn split_pipelines_match_plain_hyper<T: Reference>() {
    let srv = T::serve(&park_quickly(), service_fn(describe::<dormant::Body>));
    split_pipelines_match_plain_hyper_on::<T>(srv, 2);
}

/// On one worker a woken connection is first polled in the lot's task.
fn split_pipelines_match_plain_hyper_on_one_worker<T: Reference>() {
    let srv = T::serve_with_workers(&park_quickly(), service_fn(describe::<dormant::Body>), 1);
    split_pipelines_match_plain_hyper_on::<T>(srv, 1);
}

/// The differential against `srv`, a server of `workers` worker threads.
fn split_pipelines_match_plain_hyper_on<T: Reference>(srv: Serve<T::Addr>, workers: usize) {
    let plain = T::serve_reference(Protocol::Http1, describe::<hyper::body::Incoming>);

    // The reference: plain hyper, one write.
    let want = run(plain.connect(), &[]);
    assert_eq!(want.0.matches("HTTP/1.1 200 OK").count(), 6, "{want:?}");
    assert!(want.0.contains("HTTP/1.1 100 Continue\r\n\r\n"), "{want:?}");
    assert!(want.0.contains("body=hello world trailers="), "{want:?}");
    assert_eq!(want.1, End::Clean, "{want:?}");
    assert_eq!(run(srv.connect(), &[]), want, "dormant, one write");

    let cases = split_cases();

    for batch in cases.chunks(CONCURRENCY) {
        std::thread::scope(|s| {
            for cuts in batch {
                let (srv, plain, want) = (&srv, &plain, &want);
                s.spawn(move || {
                    let hyper_out = run(plain.connect(), cuts);
                    let dormant_out = run(srv.connect(), cuts);
                    assert_eq!(hyper_out, *want, "plain hyper, cuts {cuts:?}");
                    assert_eq!(dormant_out, *want, "dormant, cuts {cuts:?}");
                });
            }
        });
    }
    srv.wait_for("every connection released", |s| s.connections.total() == 0);
    let s = srv.stats();
    println!(
        "{} split cases ({} two-way, {} three-way); dormant on {workers} workers parked {} times",
        cases.len(),
        STREAM.len() - 1,
        cases.len() - (STREAM.len() - 1),
        s.parks
    );
    assert!(s.parks > 0, "no case parked: {s:?}");
    assert_eq!(
        (s.tls_handshakes, s.tls_handshake_failures),
        (T::HANDSHAKES * (cases.len() as u64 + 1), 0),
        "{s:?}"
    );
}
