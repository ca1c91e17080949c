//! Differential test: one stream of pipelined requests, cut into two or
//! three writes at every split point (and seeded random 3-way splits), sent
//! to dormant (which may park between the writes) and to plain hyper; the
//! bytes that come back must be identical (invariant I2).

mod common;
use common::*;

use std::convert::Infallible;
use std::time::Duration;

use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;

/// Describes the request: method, path and query, body and trailers.
async fn describe<B>(req: Request<B>) -> Result<Response<Full<Bytes>>, Infallible>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    let line = format!("{} {}", req.method(), req.uri());
    let text = match req.into_body().collect().await {
        Ok(c) => {
            let trailers = c.trailers().map(|t| format!("{t:?}")).unwrap_or_default();
            let body = c.to_bytes();
            format!(
                "{line} body={} trailers={trailers}",
                String::from_utf8_lossy(&body)
            )
        }
        Err(e) => format!("{line} error={e}"),
    };
    Ok(Response::new(Full::new(Bytes::from(text))))
}

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

/// Sends `STREAM` cut at `cuts` (ascending), pausing between writes, and
/// reads until the server closes.
fn run(mut c: Client, cuts: &[usize]) -> String {
    let mut start = 0;
    for &cut in cuts.iter().chain([STREAM.len()].iter()) {
        if start > 0 {
            std::thread::sleep(PAUSE);
        }
        c.send(&STREAM[start..cut]);
        start = cut;
    }
    c.read_to_close()
}

/// A tiny xorshift64 (no rand crate).
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn split_pipelines_match_plain_hyper() {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(1));
    let srv = serve_with(&b, service_fn(describe::<dormant::Body>));
    let plain = serve_plain_hyper(describe::<hyper::body::Incoming>);

    // The reference: plain hyper, one write.
    let want = run(plain.connect(), &[]);
    assert_eq!(want.matches("HTTP/1.1 200 OK").count(), 6, "{want}");
    assert!(want.contains("HTTP/1.1 100 Continue\r\n\r\n"), "{want}");
    assert!(want.contains("body=hello world trailers="), "{want}");
    assert_eq!(run(srv.connect(), &[]), want, "dormant, one write");

    let mut cases: Vec<Vec<usize>> = (1..STREAM.len()).map(|i| vec![i]).collect();
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    for _ in 0..1000 {
        let a = 1 + rng.below(STREAM.len() - 2);
        let b = a + 1 + rng.below(STREAM.len() - a - 1);
        cases.push(vec![a, b]);
    }

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
    let s = srv.stats();
    println!(
        "{} split cases ({} two-way, {} three-way); dormant parked {} times",
        cases.len(),
        STREAM.len() - 1,
        cases.len() - (STREAM.len() - 1),
        s.parks
    );
    assert!(s.parks > 0, "no case parked: {s:?}");
}
